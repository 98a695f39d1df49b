//! `--inject` specs: `reset[@SECS]` and `stall@SECS:DUR`.

use std::str::FromStr;
use std::time::Duration;

use anyhow::{bail, Context};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Injection {
    /// Controller reset at `at` (default: half-way through the run).
    Reset { at: Option<Duration> },
    /// QMP stop at `at`, cont `dur` later: the guest stops draining, so the
    /// ring really overflows.
    Stall { at: Duration, dur: Duration },
}

impl Injection {
    /// When it fires, for a run of `duration`.
    pub fn at(&self, duration: Duration) -> Duration {
        match *self {
            Injection::Reset { at } => at.unwrap_or(duration / 2),
            Injection::Stall { at, .. } => at,
        }
    }
}

fn secs(s: &str) -> anyhow::Result<Duration> {
    let v: f64 = s
        .trim_end_matches('s')
        .parse()
        .with_context(|| format!("{s:?} is not a number of seconds"))?;
    if !(0.0..=86_400.0).contains(&v) {
        bail!("{s:?} is out of range");
    }
    Ok(Duration::from_secs_f64(v))
}

impl FromStr for Injection {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> anyhow::Result<Self> {
        let (kind, when) = match s.split_once('@') {
            Some((k, w)) => (k, Some(w)),
            None => (s, None),
        };
        match (kind, when) {
            ("reset", None) => Ok(Injection::Reset { at: None }),
            ("reset", Some(w)) => Ok(Injection::Reset { at: Some(secs(w)?) }),
            ("stall", Some(w)) => {
                let (at, dur) = w.split_once(':').context("stall needs @SECS:DUR, e.g. stall@2:1.5")?;
                Ok(Injection::Stall {
                    at: secs(at)?,
                    dur: secs(dur)?,
                })
            }
            ("stall", None) => bail!("stall needs @SECS:DUR, e.g. stall@2:1.5"),
            _ => bail!("unknown injection {s:?}: use reset[@SECS] or stall@SECS:DUR"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!("reset".parse::<Injection>().unwrap(), Injection::Reset { at: None });
        assert_eq!(
            "reset@1.5".parse::<Injection>().unwrap(),
            Injection::Reset {
                at: Some(Duration::from_millis(1500))
            }
        );
        assert_eq!(
            "stall@2:3".parse::<Injection>().unwrap(),
            Injection::Stall {
                at: Duration::from_secs(2),
                dur: Duration::from_secs(3)
            }
        );
        assert!("stall".parse::<Injection>().is_err());
        assert!("reboot".parse::<Injection>().is_err());
        assert!("reset@-1".parse::<Injection>().is_err());
    }
}
