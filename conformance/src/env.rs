//! What every scenario shares: the prepared tools for one kernel and QEMU,
//! and a run folder per scenario.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use hmb_harness::guest_script;
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::qemu::Accel;
use hmb_harness::session::{self, Session, SessionConfig, Tools};
use xshell::Shell;

pub struct Env {
    pub kernel: String,
    pub qemu: QemuVersion,
    pub tools: Tools,
    pub inject_reset: bool,
}

impl Env {
    /// Prepare (cached) the image, QEMU and host tools for this process.
    pub fn from_environment() -> Result<Env> {
        let kernel = std::env::var("HMB_TRACE_KERNEL").ok().filter(|k| !k.is_empty());
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
        let tools = session::prepare(&sh, kernel.as_deref(), qemu, &mut phases).context("preparing the guest")?;
        Ok(Env {
            kernel: tools.image.kernel_name.clone(),
            qemu,
            tools,
            inject_reset,
        })
    }

    pub fn run_dir(&self, scenario: &str) -> PathBuf {
        let qemu = format!("qemu-{}", self.qemu.name());
        hmb_harness::target_dir()
            .join("hmb-trace/conformance")
            .join(&self.kernel)
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
        let script = guest_script::prelude(self.tools.module()?) + body;
        let cfg = SessionConfig {
            run_dir,
            accel: Accel::Tcg,
            keep: false,
            hmb_size: hmb_emu_device::hmb::hmb_size_for(ring_size),
            guest_script: script,
            extra_qemu_args: extra.qemu_args,
            extra_cmdline: extra.cmdline,
        };
        let mut phases = Phases::new();
        Session::start(&self.tools, &cfg, &mut phases)
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
