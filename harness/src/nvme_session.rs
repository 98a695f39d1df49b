//! A traced guest on emu-device's NVMe controller, driven step by step:
//! the conformance scenarios' counterpart of `session::Session` for the
//! nvme device. The guest loads the stock nvme-core, the patch series'
//! nvme.ko, nvme-hmb-trace.ko (its `hmb_nvme_glue`), and then runs a
//! scenario body that uses the shell functions of `guest_script::prelude`
//! (start_daemon, stop_daemon, collect, mark, wait_file) plus the ones here
//! (load_nvme, io_start, io_stop, wait_live). The host meets it at files
//! in the share and drives the controller over its control socket.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hmb_emu_device::control::{Fault, Request};
use hmb_emu_device::report::Journal;
use serde_json::Value;

use crate::guest_script::{self, files};
use crate::journal_truth;
use crate::nvme_guest::{self, ControllerOptions, NvmeDevice, NvmeRunConfig, NvmeTools};
use crate::qemu::{console, Accel, Vm};

/// Namespace offset (in 4 KiB blocks) and size of the I/O loop's pattern:
/// not LBA 0, and small enough that a round is a few commands.
pub const IO_BLOCK: u64 = 2048;
pub const IO_BLOCKS: u64 = 16;

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

pub struct NvmeSession {
    pub run_dir: PathBuf,
    pub share: PathBuf,
    pub dev: NvmeDevice,
    pub vm: Vm,
}

impl NvmeSession {
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
        let script = guest_script::prelude(&trace.trace_module) + &prelude(&mods, opts) + body;
        std::fs::write(share.join(files::SCRIPT), script)?;
        let cfg = NvmeRunConfig {
            run_dir: run_dir.to_path_buf(),
            accel: Accel::Tcg,
            iops_reads: 0,
            timeout: Duration::from_secs(120),
            trace: true,
            inject_fatal: false,
            controller: opts.controller,
        };
        let (dev, vm) = nvme_guest::start(tools, &cfg, &share)?;
        Ok(NvmeSession {
            run_dir: run_dir.to_path_buf(),
            share,
            dev,
            vm,
        })
    }

    pub fn share_file(&self, name: &str) -> PathBuf {
        self.share.join(name)
    }

    /// Create `name` in the share: a signal to the guest script.
    pub fn signal(&self, name: &str) -> Result<()> {
        std::fs::write(self.share_file(name), b"").with_context(|| format!("signalling {name}"))
    }

    /// Wait until the guest creates `name`, watching the controller process
    /// and the console (a fault, or the script ending first, is an error).
    pub fn wait_share_file(&mut self, name: &str, timeout: Duration) -> Result<()> {
        let dev = &mut self.dev;
        crate::share_wait::wait_share_file(&mut self.vm, &self.share, name, timeout, || dev.check_alive())
    }

    /// Let the guest run for `secs`, keeping an eye on the controller.
    pub fn run_for(&mut self, secs: f64) -> Result<()> {
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            self.dev.check_alive()?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
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

    pub fn qmp(&self) -> Result<hmb_qmp::Qmp> {
        Ok(hmb_qmp::Qmp::connect(&self.vm.qmp_socket, Duration::from_secs(5))?)
    }

    /// Wait for the script's result and QEMU's exit, stop the controller,
    /// and move the guest's files into the run folder. The script's exit code.
    pub fn finish(&mut self, timeout: Duration) -> Result<i32> {
        let line = self
            .vm
            .wait_for("HMBT-RESULT", timeout, |l| console::parse_result(l).is_some())?;
        self.vm.wait_exit(Duration::from_secs(30))?;
        self.dev.shutdown();
        for name in [
            files::TRACE,
            files::DAEMON_STDERR,
            files::DMESG,
            files::SYSFS,
            files::DAEMON_RC,
            nvme_guest::files::RESULTS,
        ] {
            let from = self.share.join(name);
            if from.exists() {
                std::fs::rename(&from, self.run_dir.join(name))?;
            }
        }
        Ok(console::parse_result(&line).unwrap_or(-1))
    }

    /// Exit codes of every daemon run of the script, in order.
    pub fn daemon_exit_codes(&self) -> Vec<i32> {
        std::fs::read_to_string(self.run_dir.join(files::DAEMON_RC))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// KEY=VALUE notes of the guest (`note`), after `finish`.
    pub fn notes(&self) -> std::collections::BTreeMap<String, String> {
        nvme_guest::parse_results(
            &std::fs::read_to_string(self.run_dir.join(nvme_guest::files::RESULTS)).unwrap_or_default(),
        )
    }
}

/// The nvme part of the guest script: after `guest_script::prelude`.
/// `mods` are the stock modules nvme.ko needs, in load order.
pub fn prelude(mods: &[String], opts: &NvmeGuestOptions) -> String {
    let insmods: String = mods
        .iter()
        .map(|m| {
            let name = m.trim_end_matches(".ko");
            let params = match (opts.io_timeout, name) {
                (Some(t), "nvme_core") => format!(" io_timeout={t}"),
                _ => String::new(),
            };
            format!("    [ -d /sys/module/{name} ] || insmod $share/mods/{m}{params} || fail insmod {m}\n")
        })
        .collect();
    format!(
        r#"
# ---- nvme (harness/src/nvme_session.rs) ----
note() {{ echo "$1=$2" >> $share/{results}; echo "HMBT-NOTE $1=$2"; }}
wait_live() {{
    i=0
    while [ "$(cat /sys/class/nvme/nvme0/state 2>/dev/null)" != live ]; do
        i=$((i + 1)); [ $i -lt 600 ] || fail "nvme0 not live after 60 s ($(cat /sys/class/nvme/nvme0/state 2>&1))"
        sleep 0.1
    done
}}
# load_nvme: the stock nvme-core, the series' nvme.ko, the namespace.
load_nvme() {{
    step load_nvme
{insmods}    insmod $share/mods/nvme.ko || fail "insmod nvme.ko (the series' driver)"
    i=0
    while [ ! -b /dev/nvme0n1 ]; do
        i=$((i + 1)); [ $i -lt 1200 ] || fail "no /dev/nvme0n1 after 120 s"
        sleep 0.05
    done
    wait_live
    [ -e /sys/module/nvme/parameters/hmb_trace_kb ] || fail "nvme.ko is not the series' (no hmb_trace_kb)"
}}
# io_start: write and read back a pattern in a loop, in the background,
# until io_stop; each round is a few NVMe commands on the I/O queues.
io_start() {{
    step io_start
    dd if=/dev/urandom of=/tmp/pattern bs=4096 count={blocks} 2>/dev/null || fail pattern
    rm -f /tmp/io-stop /tmp/io-bad /tmp/io-rounds
    (
        n=0
        while [ ! -e /tmp/io-stop ]; do
            dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 seek={block} oflag=direct 2>/dev/null || echo "write $n" >> /tmp/io-bad
            dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip={block} count={blocks} iflag=direct 2>/dev/null || echo "read $n" >> /tmp/io-bad
            cmp -s /tmp/pattern /tmp/back || echo "differs $n" >> /tmp/io-bad
            n=$((n + 1)); echo $n > /tmp/io-rounds
        done
    ) &
    io=$!
}}
# io_stop: end the loop; note its rounds and failed ones.
io_stop() {{
    touch /tmp/io-stop
    wait $io
    note io_rounds "$(cat /tmp/io-rounds 2>/dev/null || echo 0)"
    note io_failures "$(cat /tmp/io-bad 2>/dev/null | wc -l)"
}}
"#,
        results = nvme_guest::files::RESULTS,
        block = IO_BLOCK,
        blocks = IO_BLOCKS,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prelude_shortens_only_nvme_cores_timeout_and_loads_the_series_driver_last() {
        let mods = ["nvme_common.ko".to_string(), "nvme_core.ko".to_string()];
        let p = prelude(
            &mods,
            &NvmeGuestOptions {
                io_timeout: Some(3),
                ..Default::default()
            },
        );
        assert!(p.contains("insmod $share/mods/nvme_core.ko io_timeout=3 ||"));
        assert!(p.contains("insmod $share/mods/nvme_common.ko ||"));
        let core = p.find("mods/nvme_core.ko").unwrap();
        assert!(core < p.find("mods/nvme.ko").unwrap());
        let plain = prelude(&mods, &NvmeGuestOptions::default());
        assert!(!plain.contains("io_timeout"));
        assert!(plain.contains("seek=2048 oflag=direct"));
    }
}
