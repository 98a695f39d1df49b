//! Latency percentiles and queue depth over time, for `stats` and the
//! report. Two measures per opcode:
//!
//! * `field`: the latency the record itself declares, i.e. the catalog's
//!   `duration_field` of a `span` or `end` mapping (NAND `latency_ns`,
//!   CMD_COMPLETE `latency_ns`, GC_END `duration_ns`, FTL_MAP_MISS
//!   `fetch_ns`);
//! * `paired`: end timestamp − begin timestamp of a matched begin/end pair
//!   (fetch → completion), attributed to the begin's source.
//!
//! Each is kept overall and per source in HDR histograms (2 significant
//! digits: a percentile is within 1 % of the exact value; `max` is exact).
//! Queue depth is the number of open pairs per begin source, its maximum
//! kept per time bin (at most [`DEPTH_BINS`] bins; the bin width doubles as
//! the trace grows, as the report's rate bins do).
//!
//! Per record the work is what `plan` resolved for its opcode once (field
//! offsets, the pair's number) and a dense table lookup for the series of
//! a small source. `stats` splits a mapped file over two threads
//! (`parallel.rs`): the later part's [`Latency::new_part`] keeps its field
//! latencies and matches its own pairs (HDR histograms add exactly), and
//! logs what only the earlier part's state decides (the first touch of each
//! key, which may replace or close a pair open at the cut), every change of
//! a queue depth and its epoch starts; [`Latency::merge`] applies that log
//! in file order on the earlier part's state. docs/analyzer.md states the
//! rule.

mod hist;
mod pairs;
mod plan;
#[cfg(test)]
pub(crate) mod reference;

use std::ops::ControlFlow;

use rustc_hash::FxHashMap;

use hmb_trace_file::{FileHeader, Item};
use serde::Serialize;

use crate::catalog::{Catalog, MAX_PAIR_KEY};
use crate::input::Rec;
use crate::walk::{Event, Walker};
use hist::Counts;
use pairs::PairTable;
use plan::{Action, KeyAt, Plans};

/// Largest latency tracked (ns); above it values are clamped (≈ 18 min).
const MAX_NS: u64 = 1 << 40;
/// (opcode, measure, source) series kept at most; beyond, only the overall
/// series of an opcode grows and the rest are counted.
const MAX_SERIES: usize = 1024;
const MAX_OPEN: usize = 1 << 20;
pub const DEPTH_BINS: usize = 128;
/// Sources whose queue depth is tracked at most.
const MAX_DEPTH_SOURCES: usize = 256;
const FIRST_BIN_NS: u64 = 1_000;
/// Sources below this find their series in a flat table.
const DENSE_SOURCES: u32 = 1 << 16;
/// Entries a later part logs at most (16 bytes each); past that it hands
/// its open pairs over and the merge walks the rest of its part for pairs.
const MAX_LOGGED_OPS: usize = (64 << 20) / std::mem::size_of::<PairOp>();
/// Keys a later part keeps at most while it is still in the epoch it
/// started in (open pairs and keys it has seen closed): as for a full log.
const MAX_TOUCHED: usize = 2 * MAX_OPEN;
const NO_SERIES: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    Field,
    Paired,
}

/// One row of percentiles.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub opcode: u16,
    pub name: String,
    pub measure: Measure,
    /// None: every source together.
    pub source: Option<u32>,
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DepthSeries {
    /// The begin record's opcode: sources of different opcodes are
    /// different things (queue 0 is not FTL core 0).
    pub opcode: u16,
    pub name: String,
    pub source: u32,
    pub bin_ns: u64,
    pub first_ns: u64,
    /// Highest number of open pairs seen in each bin.
    pub max: Vec<u32>,
}

type Key = (u16, Measure, Option<u32>);

struct Depth {
    open: u32,
    max: Vec<u32>,
}

/// The histogram and the exact maximum of one series. An overall series
/// (source None) counts only the values no source series took (dropped
/// past `MAX_SERIES`): its histogram is that plus its sources' (`counts`),
/// one count per value instead of two; its maximum likewise (`max_of`).
struct Series {
    key: Key,
    counts: Counts,
    max: u64,
}

/// The series of one (action, measure): overall, and per small source.
#[derive(Default, Clone)]
struct Slots {
    overall: Option<u32>,
    by_source: Vec<u32>,
}

/// What one entry of a later part's log asks of the merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// A pair opened (a new begin): the depth of (action, source) goes up.
    Up,
    /// A pair closed: the depth of its begin's (action, source) goes down.
    Down,
    /// An epoch started: nothing is open.
    Epoch,
    /// The first begin of a key in the part's first epoch: it replaces a
    /// pair open at the cut (no depth change) or opens one (depth up).
    FirstBegin,
    /// The first end of a key in the part's first epoch: it closes a pair
    /// open at the cut, if any.
    FirstEnd,
}

/// One entry of a later part's log (`OpKind`); a first touch's key is the
/// next one of `PartLog::firsts`.
#[derive(Debug, Clone, Copy)]
struct PairOp {
    ts: u64,
    source: u32,
    /// The action's index (a begin's for `Up`/`Down`).
    action: u16,
    kind: OpKind,
}

/// An open-pair entry's action while the key is closed: a later part keeps
/// the keys it has seen in its first epoch, to tell a first touch.
const CLOSED: u16 = u16::MAX;

/// The open pair of a key: begin timestamp, source, the begin's action.
type Open = (u64, u32, u16);

/// The open pairs of one pair number, by key: one word where the pair's
/// keys fit in one (`KeyAt::narrow`), else every key field.
#[derive(Default)]
struct OpenPairs {
    narrow: PairTable,
    wide: FxHashMap<[u64; MAX_PAIR_KEY], Open>,
}

/// A pair key as its map holds it.
#[derive(Clone, Copy)]
enum PairKey {
    Word(u64),
    Wide([u64; MAX_PAIR_KEY]),
}

impl PairKey {
    #[inline(always)]
    fn read(key: &KeyAt, payload: &[u8]) -> Option<Self> {
        if key.narrow {
            key.read_word(payload).map(Self::Word)
        } else {
            key.read(payload).map(Self::Wide)
        }
    }
}

pub struct Latency<'c> {
    catalog: &'c Catalog,
    plans: Plans,
    series: Vec<Series>,
    /// Every series by key (the dense slots are a cache of it).
    index: FxHashMap<Key, u32>,
    /// `[action][measure]`.
    slots: Vec<[Slots; 2]>,
    pub series_dropped: u64,
    /// Open pairs by pair number, then key.
    open: Vec<OpenPairs>,
    /// Open pairs of every number together (at most `MAX_OPEN`).
    open_count: usize,
    depth: Vec<((u16, u32), Depth)>,
    depth_index: FxHashMap<(u16, u32), u32>,
    /// `depth` index by begin action, then source below `DENSE_SOURCES`
    /// (`NO_SERIES`: look in `depth_index`).
    depth_slots: Vec<Vec<u32>>,
    first_ns: Option<u64>,
    bin_ns: u64,
    /// The last bin found and its time range [lo, hi): timestamps mostly
    /// stay in a bin, so most records skip the division.
    bin_cache: (u64, u64, usize),
    /// A later part (`new_part`): pairs are logged, not matched.
    part: Option<PartLog>,
}

struct PartLog {
    ops: Vec<PairOp>,
    /// The keys of the first touches, in log order.
    firsts: Vec<u64>,
    /// Most entries of `ops`.
    cap: usize,
    /// Where the part stopped matching pairs (log or key table full, or
    /// keys that do not pack): the merge takes its open pairs over and
    /// walks on from there.
    full_at: Option<u64>,
    /// Still in the epoch the part started in (before its first EPOCH
    /// marker): keys seen closed are kept, first touches logged.
    first_epoch: bool,
    /// Keys kept closed (`CLOSED` entries).
    closed: usize,
    /// Most pairs open at once in the first epoch.
    peak_open: usize,
}

/// What a later part's begin or end did to its own open pairs.
enum Touch {
    Nothing,
    /// Matched: the paired value and the begin's source.
    Closed(u64, u32),
}

impl<'c> Latency<'c> {
    pub fn new(catalog: &'c Catalog) -> Self {
        let plans = Plans::new(catalog);
        let slots = vec![[Slots::default(), Slots::default()]; plans.len()];
        let open = (0..plans.pairs).map(|_| OpenPairs::default()).collect();
        let depth_slots = vec![Vec::new(); plans.len()];
        Self {
            catalog,
            plans,
            series: Vec::new(),
            index: FxHashMap::default(),
            slots,
            series_dropped: 0,
            open,
            open_count: 0,
            depth: Vec::new(),
            depth_index: FxHashMap::default(),
            depth_slots,
            first_ns: None,
            bin_ns: FIRST_BIN_NS,
            bin_cache: (1, 0, 0),
            part: None,
        }
    }

    /// The latencies of a file's later part, which starts at file offset
    /// `start`: `merge` appends it to those of everything before.
    pub(crate) fn new_part(catalog: &'c Catalog, start: u64) -> Self {
        let mut lat = Self::new(catalog);
        lat.part = Some(PartLog {
            ops: Vec::new(),
            firsts: Vec::new(),
            cap: MAX_LOGGED_OPS,
            // Keys that do not pack are not matched here: the merge walks
            // the part again for its pairs.
            full_at: (!lat.plans.keys_pack).then_some(start),
            first_epoch: true,
            closed: 0,
            peak_open: 0,
        });
        lat
    }

    /// `new_part` with a log of at most `cap` entries (tests: the merge's
    /// walk over the rest of a part).
    #[cfg(test)]
    pub(crate) fn new_part_capped(catalog: &'c Catalog, start: u64, cap: usize) -> Self {
        let mut lat = Self::new_part(catalog, start);
        if let Some(log) = &mut lat.part {
            log.cap = cap;
        }
        lat
    }

    /// A new series whose first value is `v` (counted only when `count`).
    fn new_series(&mut self, key: Key, v: u64, count: bool) -> u32 {
        let mut counts = Counts::new();
        if count {
            counts.record(v);
        }
        let i = self.series.len() as u32;
        self.series.push(Series { key, counts, max: v });
        self.index.insert(key, i);
        i
    }

    #[inline(always)]
    fn add_to(&mut self, i: u32, v: u64) {
        let s = &mut self.series[i as usize];
        s.counts.record(v);
        s.max = s.max.max(v);
    }

    /// A value for the overall and the per-source series of (action, m):
    /// the overall one is always kept, a source's only while there are
    /// fewer than `MAX_SERIES` series (else counted as dropped). Inlined:
    /// the common case (both series exist, the source is in the dense
    /// table) is a few loads, and a call saved and restored more registers
    /// than that (cachegrind: ~17 instructions per value).
    #[inline(always)]
    fn both(&mut self, action: usize, opcode: u16, m: Measure, source: u32, v: u64) {
        let v = v.clamp(1, MAX_NS);
        let slots = &self.slots[action][m as usize];
        if let Some(&i) = slots.by_source.get(source as usize) {
            // `by_source` holds only sources below `DENSE_SOURCES`, and
            // only once `both_slow` made the overall series. That one's
            // maximum is not kept here: it is its own and its sources'
            // (`max_of`), one load and store less per value.
            if i != NO_SERIES {
                self.add_to(i, v);
                return;
            }
        }
        self.both_slow(action, opcode, m, source, v);
    }

    /// `both` when a series or a dense slot is still to be made, or the
    /// source is not dense.
    #[inline(never)]
    fn both_slow(&mut self, action: usize, opcode: u16, m: Measure, source: u32, v: u64) {
        let mi = m as usize;
        // The overall series' maximum here; its counts are its sources'
        // (`hdr`) unless the source's value is dropped below.
        let overall = match self.slots[action][mi].overall {
            Some(i) => i,
            None => {
                let key = (opcode, m, None);
                let i = match self.index.get(&key) {
                    Some(&i) => i,
                    None => self.new_series(key, v, false),
                };
                self.slots[action][mi].overall = Some(i);
                i
            }
        };
        let o = &mut self.series[overall as usize];
        o.max = o.max.max(v);
        if source < DENSE_SOURCES {
            let i = self.slots[action][mi]
                .by_source
                .get(source as usize)
                .copied()
                .unwrap_or(NO_SERIES);
            if i != NO_SERIES {
                self.add_to(i, v);
                return;
            }
        }
        let key = (opcode, m, Some(source));
        let i = match self.index.get(&key) {
            Some(&i) => {
                self.add_to(i, v);
                i
            }
            None if self.series.len() >= MAX_SERIES => {
                self.series_dropped += 1;
                self.series[overall as usize].counts.record(v);
                return;
            }
            None => self.new_series(key, v, true),
        };
        if source < DENSE_SOURCES {
            let table = &mut self.slots[action][mi].by_source;
            if table.len() <= source as usize {
                table.resize(source as usize + 1, NO_SERIES);
            }
            table[source as usize] = i;
        }
    }

    /// The bin of `ts`, widening bins (pairwise max) until it fits.
    #[inline(always)]
    fn bin(&mut self, ts: u64) -> usize {
        let (lo, hi, b) = self.bin_cache;
        if ts >= lo && ts < hi {
            return b;
        }
        self.bin_slow(ts)
    }

    fn bin_slow(&mut self, ts: u64) -> usize {
        let first = *self.first_ns.get_or_insert(ts);
        let mut b = (ts.saturating_sub(first) / self.bin_ns) as usize;
        while b >= DEPTH_BINS {
            self.bin_ns *= 2;
            for (_, d) in &mut self.depth {
                let merged: Vec<u32> = d.max.chunks(2).map(|c| c.iter().copied().max().unwrap_or(0)).collect();
                d.max = merged;
            }
            b = (ts.saturating_sub(first) / self.bin_ns) as usize;
        }
        // Every ts in [lo, hi) gives `b` (and widens nothing) while bin_ns
        // stays; a ts before `first` is not cached.
        let lo = first.saturating_add(b as u64 * self.bin_ns);
        self.bin_cache = (lo, lo.saturating_add(self.bin_ns), b);
        b
    }

    /// The `depth` index of (the action's opcode, source), made while there
    /// are fewer than `MAX_DEPTH_SOURCES` (`depth_change`'s slow path).
    fn depth_slot_slow(&mut self, action: usize, source: u32) -> Option<usize> {
        let key = (self.plans.action(action).0, source);
        let i = match self.depth_index.get(&key) {
            Some(&i) => i as usize,
            None if self.depth.len() >= MAX_DEPTH_SOURCES => return None,
            None => {
                self.depth_index.insert(key, self.depth.len() as u32);
                self.depth.push((
                    key,
                    Depth {
                        open: 0,
                        max: Vec::new(),
                    },
                ));
                self.depth.len() - 1
            }
        };
        if source < DENSE_SOURCES {
            let table = &mut self.depth_slots[action];
            if table.len() <= source as usize {
                table.resize(source as usize + 1, NO_SERIES);
            }
            table[source as usize] = i as u32;
        }
        Some(i)
    }

    /// One pair more or less open for the begin `action`'s source.
    /// Inlined into `begin` and `end`: as a call it cost ~8 instructions
    /// of register saves and restores per begin or end record. The slot
    /// found in the dense table goes straight to `depth_at`; a slot still
    /// to be made (or not dense) takes `depth_change_slow`, so that the
    /// common path does not merge an `Option` from both (stats' thirteenth
    /// pass: ~4 instructions per change).
    #[inline(always)]
    fn depth_change(&mut self, action: usize, source: u32, ts: u64, up: bool) {
        let b = self.bin(ts);
        match self.depth_slots[action].get(source as usize) {
            Some(&i) if i != NO_SERIES => self.depth_at(i as usize, b, up),
            _ => self.depth_change_slow(action, source, b, up),
        }
    }

    #[inline(never)]
    fn depth_change_slow(&mut self, action: usize, source: u32, b: usize, up: bool) {
        if let Some(i) = self.depth_slot_slow(action, source) {
            self.depth_at(i, b, up);
        }
    }

    /// `depth_change` on the `depth` entry `i`, in bin `b`.
    #[inline(always)]
    fn depth_at(&mut self, i: usize, b: usize, up: bool) {
        let d = &mut self.depth[i].1;
        d.open = if up { d.open + 1 } else { d.open.saturating_sub(1) };
        let open = d.open;
        // One bounds check: the bin's entry if it exists, else the bins up
        // to it made.
        match d.max.get_mut(b) {
            Some(m) => *m = (*m).max(open),
            None => {
                // An idle stretch keeps the depth it had; this bin's
                // maximum so far is the depth now (`carry` is not above it).
                let carry = open.min(if up { open - 1 } else { open + 1 });
                d.max.resize(b, carry);
                d.max.push(open);
            }
        }
    }

    /// Inlined into the walk's loop: as a call it saved and restored
    /// registers for every record (cachegrind: ~16 instructions each).
    #[inline(always)]
    pub fn add(&mut self, ev: &Event<'_, '_>) {
        match *ev {
            Event::Record { item, .. } => self.add_rec(&Rec::of(item)),
            Event::EpochStart { offset, .. } => self.epoch_event(offset),
            _ => {}
        }
    }

    /// An EPOCH marker: nothing is open any more (a later part logs it).
    #[inline(never)]
    fn epoch_event(&mut self, offset: u64) {
        match &mut self.part {
            Some(log) => {
                if log.full_at.is_none() && log_full(log, offset) {
                    return;
                }
                if log.full_at.is_none() {
                    log.ops.push(PairOp {
                        ts: 0,
                        source: 0,
                        action: 0,
                        kind: OpKind::Epoch,
                    });
                    log.first_epoch = false;
                    log.closed = 0;
                    self.clear_open();
                }
            }
            None => self.epoch_start(),
        }
    }

    /// Pairs never span epochs: the ring restarted, nothing is open.
    fn epoch_start(&mut self) {
        self.clear_open();
        self.depth.iter_mut().for_each(|(_, d)| d.open = 0);
    }

    fn clear_open(&mut self) {
        for o in &mut self.open {
            o.narrow.clear();
            o.wide.clear();
        }
        self.open_count = 0;
    }

    /// A device record (the walker's `Record` event), its header read once
    /// by the record loop (`parallel.rs`). The opcode's plan is looked up
    /// here, inlined into the loop: a record whose opcode has no latency
    /// work then costs no call.
    #[inline(always)]
    pub(crate) fn add_rec(&mut self, r: &Rec<'_>) {
        if let Some(ai) = self.plans.index(r.opcode) {
            self.add_action(ai, r);
        }
    }

    /// `add_rec` for an opcode with a latency action (index `ai`).
    ///
    /// One match on the action, each arm reading its fields through the
    /// plan's reference (copying the whole action out of the table cost
    /// more than reading it) and then changing the state. Inlined into the
    /// record loop: as a call it saved and restored registers for every
    /// record with latency work (cachegrind, bench trace: 3 % of the
    /// instructions; its CPU time was the same within the noise).
    #[inline(always)]
    fn add_action(&mut self, ai: usize, r: &Rec<'_>) {
        let p = r.payload;
        let part = self.part.is_some();
        let (opcode, action) = self.plans.action(ai);
        match action {
            Action::Span { duration } => {
                if let Some(v) = duration.read(p) {
                    self.both(ai, opcode, Measure::Field, r.source, v);
                }
            }
            Action::Begin { pair, key } => {
                let pair = *pair;
                if part {
                    // A later part's keys are all narrow (`new_part`).
                    if let Some(k) = key.read_word(p) {
                        self.part_begin(ai, pair, k, r.ts, r.source, r.offset);
                    }
                } else if key.narrow {
                    if let Some(k) = key.read_word(p) {
                        self.begin_word(ai, pair, k, r.ts, r.source);
                    }
                } else if let Some(k) = key.read(p) {
                    self.begin_wide(ai, pair, k, r.ts, r.source);
                }
            }
            Action::End { pair, key, duration } => {
                let (pair, field) = (*pair, duration.and_then(|f| f.read(p)));
                let k = if part || key.narrow {
                    key.read_word(p).map(PairKey::Word)
                } else {
                    key.read(p).map(PairKey::Wide)
                };
                if let Some(v) = field {
                    self.both(ai, opcode, Measure::Field, r.source, v);
                }
                match k {
                    Some(PairKey::Word(k)) if part => self.part_end(ai, opcode, pair, k, r.ts, r.offset),
                    Some(PairKey::Word(k)) => self.end_word(ai, opcode, pair, k, r.ts),
                    Some(PairKey::Wide(k)) if !part => self.end_wide(ai, opcode, pair, k, r.ts),
                    _ => {}
                }
            }
        }
    }

    /// A later part's begin: matched on its own pairs as one walk would
    /// once the key has been touched in the part; the first touch is left
    /// to the merge (it may replace a pair open at the cut).
    #[inline(always)]
    fn part_begin(&mut self, action: usize, pair: u16, k: u64, ts: u64, source: u32, offset: u64) {
        let Some(log) = matching_log(&mut self.part, self.open_count, offset) else {
            return;
        };
        // One walk's limit, checked as `begin` checks it (the merge makes
        // sure one walk's count stays below it too).
        if self.open_count >= MAX_OPEN {
            return;
        }
        let v = (ts, source, action as u16);
        let op = |kind| PairOp {
            ts,
            source,
            action: action as u16,
            kind,
        };
        match self.open[pair as usize].narrow.insert(k, v) {
            Some(was) => {
                if was.2 == CLOSED {
                    self.open_count += 1;
                    log.closed -= 1;
                    log.ops.push(op(OpKind::Up));
                }
            }
            None => {
                self.open_count += 1;
                if log.first_epoch {
                    log.ops.push(op(OpKind::FirstBegin));
                    log.firsts.push(k);
                } else {
                    log.ops.push(op(OpKind::Up));
                }
            }
        }
        if log.first_epoch {
            log.peak_open = log.peak_open.max(self.open_count);
        }
    }

    /// A later part's end: as `part_begin`.
    #[inline(always)]
    fn part_end(&mut self, action: usize, opcode: u16, pair: u16, k: u64, ts: u64, offset: u64) {
        let Some(log) = matching_log(&mut self.part, self.open_count, offset) else {
            return;
        };
        let map = &mut self.open[pair as usize].narrow;
        let touch = match map.get_mut(k) {
            Some((&mut begin, &mut source, action_of)) if *action_of != CLOSED => {
                let begin_action = *action_of;
                if log.first_epoch {
                    *action_of = CLOSED;
                    log.closed += 1;
                } else {
                    map.remove(k);
                }
                self.open_count -= 1;
                log.ops.push(PairOp {
                    ts,
                    source,
                    action: begin_action,
                    kind: OpKind::Down,
                });
                Touch::Closed(ts.saturating_sub(begin), source)
            }
            Some(_) => Touch::Nothing,
            None => {
                if log.first_epoch {
                    map.insert(k, (0, 0, CLOSED));
                    log.closed += 1;
                    log.ops.push(PairOp {
                        ts,
                        source: 0,
                        action: action as u16,
                        kind: OpKind::FirstEnd,
                    });
                    log.firsts.push(k);
                }
                Touch::Nothing
            }
        };
        if let Touch::Closed(v, source) = touch {
            self.both(action, opcode, Measure::Paired, source, v);
        }
    }

    /// A begin of `action` opens `pair` at `k` (a begin whose key is open
    /// replaces it), while fewer than `MAX_OPEN` pairs are open.
    #[inline(always)]
    fn begin(&mut self, action: usize, pair: u16, k: PairKey, ts: u64, source: u32) {
        match k {
            PairKey::Word(w) => self.begin_word(action, pair, w, ts, source),
            PairKey::Wide(k) => self.begin_wide(action, pair, k, ts, source),
        }
    }

    /// `begin` with a one-word key, passed in a register: the key as a
    /// `PairKey` went through memory, ~10 instructions per begin or end
    /// record (cachegrind, stats' twelfth pass).
    #[inline(always)]
    fn begin_word(&mut self, action: usize, pair: u16, w: u64, ts: u64, source: u32) {
        if self.open_count >= MAX_OPEN {
            return;
        }
        if self.open[pair as usize]
            .narrow
            .insert(w, (ts, source, action as u16))
            .is_none()
        {
            self.open_count += 1;
            self.depth_change(action, source, ts, true);
        }
    }

    fn begin_wide(&mut self, action: usize, pair: u16, k: [u64; MAX_PAIR_KEY], ts: u64, source: u32) {
        if self.open_count >= MAX_OPEN {
            return;
        }
        if self.open[pair as usize]
            .wide
            .insert(k, (ts, source, action as u16))
            .is_none()
        {
            self.open_count += 1;
            self.depth_change(action, source, ts, true);
        }
    }

    #[inline(always)]
    fn end(&mut self, action: usize, opcode: u16, pair: u16, k: PairKey, ts: u64) {
        match k {
            PairKey::Word(w) => self.end_word(action, opcode, pair, w, ts),
            PairKey::Wide(k) => self.end_wide(action, opcode, pair, k, ts),
        }
    }

    /// `end` with a one-word key (as `begin_word`).
    #[inline(always)]
    fn end_word(&mut self, action: usize, opcode: u16, pair: u16, w: u64, ts: u64) {
        let found = self.open[pair as usize].narrow.remove(w);
        self.ended(action, opcode, found, ts);
    }

    fn end_wide(&mut self, action: usize, opcode: u16, pair: u16, k: [u64; MAX_PAIR_KEY], ts: u64) {
        let found = self.open[pair as usize].wide.remove(&k);
        self.ended(action, opcode, found, ts);
    }

    /// What an end does with the open pair it found, if any.
    #[inline(always)]
    fn ended(&mut self, action: usize, opcode: u16, found: Option<Open>, ts: u64) {
        if let Some((begin, source, begin_action)) = found {
            self.open_count -= 1;
            self.both(action, opcode, Measure::Paired, source, ts.saturating_sub(begin));
            self.depth_change(begin_action as usize, source, ts, false);
        }
    }

    /// Append the latencies of the later part of a file (`new_part`, fed
    /// every event of that part). `bytes` is the whole mapped file and
    /// `header` its header; `later_end` is where the later part's walk
    /// ended. The result is what one walk over both parts gives:
    ///
    /// * the later part matched its own pairs; its log is applied here in
    ///   file order: each key's first touch in the part's first epoch on
    ///   the pairs open at the cut (a begin replaces one, an end closes
    ///   one), every depth change and epoch start, so every queue-depth
    ///   value and bin comes out of one walk's sequence of changes;
    /// * where the part stopped matching (its log full), its open pairs are
    ///   taken over and the rest of the part is walked here for pairs;
    /// * its field and paired latencies are added histogram to histogram
    ///   (HDR counts add; the maximum is the larger).
    ///
    /// One walk computes the latencies again instead when the open-pair
    /// limit could have come into play (pairs open at the cut plus the
    /// part's own peak), and when the series cap did (which per-source
    /// series exist then depends on the order values arrive in).
    pub(crate) fn merge(&mut self, mut later: Latency<'c>, bytes: &[u8], header: &FileHeader, later_end: u64) {
        let Some(log) = later.part.take() else {
            return;
        };
        if self.open_count + log.peak_open >= MAX_OPEN {
            *self = Self::one_walk(self.catalog, bytes, header);
            return;
        }
        let mut firsts = log.firsts.iter().copied();
        for op in &log.ops {
            let ai = op.action as usize;
            match op.kind {
                OpKind::Epoch => self.epoch_start(),
                // One arm for both: the change's direction as a value, not
                // a second copy of `depth_change` behind the jump table.
                OpKind::Up | OpKind::Down => self.depth_change(ai, op.source, op.ts, op.kind == OpKind::Up),
                OpKind::FirstBegin => {
                    let (k, pair) = (firsts.next().unwrap_or_default(), self.pair_of(ai));
                    if self.open[pair].narrow.remove(k).is_some() {
                        // Replaced: one walk changes no depth; the part
                        // counts the pair as its own.
                        self.open_count -= 1;
                    } else {
                        self.depth_change(ai, op.source, op.ts, true);
                    }
                }
                OpKind::FirstEnd => {
                    let (k, pair) = (firsts.next().unwrap_or_default(), self.pair_of(ai));
                    if let Some((begin, source, begin_action)) = self.open[pair].narrow.remove(k) {
                        self.open_count -= 1;
                        let opcode = self.plans.action(ai).0;
                        self.both(ai, opcode, Measure::Paired, source, op.ts.saturating_sub(begin));
                        self.depth_change(begin_action as usize, source, op.ts, false);
                    }
                }
            }
        }
        if let Some(from) = log.full_at {
            for (mine, theirs) in self.open.iter_mut().zip(&later.open) {
                for (k, v) in theirs.narrow.iter().filter(|(_, v)| v.2 != CLOSED) {
                    mine.narrow.insert(k, v);
                    self.open_count += 1;
                }
            }
            self.pairs_from(bytes, header, from, later_end);
        }
        let union = self.series.len() + later.series.iter().filter(|s| !self.index.contains_key(&s.key)).count();
        if self.series_dropped > 0 || later.series_dropped > 0 || union > MAX_SERIES {
            *self = Self::one_walk(self.catalog, bytes, header);
            return;
        }
        for s in later.series {
            match self.index.get(&s.key) {
                Some(&i) => {
                    let mine = &mut self.series[i as usize];
                    mine.counts.add(&s.counts);
                    mine.max = mine.max.max(s.max);
                }
                None => {
                    self.index.insert(s.key, self.series.len() as u32);
                    self.series.push(s);
                }
            }
        }
        // The dense caches stay right: a series' index does not change, and
        // one they do not name is found through `index`.
    }

    /// The pair number of a begin or end action.
    fn pair_of(&self, action: usize) -> usize {
        match self.plans.action(action).1 {
            Action::Begin { pair, .. } | Action::End { pair, .. } => *pair as usize,
            Action::Span { .. } => 0,
        }
    }

    /// The begin/end records and epoch starts of `bytes[from..to)` (item
    /// boundaries of a part already walked without error), matched here.
    fn pairs_from(&mut self, bytes: &[u8], header: &FileHeader, from: u64, to: u64) {
        let mut walker = Walker::new(header);
        crate::input::walk_bytes(bytes, from, to, &crate::progress::Progress::hidden(), |item| {
            walker.feed(item, &mut |ev| match ev {
                Event::Record { item, .. } => {
                    if let Some((_, Action::Begin { .. } | Action::End { .. })) =
                        self.plans.get(item.opcode()).map(|(i, _, a)| (i, *a))
                    {
                        self.pair_record(item);
                    }
                }
                Event::EpochStart { .. } => self.epoch_start(),
                _ => {}
            });
            ControlFlow::Continue(())
        });
    }

    /// The pair part of a begin or end record (its field latency is the
    /// later part's).
    fn pair_record(&mut self, item: &Item<'_>) {
        let Some((ai, opcode, &action)) = self.plans.get(item.opcode()) else {
            return;
        };
        match action {
            Action::Begin { pair, key } => {
                if let Some(k) = PairKey::read(&key, item.payload) {
                    self.begin(ai, pair, k, item.timestamp_ns(), item.source());
                }
            }
            Action::End { pair, key, .. } => {
                if let Some(k) = PairKey::read(&key, item.payload) {
                    self.end(ai, opcode, pair, k, item.timestamp_ns());
                }
            }
            Action::Span { .. } => {}
        }
    }

    /// The latencies of a whole mapped file in one walk.
    fn one_walk(catalog: &'c Catalog, bytes: &[u8], header: &FileHeader) -> Self {
        let mut lat = Self::new(catalog);
        let mut walker = Walker::new(header);
        crate::input::walk_bytes(
            bytes,
            header.header_size as u64,
            bytes.len() as u64,
            &crate::progress::Progress::hidden(),
            |item| {
                walker.feed(item, &mut |ev| lat.add(&ev));
                ControlFlow::Continue(())
            },
        );
        lat
    }

    /// The counts of series `s`: for an overall series its own counts
    /// and those of every source series of its (opcode, measure).
    fn counts<'a>(&'a self, s: &'a Series) -> std::borrow::Cow<'a, Counts> {
        if s.key.2.is_some() {
            return std::borrow::Cow::Borrowed(&s.counts);
        }
        let mut all = s.counts.clone();
        for t in &self.series {
            if (t.key.0, t.key.1) == (s.key.0, s.key.1) && t.key.2.is_some() {
                all.add(&t.counts);
            }
        }
        std::borrow::Cow::Owned(all)
    }

    /// The maximum of series `s`: for an overall series also its source
    /// series' (`both` keeps a value's maximum in the source's only).
    fn max_of(&self, s: &Series) -> u64 {
        if s.key.2.is_some() {
            return s.max;
        }
        self.series
            .iter()
            .filter(|t| (t.key.0, t.key.1) == (s.key.0, s.key.1) && t.key.2.is_some())
            .fold(s.max, |m, t| m.max(t.max))
    }

    /// The count and p50, p90, p99, p99.9 of series `s`, as the crate's
    /// histogram of its counts gives them.
    fn quantiles(&self, s: &Series) -> (u64, [u64; 4]) {
        const QS: [f64; 4] = [0.5, 0.9, 0.99, 0.999];
        let counts = self.counts(s);
        counts.quantiles(QS).unwrap_or_else(|| {
            let h = counts.to_hdr();
            (h.len(), QS.map(|q| h.value_at_quantile(q)))
        })
    }

    /// Rows sorted by opcode, measure, then overall before per source.
    pub fn percentiles(&self) -> Vec<Percentiles> {
        let mut rows: Vec<&Series> = self.series.iter().collect();
        rows.sort_by_key(|s| (s.key.0, s.key.1, s.key.2.map_or(0, |x| x as u64 + 1)));
        rows.into_iter()
            .map(|s| {
                let (k, (count, [p50, p90, p99, p999])) = (s.key, self.quantiles(s));
                Percentiles {
                    opcode: k.0,
                    name: self.catalog.name(k.0),
                    measure: k.1,
                    source: k.2,
                    count,
                    p50,
                    p90,
                    p99,
                    p999,
                    max: self.max_of(s),
                }
            })
            .collect()
    }

    /// By begin opcode, then source.
    pub fn depth_series(&self) -> Vec<DepthSeries> {
        let mut rows: Vec<&((u16, u32), Depth)> = self.depth.iter().collect();
        rows.sort_by_key(|(k, _)| *k);
        rows.into_iter()
            .map(|&((opcode, source), ref d)| DepthSeries {
                opcode,
                name: self.catalog.name(opcode),
                source,
                bin_ns: self.bin_ns,
                first_ns: self.first_ns.unwrap_or(0),
                max: d.max.clone(),
            })
            .collect()
    }

    /// The histogram of one overall series as (upper bound ns, count)
    /// buckets on a log2 scale, for charts.
    pub fn log2_buckets(&self, opcode: u16, m: Measure) -> Vec<(u64, u64)> {
        let Some(&i) = self.index.get(&(opcode, m, None)) else {
            return Vec::new();
        };
        self.counts(&self.series[i as usize])
            .to_hdr()
            .iter_log(1, 2.0)
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .collect()
    }
}

/// A later part's log, while the part still matches its own pairs at the
/// begin or end record at `offset` (`open_count`: the part's open pairs);
/// None for a whole walk (no log) and once the log or, in the part's first
/// epoch, the table of touched keys is full (then noted: the part stops
/// matching there).
#[inline(always)]
fn matching_log(part: &mut Option<PartLog>, open_count: usize, offset: u64) -> Option<&mut PartLog> {
    let log = part.as_mut()?;
    if log.full_at.is_some() || log_full(log, offset) {
        return None;
    }
    if log.first_epoch && open_count + log.closed >= MAX_TOUCHED {
        log.full_at = Some(offset);
        return None;
    }
    Some(log)
}

/// Whether a later part's log is full at the item at `offset` (then
/// noted: the part stops matching pairs there).
#[inline(always)]
fn log_full(log: &mut PartLog, offset: u64) -> bool {
    if log.ops.len() >= log.cap {
        log.full_at = Some(offset);
        return true;
    }
    false
}

#[cfg(test)]
mod tests;
