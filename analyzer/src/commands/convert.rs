//! `convert`: CSV or JSON lines, one row per record or marker, streamed.
//! Derived sequence gaps are analysis, not file content: see `gaps`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::ControlFlow;

use serde_json::{json, Map, Value};

use crate::cli::{ConvertArgs, ConvertFormat};
use crate::commands::{walk_trace, Ctx};
use crate::exit::{AppError, IO};
use crate::filter::Filter;
use crate::format::{fields, hex};
use crate::walk::Event;

const CSV_HEADER: &str = "kind,offset,epoch,seq,timestamp_ns,opcode,name,source,length,fields";

/// One output row before formatting.
struct Row {
    kind: &'static str,
    offset: u64,
    epoch: u64,
    seq: Option<u64>,
    timestamp_ns: Option<u64>,
    opcode: Option<u16>,
    name: String,
    source: Option<u32>,
    length: Option<usize>,
    fields: Vec<(String, u64)>,
    payload: Option<String>,
}

pub fn run(ctx: &Ctx, args: &ConvertArgs, stdout: &mut dyn Write) -> Result<(), AppError> {
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    let mut file_out;
    let out: &mut dyn Write = match &args.output {
        Some(p) => {
            file_out = BufWriter::new(File::create(p).map_err(|e| AppError::new(IO, format!("{}: {e}", p.display())))?);
            &mut file_out
        }
        None => stdout,
    };
    if args.format == ConvertFormat::Csv {
        writeln!(out, "{CSV_HEADER}{}", if args.payload { ",payload_hex" } else { "" })?;
    }
    let mut io_err = None;
    let (mut walked, ()) = walk_trace(
        ctx,
        &args.trace,
        |_| (),
        |_, ev| {
            let Some(row) = to_row(ctx, &filter, args.payload, ev) else {
                return ControlFlow::Continue(());
            };
            let r = match args.format {
                ConvertFormat::Csv => write_csv(out, &row, args.payload),
                ConvertFormat::Jsonl => writeln!(out, "{}", to_json(&row)),
            };
            match r {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    io_err = Some(e);
                    ControlFlow::Break(())
                }
            }
        },
    )?;
    if let Some(e) = io_err {
        return Err(e.into());
    }
    out.flush()?;
    walked.status()
}

fn marker(kind: &'static str, offset: u64, epoch: u64, f: &[(&str, u64)]) -> Row {
    Row {
        kind,
        offset,
        epoch,
        seq: None,
        timestamp_ns: None,
        opcode: None,
        name: String::new(),
        source: None,
        length: None,
        fields: f.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        payload: None,
    }
}

fn to_row(ctx: &Ctx, filter: &Filter, payload: bool, ev: &Event<'_, '_>) -> Option<Row> {
    Some(match *ev {
        Event::Record { epoch, item } => {
            if !filter.keeps(epoch, item) {
                return None;
            }
            Row {
                kind: "record",
                offset: item.offset,
                epoch,
                seq: Some(item.seq()),
                timestamp_ns: Some(item.timestamp_ns()),
                opcode: Some(item.opcode()),
                name: ctx.catalog.name(item.opcode()),
                source: Some(item.source()),
                length: Some(item.payload.len()),
                fields: fields(&ctx.catalog, item),
                payload: payload.then(|| hex(item.payload)),
            }
        }
        Event::Lost {
            offset,
            epoch,
            first_seq,
            count,
        } => marker("lost", offset, epoch, &[("first_seq", first_seq), ("count", count)]),
        Event::Frozen {
            offset,
            epoch,
            last_seq,
            next_seq,
        } => {
            let mut f = vec![("next_seq", next_seq)];
            if let Some(l) = last_seq {
                f.insert(0, ("last_seq", l));
            }
            marker("frozen", offset, epoch, &f)
        }
        Event::EpochStart {
            offset,
            epoch,
            ring_size,
        } => marker("epoch", offset, epoch, &[("ring_size", ring_size)]),
        Event::UnknownMarker { offset, opcode } => marker("unknown_marker", offset, 0, &[("opcode", opcode as u64)]),
        Event::Gap { .. } | Event::SeqBackwards { .. } => return None,
    })
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Quote a CSV cell if it needs it (names come from a user catalog).
fn cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_csv(out: &mut dyn Write, r: &Row, payload: bool) -> std::io::Result<()> {
    let fields: Vec<String> = r.fields.iter().map(|(k, v)| format!("{k}={v}")).collect();
    write!(
        out,
        "{},{},{},{},{},{},{},{},{},{}",
        r.kind,
        r.offset,
        r.epoch,
        opt(r.seq),
        opt(r.timestamp_ns),
        r.opcode.map(|o| format!("{o:#06x}")).unwrap_or_default(),
        cell(&r.name),
        opt(r.source),
        opt(r.length),
        cell(&fields.join(";"))
    )?;
    if payload {
        write!(out, ",{}", r.payload.as_deref().unwrap_or(""))?;
    }
    writeln!(out)
}

fn to_json(r: &Row) -> Value {
    let mut m = Map::new();
    m.insert("kind".into(), json!(r.kind));
    m.insert("offset".into(), json!(r.offset));
    m.insert("epoch".into(), json!(r.epoch));
    if r.kind == "record" {
        m.insert("seq".into(), json!(r.seq));
        m.insert("timestamp_ns".into(), json!(r.timestamp_ns));
        m.insert("opcode".into(), json!(r.opcode));
        m.insert("name".into(), json!(r.name));
        m.insert("source".into(), json!(r.source));
        m.insert("length".into(), json!(r.length));
        let f: Map<String, Value> = r.fields.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
        m.insert("fields".into(), Value::Object(f));
        if let Some(p) = &r.payload {
            m.insert("payload_hex".into(), json!(p));
        }
    } else {
        for (k, v) in &r.fields {
            m.insert(k.clone(), json!(v));
        }
    }
    Value::Object(m)
}
