//! `stats`: per opcode, per core, and the inter-arrival histogram.

use std::io::Write;

use serde_json::json;

use crate::commands::{collect_stats, Ctx};
use crate::exit::AppError;
use crate::format::{duration_ns, thousands};
use crate::stats::{bucket_floor, Stats};

pub fn run(ctx: &Ctx, path: &str, as_json: bool, out: &mut dyn Write) -> Result<(), AppError> {
    let (mut walked, s) = collect_stats(ctx, path)?;
    if as_json {
        let v = to_json(ctx, &s);
        writeln!(out, "{}", serde_json::to_string_pretty(&v).unwrap_or_default())?;
    } else {
        write_tables(ctx, &s, out)?;
    }
    walked.status()
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
