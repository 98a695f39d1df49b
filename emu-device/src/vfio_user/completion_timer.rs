//! The thread that posts the completions `serve-nvme --timing model` holds back
//! (hmb-nvme's timing.rs): it sleeps until the next one is due, or until the controller
//! defers one (its waker), then lets the controller post what is due.
//!
//! Lock order: the waker runs under the controller's lock and takes the timer's state
//! lock briefly; the thread never holds the state lock while it takes the controller's.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hmb_nvme::Controller;

use super::backend::Shared;
use super::error::VfioUserError;

#[derive(Default)]
struct State {
    /// A completion was deferred since the thread last looked.
    kicked: bool,
    stop: bool,
}

#[derive(Default)]
struct Signal {
    state: Mutex<State>,
    cv: Condvar,
}

impl Signal {
    fn set(&self, f: impl FnOnce(&mut State)) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut st);
        self.cv.notify_one();
    }
}

pub(crate) struct CompletionTimer {
    signal: Arc<Signal>,
    thread: Option<JoinHandle<()>>,
}

impl CompletionTimer {
    /// Install the waker in `shared`'s controller and start the thread.
    pub(crate) fn start(shared: Arc<Shared<Controller>>) -> Result<CompletionTimer, VfioUserError> {
        let signal = Arc::new(Signal::default());
        let waker_signal = signal.clone();
        shared
            .function()
            .set_completion_waker(Arc::new(move |_due_ns| waker_signal.set(|s| s.kicked = true)));
        let thread_signal = signal.clone();
        let thread = std::thread::Builder::new()
            .name("nvme-completions".into())
            .spawn(move || run(&shared, &thread_signal))
            .map_err(|source| VfioUserError::Io {
                what: "spawning the completion timer thread",
                source,
            })?;
        Ok(CompletionTimer {
            signal,
            thread: Some(thread),
        })
    }
}

fn run(shared: &Shared<Controller>, signal: &Signal) {
    let mut wait: Option<Duration> = None;
    loop {
        {
            let mut st = signal.state.lock().unwrap_or_else(|p| p.into_inner());
            if !st.kicked && !st.stop {
                st = match wait {
                    Some(d) => signal.cv.wait_timeout(st, d).unwrap_or_else(|p| p.into_inner()).0,
                    None => signal.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
                };
            }
            if st.stop {
                return;
            }
            st.kicked = false;
        }
        wait = shared.function().post_due_completions();
    }
}

impl Drop for CompletionTimer {
    fn drop(&mut self) {
        self.signal.set(|s| s.stop = true);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the completion timer thread panicked");
            }
        }
    }
}
