#![allow(dead_code)]
//! The latencies as computed before `stats` split them over two threads
//! (one walk, field offsets looked up by name per record), kept unchanged
//! as the reference the split and merged result is compared with
//! (`parallel.rs` tests). Latency percentiles and queue depth over time, for `stats` and the
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

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use hdrhistogram::Histogram;
use hmb_trace_file::Item;
use serde::Serialize;

use crate::catalog::{Catalog, PccxMap, MAX_PAIR_KEY};
use crate::walk::Event;

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

pub struct Latency<'c> {
    catalog: &'c Catalog,
    /// Histogram and exact maximum of each series.
    series: FxHashMap<Key, (Histogram<u64>, u64)>,
    pub series_dropped: u64,
    /// Open pairs: (begin timestamp, begin source, begin opcode).
    open: FxHashMap<(&'c str, [u64; MAX_PAIR_KEY]), (u64, u32, u16)>,
    depth: BTreeMap<(u16, u32), Depth>,
    first_ns: Option<u64>,
    bin_ns: u64,
}

impl<'c> Latency<'c> {
    pub fn new(catalog: &'c Catalog) -> Self {
        Self {
            catalog,
            series: FxHashMap::default(),
            series_dropped: 0,
            open: FxHashMap::default(),
            depth: BTreeMap::new(),
            first_ns: None,
            bin_ns: FIRST_BIN_NS,
        }
    }

    fn record(&mut self, key: Key, v: u64) {
        let v = v.clamp(1, MAX_NS);
        // One lookup for a series that exists (all but the first value).
        if let Some((h, max)) = self.series.get_mut(&key) {
            h.saturating_record(v);
            *max = (*max).max(v);
            return;
        }
        if self.series.len() >= MAX_SERIES && key.2.is_some() {
            self.series_dropped += 1;
            return;
        }
        if let Ok(mut h) = Histogram::new_with_bounds(1, MAX_NS, 2) {
            h.saturating_record(v);
            self.series.insert(key, (h, v));
        }
    }

    fn both(&mut self, opcode: u16, m: Measure, source: u32, v: u64) {
        self.record((opcode, m, None), v);
        self.record((opcode, m, Some(source)), v);
    }

    /// The bin of `ts`, widening bins (pairwise max) until it fits.
    fn bin(&mut self, ts: u64) -> usize {
        let first = *self.first_ns.get_or_insert(ts);
        let mut b = (ts.saturating_sub(first) / self.bin_ns) as usize;
        while b >= DEPTH_BINS {
            self.bin_ns *= 2;
            for d in self.depth.values_mut() {
                let merged: Vec<u32> = d.max.chunks(2).map(|c| c.iter().copied().max().unwrap_or(0)).collect();
                d.max = merged;
            }
            b = (ts.saturating_sub(first) / self.bin_ns) as usize;
        }
        b
    }

    fn depth_change(&mut self, opcode: u16, source: u32, ts: u64, up: bool) {
        let b = self.bin(ts);
        let key = (opcode, source);
        if !self.depth.contains_key(&key) && self.depth.len() >= MAX_DEPTH_SOURCES {
            return;
        }
        let d = self.depth.entry(key).or_insert(Depth {
            open: 0,
            max: Vec::new(),
        });
        d.open = if up { d.open + 1 } else { d.open.saturating_sub(1) };
        if d.max.len() <= b {
            // An idle stretch keeps the depth it had.
            let carry = d.open.min(if up { d.open - 1 } else { d.open + 1 });
            d.max.resize(b + 1, carry);
        }
        d.max[b] = d.max[b].max(d.open);
    }

    pub fn add(&mut self, ev: &Event<'_, '_>) {
        match *ev {
            Event::Record { item, .. } => self.add_record(item),
            Event::EpochStart { .. } => {
                // Pairs never span epochs: the ring restarted, nothing is open.
                self.open.clear();
                self.depth.values_mut().for_each(|d| d.open = 0);
            }
            _ => {}
        }
    }

    fn add_record(&mut self, item: &Item<'_>) {
        let catalog = self.catalog;
        let Some(op) = catalog.get(item.opcode()) else { return };
        let (p, ts) = (item.payload, item.timestamp_ns());
        match &op.pccx {
            Some(PccxMap::Span { duration_field, .. }) => {
                if let Some(v) = op.field(p, duration_field) {
                    self.both(op.opcode, Measure::Field, item.source(), v);
                }
            }
            Some(PccxMap::Begin { pair, key, .. }) => {
                if let Some(k) = key_of(op, p, key) {
                    let v = (ts, item.source(), op.opcode);
                    if self.open.len() < MAX_OPEN && self.open.insert((pair.as_str(), k), v).is_none() {
                        self.depth_change(op.opcode, item.source(), ts, true);
                    }
                }
            }
            Some(PccxMap::End {
                pair,
                key,
                duration_field,
                ..
            }) => {
                if let Some(v) = duration_field.as_ref().and_then(|f| op.field(p, f)) {
                    self.both(op.opcode, Measure::Field, item.source(), v);
                }
                if let Some(k) = key_of(op, p, key) {
                    if let Some((begin, source, begin_op)) = self.open.remove(&(pair.as_str(), k)) {
                        self.both(op.opcode, Measure::Paired, source, ts.saturating_sub(begin));
                        self.depth_change(begin_op, source, ts, false);
                    }
                }
            }
            _ => {}
        }
    }

    /// Rows sorted by opcode, measure, then overall before per source.
    pub fn percentiles(&self) -> Vec<Percentiles> {
        let mut keys: Vec<&Key> = self.series.keys().collect();
        keys.sort_by_key(|k| (k.0, k.1, k.2.map_or(0, |s| s as u64 + 1)));
        keys.into_iter()
            .map(|k| {
                let (h, max) = &self.series[k];
                Percentiles {
                    opcode: k.0,
                    name: self.catalog.name(k.0),
                    measure: k.1,
                    source: k.2,
                    count: h.len(),
                    p50: h.value_at_quantile(0.5),
                    p90: h.value_at_quantile(0.9),
                    p99: h.value_at_quantile(0.99),
                    p999: h.value_at_quantile(0.999),
                    max: *max,
                }
            })
            .collect()
    }

    pub fn depth_series(&self) -> Vec<DepthSeries> {
        self.depth
            .iter()
            .map(|(&(opcode, source), d)| DepthSeries {
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
        let Some((h, _)) = self.series.get(&(opcode, m, None)) else {
            return Vec::new();
        };
        h.iter_log(1, 2.0)
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .collect()
    }
}

fn key_of(op: &crate::catalog::OpcodeEntry, p: &[u8], key: &[String]) -> Option<[u64; MAX_PAIR_KEY]> {
    let mut k = [0u64; MAX_PAIR_KEY];
    for (slot, name) in k.iter_mut().zip(key) {
        *slot = op.field(p, name)?;
    }
    Some(k)
}
