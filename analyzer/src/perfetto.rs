//! The Perfetto timeline (`export perfetto`): walk events become
//! Perfetto `TracePacket`s (the schema subset in `perfetto_proto.rs`, from
//! Perfetto's own .proto files), each written as one `Trace.packet` field
//! as soon as it is known, so memory stays bounded on any trace size.
//!
//! Layout (docs/analyzer.md has the full description):
//! * one parent track per source (queue, die, core), named from the
//!   catalog's `source` meaning, with child "lane" tracks: slices on one
//!   lane never overlap, so every begin has its end on the same track;
//! * begin/end pairs (command fetch → completion, GC, wear levelling) are
//!   slices from the begin's timestamp to the end's; spans (NAND operations,
//!   map misses, NPU events) are slices of their duration ending at the
//!   record; records with no mapping are instants on their source's track;
//! * the NVMe controller's FTL records (map cache, NAND operations, GC, wear
//!   levelling: opcodes with `qid`, `cid` and `flags` and no pair mapping) are
//!   drawn where they happen: NAND operations as slices on their die's track at
//!   their modelled start, the rest as instants on an "FTL" track; each caused
//!   by a command (flags bit 0 clear) is linked to that command's slice by a
//!   flow (Perfetto's `flow_ids`): the fetch starts it (every command's does),
//!   the device events continue it, the completion ends it (if any joined);
//! * LOST, sequence gaps, FROZEN, EPOCH and unknown markers are instants on a
//!   "trace.bin" track; records/s, lost records and per-source in-flight
//!   counts are counter tracks.

use std::collections::HashMap;
use std::io::Write;

use prost::Message;

use crate::perfetto_proto::{
    ArgValue, CounterDescriptor, Data, DebugAnnotation, EventType, Trace, TracePacket, TrackDescriptor, TrackEvent,
};
use hmb_trace_file::Item;

use crate::catalog::{read_field, Catalog, OpcodeEntry, PccxMap, MAX_PAIR_KEY};
use crate::walk::Event;

/// Lanes per source at most; a slice that finds none free is counted.
pub const MAX_LANES: usize = 64;
/// Distinct sources given their own track; the rest share one.
pub const MAX_SOURCES: usize = 4096;
/// Open begins remembered at most (as in `export pccx`).
const MAX_OPEN: usize = 1 << 20;
const SEQUENCE_ID: u32 = 1;
/// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED.
const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;

#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Summary {
    pub packets: u64,
    pub tracks: u64,
    pub slices: u64,
    /// Pairs still open at an epoch change or at the end of the trace,
    /// closed there (their slice has arg `unterminated = true`).
    pub closed_unterminated: u64,
    /// Ends without a begin drawn from their duration field.
    pub ends_from_duration: u64,
    /// Ends without a begin and without a duration: instants.
    pub ends_as_instants: u64,
    pub instants: u64,
    pub counter_values: u64,
    /// Pairs closed early to free a lane (their end was probably lost);
    /// also counted in `closed_unterminated`.
    pub evicted: u64,
    /// Slices dropped because every lane of their source was busy.
    pub over_lane_limit: u64,
    pub over_open_limit: u64,
    pub lost_markers: u64,
    pub gaps: u64,
    /// Commands whose flow links device events to their slice, and the events linked.
    pub flows: u64,
    pub flow_steps: u64,
}

struct Lane {
    uuid: u64,
    open: bool,
    /// Begin timestamp of the open pair.
    opened_at: u64,
    last_end: u64,
}

struct Source {
    uuid: u64,
    name: String,
    lanes: Vec<Lane>,
    in_flight: i64,
    depth_track: Option<u64>,
}

struct Open {
    source: usize,
    lane: usize,
    /// The command's flow (its begin starts it), and whether a device event joined it
    /// (then its end ends it; else nothing follows the begin and no arrow is drawn).
    flow: Option<u64>,
    linked: bool,
}

impl Open {
    /// What the pair's end does to its flow: end it if a device event joined it.
    fn end_flow(&self) -> FlowLink {
        match self.flow {
            Some(id) if self.linked => FlowLink::End(id),
            _ => FlowLink::None,
        }
    }
}

/// How an event takes part in a flow.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FlowLink {
    None,
    /// Starts or continues flow `id`.
    Step(u64),
    /// Ends flow `id`.
    End(u64),
}

/// `flags` bit 0 of the FTL records: background work, no command caused it.
const FTL_FLAG_BACKGROUND: u64 = 1;
/// The source meaning of NAND die tracks (the ssd workloads' catalog entries).
const DIE_SOURCE: &str = "channel << 8 | die";

type PairKey<'c> = (&'c str, [u64; MAX_PAIR_KEY]);

pub struct PerfettoWriter<'c, W: Write> {
    out: W,
    catalog: &'c Catalog,
    clock_mhz: u64,
    next_uuid: u64,
    sources: Vec<Source>,
    /// (catalog meaning, source, ends without a begin) to index in `sources`.
    by_source: HashMap<(&'c str, u32, bool), usize>,
    open: HashMap<PairKey<'c>, Open>,
    markers_track: Option<u64>,
    rate_track: Option<u64>,
    lost_track: Option<u64>,
    lost_total: u64,
    bin_ns: u64,
    bin_start: Option<u64>,
    bin_records: u64,
    last_ts: u64,
    /// First record's timestamp: NPU events (in cycles) are placed from here.
    base_ns: Option<u64>,
    /// The pair a command's begin opens (the Begin keyed on qid and cid).
    cmd_pair: Option<&'c str>,
    /// Track of the FTL's instants (map cache, GC, wear levelling).
    ftl_track: Option<u64>,
    next_flow: u64,
    pub summary: Summary,
}

impl<'c, W: Write> PerfettoWriter<'c, W> {
    pub fn new(out: W, catalog: &'c Catalog, clock_mhz: u32, bin_ns: u64) -> Self {
        Self {
            out,
            catalog,
            clock_mhz: clock_mhz.max(1) as u64,
            next_uuid: 1,
            sources: Vec::new(),
            by_source: HashMap::new(),
            open: HashMap::new(),
            markers_track: None,
            rate_track: None,
            lost_track: None,
            lost_total: 0,
            bin_ns: bin_ns.max(1),
            bin_start: None,
            bin_records: 0,
            last_ts: 0,
            base_ns: None,
            cmd_pair: catalog.file.opcodes.iter().find_map(|o| match &o.pccx {
                Some(PccxMap::Begin { pair, key, .. }) if key == &["qid", "cid"] => Some(pair.as_str()),
                _ => None,
            }),
            ftl_track: None,
            next_flow: 0,
            summary: Summary::default(),
        }
    }

    fn write(&mut self, timestamp: Option<u64>, data: Data) -> std::io::Result<()> {
        let p = TracePacket {
            timestamp,
            sequence_flags: (self.summary.packets == 0).then_some(SEQ_INCREMENTAL_STATE_CLEARED),
            data: Some(data),
            trusted_packet_sequence_id: Some(SEQUENCE_ID),
        };
        self.summary.packets += 1;
        // A `Trace` of this one packet: the file is their concatenation,
        // which protobuf reads as one `Trace` with every packet.
        self.out.write_all(&Trace { packet: vec![p] }.encode_to_vec())
    }

    fn new_track(&mut self, name: &str, parent: Option<u64>, counter: Option<&str>) -> std::io::Result<u64> {
        let uuid = self.next_uuid;
        self.next_uuid += 1;
        let d = TrackDescriptor {
            uuid: Some(uuid),
            name: Some(name.to_string()),
            parent_uuid: parent,
            counter: counter.map(|unit| CounterDescriptor {
                unit_name: Some(unit.to_string()),
            }),
        };
        self.summary.tracks += 1;
        self.write(None, Data::TrackDescriptor(d))?;
        Ok(uuid)
    }

    /// The top-level track kept in `slot`, described on first use (tracks
    /// appear in the file only once something is drawn on them).
    fn track_in(
        &mut self,
        slot: impl Fn(&mut Self) -> &mut Option<u64>,
        name: impl FnOnce(&Self) -> String,
        counter: Option<&str>,
    ) -> std::io::Result<u64> {
        if let Some(t) = *slot(self) {
            return Ok(t);
        }
        let name = name(self);
        let t = self.new_track(&name, None, counter)?;
        *slot(self) = Some(t);
        Ok(t)
    }

    /// A track event at `ts`, in `flow` (`FlowLink::None`: in no flow).
    fn event(
        &mut self,
        ts: u64,
        track: u64,
        ty: EventType,
        name: Option<&str>,
        args: Vec<DebugAnnotation>,
        flow: FlowLink,
    ) -> std::io::Result<()> {
        let (flow_ids, terminating_flow_ids) = match flow {
            FlowLink::None => (Vec::new(), Vec::new()),
            FlowLink::Step(id) => (vec![id], Vec::new()),
            FlowLink::End(id) => (Vec::new(), vec![id]),
        };
        let e = TrackEvent {
            r#type: Some(ty as i32),
            track_uuid: Some(track),
            name: name.map(str::to_string),
            debug_annotations: args,
            counter_value: None,
            flow_ids,
            terminating_flow_ids,
        };
        self.write(Some(ts), Data::TrackEvent(e))
    }

    fn counter(&mut self, ts: u64, track: u64, value: i64) -> std::io::Result<()> {
        let e = TrackEvent {
            r#type: Some(EventType::Counter as i32),
            track_uuid: Some(track),
            counter_value: Some(value),
            ..TrackEvent::default()
        };
        self.summary.counter_values += 1;
        self.write(Some(ts), Data::TrackEvent(e))
    }

    /// The source's index, its track created on first use. Ends whose
    /// begin is missing (dropped, or before the trace) get a track of their
    /// own per source: reaching back in time, they would not fit on the
    /// lanes of the source's live pairs.
    fn source(&mut self, op: Option<&'c OpcodeEntry>, source: u32, orphan: bool) -> std::io::Result<usize> {
        let meaning: &'c str = op.map_or("source", |o| o.source.as_str());
        self.source_of(meaning, source, orphan)
    }

    /// [`Self::source`] by the meaning of the source number.
    fn source_of(&mut self, meaning: &'c str, source: u32, orphan: bool) -> std::io::Result<usize> {
        let key = if self.sources.len() >= MAX_SOURCES && !self.by_source.contains_key(&(meaning, source, orphan)) {
            ("other sources", 0, orphan)
        } else {
            (meaning, source, orphan)
        };
        if let Some(&i) = self.by_source.get(&key) {
            return Ok(i);
        }
        let mut name = if key.0 == "other sources" {
            "other sources".to_string()
        } else {
            source_name(meaning, source)
        };
        if orphan {
            name.push_str(" (ends without a begin)");
        }
        let uuid = self.new_track(&name, None, None)?;
        self.sources.push(Source {
            uuid,
            name,
            lanes: Vec::new(),
            in_flight: 0,
            depth_track: None,
        });
        self.by_source.insert(key, self.sources.len() - 1);
        Ok(self.sources.len() - 1)
    }

    /// A lane of `s` free for a slice starting at `start`: no open pair on
    /// it and everything on it ended by then. None when all lanes are taken.
    fn lane(&mut self, s: usize, start: u64) -> std::io::Result<Option<usize>> {
        if let Some(i) = self.sources[s]
            .lanes
            .iter()
            .position(|l| !l.open && l.last_end <= start)
        {
            return Ok(Some(i));
        }
        if self.sources[s].lanes.len() >= MAX_LANES {
            return self.evict_oldest(s, start);
        }
        let n = self.sources[s].lanes.len() + 1;
        let name = format!("{} #{n}", self.sources[s].name);
        let parent = self.sources[s].uuid;
        let uuid = self.new_track(&name, Some(parent), None)?;
        self.sources[s].lanes.push(Lane {
            uuid,
            open: false,
            opened_at: 0,
            last_end: 0,
        });
        Ok(Some(n - 1))
    }

    /// Every lane is taken. A pair whose end was lost (a drop) holds its
    /// lane forever, so the pair open longest is closed as unterminated and
    /// its lane reused, if that lane is free by `start` (only for pairs:
    /// a span reaching back in time is counted and dropped instead).
    fn evict_oldest(&mut self, s: usize, start: u64) -> std::io::Result<Option<usize>> {
        let oldest = self.sources[s]
            .lanes
            .iter()
            .enumerate()
            .filter(|(_, l)| l.open)
            .min_by_key(|(_, l)| l.opened_at)
            .map(|(i, _)| i);
        match oldest {
            Some(l) if self.last_ts <= start => {
                let key = self
                    .open
                    .iter()
                    .find(|(_, o)| o.source == s && o.lane == l)
                    .map(|(k, _)| *k);
                if let Some(k) = key {
                    if let Some(o) = self.open.remove(&k) {
                        self.close_one(o)?;
                    }
                }
                self.summary.evicted += 1;
                Ok(Some(l))
            }
            _ => {
                self.summary.over_lane_limit += 1;
                Ok(None)
            }
        }
    }

    fn depth(&mut self, s: usize, delta: i64, ts: u64) -> std::io::Result<()> {
        let track = self.track_in(
            |w| &mut w.sources[s].depth_track,
            |w| format!("{} in flight", w.sources[s].name),
            Some("commands"),
        )?;
        self.sources[s].in_flight += delta;
        let v = self.sources[s].in_flight;
        self.counter(ts, track, v)
    }

    /// A whole slice [start, end] on a free lane of `s`.
    fn span(&mut self, s: usize, start: u64, end: u64, name: &str, args: Vec<DebugAnnotation>) -> std::io::Result<()> {
        self.span_in_flow(s, start, end, name, args, FlowLink::None).map(|_| ())
    }

    /// [`Self::span`], in `flow`; false if no lane was free (nothing drawn).
    fn span_in_flow(
        &mut self,
        s: usize,
        start: u64,
        end: u64,
        name: &str,
        args: Vec<DebugAnnotation>,
        flow: FlowLink,
    ) -> std::io::Result<bool> {
        let Some(l) = self.lane(s, start)? else {
            return Ok(false);
        };
        let lane = &mut self.sources[s].lanes[l];
        lane.last_end = end;
        let uuid = lane.uuid;
        self.event(start, uuid, EventType::SliceBegin, Some(name), args, flow)?;
        self.event(end, uuid, EventType::SliceEnd, None, Vec::new(), FlowLink::None)?;
        self.summary.slices += 1;
        Ok(true)
    }

    fn markers(&mut self) -> std::io::Result<u64> {
        self.track_in(|w| &mut w.markers_track, |_| "trace.bin markers".into(), None)
    }

    fn marker(&mut self, name: &str, args: Vec<DebugAnnotation>) -> std::io::Result<()> {
        let t = self.markers()?;
        self.summary.instants += 1;
        self.event(self.last_ts, t, EventType::Instant, Some(name), args, FlowLink::None)
    }

    /// A LOST marker or a sequence gap: an instant on the markers track and
    /// the running total of lost records.
    fn loss(&mut self, name: &str, count: u64, first_seq: u64, epoch: u64) -> std::io::Result<()> {
        self.marker(
            name,
            vec![
                arg_u("count", count),
                arg_u("first_seq", first_seq),
                arg_u("epoch", epoch),
            ],
        )?;
        self.lost(count)
    }

    fn lost(&mut self, count: u64) -> std::io::Result<()> {
        let t = self.track_in(
            |w| &mut w.lost_track,
            |_| "lost records (total)".into(),
            Some("records"),
        )?;
        self.lost_total += count;
        self.counter(self.last_ts, t, self.lost_total as i64)
    }

    /// Count a record into the records/s bins, writing finished bins.
    fn rate(&mut self, ts: u64) -> std::io::Result<()> {
        let bin = ts - ts % self.bin_ns;
        match self.bin_start {
            Some(start) if bin == start => {}
            Some(start) if bin > start => {
                self.flush_bin(start)?;
                if bin > start + self.bin_ns {
                    // An idle stretch reads as zero, not as a ramp.
                    let t = self.rate_track()?;
                    self.counter(start + self.bin_ns, t, 0)?;
                }
                self.bin_start = Some(bin);
            }
            // Time went back (a warning elsewhere): keep counting in this bin.
            Some(_) => {}
            None => self.bin_start = Some(bin),
        }
        self.bin_records += 1;
        Ok(())
    }

    fn rate_track(&mut self) -> std::io::Result<u64> {
        self.track_in(|w| &mut w.rate_track, |_| "records/s".into(), Some("records/s"))
    }

    fn flush_bin(&mut self, start: u64) -> std::io::Result<()> {
        let t = self.rate_track()?;
        let per_s = (self.bin_records as u128 * 1_000_000_000 / self.bin_ns as u128) as i64;
        self.bin_records = 0;
        self.counter(start, t, per_s)
    }

    /// Close every open pair at the last timestamp (epoch change, end).
    fn close_open(&mut self) -> std::io::Result<()> {
        let mut open: Vec<Open> = self.open.drain().map(|(_, o)| o).collect();
        // HashMap order is not deterministic; the output should be.
        open.sort_by_key(|o| (o.source, o.lane));
        for o in open {
            self.close_one(o)?;
        }
        Ok(())
    }

    pub fn feed(&mut self, ev: &Event<'_, '_>, keep: impl Fn(u64, &Item<'_>) -> bool) -> std::io::Result<()> {
        match *ev {
            Event::Record { epoch, item } => {
                let ts = item.timestamp_ns();
                self.base_ns.get_or_insert(ts);
                if !keep(epoch, item) {
                    return Ok(());
                }
                self.last_ts = self.last_ts.max(ts);
                self.rate(ts)?;
                self.record(item)?;
            }
            Event::Lost {
                epoch,
                first_seq,
                count,
                ..
            } => {
                self.summary.lost_markers += 1;
                self.loss("LOST", count, first_seq, epoch)?;
            }
            Event::Gap {
                epoch,
                first_seq,
                count,
                timestamp_ns,
                ..
            } => {
                self.summary.gaps += 1;
                if timestamp_ns > 0 {
                    self.last_ts = self.last_ts.max(timestamp_ns);
                }
                self.loss("sequence gap", count, first_seq, epoch)?;
            }
            Event::Frozen {
                epoch,
                last_seq,
                next_seq,
                ..
            } => {
                let mut args = vec![arg_u("epoch", epoch), arg_u("next_seq", next_seq)];
                if let Some(l) = last_seq {
                    args.push(arg_u("last_seq", l));
                }
                self.marker("FROZEN", args)?;
            }
            Event::EpochStart { epoch, ring_size, .. } => {
                // Pairs never span epochs: the ring restarted.
                self.close_open()?;
                self.marker("EPOCH", vec![arg_u("epoch", epoch), arg_u("ring_size", ring_size)])?;
            }
            Event::UnknownMarker { opcode, .. } => {
                self.marker("unknown marker", vec![arg_u("opcode", opcode as u64)])?;
            }
            Event::SeqBackwards { .. } => {}
        }
        Ok(())
    }

    fn record(&mut self, item: &Item<'_>) -> std::io::Result<()> {
        let ts = item.timestamp_ns();
        let op = self.catalog.get(item.opcode());
        let p = item.payload;
        let s = self.source(op, item.source(), false)?;
        let Some(op) = op else {
            let name = self.catalog.name(item.opcode());
            let uuid = self.sources[s].uuid;
            self.summary.instants += 1;
            return self.event(
                ts,
                uuid,
                EventType::Instant,
                Some(&name),
                vec![arg_u("seq", item.seq())],
                FlowLink::None,
            );
        };
        if op.pccx.is_none() && is_ftl_record(op) {
            return self.ftl_record(ts, op, p);
        }
        match &op.pccx {
            Some(PccxMap::Begin { pair, key, .. }) => {
                let Some(k) = pair_key(op, p, key) else {
                    return self.instant(s, ts, op, p);
                };
                if self.open.len() >= MAX_OPEN {
                    self.summary.over_open_limit += 1;
                    return Ok(());
                }
                let Some(l) = self.lane(s, ts)? else { return Ok(()) };
                // A begin reusing an open key: the old one never ended.
                if let Some(old) = self.open.remove(&(pair.as_str(), k)) {
                    self.close_one(old)?;
                }
                self.sources[s].lanes[l].open = true;
                self.sources[s].lanes[l].opened_at = ts;
                let uuid = self.sources[s].lanes[l].uuid;
                let flow = (self.cmd_pair == Some(pair.as_str())).then(|| {
                    self.next_flow += 1;
                    self.next_flow
                });
                self.event(
                    ts,
                    uuid,
                    EventType::SliceBegin,
                    Some(&slice_name(op, p)),
                    fields(op, p, &[]),
                    flow.map_or(FlowLink::None, FlowLink::Step),
                )?;
                self.open.insert(
                    (pair.as_str(), k),
                    Open {
                        source: s,
                        lane: l,
                        flow,
                        linked: false,
                    },
                );
                self.depth(s, 1, ts)?;
            }
            Some(PccxMap::End {
                pair,
                key,
                duration_field,
                ..
            }) => {
                let Some(k) = pair_key(op, p, key) else {
                    return self.instant(s, ts, op, p);
                };
                if let Some(o) = self.open.remove(&(pair.as_str(), k)) {
                    let lane = &mut self.sources[o.source].lanes[o.lane];
                    lane.open = false;
                    lane.last_end = ts;
                    let uuid = lane.uuid;
                    self.event(ts, uuid, EventType::SliceEnd, None, fields(op, p, key), o.end_flow())?;
                    self.summary.slices += 1;
                    return self.depth(o.source, -1, ts);
                }
                match duration_field.as_ref().and_then(|f| op.field(p, f)) {
                    Some(dur) => {
                        self.summary.ends_from_duration += 1;
                        let mut args = fields(op, p, &[]);
                        args.push(arg_bool("begin_missing", true));
                        let name = format!("{} (no begin)", op.name);
                        let orphans = self.source(Some(op), item.source(), true)?;
                        self.span(orphans, ts.saturating_sub(dur), ts, &name, args)?;
                    }
                    None => {
                        self.summary.ends_as_instants += 1;
                        self.instant(s, ts, op, p)?;
                    }
                }
            }
            Some(PccxMap::Span { duration_field, .. }) => match op.field(p, duration_field) {
                Some(dur) => self.span(s, ts.saturating_sub(dur), ts, &op.name, fields(op, p, &[]))?,
                None => self.instant(s, ts, op, p)?,
            },
            Some(PccxMap::Flatbuf) => {
                let (Some(start), Some(dur), Some(ty)) = (
                    op.field(p, "start_cycle"),
                    op.field(p, "duration"),
                    op.field(p, "event_type_id"),
                ) else {
                    return self.instant(s, ts, op, p);
                };
                let base = self.base_ns.unwrap_or(0);
                let start_ns = base.saturating_add(self.cycles_to_ns(start));
                let end_ns = start_ns.saturating_add(self.cycles_to_ns(dur));
                let name = pccx::event_type_name(ty as u32).map_or(op.name.clone(), str::to_string);
                self.span(s, start_ns, end_ns, &name, fields(op, p, &[]))?;
            }
            None => self.instant(s, ts, op, p)?,
        }
        Ok(())
    }

    /// An FTL record: a NAND operation as a slice on its die's track from its modelled
    /// start for its latency, anything else as an instant on the FTL track; in its
    /// command's flow unless it is background work or its command is not open.
    fn ftl_record(&mut self, ts: u64, op: &'c OpcodeEntry, p: &[u8]) -> std::io::Result<()> {
        let flow = self.command_flow(op, p);
        let nand = (
            op.field(p, "channel"),
            op.field(p, "die"),
            op.field(p, "start_ns"),
            op.field(p, "latency_ns"),
        );
        let linked = if let (Some(ch), Some(die), Some(start), Some(lat)) = nand {
            let s = self.source_of(DIE_SOURCE, ((ch as u32) << 8) | die as u32, false)?;
            let start = ts.saturating_add(start);
            self.span_in_flow(s, start, start.saturating_add(lat), &op.name, fields(op, p, &[]), flow)?
        } else {
            let track = self.track_in(
                |w| &mut w.ftl_track,
                |_| "FTL (map cache, GC, wear levelling)".into(),
                None,
            )?;
            self.summary.instants += 1;
            self.event(ts, track, EventType::Instant, Some(&op.name), fields(op, p, &[]), flow)?;
            true
        };
        if linked && flow != FlowLink::None {
            self.summary.flow_steps += 1;
        }
        Ok(())
    }

    /// The flow of the open command that caused an FTL record, or none (background
    /// work, command not open).
    fn command_flow(&mut self, op: &OpcodeEntry, p: &[u8]) -> FlowLink {
        let (Some(pair), Some(qid), Some(cid), Some(flags)) = (
            self.cmd_pair,
            op.field(p, "qid"),
            op.field(p, "cid"),
            op.field(p, "flags"),
        ) else {
            return FlowLink::None;
        };
        if flags & FTL_FLAG_BACKGROUND != 0 {
            return FlowLink::None;
        }
        let mut k = [0u64; MAX_PAIR_KEY];
        (k[0], k[1]) = (qid, cid);
        let Some(open) = self.open.get_mut(&(pair, k)) else {
            return FlowLink::None;
        };
        let Some(id) = open.flow else {
            return FlowLink::None;
        };
        if !open.linked {
            open.linked = true;
            self.summary.flows += 1;
        }
        FlowLink::Step(id)
    }

    fn cycles_to_ns(&self, cycles: u64) -> u64 {
        u64::try_from(cycles as u128 * 1000 / self.clock_mhz as u128).unwrap_or(u64::MAX)
    }

    fn close_one(&mut self, o: Open) -> std::io::Result<()> {
        let ts = self.last_ts;
        let lane = &mut self.sources[o.source].lanes[o.lane];
        lane.open = false;
        lane.last_end = ts;
        let uuid = lane.uuid;
        self.event(
            ts,
            uuid,
            EventType::SliceEnd,
            None,
            vec![arg_bool("unterminated", true)],
            o.end_flow(),
        )?;
        self.summary.closed_unterminated += 1;
        self.depth(o.source, -1, ts)
    }

    fn instant(&mut self, s: usize, ts: u64, op: &OpcodeEntry, p: &[u8]) -> std::io::Result<()> {
        let uuid = self.sources[s].uuid;
        self.summary.instants += 1;
        self.event(
            ts,
            uuid,
            EventType::Instant,
            Some(&op.name),
            fields(op, p, &[]),
            FlowLink::None,
        )
    }

    /// Close what is open, write the last rate bin and flush.
    pub fn finish(mut self) -> std::io::Result<(W, Summary)> {
        self.close_open()?;
        if let Some(start) = self.bin_start {
            self.flush_bin(start)?;
        }
        self.out.flush()?;
        Ok((self.out, self.summary))
    }
}

/// A record of the NVMe controller's FTL: the command that caused it (`qid`, `cid`)
/// and `flags` (bit 0: background), in the "nvme" workload.
fn is_ftl_record(op: &OpcodeEntry) -> bool {
    op.workload == "nvme"
        && ["qid", "cid", "flags"]
            .iter()
            .all(|n| op.fields.iter().any(|f| f.name == *n))
}

/// A track name from the catalog's description of `source`.
pub fn source_name(meaning: &str, source: u32) -> String {
    match meaning {
        "channel << 8 | die" => format!("NAND channel {} die {}", source >> 8, source & 0xff),
        "core_id" => format!("NPU core {source}"),
        "" => format!("source {source}"),
        m => format!("{} {source}", m.strip_suffix(" id").unwrap_or(m)),
    }
}

/// A begin's slice name: NVMe commands by their opcode, others by the
/// begin record's name without its START/FETCH suffix.
fn slice_name(op: &OpcodeEntry, p: &[u8]) -> String {
    if let Some(nvme) = op.field(p, "nvme_opcode") {
        return match nvme {
            0x00 => "flush".into(),
            0x01 => "write".into(),
            0x02 => "read".into(),
            n => format!("nvme op {n:#04x}"),
        };
    }
    let n = op.name.as_str();
    n.strip_suffix("_START")
        .or_else(|| n.strip_suffix("_FETCH"))
        .or_else(|| n.strip_suffix("_BEGIN"))
        .unwrap_or(n)
        .to_string()
}

fn pair_key(op: &OpcodeEntry, payload: &[u8], key: &[String]) -> Option<[u64; MAX_PAIR_KEY]> {
    let mut k = [0u64; MAX_PAIR_KEY];
    for (slot, name) in k.iter_mut().zip(key) {
        *slot = op.field(payload, name)?;
    }
    Some(k)
}

/// The record's decoded catalog fields as slice args (except `skip`).
fn fields(op: &OpcodeEntry, p: &[u8], skip: &[String]) -> Vec<DebugAnnotation> {
    op.fields
        .iter()
        .filter(|f| !skip.contains(&f.name))
        .filter_map(|f| read_field(p, f).map(|v| arg_u(&f.name, v)))
        .collect()
}

fn arg_u(name: &str, v: u64) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.to_string()),
        value: Some(ArgValue::Uint(v)),
    }
}

fn arg_bool(name: &str, v: bool) -> DebugAnnotation {
    DebugAnnotation {
        name: Some(name.to_string()),
        value: Some(ArgValue::Bool(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_names_come_from_the_catalog_meaning() {
        assert_eq!(source_name("submission queue id", 3), "submission queue 3");
        assert_eq!(source_name("channel << 8 | die", 0x0502), "NAND channel 5 die 2");
        assert_eq!(source_name("core_id", 1), "NPU core 1");
        assert_eq!(source_name("FTL core id", 0), "FTL core 0");
        assert_eq!(source_name("", 9), "source 9");
    }
}
