//! `cargo xtask soak`: a long run, as a bench (docs/soak.md), not a test.
//!
//! * `--device ivshmem` (default): the guest (real module and daemon)
//!   streams for `--minutes` at `--rate` records/s with a controller reset
//!   injected every `--reset-every` seconds; at the end trace.bin must match
//!   the firmware model's ground truth, every skipped record covered by a
//!   LOST marker (harness/src/soak_ivshmem.rs).
//! * `--device nvme`: the NVMe controller over vfio-user with the patched
//!   nvme.ko, nvme-hmb-trace.ko and the daemon, a dd loop on /dev/nvme0n1
//!   for the whole run and a device-side failure (CSTS.CFS) every
//!   `--reset-every` seconds; trace.bin must equal the controller's journal
//!   (harness/src/soak_nvme.rs).
//!
//! Figures are printed and written to `soak.json` in the run folder.

use std::time::Duration;

use anyhow::{bail, Result};
use clap::Args;
use hmb_harness::host::load_average;
use hmb_harness::phases::Phases;
use hmb_harness::soak_ivshmem::{self, Output};
use hmb_harness::{target_dir, workspace_root};
use serde_json::json;
use xshell::Shell;

use crate::flags::{Device, KernelArg, RunDirArg};

#[derive(Args)]
pub struct Soak {
    /// Which device soaks: ivshmem (the ring over ivshmem-doorbell) or nvme
    /// (the NVMe controller over vfio-user, with guest I/O).
    #[arg(long, value_enum, default_value = "ivshmem")]
    pub device: Device,
    /// Minutes of streaming.
    #[arg(long, default_value_t = 10)]
    pub minutes: u64,
    /// Seconds between two injected resets.
    #[arg(long, default_value_t = 60)]
    pub reset_every: u64,
    /// ivshmem: records per second. 400 k/s, the highest rate found lossless
    /// on 6.1, was lossless for 10 minutes with 9 resets (docs/soak.md); it
    /// writes ~12 GB of trace.bin, and the host needs twice that free.
    #[arg(long, default_value_t = 400_000)]
    pub rate: u64,
    /// ivshmem: where the daemon writes trace.bin. `disk`: a scratch ext4
    /// disk (virtio-blk) sized for the run, read back with debugfs; `tmpfs`:
    /// the guest's /tmp, copied out through 9p at the end (half the guest's
    /// RAM: 100 k rec/s for 10 minutes needs 6 GiB of it).
    #[arg(long, value_enum, default_value = "disk")]
    pub output: Output,
    /// ivshmem: guest RAM in MiB (default 1024 with `--output disk`, 6144
    /// with `--output tmpfs`).
    #[arg(long)]
    pub guest_memory_mb: Option<u32>,
    #[command(flatten)]
    pub kernel: KernelArg,
    // Default run folder: target/hmb-trace/runs/soak-<device>-<timestamp>.
    #[command(flatten)]
    pub run_dir: RunDirArg,
}

impl Soak {
    pub fn run(self, sh: &Shell) -> Result<()> {
        if self.minutes == 0 || self.reset_every == 0 {
            bail!("--minutes and --reset-every must be at least 1");
        }
        self.ivshmem().check_tmpfs_room()?;
        // The ground-truth check of a 10-minute run covers ~2.4e8 records:
        // ~4 us each in a debug build (15 min), so the soak runs in a
        // release build of xtask.
        if cfg!(debug_assertions) && std::env::var_os(RELEASE_ENV).is_none() {
            println!("soak: running in a release build of xtask (the ground-truth check is long)");
            let status = std::process::Command::new("cargo")
                .args(["run", "--release", "--quiet", "--package", "xtask", "--"])
                .args(std::env::args_os().skip(1))
                .env(RELEASE_ENV, "1")
                .current_dir(workspace_root())
                .status()?;
            if !status.success() {
                bail!("the soak failed ({status})");
            }
            return Ok(());
        }
        let run_dir = self.run_dir.or_else(|| {
            let device = match self.device {
                Device::Ivshmem => "ivshmem",
                Device::Nvme => "nvme",
            };
            target_dir()
                .join("hmb-trace/runs")
                .join(format!("soak-{device}-{}", unix_secs()))
        });
        std::fs::create_dir_all(&run_dir)?;
        let mut phases = Phases::new();
        let result = match self.device {
            Device::Ivshmem => soak_ivshmem::run(sh, &self.ivshmem(), &run_dir, &mut phases),
            Device::Nvme => soak_nvme(sh, &self, &run_dir, &mut phases),
        };
        phases.summary();
        let figures = result?;
        std::fs::write(
            run_dir.join("soak.json"),
            serde_json::to_string_pretty(&figures)? + "\n",
        )?;
        println!("run folder: {}", run_dir.display());
        println!("  soak.json      {}", run_dir.join("soak.json").display());
        if figures["passed"] != json!(true) {
            bail!(
                "the soak did not end clean: see {}",
                run_dir.join("soak.json").display()
            );
        }
        Ok(())
    }

    /// The ivshmem soak's options.
    fn ivshmem(&self) -> soak_ivshmem::Options {
        soak_ivshmem::Options {
            kernel: self.kernel.kernel.clone(),
            minutes: self.minutes,
            reset_every: self.reset_every,
            rate: self.rate,
            output: self.output,
            guest_memory_mb: self.guest_memory_mb,
        }
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Set for the release re-run of the soak.
const RELEASE_ENV: &str = "HMB_SOAK_RELEASE";

fn soak_nvme(sh: &Shell, args: &Soak, run_dir: &std::path::Path, phases: &mut Phases) -> Result<serde_json::Value> {
    sh.change_dir(workspace_root());
    let tools = hmb_harness::nvme_guest::prepare(sh, args.kernel.name(), true, phases)?;
    let load_start = load_average();
    let soak = hmb_harness::soak_nvme::run(
        &tools,
        run_dir,
        Duration::from_secs(args.minutes * 60),
        Duration::from_secs(args.reset_every),
        phases,
    )?;
    println!("soak (nvme, kernel {}):", soak.kernel);
    println!(
        "  {:.0} s, {} controller failures (CSTS.CFS) injected, {} driver recoveries seen, {} controller resets, \
         load average {} at the start, {} at the end",
        soak.seconds,
        soak.resets_injected,
        soak.driver_recoveries,
        soak.controller_resets,
        load_start,
        load_average()
    );
    println!(
        "  guest I/O: {} rounds of 256 KiB written and read back ({} MiB), {} failed",
        soak.io_rounds,
        soak.io_bytes >> 20,
        soak.io_failed_rounds
    );
    println!(
        "  trace: {} records ({:.0} rec/s) in epochs {:?}; {} dropped by the controller, {} counted as lost",
        soak.records,
        soak.records as f64 / soak.seconds,
        soak.epochs,
        soak.journal_dropped,
        soak.lost_counted
    );
    println!("  journal check: {}", soak.summary);
    let mut v = serde_json::to_value(&soak)?;
    v["device"] = json!("nvme");
    v["minutes"] = json!(args.minutes);
    v["load_average_start"] = json!(load_start);
    v["load_average_end"] = json!(load_average());
    Ok(v)
}
