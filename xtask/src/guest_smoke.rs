//! `cargo xtask guest-smoke --kernel K`: boot the guest image, run `uname -r`
//! and an insmod of our module (when built), bring a file back over the 9p
//! share, power off, and print phase timings.

use crate::flags::AccelArg;
use crate::image::Image;
use anyhow::{bail, Context, Result};
use clap::Args;
use hmb_harness::guest::devices::NoDevice;
use hmb_harness::guest::tools;
use hmb_harness::guest::{BootError, FirstLine, Guest};
use hmb_harness::guest_script::{self, Script};
use hmb_harness::images;
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::{self, QemuVersion};
use hmb_harness::qemu::{accel, console, kernel_checks, VmConfig};
use hmb_harness::{interrupt, target_dir};
use std::path::Path;
use std::time::Duration;
use xshell::Shell;

#[derive(Args)]
pub struct GuestSmoke {
    #[command(flatten)]
    pub image: Image,
    /// QEMU to use.
    #[arg(long, value_enum, default_value = "7.2")]
    pub qemu: QemuVersion,
    #[command(flatten)]
    pub accel: AccelArg,
    /// Seconds allowed from QEMU start to the guest being ready.
    #[arg(long, default_value_t = 180)]
    pub boot_timeout: u64,
    /// After the checks, leave a shell on this terminal; `poweroff -f` ends the VM.
    #[arg(long)]
    pub keep: bool,
    /// Extra shell commands for the guest, run after the smoke checks.
    #[arg(long)]
    pub run: Option<String>,
}

/// How long a --keep session may last.
const KEEP_LIMIT: Duration = Duration::from_secs(24 * 3600);

pub fn run(args: GuestSmoke, sh: &Shell) -> Result<()> {
    interrupt::install();
    let mut phases = Phases::new();
    let image = images::prepare(sh, &args.image.options(), &mut phases)?;
    let qemu = phases.run("qemu binary", || binary::ensure(sh, args.qemu))?;
    println!("    {} ({})", qemu.path.display(), qemu.version);

    let run_dir = target_dir().join("hmb-trace/smoke").join(&image.kernel_name);
    let share = run_dir.join("share");
    if run_dir.exists() {
        std::fs::remove_dir_all(&run_dir)?;
    }
    std::fs::create_dir_all(&share)?;
    let mut config = tools::vm_config(qemu, &image, &run_dir, &share);
    let mut script = smoke_script(&image.our_modules);
    if let Some(extra) = &args.run {
        script.push_str(extra);
        script.push('\n');
    }
    config.guest_script = Some(script);
    config.keep = args.keep;
    config.accel = phases.run("accelerator", || accel::resolve(args.accel.accel, &config))?;
    println!("    accelerator: {:?}", config.accel);

    let result = boot_and_check(
        &config,
        &image,
        &share,
        Duration::from_secs(args.boot_timeout),
        &mut phases,
    );
    phases.summary();
    println!("console log: {}", config.console_path().display());
    result?;
    println!("guest-smoke {}: OK (guest {})", image.kernel_name, image.abi);
    Ok(())
}

/// harness/guest-scripts/guest-smoke.sh with our modules to load.
fn smoke_script(our_modules: &[String]) -> String {
    Script::new()
        .set("MODULES", our_modules.join(" "))
        .file(&guest_script::GUEST_SMOKE)
        .build()
}

fn boot_and_check(
    config: &VmConfig,
    image: &images::Image,
    share: &Path,
    boot_timeout: Duration,
    phases: &mut Phases,
) -> Result<()> {
    let first = FirstLine {
        what: "HMBT-INIT marker",
        marker: "HMBT-INIT",
        timeout: boot_timeout,
    };
    // An early-boot hang is retried once (`Guest::boot`).
    let mut guest = phases.run("boot to init", || Guest::boot(config.clone(), first, |_| Ok(NoDevice)))?;
    println!(
        "    qemu pid {}, QMP socket {}",
        guest.vm.pid().unwrap_or(0),
        guest.vm.qmp_socket.display()
    );
    let vm = &mut guest.vm;
    phases.run("boot modules + share", || {
        vm.wait_for("HMBT-READY marker", Duration::from_secs(60), |l| {
            l.contains("HMBT-READY") || l.contains("HMBT-RESULT")
        })
    })?;
    let line = phases.run("guest job", || {
        vm.wait_for("HMBT-RESULT marker", Duration::from_secs(120), |l| {
            l.contains("HMBT-RESULT")
        })
    })?;
    let power_off_limit = if config.keep {
        KEEP_LIMIT
    } else {
        Duration::from_secs(60)
    };
    let status = phases.run("power off", || vm.wait_exit(power_off_limit))?;
    let errors: Vec<&String> = vm.console.lines.iter().filter(|l| l.contains("HMBT-ERROR")).collect();
    if !errors.is_empty() {
        bail!("guest init reported: {errors:?}");
    }
    let rc = console::parse_result(&line).unwrap_or(-1);
    BootError::check_script("the guest job", rc, || format!("{line}\n{}", vm.console.tail(20)))?;
    if !status.success() {
        bail!("QEMU exited with {status}");
    }
    let uname = std::fs::read_to_string(share.join("uname")).context("the guest wrote no uname over 9p")?;
    if uname.trim() != image.abi {
        bail!("guest runs {:?}, expected {}", uname.trim(), image.abi);
    }
    println!("    guest uname -r: {} (read back over 9p)", uname.trim());
    let dmesg = std::fs::read_to_string(share.join("dmesg")).context("the guest wrote no dmesg over 9p")?;
    kernel_checks::verify_active(&dmesg, image.has_kfence)?;
    if kernel_checks::enabled() {
        println!(
            "    kernel checks on: {} (kfence {})",
            kernel_checks::cmdline().join(" "),
            if image.has_kfence {
                "initialized"
            } else {
                "not in this kernel"
            }
        );
    }
    if !image.our_modules.is_empty() {
        let lsmod = std::fs::read_to_string(share.join("lsmod")).unwrap_or_default();
        println!("    guest lsmod after insmod:\n{}", lsmod.trim_end());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_smoke_script_loads_our_modules_in_order() {
        let s = smoke_script(&["/lib/a.ko".into(), "/lib/b.ko".into()]);
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("MODULES='/lib/a.ko /lib/b.ko'\n"));
        assert!(s.find("MODULES=").unwrap() < s.find("for m in $MODULES").unwrap());
    }
}
