//! The NVMe soak (`cargo xtask soak --device nvme`, docs/soak.md): the
//! patched nvme.ko, nvme-hmb-trace.ko and the daemon on emu-device's
//! controller over vfio-user, a dd loop writing and reading back
//! /dev/nvme0n1 for the whole run, and a device-side failure (CSTS.CFS,
//! `inject reset`) every `reset_every`: the driver finds it at its next
//! I/O timeout and resets the controller, the trace module follows into a
//! new epoch. At the end trace.bin must equal the controller's journal.
//!
//! It reuses nvme_guest's boot (`start`) and module staging; the guest
//! script is its own (no probe timing, no QD32, no removal checks: those
//! are `cargo xtask boot --device nvme --nvme-trace`'s).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use hmb_emu_device::control::{Fault, Request};
use serde::Serialize;

use crate::guest::{share, GuestDevice};
use crate::guest_script::{self, Script};
use crate::interrupt;
use crate::journal_truth;
use crate::nvme_guest::{
    self, files, is_trouble_line, parse_results, stage_modules, NvmeDevice, NvmeRunConfig, NvmeTools,
    FATAL_DRIVER_LINE, FATAL_IO_TIMEOUT_S,
};
use crate::phases::{Every, Phases};
use crate::qemu::{console, Accel, WaitError};

/// The host tells the guest to stop its I/O loop and the daemon.
const STOP: &str = "soak-stop";
/// The guest is streaming with its I/O loop running.
const RUNNING: &str = "soak-running";
/// Bytes of one I/O round: written, read back, compared.
const ROUND_BYTES: u64 = 256 << 10;

/// What a soak saw, for soak.json.
#[derive(Debug, Serialize)]
pub struct NvmeSoak {
    pub kernel: String,
    pub seconds: f64,
    pub resets_injected: u64,
    /// Controller resets the device counted (the driver's recoveries).
    pub controller_resets: u64,
    pub fatal_errors: u64,
    pub driver_recoveries: u64,
    /// The driver's "trace slice not adopted by the controller" lines
    /// (each followed by a re-initialised ring in a new epoch).
    pub slice_not_adopted_lines: u64,
    /// The controller produced into the journal's last epoch at the end.
    pub tracing_at_end: bool,
    pub io_rounds: u64,
    pub io_failed_rounds: u64,
    pub io_bytes: u64,
    pub records: u64,
    pub journal_dropped: u64,
    pub lost_counted: u64,
    pub epochs: Vec<u64>,
    pub daemon_rc: u64,
    pub summary: String,
    pub passed: bool,
}

fn guest_script(mods: &[String], trace_module: &str) -> String {
    let script = Script::new()
        .set("RESULTS", files::RESULTS)
        .set("MODS", mods.join(" "))
        // A short I/O timeout: the driver finds CFS at the next timeout.
        .set("NVME_CORE_PARAMS", format!("io_timeout={FATAL_IO_TIMEOUT_S}"))
        .set("DMESG", files::DMESG)
        .set("TRACE", files::TRACE)
        .set("DAEMON_STDERR", files::DAEMON_STDERR)
        .set("RUNNING", RUNNING)
        .set("STOP", STOP)
        .set("DONE", files::DONE)
        .set("TRACE_MODULE", trace_module)
        .set("ROUND_BLOCKS", ROUND_BYTES / 4096)
        // Rounds cycle over the namespace's first 32 MiB.
        .set("SLOTS", (32 << 20) / ROUND_BYTES);
    NvmeDevice::prelude(script).file(&guest_script::NVME_SOAK).build()
}

fn counter(status: &serde_json::Value, name: &str) -> u64 {
    status
        .pointer(&format!("/controller/counters/{name}"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
}

/// Run the soak: `duration` of I/O and tracing, a CFS every `reset_every`.
pub fn run(
    tools: &NvmeTools,
    run_dir: &Path,
    duration: Duration,
    reset_every: Duration,
    phases: &mut Phases,
) -> Result<NvmeSoak> {
    let trace = tools
        .trace
        .as_ref()
        .context("the soak needs tools prepared with the trace")?;
    std::fs::create_dir_all(run_dir)?;
    let share = run_dir.join("share");
    let _ = std::fs::remove_dir_all(&share);
    std::fs::create_dir_all(&share)?;
    let mods = stage_modules(tools, &share, true)?;
    std::fs::write(share.join(files::SCRIPT), guest_script(&mods, &trace.trace_module))?;
    let cfg = NvmeRunConfig {
        run_dir: run_dir.to_path_buf(),
        accel: Accel::Tcg,
        iops_reads: 0,
        timeout: Duration::from_secs(300),
        trace: true,
        inject_fatal: true,
        controller: Default::default(),
        viommu: false,
        // Only `start` reads the config: no check of the boot's runs here.
        checks: Default::default(),
    };
    let mut g = phases.run("guest boot", || nvme_guest::start(tools, &cfg, &share))?;
    phases.run("probe + daemon + I/O loop", || {
        g.wait_share_file(RUNNING, Duration::from_secs(300))
    })?;
    let start = Instant::now();
    let resets = phases.run("soak", || {
        let mut resets = 0u64;
        let mut next = reset_every;
        let mut report = Every::new(Duration::from_secs(30));
        while start.elapsed() < duration {
            if start.elapsed() >= next && next < duration {
                g.dev.request(&Request::Inject(Fault::Reset))?;
                resets += 1;
                next += reset_every;
                println!(
                    "    {:>4.0} s: controller failure (CSTS.CFS) {resets}",
                    start.elapsed().as_secs_f64()
                );
            }
            g.dev.check_alive()?;
            match g.vm.wait_for("guest failure", Duration::from_millis(200), |l| {
                l.contains("HMBT-NVME FAIL") || l.contains("HMBT-RESULT") || l.contains("HMBT-ERROR")
            }) {
                Ok(line) => bail!(
                    "the guest script stopped during the soak: {line}\n{}",
                    g.vm.console.tail(30)
                ),
                Err(e) if WaitError::is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
            if interrupt::requested() {
                bail!("interrupted");
            }
            if report.due() {
                let s = g.dev.status()?;
                println!(
                    "    {:>4.0} s: controller resets {}, reads {}, writes {}",
                    start.elapsed().as_secs_f64(),
                    counter(&s, "resets"),
                    counter(&s, "reads"),
                    counter(&s, "writes")
                );
            }
        }
        Ok(resets)
    })?;
    let seconds = start.elapsed().as_secs_f64();
    std::fs::write(share.join(STOP), b"")?;
    let (status, answer) = phases.run("stop + journal", || {
        g.wait_share_file(files::DONE, Duration::from_secs(300))?;
        // The journal while the controller still runs: QEMU's disconnect
        // resets it.
        let status = g.dev.status()?;
        let answer = g.dev.request(&Request::GroundTruth)?;
        std::fs::write(
            run_dir.join(files::GROUND_TRUTH),
            serde_json::to_string_pretty(&answer)?,
        )?;
        std::fs::write(run_dir.join("emu-stats.json"), serde_json::to_string_pretty(&status)?)?;
        share::answer(&share, files::DONE)?;
        Ok((status, answer))
    })?;
    let line = phases.run("guest power-off", || {
        share::wait_result(&mut g.vm, Duration::from_secs(60), Duration::from_secs(60))
    })?;
    g.dev.shutdown();
    share::move_artifacts(
        &share,
        run_dir,
        &[files::RESULTS, files::DMESG, files::TRACE, files::DAEMON_STDERR],
    )?;
    ensure!(
        console::parse_result(&line) == Some(0),
        "the guest script failed: {line}\n{}",
        g.vm.console.tail(30)
    );
    let results = parse_results(&std::fs::read_to_string(run_dir.join(files::RESULTS))?);
    let num = |k: &str| -> Result<u64> {
        results
            .get(k)
            .with_context(|| format!("the guest reported no {k}"))?
            .parse()
            .with_context(|| format!("{k} is not a number"))
    };
    let dmesg = std::fs::read_to_string(run_dir.join(files::DMESG)).context("the guest wrote no dmesg")?;
    crate::qemu::kernel_checks::verify_active(&dmesg, tools.image.has_kfence)?;
    let driver_recoveries = dmesg.lines().filter(|l| l.contains(FATAL_DRIVER_LINE)).count() as u64;
    // Timeouts and the driver's own CFS line are what a failure looks like;
    // anything else in the log (a WARNING, an oops, a removal) is not.
    let trouble: Vec<&str> = dmesg
        .lines()
        .filter(|l| is_trouble_line(l) && !l.contains(FATAL_DRIVER_LINE) && !l.contains("timeout"))
        .collect();
    let journal = journal_truth::journal_from_ground_truth(&answer)?;
    let report = phases.run("journal check", || {
        journal_truth::check(&run_dir.join(files::TRACE), &journal)
    })?;
    let io_rounds = num("io_rounds")?;
    let io_failed_rounds = num("io_failed")?;
    let daemon_rc = num("daemon_rc")?;
    // Equal files prove nothing about commands never traced: the controller
    // must be producing into the last epoch at the end (as nvme_guest checks).
    let adopted = status
        .pointer("/trace/adopted_generation")
        .and_then(serde_json::Value::as_u64);
    let tracing_at_end = adopted.is_some() && adopted == journal.epochs.last().copied();
    if !tracing_at_end {
        println!(
            "  the controller is not tracing at the end: adopted generation {adopted:?}, epochs {:?}",
            journal.epochs
        );
    }
    let not_adopted = dmesg.lines().filter(|l| l.contains("trace slice not adopted")).count() as u64;
    let passed = report.passed() && trouble.is_empty() && daemon_rc == 0 && io_failed_rounds == 0 && tracing_at_end;
    if !trouble.is_empty() {
        println!("  kernel log trouble:\n    {}", trouble.join("\n    "));
    }
    Ok(NvmeSoak {
        kernel: tools.image.kernel_name.clone(),
        seconds,
        resets_injected: resets,
        controller_resets: counter(&status, "resets"),
        fatal_errors: counter(&status, "fatal_errors"),
        driver_recoveries,
        slice_not_adopted_lines: not_adopted,
        tracing_at_end,
        io_rounds,
        io_failed_rounds,
        io_bytes: io_rounds * ROUND_BYTES * 2,
        records: report.matched,
        journal_dropped: report.journal_dropped,
        lost_counted: report.lost_counted,
        epochs: report.epochs.clone(),
        daemon_rc,
        summary: report.summary(),
        passed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_gets_the_modules_the_short_timeout_and_the_rendezvous_files() {
        let s = guest_script(&["nvme_core.ko".into()], "/lib/hmbt/nvme-hmb-trace.ko");
        for want in [
            "MODS='nvme_core.ko'\n",
            "NVME_CORE_PARAMS='io_timeout=3'\n",
            "TRACE_MODULE='/lib/hmbt/nvme-hmb-trace.ko'\n",
            "RUNNING='soak-running'\n",
            "STOP='soak-stop'\n",
            "ROUND_BLOCKS='64'\n",
            "SLOTS='128'\n",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        let body = &s[s.find("# ---- nvme-soak.sh ----").unwrap()..];
        let at = |w: &str| body.find(w).unwrap_or_else(|| panic!("{w} missing"));
        let daemon = at("trace_follow\n");
        let io = at("while [ ! -e /tmp/stop-io ]");
        let running = at("touch \"$SHARE/$RUNNING\"");
        let stop = at("touch /tmp/stop-io");
        let term = at("trace_stop\n");
        let done = at("touch \"$SHARE/$DONE\"");
        assert!(daemon < io && io < running && running < stop && stop < term && term < done);
    }
}
