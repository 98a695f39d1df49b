//! Shadow doorbells (Doorbell Buffer Config, admin 7Ch; OACS bit 8), I/O queues only, as
//! Linux's driver uses them: the host writes each new SQ tail / CQ head into the shadow
//! doorbell buffer and writes the MMIO doorbell only when the move crosses the queue's
//! EventIdx (`nvme_dbbuf_need_event`: EventIdx in [old, new), 16-bit arithmetic).
//!
//! The EventIdx policy saves the transport's messages (each MMIO doorbell is one vfio-user
//! message): SQ EventIdx = the tail the controller has consumed, so the host rings for the
//! first new command after the controller went idle (the controller does not poll); CQ
//! EventIdx = one before the head the controller last read, which the host's head cannot
//! cross without the controller posting past it first, so the host never rings the CQ head
//! doorbell, unless the CQ is full with work waiting: then EventIdx = that head, and the
//! host's next head move rings. The controller reads the shadow CQ head itself when the CQ
//! looks full, and the shadow SQ tail whenever it processes the SQ.
//!
//! Ordering (the Linux side: write shadow, `mb()`, read EventIdx): the controller writes an
//! EventIdx, then a full fence, then reads the shadow value again, so a host move either
//! sees the new EventIdx (and rings) or is seen by that second read. A CQ EventIdx is
//! written before any CQE that lets the host's head reach it.

use std::sync::atomic::{fence, Ordering};

use vm_memory::{Bytes, GuestAddress, GuestAddressSpace};

use crate::{dma, Controller};

/// Bytes per queue pair in each buffer (CAP.DSTRD = 0): SQ y at 8y, CQ y at 8y + 4.
pub(crate) const PAIR_BYTES: u64 = 8;

/// The two buffers of a Doorbell Buffer Config, page aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DoorbellBuffers {
    /// Shadow doorbells (host writes, controller reads).
    pub dbs: u64,
    /// EventIdx (controller writes, host reads).
    pub eis: u64,
}

impl DoorbellBuffers {
    fn sq_db(&self, qid: u16) -> u64 {
        self.dbs + u64::from(qid) * PAIR_BYTES
    }
    fn cq_db(&self, qid: u16) -> u64 {
        self.dbs + u64::from(qid) * PAIR_BYTES + 4
    }
    fn sq_ei(&self, qid: u16) -> u64 {
        self.eis + u64::from(qid) * PAIR_BYTES
    }
    fn cq_ei(&self, qid: u16) -> u64 {
        self.eis + u64::from(qid) * PAIR_BYTES + 4
    }
}

/// Why a shadow value was not taken.
enum Shadow {
    /// Not in guest memory any more (unmapped after the config): Controller Fatal Status.
    Unreachable(u64),
    /// Out of range for the queue: ignored (the last valid value stays), counted.
    Invalid,
}

impl Controller {
    /// The buffers of I/O queue `qid` (None: the admin queue, or no config).
    pub(crate) fn shadow(&self, qid: u16) -> Option<DoorbellBuffers> {
        if qid == 0 {
            return None;
        }
        self.dbbuf
    }

    fn load_u32(&self, addr: u64) -> Result<u32, Shadow> {
        if addr.is_multiple_of(4) {
            if let Ok(v) = self.mem.memory().load::<u32>(GuestAddress(addr), Ordering::Acquire) {
                return Ok(u32::from_le(v));
            }
        }
        Err(Shadow::Unreachable(addr))
    }

    fn store_u32(&mut self, addr: u64, v: u32) -> bool {
        if dma::store_u32_release(&self.mem, addr, v).is_ok() {
            return true;
        }
        self.fatal(format!("doorbell buffer at {addr:#x} is not in guest memory"));
        false
    }

    fn shadow_failed(&mut self, e: Shadow) {
        match e {
            Shadow::Unreachable(addr) => {
                self.fatal(format!("shadow doorbell at {addr:#x} is not in guest memory"));
            }
            Shadow::Invalid => self.counters.invalid_shadow_doorbells += 1,
        }
    }

    /// Take SQ `qid`'s tail from its shadow doorbell. False: no shadow, or the value was
    /// not taken (out of range: counted; unreachable: fatal status).
    pub(crate) fn read_shadow_sq_tail(&mut self, qid: u16) -> bool {
        let Some(b) = self.shadow(qid) else { return false };
        let Some(entries) = self.sqs[usize::from(qid)].as_ref().map(|s| s.entries) else {
            return false;
        };
        self.counters.shadow_doorbell_reads += 1;
        let r = self
            .load_u32(b.sq_db(qid))
            .and_then(|v| if v < entries { Ok(v) } else { Err(Shadow::Invalid) });
        match r {
            Ok(v) => {
                self.sqs[usize::from(qid)].as_mut().expect("checked above").tail = v;
                true
            }
            Err(e) => {
                self.shadow_failed(e);
                false
            }
        }
    }

    /// SQ `qid` is empty: EventIdx = its tail (the host's next command rings), then the
    /// shadow tail again after a full fence. True: the host moved the tail meanwhile.
    pub(crate) fn idle_sq_has_more(&mut self, qid: u16) -> bool {
        let Some(b) = self.shadow(qid) else { return false };
        let Some(tail) = self.sqs[usize::from(qid)].as_ref().map(|s| s.tail) else {
            return false;
        };
        if !self.store_u32(b.sq_ei(qid), tail) {
            return false;
        }
        fence(Ordering::SeqCst);
        self.read_shadow_sq_tail(qid) && self.sqs[usize::from(qid)].as_ref().is_some_and(|s| !s.is_empty())
    }

    /// Take CQ `cqid`'s head from its shadow doorbell (a value past the posted entries is
    /// ignored and counted), then set its EventIdx: one before the head while the CQ has
    /// room for a command's completion (the host need not ring), the head itself when it
    /// has not (the host's next move rings), reading the head once more after the fence.
    /// Returns whether the CQ has room. No shadow: only the room.
    pub(crate) fn refresh_cq_head(&mut self, cqid: u16) -> bool {
        let Some(b) = self.shadow(cqid) else {
            return self.cqs[usize::from(cqid)].as_ref().is_some_and(|c| c.has_room());
        };
        if !self.read_shadow_cq_head(b, cqid) {
            return false;
        }
        let Some(cq) = self.cqs[usize::from(cqid)].as_ref() else {
            return false;
        };
        let (head, entries) = (cq.head, cq.entries);
        if cq.has_room() {
            return self.store_u32(b.cq_ei(cqid), (head + entries - 1) % entries);
        }
        if !self.store_u32(b.cq_ei(cqid), head) {
            return false;
        }
        fence(Ordering::SeqCst);
        if !self.read_shadow_cq_head(b, cqid) {
            return false;
        }
        let Some(cq) = self.cqs[usize::from(cqid)].as_ref() else {
            return false;
        };
        let (head, entries, room) = (cq.head, cq.entries, cq.has_room());
        if room {
            return self.store_u32(b.cq_ei(cqid), (head + entries - 1) % entries);
        }
        false
    }

    /// Read the shadow CQ head into the queue when it moves over posted entries only.
    /// False only when the buffer is unreachable (fatal status set).
    fn read_shadow_cq_head(&mut self, b: DoorbellBuffers, cqid: u16) -> bool {
        self.counters.shadow_doorbell_reads += 1;
        let v = match self.load_u32(b.cq_db(cqid)) {
            Ok(v) => v,
            Err(e) => {
                self.shadow_failed(e);
                return false;
            }
        };
        let Some(cq) = self.cqs[usize::from(cqid)].as_mut() else {
            return false;
        };
        if cq.head_move_is_valid(v) {
            cq.head = v;
        } else {
            self.shadow_failed(Shadow::Invalid);
        }
        true
    }

    /// Doorbell Buffer Config accepted, or I/O queue `qid` created under it: the shadow
    /// doorbells take the controller's view of the queue (so the host's "old" values
    /// agree with it) and the EventIdx its initial value.
    pub(crate) fn init_shadow_sq(&mut self, qid: u16) {
        let (Some(b), Some(tail)) = (self.shadow(qid), self.sqs[usize::from(qid)].as_ref().map(|s| s.tail)) else {
            return;
        };
        let _ = self.store_u32(b.sq_db(qid), tail) && self.store_u32(b.sq_ei(qid), tail);
    }

    pub(crate) fn init_shadow_cq(&mut self, cqid: u16) {
        let Some(b) = self.shadow(cqid) else { return };
        let Some((head, entries)) = self.cqs[usize::from(cqid)].as_ref().map(|c| (c.head, c.entries)) else {
            return;
        };
        let _ = self.store_u32(b.cq_db(cqid), head) && self.store_u32(b.cq_ei(cqid), (head + entries - 1) % entries);
    }
}
