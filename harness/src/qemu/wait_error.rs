//! Why a wait on a running guest ended without what it waited for, as a
//! type: callers tell a timeout (poll again) or an early-boot flake (retry
//! the boot) from the rest by its variant, never by the message. The guest
//! layer wraps it in `guest::BootError`.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The deadline passed first.
    #[error("timeout: {what} within {}s{console}", .after.as_secs())]
    Timeout {
        what: String,
        after: Duration,
        /// The console file and tail (may be empty).
        console: String,
    },
    /// The console showed a kernel fault line (Oops, BUG, WARNING, ...).
    #[error("guest kernel fault: {line}\n(console {console}):\n{tail}")]
    Fault {
        line: String,
        console: String,
        tail: String,
    },
    /// QEMU exited while the wait went on (`signal`: killed by one, a crash).
    #[error("QEMU exited ({status}) while waiting for {what}; console:\n{tail}")]
    Exited {
        status: String,
        signal: Option<i32>,
        what: String,
        tail: String,
    },
    /// Ctrl-C.
    #[error("interrupted while waiting for {0}")]
    Interrupted(String),
    /// QEMU was already reaped.
    #[error("QEMU is not running")]
    NotRunning,
}

impl WaitError {
    /// `e` is this type's `Timeout`.
    pub(crate) fn is_timeout(e: &anyhow::Error) -> bool {
        matches!(e.downcast_ref::<WaitError>(), Some(WaitError::Timeout { .. }))
    }

    /// `e` is a timeout or a kernel fault: before the guest's init has run,
    /// TCG's rare early-boot flake (nothing of ours has run yet).
    pub(crate) fn is_hang_or_fault(e: &anyhow::Error) -> bool {
        matches!(
            e.downcast_ref::<WaitError>(),
            Some(WaitError::Timeout { .. } | WaitError::Fault { .. })
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(signal: Option<i32>) -> anyhow::Error {
        WaitError::Exited {
            status: "signal: 11 (SIGSEGV)".into(),
            signal,
            what: "HMBT-RESULT".into(),
            tail: String::new(),
        }
        .into()
    }

    #[test]
    fn kinds_are_told_by_type_through_context() {
        let timeout: anyhow::Error = WaitError::Timeout {
            what: "no HMBT-INIT".into(),
            after: Duration::from_secs(90),
            console: String::new(),
        }
        .into();
        assert!(WaitError::is_timeout(&timeout) && WaitError::is_hang_or_fault(&timeout));
        assert!(timeout.to_string().starts_with("timeout: no HMBT-INIT within 90s"));
        assert!(!WaitError::is_hang_or_fault(&exited(Some(11))));
        assert!(!WaitError::is_timeout(&anyhow::anyhow!(
            "timeout: a look-alike message"
        )));
    }
}
