//! An in-process fake host for tests and benches: guest memory, a page allocator, queue
//! pairs, and the register handshake of a real driver, all through [`Controller::bar0_write`].
//! It checks nothing by itself; tests assert on what it returns.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vm_memory::{GuestAddress, GuestMemoryAtomic, GuestMemoryMmap};

use crate::{dma, Controller, ControllerConfig, GuestMem, InterruptSink, Status};

/// Counts interrupts per vector.
#[derive(Default)]
pub struct IrqCounter {
    counts: Vec<AtomicU64>,
}

impl IrqCounter {
    pub fn new(vectors: usize) -> Self {
        IrqCounter {
            counts: (0..vectors).map(|_| AtomicU64::new(0)).collect(),
        }
    }
    pub fn count(&self, vector: u16) -> u64 {
        self.counts
            .get(usize::from(vector))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

impl InterruptSink for IrqCounter {
    fn raise(&self, vector: u16) {
        if let Some(c) = self.counts.get(usize::from(vector)) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A submission queue entry under construction.
#[derive(Clone, Copy, Debug, Default)]
pub struct Command(pub [u32; 16]);

impl Command {
    pub fn new(opcode: u8) -> Self {
        let mut c = Command::default();
        c.0[0] = u32::from(opcode);
        c
    }
    pub fn nsid(mut self, nsid: u32) -> Self {
        self.0[1] = nsid;
        self
    }
    pub fn prp1(mut self, a: u64) -> Self {
        self.0[6] = a as u32;
        self.0[7] = (a >> 32) as u32;
        self
    }
    pub fn prp2(mut self, a: u64) -> Self {
        self.0[8] = a as u32;
        self.0[9] = (a >> 32) as u32;
        self
    }
    /// Command dword 10..15.
    pub fn cdw(mut self, n: usize, v: u32) -> Self {
        self.0[n] = v;
        self
    }
    pub fn identify(cns: u8, nsid: u32, buf: u64) -> Self {
        Command::new(0x06).nsid(nsid).prp1(buf).cdw(10, u32::from(cns))
    }
    pub fn set_features(fid: u8, cdw11: u32) -> Self {
        Command::new(0x09).cdw(10, u32::from(fid)).cdw(11, cdw11)
    }
    pub fn get_features(fid: u8) -> Self {
        Command::new(0x0A).cdw(10, u32::from(fid))
    }
}

/// A completion queue entry as the host reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub dw0: u32,
    pub sq_head: u16,
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
}

impl Completion {
    pub fn ok(&self) -> bool {
        self.status.is_success()
    }
}

/// One queue pair as the host tracks it.
#[derive(Clone, Debug)]
pub struct HostQueue {
    pub qid: u16,
    pub sq_base: u64,
    pub sq_entries: u32,
    pub sq_tail: u32,
    pub cq_base: u64,
    pub cq_entries: u32,
    pub cq_head: u32,
    pub phase: bool,
}

pub struct FakeHost {
    pub ctrl: Controller,
    pub mem: GuestMem,
    pub irq: Arc<IrqCounter>,
    pub mem_bytes: u64,
    next_free: u64,
    pub admin: HostQueue,
    pub io: Vec<HostQueue>,
    next_cid: u16,
    /// Shadow doorbell and EventIdx buffers after `config_doorbell_buffers` (I/O queues
    /// use them as Linux's driver does); the MMIO doorbell writes this host made.
    pub dbbuf: Option<(u64, u64)>,
    pub mmio_doorbells: u64,
}

pub const PAGE: u64 = 4096;

impl FakeHost {
    /// A controller over `mem_bytes` of guest memory at guest address 0.
    pub fn new(cfg: ControllerConfig, mem_bytes: u64) -> Self {
        let mem = GuestMemoryAtomic::new(
            GuestMemoryMmap::from_ranges(&[(GuestAddress(0), mem_bytes as usize)]).expect("guest memory"),
        );
        let irq = Arc::new(IrqCounter::new(usize::from(cfg.interrupt_vectors)));
        let ctrl = Controller::new(cfg, mem.clone(), irq.clone()).expect("controller");
        FakeHost {
            ctrl,
            mem,
            irq,
            mem_bytes,
            next_free: 0x10000,
            admin: HostQueue {
                qid: 0,
                sq_base: 0,
                sq_entries: 0,
                sq_tail: 0,
                cq_base: 0,
                cq_entries: 0,
                cq_head: 0,
                phase: true,
            },
            io: Vec::new(),
            next_cid: 1,
            dbbuf: None,
            mmio_doorbells: 0,
        }
    }

    /// `bytes` of zeroed, page-aligned guest memory (bump allocator, never freed).
    pub fn alloc(&mut self, bytes: u64) -> u64 {
        let at = self.next_free;
        self.next_free += bytes.div_ceil(PAGE).max(1) * PAGE;
        assert!(self.next_free <= self.mem_bytes, "fake host out of guest memory");
        dma::write(&self.mem, at, &vec![0u8; bytes as usize]).expect("zero");
        at
    }

    pub fn read32(&mut self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.ctrl.bar0_read(off, &mut b);
        u32::from_le_bytes(b)
    }

    pub fn read64(&mut self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.ctrl.bar0_read(off, &mut b);
        u64::from_le_bytes(b)
    }

    pub fn write32(&mut self, off: u64, v: u32) {
        self.ctrl.bar0_write(off, &v.to_le_bytes());
    }

    pub fn write64(&mut self, off: u64, v: u64) {
        self.ctrl.bar0_write(off, &v.to_le_bytes());
    }

    pub fn csts(&mut self) -> u32 {
        self.read32(0x1C)
    }

    pub fn guest_read(&self, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        dma::read(&self.mem, addr, &mut v).expect("guest read");
        v
    }

    pub fn guest_write(&self, addr: u64, data: &[u8]) {
        dma::write(&self.mem, addr, data).expect("guest write");
    }

    /// What the Linux driver does: disable, program AQA/ASQ/ACQ, write CC with
    /// IOSQES=6, IOCQES=4, MPS=0, CSS=NVM, then set EN. Returns CSTS afterwards.
    pub fn enable(&mut self, admin_entries: u32) -> u32 {
        self.write32(0x14, 0);
        let sq = self.alloc(u64::from(admin_entries) * 64);
        let cq = self.alloc(u64::from(admin_entries) * 16);
        self.admin = HostQueue {
            qid: 0,
            sq_base: sq,
            sq_entries: admin_entries,
            sq_tail: 0,
            cq_base: cq,
            cq_entries: admin_entries,
            cq_head: 0,
            phase: true,
        };
        let aqa = (admin_entries - 1) | (admin_entries - 1) << 16;
        self.write32(0x24, aqa);
        self.write64(0x28, sq);
        self.write64(0x30, cq);
        let cc = 6 << 16 | 4 << 20;
        self.write32(0x14, cc);
        self.write32(0x14, cc | 1);
        self.csts()
    }

    /// Normal shutdown notification (CC.SHN = 01b). Returns CSTS afterwards.
    pub fn shutdown(&mut self) -> u32 {
        let cc = self.read32(0x14);
        self.write32(0x14, (cc & !(3 << 14)) | 1 << 14);
        self.csts()
    }

    /// CC.EN 1 -> 0. Returns CSTS afterwards.
    pub fn disable(&mut self) -> u32 {
        let cc = self.read32(0x14);
        self.write32(0x14, cc & !1 & !(3 << 14));
        self.io.clear();
        self.dbbuf = None;
        self.csts()
    }

    fn queue(&mut self, qid: u16) -> &mut HostQueue {
        if qid == 0 {
            &mut self.admin
        } else {
            self.io.iter_mut().find(|q| q.qid == qid).expect("no such host queue")
        }
    }

    /// Write one command into queue `qid` (CID assigned here) without ringing. Returns the CID.
    pub fn push(&mut self, qid: u16, mut cmd: Command) -> u16 {
        let cid = self.next_cid;
        self.next_cid = self.next_cid.wrapping_add(1).max(1);
        cmd.0[0] = (cmd.0[0] & 0xffff) | u32::from(cid) << 16;
        let q = self.queue(qid).clone();
        let mut raw = [0u8; 64];
        for (c, d) in raw.chunks_exact_mut(4).zip(cmd.0) {
            c.copy_from_slice(&d.to_le_bytes());
        }
        self.guest_write(q.sq_base + u64::from(q.sq_tail) * 64, &raw);
        let q = self.queue(qid);
        q.sq_tail = (q.sq_tail + 1) % q.sq_entries;
        cid
    }

    /// Ring queue `qid`'s SQ tail doorbell (shadowed: only when the EventIdx asks).
    pub fn ring(&mut self, qid: u16) {
        let tail = self.queue(qid).sq_tail;
        if self.shadow_update_needs_mmio(qid, 0, tail) {
            self.mmio_doorbells += 1;
            self.write32(0x1000 + 8 * u64::from(qid), tail);
        }
    }

    /// Doorbell Buffer Config (7Ch) with fresh zeroed buffers, as Linux's driver sends it
    /// after creating its I/O queues; from then on `ring` and `reap` use the shadows.
    pub fn config_doorbell_buffers(&mut self) -> Completion {
        let (dbs, eis) = (self.alloc(PAGE), self.alloc(PAGE));
        let c = self.admin(Command::new(0x7C).prp1(dbs).prp2(eis));
        if c.ok() {
            self.dbbuf = Some((dbs, eis));
        }
        c
    }

    /// `nvme_dbbuf_update_and_check_event`: write the shadow doorbell (`which` 0 SQ tail,
    /// 4 CQ head), then read the EventIdx; an MMIO write is needed when the EventIdx lies
    /// in [old, new) (16-bit arithmetic). Always for the admin queue or without buffers.
    pub fn shadow_update_needs_mmio(&mut self, qid: u16, which: u64, value: u32) -> bool {
        let Some((dbs, eis)) = self.dbbuf.filter(|_| qid != 0) else {
            return true;
        };
        let at = 8 * u64::from(qid) + which;
        let le = |b: Vec<u8>| u32::from_le_bytes(b.try_into().expect("4 bytes"));
        let old = le(self.guest_read(dbs + at, 4)) as u16;
        self.guest_write(dbs + at, &value.to_le_bytes());
        let event_idx = le(self.guest_read(eis + at, 4)) as u16;
        let new = value as u16;
        new.wrapping_sub(event_idx).wrapping_sub(1) < new.wrapping_sub(old)
    }

    /// Take the next completion of queue `qid` if the controller posted one (phase check),
    /// and ring its CQ head doorbell.
    pub fn reap(&mut self, qid: u16) -> Option<Completion> {
        let q = self.queue(qid).clone();
        let raw = self.guest_read(q.cq_base + u64::from(q.cq_head) * 16, 16);
        let dw = |i: usize| u32::from_le_bytes(raw[i * 4..i * 4 + 4].try_into().unwrap());
        let dw3 = dw(3);
        if (dw3 >> 16) & 1 != u32::from(q.phase) {
            return None;
        }
        let c = Completion {
            dw0: dw(0),
            sq_head: dw(2) as u16,
            sqid: (dw(2) >> 16) as u16,
            cid: dw3 as u16,
            status: Status::from_field((dw3 >> 17) as u16),
        };
        let q = self.queue(qid);
        q.cq_head += 1;
        if q.cq_head == q.cq_entries {
            q.cq_head = 0;
            q.phase = !q.phase;
        }
        let head = q.cq_head;
        if self.shadow_update_needs_mmio(qid, 4, head) {
            self.mmio_doorbells += 1;
            self.write32(0x1000 + 8 * u64::from(qid) + 4, head);
        }
        Some(c)
    }

    /// Submit one command and return its completion (None when the controller holds it).
    /// Under `Timing::Model` this waits for the completion's modelled time, as the
    /// transport's timer does.
    pub fn submit(&mut self, qid: u16, cmd: Command) -> Option<Completion> {
        let cid = self.push(qid, cmd);
        self.ring(qid);
        let c = match self.reap(qid) {
            Some(c) => c,
            None => self.reap_deferred(qid)?,
        };
        assert_eq!(c.cid, cid, "completion for another command");
        Some(c)
    }

    /// Wait for the controller's deferred completions (the transport's timer, in-line)
    /// until one arrives on `qid`'s CQ; None when nothing is deferred.
    pub fn reap_deferred(&mut self, qid: u16) -> Option<Completion> {
        while let Some(wait) = self.ctrl.next_due() {
            std::thread::sleep(wait);
            self.ctrl.post_due_completions();
            if let Some(c) = self.reap(qid) {
                return Some(c);
            }
        }
        None
    }

    pub fn admin(&mut self, cmd: Command) -> Completion {
        self.submit(0, cmd).expect("admin command completes inline")
    }

    /// Create I/O CQ and SQ `qid` with `entries` each (IEN with vector `qid`).
    pub fn create_io_queue(&mut self, qid: u16, entries: u32) -> Result<(), Status> {
        let cq = self.alloc(u64::from(entries) * 16);
        let sq = self.alloc(u64::from(entries) * 64);
        let size = (entries - 1) << 16 | u32::from(qid);
        let c = self.admin(
            Command::new(0x05)
                .prp1(cq)
                .cdw(10, size)
                .cdw(11, u32::from(qid) << 16 | 0b11),
        );
        if !c.ok() {
            return Err(c.status);
        }
        let c = self.admin(
            Command::new(0x01)
                .prp1(sq)
                .cdw(10, size)
                .cdw(11, u32::from(qid) << 16 | 1),
        );
        if !c.ok() {
            return Err(c.status);
        }
        self.io.push(HostQueue {
            qid,
            sq_base: sq,
            sq_entries: entries,
            sq_tail: 0,
            cq_base: cq,
            cq_entries: entries,
            cq_head: 0,
            phase: true,
        });
        Ok(())
    }

    /// Build PRP1/PRP2 for a `len`-byte buffer of fresh pages whose first page starts at
    /// `first_offset`; PRP lists hold `list_entries_per_page` entries before chaining
    /// (512 = a full list page; fewer puts lists near page ends to force chaining).
    /// Returns (prp1, prp2, data segments).
    pub fn build_prps(
        &mut self,
        len: usize,
        first_offset: u64,
        list_entries_per_page: u64,
    ) -> (u64, u64, Vec<(u64, usize)>) {
        let mut segs = Vec::new();
        let first_page = self.alloc(PAGE);
        let first = (len as u64).min(PAGE - first_offset) as usize;
        segs.push((first_page + first_offset, first));
        let mut rest = len - first;
        let mut pages = Vec::new();
        while rest > 0 {
            let p = self.alloc(PAGE);
            let n = rest.min(PAGE as usize);
            segs.push((p, n));
            pages.push(p);
            rest -= n;
        }
        let prp1 = first_page + first_offset;
        let prp2 = match pages.len() {
            0 => 0,
            1 => pages[0],
            _ => {
                // Lists of `per` slots placed at the end of their pages; the last slot of a
                // page chains to the next list when more than one entry remains.
                let per = list_entries_per_page.clamp(2, 512);
                let mut list_start = 0u64;
                let mut i = 0usize;
                let mut prev_chain: Option<u64> = None;
                while i < pages.len() {
                    let page = self.alloc(PAGE);
                    let start = page + PAGE - per * 8;
                    if let Some(slot) = prev_chain {
                        // A chained list must start at a page boundary.
                        self.guest_write(slot, &page.to_le_bytes());
                    } else {
                        list_start = start;
                    }
                    let base = if prev_chain.is_some() { page } else { start };
                    let slots = if prev_chain.is_some() { 512 } else { per };
                    let left = pages.len() - i;
                    let data_slots = if left as u64 > slots { slots - 1 } else { left as u64 };
                    for s in 0..data_slots {
                        self.guest_write(base + s * 8, &pages[i].to_le_bytes());
                        i += 1;
                    }
                    prev_chain = if i < pages.len() {
                        Some(base + (slots - 1) * 8)
                    } else {
                        None
                    };
                }
                list_start
            }
        };
        (prp1, prp2, segs)
    }

    /// Write `data` (a multiple of the LBA size) at `slba` through queue `qid`.
    pub fn write_lbas(&mut self, qid: u16, slba: u64, data: &[u8], lba_shift: u8) -> Completion {
        let (prp1, prp2, segs) = self.build_prps(data.len(), 0, 512);
        let mut at = 0;
        for (a, n) in &segs {
            self.guest_write(*a, &data[at..at + n]);
            at += n;
        }
        let nlb = (data.len() >> lba_shift) as u32 - 1;
        let cmd = Command::new(0x01)
            .nsid(1)
            .prp1(prp1)
            .prp2(prp2)
            .cdw(10, slba as u32)
            .cdw(11, (slba >> 32) as u32)
            .cdw(12, nlb);
        self.submit(qid, cmd).expect("write completes inline")
    }

    /// Read `nlb` blocks at `slba` through queue `qid`.
    pub fn read_lbas(&mut self, qid: u16, slba: u64, nlb: u32, lba_shift: u8) -> (Completion, Vec<u8>) {
        let len = (nlb as usize) << lba_shift;
        let (prp1, prp2, segs) = self.build_prps(len, 0, 512);
        let cmd = Command::new(0x02)
            .nsid(1)
            .prp1(prp1)
            .prp2(prp2)
            .cdw(10, slba as u32)
            .cdw(11, (slba >> 32) as u32)
            .cdw(12, nlb - 1);
        let c = self.submit(qid, cmd).expect("read completes inline");
        let mut out = Vec::with_capacity(len);
        for (a, n) in segs {
            out.extend(self.guest_read(a, n));
        }
        (c, out)
    }

    /// Forget every host queue's state (after a reset the controller has none either).
    pub fn forget_queues(&mut self) {
        self.io.clear();
        self.dbbuf = None;
    }
}
