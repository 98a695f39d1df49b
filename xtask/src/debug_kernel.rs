//! `cargo xtask debug-kernel`: the scenarios that exercise the module's and
//! the series' locks on the 6.12-debug kernel (lockdep, KASAN, UBSAN,
//! DEBUG_ATOMIC_SLEEP, DEBUG_OBJECTS, KFENCE; docs/debug-checks.md). Every
//! gate fails on their reports (images/KERNEL_CHECKS). `cargo xtask test`
//! runs it as its last step, the kernel built in the background while the
//! steps before it run (`--kernel-only`, xtask/src/test/background.rs);
//! the GitHub workflow runs the whole matrix on it (docs/conformance.md).

use std::time::Instant;

use anyhow::{ensure, Result};
use clap::Args;
use hmb_harness::images::{self, ImageOptions};
use hmb_harness::matrix::Device;
use hmb_harness::nvme_guest;
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::target_dir;

use crate::boot::{self, Boot};
use crate::conformance::Conformance;

/// The kernel these checks run on.
pub const KERNEL: &str = "6.12-debug";

/// ivshmem scenarios that take the module's locks on their unusual paths:
/// unbind and surprise removal with readers (`removal`, `access_rules`),
/// AER recovery (`pci_error`), a recovery that fails with a sysfs reader
/// and a fault waiting, then unbind (`aer_unrecovered`), suspend and
/// resume (`suspend`), REINIT after a freeze while the daemon follows
/// (`frozen_follow`).
pub const IVSHMEM_LOCK_SCENARIOS: &[&str] = &[
    "removal",
    "access_rules",
    "pci_error",
    "aer_unrecovered",
    "suspend",
    "frozen_follow",
];

/// nvme scenarios on the series' paths: resets with the ring live
/// (`nvme_resets`), removal under traffic (`nvme_surprise_removal`), a
/// failed reset and the dead controller (`nvme_controller_killed`), REINIT
/// after the driver froze the ring (`frozen_follow`), the module removed
/// while the driver resets (`nvme_rmmod_in_reset`), REINIT racing
/// back-to-back resets (`nvme_reinit_in_reset`).
pub const NVME_LOCK_SCENARIOS: &[&str] = &[
    "nvme_resets",
    "nvme_surprise_removal",
    "nvme_controller_killed",
    "frozen_follow",
    "nvme_rmmod_in_reset",
    "nvme_reinit_in_reset",
];

/// The lock scenarios of a device.
pub fn lock_scenarios(device: Device) -> &'static [&'static str] {
    match device {
        Device::Ivshmem => IVSHMEM_LOCK_SCENARIOS,
        Device::Nvme => NVME_LOCK_SCENARIOS,
    }
}

#[derive(Args)]
pub struct DebugKernel {
    /// Only build the kernel, the module and the series' nvme.ko against it (cached).
    #[arg(long)]
    pub build_only: bool,
    /// Only build the kernel (no module, no initramfs, no cargo build): what
    /// the test command runs in the background, beside its other steps.
    #[arg(long, conflicts_with = "build_only")]
    pub kernel_only: bool,
    /// The devices whose lock scenarios run: ivshmem, nvme or all.
    #[arg(long, default_value = "all", value_parser = ["ivshmem", "nvme", "all"])]
    pub device: String,
    /// Only the lock scenarios, not the main job's NVMe boot (about 3 min
    /// less); the test command runs both.
    #[arg(long, conflicts_with_all = ["build_only", "kernel_only"])]
    pub no_boot: bool,
}

impl DebugKernel {
    pub fn run(self, sh: &xshell::Shell) -> Result<()> {
        if self.kernel_only {
            let started = Instant::now();
            let built = images::debug_kernel::prepare_kernel_only(sh, KERNEL)?;
            println!(
                "debug-kernel: {KERNEL} {} in {:.0} s",
                if built { "built" } else { "cached" },
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        let mut phases = Phases::new();
        // The image (the kernel, built on first use) and the series' nvme.ko.
        let image = images::prepare(
            sh,
            &ImageOptions {
                kernel: Some(KERNEL.into()),
                kmod_dir: None,
                with_daemon: true,
            },
            &mut phases,
        )?;
        println!("    guest kernel {} ({})", image.abi, image.boot_kernel.display());
        drop(nvme_guest::prepare(sh, Some(KERNEL), true, &mut phases)?);
        phases.summary();
        if self.build_only {
            return Ok(());
        }
        let mut times = Vec::new();
        let boot = self.device != "ivshmem" && !self.no_boot;
        // The main job's boot (one guest, about one core) runs beside the
        // ivshmem lock scenarios taken one at a time: two guests at once,
        // as the scenarios two at a time are, and the boot's time hidden.
        let (booted, ivshmem) = std::thread::scope(|scope| {
            let booted = boot.then(|| scope.spawn(main_job_boot));
            let ivshmem = (self.device != "nvme").then(|| {
                let threads = if boot { Some(1) } else { None };
                lock_scenarios_on(sh, Device::Ivshmem, threads)
            });
            let booted = booted.map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("the boot on {KERNEL} panicked")))
            });
            (booted, ivshmem)
        });
        // Both are reported when both fail: each is a different guest.
        if let (Some(Err(boot_error)), Some(Err(ivshmem_error))) = (&booted, &ivshmem) {
            anyhow::bail!(
                "the boot on {KERNEL} failed: {boot_error:#}; and the ivshmem lock scenarios: {ivshmem_error:#}"
            );
        }
        for (what, result) in [("boot --inject reset (nvme)", booted), ("ivshmem", ivshmem)] {
            if let Some(result) = result {
                times.push((what, result?));
            }
        }
        if self.device != "ivshmem" {
            times.push(("nvme", lock_scenarios_on(sh, Device::Nvme, None)?));
        }
        for (what, seconds) in times {
            println!("    {KERNEL} {what}: {seconds:.0} s");
        }
        println!("debug-kernel: no lockdep, KASAN, UBSAN or sleep-in-atomic report on {KERNEL}");
        Ok(())
    }
}

/// `cargo xtask boot --kernel 6.12-debug --inject reset --checks full`,
/// in a shell of its own (it runs on a thread beside the scenarios); its
/// seconds.
fn main_job_boot() -> Result<f64> {
    let sh = xshell::Shell::new()?;
    sh.change_dir(hmb_harness::workspace_root());
    let started = Instant::now();
    println!("==> cargo xtask boot --kernel {KERNEL} --inject reset --checks full");
    let run_dir = target_dir().join("hmb-trace/test-runs/nvme-trace-debug");
    let _ = std::fs::remove_dir_all(&run_dir);
    let args: Boot = crate::flags::parse(&["boot", "--kernel", KERNEL, "--inject", "reset", "--checks", "full"])?;
    let mut phases = Phases::new();
    boot::nvme::boot(&sh, &args, &run_dir, &mut phases)?;
    ensure!(
        run_dir.join("report.html").is_file(),
        "boot on {KERNEL}: no report.html"
    );
    Ok(started.elapsed().as_secs_f64())
}

/// The lock scenarios of `device` on the debug kernel, `threads` at a time
/// (default: the conformance profile's); their seconds.
fn lock_scenarios_on(sh: &xshell::Shell, device: Device, threads: Option<u16>) -> Result<f64> {
    let started = Instant::now();
    Conformance {
        kernel: Some(KERNEL.into()),
        device: device.name().into(),
        qemu: QemuVersion::V7_2,
        scenario: Some(lock_scenarios(device).join(",")),
        inject: None,
        junit: Some(target_dir().join(format!("hmb-trace/conformance/junit-debug-{}.xml", device.name()))),
        lock_scenarios_on_debug_kernel: false,
        test_threads: threads,
    }
    .run(sh)?;
    Ok(started.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_harness::matrix;

    /// Every listed scenario runs on its device and on the debug kernel.
    #[test]
    fn the_lock_scenarios_run_on_their_device_and_kernel() {
        for device in Device::ALL {
            let runs = matrix::on(device, KERNEL);
            for n in lock_scenarios(device) {
                assert!(runs.contains(n), "{n} does not run on {} / {KERNEL}", device.name());
            }
        }
    }
}
