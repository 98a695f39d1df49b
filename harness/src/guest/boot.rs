//! How a guest run ends when it does not end well, as one type, and the
//! one early-boot retry.
//!
//! A TCG guest on a loaded host very rarely hangs in early boot (seen on
//! 7.x stuck after "tsc: Unable to calibrate against PIT", and as an int3
//! Oops in sched_clock_cpu at 2.5 s on 6.12) before any of our code runs.
//! Such a boot is retried once, from scratch; anything after the guest's
//! init has started is never retried.

use std::time::Duration;

use anyhow::Result;

use crate::qemu::{Vm, WaitError};

/// Why a guest run (its boot, a wait on it, its script) failed. Callers
/// tell the kinds apart by variant, never by the message.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// A timeout or a kernel fault before the first marker: the early-boot
    /// flake, retried once.
    #[error("the guest kernel did not reach {marker} within {}s (last console line: {last_line:?})", .after.as_secs())]
    EarlyHang {
        marker: String,
        after: Duration,
        last_line: String,
    },
    /// The guest script ended with a non-zero exit code (or none).
    #[error("{script} failed (rc={code}); {detail}")]
    ScriptFailed {
        /// What the script is (e.g. "the guest job").
        script: String,
        code: i32,
        /// Where to look (a log file, the console tail).
        detail: String,
    },
    /// A wait on the running guest ended without its line: a kernel fault
    /// line on the console ([`WaitError::Fault`]), the deadline
    /// ([`WaitError::Timeout`]), QEMU exiting, Ctrl-C.
    #[error(transparent)]
    Wait(#[from] WaitError),
}

impl BootError {
    /// The kernel fault line a wait stopped at.
    pub fn fault_line(&self) -> Option<&str> {
        match self {
            BootError::Wait(WaitError::Fault { line, .. }) => Some(line),
            _ => None,
        }
    }

    /// A wait ran out of time (after the boot).
    pub fn is_timeout(&self) -> bool {
        matches!(self, BootError::Wait(WaitError::Timeout { .. }))
    }

    /// Somewhere in `e`'s chain, QEMU itself died of a signal (a crash of
    /// QEMU, not of the guest), whether the wait was the guest's or a
    /// direct one on its `Vm`.
    pub fn is_qemu_crash(e: &anyhow::Error) -> bool {
        e.chain().any(|c| {
            let wait = c
                .downcast_ref::<WaitError>()
                .or_else(|| match c.downcast_ref::<BootError>() {
                    Some(BootError::Wait(w)) => Some(w),
                    _ => None,
                });
            matches!(wait, Some(WaitError::Exited { signal: Some(_), .. }))
        })
    }

    /// Fail with [`BootError::ScriptFailed`] unless the script's exit code
    /// `code` is 0; `detail` says where to look.
    pub fn check_script(script: &str, code: i32, detail: impl FnOnce() -> String) -> Result<(), BootError> {
        match code {
            0 => Ok(()),
            _ => Err(BootError::ScriptFailed {
                script: script.to_string(),
                code,
                detail: detail(),
            }),
        }
    }
}

/// `e` with a [`WaitError`] at its top turned into [`BootError::Wait`]:
/// the guest layer's errors are `BootError`s; others pass unchanged.
pub(crate) fn typed(e: anyhow::Error) -> anyhow::Error {
    match e.downcast::<WaitError>() {
        Ok(wait) => BootError::Wait(wait).into(),
        Err(other) => other,
    }
}

/// Wait for the first line of ours (`marker`, e.g. HMBT-INIT); a timeout or
/// a kernel fault before it is a [`BootError::EarlyHang`].
pub(crate) fn wait_started(
    vm: &mut Vm,
    marker: &str,
    timeout: Duration,
    want: impl Fn(&str) -> bool,
) -> Result<String> {
    match vm.wait_for(marker, timeout, want) {
        Err(e) if WaitError::is_hang_or_fault(&e) => Err(BootError::EarlyHang {
            marker: marker.to_string(),
            after: timeout,
            last_line: vm.console.tail(1).trim().to_string(),
        }
        .into()),
        other => other.map_err(typed),
    }
}

/// Run `attempt` (start what the guest needs and boot it, waiting with
/// [`wait_started`]); when it ends in an early hang, say so and run it
/// once more. `attempt` gets the attempt's number (1 or 2).
pub(crate) fn retry_early_hang<T>(mut attempt: impl FnMut(u32) -> Result<T>) -> Result<T> {
    match attempt(1) {
        Err(e) if matches!(e.downcast_ref::<BootError>(), Some(BootError::EarlyHang { .. })) => {
            println!("    {e}; retrying the boot once");
            attempt(2)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    fn exited(signal: Option<i32>) -> WaitError {
        WaitError::Exited {
            status: "signal: 11 (SIGSEGV)".into(),
            signal,
            what: "HMBT-RESULT".into(),
            tail: String::new(),
        }
    }

    #[test]
    fn kinds_are_told_by_variant_through_context() {
        let wrapped = |w: WaitError| typed(w.into());
        let crash = Err::<(), _>(wrapped(exited(Some(11))))
            .context("scenario removal")
            .unwrap_err();
        assert!(BootError::is_qemu_crash(&crash));
        assert!(BootError::is_qemu_crash(&anyhow::Error::from(exited(Some(11)))));
        assert!(!BootError::is_qemu_crash(&wrapped(exited(None))));
        let fault = wrapped(WaitError::Fault {
            line: "BUG: kernel NULL pointer dereference".into(),
            console: String::new(),
            tail: String::new(),
        });
        let fault = fault.downcast_ref::<BootError>().unwrap();
        assert_eq!(fault.fault_line(), Some("BUG: kernel NULL pointer dereference"));
        assert!(!fault.is_timeout());
        let timeout = wrapped(WaitError::Timeout {
            what: "no HMBT-RESULT".into(),
            after: Duration::from_secs(9),
            console: String::new(),
        });
        assert!(timeout.downcast_ref::<BootError>().unwrap().is_timeout());
        // The message stays the inner one's.
        assert_eq!(timeout.to_string(), "timeout: no HMBT-RESULT within 9s");
        let other = typed(anyhow::anyhow!("timeout: a look-alike message"));
        assert!(other.downcast_ref::<BootError>().is_none());
    }

    #[test]
    fn only_an_early_hang_is_retried() {
        let mut tries = 0;
        let hang = retry_early_hang(|n| -> Result<u32> {
            tries += 1;
            match n {
                1 => Err(BootError::EarlyHang {
                    marker: "HMBT-INIT".into(),
                    after: Duration::from_secs(1),
                    last_line: String::new(),
                }
                .into()),
                _ => Ok(n),
            }
        });
        assert_eq!((hang.unwrap(), tries), (2, 2));
        let mut tries = 0;
        let failed = retry_early_hang(|_| -> Result<()> {
            tries += 1;
            Err(BootError::check_script("the guest job", 3, || "see x".into())
                .unwrap_err()
                .into())
        });
        assert_eq!(tries, 1);
        let e = failed.unwrap_err();
        assert!(matches!(
            e.downcast_ref::<BootError>(),
            Some(BootError::ScriptFailed { code: 3, .. })
        ));
        assert_eq!(e.to_string(), "the guest job failed (rc=3); see x");
        assert!(BootError::check_script("s", 0, String::new).is_ok());
    }
}
