//! The test command's per-step wall times (issue #34): a table printed at
//! the end of `cargo xtask test`, also when a step fails (the failing step
//! marked), and the same figures as JSON in target/hmb-trace/test-times.json
//! so a CI run's times can be compared with another's.
//!
//! The steps are recorded through one process-wide recorder that
//! `test::step` feeds: the step list in test.rs stays a flat sequence of
//! `step("...")` calls (in loops too), so adding a step there is one line.
//!
//! Beside each step's time, the disk space left in the target directory's
//! file system when it ended: a CI run once failed with ENOSPC, and the
//! column says which steps take the room (docs/ci.md, "Disk").

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hmb_harness::output_disk::free_bytes;
use hmb_harness::target_dir;
use serde_json::json;

/// The recorder of the running `cargo xtask test`.
static RECORDER: Mutex<Times> = Mutex::new(Times::new());

/// Starts a step, closing the one before it as passed.
pub(crate) fn start(name: &str) {
    let free = free_now();
    lock().start(name, Instant::now(), free);
}

/// Free bytes where the run writes (the target directory; the caches and
/// the debug kernel's tree are under it unless HMB_TRACE_CACHE moves them).
/// `None` when the file system cannot be asked: the column is informative,
/// never a reason to fail the run.
fn free_now() -> Option<u64> {
    let dir = target_dir();
    let _ = std::fs::create_dir_all(&dir);
    free_bytes(&dir).ok()
}

/// Closes the last step (failed when `failed`), prints the table and writes
/// `json_path`. Writing the file is best effort when the run already failed:
/// the step's error is the one to report, so a write error is only printed.
pub(crate) fn report(failed: bool, json_path: &Path) -> Result<()> {
    let free = free_now();
    let mut times = lock();
    times.finish(Instant::now(), failed, free);
    print!("{}", times.table());
    let written = write_json(&times, json_path);
    match written {
        Ok(()) => {
            println!("step times written to {}", json_path.display());
            Ok(())
        }
        Err(e) if failed => {
            eprintln!("warning: {e:#}");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn lock() -> std::sync::MutexGuard<'static, Times> {
    // A panic while holding the lock cannot leave the list half-written
    // (each change is one push), so a poisoned lock is still usable.
    RECORDER.lock().unwrap_or_else(|p| p.into_inner())
}

fn write_json(times: &Times, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&times.json())? + "\n";
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug)]
struct Step {
    name: String,
    wall: Duration,
    outcome: Outcome,
    /// Free bytes when the step ended.
    free_after: Option<u64>,
}

/// Steps closed so far and the one running.
#[derive(Debug)]
pub(crate) struct Times {
    steps: Vec<Step>,
    running: Option<(String, Instant)>,
    /// Free bytes when the first step started.
    free_at_start: Option<u64>,
}

const GIB: f64 = (1u64 << 30) as f64;

impl Times {
    const fn new() -> Self {
        Times {
            steps: Vec::new(),
            running: None,
            free_at_start: None,
        }
    }

    fn start(&mut self, name: &str, now: Instant, free: Option<u64>) {
        if self.steps.is_empty() && self.running.is_none() {
            self.free_at_start = free;
        }
        self.close(now, Outcome::Passed, free);
        self.running = Some((name.to_string(), now));
    }

    fn finish(&mut self, now: Instant, failed: bool, free: Option<u64>) {
        let outcome = if failed { Outcome::Failed } else { Outcome::Passed };
        self.close(now, outcome, free);
    }

    fn close(&mut self, now: Instant, outcome: Outcome, free: Option<u64>) {
        if let Some((name, started)) = self.running.take() {
            self.steps.push(Step {
                name,
                wall: now.saturating_duration_since(started),
                outcome,
                free_after: free,
            });
        }
    }

    /// The step after which the least space was left, and that space.
    fn lowest_free(&self) -> Option<(&str, u64)> {
        self.steps
            .iter()
            .filter_map(|s| s.free_after.map(|f| (s.name.as_str(), f)))
            .min_by_key(|&(_, f)| f)
    }

    /// What the run took at its fullest: free space at the start less the
    /// lowest after a step (other writers on the machine count too).
    fn disk_line(&self) -> Option<String> {
        let start = self.free_at_start?;
        let (step, lowest) = self.lowest_free()?;
        Some(format!(
            "disk: {:.1} GiB free at the start, {:.1} GiB at the lowest (after: {step}): the run took {:.1} GiB\n",
            start as f64 / GIB,
            lowest as f64 / GIB,
            start.saturating_sub(lowest) as f64 / GIB
        ))
    }

    fn total(&self) -> Duration {
        self.steps.iter().map(|s| s.wall).sum()
    }

    fn failed_step(&self) -> Option<&str> {
        self.steps
            .iter()
            .find(|s| s.outcome == Outcome::Failed)
            .map(|s| s.name.as_str())
    }

    /// One line per step: wall seconds, share of the total, the name; the
    /// failed step marked `FAILED` so it stands out in a CI log.
    fn table(&self) -> String {
        let total = self.total().as_secs_f64();
        let mut out = String::from("\nxtask test: step times (wall) and the disk space left after each\n");
        out.push_str(&format!("{:>9}  {:>5}  {:>8}  step\n", "seconds", "%", "free GiB"));
        for s in &self.steps {
            let secs = s.wall.as_secs_f64();
            let share = if total > 0.0 { 100.0 * secs / total } else { 0.0 };
            let free = match s.free_after {
                Some(f) => format!("{:.1}", f as f64 / GIB),
                None => "?".to_string(),
            };
            let mark = match s.outcome {
                Outcome::Passed => "",
                Outcome::Failed => "  <== FAILED",
            };
            out.push_str(&format!("{secs:>9.1}  {share:>5.1}  {free:>8}  {}{mark}\n", s.name));
        }
        out.push_str(&format!("{total:>9.1}  {:>5.1}  {:>8}  total", 100.0, ""));
        match self.failed_step() {
            Some(name) => out.push_str(&format!(" (failed at: {name})\n")),
            None => out.push('\n'),
        }
        if let Some(line) = self.disk_line() {
            out.push_str(&line);
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "outcome": if self.failed_step().is_some() { "failed" } else { "passed" },
            "failed_step": self.failed_step(),
            "total_seconds": self.total().as_secs_f64(),
            "free_bytes_at_start": self.free_at_start,
            "steps": self.steps.iter().map(|s| json!({
                "name": s.name,
                "seconds": s.wall.as_secs_f64(),
                "outcome": s.outcome.as_str(),
                "free_bytes_after": s.free_after,
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1 << 30;

    /// Three steps of 2 s, 5 s and 3 s from a fixed origin; 20 GiB free at
    /// the start, 18 after fmt, 11 after host tests, 12 after guest.
    fn three(failed: bool) -> Times {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut t = Times::new();
        t.start("fmt", at(0), Some(20 * G));
        t.start("host tests", at(2), Some(18 * G));
        t.start("guest", at(7), Some(11 * G));
        t.finish(at(10), failed, Some(12 * G));
        t
    }

    #[test]
    fn each_step_closes_at_the_next_ones_start() {
        let t = three(false);
        let walls: Vec<u64> = t.steps.iter().map(|s| s.wall.as_secs()).collect();
        assert_eq!(walls, [2, 5, 3]);
        assert_eq!(t.total(), Duration::from_secs(10));
        assert!(t.steps.iter().all(|s| s.outcome == Outcome::Passed));
    }

    #[test]
    fn table_lists_every_step_and_the_total() {
        let table = three(false).table();
        assert!(table.contains("      2.0   20.0      18.0  fmt\n"), "{table}");
        assert!(table.contains("      5.0   50.0      11.0  host tests\n"), "{table}");
        assert!(table.contains("      3.0   30.0      12.0  guest\n"), "{table}");
        assert!(table.contains("     10.0  100.0            total\n"), "{table}");
        assert!(!table.contains("FAILED"), "{table}");
    }

    #[test]
    fn the_disk_line_names_the_fullest_point() {
        let t = three(false);
        assert_eq!(t.lowest_free(), Some(("host tests", 11 * G)));
        let table = t.table();
        assert!(
            table.ends_with(
                "disk: 20.0 GiB free at the start, 11.0 GiB at the lowest (after: host tests): the run took 9.0 GiB\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn an_unknown_free_space_is_a_question_mark_and_no_disk_line() {
        let t0 = Instant::now();
        let mut t = Times::new();
        t.start("fmt", t0, None);
        t.finish(t0 + Duration::from_secs(1), false, None);
        let table = t.table();
        assert!(table.contains("?  fmt\n"), "{table}");
        assert!(!table.contains("disk:"), "{table}");
    }

    #[test]
    fn a_failure_marks_the_running_step_only() {
        let t = three(true);
        assert_eq!(t.failed_step(), Some("guest"));
        let table = t.table();
        assert!(table.contains("guest  <== FAILED\n"), "{table}");
        assert!(!table.contains("host tests  <== FAILED"), "{table}");
        assert!(table.contains("total (failed at: guest)\n"), "{table}");
    }

    #[test]
    fn json_carries_names_seconds_and_the_failed_step() {
        let v = three(true).json();
        assert_eq!(v["outcome"], "failed");
        assert_eq!(v["failed_step"], "guest");
        assert_eq!(v["total_seconds"], 10.0);
        let steps = v["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[1]["name"], "host tests");
        assert_eq!(steps[1]["seconds"], 5.0);
        assert_eq!(steps[1]["outcome"], "passed");
        assert_eq!(steps[2]["outcome"], "failed");
        assert_eq!(v["free_bytes_at_start"], 20 * G);
        assert_eq!(steps[1]["free_bytes_after"], 11 * G);

        let ok = three(false).json();
        assert_eq!(ok["outcome"], "passed");
        assert!(ok["failed_step"].is_null());
    }

    #[test]
    fn no_steps_is_an_empty_table_not_a_division_by_zero() {
        let mut t = Times::new();
        t.finish(Instant::now(), true, Some(G));
        assert!(t.steps.is_empty());
        assert!(t.table().ends_with("      0.0  100.0            total\n"));
        assert_eq!(t.json()["outcome"], "passed");
    }

    #[test]
    fn json_file_round_trips() {
        let dir = std::env::temp_dir().join(format!("xtask-times-{}", std::process::id()));
        let path = dir.join("nested/test-times.json");
        write_json(&three(false), &path).unwrap();
        let back: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(back["steps"][0]["name"], "fmt");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
