//! A traced guest on emu-device's NVMe controller, driven step by step:
//! the conformance scenarios' counterpart of `session::Session` for the
//! nvme device. The guest loads the stock nvme-core, the patch series'
//! nvme.ko, nvme-hmb-trace.ko (its `hmb_nvme_glue`), and then runs a
//! scenario body that uses the shell functions of harness/guest-scripts/
//! ivshmem-prelude.sh (start_daemon, stop_daemon, collect, mark, wait_file),
//! nvme-lib.sh and nvme-session.sh (load_nvme, io_start, io_stop, wait_live). The host meets it at files
//! in the share and drives the controller over its control socket.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use hmb_emu_device::control::{Fault, Request};
use hmb_nvme_trace::Journal;
use serde_json::Value;

use crate::guest::{Guest, GuestDevice};
use crate::guest_script::{self, files};
use crate::journal_truth;
use crate::nvme_guest::{self, ControllerOptions, NvmeDevice, NvmeRunConfig, NvmeTools};
use crate::qemu::Accel;

/// Namespace offset (in 4 KiB blocks) and size of the I/O loop's pattern:
/// not LBA 0, and small enough that a round is a few commands.
pub(crate) const IO_BLOCK: u64 = 2048;
pub(crate) const IO_BLOCKS: u64 = 16;

/// What the guest body may ask for beyond the defaults.
#[derive(Debug, Clone, Default)]
pub struct NvmeGuestOptions {
    /// nvme_core's `io_timeout` in seconds: the driver looks at CSTS only
    /// when a command times out, so a device-side failure needs a short one.
    pub io_timeout: Option<u32>,
    /// The controller's personality and producer (default: the tracing
    /// controller with the Rust producer).
    pub controller: ControllerOptions,
}

/// A guest on emu-device's NVMe controller.
pub type NvmeSession = Guest<NvmeDevice>;

impl Guest<NvmeDevice> {
    /// Start the controller and the guest (the boot retried once if it
    /// hangs before init, as `nvme_guest` does), running the nvme prelude
    /// and then `body`.
    pub fn start(tools: &NvmeTools, run_dir: &Path, body: &str, opts: &NvmeGuestOptions) -> Result<NvmeSession> {
        let trace = tools
            .trace
            .as_ref()
            .context("an nvme session needs tools prepared with the trace (the series' nvme.ko)")?;
        let _ = std::fs::remove_dir_all(run_dir);
        std::fs::create_dir_all(run_dir)?;
        let share = run_dir.join("share");
        std::fs::create_dir_all(&share)?;
        let mods = nvme_guest::stage_modules(tools, &share, true)?;
        let script = script(&trace.trace_module, &mods, opts, body);
        std::fs::write(share.join(files::SCRIPT), script)?;
        let cfg = NvmeRunConfig {
            run_dir: run_dir.to_path_buf(),
            accel: Accel::Tcg,
            iops_reads: 0,
            timeout: Duration::from_secs(120),
            trace: true,
            inject_fatal: false,
            controller: opts.controller,
            viommu: false,
            // Only `start` reads the config: the session's body is its checks.
            checks: Default::default(),
        };
        nvme_guest::start(tools, &cfg, &share)
    }

    pub fn inject(&mut self, fault: Fault) -> Result<Value> {
        self.dev.request(&Request::Inject(fault))
    }

    /// The controller's status (transport, controller, trace producer).
    pub fn status(&mut self) -> Result<Value> {
        self.dev.status()
    }

    /// The controller's journal, saved as ground-truth.json. Take it while
    /// the controller runs: power-off resets it and ends the epoch.
    pub fn journal(&mut self) -> Result<Journal> {
        let answer = self.dev.request(&Request::GroundTruth)?;
        std::fs::write(
            self.run_dir.join(nvme_guest::files::GROUND_TRUTH),
            serde_json::to_string_pretty(&answer)?,
        )?;
        journal_truth::journal_from_ground_truth(&answer)
    }

    /// KEY=VALUE notes of the guest (`note`), after `finish`.
    pub fn notes(&self) -> std::collections::BTreeMap<String, String> {
        nvme_guest::parse_results(
            &std::fs::read_to_string(self.run_dir.join(nvme_guest::files::RESULTS)).unwrap_or_default(),
        )
    }
}

/// The guest script: the ivshmem prelude's functions (the module, the
/// daemon, the share), the NVMe ones (nvme-lib.sh, nvme-session.sh), then
/// `body`. `mods` are the stock modules nvme.ko needs, in load order.
pub(crate) fn script(trace_module: &str, mods: &[String], opts: &NvmeGuestOptions, body: &str) -> String {
    let script = guest_script::prelude(trace_module)
        .set("RESULTS", nvme_guest::files::RESULTS)
        .set("MODS", mods.join(" "))
        .set(
            "NVME_CORE_PARAMS",
            opts.io_timeout.map(|t| format!("io_timeout={t}")).unwrap_or_default(),
        )
        .set("IO_BLOCK", IO_BLOCK)
        .set("IO_BLOCKS", IO_BLOCKS);
    NvmeDevice::prelude(script)
        .file(&guest_script::NVME_SESSION)
        .body(body)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_shortens_only_nvme_cores_timeout_and_runs_the_body_last() {
        let mods = ["nvme_common.ko".to_string(), "nvme_core.ko".to_string()];
        let opts = NvmeGuestOptions {
            io_timeout: Some(3),
            ..Default::default()
        };
        let s = script("/lib/m.ko", &mods, &opts, "load_nvme\n");
        assert!(s.contains("MODS='nvme_common.ko nvme_core.ko'\n"));
        assert!(s.contains("NVME_CORE_PARAMS='io_timeout=3'\n"));
        assert!(s.contains("IO_BLOCK='2048'\n"));
        assert!(s.find("load_nvme() {").unwrap() < s.rfind("load_nvme\n").unwrap());
        let plain = script("/lib/m.ko", &mods, &NvmeGuestOptions::default(), "");
        assert!(plain.contains("NVME_CORE_PARAMS=''\n"));
    }
}
