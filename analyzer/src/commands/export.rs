//! `export pccx`: records become pccx events as the catalog maps them
//! (docs/analyzer.md). Events are sorted by start cycle through spill files
//! (bounded memory), encoded in the chosen payload layout into a second
//! temporary file, and the .pccx is then written with its length and
//! checksum known. The default is the bincode layout current pccx-lab
//! decodes (`NpuEvent` with `api_name`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufWriter, Seek, Write};
use std::ops::ControlFlow;

use hmb_trace_file::Item;
use pccx::checksum::{fnv1a_64_update, FNV_BASIS};
use pccx::{ArchConfig, FlatEvent, PayloadConfig, PccxHeader, TraceConfig};

use crate::catalog::{Catalog, PccxMap, MAX_PAIR_KEY};
use crate::cli::{ExportPccxArgs, PccxEncoding};
use crate::commands::{walk_trace, Ctx};
use crate::exit::{AppError, IO, USAGE};
use crate::filter::Filter;
use crate::spill_sort::{SpillSorter, DEFAULT_CHUNK};
use crate::walk::Event;

/// Open begins remembered at most; beyond, begins are counted and dropped.
const MAX_PENDING: usize = 1 << 20;
/// Distinct cores counted for the header's `cores`.
const MAX_CORES: usize = 1 << 16;

/// (pair name, key field values) of an open begin; keys have at most
/// `MAX_PAIR_KEY` fields (the catalog checks), unused slots are 0.
type PairKey<'c> = (&'c str, [u64; MAX_PAIR_KEY]);

/// An open begin: timestamp, core, event type chosen at the begin.
#[derive(Clone, Copy)]
struct OpenBegin {
    ts: u64,
    core: u32,
    event_type: Option<u32>,
}

#[derive(Default)]
struct Export<'c> {
    events: u64,
    by_type: BTreeMap<u32, u64>,
    cores: HashSet<u32>,
    max_end: u64,
    /// Timestamp origin for nanosecond-based events: the first record's.
    base_ns: Option<u64>,
    pending: HashMap<PairKey<'c>, OpenBegin>,
    pending_dropped: u64,
    unmatched_ends: u64,
    ends_from_field: u64,
    abandoned_begins: u64,
    unmapped_records: u64,
}

pub fn run(ctx: &Ctx, args: &ExportPccxArgs, out: &mut dyn Write) -> Result<(), AppError> {
    crate::commands::ensure_distinct(&args.trace, &args.output)?;
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    let mac_dims = parse_dims(&args.mac_dims)?;
    if args.clock_mhz == 0 {
        return Err(AppError::new(USAGE, "--clock-mhz must be at least 1"));
    }
    let io = |e: std::io::Error| AppError::new(IO, format!("{}: {e}", args.output.display()));
    let dir = args
        .output
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let mut sorter = SpillSorter::new(tempfile::tempfile_in(dir).map_err(io)?, DEFAULT_CHUNK);
    let mut io_err = None;
    let clock = args.clock_mhz as u128;
    let (mut walked, mut ex) = walk_trace(
        ctx,
        &args.trace,
        |_| Export::default(),
        |ex, ev| {
            match *ev {
                Event::Record { epoch, item } => {
                    ex.base_ns.get_or_insert(item.timestamp_ns());
                    if !filter.keeps(epoch, item) {
                        return ControlFlow::Continue(());
                    }
                    if let Some(e) = map_record(&ctx.catalog, ex, item, clock) {
                        ex.events += 1;
                        *ex.by_type.entry(e.event_type_id).or_default() += 1;
                        if ex.cores.len() < MAX_CORES {
                            ex.cores.insert(e.core_id);
                        }
                        ex.max_end = ex.max_end.max(e.start_cycle.saturating_add(e.duration));
                        if let Err(err) = sorter.push(e) {
                            io_err = Some(err);
                            return ControlFlow::Break(());
                        }
                    }
                }
                // Pairs never span epochs: the ring restarted.
                Event::EpochStart { .. } => {
                    ex.abandoned_begins += ex.pending.len() as u64;
                    ex.pending.clear();
                }
                _ => {}
            }
            ControlFlow::Continue(())
        },
    )?;
    if let Some(e) = io_err {
        return Err(io(e));
    }
    ex.abandoned_begins += ex.pending.len() as u64;
    let (mut payload, byte_length, checksum) = encode_sorted(sorter, &ex, args.encoding, dir).map_err(io)?;
    payload.rewind().map_err(io)?;
    let header = PccxHeader {
        pccx_lab_version: format!("hmb-trace-analyze {}", env!("CARGO_PKG_VERSION")),
        arch: ArchConfig {
            mac_dims,
            isa_version: args.isa_version.clone(),
            peak_tops: args.peak_tops,
        },
        trace: TraceConfig {
            cycles: ex.max_end,
            cores: ex.cores.len() as u32,
            clock_mhz: args.clock_mhz,
        },
        payload: PayloadConfig {
            encoding: match args.encoding {
                PccxEncoding::Flatbuf => "flatbuf",
                PccxEncoding::Bincode | PccxEncoding::BincodeSeed => "bincode",
            }
            .into(),
            ..Default::default()
        },
        format_minor: pccx::MINOR_VERSION,
    };
    let file = std::fs::File::create(&args.output).map_err(io)?;
    pccx::write_pccx_streamed(BufWriter::new(file), &header, byte_length, checksum, payload)
        .map_err(|e| AppError::new(IO, format!("{}: {e}", args.output.display())))?;
    writeln!(
        out,
        "wrote {} events ({} cycles, {} cores, {}, sorted by start cycle) to {}",
        ex.events,
        ex.max_end,
        ex.cores.len(),
        args.encoding.describe(),
        args.output.display()
    )?;
    for (t, n) in &ex.by_type {
        writeln!(
            out,
            "  {:<16} {n}",
            pccx::event_type_name(*t).map_or(format!("type {t}"), str::to_string)
        )?;
    }
    writeln!(
        out,
        "pairs: {} ends without a begin ({} timed from their duration field), {} begins never ended, {} begins over the limit",
        ex.unmatched_ends + ex.ends_from_field,
        ex.ends_from_field,
        ex.abandoned_begins,
        ex.pending_dropped
    )?;
    writeln!(out, "records with no pccx mapping: {}", ex.unmapped_records)?;
    walked.status()
}

/// Merge the sorted events into a temporary file in `encoding`: returns the
/// file, the payload length and its FNV-1a checksum.
fn encode_sorted(
    sorter: SpillSorter,
    ex: &Export<'_>,
    encoding: PccxEncoding,
    dir: &std::path::Path,
) -> std::io::Result<(std::fs::File, u64, u64)> {
    let mut w = BufWriter::new(tempfile::tempfile_in(dir)?);
    let mut checksum = FNV_BASIS;
    let mut len = 0u64;
    let mut put = |w: &mut BufWriter<std::fs::File>, b: &[u8]| -> std::io::Result<()> {
        checksum = fnv1a_64_update(checksum, b);
        len += b.len() as u64;
        w.write_all(b)
    };
    let layout = match encoding {
        PccxEncoding::Flatbuf => None,
        PccxEncoding::Bincode => Some(pccx::BincodeLayout::ApiName),
        PccxEncoding::BincodeSeed => Some(pccx::BincodeLayout::Seed),
    };
    if layout.is_some() {
        put(&mut w, &pccx::encode_prefix(ex.max_end, ex.events))?;
    }
    let mut buf = Vec::with_capacity(64);
    sorter.finish(|e| match layout {
        None => put(&mut w, &e.encode()),
        Some(layout) => {
            buf.clear();
            // pccx-lab maps unknown type names to UNKNOWN; ids it has no
            // name for can only be written as that.
            let name = pccx::event_type_name(e.event_type_id).unwrap_or("UNKNOWN");
            pccx::encode_event(&mut buf, e.core_id, e.start_cycle, e.duration, name, None, layout)
                .map_err(std::io::Error::other)?;
            put(&mut w, &buf)
        }
    })?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    Ok((file, len, checksum))
}

/// The key field values of a begin or end record (None if the payload is
/// too short for one of them).
fn pair_key(op: &crate::catalog::OpcodeEntry, payload: &[u8], key: &[String]) -> Option<[u64; MAX_PAIR_KEY]> {
    let mut k = [0u64; MAX_PAIR_KEY];
    for (slot, name) in k.iter_mut().zip(key) {
        *slot = op.field(payload, name)?;
    }
    Some(k)
}

fn parse_dims(s: &str) -> Result<(u32, u32), AppError> {
    let bad = || AppError::new(USAGE, format!("--mac-dims {s:?} is not ROWSxCOLS"));
    let (a, b) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    Ok((
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    ))
}

fn to_cycles(ns: u64, clock_mhz: u128) -> u64 {
    u64::try_from(ns as u128 * clock_mhz / 1000).unwrap_or(u64::MAX)
}

/// The event a record maps to, if any; updates pairing state.
fn map_record<'c>(catalog: &'c Catalog, ex: &mut Export<'c>, item: &Item<'_>, clock: u128) -> Option<FlatEvent> {
    let Some(op) = catalog.get(item.opcode()) else {
        ex.unmapped_records += 1;
        return None;
    };
    let p = item.payload;
    let ts = item.timestamp_ns();
    let rel = |ns: u64, base: Option<u64>| ns.saturating_sub(base.unwrap_or(0));
    match &op.pccx {
        None => {
            ex.unmapped_records += 1;
            None
        }
        Some(PccxMap::Flatbuf) => Some(FlatEvent {
            core_id: op.field(p, "core_id")? as u32,
            start_cycle: op.field(p, "start_cycle")?,
            duration: op.field(p, "duration")?,
            event_type_id: op.field(p, "event_type_id")? as u32,
        }),
        Some(PccxMap::Span {
            event_type_id,
            duration_field,
        }) => {
            let dur = op.field(p, duration_field)?;
            let start = rel(ts.saturating_sub(dur), ex.base_ns);
            Some(FlatEvent {
                core_id: item.source(),
                start_cycle: to_cycles(start, clock),
                duration: to_cycles(dur, clock),
                event_type_id: *event_type_id,
            })
        }
        Some(PccxMap::Begin {
            pair,
            key,
            event_type_from,
        }) => {
            let k = pair_key(op, p, key);
            let t = event_type_from.as_ref().map(|e| {
                op.field(p, &e.field)
                    .and_then(|v| e.map.get(&v.to_string()).copied())
                    .unwrap_or(e.default)
            });
            if ex.pending.len() >= MAX_PENDING {
                ex.pending_dropped += 1;
            } else if let Some(k) = k {
                if ex
                    .pending
                    .insert(
                        (pair.as_str(), k),
                        OpenBegin {
                            ts,
                            core: item.source(),
                            event_type: t,
                        },
                    )
                    .is_some()
                {
                    ex.abandoned_begins += 1;
                }
            }
            None
        }
        Some(PccxMap::End {
            pair,
            key,
            event_type_id,
            duration_field,
        }) => {
            let k = pair_key(op, p, key)?;
            if let Some(b) = ex.pending.remove(&(pair.as_str(), k)) {
                let start = rel(b.ts, ex.base_ns);
                return Some(FlatEvent {
                    core_id: b.core,
                    start_cycle: to_cycles(start, clock),
                    duration: to_cycles(ts.saturating_sub(b.ts), clock),
                    event_type_id: b.event_type.unwrap_or(*event_type_id),
                });
            }
            match duration_field.as_ref().and_then(|f| op.field(p, f)) {
                Some(dur) => {
                    ex.ends_from_field += 1;
                    Some(FlatEvent {
                        core_id: item.source(),
                        start_cycle: to_cycles(rel(ts.saturating_sub(dur), ex.base_ns), clock),
                        duration: to_cycles(dur, clock),
                        event_type_id: *event_type_id,
                    })
                }
                None => {
                    ex.unmatched_ends += 1;
                    None
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_and_cycles() {
        assert_eq!(parse_dims("32x16").unwrap(), (32, 16));
        assert!(parse_dims("32").is_err());
        assert_eq!(to_cycles(1000, 1000), 1000);
        assert_eq!(to_cycles(1000, 500), 500);
        assert_eq!(to_cycles(u64::MAX, 100_000), u64::MAX);
    }
}
