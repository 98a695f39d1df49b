//! The observer's calls of an I/O queue's pass, held back until the pass's interrupt is
//! raised, then made in the order they happened (issue 28: a 1 MiB write's latency).
//!
//! A 512 KiB Write is 258 observer events (the fetch, an L2P hit and a NAND program per
//! page, the completion); with the trace installed each is a record written into the
//! journal and the Telemetry history (or the adopted ring), about a tenth of the
//! command's time on the controller thread. They used to be made before the CQE and its
//! interrupt, so the host waited for them. Now an I/O queue's pass posts its CQEs and
//! raises its interrupt first and tells the observer afterwards, before the pass returns:
//! the same calls with the same contents (every time in them was taken when the event
//! happened), in the same order; only the wall-clock moment they are made moves past
//! the interrupt. An admin queue's pass is not held (Set Features C0h changes where
//! the records go), and anything that reads or ends the observer's state from within a
//! pass (the HMB released, a fatal status, a telemetry capture) releases what is held
//! first.

use hmb_ftl::FtlEvent;

use crate::media::MediaOp;
use crate::{CommandObserver, CompletionEvent, Controller, FetchEvent, FtlTraceEvent, MediaEvent};

/// Notes or FTL events held before what is held is made at once: bounds the memory of a
/// pass the host keeps feeding (shadow doorbells); holding then goes on.
const MAX_HELD: usize = 1 << 14;

/// One observer call, or the calls of one report of FTL events.
enum Note {
    Fetch(FetchEvent),
    /// `on_media` (a NAND operation) and `on_ftl` for each of events [from, to) of
    /// [`Held::events`], as [`tell_ftl`] makes them.
    Ftl {
        command: Option<(u16, u16)>,
        time_ns: u64,
        cache_in_hmb: bool,
        from: usize,
        to: usize,
    },
    Complete(CompletionEvent),
}

/// The held calls (kept allocated between passes).
#[derive(Default)]
pub(crate) struct Held {
    on: bool,
    notes: Vec<Note>,
    /// The FTL events the notes refer to, copied as one slice per report.
    events: Vec<FtlEvent>,
}

impl Controller {
    /// Hold the observer's calls until [`release_notes`](Self::release_notes).
    pub(crate) fn hold_notes(&mut self) {
        self.held.on = true;
    }

    /// Make every held call, in order, and stop holding.
    pub(crate) fn release_notes(&mut self) {
        self.held.on = false;
        self.replay_notes();
    }

    fn replay_notes(&mut self) {
        let Held { notes, events, .. } = &mut self.held;
        let observer = &mut *self.observer;
        for n in notes.drain(..) {
            tell(observer, events, n);
        }
        events.clear();
    }

    /// What is held made at once if one more note and `events` more FTL events would pass
    /// [`MAX_HELD`].
    fn make_room(&mut self, events: usize) {
        if self.held.notes.len() >= MAX_HELD || self.held.events.len() + events > MAX_HELD {
            self.replay_notes();
        }
    }

    /// Tell the observer of a fetch now, or hold it.
    pub(crate) fn note_fetch(&mut self, e: FetchEvent) {
        self.note(Note::Fetch(e));
    }

    /// Tell the observer of a completion now, or hold it.
    pub(crate) fn note_complete(&mut self, e: CompletionEvent) {
        self.note(Note::Complete(e));
    }

    /// Tell the observer of a note that carries its own event now, or hold it.
    fn note(&mut self, n: Note) {
        if self.held.on {
            self.make_room(0);
            self.held.notes.push(n);
        } else {
            tell(&mut *self.observer, &self.held.events, n);
        }
    }

    /// Tell the observer the FTL events `ev` of `command` (None: background) now, or hold
    /// them.
    pub(crate) fn note_ftl(&mut self, command: Option<(u16, u16)>, time_ns: u64, cache_in_hmb: bool, ev: &[FtlEvent]) {
        if !self.held.on {
            return tell_ftl(&mut *self.observer, command, time_ns, cache_in_hmb, ev);
        }
        self.make_room(ev.len());
        let from = self.held.events.len();
        self.held.events.extend_from_slice(ev);
        self.held.notes.push(Note::Ftl {
            command,
            time_ns,
            cache_in_hmb,
            from,
            to: self.held.events.len(),
        });
    }
}

/// The observer's call (or calls) for note `n`, the FTL events it refers to in `events`.
fn tell(observer: &mut dyn CommandObserver, events: &[FtlEvent], n: Note) {
    match n {
        Note::Fetch(e) => observer.on_fetch(&e),
        Note::Ftl {
            command,
            time_ns,
            cache_in_hmb,
            from,
            to,
        } => tell_ftl(observer, command, time_ns, cache_in_hmb, &events[from..to]),
        Note::Complete(e) => observer.on_complete(&e),
    }
}

/// The observer's calls for FTL events `ev`: each NAND operation as `on_media`, then
/// every event as `on_ftl`, in order.
fn tell_ftl(
    observer: &mut dyn CommandObserver,
    command: Option<(u16, u16)>,
    time_ns: u64,
    cache_in_hmb: bool,
    ev: &[FtlEvent],
) {
    let (qid, cid) = command.unwrap_or((u16::MAX, u16::MAX));
    for e in ev {
        if let FtlEvent::Nand(op) = e {
            observer.on_media(&MediaEvent {
                qid,
                cid,
                op: MediaOp::from(op),
            });
        }
        observer.on_ftl(&FtlTraceEvent {
            command,
            time_ns,
            cache_in_hmb,
            event: *e,
        });
    }
}
