//! The one early-boot retry. A TCG guest on a loaded host very rarely hangs
//! in early boot (seen on 7.x stuck after "tsc: Unable to calibrate against
//! PIT", and as an int3 Oops in sched_clock_cpu at 2.5 s on 6.12) before any
//! of our code runs. Such a boot is retried once, from scratch; anything
//! after the guest's init has started is never retried.

use std::time::Duration;

use anyhow::Result;

use crate::qemu::{Vm, WaitError};

/// Why a boot did not reach the guest's first marker.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// A timeout or a kernel fault before the marker: the early-boot flake.
    #[error("the guest kernel did not reach {marker} within {}s (last console line: {last_line:?})", .after.as_secs())]
    EarlyHang {
        marker: String,
        after: Duration,
        last_line: String,
    },
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
        other => other,
    }
}

/// Run `attempt` (start what the guest needs and boot it, waiting with
/// [`wait_started`]); when it ends in an early hang, say so and run it
/// once more. `attempt` gets the attempt's number (1 or 2).
pub(crate) fn retry_early_hang<T>(mut attempt: impl FnMut(u32) -> Result<T>) -> Result<T> {
    match attempt(1) {
        Err(e) if e.downcast_ref::<BootError>().is_some() => {
            println!("    {e}; retrying the boot once");
            attempt(2)
        }
        other => other,
    }
}
