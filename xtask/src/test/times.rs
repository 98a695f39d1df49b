//! The test command's per-step wall times (issue #34): a table printed at
//! the end of `cargo xtask test`, also when a step fails (the failing step
//! marked), and the same figures as JSON in target/hmb-trace/test-times.json
//! so a CI run's times can be compared with another's.
//!
//! The steps are recorded through one process-wide recorder that
//! `test::step` feeds: the step list in test.rs stays a flat sequence of
//! `step("...")` calls (in loops too), so adding a step there is one line.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::json;

/// The recorder of the running `cargo xtask test`.
static RECORDER: Mutex<Times> = Mutex::new(Times::new());

/// Starts a step, closing the one before it as passed.
pub(crate) fn start(name: &str) {
    lock().start(name, Instant::now());
}

/// Closes the last step (failed when `failed`), prints the table and writes
/// `json_path`. Writing the file is best effort when the run already failed:
/// the step's error is the one to report, so a write error is only printed.
pub(crate) fn report(failed: bool, json_path: &Path) -> Result<()> {
    let mut times = lock();
    times.finish(Instant::now(), failed);
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
}

/// Steps closed so far and the one running.
#[derive(Debug)]
pub(crate) struct Times {
    steps: Vec<Step>,
    running: Option<(String, Instant)>,
}

impl Times {
    const fn new() -> Self {
        Times {
            steps: Vec::new(),
            running: None,
        }
    }

    fn start(&mut self, name: &str, now: Instant) {
        self.close(now, Outcome::Passed);
        self.running = Some((name.to_string(), now));
    }

    fn finish(&mut self, now: Instant, failed: bool) {
        self.close(now, if failed { Outcome::Failed } else { Outcome::Passed });
    }

    fn close(&mut self, now: Instant, outcome: Outcome) {
        if let Some((name, started)) = self.running.take() {
            self.steps.push(Step {
                name,
                wall: now.saturating_duration_since(started),
                outcome,
            });
        }
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
        let mut out = String::from("\nxtask test: step times (wall)\n");
        out.push_str(&format!("{:>9}  {:>5}  step\n", "seconds", "%"));
        for s in &self.steps {
            let secs = s.wall.as_secs_f64();
            let share = if total > 0.0 { 100.0 * secs / total } else { 0.0 };
            let mark = match s.outcome {
                Outcome::Passed => "",
                Outcome::Failed => "  <== FAILED",
            };
            out.push_str(&format!("{secs:>9.1}  {share:>5.1}  {}{mark}\n", s.name));
        }
        out.push_str(&format!("{total:>9.1}  {:>5.1}  total", 100.0));
        match self.failed_step() {
            Some(name) => out.push_str(&format!(" (failed at: {name})\n")),
            None => out.push('\n'),
        }
        out
    }

    fn json(&self) -> serde_json::Value {
        json!({
            "outcome": if self.failed_step().is_some() { "failed" } else { "passed" },
            "failed_step": self.failed_step(),
            "total_seconds": self.total().as_secs_f64(),
            "steps": self.steps.iter().map(|s| json!({
                "name": s.name,
                "seconds": s.wall.as_secs_f64(),
                "outcome": s.outcome.as_str(),
            })).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three steps of 2 s, 5 s and 3 s from a fixed origin.
    fn three(failed: bool) -> Times {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut t = Times::new();
        t.start("fmt", at(0));
        t.start("host tests", at(2));
        t.start("guest", at(7));
        t.finish(at(10), failed);
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
        assert!(table.contains("      2.0   20.0  fmt\n"), "{table}");
        assert!(table.contains("      5.0   50.0  host tests\n"), "{table}");
        assert!(table.contains("      3.0   30.0  guest\n"), "{table}");
        assert!(table.ends_with("     10.0  100.0  total\n"), "{table}");
        assert!(!table.contains("FAILED"), "{table}");
    }

    #[test]
    fn a_failure_marks_the_running_step_only() {
        let t = three(true);
        assert_eq!(t.failed_step(), Some("guest"));
        let table = t.table();
        assert!(table.contains("guest  <== FAILED\n"), "{table}");
        assert!(!table.contains("host tests  <== FAILED"), "{table}");
        assert!(table.ends_with("total (failed at: guest)\n"), "{table}");
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

        let ok = three(false).json();
        assert_eq!(ok["outcome"], "passed");
        assert!(ok["failed_step"].is_null());
    }

    #[test]
    fn no_steps_is_an_empty_table_not_a_division_by_zero() {
        let mut t = Times::new();
        t.finish(Instant::now(), true);
        assert!(t.steps.is_empty());
        assert!(t.table().ends_with("      0.0  100.0  total\n"));
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
