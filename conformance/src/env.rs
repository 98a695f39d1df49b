//! What every scenario shares: the prepared tools for one kernel, device
//! and QEMU, and a run folder per scenario.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use hmb_harness::guest_script;
use hmb_harness::ivshmem_session::{self, Session, SessionConfig, Tools};
pub use hmb_harness::matrix::Device;
use hmb_harness::nvme_guest::{self, NvmeTools};
use hmb_harness::nvme_session::{NvmeGuestOptions, NvmeSession};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::qemu::Accel;
use xshell::Shell;

/// What one device needs prepared.
pub enum DeviceTools {
    Ivshmem(Tools),
    Nvme(NvmeTools),
}

pub struct Env {
    pub kernel: String,
    pub qemu: QemuVersion,
    pub device: Device,
    pub tools: DeviceTools,
    pub inject_reset: bool,
}

impl Env {
    /// Prepare (cached) the image, QEMU and host tools for this process.
    /// `HMB_TRACE_DEVICE` (ivshmem, the default, or nvme) picks the device;
    /// the nvme device always runs on QEMU 11.1.
    pub fn from_environment() -> Result<Env> {
        let kernel = std::env::var("HMB_TRACE_KERNEL").ok().filter(|k| !k.is_empty());
        let device = Device::parse(std::env::var("HMB_TRACE_DEVICE").as_deref().unwrap_or("ivshmem"))?;
        let qemu = match std::env::var("HMB_TRACE_QEMU").as_deref() {
            Ok("10.0") => QemuVersion::V10_0,
            Ok("11.1") => QemuVersion::V11_1,
            Ok("7.2") | Err(_) => QemuVersion::V7_2,
            Ok(other) => anyhow::bail!("HMB_TRACE_QEMU={other}: use 7.2, 10.0 or 11.1"),
        };
        let inject_reset = std::env::var("HMB_TRACE_INJECT").is_ok_and(|v| v == "reset");
        let sh = Shell::new()?;
        sh.change_dir(hmb_harness::workspace_root());
        let mut phases = Phases::new();
        let (qemu, tools) = match device {
            Device::Ivshmem => (
                qemu,
                DeviceTools::Ivshmem(
                    ivshmem_session::prepare(&sh, kernel.as_deref(), qemu, &mut phases)
                        .context("preparing the guest")?,
                ),
            ),
            Device::Nvme => (
                QemuVersion::V11_1,
                DeviceTools::Nvme(
                    nvme_guest::prepare(&sh, kernel.as_deref(), true, &mut phases)
                        .context("preparing the nvme guest (image, QEMU 11.1, the series' nvme.ko)")?,
                ),
            ),
        };
        let kernel = match &tools {
            DeviceTools::Ivshmem(t) => t.image.kernel_name.clone(),
            DeviceTools::Nvme(t) => t.image.kernel_name.clone(),
        };
        Ok(Env {
            kernel,
            qemu,
            device,
            tools,
            inject_reset,
        })
    }

    /// The guest kernel has KFENCE built in (qemu::kernel_checks::verify_active).
    pub fn kernel_has_kfence(&self) -> bool {
        match &self.tools {
            DeviceTools::Ivshmem(t) => t.image.has_kfence,
            DeviceTools::Nvme(t) => t.image.has_kfence,
        }
    }

    /// The ivshmem device's tools (an error on the nvme device).
    pub fn tools(&self) -> Result<&Tools> {
        match &self.tools {
            DeviceTools::Ivshmem(t) => Ok(t),
            DeviceTools::Nvme(_) => anyhow::bail!("this scenario needs the ivshmem device"),
        }
    }

    /// The nvme device's tools (an error on the ivshmem device).
    pub fn nvme_tools(&self) -> Result<&NvmeTools> {
        match &self.tools {
            DeviceTools::Nvme(t) => Ok(t),
            DeviceTools::Ivshmem(_) => anyhow::bail!("this scenario needs the nvme device"),
        }
    }

    pub fn run_dir(&self, scenario: &str) -> PathBuf {
        let qemu = format!("qemu-{}", self.qemu.name());
        hmb_harness::target_dir()
            .join("hmb-trace/conformance")
            .join(&self.kernel)
            .join(self.device.name())
            .join(qemu)
            .join(scenario)
    }

    /// Start emu-device and a guest that runs the prelude plus `body`.
    pub fn start(&self, scenario: &str, ring_size: u64, body: &str) -> Result<Session> {
        self.start_with(scenario, ring_size, body, Extra::default())
    }

    /// `start`, with more QEMU arguments or guest command line words.
    pub fn start_with(&self, scenario: &str, ring_size: u64, body: &str, extra: Extra) -> Result<Session> {
        let run_dir = self.run_dir(scenario);
        let _ = std::fs::remove_dir_all(&run_dir);
        std::fs::create_dir_all(&run_dir)?;
        let tools = self.tools()?;
        let script = guest_script::prelude(tools.module()?).body(body).build();
        let cfg = SessionConfig {
            run_dir,
            accel: Accel::Tcg,
            keep: false,
            hmb_size: hmb_emu_device::ivshmem::hmb::hmb_size_for(ring_size),
            guest_script: script,
            extra_qemu_args: extra.qemu_args,
            extra_cmdline: extra.cmdline,
        };
        let mut phases = Phases::new();
        Session::start(tools, &cfg, &mut phases)
    }

    /// Start the NVMe controller and a guest that loads the series' driver
    /// and the module, then runs `body` (harness/src/nvme_session.rs).
    pub fn start_nvme(&self, scenario: &str, body: &str, opts: &NvmeGuestOptions) -> Result<NvmeSession> {
        NvmeSession::start(self.nvme_tools()?, &self.run_dir(scenario), body, opts)
    }
}

/// What a scenario adds to the standard guest.
#[derive(Default)]
pub struct Extra {
    pub qemu_args: Vec<String>,
    pub cmdline: Vec<String>,
}

/// How long a guest script may take to finish after the host said stop.
pub const FINISH: Duration = Duration::from_secs(90);
