//! One persistent helper thread that runs a piece of work beside the calling thread and
//! hands it back before the caller returns: the second half of a large transfer's
//! `preadv`/`pwritev` (vectored.rs), as QEMU's nvme runs a 1 MiB transfer's two commands
//! on two thread-pool workers at once. Persistent, so a command pays a wake-up, not a
//! thread spawn. The work may borrow the caller's stack: [`run_beside`] does not return
//! (nor unwind) before the helper is done with it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, OnceLock};
use std::thread::{self, Thread};

/// A job's state: queued, then taken by whichever thread claims it first (the helper, or
/// the caller once its own part is done: on a busy host the helper may not get a core in
/// time, and then the caller does the work itself rather than wait for it), then done.
const QUEUED: u8 = 0;
const HELPER_HAS_IT: u8 = 1;
const CALLER_HAS_IT: u8 = 2;
const HELPER_DONE: u8 = 3;

/// Shared by the caller and the helper (an `Arc`: the helper may look at a job the caller
/// has already claimed and returned from).
struct State {
    state: AtomicU8,
    waiter: Thread,
}

/// Work for the helper: a pointer into the caller's stack, dereferenced only by the
/// thread that claims the job, and valid until `state` says done or claimed by the caller.
struct Job {
    work: *mut (dyn FnMut() + Send + 'static),
    state: Arc<State>,
}

// SAFETY: `work` is `Send`; the helper dereferences it only after claiming the job
// (QUEUED -> HELPER_HAS_IT), and the caller does not return (nor unwind) before the
// helper has set HELPER_DONE in that case.
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
                    if job
                        .state
                        .state
                        .compare_exchange(QUEUED, HELPER_HAS_IT, Ordering::Acquire, Ordering::Acquire)
                        .is_err()
                    {
                        continue; // the caller did it
                    }
                    // SAFETY: claimed, so `work` lives until HELPER_DONE is set. A panic
                    // stays here; the work's own result slot says it did not finish.
                    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (*job.work)() }));
                    job.state.state.store(HELPER_DONE, Ordering::Release);
                    job.state.waiter.unpark();
                }
            });
            spawned.ok().map(|_| tx)
        })
        .as_ref()
}

/// Settles the job when dropped, on return and on unwinding alike: claims it and runs
/// the work here if the helper has not started it, else waits until the helper is done
/// with it, so that the work's borrows outlive every use of them.
struct Settle<'a> {
    state: &'a State,
    work: &'a mut (dyn FnMut() + Send),
}

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        if self
            .state
            .state
            .compare_exchange(QUEUED, CALLER_HAS_IT, Ordering::Acquire, Ordering::Acquire)
            .is_ok()
        {
            if !thread::panicking() {
                (self.work)();
            }
            return;
        }
        while self.state.state.load(Ordering::Acquire) != HELPER_DONE {
            thread::park();
        }
    }
}

/// Run `side` on the helper thread and `here` on this one at the same time; return
/// `here`'s result once `side` is done too. If the helper has not started `side` by the
/// time `here` is done (no free core), or there is no helper, `side` runs here after it.
pub(crate) fn run_beside<R>(side: &mut (dyn FnMut() + Send), here: impl FnOnce() -> R) -> R {
    let Some(helper) = helper() else {
        let r = here();
        side();
        return r;
    };
    let state = Arc::new(State {
        state: AtomicU8::new(QUEUED),
        waiter: thread::current(),
    });
    // SAFETY: only the lifetime is erased; `Settle` below keeps this frame (and so what
    // `side` borrows) alive until the job is claimed here or the helper is done with it.
    let work: *mut (dyn FnMut() + Send + 'static) =
        unsafe { std::mem::transmute(&mut *side as *mut (dyn FnMut() + Send)) };
    // If the helper is gone (not expected: it never exits while its queue lives), the
    // job stays QUEUED and `Settle` runs it here.
    let _ = helper.send(Job {
        work,
        state: state.clone(),
    });
    let settle = Settle {
        state: &state,
        work: side,
    };
    let r = here();
    drop(settle);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    /// `here` that waits (at most 10 s) until the side has started, so that the side is
    /// the helper's.
    fn wait_for(started: &AtomicBool) {
        let t0 = Instant::now();
        while !started.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(10) {
            thread::yield_now();
        }
    }

    /// The side runs on another thread while `here` runs, and its writes into the
    /// caller's stack are visible when `run_beside` returns.
    #[test]
    fn the_side_runs_on_the_helper_and_is_done_on_return() {
        for _ in 0..20 {
            let me = thread::current().id();
            let started = AtomicBool::new(false);
            let mut side_thread = None;
            let mut side = || {
                started.store(true, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(1));
                side_thread = Some(thread::current().id());
            };
            let here = run_beside(&mut side, || {
                wait_for(&started);
                thread::current().id()
            });
            assert_eq!(here, me);
            assert_ne!(side_thread.expect("the side ran"), me, "the side ran on the helper");
        }
    }

    /// A helper busy with another caller's work: the side runs here, after `here`,
    /// rather than waiting for the helper.
    #[test]
    fn a_busy_helper_leaves_the_side_to_the_caller() {
        let (started, release) = (AtomicBool::new(false), AtomicBool::new(false));
        thread::scope(|s| {
            s.spawn(|| {
                let mut long = || {
                    started.store(true, Ordering::SeqCst);
                    while !release.load(Ordering::SeqCst) {
                        thread::yield_now();
                    }
                };
                run_beside(&mut long, || wait_for(&started));
            });
            wait_for(&started);
            let me = thread::current().id();
            let mut side_thread = None;
            let mut side = || side_thread = Some(thread::current().id());
            run_beside(&mut side, || ());
            release.store(true, Ordering::SeqCst);
            assert_eq!(side_thread, Some(me), "done here while the helper was busy");
        });
    }

    /// A panic on the calling thread: the side either never started or is done before
    /// the panic leaves `run_beside` (it borrows the frame).
    #[test]
    fn a_panic_here_settles_the_side_first() {
        for wait in [false, true] {
            let (started, finished) = (AtomicBool::new(false), AtomicBool::new(false));
            let r = catch_unwind(AssertUnwindSafe(|| {
                let mut side = || {
                    started.store(true, Ordering::SeqCst);
                    thread::sleep(Duration::from_millis(20));
                    finished.store(true, Ordering::SeqCst);
                };
                run_beside(&mut side, || {
                    if wait {
                        wait_for(&started);
                    }
                    panic!("here fails")
                })
            }));
            assert!(r.is_err());
            assert_eq!(started.load(Ordering::SeqCst), finished.load(Ordering::SeqCst));
            if wait {
                assert!(finished.load(Ordering::SeqCst));
            }
        }
    }

    /// A panicking side leaves the helper working for the next caller.
    #[test]
    fn a_panicking_side_leaves_the_helper_alive() {
        let started = AtomicBool::new(false);
        let mut side = || {
            started.store(true, Ordering::SeqCst);
            panic!("side fails")
        };
        run_beside(&mut side, || wait_for(&started));
        let started = AtomicBool::new(false);
        let mut side_thread = None;
        let mut side = || {
            started.store(true, Ordering::SeqCst);
            side_thread = Some(thread::current().id());
        };
        run_beside(&mut side, || wait_for(&started));
        assert_ne!(side_thread, Some(thread::current().id()));
        assert!(side_thread.is_some());
    }
}
