//! When I/O completions are posted: at once (`Timing::None`, the fastest tests) or when
//! the FTL's timing model says the command's NAND work ends (`Timing::Model`), so the
//! latencies fio and the trace see are the model's.
//!
//! Under the model a command still runs when its doorbell is rung (its data moves then;
//! the host looks at it only after the CQE), and its completion waits in [`Deferred`]
//! until the controller clock reaches the end of its media work. A deferred completion
//! holds a slot of its CQ (`CompQueue::reserved`), so the CQ can never overflow when it
//! is posted. The transport calls [`crate::Controller::post_due_completions`] when the
//! waker it installed says the next one is due. Resets and Controller Fatal Status drop
//! what is deferred, as a device drops the commands it had in flight (the host aborts
//! and retries them); deleting an SQ posts its deferred completions first.

use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use crate::command::Completion;
use crate::Controller;

/// How completions are timed (`serve-nvme --timing`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// Post every completion as soon as its command ran (the model's times are still
    /// computed and traced, but nothing waits for them).
    #[default]
    None,
    /// Post each I/O completion when the timing model says its media work ends.
    Model,
}

impl std::fmt::Display for Timing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Timing::None => "none",
            Timing::Model => "model",
        })
    }
}

impl std::str::FromStr for Timing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" => Ok(Timing::None),
            "model" => Ok(Timing::Model),
            _ => Err(format!("timing {s:?} is neither \"none\" nor \"model\"")),
        }
    }
}

/// Told the due time (controller clock, ns) of each completion deferred; the transport
/// wakes its timer with it.
pub type CompletionWaker = Arc<dyn Fn(u64) + Send + Sync>;

/// A completion waiting for its modelled end (`media_end`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    /// Order of deferral: completions due at once are posted in the order they ran.
    seq: u64,
    completion: Completion,
}

impl Pending {
    fn due_ns(&self) -> u64 {
        self.completion.media_end
    }
}

impl Ord for Pending {
    /// Earliest due first (BinaryHeap is a max-heap).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (other.due_ns(), other.seq).cmp(&(self.due_ns(), self.seq))
    }
}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The completions the timing model holds back.
#[derive(Default)]
pub(crate) struct Deferred {
    heap: BinaryHeap<Pending>,
    seq: u64,
    pub(crate) waker: Option<CompletionWaker>,
}

impl Deferred {
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

impl Controller {
    /// Post an I/O command's completion now, or hold it until its `media_end` under the
    /// timing model. Returns whether it was posted (the caller raises the interrupt).
    pub(crate) fn complete_io(&mut self, c: Completion) -> bool {
        let now = self.now_ns();
        if self.cfg.timing == Timing::None || c.sqid == 0 || c.media_end <= now {
            self.post(c);
            return true;
        }
        if let Some(cq) = self.cqs[usize::from(c.cqid)].as_mut() {
            cq.reserved += 1;
        }
        self.deferred.seq += 1;
        self.deferred.heap.push(Pending {
            seq: self.deferred.seq,
            completion: c,
        });
        self.counters.deferred_completions += 1;
        if let Some(w) = &self.deferred.waker {
            w(c.media_end);
        }
        false
    }

    /// Post every deferred completion that is due (raising their CQs' interrupts) and
    /// return how long until the next is (None: nothing deferred). Nothing is posted while
    /// Bus Master Enable is off or the controller is in Controller Fatal Status.
    pub fn post_due_completions(&mut self) -> Option<Duration> {
        if !self.bus_master || self.fatal_reason.is_some() {
            return self.next_due();
        }
        let now = self.now_ns();
        let mut raise = Vec::new();
        while let Some(p) = self.deferred.heap.peek().copied() {
            if p.due_ns() > now {
                break;
            }
            self.deferred.heap.pop();
            self.post_deferred(p, &mut raise);
        }
        for cqid in raise {
            self.raise_cq(cqid);
        }
        self.next_due()
    }

    /// Time until the next deferred completion is due (zero if it is already).
    pub fn next_due(&self) -> Option<Duration> {
        let p = self.deferred.heap.peek()?;
        Some(Duration::from_nanos(p.due_ns().saturating_sub(self.now_ns())))
    }

    /// Time completions from now on; to `None`, what the model holds is posted at once
    /// (as it would be when due, only earlier).
    pub fn set_timing(&mut self, timing: Timing) {
        self.cfg.timing = timing;
        if timing == Timing::None {
            while let Some(p) = self.deferred.heap.peek().copied() {
                if !self.bus_master || self.fatal_reason.is_some() {
                    break;
                }
                self.deferred.heap.pop();
                let mut raise = Vec::new();
                self.post_deferred(p, &mut raise);
                for cqid in raise {
                    self.raise_cq(cqid);
                }
            }
        }
    }

    /// The transport's timer: called with the due time of every completion deferred.
    pub fn set_completion_waker(&mut self, waker: CompletionWaker) {
        self.deferred.waker = Some(waker);
    }

    fn post_deferred(&mut self, p: Pending, raise: &mut Vec<u16>) {
        let c = p.completion;
        let Some(cq) = self.cqs[usize::from(c.cqid)].as_mut() else {
            return; // the queues went away (a reset cleared the heap too)
        };
        cq.reserved = cq.reserved.saturating_sub(1);
        let ien = cq.ien;
        self.post(c);
        if ien && !raise.contains(&c.cqid) {
            raise.push(c.cqid);
        }
    }

    /// Post SQ `sqid`'s deferred completions now (Delete I/O SQ: its commands ran, so they
    /// complete before the queue goes).
    pub(crate) fn post_deferred_of_sq(&mut self, sqid: u16) {
        let (mine, rest): (Vec<Pending>, Vec<Pending>) = std::mem::take(&mut self.deferred.heap)
            .into_iter()
            .partition(|p| p.completion.sqid == sqid);
        self.deferred.heap = rest.into_iter().collect();
        let mut mine = mine;
        mine.sort_by_key(|p| (p.due_ns(), p.seq));
        let mut raise = Vec::new();
        for p in mine {
            self.post_deferred(p, &mut raise);
        }
        for cqid in raise {
            self.raise_cq(cqid);
        }
    }

    /// Forget every deferred completion (reset, Controller Fatal Status): their commands
    /// are lost to the host, which aborts and retries them.
    pub(crate) fn drop_deferred(&mut self) {
        self.counters.deferred_dropped += self.deferred.heap.len() as u64;
        self.deferred.heap.clear();
        for cq in self.cqs.iter_mut().flatten() {
            cq.reserved = 0;
        }
    }
}
