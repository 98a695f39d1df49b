//! One pass of accounting over a trace: counts per opcode and per core,
//! losses, epochs, time span and an inter-arrival histogram. Memory is
//! bounded: per-opcode and per-core tables are capped, lists of gaps are
//! capped (totals stay exact).

use std::collections::BTreeMap;

use serde::Serialize;

use hmb_trace_file::Item;

use crate::input::Rec;
use crate::walk::Event;

/// Most distinct cores tracked individually; the rest are summed as "other".
pub const MAX_CORES: usize = 4096;
/// Most losses listed one by one (totals stay exact beyond it).
pub const MAX_LISTED_LOSSES: usize = 10_000;
/// Cores below this are counted in a flat table (fast path).
const DENSE_CORES: usize = 1 << 16;
/// Inter-arrival buckets: [0], [1], [2,4), [4,8) … [2^62, ∞) ns.
pub const HIST_BUCKETS: usize = 64;

#[derive(Debug, Default, Clone, Serialize)]
pub struct OpcodeStats {
    pub records: u64,
    pub payload_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EpochStats {
    pub epoch: u64,
    pub ring_size: u64,
    pub records: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    pub lost_marked: u64,
    pub lost_unmarked: u64,
    pub frozen: bool,
}

impl EpochStats {
    fn new(epoch: u64, ring_size: u64) -> Self {
        Self {
            epoch,
            ring_size,
            records: 0,
            first_seq: None,
            last_seq: None,
            first_ns: None,
            last_ns: None,
            lost_marked: 0,
            lost_unmarked: 0,
            frozen: false,
        }
    }
}

/// One loss: a LOST marker or a gap found from sequence numbers.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Loss {
    /// "lost_marker" | "seq_gap"
    pub kind: &'static str,
    pub offset: u64,
    pub epoch: u64,
    pub first_seq: u64,
    pub count: u64,
    /// Timestamp of the record that revealed a gap (0 when unknown).
    pub timestamp_ns: u64,
}

/// An array serialised as the `Vec` it was (serde's derive stops at 32).
fn as_slice<S: serde::Serializer>(a: &[u64; HIST_BUCKETS], s: S) -> Result<S::Ok, S::Error> {
    a.as_slice().serialize(s)
}

#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    pub records: u64,
    pub markers: u64,
    pub record_bytes: u64,
    pub opcodes: BTreeMap<u16, OpcodeStats>,
    pub cores: BTreeMap<u32, u64>,
    /// Hot-path tables, folded into `opcodes` and `cores` by `finish`.
    #[serde(skip)]
    dense_ops: Vec<OpcodeStats>,
    #[serde(skip)]
    dense_cores: Vec<u64>,
    pub other_cores_records: u64,
    pub epochs: Vec<EpochStats>,
    pub lost_marked: u64,
    pub lost_unmarked: u64,
    pub losses: Vec<Loss>,
    pub losses_not_listed: u64,
    pub first_ns: Option<u64>,
    pub last_ns: Option<u64>,
    /// By `bucket`: a fixed array, so the record path's index needs no
    /// bounds check (`bucket` is below `HIST_BUCKETS`).
    #[serde(serialize_with = "as_slice")]
    pub inter_arrival: Box<[u64; HIST_BUCKETS]>,
    pub ts_backwards: u64,
    pub seq_backwards: u64,
    pub unknown_markers: u64,
    pub warnings: Vec<String>,
    /// The current epoch's record fields as plain values (`Cur`): its
    /// `EpochStats` is brought up to date by `fold` (before an epoch
    /// starts, a merge, `finish`).
    #[serde(skip)]
    cur: Cur,
    /// The first and last timestamps while walking (`first_ns` and
    /// `last_ns` once `finish`ed); `records` > 0 says they are set. The
    /// highest is `hi_ns` and, while `cur.records` > 0, `cur.last_ns`:
    /// `hi_ns` takes `cur.last_ns` only where that can stop being the
    /// highest of the epoch's run (a step back, `fold`), not per record.
    #[serde(skip)]
    lo_ns: u64,
    #[serde(skip)]
    hi_ns: u64,
    /// The accounting of a file's later part (`new_part`): what depends on
    /// the earlier part waits in `deferred` for `merge`.
    #[serde(skip)]
    part: bool,
    #[serde(skip)]
    deferred: Vec<Deferred>,
}

/// The current epoch's records in this accounting, as plain values: the
/// record path updates these instead of the `Option` fields of the last
/// `EpochStats`. `records` > 0 says the seq and ns fields are set; then
/// `last_ns` is the last timestamp in the epoch (the inter-arrival
/// histogram's previous one).
#[derive(Debug, Clone, Copy, Default)]
struct Cur {
    records: u64,
    first_seq: u64,
    last_seq: u64,
    first_ns: u64,
    last_ns: u64,
}

/// What a later part cannot settle alone, in file order: marker epochs
/// that are not in the part's table, and warnings whose listing depends
/// on counts in the earlier part.
#[derive(Debug, Clone)]
enum Deferred {
    Lost {
        offset: u64,
        epoch: u64,
        count: u64,
    },
    Frozen {
        epoch: u64,
    },
    /// The part's first unknown marker.
    Unknown(String),
    /// The part's n-th seq-backwards record (n <= 10).
    SeqBackwards(u64, String),
}

impl Stats {
    pub fn new(first_epoch: u64, ring_size: u64) -> Self {
        Self {
            records: 0,
            markers: 0,
            record_bytes: 0,
            opcodes: BTreeMap::new(),
            cores: BTreeMap::new(),
            dense_ops: vec![OpcodeStats::default(); 1 << 16],
            dense_cores: vec![0; DENSE_CORES],
            other_cores_records: 0,
            epochs: vec![EpochStats::new(first_epoch, ring_size)],
            lost_marked: 0,
            lost_unmarked: 0,
            losses: Vec::new(),
            losses_not_listed: 0,
            first_ns: None,
            last_ns: None,
            inter_arrival: Box::new([0; HIST_BUCKETS]),
            ts_backwards: 0,
            seq_backwards: 0,
            unknown_markers: 0,
            warnings: Vec::new(),
            cur: Cur::default(),
            lo_ns: u64::MAX,
            hi_ns: 0,
            part: false,
            deferred: Vec::new(),
        }
    }

    /// The accounting of a file's later part, which starts with a record
    /// of `epoch` (its ring size `ring_size`); `merge` appends it to the
    /// accounting of everything before.
    pub fn new_part(epoch: u64, ring_size: u64) -> Self {
        Self {
            part: true,
            ..Self::new(epoch, ring_size)
        }
    }

    /// Fold the hot-path tables into the public maps. Call once after the
    /// last `add`; the walk helpers do.
    pub fn finish(&mut self) {
        self.fold();
        if self.records > 0 {
            (self.first_ns, self.last_ns) = (Some(self.lo_ns), Some(self.hi_ns));
        }
        for (op, o) in self.dense_ops.iter().enumerate() {
            if o.records > 0 {
                self.opcodes.insert(op as u16, o.clone());
            }
        }
        self.dense_ops = Vec::new();
        let mut folded = 0u64;
        for (core, n) in self.dense_cores.iter().enumerate() {
            if *n > 0 {
                if self.cores.len() < MAX_CORES || self.cores.contains_key(&(core as u32)) {
                    self.cores.insert(core as u32, *n);
                } else {
                    folded += n;
                }
            }
        }
        self.other_cores_records += folded;
        self.dense_cores = Vec::new();
    }

    pub fn lost_total(&self) -> u64 {
        self.lost_marked + self.lost_unmarked
    }

    pub fn span_ns(&self) -> u64 {
        match (self.first_ns, self.last_ns) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        }
    }

    /// Records per second over the time span.
    pub fn rate(&self) -> f64 {
        let span = self.span_ns();
        if span == 0 {
            0.0
        } else {
            self.records as f64 * 1e9 / span as f64
        }
    }

    fn epoch_mut(&mut self) -> &mut EpochStats {
        let last = self.epochs.len() - 1;
        &mut self.epochs[last]
    }

    fn note_loss(&mut self, loss: Loss) {
        if self.losses.len() < MAX_LISTED_LOSSES {
            self.losses.push(loss);
        } else {
            self.losses_not_listed += 1;
        }
    }

    /// Account one event of the walk. Records, nearly every event, take
    /// the inlined path; markers, gaps and warnings the other.
    #[inline]
    pub fn add(&mut self, ev: &Event<'_, '_>) {
        match *ev {
            Event::Record { item, .. } => self.add_record(item),
            _ => self.add_other(ev),
        }
    }

    #[inline]
    fn add_record(&mut self, item: &Item<'_>) {
        self.add_rec(&Rec::of(item));
    }

    /// A device record of the current epoch (the walker's `Record` event),
    /// its header read once by the record loop (`parallel.rs`).
    #[inline(always)]
    pub(crate) fn add_rec(&mut self, r: &Rec<'_>) {
        let ts = r.ts;
        self.records += 1;
        self.record_bytes += r.size;
        // After `finish` the dense tables are empty and the maps take over.
        let len = r.payload.len() as u64;
        match self.dense_ops.get_mut(r.opcode as usize) {
            Some(op) => {
                op.records += 1;
                op.payload_bytes += len;
            }
            None => self.add_opcode_to_map(r.opcode, len),
        }
        match self.dense_cores.get_mut(r.source as usize) {
            Some(n) => *n += 1,
            None => self.add_core_to_map(r.source),
        }
        let c = &mut self.cur;
        // `lo_ns` only moves where a timestamp can be below every earlier
        // one: an epoch's first record or a step back (it already holds
        // `cur.last_ns`, so a step forward cannot lower it).
        if c.records == 0 {
            (c.first_seq, c.first_ns) = (r.seq, ts);
            self.lo_ns = self.lo_ns.min(ts);
        } else if ts >= c.last_ns {
            self.inter_arrival[bucket(ts - c.last_ns)] += 1;
        } else {
            self.ts_backwards += 1;
            self.lo_ns = self.lo_ns.min(ts);
            // `cur.last_ns` stops being the run's highest here.
            self.hi_ns = self.hi_ns.max(c.last_ns);
        }
        c.records += 1;
        (c.last_seq, c.last_ns) = (r.seq, ts);
    }

    /// Bring the current epoch's `EpochStats` and `hi_ns` up to date with
    /// `cur`.
    fn fold(&mut self) {
        let c = self.cur;
        if c.records > 0 {
            self.hi_ns = self.hi_ns.max(c.last_ns);
        }
        let e = self.epoch_mut();
        e.records = c.records;
        if c.records > 0 {
            (e.first_seq, e.last_seq) = (Some(c.first_seq), Some(c.last_seq));
            (e.first_ns, e.last_ns) = (Some(c.first_ns), Some(c.last_ns));
        }
    }

    /// `cur` from the current epoch's `EpochStats` (after a merge).
    fn unfold(&mut self) {
        let e = &self.epochs[self.epochs.len() - 1];
        self.cur = match (e.first_seq, e.last_seq, e.first_ns, e.last_ns) {
            (Some(first_seq), Some(last_seq), Some(first_ns), Some(last_ns)) if e.records > 0 => Cur {
                records: e.records,
                first_seq,
                last_seq,
                first_ns,
                last_ns,
            },
            _ => Cur::default(),
        };
    }

    #[cold]
    #[inline(never)]
    fn add_opcode_to_map(&mut self, opcode: u16, len: u64) {
        let op = self.opcodes.entry(opcode).or_default();
        op.records += 1;
        op.payload_bytes += len;
    }

    #[inline(never)]
    fn add_core_to_map(&mut self, core: u32) {
        if let Some(n) = self.cores.get_mut(&core) {
            *n += 1;
        } else if self.cores.len() < MAX_CORES {
            self.cores.insert(core, 1);
        } else {
            self.other_cores_records += 1;
        }
    }

    #[inline(never)]
    fn add_other(&mut self, ev: &Event<'_, '_>) {
        match *ev {
            Event::Record { item, .. } => self.add_record(item),
            Event::Lost {
                offset,
                epoch,
                first_seq,
                count,
            } => {
                self.markers += 1;
                self.lost_marked += count;
                if let Some(e) = self.epochs.iter_mut().rev().find(|e| e.epoch == epoch) {
                    e.lost_marked += count;
                } else if self.part {
                    self.deferred.push(Deferred::Lost { offset, epoch, count });
                } else {
                    self.warnings.push(format!(
                        "LOST marker at offset {offset} names epoch {epoch}, not in the file"
                    ));
                }
                self.note_loss(Loss {
                    kind: "lost_marker",
                    offset,
                    epoch,
                    first_seq,
                    count,
                    timestamp_ns: 0,
                });
            }
            Event::Gap {
                offset,
                epoch,
                first_seq,
                count,
                timestamp_ns,
            } => {
                self.lost_unmarked += count;
                self.epoch_mut().lost_unmarked += count;
                self.note_loss(Loss {
                    kind: "seq_gap",
                    offset,
                    epoch,
                    first_seq,
                    count,
                    timestamp_ns,
                });
            }
            Event::Frozen { epoch, .. } => {
                self.markers += 1;
                if let Some(e) = self.epochs.iter_mut().rev().find(|e| e.epoch == epoch) {
                    e.frozen = true;
                } else if self.part {
                    self.deferred.push(Deferred::Frozen { epoch });
                }
            }
            Event::EpochStart { epoch, ring_size, .. } => {
                self.markers += 1;
                self.fold();
                self.epochs.push(EpochStats::new(epoch, ring_size));
                self.cur = Cur::default();
            }
            Event::UnknownMarker { offset, opcode } => {
                self.markers += 1;
                self.unknown_markers += 1;
                if self.unknown_markers == 1 {
                    let w = format!("unknown marker opcode {opcode:#06x} at offset {offset} (skipped)");
                    if self.part {
                        self.deferred.push(Deferred::Unknown(w));
                    } else {
                        self.warnings.push(w);
                    }
                }
            }
            Event::SeqBackwards {
                offset,
                epoch,
                seq,
                expected,
            } => {
                self.seq_backwards += 1;
                if self.seq_backwards <= 10 {
                    let w = format!(
                        "record at offset {offset} (epoch {epoch}) has seq {seq}, expected at least {expected}"
                    );
                    if self.part {
                        self.deferred.push(Deferred::SeqBackwards(self.seq_backwards, w));
                    } else {
                        self.warnings.push(w);
                    }
                }
            }
        }
    }

    /// Whether `merge(.., next)` is exact: the per-core table's cap must
    /// not have been reached (else which cores it lists depends on the
    /// order of arrival across both parts). Call before `finish`.
    pub fn can_merge(&self, next: &Stats) -> bool {
        let new_cores = next.cores.keys().filter(|c| !self.cores.contains_key(c)).count();
        next.part
            && self.epochs.last().map(|e| (e.epoch, e.ring_size))
                == Some((next.epochs[0].epoch, next.epochs[0].ring_size))
            && self.other_cores_records == 0
            && next.other_cores_records == 0
            && self.cores.len() + new_cores <= MAX_CORES
    }

    /// Append the accounting of the part that follows this one in the file
    /// (`new_part`, before `finish`), as if one `Stats` had seen both.
    /// `boundary` is the walker's event at the part's first record, which
    /// only the whole walk sees (a gap or a seq going backwards across the
    /// boundary); `first_ts` is that record's timestamp. Check `can_merge`
    /// first.
    pub fn merge(&mut self, boundary: Option<&Event<'_, '_>>, first_ts: u64, mut next: Stats) {
        debug_assert!(self.can_merge(&next));
        if let Some(ev) = boundary {
            self.add(ev);
        }
        // The inter-arrival time across the boundary (the part's first
        // record is in the epoch this part ended in).
        if self.cur.records > 0 {
            match self.cur.last_ns {
                prev if first_ts >= prev => self.inter_arrival[bucket(first_ts - prev)] += 1,
                _ => self.ts_backwards += 1,
            }
        }
        self.fold();
        next.fold();
        for d in next.deferred {
            match d {
                Deferred::Lost { offset, epoch, count } => {
                    if let Some(e) = self.epochs.iter_mut().rev().find(|e| e.epoch == epoch) {
                        e.lost_marked += count;
                    } else {
                        self.warnings.push(format!(
                            "LOST marker at offset {offset} names epoch {epoch}, not in the file"
                        ));
                    }
                }
                Deferred::Frozen { epoch } => {
                    if let Some(e) = self.epochs.iter_mut().rev().find(|e| e.epoch == epoch) {
                        e.frozen = true;
                    }
                }
                Deferred::Unknown(w) => {
                    if self.unknown_markers == 0 {
                        self.warnings.push(w);
                    }
                }
                Deferred::SeqBackwards(n, w) => {
                    if self.seq_backwards + n <= 10 {
                        self.warnings.push(w);
                    }
                }
            }
        }
        self.records += next.records;
        self.markers += next.markers;
        self.record_bytes += next.record_bytes;
        for (op, o) in next.opcodes {
            let mine = self.opcodes.entry(op).or_default();
            mine.records += o.records;
            mine.payload_bytes += o.payload_bytes;
        }
        for (core, n) in next.cores {
            *self.cores.entry(core).or_default() += n;
        }
        if self.dense_ops.len() == next.dense_ops.len() {
            for (a, b) in self.dense_ops.iter_mut().zip(&next.dense_ops) {
                a.records += b.records;
                a.payload_bytes += b.payload_bytes;
            }
        }
        if self.dense_cores.len() == next.dense_cores.len() {
            for (a, b) in self.dense_cores.iter_mut().zip(&next.dense_cores) {
                *a += b;
            }
        }
        let mut epochs = next.epochs.into_iter();
        if let (Some(mine), Some(e)) = (self.epochs.last_mut(), epochs.next()) {
            mine.records += e.records;
            mine.first_seq = mine.first_seq.or(e.first_seq);
            mine.last_seq = e.last_seq.or(mine.last_seq);
            mine.first_ns = mine.first_ns.or(e.first_ns);
            mine.last_ns = e.last_ns.or(mine.last_ns);
            mine.lost_marked += e.lost_marked;
            mine.lost_unmarked += e.lost_unmarked;
            mine.frozen |= e.frozen;
        }
        self.epochs.extend(epochs);
        self.lost_marked += next.lost_marked;
        self.lost_unmarked += next.lost_unmarked;
        for loss in next.losses {
            self.note_loss(loss);
        }
        self.losses_not_listed += next.losses_not_listed;
        self.lo_ns = self.lo_ns.min(next.lo_ns);
        self.hi_ns = self.hi_ns.max(next.hi_ns);
        for (a, b) in self.inter_arrival.iter_mut().zip(next.inter_arrival.iter()) {
            *a += b;
        }
        self.ts_backwards += next.ts_backwards;
        self.seq_backwards += next.seq_backwards;
        self.unknown_markers += next.unknown_markers;
        self.unfold();
    }

    /// Warnings worth a line in `info`, in addition to reading errors.
    pub fn summary_warnings(&self) -> Vec<String> {
        let mut w = self.warnings.clone();
        if self.seq_backwards > 10 {
            w.push(format!(
                "{} records in all had sequence numbers going backwards",
                self.seq_backwards
            ));
        }
        if self.ts_backwards > 0 {
            w.push(format!(
                "{} timestamps went backwards within an epoch",
                self.ts_backwards
            ));
        }
        if self.lost_unmarked > 0 {
            w.push(format!(
                "{} records missing without a LOST marker (sequence gaps)",
                self.lost_unmarked
            ));
        }
        if self.other_cores_records > 0 {
            w.push(format!(
                "more than {MAX_CORES} cores: {} records counted as other",
                self.other_cores_records
            ));
        }
        w
    }
}

/// Histogram bucket of an inter-arrival time: 0 → 0, else 1 + floor(log2).
pub fn bucket(delta: u64) -> usize {
    if delta == 0 {
        0
    } else {
        (64 - delta.leading_zeros() as usize).min(HIST_BUCKETS - 1)
    }
}

/// Lower bound of a bucket in ns.
pub fn bucket_floor(b: usize) -> u64 {
    if b == 0 {
        0
    } else {
        1u64 << (b - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(2), 2);
        assert_eq!(bucket(3), 2);
        assert_eq!(bucket(4), 3);
        assert_eq!(bucket(u64::MAX), 63);
        for b in 1..63 {
            assert_eq!(bucket(bucket_floor(b)), b);
        }
    }

    /// The first and last timestamps are the lowest and the highest of
    /// every record, whichever way timestamps step and wherever epochs
    /// start, in one accounting and in two merged at any record (`hi_ns`
    /// takes `cur.last_ns` only at a step back and in `fold`).
    #[test]
    fn first_and_last_ns_are_the_extremes() {
        // xorshift: timestamps that mostly rise, sometimes fall far, and
        // epoch starts between records.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for case in 0..300 {
            let n = 1 + (next() % 60) as usize;
            let mut ts = 1_000 + next() % 1_000;
            // (ts, an epoch starts before this record)
            let mut items = Vec::new();
            for i in 0..n {
                ts = match next() % 8 {
                    0 => ts.saturating_sub(next() % 5_000),
                    1 => next() % 1_000_000,
                    _ => ts + next() % 100,
                };
                items.push((ts, i > 0 && next() % 10 == 0));
            }
            let lo = items.iter().map(|i| i.0).min();
            let hi = items.iter().map(|i| i.0).max();
            let feed = |stats: &mut Stats, items: &[(u64, bool)], epoch: &mut u64| {
                for &(ts, new_epoch) in items {
                    if new_epoch {
                        *epoch += 1;
                        stats.add(&Event::EpochStart {
                            offset: 0,
                            epoch: *epoch,
                            ring_size: 4096,
                        });
                    }
                    stats.add_rec(&Rec {
                        offset: 0,
                        opcode: 1,
                        source: 0,
                        seq: 0,
                        ts,
                        payload: &[],
                        size: 32,
                    });
                }
            };
            let mut one = Stats::new(1, 4096);
            feed(&mut one, &items, &mut 1);
            one.finish();
            assert_eq!((one.first_ns, one.last_ns), (lo, hi), "case {case}: one walk");
            // Cut before a record that starts no epoch (the part starts in
            // the epoch the earlier part ends in).
            let cut = 1 + (next() % n as u64) as usize;
            if cut < n && !items[cut].1 {
                let mut epoch = 1;
                let mut first = Stats::new(1, 4096);
                feed(&mut first, &items[..cut], &mut epoch);
                let mut later = Stats::new_part(epoch, 4096);
                feed(&mut later, &items[cut..], &mut epoch);
                first.merge(None, items[cut].0, later);
                first.finish();
                assert_eq!((first.first_ns, first.last_ns), (lo, hi), "case {case}: cut at {cut}");
            }
        }
    }
}
