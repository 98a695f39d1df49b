//! `cargo xtask host-integration`: the module, udev rule and daemon unit
//! installed as a user would (DKMS, modprobe, systemd) in a full Debian
//! guest booting systemd on the project's kernel, with emu-device attached;
//! the daemon is SIGKILLed and must be restarted by systemd with the trace
//! exactly once (harness/src/full_guest, docs/host-integration.md).

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;

use crate::flags::{KernelArg, RunDirArg};
use hmb_harness::full_guest::{self, Options};
use hmb_harness::phases::Phases;
use hmb_harness::{target_dir, workspace_root};
use xshell::Shell;

#[derive(Args)]
pub struct HostIntegration {
    #[command(flatten)]
    pub kernel: KernelArg,
    /// Firmware workload emu-device runs.
    #[arg(long, default_value = "ssd")]
    pub workload: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Records per second.
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Seconds the device produces before the SIGKILL, and again after the restart.
    #[arg(long, default_value_t = 3.0)]
    pub produce: f64,
    // Default run folder: target/hmb-trace/runs/host-integration-<kernel>.
    #[command(flatten)]
    pub run_dir: RunDirArg,
}

impl HostIntegration {
    pub fn run(self, sh: &Shell) -> Result<()> {
        if !(self.produce > 0.0 && self.produce <= 600.0) {
            bail!("--produce must be in (0, 600] seconds, got {}", self.produce);
        }
        sh.change_dir(workspace_root());
        let run_dir = self.run_dir.or_else(|| {
            target_dir()
                .join("hmb-trace/runs")
                .join(format!("host-integration-{}", self.kernel.name().unwrap_or("default")))
        });
        let opts = Options {
            kernel: self.kernel.kernel.clone(),
            run_dir,
            workload: self.workload.clone(),
            seed: self.seed,
            rate: self.rate,
            produce: Duration::from_secs_f64(self.produce),
        };
        let mut phases = Phases::new();
        let result = full_guest::run(sh, &opts, &mut phases);
        phases.summary();
        println!("run folder: {}", opts.run_dir.display());
        let outcome = result?;
        println!("nvme tools: {}", outcome.nvme.summary());
        println!("nvme traced: {}", outcome.traced.summary());
        println!("ground truth: {}", outcome.truth.summary());
        if !outcome.truth.passed() {
            bail!("trace.bin does not match what the firmware model produced");
        }
        println!("host integration: passed");
        Ok(())
    }
}
