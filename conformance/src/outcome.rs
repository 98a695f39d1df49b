//! Turning a finished session into a normalised outcome: facts that must be
//! the same on every kernel and every run.

use std::path::Path;

use anyhow::Result;
use hmb_emu_device::ivshmem::report::{GroundTruth, Stats};
use hmb_harness::guest_script::files;
use hmb_harness::ivshmem_truth::{self, TruthReport};
use hmb_harness::journal_truth::JournalReport;
use hmb_harness::matrix::Device;
use hmb_harness::nvme_guest::is_trouble_line;
use hmb_harness::qemu::console::{fault_lines, is_fault_line};
use hmb_harness::qemu::stock_reports::untolerated_lines;
use serde_json::{json, Value};

/// Problem lines of the guest's kernel log (dmesg.txt) and console: kernel
/// lines (`[  time] ...`) that report a fault, by the same rule as the live
/// console scan (`qemu::console::is_fault_line`), so the job's own output
/// saying "WARNING:" is not a kernel fault.
pub fn kernel_log_problems(run_dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for name in [files::DMESG, "console.log"] {
        let text = std::fs::read_to_string(run_dir.join(name)).unwrap_or_default();
        bad.extend(fault_lines(&text).into_iter().map(|l| format!("{name}: {l}")));
    }
    bad
}

/// "clean", or the offending lines: the kernel's fault lines, and on the
/// NVMe device also the nvme driver's trouble lines (timeouts, I/O errors);
/// but for lines holding one of `expected` (caused on purpose).
pub fn kernel_log(run_dir: &Path, device: Device, expected: &[&str]) -> Value {
    let mut bad = kernel_log_problems(run_dir);
    if device == Device::Nvme {
        let dmesg = std::fs::read_to_string(run_dir.join(files::DMESG)).unwrap_or_default();
        bad.extend(
            untolerated_lines(&dmesg)
                .into_iter()
                .filter(|l| is_trouble_line(l) && !is_fault_line(l))
                .map(|l| format!("{}: {l}", files::DMESG)),
        );
    }
    bad.retain(|l| !expected.iter().any(|e| l.contains(e)));
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
    ivshmem_truth::check(
        &run_dir.join(files::TRACE),
        &ground_truth.segments,
        ivshmem_truth::live_ring(stats),
    )
}

/// A trace's verdict against its ground truth (emu-device's segments on
/// ivshmem, the controller's journal on NVMe) as the same snapshot facts;
/// counts that vary with timing are left out.
pub struct TruthFacts {
    passed: bool,
    epochs: u64,
    uncounted_gaps: usize,
    missing_at_end: usize,
    duplicates: u64,
    mismatches: usize,
}

impl From<&TruthReport> for TruthFacts {
    fn from(r: &TruthReport) -> TruthFacts {
        TruthFacts {
            passed: r.passed(),
            epochs: r.epochs,
            uncounted_gaps: r.uncounted_gaps.len(),
            missing_at_end: r.missing_at_end.len(),
            duplicates: r.duplicates,
            mismatches: r.mismatches.len(),
        }
    }
}

impl From<&JournalReport> for TruthFacts {
    fn from(r: &JournalReport) -> TruthFacts {
        TruthFacts {
            passed: r.passed(),
            epochs: r.epochs.len() as u64,
            uncounted_gaps: r.uncounted_gaps.len(),
            missing_at_end: r.missing.len(),
            duplicates: r.duplicates,
            mismatches: r.mismatches.len() + r.unknown.len(),
        }
    }
}

pub fn truth_facts(report: impl Into<TruthFacts>) -> Value {
    let f = report.into();
    json!({
        "passed": f.passed,
        "epochs": f.epochs,
        "uncounted_gaps": f.uncounted_gaps,
        "missing_at_end": f.missing_at_end,
        "duplicates": f.duplicates,
        "mismatches": f.mismatches,
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
        assert_eq!(kernel_log(&dir, Device::Ivshmem, &[]), json!("clean"));
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
