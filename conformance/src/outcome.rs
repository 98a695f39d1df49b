//! Turning a finished session into a normalised outcome: facts that must be
//! the same on every kernel and every run.

use std::path::Path;

use anyhow::{Context, Result};
use hmb_harness::guest_script::files;
use hmb_harness::truth::{self, Segment, TruthReport};
use serde_json::{json, Value};

/// Kernel log lines that fail any scenario.
const BAD_KERNEL_LINES: &[&str] = &[
    "WARNING:",
    "BUG:",
    "Oops",
    "KASAN",
    "UBSAN",
    "Call Trace",
    "general protection",
];

/// Problem lines of the guest's kernel log (dmesg.txt) and console.
pub fn kernel_log_problems(run_dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for name in [files::DMESG, "console.log"] {
        let text = std::fs::read_to_string(run_dir.join(name)).unwrap_or_default();
        bad.extend(
            text.lines()
                .filter(|l| BAD_KERNEL_LINES.iter().any(|b| l.contains(b)))
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
pub fn check_truth(run_dir: &Path, ground_truth: &Value, stats: &Value) -> Result<TruthReport> {
    let segments: Vec<Segment> =
        serde_json::from_value(ground_truth["segments"].clone()).context("ground truth has no segments")?;
    truth::check(&run_dir.join(files::TRACE), &segments, truth::live_ring(stats))
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
