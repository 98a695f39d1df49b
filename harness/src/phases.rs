//! Progress lines with durations, one per phase, and a closing summary.

use anyhow::Result;
use std::time::{Duration, Instant};

#[derive(Default)]
pub struct Phases {
    done: Vec<(String, Duration, bool)>,
}

impl Phases {
    pub fn new() -> Phases {
        Phases::default()
    }

    /// Run one phase, printing its name first and its duration (or failure) after.
    pub fn run<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        println!("==> {name}");
        let start = Instant::now();
        // A Ctrl-C during a host command may have been absorbed by it: stop here.
        let result = match f() {
            Err(e) if crate::interrupt::requested() => Err(e.context(format!("interrupted during {name}"))),
            Ok(_) if crate::interrupt::requested() => Err(anyhow::anyhow!("interrupted during {name}")),
            other => other,
        };
        let took = start.elapsed();
        let ok = result.is_ok();
        println!(
            "    {name}: {} in {:.1}s",
            if ok { "done" } else { "FAILED" },
            took.as_secs_f64()
        );
        self.done.push((name.to_string(), took, ok));
        result
    }

    pub fn summary(&self) {
        let total: Duration = self.done.iter().map(|(_, d, _)| *d).sum();
        println!("phase timings:");
        for (name, took, ok) in &self.done {
            println!(
                "  {:<32} {:>7.1}s{}",
                name,
                took.as_secs_f64(),
                if *ok { "" } else { "  FAILED" }
            );
        }
        println!("  {:<32} {:>7.1}s", "total", total.as_secs_f64());
    }
}

/// The clock of a long run's progress lines: `due` says yes once every
/// `period`.
pub(crate) struct Every {
    period: Duration,
    last: Instant,
}

impl Every {
    pub(crate) fn new(period: Duration) -> Every {
        Every {
            period,
            last: Instant::now(),
        }
    }

    /// True when `period` has passed since the last time it said so (or
    /// since `new`).
    pub(crate) fn due(&mut self) -> bool {
        let due = self.last.elapsed() >= self.period;
        if due {
            self.last = Instant::now();
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_is_due_only_once_its_period_has_passed() {
        let mut hour = Every::new(Duration::from_secs(3600));
        assert!(!hour.due());
        let mut always = Every::new(Duration::ZERO);
        assert!(always.due() && always.due());
    }
}
