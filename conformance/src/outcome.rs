//! Turning a finished session into a normalised outcome: facts that must be
//! the same on every kernel and every run.

use std::path::Path;

use anyhow::Result;
use hmb_emu_device::report::{GroundTruth, Stats};
use hmb_harness::guest_script::files;
use hmb_harness::qemu::console::is_fault_line;
use hmb_harness::truth::{self, TruthReport};
use serde_json::{json, Value};

/// Problem lines of the guest's kernel log (dmesg.txt) and console: kernel
/// lines (`[  time] ...`) that report a fault, by the same rule as the live
/// console scan (`qemu::console::is_fault_line`), so the job's own output
/// saying "WARNING:" is not a kernel fault.
pub fn kernel_log_problems(run_dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for name in [files::DMESG, "console.log"] {
        let text = std::fs::read_to_string(run_dir.join(name)).unwrap_or_default();
        bad.extend(
            text.lines()
                .filter(|l| is_fault_line(l))
                .map(|l| format!("{name}: {l}")),
        );
    }
    bad
}

/// "clean", or the offending lines.
pub fn kernel_log(run_dir: &Path) -> Value {
    let bad = kernel_log_problems(run_dir);
    if bad.is_empty() {
        json!("clean")
    } else {
        json!(bad)
    }
}

/// The daemon's fatal message (its line ending in `(exit N)`), without the
/// program name, with positions and counts (which vary with timing) as `N`.
pub fn daemon_error(run_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(run_dir.join(files::DAEMON_STDERR)).ok()?;
    let line = text.lines().rev().find(|l| l.contains("(exit "))?;
    let line = line.trim_start_matches("hmb-trace-daemon: ").trim();
    let (message, exit) = line.rsplit_once("(exit ")?;
    let normalised: Vec<String> = message
        .split_whitespace()
        .map(|w| {
            let digits = w.trim_end_matches([':', ',', ')']);
            if !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) {
                w.replacen(digits, "N", 1)
            } else {
                w.to_string()
            }
        })
        .collect();
    Some(format!("{} (exit {exit}", normalised.join(" ")))
}

/// Check trace.bin against emu-device's ground truth.
pub fn check_truth(run_dir: &Path, ground_truth: &GroundTruth, stats: &Stats) -> Result<TruthReport> {
    truth::check(
        &run_dir.join(files::TRACE),
        &ground_truth.segments,
        truth::live_ring(stats),
    )
}

/// The truth verdict as snapshot facts (counts that vary with timing are left out).
pub fn truth_facts(report: &TruthReport) -> Value {
    json!({
        "passed": report.passed(),
        "epochs": report.epochs,
        "uncounted_gaps": report.uncounted_gaps.len(),
        "missing_at_end": report.missing_at_end.len(),
        "duplicates": report.duplicates,
        "mismatches": report.mismatches.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_kernel_fault_lines_spoil_the_log() {
        let dir = std::env::temp_dir().join(format!("hmbt-outcome-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(files::DMESG),
            "[    0.000000] Linux version 6.1\n[   12.5] nvme-hmb-trace 0000:01:00.0: ring ready\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("console.log"),
            "HMBT-STEP daemon\nWARNING: the job printed this\n",
        )
        .unwrap();
        assert_eq!(kernel_log(&dir), json!("clean"));
        std::fs::write(
            dir.join(files::DMESG),
            "[   13.1] WARNING: CPU: 0 PID: 7 at kmod/hmb_trace_core.c:99 f+0x1/0x2\n",
        )
        .unwrap();
        assert_eq!(
            kernel_log_problems(&dir),
            ["dmesg.txt: [   13.1] WARNING: CPU: 0 PID: 7 at kmod/hmb_trace_core.c:99 f+0x1/0x2"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
