//! One persistent helper thread that runs a piece of work beside the calling thread and
//! hands it back before the caller returns: the second half of a large transfer's
//! `preadv`/`pwritev` (vectored.rs), as QEMU's nvme runs a 1 MiB transfer's two commands
//! on two thread-pool workers at once. Persistent, so a command pays a wake-up, not a
//! thread spawn. The work may borrow the caller's stack: [`run_beside`] does not return
//! (nor unwind) before the helper is done with it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::OnceLock;
use std::thread::{self, Thread};

/// The caller's wait: set by the helper when the work is done, then the caller unparked.
struct Done {
    flag: AtomicBool,
    waiter: Thread,
}

/// Work for the helper: pointers into the caller's stack, valid until `done` is set.
struct Job {
    work: *mut (dyn FnMut() + Send + 'static),
    done: *const Done,
}

// SAFETY: `work` is `Send` and both pointers stay valid until the helper sets `done`'s
// flag (`run_beside` waits for it, also when unwinding); the helper touches neither after.
unsafe impl Send for Job {}

/// The helper's queue; None if the thread could not be started (the work then runs on
/// the calling thread, after its own part).
fn helper() -> Option<&'static Sender<Job>> {
    static HELPER: OnceLock<Option<Sender<Job>>> = OnceLock::new();
    HELPER
        .get_or_init(|| {
            let (tx, rx) = channel::<Job>();
            let spawned = thread::Builder::new().name("hmb-io-half".into()).spawn(move || {
                for job in rx {
                    // SAFETY: `Job`'s contract: both live until the flag is set. A panic
                    // stays here; the work's own result slot says it did not finish.
                    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.work)() }));
                    let done = unsafe { &*job.done };
                    // The caller may return (and free `done`) as soon as the flag is set.
                    let waiter = done.waiter.clone();
                    done.flag.store(true, Ordering::Release);
                    waiter.unpark();
                }
            });
            spawned.ok().map(|_| tx)
        })
        .as_ref()
}

/// Waits for the helper's flag when dropped: on return and on unwinding alike, so that the
/// work's borrows outlive the helper's use of them.
struct WaitFor<'a>(&'a Done);

impl Drop for WaitFor<'_> {
    fn drop(&mut self) {
        while !self.0.flag.load(Ordering::Acquire) {
            thread::park();
        }
    }
}

/// Run `side` on the helper thread and `here` on this one at the same time; return
/// `here`'s result once both are done. Without a helper, `side` runs here afterwards.
pub(crate) fn run_beside<R>(side: &mut (dyn FnMut() + Send), here: impl FnOnce() -> R) -> R {
    let Some(helper) = helper() else {
        let r = here();
        side();
        return r;
    };
    let done = Done {
        flag: AtomicBool::new(false),
        waiter: thread::current(),
    };
    // SAFETY: only the lifetime is erased; `wait` below keeps this frame (and so what
    // `side` borrows) alive until the helper has set the flag.
    let work: *mut (dyn FnMut() + Send + 'static) = unsafe { std::mem::transmute(side as *mut (dyn FnMut() + Send)) };
    let job = Job { work, done: &done };
    if let Err(unsent) = helper.send(job) {
        // The helper is gone (it never exits while its queue lives, so: not expected).
        let r = here();
        // SAFETY: never handed to the helper; `work` is `side`, still borrowed here.
        unsafe { (*unsent.0.work)() };
        return r;
    }
    let wait = WaitFor(&done);
    let r = here();
    drop(wait);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both parts run, on two threads, and the side's writes into the caller's stack are
    /// visible when `run_beside` returns.
    #[test]
    fn the_side_runs_on_another_thread_and_is_done_on_return() {
        for _ in 0..100 {
            let me = thread::current().id();
            let mut side_thread = None;
            let mut side = || side_thread = Some(thread::current().id());
            let here = run_beside(&mut side, || thread::current().id());
            assert_eq!(here, me);
            let side_thread = side_thread.expect("the side ran");
            assert_ne!(side_thread, me, "the side ran on the helper");
        }
    }

    /// A panic on the calling thread still waits for the side (which borrows the frame).
    #[test]
    fn a_panic_here_waits_for_the_side() {
        let finished = AtomicBool::new(false);
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut side = || {
                thread::sleep(std::time::Duration::from_millis(20));
                finished.store(true, Ordering::SeqCst);
            };
            run_beside(&mut side, || panic!("here fails"))
        }));
        assert!(r.is_err());
        assert!(finished.load(Ordering::SeqCst), "unwound only after the side was done");
    }

    /// A panicking side leaves the helper working for the next caller.
    #[test]
    fn a_panicking_side_leaves_the_helper_alive() {
        let mut side = || panic!("side fails");
        run_beside(&mut side, || ());
        let mut ran = false;
        let mut side = || ran = true;
        run_beside(&mut side, || ());
        assert!(ran);
    }
}
