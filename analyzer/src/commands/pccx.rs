//! `pccx verify` and `pccx info` for any .pccx file.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use pccx::{ChecksumStatus, Encoding, MappedPccx, PayloadView, ReadOptions};

use crate::commands::Ctx;
use crate::exit::{from_pccx_error, AppError};
use crate::format::{bytes, thousands};

fn open(path: &Path, strict: bool) -> Result<MappedPccx, AppError> {
    MappedPccx::open(
        path,
        &ReadOptions {
            strict,
            ..Default::default()
        },
    )
    .map_err(|e| from_pccx_error(&path.display().to_string(), e))
}

fn checksum_text(c: &ChecksumStatus) -> String {
    match c {
        ChecksumStatus::Absent => "absent (not checked)".into(),
        ChecksumStatus::NotChecked => "not checked".into(),
        ChecksumStatus::Match(v) => format!("{v:#018x} ok"),
        ChecksumStatus::Mismatch { expected, actual } => {
            format!("MISMATCH: header {expected:#018x}, payload {actual:#018x}")
        }
    }
}

pub fn verify(ctx: &Ctx, path: &Path, strict: bool, out: &mut dyn Write) -> Result<(), AppError> {
    let name = path.display().to_string();
    let f = open(path, strict)?;
    let events = f.check_payload().map_err(|e| from_pccx_error(&name, e))?;
    for w in &f.verified.warnings {
        writeln!(out, "{}", ctx.style.warn(&format!("warning: {w}")))?;
    }
    let what = match events {
        Some(n) => format!("{} events", thousands(n)),
        None => "opaque payload".into(),
    };
    writeln!(
        out,
        "{name}: ok ({} {}, {what}, checksum {}{})",
        f.header.payload.encoding,
        bytes(f.header.payload.byte_length),
        checksum_text(&f.verified.checksum),
        if strict { ", strict" } else { "" }
    )?;
    Ok(())
}

pub fn info(ctx: &Ctx, path: &Path, list: usize, out: &mut dyn Write) -> Result<(), AppError> {
    let name = path.display().to_string();
    let f = open(path, false)?;
    let h = &f.header;
    let st = ctx.style;
    let row = |out: &mut dyn Write, k: &str, v: String| writeln!(out, "{:<16} {v}", st.bold(k));
    row(out, "file", name.clone())?;
    row(
        out,
        "version",
        format!(
            "{}.{} (JSON format_minor {})",
            f.preamble.major, f.preamble.minor, h.format_minor
        ),
    )?;
    row(out, "header", format!("{} bytes of JSON", f.preamble.header_len))?;
    row(out, "pccx_lab_version", h.pccx_lab_version.clone())?;
    row(
        out,
        "arch",
        format!(
            "mac_dims {}x{}, isa {}, peak {} TOPS",
            h.arch.mac_dims.0, h.arch.mac_dims.1, h.arch.isa_version, h.arch.peak_tops
        ),
    )?;
    row(
        out,
        "trace",
        format!(
            "{} cycles, {} cores, {} MHz",
            thousands(h.trace.cycles),
            h.trace.cores,
            h.trace.clock_mhz
        ),
    )?;
    row(
        out,
        "payload",
        format!(
            "{}, {} ({} bytes)",
            h.payload.encoding,
            bytes(h.payload.byte_length),
            thousands(h.payload.byte_length)
        ),
    )?;
    row(out, "checksum", checksum_text(&f.verified.checksum))?;
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    let mut listed = Vec::new();
    match h.payload.encoding() {
        Some(Encoding::Flatbuf) => match f.flat_events() {
            Ok(ev) => {
                row(out, "events", thousands(ev.len() as u64))?;
                for e in ev.iter() {
                    *by_type.entry(type_name(e.event_type_id)).or_default() += 1;
                    if listed.len() < list {
                        listed.push(format!(
                            "core {:>4} start {:>14} dur {:>10} {}",
                            e.core_id,
                            e.start_cycle,
                            e.duration,
                            type_name(e.event_type_id)
                        ));
                    }
                }
                let names = ev.names();
                if !names.is_empty() {
                    row(out, "name table", format!("{} names (PCC2 trailer)", names.len()))?;
                }
            }
            Err(e) => row(out, "events", st.bad(&e.to_string()))?,
        },
        Some(Encoding::Bincode) => match f.npu_trace() {
            Ok((t, layout)) => {
                row(
                    out,
                    "events",
                    format!(
                        "{} (bincode NpuTrace, {layout:?} layout, total_cycles {})",
                        thousands(t.events.len() as u64),
                        t.total_cycles
                    ),
                )?;
                for e in &t.events {
                    *by_type.entry(e.event_type.clone()).or_default() += 1;
                    if listed.len() < list {
                        let api = e.api_name.as_deref().map(|a| format!(" {a}")).unwrap_or_default();
                        listed.push(format!(
                            "core {:>4} start {:>14} dur {:>10} {}{api}",
                            e.core_id, e.start_cycle, e.duration, e.event_type
                        ));
                    }
                }
            }
            Err(e) => row(out, "events", st.bad(&e.to_string()))?,
        },
        _ => row(out, "events", "opaque payload".into())?,
    }
    for (t, n) in &by_type {
        writeln!(out, "{:<16}   {t:<16} {}", "", thousands(*n))?;
    }
    for l in &listed {
        writeln!(out, "{:<16}   {l}", "")?;
    }
    for w in &f.verified.warnings {
        writeln!(out, "{}", st.warn(&format!("warning: {w}")))?;
    }
    Ok(())
}

fn type_name(id: u32) -> String {
    pccx::event_type_name(id).map_or_else(|| format!("type {id}"), str::to_string)
}
