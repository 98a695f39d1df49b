//! SIGINT/SIGTERM: finish the current batch and exit 0. SIGHUP: reopen the
//! output file. Handlers only set flags; the drain loop acts on them.

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

static STOP: AtomicBool = AtomicBool::new(false);
static REOPEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: i32) {
    if sig == Signal::SIGHUP as i32 {
        REOPEN.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
}

/// Install the handlers without SA_RESTART, so poll() returns EINTR.
pub fn install() -> nix::Result<()> {
    let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to atomics (async-signal-safe).
        unsafe { sigaction(sig, &action) }?;
    }
    // A file size limit (RLIMIT_FSIZE) would otherwise kill the daemon in
    // the middle of a write with SIGXFSZ, leaving a torn item; ignored, the
    // write fails with EFBIG like ENOSPC, and the daemon rolls the file back
    // to its last whole item and exits with OUTPUT_FULL.
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    // SAFETY: installs no handler code.
    unsafe { sigaction(Signal::SIGXFSZ, &ignore) }?;
    Ok(())
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}

/// Take a pending reopen request.
pub fn take_reopen() -> bool {
    REOPEN.swap(false, Ordering::SeqCst)
}

/// Whether any request is pending (to cut a sleep short).
pub fn pending() -> bool {
    STOP.load(Ordering::SeqCst) || REOPEN.load(Ordering::SeqCst)
}
