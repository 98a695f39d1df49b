//! `stats`: per opcode, per core, and the inter-arrival histogram.

use std::io::Write;
use std::ops::ControlFlow;

use serde_json::json;

use crate::commands::{open_trace, walk_input, Ctx, Walked};
use crate::exit::AppError;
use crate::format::{duration_ns, thousands};
use crate::latency::{Latency, Measure};
use crate::parallel::{latency_target, stats_latency_split, PARALLEL_MIN_BYTES};
use crate::progress::Progress;
use crate::stats::{bucket_floor, Stats};

pub fn run(ctx: &Ctx, path: &str, as_json: bool, out: &mut dyn Write) -> Result<(), AppError> {
    let (mut walked, s, lat) = compute(ctx, path)?;
    if as_json {
        let mut v = to_json(ctx, &s);
        v["latency"] = serde_json::to_value(lat.percentiles()).unwrap_or_default();
        v["latency_series_dropped"] = lat.series_dropped.into();
        v["queue_depth"] = serde_json::to_value(lat.depth_series()).unwrap_or_default();
        writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default())?;
    } else {
        write_tables(ctx, &s, out)?;
        write_latency(ctx, &lat, out)?;
    }
    walked.status()
}

/// What `stats` prints, before printing: the accounting (finished) and the
/// latencies. A mapped file of some size is cut in two and walked on both
/// cores, each part's accounting and latencies in one walk, then merged
/// (`parallel.rs`, `Latency::merge`); the result is the one walk's either
/// way.
pub fn compute<'c>(ctx: &'c Ctx, path: &str) -> Result<(Walked, Stats, Latency<'c>), AppError> {
    let input = open_trace(path)?;
    if let Some(bytes) = input.mapped_bytes().filter(|b| b.len() >= PARALLEL_MIN_BYTES) {
        let progress = Progress::new(input.file_len, ctx.progress);
        let target = latency_target(&input.header, bytes.len());
        let (end, stats, lat) = stats_latency_split(bytes, &input.header, target, &progress, &ctx.catalog, true);
        progress.finish();
        return Ok((input.into_walked(end), stats, lat));
    }
    // A small file or a stream: one walk for both.
    let (walked, (mut s, lat)) = walk_input(
        ctx,
        input,
        |h| (Stats::new(h.first_epoch, h.ring_size), Latency::new(&ctx.catalog)),
        |(s, lat), ev| {
            s.add(ev);
            lat.add(ev);
            ControlFlow::Continue(())
        },
    );
    s.finish();
    Ok((walked, s, lat))
}

fn write_latency(ctx: &Ctx, lat: &Latency<'_>, out: &mut dyn Write) -> Result<(), AppError> {
    let rows = lat.percentiles();
    if rows.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "{}",
        ctx.style
            .bold("latency (field: the record's own latency field; paired: begin to end)")
    )?;
    writeln!(
        out,
        "{:<16} {:<7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "name", "measure", "source", "count", "p50", "p90", "p99", "p99.9", "max"
    )?;
    for r in &rows {
        let measure = match r.measure {
            Measure::Field => "field",
            Measure::Paired => "paired",
        };
        let source = r.source.map_or("all".to_string(), |s| s.to_string());
        writeln!(
            out,
            "{:<16} {:<7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            r.name,
            measure,
            source,
            thousands(r.count),
            duration_ns(r.p50),
            duration_ns(r.p90),
            duration_ns(r.p99),
            duration_ns(r.p999),
            duration_ns(r.max)
        )?;
    }
    let depth = lat.depth_series();
    if !depth.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "{}",
            ctx.style.bold(&format!(
                "queue depth over time (open pairs per source, max per {} bin)",
                duration_ns(depth[0].bin_ns)
            ))
        )?;
        for d in &depth {
            let peak = d.max.iter().copied().max().unwrap_or(0);
            let line: String = d.max.iter().map(|&m| spark(m, peak)).collect();
            writeln!(out, "{:<16} {:>9} max {:>5} {line}", d.name, d.source, peak)?;
        }
    }
    Ok(())
}

/// One character of a sparkline, scaled to `peak`.
fn spark(v: u32, peak: u32) -> char {
    const LEVELS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if peak == 0 {
        return ' ';
    }
    LEVELS[((v as u64 * 8).div_ceil(peak as u64)) as usize]
}

pub fn to_json(ctx: &Ctx, s: &Stats) -> serde_json::Value {
    let opcodes: Vec<_> = s
        .opcodes
        .iter()
        .map(|(op, o)| json!({"opcode": op, "name": ctx.catalog.name(*op), "records": o.records, "payload_bytes": o.payload_bytes}))
        .collect();
    let cores: Vec<_> = s.cores.iter().map(|(c, n)| json!({"core": c, "records": n})).collect();
    let hist: Vec<_> = s
        .inter_arrival
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(b, n)| json!({"from_ns": bucket_floor(b), "to_ns": bucket_floor(b + 1), "count": n}))
        .collect();
    json!({
        "records": s.records,
        "markers": s.markers,
        "record_bytes": s.record_bytes,
        "first_ns": s.first_ns,
        "last_ns": s.last_ns,
        "lost_marked": s.lost_marked,
        "lost_unmarked": s.lost_unmarked,
        "epochs": s.epochs,
        "opcodes": opcodes,
        "cores": cores,
        "other_cores_records": s.other_cores_records,
        "inter_arrival": hist,
        "ts_backwards": s.ts_backwards,
        "seq_backwards": s.seq_backwards,
    })
}

fn write_tables(ctx: &Ctx, s: &Stats, out: &mut dyn Write) -> Result<(), AppError> {
    let st = ctx.style;
    let total = s.records.max(1) as f64;
    writeln!(
        out,
        "{}",
        st.bold(&format!("per opcode ({} records)", thousands(s.records)))
    )?;
    writeln!(
        out,
        "{:<16} {:>8} {:>14} {:>8} {:>14} {:>9}",
        "name", "opcode", "records", "%", "payload B", "avg len"
    )?;
    for (op, o) in &s.opcodes {
        writeln!(
            out,
            "{:<16} {:>#8x} {:>14} {:>7.2}% {:>14} {:>9.1}",
            ctx.catalog.name(*op),
            op,
            thousands(o.records),
            o.records as f64 * 100.0 / total,
            thousands(o.payload_bytes),
            o.payload_bytes as f64 / o.records.max(1) as f64
        )?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "{}",
        st.bold(&format!("per core ({} distinct sources)", s.cores.len()))
    )?;
    writeln!(out, "{:<10} {:>14} {:>8}", "core", "records", "%")?;
    for (core, n) in &s.cores {
        writeln!(
            out,
            "{core:<10} {:>14} {:>7.2}%",
            thousands(*n),
            *n as f64 * 100.0 / total
        )?;
    }
    if s.other_cores_records > 0 {
        writeln!(out, "{:<10} {:>14}", "other", thousands(s.other_cores_records))?;
    }
    writeln!(out)?;
    let gaps: u64 = s.inter_arrival.iter().sum();
    writeln!(
        out,
        "{}",
        st.bold(&format!(
            "inter-arrival time within an epoch ({} intervals)",
            thousands(gaps)
        ))
    )?;
    let max = s.inter_arrival.iter().copied().max().unwrap_or(0).max(1);
    for (b, n) in s.inter_arrival.iter().enumerate() {
        if *n == 0 {
            continue;
        }
        let range = if b == 0 {
            "0".to_string()
        } else {
            format!("{} ..", duration_ns(bucket_floor(b)))
        };
        let bar = "#".repeat(((*n as f64 / max as f64) * 40.0).ceil() as usize);
        writeln!(out, "{range:>12} {:>14} {bar}", thousands(*n))?;
    }
    if s.ts_backwards > 0 {
        writeln!(
            out,
            "{}",
            st.warn(&format!(
                "{} intervals negative (timestamp went backwards)",
                s.ts_backwards
            ))
        )?;
    }
    Ok(())
}
