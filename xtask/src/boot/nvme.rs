//! `cargo xtask boot` on its default device, nvme: emu-device's NVMe
//! controller over vfio-user (QEMU 11.1). The patch series' nvme.ko probes
//! it and lends it the HMB with the trace slice, nvme-hmb-trace.ko and the
//! daemon carry the controller's trace, and trace.bin must equal the
//! controller's journal (`ground-truth.json`) byte for byte; the analyzer
//! then writes info.txt and report.html. Along the way the HMB comes back
//! with MR=1 after `reset_controller`, data written is read back and found
//! in the namespace; the run folder gets `nvme-run.json` (what was seen and
//! measured) and the controller's reports (`emu-probed.json`,
//! `emu-reset.json`, `emu-stats.json`). `--stock-driver` runs the kernel's
//! own nvme.ko instead, without the trace. That is the main job, the
//! default; `--checks full` adds what `cargo xtask test` checks on every
//! kernel (hmb_harness::nvme_checks).

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Result};
use hmb_harness::host_build;
use hmb_harness::nvme_guest::{self, ControllerOptions, NvmeOutcome, NvmeRunConfig};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use xshell::{cmd, Shell};

use super::inject::Injection;
use super::{Boot, Checks};

/// `--inject reset` (no time: it comes at a checkpoint of the guest
/// script) is the device-side failure; the rest is refused, not ignored.
fn inject_fatal(args: &Boot) -> Result<bool> {
    if args.qemu.is_some_and(|q| q != QemuVersion::V11_1) {
        bail!("--device nvme needs QEMU 11.1 (vfio-user-pci); drop --qemu or pass --qemu 11.1");
    }
    if args.guest.keep {
        bail!("--keep is not available with --device nvme yet");
    }
    if args.stock_driver && args.producer.is_some() {
        bail!("--producer chooses who writes the trace ring; --stock-driver runs no trace");
    }
    match args.inject.as_slice() {
        [] => Ok(false),
        [Injection::Reset { at: None }] => Ok(true),
        _ => bail!(
            "--device nvme takes one --inject reset (without @time: the controller fails after \
             reset_controller, at a checkpoint of the guest script)"
        ),
    }
}

pub fn boot(sh: &Shell, args: &Boot, run_dir: &Path, phases: &mut Phases) -> Result<NvmeOutcome> {
    let inject_fatal = inject_fatal(args)?;
    let trace = !args.stock_driver;
    let tools = nvme_guest::prepare(sh, args.guest.kernel.name(), trace, phases)?;
    // The analyzer reads the trace only once the guest is done: it is
    // built beside the guest, at a lower priority than QEMU and emu-device
    // (on a cold first boot that takes its ~150 CPU-s off the critical path).
    let analyzer = match trace {
        true => Some(host_build::spawn_release_build(
            "hmb-trace-analyze",
            &run_dir.join("analyzer-build.log"),
        )?),
        false => None,
    };
    let cfg = NvmeRunConfig {
        run_dir: run_dir.to_path_buf(),
        accel: args.guest.accel.accel,
        iops_reads: args.nvme_reads.unwrap_or(2000),
        timeout: Duration::from_secs(300),
        trace,
        inject_fatal,
        controller: ControllerOptions {
            producer: args.producer.unwrap_or_default(),
            ..Default::default()
        },
        viommu: args.viommu,
        checks: args.checks.unwrap_or_default(),
    };
    let outcome = nvme_guest::run(&tools, &cfg, phases)?;
    std::fs::write(
        run_dir.join("nvme-run.json"),
        serde_json::to_string_pretty(&outcome)? + "\n",
    )?;
    if let Some(build) = analyzer {
        let analyzer = phases.run("analyzer (built beside the guest)", || build.wait())?;
        let trace_bin = run_dir.join(nvme_guest::files::TRACE);
        phases.run("analyze", || super::analyze(sh, &analyzer, run_dir, &trace_bin))?;
        if outcome.traced_telemetry.is_some() {
            phases.run("analyze telemetry", || analyze_telemetry(sh, &analyzer, run_dir))?;
        }
    }
    Ok(outcome)
}

/// The analyzer on the Host-Initiated log nvme-cli pulled beside the trace,
/// as a stock-kernel user runs it (README, "Tracing with a stock kernel"):
/// its header, then `info` reading the log as a trace; into telemetry.txt.
fn analyze_telemetry(sh: &Shell, analyzer: &Path, run_dir: &Path) -> Result<()> {
    let log = run_dir.join(nvme_guest::files::TELEMETRY[0]);
    let header = cmd!(sh, "{analyzer} telemetry {log}").read()?;
    let info = cmd!(sh, "{analyzer} info {log}").read()?;
    let text = format!("{header}\n\n{info}\n");
    print!("{text}");
    std::fs::write(run_dir.join("telemetry.txt"), text)?;
    Ok(())
}

pub fn print(outcome: &NvmeOutcome, run_dir: &Path) {
    println!("run folder: {}", run_dir.display());
    println!(
        "  kernel {} ({}), {}, controller {} bound to {}",
        outcome.kernel, outcome.abi, outcome.qemu, outcome.pci, outcome.driver
    );
    match outcome.checks {
        Checks::Main => println!(
            "  checks: main (--checks full adds QD32, telemetry beside the trace, wake-up latency, chunk mapping, removal, the personalities and two controllers)"
        ),
        Checks::Full => println!("  checks: full"),
    }
    println!(
        "  probe: insmod nvme -> /dev/nvme0n1 {} ms; kernel log 'pci function' -> I/O queues {}",
        outcome.probe_ms,
        outcome.probe_log_ms.map_or("?".to_string(), |ms| format!("{ms:.0} ms"))
    );
    println!(
        "  HMB: driver \"{}\", controller {} bytes in {} descriptors, back with MR=1 after reset_controller: {}",
        outcome.hmb_line, outcome.hmb_bytes, outcome.hmb_descriptors, outcome.hmb_returned_after_reset
    );
    println!(
        "  data: {} bytes written, read back identical before and after the reset, found in the namespace",
        outcome.verified_bytes
    );
    println!(
        "  4 KiB reads at QD1 (O_DIRECT): {} IOPS ({} reads in {:.2} s)",
        outcome.read_iops_qd1,
        outcome.iops_reads,
        outcome.iops_centiseconds as f64 / 100.0
    );
    if let Some(q) = &outcome.qd32 {
        println!(
            "  4 KiB reads at QD32 (32 processes, O_DIRECT): {} IOPS ({} reads in {:.2} s)",
            q.read_iops,
            q.reads,
            q.centiseconds as f64 / 100.0
        );
    }
    if let Some(f) = &outcome.fatal_recovery {
        println!(
            "  injected controller failure (CSTS.CFS): driver \"{}\", recovered in {} ms (I/O timeout {} s)",
            f.driver_line,
            f.recovered_ms,
            hmb_harness::nvme_guest::FATAL_IO_TIMEOUT_S
        );
    }
    if let Some(t) = &outcome.telemetry {
        println!(
            "  telemetry (stock driver, Debian's nvme-cli): generations {} and {}, {} and {} records, every one in the controller's journal",
            t.generations[0], t.generations[1], t.records[0], t.records[1]
        );
        let c = &t.controller;
        if c.available {
            println!(
                "  telemetry --controller-init: the capture at the injected failure, generation {}, {} records, every one in the journal",
                c.generation, c.records
            );
        } else {
            println!(
                "  telemetry --controller-init: no capture (no event in this guest: --inject reset makes one), header 08h agreeing with 07h"
            );
        }
    }
    if let Some(t) = &outcome.traced_telemetry {
        println!(
            "  telemetry beside the trace (Debian's nvme-cli, {:.1} s of guest time for both logs):",
            t.pull_seconds
        );
        println!("    Host-Initiated (07h): {}", t.host.summary());
        println!(
            "    Controller-Initiated (08h, reset_controller's FROZEN): {}",
            t.controller.summary()
        );
    }
    if let Some(t) = &outcome.trace {
        println!(
            "  trace: patched nvme.ko ({}), {} KiB ring; {}",
            t.series_source, t.hmb_trace_kb, t.summary
        );
        if let Some([min, p50, p90, p99, max]) = t.wake_latency_us {
            println!(
                "  poll(2) wake-up after a 4 KiB read ({} rounds, timed sampler): min {min} us, p50 {p50}, p90 {p90}, p99 {p99}, max {max}",
                hmb_harness::nvme_guest::WAKE_ROUNDS
            );
        }
    }
    for p in outcome.personalities.iter().flatten() {
        println!("  personality {}", p.summary());
        if !p.driver_line.is_empty() {
            println!("    driver: {}", p.driver_line);
        }
    }
    if let Some(v) = &outcome.viommu {
        println!(
            "  behind intel-iommu (intel_iommu=on): IOMMU group {}, lowest HMB descriptor address {:#x} (an IOVA beyond guest RAM)",
            v.iommu_group, v.lowest_hmb_address
        );
    }
    if let Some(p) = &outcome.two_controllers {
        println!("  {}", p.summary());
    }
    if outcome.lockdep_on_at_end {
        println!("  lockdep: still on after the run's last load (/proc/lockdep_stats debug_locks 1)");
    }
    for name in [
        "nvme-run.json",
        "trace.bin",
        "info.txt",
        "report.html",
        "telemetry.txt",
        "telemetry-1.bin",
        "telemetry-controller.bin",
        "ground-truth.json",
        "emu-stats.json",
        "dmesg.txt",
        "console.log",
        "emu-device.log",
    ] {
        let path = run_dir.join(name);
        if path.exists() {
            println!("  {name:<15} {}", path.display());
        }
    }
}
