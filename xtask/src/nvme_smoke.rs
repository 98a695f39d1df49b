//! `cargo xtask nvme-smoke --kernel K`: the replacement nvme.ko of the patch
//! series (kmod/patches/K) in a real guest, under the kernel's stock
//! nvme-core.ko, driving QEMU's own NVMe device (which has no HMB, so no
//! trace slice is reserved: this checks the driver, not the ring). It binds,
//! /dev/nvme0n1 reads back what was written, the module parameter of the
//! series is there, nvme-hmb-trace.ko finds the client API, `rmmod nvme` is
//! refused while the trace module holds it and both unload in order, and
//! the kernel log has no WARNING/BUG/Oops/timeout. The ring over NVMe is
//! `cargo xtask boot --device nvme` (issue 13's controller).

use anyhow::{bail, ensure, Context, Result};
use clap::Args;

use crate::flags::KernelArg;
use hmb_harness::guest::devices::QemuNvme;
use hmb_harness::guest::tools;
use hmb_harness::guest::{BootError, FirstLine, Guest, GuestDevice};
use hmb_harness::guest_script::{self, Script};
use hmb_harness::images::{self, guest_modules::ModuleIndex, kernels, nvme_series, ImageOptions};
// The NVMe guest runs' one rule for a failing log line (console fault
// patterns and the nvme driver's timeouts).
use hmb_harness::nvme_guest::{is_trouble_line as is_fault_line, stock_modules_dir};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::{self, QemuVersion};
use hmb_harness::qemu::{console, VmConfig};
use hmb_harness::{interrupt, target_dir, workspace_root};
use std::path::Path;
use std::time::Duration;
use xshell::Shell;

#[derive(Args)]
pub struct NvmeSmoke {
    #[command(flatten)]
    pub kernel: KernelArg,
    /// Seconds allowed from QEMU start to the end of the guest job.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
}

pub fn run(args: NvmeSmoke, sh: &Shell) -> Result<()> {
    interrupt::install();
    let mut phases = Phases::new();
    let specs = kernels::load(&workspace_root().join("images/KERNELS"))?;
    let spec = kernels::select(&specs, args.kernel.name())?;
    let series = phases.run("nvme series", || nvme_series::prepare(sh, &spec, true))?;
    let nvme_ko = series.nvme_ko.context("the series built no nvme.ko")?;
    let image_args = ImageOptions {
        kernel: Some(spec.name.clone()),
        kmod_dir: None,
        with_daemon: false,
    };
    let image = images::prepare(sh, &image_args, &mut phases)?;
    let trace_ko = image.trace_module()?;
    let qemu = phases.run("qemu binary", || binary::ensure(sh, QemuVersion::V7_2))?;

    let run_dir = target_dir().join("hmb-trace/nvme-smoke").join(&spec.name);
    if run_dir.exists() {
        std::fs::remove_dir_all(&run_dir)?;
    }
    let share = run_dir.join("share");
    std::fs::create_dir_all(share.join("mods"))?;
    // The stock nvme-core (and what it needs) from the kernel's own modules.
    let modules_dir = stock_modules_dir(&spec.name, &image.abi)?;
    let order = ModuleIndex::load(&modules_dir)?.load_order(&["nvme_core".to_string()])?;
    let mut stock = Vec::new();
    for rel in &order {
        let name = format!("{}.ko", images::guest_modules::module_name(rel));
        images::initramfs::decompress_module(&modules_dir.join(rel), &share.join("mods").join(&name))?;
        stock.push(name);
    }
    std::fs::copy(&nvme_ko, share.join(PATCHED_NVME))?;
    let disk = run_dir.join("nvme.img");
    std::fs::File::create(&disk)?.set_len(64 << 20)?;

    let mut config = tools::vm_config(qemu, &image, &run_dir, &share);
    // Through the share, not hmbt.cmd: the script is longer than x86's
    // 2048-byte kernel command line.
    std::fs::write(share.join("run.sh"), guest_script(&stock, &trace_ko))?;
    // TCG on a loaded host can fail the IO-APIC timer check and panic before init.
    config.extra_cmdline.push("no_timer_check".into());
    let console_log = config.console_path();
    let result = phases.run("guest", || {
        check_guest(config, &disk, Duration::from_secs(args.timeout))
    });
    phases.summary();
    println!("console log: {}", console_log.display());
    result?;
    let dmesg = std::fs::read_to_string(share.join(DMESG)).context("the guest wrote no dmesg over 9p")?;
    let faults: Vec<&str> = dmesg.lines().filter(|l| is_fault_line(l)).collect();
    ensure!(faults.is_empty(), "guest kernel log has faults:\n{}", faults.join("\n"));
    hmb_harness::qemu::kernel_checks::verify_active(&dmesg, image.has_kfence)?;
    println!(
        "nvme-smoke {}: patched nvme.ko bound QEMU's NVMe device under the stock nvme-core, data verified, unloads clean ({})",
        spec.name, series.source
    );
    Ok(())
}

/// The kernel log's file in the share.
const DMESG: &str = "dmesg";
/// The series' nvme.ko in the share.
const PATCHED_NVME: &str = "nvme.ko";

fn guest_script(stock: &[String], trace_ko: &str) -> String {
    let script = Script::new()
        .set("MODS", stock.join(" "))
        .set("NVME_CORE_PARAMS", "")
        .set("PATCHED_NVME", PATCHED_NVME)
        .set("TRACE_MODULE", trace_ko)
        .set("DMESG", DMESG);
    QemuNvme::prelude(script).file(&guest_script::NVME_SMOKE).build()
}

/// Boot (an early-boot hang is retried once: `Guest::boot`), run the
/// script, check its result and the console.
fn check_guest(config: VmConfig, disk: &Path, timeout: Duration) -> Result<()> {
    let first = FirstLine {
        what: "HMBT-INIT marker",
        marker: "HMBT-INIT",
        timeout: Duration::from_secs(150),
    };
    let mut guest = Guest::boot(config, first, |_| {
        Ok(QemuNvme {
            image: disk.to_path_buf(),
        })
    })?;
    let vm = &mut guest.vm;
    let line = vm.wait_for("HMBT-RESULT marker", timeout, |l| l.contains("HMBT-RESULT"))?;
    let status = vm.wait_exit(Duration::from_secs(60))?;
    let fails: Vec<&String> = vm
        .console
        .lines
        .iter()
        .filter(|l| l.contains("HMBT-NVME FAIL") || l.contains("HMBT-ERROR"))
        .collect();
    if !fails.is_empty() {
        bail!("guest: {fails:?}\n{}", vm.console.tail(30));
    }
    let rc = console::parse_result(&line).unwrap_or(-1);
    BootError::check_script("the guest job", rc, || format!("{line}\n{}", vm.console.tail(30)))?;
    ensure!(status.success(), "QEMU exited with {status}");
    for l in vm.console.lines.iter().filter(|l| l.contains("HMBT-NVME")) {
        println!("    {l}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_lines_are_recognised() {
        assert!(is_fault_line(
            "[ 1.0] WARNING: CPU: 0 PID: 1 at drivers/nvme/host/pci.c"
        ));
        assert!(is_fault_line("nvme nvme0: I/O 12 QID 1 timeout, aborting"));
        assert!(!is_fault_line("nvme nvme0: 2/0/0 default/read/poll queues"));
    }

    #[test]
    fn the_script_gets_the_stock_modules_and_the_trace_module() {
        let s = guest_script(&["nvme_core.ko".into()], "/lib/modules/hmb/nvme-hmb-trace.ko");
        assert!(s.contains("MODS='nvme_core.ko'\n"));
        assert!(s.contains("TRACE_MODULE='/lib/modules/hmb/nvme-hmb-trace.ko'\n"));
        let body = &s[s.find("# ---- nvme-smoke.sh ----").unwrap()..];
        let core = body.find("insmod_stock\n").unwrap();
        let nvme = body.find("insmod \"$SHARE/$PATCHED_NVME\"").unwrap();
        let trace = body.find("insmod \"$TRACE_MODULE\"").unwrap();
        assert!(core < nvme && nvme < trace);
    }
}
