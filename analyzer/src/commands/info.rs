//! `info`: a one-screen summary.

use std::io::Write;

use crate::commands::{collect_stats, Ctx};
use crate::exit::AppError;
use crate::format::{bytes, duration_ns, thousands};

pub fn run(ctx: &Ctx, path: &str, out: &mut dyn Write) -> Result<(), AppError> {
    let (mut walked, s) = collect_stats(ctx, path)?;
    let h = walked.header;
    let st = ctx.style;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "{:<14} {v}", st.bold(k));
    row(out, "trace", walked.name.clone())?;
    row(
        out,
        "format",
        format!(
            "trace.bin {}.{}, ring ABI {}.{}, ring {}, first epoch {}{}",
            h.format_major,
            h.format_minor,
            h.ring_abi_major,
            h.ring_abi_minor,
            bytes(h.ring_size),
            h.first_epoch,
            if h.is_filtered() {
                ", filtered (gaps are not losses)"
            } else {
                ""
            }
        ),
    )?;
    let size = match walked.file_len {
        Some(len) if walked.end.error.is_some() => {
            format!(
                "{} ({} readable, {} unreadable)",
                bytes(len),
                thousands(walked.end.offset),
                thousands(len - walked.end.offset)
            )
        }
        Some(len) => format!("{} ({} bytes)", bytes(len), thousands(len)),
        None => format!("{} bytes read", thousands(walked.end.offset)),
    };
    row(out, "size", size)?;
    row(
        out,
        "records",
        format!(
            "{} ({} payload+header bytes), {} markers",
            thousands(s.records),
            thousands(s.record_bytes),
            thousands(s.markers)
        ),
    )?;
    let span = match (s.first_ns, s.last_ns) {
        (Some(a), Some(b)) => format!("{} (timestamps {} .. {} ns)", duration_ns(b.saturating_sub(a)), a, b),
        _ => "no records".into(),
    };
    row(out, "time span", span)?;
    row(out, "rate", format!("{} records/s", thousands(s.rate().round() as u64)))?;
    let lost = s.lost_total();
    let produced = s.records + lost;
    let pct = if produced == 0 {
        0.0
    } else {
        lost as f64 * 100.0 / produced as f64
    };
    let lost_text = format!(
        "{} records ({pct:.3}% of {} produced): {} in LOST markers, {} in unmarked sequence gaps",
        thousands(lost),
        thousands(produced),
        thousands(s.lost_marked),
        thousands(s.lost_unmarked)
    );
    row(out, "lost", if lost > 0 { st.warn(&lost_text) } else { lost_text })?;
    row(out, "epochs", format!("{}", s.epochs.len()))?;
    for e in &s.epochs {
        let seqs = match (e.first_seq, e.last_seq) {
            (Some(a), Some(b)) => format!("seq {a}..={b}"),
            _ => "no records".into(),
        };
        writeln!(
            out,
            "{:<14}   epoch {}: {} records, {seqs}, lost {}{}",
            "",
            e.epoch,
            thousands(e.records),
            thousands(e.lost_marked + e.lost_unmarked),
            if e.frozen { ", FROZEN" } else { "" }
        )?;
    }
    let mut top: Vec<_> = s.opcodes.iter().collect();
    top.sort_by(|a, b| b.1.records.cmp(&a.1.records).then(a.0.cmp(b.0)));
    let top_text: Vec<String> = top
        .iter()
        .take(5)
        .map(|(op, o)| {
            format!(
                "{} {:.1}%",
                ctx.catalog.name(**op),
                o.records as f64 * 100.0 / s.records.max(1) as f64
            )
        })
        .collect();
    row(
        out,
        "top opcodes",
        if top_text.is_empty() {
            "-".into()
        } else {
            top_text.join(", ")
        },
    )?;
    row(out, "cores", format!("{} distinct sources", s.cores.len()))?;
    let mut warnings = s.summary_warnings();
    if let Some(e) = walked.ending() {
        warnings.insert(0, format!("reading stopped: {e}"));
    }
    if warnings.is_empty() {
        row(out, "warnings", "none".into())?;
    } else {
        row(out, "warnings", st.warn(&warnings.len().to_string()))?;
        for w in &warnings {
            writeln!(out, "{:<14}   - {}", "", st.warn(w))?;
        }
    }
    walked.status()
}
