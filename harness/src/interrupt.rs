//! Ctrl-C and SIGTERM become an error in the wait loops, so that every
//! guard (QEMU, mounts) is dropped and cleans up instead of the process
//! dying on the spot.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

static REQUESTED: AtomicBool = AtomicBool::new(false);
static INSTALL: Once = Once::new();

extern "C" fn on_signal(_: nix::libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Install the handlers (idempotent).
pub fn install() {
    INSTALL.call_once(|| {
        use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
        let action = SigAction::new(SigHandler::Handler(on_signal), SaFlags::empty(), SigSet::empty());
        for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            if let Err(e) = unsafe { sigaction(sig, &action) } {
                eprintln!("warning: cannot catch {sig}: {e}");
            }
        }
    });
}

pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
