//! The `ssd:causal` workload: a small discrete-event model of an SSD, so a
//! trace tells one consistent story. Commands arrive on 8 submission queues
//! (at most [`QUEUE_DEPTH`] in flight per queue); each fetch is followed by
//! an FTL lookup, NAND operations on the dies its LBAs map to, and then its
//! completion, whose `latency_ns` is exactly completion time − fetch time.
//! Dies do one operation at a time (operations queue behind each other),
//! garbage collection and wear levelling occupy dies too, and every
//! GC_START / WEAR_LEVEL has its matching end.
//!
//! The model is deterministic from its seed: record `seq` is the `seq`-th
//! record the simulation emits, and its simulated time (ns since the start)
//! is the record's timestamp. Ground truth for `seq` is therefore a replay
//! from the start; [`fill`] keeps the last simulation per thread so that
//! sequential calls (the engine, a ground-truth pass) cost O(1) each.

use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::catalog::*;
use crate::rng::SplitMix64;

pub const QUEUES: u16 = 8;
/// Commands in flight per submission queue, at most.
pub const QUEUE_DEPTH: u32 = 8;
const CHANNELS: u64 = 8;
const DIES: u64 = 4;
const BLOCKS: u64 = 4096;
const PAGES: u64 = 256;
/// Blocks free at the start; GC runs while fewer than `GC_THRESHOLD` are.
const FREE_BLOCKS: u32 = 64;
const GC_THRESHOLD: u32 = 60;
/// Pages programmed per block consumed (host writes use up free blocks).
const PAGES_PER_BLOCK: u32 = 256;
/// Every n-th GC is followed by a wear-levelling migration.
const WEAR_LEVEL_EVERY: u32 = 4;
const GC_CHECK_NS: u64 = 200_000;

/// A record the simulation will emit at a known time.
#[derive(Debug, Clone, Copy)]
struct Rec {
    opcode: u16,
    source: u32,
    len: u8,
    payload: [u8; 24],
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Emit(Rec),
    /// A host command arrives on this queue (or waits for a free slot).
    Arrive(u16),
    /// The completion of command (queue, cid) has been posted: its slot and cid free.
    SlotFree(u16, u16),
    GcCheck,
    /// The running GC (and its wear levelling) finished.
    GcDone,
}

/// Heap entry ordered by (time, insertion order): ties keep the order in
/// which events were scheduled, so the run is deterministic.
#[derive(Debug, Clone, Copy)]
struct Ev {
    t: u64,
    order: u64,
    kind: Kind,
}
impl PartialEq for Ev {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.order) == (o.t, o.order)
    }
}
impl Eq for Ev {}
impl PartialOrd for Ev {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ev {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.t, self.order).cmp(&(o.t, o.order))
    }
}

fn rec(opcode: u16, source: u32, len: u8) -> Rec {
    Rec {
        opcode,
        source,
        len,
        payload: [0; 24],
    }
}
impl Rec {
    fn put(mut self, off: usize, bytes: &[u8]) -> Self {
        self.payload[off..off + bytes.len()].copy_from_slice(bytes);
        self
    }
    fn u8(self, off: usize, v: u8) -> Self {
        self.put(off, &[v])
    }
    fn u16(self, off: usize, v: u16) -> Self {
        self.put(off, &v.to_le_bytes())
    }
    fn u32(self, off: usize, v: u32) -> Self {
        self.put(off, &v.to_le_bytes())
    }
    fn u64(self, off: usize, v: u64) -> Self {
        self.put(off, &v.to_le_bytes())
    }
}

/// One simulated drive.
#[derive(Debug, Clone)]
pub struct SsdSim {
    rng: SplitMix64,
    heap: BinaryHeap<Reverse<Ev>>,
    order: u64,
    in_flight: [u32; QUEUES as usize],
    /// The queue's next arrival found it full: arrive again when a slot frees.
    waiting: [bool; QUEUES as usize],
    /// Command ids in flight per queue (bit per cid, 1024 cids).
    cids: [[u64; 16]; QUEUES as usize],
    next_cid: [u16; QUEUES as usize],
    die_free_at: [u64; (CHANNELS * DIES) as usize],
    erase_count: Vec<u32>,
    free_blocks: u32,
    pages_written: u32,
    gc_running: bool,
    gcs: u32,
    emitted: u64,
}

impl SsdSim {
    pub fn new(seed: u64) -> Self {
        let mut me = Self {
            rng: SplitMix64::new(seed ^ 0x5344_4341_5553_414c), // "SDCAUSAL"
            heap: BinaryHeap::new(),
            order: 0,
            in_flight: [0; QUEUES as usize],
            waiting: [false; QUEUES as usize],
            cids: [[0; 16]; QUEUES as usize],
            next_cid: [0; QUEUES as usize],
            die_free_at: [0; (CHANNELS * DIES) as usize],
            erase_count: vec![0; BLOCKS as usize],
            free_blocks: FREE_BLOCKS,
            pages_written: 0,
            gc_running: false,
            gcs: 0,
            emitted: 0,
        };
        for q in 0..QUEUES {
            let t = me.rng.range(0, 20_000);
            me.push(t, Kind::Arrive(q));
        }
        me.push(GC_CHECK_NS, Kind::GcCheck);
        me
    }

    /// Records emitted so far (the next record's seq).
    pub fn emitted(&self) -> u64 {
        self.emitted
    }

    fn push(&mut self, t: u64, kind: Kind) {
        self.order += 1;
        self.heap.push(Reverse(Ev {
            t,
            order: self.order,
            kind,
        }));
    }

    fn emit(&mut self, t: u64, r: Rec) {
        self.push(t, Kind::Emit(r));
    }

    /// The next record: writes its payload into `buf` and returns
    /// (opcode, source, payload length, simulated time in ns).
    pub fn next_record(&mut self, buf: &mut [u8]) -> (u16, u32, usize, u64) {
        loop {
            // The heap always holds each queue's next arrival (or a waiting
            // queue's SlotFree) and the GC check, so it is never empty.
            let Some(Reverse(ev)) = self.heap.pop() else {
                unreachable!("the simulation always has a next event")
            };
            match ev.kind {
                Kind::Emit(r) => {
                    let n = r.len as usize;
                    buf[..n].copy_from_slice(&r.payload[..n]);
                    self.emitted += 1;
                    return (r.opcode, r.source, n, ev.t);
                }
                Kind::Arrive(q) => self.arrive(ev.t, q),
                Kind::SlotFree(q, cid) => {
                    self.in_flight[q as usize] -= 1;
                    self.cids[q as usize][cid as usize / 64] &= !(1 << (cid % 64));
                    if std::mem::take(&mut self.waiting[q as usize]) {
                        self.push(ev.t + 1, Kind::Arrive(q));
                    }
                }
                Kind::GcCheck => self.gc_check(ev.t),
                Kind::GcDone => self.gc_running = false,
            }
        }
    }

    /// Book `lat` ns on die `d` no earlier than `t`: returns the end time.
    fn book(&mut self, d: usize, t: u64, lat: u64) -> u64 {
        let start = t.max(self.die_free_at[d]);
        self.die_free_at[d] = start + lat;
        start + lat
    }

    fn nand(&mut self, op: u16, d: usize, t: u64, block: u32, third: u32) -> u64 {
        let lat = match op {
            OP_NAND_READ => self.rng.range(45_000, 80_000),
            OP_NAND_PROGRAM => self.rng.range(400_000, 1_200_000),
            _ => self.rng.range(2_000_000, 5_000_000),
        };
        let end = self.book(d, t, lat);
        let (ch, die) = (d as u64 / DIES, d as u64 % DIES);
        let r = rec(op, (ch << 8 | die) as u32, 16)
            .u8(0, ch as u8)
            .u8(1, die as u8)
            .u8(2, self.rng.below(2) as u8)
            .u32(4, block)
            .u32(8, third)
            .u32(12, lat as u32);
        self.emit(end, r);
        end
    }

    fn alloc_cid(&mut self, q: usize) -> u16 {
        loop {
            let c = self.next_cid[q];
            self.next_cid[q] = (c + 1) % 1024;
            let (w, b) = (c as usize / 64, c % 64);
            if self.cids[q][w] & (1 << b) == 0 {
                self.cids[q][w] |= 1 << b;
                return c;
            }
        }
    }

    fn arrive(&mut self, t: u64, q: u16) {
        let qi = q as usize;
        if self.in_flight[qi] >= QUEUE_DEPTH {
            self.waiting[qi] = true;
            return;
        }
        self.in_flight[qi] += 1;
        let cid = self.alloc_cid(qi);
        let r = &mut self.rng;
        let nvme_op = match r.below(10) {
            0..=5 => 0x02u8, // read
            6..=8 => 0x01,   // write
            _ => 0x00,       // flush
        };
        let nlb = if nvme_op == 0 { 0 } else { r.range(0, 255) as u32 };
        let slba = r.below(1 << 32);
        self.emit(
            t,
            rec(OP_CMD_FETCH, q as u32, 24)
                .u16(0, q)
                .u16(2, cid)
                .u8(4, nvme_op)
                .u32(8, 1)
                .u32(12, nlb)
                .u64(16, slba),
        );
        // FTL lookup (the map lives in the host memory buffer).
        let ppa = self.rng.next_u64() >> 24;
        let mut ready = t;
        if nvme_op != 0 {
            if self.rng.below(100) < 85 {
                ready += self.rng.range(300, 1_500);
                self.emit(ready, rec(OP_FTL_MAP_HIT, 0, 16).u64(0, slba).u64(8, ppa));
            } else {
                let fetch = self.rng.range(40_000, 90_000);
                ready += fetch;
                self.emit(
                    ready,
                    rec(OP_FTL_MAP_MISS, 0, 24)
                        .u64(0, slba)
                        .u64(8, ppa)
                        .u32(16, fetch as u32),
                );
            }
        }
        // NAND: one operation per 64 blocks, on consecutive dies.
        let mut done = ready + self.rng.range(2_000, 20_000);
        if nvme_op != 0 {
            let ops = 1 + nlb / 64;
            let first_die = (slba / 8) % (CHANNELS * DIES);
            let op = if nvme_op == 0x02 { OP_NAND_READ } else { OP_NAND_PROGRAM };
            done = ready;
            for i in 0..ops as u64 {
                let d = ((first_die + i) % (CHANNELS * DIES)) as usize;
                let block = ((slba >> 8) % BLOCKS) as u32;
                let page = ((slba + i) % PAGES) as u32;
                done = done.max(self.nand(op, d, ready, block, page));
            }
            if nvme_op == 0x01 {
                self.pages_written += ops;
                while self.pages_written >= PAGES_PER_BLOCK {
                    self.pages_written -= PAGES_PER_BLOCK;
                    self.free_blocks = self.free_blocks.saturating_sub(1);
                }
            }
        }
        let complete = done + self.rng.range(1_000, 3_000);
        let status = if nvme_op == 0x02 && self.rng.below(1000) == 0 {
            0x0281
        } else {
            0
        };
        self.emit(
            complete,
            rec(OP_CMD_COMPLETE, q as u32, 16)
                .u16(0, q)
                .u16(2, cid)
                .u16(4, status)
                .u32(8, (complete - t) as u32),
        );
        self.push(complete, Kind::SlotFree(q, cid));
        let gap = self.rng.range(2_000, 60_000);
        self.push(t + gap, Kind::Arrive(q));
    }

    fn gc_check(&mut self, t: u64) {
        self.push(t + GC_CHECK_NS, Kind::GcCheck);
        if self.gc_running || self.free_blocks >= GC_THRESHOLD {
            return;
        }
        self.gc_running = true;
        self.gcs += 1;
        let victim = self.rng.below(BLOCKS) as u32;
        let valid = self.rng.range(2, 64) as u32;
        self.emit(
            t,
            rec(OP_GC_START, 0, 16)
                .u32(0, victim)
                .u32(4, valid)
                .u32(8, self.free_blocks),
        );
        // Valid pages move in batches of 16: read on the victim's die,
        // program on another.
        let vd = (victim as u64 % (CHANNELS * DIES)) as usize;
        let mut end = t;
        for i in 0..valid.div_ceil(16) {
            let r = self.nand(OP_NAND_READ, vd, end, victim, i);
            let dd = (vd + 1 + i as usize) % (CHANNELS * DIES) as usize;
            let dst = self.rng.below(BLOCKS) as u32;
            end = self.nand(OP_NAND_PROGRAM, dd, r, dst, i);
        }
        self.erase_count[victim as usize] += 1;
        let ec = self.erase_count[victim as usize];
        end = self.nand(OP_NAND_ERASE, vd, end, victim, ec);
        self.free_blocks += 1;
        self.emit(
            end,
            rec(OP_GC_END, 0, 16)
                .u32(0, victim)
                .u32(4, valid)
                .u32(8, (end - t) as u32)
                .u32(12, self.free_blocks),
        );
        if self.gcs.is_multiple_of(WEAR_LEVEL_EVERY) {
            // Move cold data from a rarely erased block into the victim.
            let src = self.rng.below(BLOCKS) as u32;
            let (sc, dc) = (self.erase_count[src as usize], ec);
            self.emit(
                end,
                rec(OP_WEAR_LEVEL, 0, 16)
                    .u32(0, src)
                    .u32(4, victim)
                    .u32(8, sc)
                    .u32(12, dc),
            );
            let sd = (src as u64 % (CHANNELS * DIES)) as usize;
            let r = self.nand(OP_NAND_READ, sd, end, src, 0);
            let w = self.nand(OP_NAND_PROGRAM, vd, r, victim, 0);
            self.emit(
                w,
                rec(OP_WEAR_LEVEL_END, 0, 16)
                    .u32(0, src)
                    .u32(4, victim)
                    .u32(8, PAGES as u32)
                    .u32(12, (w - end) as u32),
            );
            end = w;
        }
        self.push(end, Kind::GcDone);
    }
}

thread_local! {
    /// The last simulation used on this thread, by seed.
    static LAST: RefCell<Option<(u64, SsdSim)>> = const { RefCell::new(None) };
}

/// Record `seq` of the simulation seeded with `seed`: (opcode, source,
/// length, simulated ns). Replays from the start unless this thread's last
/// simulation of the same seed is at or before `seq`.
pub fn fill(seed: u64, seq: u64, buf: &mut [u8]) -> (u16, u32, usize, u64) {
    LAST.with(|cell| {
        let mut slot = cell.borrow_mut();
        let reuse = matches!(&*slot, Some((s, sim)) if *s == seed && sim.emitted() <= seq);
        if !reuse {
            *slot = Some((seed, SsdSim::new(seed)));
        }
        let (_, sim) = slot.as_mut().expect("set above");
        while sim.emitted() < seq {
            sim.next_record(buf);
        }
        sim.next_record(buf)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeSet, HashMap};

    fn u16_at(p: &[u8], o: usize) -> u16 {
        u16::from_le_bytes(p[o..o + 2].try_into().unwrap())
    }
    fn u32_at(p: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(p[o..o + 4].try_into().unwrap())
    }

    /// The causal story holds over a long run: time never goes back, every
    /// fetch completes once with latency = completion - fetch, queue depth
    /// stays bounded, a die does one operation at a time, GC and wear
    /// levelling pair up with their durations.
    #[test]
    fn records_tell_a_consistent_story() {
        let mut sim = SsdSim::new(7);
        let mut buf = [0u8; 64];
        let mut last_t = 0;
        let mut open_cmds: HashMap<(u16, u16), u64> = HashMap::new();
        let mut per_queue = [0u32; QUEUES as usize];
        let mut die_end: HashMap<u32, u64> = HashMap::new();
        let (mut gc, mut wl) = (None::<(u32, u64)>, None::<(u32, u64)>);
        let mut seen = BTreeSet::new();
        let (mut completed, mut gcs, mut wls) = (0, 0, 0);
        for _ in 0..200_000 {
            let (op, src, len, t) = sim.next_record(&mut buf);
            let p = &buf[..len];
            assert!(t >= last_t, "time went back");
            last_t = t;
            seen.insert(op);
            assert_eq!(crate::catalog::opcode_info(op).unwrap().payload_len, Some(len as u16));
            match op {
                OP_CMD_FETCH => {
                    let (q, c) = (u16_at(p, 0), u16_at(p, 2));
                    assert_eq!(src, q as u32);
                    assert!(open_cmds.insert((q, c), t).is_none(), "cid reused while in flight");
                    per_queue[q as usize] += 1;
                    assert!(per_queue[q as usize] <= QUEUE_DEPTH);
                }
                OP_CMD_COMPLETE => {
                    let (q, c) = (u16_at(p, 0), u16_at(p, 2));
                    let f = open_cmds.remove(&(q, c)).expect("completion without fetch");
                    assert_eq!(u32_at(p, 8) as u64, t - f);
                    per_queue[q as usize] -= 1;
                    completed += 1;
                }
                OP_NAND_READ | OP_NAND_PROGRAM | OP_NAND_ERASE => {
                    let start = t - u32_at(p, 12) as u64;
                    assert_eq!(src, (p[0] as u32) << 8 | p[1] as u32);
                    let prev = die_end.insert(src, t).unwrap_or(0);
                    assert!(start >= prev, "die {src:#x} overlaps");
                }
                OP_GC_START => {
                    assert!(gc.is_none());
                    gc = Some((u32_at(p, 0), t));
                }
                OP_GC_END => {
                    let (v, s) = gc.take().expect("GC_END without start");
                    assert_eq!(v, u32_at(p, 0));
                    assert_eq!(u32_at(p, 8) as u64, t - s);
                    gcs += 1;
                }
                OP_WEAR_LEVEL => {
                    assert!(wl.is_none());
                    wl = Some((u32_at(p, 0), t));
                }
                OP_WEAR_LEVEL_END => {
                    let (s_blk, s) = wl.take().expect("end without start");
                    assert_eq!(s_blk, u32_at(p, 0));
                    assert_eq!(u32_at(p, 12) as u64, t - s);
                    wls += 1;
                }
                _ => {}
            }
        }
        assert!(open_cmds.len() <= (QUEUES as u32 * QUEUE_DEPTH) as usize);
        assert!(completed > 10_000 && gcs > 5 && wls > 0, "{completed} {gcs} {wls}");
        let want: BTreeSet<u16> = crate::catalog::OPCODES
            .iter()
            .filter(|o| o.workload.starts_with("ssd"))
            .map(|o| o.opcode)
            .collect();
        assert_eq!(seen, want);
    }

    #[test]
    fn any_seq_replays_to_the_same_record() {
        let seqs = [0u64, 5, 1000, 17, 17, 2500, 3];
        let mut all = Vec::new();
        let mut sim = SsdSim::new(99);
        let mut buf = [0u8; 64];
        for _ in 0..=2500 {
            let (op, src, len, t) = sim.next_record(&mut buf);
            all.push((op, src, buf[..len].to_vec(), t));
        }
        for s in seqs {
            let mut b = [0u8; 64];
            let (op, src, len, t) = fill(99, s, &mut b);
            assert_eq!((op, src, b[..len].to_vec(), t), all[s as usize], "seq {s}");
        }
        // Another seed is another run.
        let mut b = [0u8; 64];
        assert_ne!(fill(100, 2500, &mut b).3, all[2500].3);
    }
}
