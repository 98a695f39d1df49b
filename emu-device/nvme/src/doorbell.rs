//! Doorbells and queue processing: SQ tail writes run commands inline, CQ head writes free
//! room, completions are posted with the phase tag last, async events complete held AERs.

use crate::command::{Completion, Outcome, Sqe};
use crate::{dma, CompletionEvent, Controller, FetchEvent, Status};

impl Controller {
    pub(crate) fn doorbell(&mut self, index: u64, value: u32) {
        self.counters.doorbell_writes += 1;
        if !self.running() {
            self.counters.ignored_register_writes += 1;
            return;
        }
        let qid = index / 2;
        let is_cq = index % 2 == 1;
        let Some(q) = usize::try_from(qid).ok().filter(|&q| q < self.sqs.len()) else {
            return self.invalid_doorbell(0x00);
        };
        let shadowed = self.shadow(q as u16).is_some();
        if is_cq {
            let Some(cq) = self.cqs[q].as_mut() else {
                return self.invalid_doorbell(0x00);
            };
            if shadowed {
                // The written value may lag the shadow head the controller already took
                // (the host updates the shadow without ringing): only its range counts,
                // the head comes from the shadow (no memory access while BME = 0: the
                // SQs waiting on this CQ read it when BME = 1).
                if value >= cq.entries {
                    return self.invalid_doorbell(0x01);
                }
                if self.bus_master {
                    self.refresh_cq_head(q as u16);
                }
            } else {
                if !cq.head_move_is_valid(value) {
                    return self.invalid_doorbell(0x01);
                }
                cq.head = value;
            }
            // Queues stalled on a full CQ go on.
            let waiting: Vec<u16> = (0..self.sqs.len())
                .filter(|&s| {
                    self.sqs[s]
                        .as_ref()
                        .is_some_and(|sq| usize::from(sq.cqid) == q && !sq.is_empty())
                })
                .map(|s| s as u16)
                .collect();
            for s in waiting {
                self.process_sq(s);
            }
            if q == 0 {
                self.deliver_events();
            }
        } else {
            let Some(sq) = self.sqs[q].as_mut() else {
                return self.invalid_doorbell(0x00);
            };
            if value >= sq.entries {
                return self.invalid_doorbell(0x01);
            }
            // Shadowed: a notification only; process_sq takes the tail from the shadow
            // (never older than this value: the host writes the shadow first).
            if !shadowed {
                sq.tail = value;
            }
            self.process_sq(q as u16);
        }
    }

    /// Error async event "write to invalid doorbell register" (info 0) or "invalid doorbell
    /// write value" (info 1), log page 01h.
    fn invalid_doorbell(&mut self, info: u32) {
        self.counters.invalid_doorbells += 1;
        self.error_log.record(&crate::admin::ErrorRecord {
            sqid: crate::admin::NOT_A_COMMAND,
            cid: crate::admin::NOT_A_COMMAND,
            status: Status::SUCCESS,
            lba: 0,
            nsid: 0,
        });
        self.queue_event(info << 8 | 0x01 << 16);
    }

    pub(crate) fn queue_event(&mut self, dw0: u32) {
        self.pend_event(dw0);
        self.deliver_events();
    }

    /// Note an event without delivering it: for an admin command's own work, whose CQE
    /// must go out first (process_sq delivers after it).
    pub(crate) fn pend_event(&mut self, dw0: u32) {
        if !self.events.contains(&dw0) && self.events.len() < 16 {
            self.events.push_back(dw0);
        }
    }

    /// Complete outstanding AERs with pending events whose type is not masked.
    pub(crate) fn deliver_events(&mut self) {
        if !self.bus_master {
            return;
        }
        while !self.aers.is_empty() {
            let Some(cq) = self.cqs[0].as_ref() else { return };
            if cq.is_full() {
                return;
            }
            let Some(i) = self
                .events
                .iter()
                .position(|e| self.masked_event_types & (1 << (e & 7)) == 0)
            else {
                return;
            };
            let dw0 = self.events.remove(i).expect("index from position");
            self.masked_event_types |= 1 << (dw0 & 7);
            let cid = self.aers.remove(0);
            let t = self.now_ns();
            self.post(Completion::admin(
                cid,
                crate::admin::OPC_ASYNC_EVENT,
                Status::SUCCESS,
                dw0,
                t,
            ));
            self.raise(0);
        }
    }

    pub(crate) fn process_sq(&mut self, qid: u16) {
        // Completions already due go out now, not when the transport's timer thread next
        // runs (under host load its wake-up can lag by milliseconds).
        if self.deferred.len() > 0 {
            self.post_due_completions();
        }
        let q = usize::from(qid);
        let mut to_raise: Option<u16> = None;
        if !self.bus_master {
            // The tail is recorded (a shadowed SQ's is in host memory); the work waits
            // for BME = 1 (set_bus_master).
            if self
                .sqs
                .get(q)
                .is_some_and(|s| s.as_ref().is_some_and(|s| !s.is_empty() || self.shadow(qid).is_some()))
            {
                self.counters.bus_master_stalls += 1;
            }
            return;
        }
        // An I/O queue's CQEs and interrupt go out before the observer hears of its
        // commands (held.rs); an admin command's Set Features C0h changes the observer.
        if qid != 0 {
            self.hold_notes();
        }
        self.read_shadow_sq_tail(qid);
        loop {
            if !self.running() {
                break;
            }
            let Some(sq) = self.sqs.get(q).and_then(|s| s.as_ref()) else {
                break;
            };
            if sq.is_empty() {
                // Shadowed: EventIdx = tail, then one more look at the shadow tail.
                if self.idle_sq_has_more(qid) {
                    continue;
                }
                break;
            }
            let (cqid, addr) = (sq.cqid, sq.entry_addr());
            // A CQ that looks full: a shadowed one's head is read from host memory.
            let room = self.cqs[usize::from(cqid)].as_ref().is_some_and(|c| c.has_room());
            if !room && !self.refresh_cq_head(cqid) {
                break;
            }
            let mut raw = [0u8; 64];
            if dma::read(&self.mem, addr, &mut raw).is_err() {
                self.fatal(format!("SQ {qid} entry at {addr:#x} is not in guest memory"));
                break;
            }
            let sq = self.sqs[q].as_mut().expect("checked above");
            sq.head = (sq.head + 1) % sq.entries;
            sq.fetched += 1;
            let mut dw = [0u32; 16];
            for (d, c) in dw.iter_mut().zip(raw.chunks_exact(4)) {
                *d = u32::from_le_bytes(c.try_into().expect("4 bytes"));
            }
            let sqe = Sqe(dw);
            let t0 = self.now_ns();
            let is_rw = qid != 0 && matches!(sqe.opcode(), crate::io::OPC_READ | crate::io::OPC_WRITE);
            self.note_fetch(FetchEvent {
                qid,
                cid: sqe.cid(),
                opcode: sqe.opcode(),
                nsid: sqe.nsid(),
                slba: if is_rw {
                    u64::from(dw[10]) | u64::from(dw[11]) << 32
                } else {
                    0
                },
                nlb: if is_rw { (dw[12] & 0xffff) + 1 } else { 0 },
                time_ns: t0,
                sqe: dw,
            });
            // Only an admin command ends the wait: I/O keeps flowing when the host
            // re-enables the HMB at run time (sysfs `hmb`) and adverts after 0Dh.
            if self.audit.pending() && qid == 0 && !self.is_advert(qid, &sqe) {
                if let Some(h) = self.hmb.as_ref() {
                    self.audit.no_advert(h);
                }
            }
            let outcome = if qid == 0 {
                self.counters.admin_commands += 1;
                self.admin(&sqe)
            } else {
                self.counters.io_commands += 1;
                self.io(qid, &sqe, t0)
            };
            if let Outcome::Complete(status, dw0, media_end) = outcome {
                if !status.is_success() {
                    self.record_error(qid, &sqe, status);
                }
                let posted = self.complete_io(Completion {
                    cqid,
                    sqid: qid,
                    cid: sqe.cid(),
                    opcode: sqe.opcode(),
                    status,
                    dw0,
                    t0,
                    media_end,
                });
                if posted && self.cqs[usize::from(cqid)].as_ref().is_some_and(|c| c.ien) {
                    to_raise = Some(cqid);
                }
            }
            // Events an admin command made deliverable (new AER, log read) go out after its
            // own CQE, so that CQE always has the slot checked for above.
            if qid == 0 && !self.aers.is_empty() && !self.events.is_empty() {
                self.deliver_events();
            }
        }
        if let Some(cqid) = to_raise {
            self.raise(cqid);
        }
        self.release_notes();
    }

    /// PCI Bus Master Enable changed (the transport saw a command-register write). Off: no
    /// memory access at all until it is on again; on: the SQs that got doorbells meanwhile
    /// are processed and pending async events delivered, as if their doorbells came now.
    pub fn set_bus_master(&mut self, on: bool) {
        let was = std::mem::replace(&mut self.bus_master, on);
        if on && !was {
            for q in 0..self.sqs.len() {
                // A shadowed SQ's tail is in host memory: process_sq reads it.
                let shadowed = self.shadow(q as u16).is_some();
                if self.sqs[q].as_ref().is_some_and(|s| shadowed || !s.is_empty()) {
                    self.process_sq(q as u16);
                }
            }
            self.deliver_events();
            self.post_due_completions();
        }
    }

    /// An error log entry for a command that failed: the LBA is its SLBA for the NVM
    /// commands that carry one (Read, Write, Compare, Write Zeroes, Verify), else 0.
    fn record_error(&mut self, qid: u16, sqe: &Sqe, status: Status) {
        use crate::io::{OPC_COMPARE, OPC_READ, OPC_VERIFY, OPC_WRITE, OPC_WRITE_ZEROES};
        let has_lba = qid != 0
            && matches!(
                sqe.opcode(),
                OPC_READ | OPC_WRITE | OPC_COMPARE | OPC_WRITE_ZEROES | OPC_VERIFY
            );
        self.error_log.record(&crate::admin::ErrorRecord {
            sqid: qid,
            cid: sqe.cid(),
            status,
            lba: if has_lba {
                u64::from(sqe.cdw(10)) | u64::from(sqe.cdw(11)) << 32
            } else {
                0
            },
            nsid: sqe.nsid(),
        });
    }

    /// A vendor-specific (C0h..FFh) Set or Get Features: the advert a declaring controller
    /// waits for before it claims a fresh HMB, or the host probing around it (audit.rs).
    fn is_advert(&self, qid: u16, sqe: &Sqe) -> bool {
        qid == 0
            && matches!(
                sqe.opcode(),
                crate::admin::OPC_SET_FEATURES | crate::admin::OPC_GET_FEATURES
            )
            && sqe.cdw(10) as u8 >= 0xC0
    }

    /// Free CQ slots (0 when the queue does not exist).
    pub(crate) fn cq_room(&self, cqid: u16) -> u32 {
        self.cqs[usize::from(cqid)]
            .as_ref()
            .map_or(0, |c| (c.head + c.entries - c.tail - 1) % c.entries)
    }

    pub(crate) fn raise_cq(&self, cqid: u16) {
        self.raise(cqid);
    }

    fn raise(&self, cqid: u16) {
        if let Some(cq) = self.cqs[usize::from(cqid)].as_ref() {
            if cq.ien {
                self.irq.raise(cq.iv);
            }
        }
    }

    /// Write a CQE: DW0..2 first, then DW3 (with the phase tag) with release ordering.
    pub(crate) fn post(&mut self, c: Completion) {
        let Completion {
            cqid,
            sqid,
            cid,
            opcode,
            status,
            dw0,
            t0,
            media_end,
        } = c;
        let sq_head = self.sqs[usize::from(sqid)].as_ref().map_or(0, |s| s.head);
        if self.cqs[usize::from(cqid)].as_ref().is_some_and(|c| c.is_full()) {
            // Callers check for room first; a shadowed CQ's head may be older than the host's.
            self.refresh_cq_head(cqid);
        }
        let Some(cq) = self.cqs[usize::from(cqid)].as_mut() else {
            return;
        };
        if cq.is_full() {
            // Callers check for room first; never overwrite an entry the host has not consumed.
            self.fatal(format!("CQ {cqid} overflow"));
            return;
        }
        let addr = cq.slot_addr();
        let dw3 = u32::from(cid) | u32::from(cq.phase) << 16 | u32::from(status.field()) << 17;
        let mut head = [0u8; 12];
        head[0..4].copy_from_slice(&dw0.to_le_bytes());
        head[8..12].copy_from_slice(&(sq_head | u32::from(sqid) << 16).to_le_bytes());
        if dma::write(&self.mem, addr, &head).is_err() || dma::store_u32_release(&self.mem, addr + 12, dw3).is_err() {
            self.fatal(format!("CQ {cqid} slot at {addr:#x} is not in guest memory"));
            return;
        }
        cq.advance();
        if !status.is_success() {
            self.counters.errors += 1;
        }
        let t = self.now_ns();
        if sqid != 0 {
            self.counters.io_completions += 1;
            let latency = u32::try_from(t.saturating_sub(t0)).unwrap_or(u32::MAX);
            self.counters.io_latency_ns_total += u64::from(latency);
        }
        self.note_complete(CompletionEvent {
            qid: sqid,
            cid,
            opcode,
            status: status.field(),
            dw0,
            time_ns: t,
            latency_ns: t.saturating_sub(t0),
            media_latency_ns: media_end.saturating_sub(t0),
        });
    }
}
