//! The controller: registers, queues, doorbells, life cycle (enable, reset, shutdown, CFS).
//! Commands are executed inline when their doorbell is written; the caller serialises calls.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::admin::Features;
use crate::config::MAX_QUEUE_PAIRS;
use crate::hmb::HmbAttributes;
use crate::media::{MediaModel, MediaOp};
use crate::namespace::Namespace;
use crate::observer::{NoVendorFeatures, NullObserver};
use crate::queue::{CompQueue, SubQueue, CQE_BYTES, SQE_BYTES};
use crate::regs::*;
use crate::report::{Counters, HmbReport, NamespaceReport, QueueReport};
use crate::{
    dma, CommandObserver, CompletionEvent, ControllerConfig, ControllerReport, Error, FetchEvent, GuestMem,
    HmbDescriptor, HostMemoryBuffer, InterruptSink, PciIdentity, Status, VendorFeatures,
};

/// What executing a command leads to.
pub(crate) enum Outcome {
    /// Post a CQE now: status, DW0, end of the command's modelled media work (ns).
    Complete(Status, u32, u64),
    /// Held without a CQE (Asynchronous Event Request).
    Held,
}

impl Outcome {
    pub(crate) fn status(s: Status) -> Outcome {
        Outcome::Complete(s, 0, 0)
    }
}

/// A 64-byte submission queue entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sqe(pub [u32; 16]);

impl Sqe {
    pub fn opcode(&self) -> u8 {
        self.0[0] as u8
    }
    pub fn fuse(&self) -> u32 {
        (self.0[0] >> 8) & 3
    }
    pub fn psdt(&self) -> u32 {
        (self.0[0] >> 14) & 3
    }
    pub fn cid(&self) -> u16 {
        (self.0[0] >> 16) as u16
    }
    pub fn nsid(&self) -> u32 {
        self.0[1]
    }
    pub fn prp1(&self) -> u64 {
        u64::from(self.0[6]) | u64::from(self.0[7]) << 32
    }
    pub fn prp2(&self) -> u64 {
        u64::from(self.0[8]) | u64::from(self.0[9]) << 32
    }
    /// Command dword 10..15.
    pub fn cdw(&self, n: usize) -> u32 {
        self.0[n]
    }
}

/// Memory page size: CC.MPS = 0 is the only one CAP allows.
pub(crate) const PAGE: u64 = 4096;

pub struct Controller {
    pub(crate) cfg: ControllerConfig,
    pub(crate) mem: GuestMem,
    irq: Arc<dyn InterruptSink>,
    pub(crate) observer: Box<dyn CommandObserver>,
    pub(crate) vendor: Box<dyn VendorFeatures>,
    pub(crate) ns: Namespace,
    pub(crate) media: MediaModel,
    pub(crate) media_ops: Vec<MediaOp>,
    epoch: Instant,
    cc: u32,
    csts: u32,
    aqa: u32,
    asq: u64,
    acq: u64,
    intms: u32,
    pub(crate) sqs: Vec<Option<SubQueue>>,
    pub(crate) cqs: Vec<Option<CompQueue>>,
    /// CIDs of outstanding Asynchronous Event Requests.
    pub(crate) aers: Vec<u16>,
    /// Async events not yet reported (CQE DW0 values), and the event types reported but
    /// not yet cleared by reading their log page (masked until then).
    pub(crate) events: VecDeque<u32>,
    pub(crate) masked_event_types: u8,
    pub(crate) feat: Features,
    pub(crate) hmb: Option<HostMemoryBuffer>,
    pub(crate) hmb_attrs: HmbAttributes,
    /// The descriptor list of the last enabled HMB, for MR=1 (memory return).
    pub(crate) retained_hmb: Option<Vec<HmbDescriptor>>,
    pub(crate) hmb_report: HmbReport,
    pub(crate) counters: Counters,
    fatal_reason: Option<String>,
    /// Bounce buffer of the data path (reused: no allocation per command).
    pub(crate) scratch: Vec<u8>,
}

impl Controller {
    /// BAR0: registers at 0, doorbells from 0x1000 (DSTRD = 0: 4 bytes each).
    pub const BAR0_SIZE: u64 = 0x4000;

    /// Not QEMU's 1b36:0010 (the Linux driver quirks it): 1234 is the experimental vendor id
    /// QEMU's own test devices use, absent from the driver's id table, so no quirk applies.
    pub fn pci_identity() -> PciIdentity {
        PciIdentity {
            vendor: 0x1234,
            device: 0x4e56,
            subsystem_vendor: 0x1234,
            subsystem: 0x4e56,
            class_code: 0x010802,
            revision: 1,
        }
    }

    pub fn new(cfg: ControllerConfig, mem: GuestMem, irq: Arc<dyn InterruptSink>) -> Result<Self, Error> {
        cfg.validate()?;
        let ns = Namespace::new(&cfg.backing, cfg.namespace_bytes, cfg.lba_shift)?;
        let media = MediaModel::new(cfg.media.clone(), cfg.namespace_bytes);
        let pairs = usize::from(cfg.max_io_queues) + 1;
        debug_assert!(pairs as u32 <= MAX_QUEUE_PAIRS);
        let hmb_report = HmbReport {
            preferred_bytes: cfg.hmpre_bytes,
            minimum_bytes: cfg.hmmin_bytes,
            ..Default::default()
        };
        Ok(Controller {
            irq,
            mem,
            observer: Box::new(NullObserver),
            vendor: Box::new(NoVendorFeatures),
            ns,
            media,
            media_ops: Vec::new(),
            epoch: Instant::now(),
            cc: 0,
            csts: 0,
            aqa: 0,
            asq: 0,
            acq: 0,
            intms: 0,
            sqs: vec![None; pairs],
            cqs: vec![None; pairs],
            aers: Vec::new(),
            events: VecDeque::new(),
            masked_event_types: 0,
            feat: Features::default(),
            hmb: None,
            hmb_attrs: HmbAttributes::default(),
            retained_hmb: None,
            hmb_report,
            counters: Counters::default(),
            fatal_reason: None,
            scratch: Vec::new(),
            cfg,
        })
    }

    pub fn set_observer(&mut self, o: Box<dyn CommandObserver>) {
        self.observer = o;
    }

    pub fn set_vendor_features(&mut self, v: Box<dyn VendorFeatures>) {
        self.vendor = v;
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.cfg
    }

    /// MSI-X vectors the transport should expose (a CQ's IV must be below this).
    pub fn interrupt_vectors(&self) -> u16 {
        self.cfg.interrupt_vectors
    }

    pub(crate) fn cc(&self) -> u32 {
        self.cc
    }

    /// The HMB while it is enabled.
    pub fn hmb(&self) -> Option<&HostMemoryBuffer> {
        self.hmb.as_ref()
    }

    /// Nanoseconds since the controller was created: the clock of every observer event.
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    // ---- BAR0 ----------------------------------------------------------------------

    /// Any width, any offset; bytes outside BAR0 and write-only doorbells read 0.
    pub fn bar0_read(&mut self, offset: u64, data: &mut [u8]) {
        let mut cached: Option<(u64, u32)> = None;
        for (i, b) in data.iter_mut().enumerate() {
            *b = 0;
            let Some(a) = offset.checked_add(i as u64) else {
                continue;
            };
            if a >= DOORBELLS {
                continue;
            }
            let d = a & !3;
            let v = match cached {
                Some((cd, v)) if cd == d => v,
                _ => {
                    let v = self.read32(d);
                    cached = Some((d, v));
                    v
                }
            };
            *b = (v >> (8 * (a & 3))) as u8;
        }
    }

    /// Any width, any offset. Registers take narrow writes merged into their dword;
    /// doorbells take whole aligned dwords (a narrow doorbell write is ignored and counted);
    /// doorbell writes process commands inline.
    pub fn bar0_write(&mut self, offset: u64, data: &[u8]) {
        let mut i = 0usize;
        while i < data.len() {
            let Some(a) = offset.checked_add(i as u64) else { break };
            let d = a & !3;
            let first = (a - d) as usize;
            let n = (4 - first).min(data.len() - i);
            if d >= Self::BAR0_SIZE {
                self.counters.ignored_register_writes += 1;
                break;
            }
            let mut bytes = if d < DOORBELLS && merges_with_current(d) {
                self.read32(d).to_le_bytes()
            } else {
                [0; 4]
            };
            bytes[first..first + n].copy_from_slice(&data[i..i + n]);
            let v = u32::from_le_bytes(bytes);
            if d >= DOORBELLS {
                if n == 4 {
                    self.doorbell((d - DOORBELLS) / 4, v);
                } else {
                    self.counters.ignored_register_writes += 1;
                }
            } else {
                self.write32(d, v);
            }
            i += n;
        }
    }

    fn read32(&self, d: u64) -> u32 {
        let cap = cap(self.cfg.mqes);
        match d {
            CAP => cap as u32,
            x if x == CAP + 4 => (cap >> 32) as u32,
            VS => VERSION,
            INTMS | INTMC => self.intms,
            CC => self.cc,
            CSTS => self.csts,
            AQA => self.aqa,
            ASQ => self.asq as u32,
            x if x == ASQ + 4 => (self.asq >> 32) as u32,
            ACQ => self.acq as u32,
            x if x == ACQ + 4 => (self.acq >> 32) as u32,
            _ => 0,
        }
    }

    fn write32(&mut self, d: u64, v: u32) {
        match d {
            INTMS => self.intms |= v,
            INTMC => self.intms &= !v,
            CC => self.write_cc(v),
            AQA => self.aqa = v & 0x0fff_0fff,
            ASQ => self.asq = (self.asq & !0xffff_ffff) | u64::from(v & !0xfff),
            x if x == ASQ + 4 => self.asq = (self.asq & 0xffff_ffff) | u64::from(v) << 32,
            ACQ => self.acq = (self.acq & !0xffff_ffff) | u64::from(v & !0xfff),
            x if x == ACQ + 4 => self.acq = (self.acq & 0xffff_ffff) | u64::from(v) << 32,
            // CAP.NSSRS = 0: a subsystem reset is not supported.
            NSSR => self.counters.ignored_register_writes += 1,
            // CAP, VS, CSTS and reserved space are read-only.
            _ => self.counters.ignored_register_writes += 1,
        }
    }

    fn write_cc(&mut self, v: u32) {
        let v = v & CC_WRITABLE;
        let old = self.cc;
        self.cc = v;
        let (was, now) = (old & CC_EN != 0, v & CC_EN != 0);
        if was && !now {
            self.controller_reset(false);
            return;
        }
        if !was && now {
            self.enable();
        }
        if cc_shn(v) != 0 && self.csts & CSTS_SHST_COMPLETE == 0 {
            self.shutdown();
        }
    }

    fn enable(&mut self) {
        if self.csts & CSTS_CFS != 0 {
            return;
        }
        let cc = self.cc;
        let asqs = (self.aqa & 0xfff) + 1;
        let acqs = ((self.aqa >> 16) & 0xfff) + 1;
        let problem = if cc_css(cc) != 0 {
            Some(format!("CC.CSS {} not supported (NVM command set only)", cc_css(cc)))
        } else if cc_mps(cc) != 0 {
            Some(format!("CC.MPS {} outside CAP.MPSMIN..=MPSMAX (0)", cc_mps(cc)))
        } else if cc_ams(cc) != 0 {
            Some(format!("CC.AMS {} not supported (round robin only)", cc_ams(cc)))
        } else if asqs < 2 || acqs < 2 {
            Some(format!(
                "AQA sizes {asqs}/{acqs}: an admin queue needs 2 entries at least"
            ))
        } else if !dma::mapped(&self.mem, self.asq, u64::from(asqs) * SQE_BYTES)
            || !dma::mapped(&self.mem, self.acq, u64::from(acqs) * CQE_BYTES)
        {
            Some(format!(
                "admin queues at {:#x}/{:#x} not in guest memory",
                self.asq, self.acq
            ))
        } else {
            None
        };
        if let Some(p) = problem {
            self.fatal(p);
            return;
        }
        self.sqs[0] = Some(SubQueue::new(self.asq, asqs, 0));
        self.cqs[0] = Some(CompQueue::new(self.acq, acqs, 0, true));
        self.csts = CSTS_RDY;
        self.fatal_reason = None;
    }

    /// Controller level reset (CC.EN 1->0) or, with `full`, a transport/function level reset
    /// that also clears the registers. The HMB is released (observer told first); its
    /// descriptor list is kept for a later MR=1.
    fn controller_reset(&mut self, full: bool) {
        self.release_hmb();
        self.sqs.iter_mut().for_each(|q| *q = None);
        self.cqs.iter_mut().for_each(|q| *q = None);
        // Outstanding AERs are aborted implicitly: their queue is gone, no CQE is posted.
        self.aers.clear();
        self.events.clear();
        self.masked_event_types = 0;
        self.feat = Features::default();
        self.csts = 0;
        self.counters.resets += 1;
        if full {
            self.cc = 0;
            self.aqa = 0;
            self.asq = 0;
            self.acq = 0;
            self.intms = 0;
            self.fatal_reason = None;
        } else {
            self.cc &= !CC_EN;
        }
    }

    /// Transport/function-level reset: as after power-on, except that the last HMB
    /// descriptor list is remembered for MR=1.
    pub fn reset(&mut self) {
        self.controller_reset(true);
    }

    fn shutdown(&mut self) {
        self.release_hmb();
        if let Err(e) = self.ns.flush() {
            log::warn!("nvme: flushing the namespace at shutdown: {e}");
        }
        self.csts |= CSTS_SHST_COMPLETE;
        self.counters.shutdowns += 1;
    }

    /// Controller Fatal Status: stop processing until the host resets the controller.
    pub(crate) fn fatal(&mut self, reason: String) {
        if self.csts & CSTS_CFS != 0 {
            return;
        }
        log::warn!("nvme: controller fatal status: {reason}");
        self.release_hmb();
        self.csts |= CSTS_CFS;
        self.fatal_reason = Some(reason);
        self.counters.fatal_errors += 1;
    }

    pub(crate) fn release_hmb(&mut self) {
        if let Some(h) = self.hmb.take() {
            self.observer.on_hmb_disabling(&h);
            self.retained_hmb = Some(h.descriptors().to_vec());
            self.hmb_report.disables += 1;
        }
    }

    fn running(&self) -> bool {
        self.csts & CSTS_RDY != 0 && self.csts & (CSTS_CFS | CSTS_SHST_COMPLETE) == 0
    }

    // ---- Doorbells and queue processing ---------------------------------------------

    fn doorbell(&mut self, index: u64, value: u32) {
        if !self.running() {
            self.counters.ignored_register_writes += 1;
            return;
        }
        let qid = index / 2;
        let is_cq = index % 2 == 1;
        let Some(q) = usize::try_from(qid).ok().filter(|&q| q < self.sqs.len()) else {
            return self.invalid_doorbell(0x00);
        };
        if is_cq {
            let Some(cq) = self.cqs[q].as_mut() else {
                return self.invalid_doorbell(0x00);
            };
            // The new head may move over posted entries only, never past the tail.
            let posted = (cq.tail + cq.entries - cq.head) % cq.entries;
            let moved = (value.wrapping_add(cq.entries).wrapping_sub(cq.head)) % cq.entries.max(1);
            if value >= cq.entries || moved > posted {
                return self.invalid_doorbell(0x01);
            }
            cq.head = value;
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
            sq.tail = value;
            self.process_sq(q as u16);
        }
    }

    /// Error async event "write to invalid doorbell register" (info 0) or "invalid doorbell
    /// write value" (info 1), log page 01h.
    fn invalid_doorbell(&mut self, info: u32) {
        self.counters.invalid_doorbells += 1;
        self.queue_event(info << 8 | 0x01 << 16);
    }

    pub(crate) fn queue_event(&mut self, dw0: u32) {
        if !self.events.contains(&dw0) && self.events.len() < 16 {
            self.events.push_back(dw0);
        }
        self.deliver_events();
    }

    /// Complete outstanding AERs with pending events whose type is not masked.
    pub(crate) fn deliver_events(&mut self) {
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
            self.post(0, 0, cid, crate::admin::OPC_ASYNC_EVENT, Status::SUCCESS, dw0, t, 0);
            self.raise(0);
        }
    }

    pub(crate) fn process_sq(&mut self, qid: u16) {
        let q = usize::from(qid);
        let mut to_raise: Option<u16> = None;
        loop {
            if !self.running() {
                break;
            }
            let Some(sq) = self.sqs.get(q).and_then(|s| s.as_ref()) else {
                break;
            };
            if sq.is_empty() {
                break;
            }
            let cqid = sq.cqid;
            match self.cqs[usize::from(cqid)].as_ref() {
                Some(cq) if !cq.is_full() => {}
                _ => break,
            }
            let addr = sq.entry_addr();
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
            self.observer.on_fetch(&FetchEvent {
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
            let outcome = if qid == 0 {
                self.counters.admin_commands += 1;
                self.admin(&sqe)
            } else {
                self.counters.io_commands += 1;
                self.io(qid, &sqe, t0)
            };
            if let Outcome::Complete(status, dw0, media_end) = outcome {
                self.post(cqid, qid, sqe.cid(), sqe.opcode(), status, dw0, t0, media_end);
                if self.cqs[usize::from(cqid)].as_ref().is_some_and(|c| c.ien) {
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
    }

    /// Free CQ slots (0 when the queue does not exist).
    pub(crate) fn cq_room(&self, cqid: u16) -> u32 {
        self.cqs[usize::from(cqid)]
            .as_ref()
            .map_or(0, |c| (c.head + c.entries - c.tail - 1) % c.entries)
    }

    fn raise(&self, cqid: u16) {
        if let Some(cq) = self.cqs[usize::from(cqid)].as_ref() {
            if cq.ien {
                self.irq.raise(cq.iv);
            }
        }
    }

    /// Write a CQE: DW0..2 first, then DW3 (with the phase tag) with release ordering.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn post(
        &mut self,
        cqid: u16,
        sqid: u16,
        cid: u16,
        opcode: u8,
        status: Status,
        dw0: u32,
        t0: u64,
        media_end: u64,
    ) {
        let sq_head = self.sqs[usize::from(sqid)].as_ref().map_or(0, |s| s.head);
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
        self.observer.on_complete(&CompletionEvent {
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

    // ---- Report ----------------------------------------------------------------------

    pub fn report(&self) -> ControllerReport {
        let mut queues = Vec::new();
        for (qid, sq) in self.sqs.iter().enumerate() {
            if let Some(s) = sq {
                queues.push(QueueReport {
                    kind: "sq",
                    qid: qid as u16,
                    entries: s.entries,
                    head: s.head,
                    tail: s.tail,
                    cqid: Some(s.cqid),
                    iv: None,
                    ien: None,
                    commands: s.fetched,
                });
            }
        }
        for (qid, cq) in self.cqs.iter().enumerate() {
            if let Some(c) = cq {
                queues.push(QueueReport {
                    kind: "cq",
                    qid: qid as u16,
                    entries: c.entries,
                    head: c.head,
                    tail: c.tail,
                    cqid: None,
                    iv: Some(c.iv),
                    ien: Some(c.ien),
                    commands: c.posted,
                });
            }
        }
        let mut hmb = self.hmb_report.clone();
        hmb.enabled = self.hmb.is_some();
        hmb.returned = self.hmb.as_ref().is_some_and(|h| h.returned());
        hmb.descriptors = self.hmb.as_ref().map(|h| h.descriptors().to_vec()).unwrap_or_default();
        hmb.bytes = self.hmb.as_ref().map_or(0, |h| h.len());
        let mut counters = self.counters.clone();
        counters.media_ops = self.media.ops;
        ControllerReport {
            cc: self.cc,
            csts: self.csts,
            ready: self.csts & CSTS_RDY != 0,
            fatal: self.csts & CSTS_CFS != 0,
            shutdown_status: ((self.csts >> 2) & 3) as u8,
            fatal_reason: self.fatal_reason.clone(),
            io_queues_allocated: self.io_queues_allocated(),
            queues,
            aer_outstanding: self.aers.len(),
            counters,
            hmb,
            namespace: NamespaceReport {
                nsid: 1,
                bytes: self.ns.bytes,
                lba_bytes: 1 << self.ns.lba_shift,
                backing: self.ns.backing_name(),
            },
        }
    }

    /// I/O queue pairs the host may create: Set Features 07h's allocation, or all.
    pub(crate) fn io_queues_allocated(&self) -> u16 {
        self.feat
            .queues
            .map_or(self.cfg.max_io_queues, |(nsq, ncq)| nsq.min(ncq) + 1)
    }
}
