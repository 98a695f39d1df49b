//! `convert`: CSV or JSON lines, one row per record or marker, streamed.
//! Derived sequence gaps are analysis, not file content: see `gaps`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::ControlFlow;

use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use crate::cli::{ConvertArgs, ConvertFormat};
use crate::commands::Ctx;
use crate::exit::{AppError, IO};
use crate::filter::Filter;
use crate::format::{fields, hex};
use crate::textout::{walk_text, ChunkOut, OpCache};
use crate::walk::Event;

const CSV_HEADER: &str = "kind,offset,epoch,seq,timestamp_ns,opcode,name,source,length,fields";

/// One output row; serialises as one JSON line (record fields, or the
/// marker's payload words at top level).
struct Row<'c> {
    kind: &'static str,
    offset: u64,
    epoch: u64,
    record: Option<RecordPart<'c>>,
    fields: Vec<(&'c str, u64)>,
}

struct RecordPart<'c> {
    seq: u64,
    timestamp_ns: u64,
    opcode: u16,
    name: &'c str,
    fallback_name: String,
    source: u32,
    length: usize,
    payload: Option<String>,
}

impl RecordPart<'_> {
    fn name(&self) -> &str {
        if self.name.is_empty() {
            &self.fallback_name
        } else {
            self.name
        }
    }
}

/// Fields as a JSON object, in catalog order.
struct FieldMap<'a, 'c>(&'a [(&'c str, u64)]);

impl Serialize for FieldMap<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for Row<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("kind", self.kind)?;
        m.serialize_entry("offset", &self.offset)?;
        m.serialize_entry("epoch", &self.epoch)?;
        match &self.record {
            Some(r) => {
                m.serialize_entry("seq", &r.seq)?;
                m.serialize_entry("timestamp_ns", &r.timestamp_ns)?;
                m.serialize_entry("opcode", &r.opcode)?;
                m.serialize_entry("name", r.name())?;
                m.serialize_entry("source", &r.source)?;
                m.serialize_entry("length", &r.length)?;
                m.serialize_entry("fields", &FieldMap(&self.fields))?;
                if let Some(p) = &r.payload {
                    m.serialize_entry("payload_hex", p)?;
                }
            }
            None => {
                for (k, v) in &self.fields {
                    m.serialize_entry(k, v)?;
                }
            }
        }
        m.end()
    }
}

pub fn run(ctx: &Ctx, args: &ConvertArgs, stdout: &mut dyn Write) -> Result<(), AppError> {
    let filter = Filter::new(&args.filter, &ctx.catalog)?;
    // No filter (the common case): no checks per record.
    let all = filter.is_all();
    let mut file_out;
    let out: &mut dyn Write = match &args.output {
        Some(p) => {
            crate::commands::ensure_distinct(&args.trace, p)?;
            file_out = BufWriter::new(File::create(p).map_err(|e| AppError::new(IO, format!("{}: {e}", p.display())))?);
            &mut file_out
        }
        None => stdout,
    };
    let mut chunk = ChunkOut::new(out);
    if args.format == ConvertFormat::Csv {
        chunk.general(|buf| writeln!(buf, "{CSV_HEADER}{}", if args.payload { ",payload_hex" } else { "" }))?;
    }
    let mut ops = OpCache::new(&ctx.catalog);
    let mut io_err = None;
    // Inlined into the walk's loop (as in `decode`).
    let mut walked = walk_text(
        ctx,
        &args.trace,
        #[inline(always)]
        |ev| {
            // Records: the fast formatters (crate::textout); markers and
            // rows needing CSV quoting: the general Row path below.
            if let Event::Record { epoch, item } = *ev {
                if !all && !filter.keeps(epoch, item) {
                    return ControlFlow::Continue(());
                }
                let op = ops.get(item.opcode());
                let done = match args.format {
                    ConvertFormat::Csv => chunk.csv_record(op, epoch, item, args.payload),
                    ConvertFormat::Jsonl => chunk.jsonl_record(op, epoch, item, args.payload).map(|()| true),
                };
                match done {
                    Ok(true) => return ControlFlow::Continue(()),
                    Ok(false) => {}
                    Err(e) => {
                        io_err = Some(e);
                        return ControlFlow::Break(());
                    }
                }
            }
            let Some(row) = to_row(ctx, &filter, args.payload, ev) else {
                return ControlFlow::Continue(());
            };
            let r = chunk.general(|out| match args.format {
                ConvertFormat::Csv => write_csv(out, &row, args.payload),
                ConvertFormat::Jsonl => serde_json::to_writer(&mut *out, &row)
                    .map_err(std::io::Error::other)
                    .and_then(|()| out.write_all(b"\n")),
            });
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
    chunk.finish()?;
    walked.status()
}

fn marker<'c>(kind: &'static str, offset: u64, epoch: u64, f: &[(&'c str, u64)]) -> Row<'c> {
    Row {
        kind,
        offset,
        epoch,
        record: None,
        fields: f.to_vec(),
    }
}

fn to_row<'c>(ctx: &'c Ctx, filter: &Filter, payload: bool, ev: &Event<'_, '_>) -> Option<Row<'c>> {
    Some(match *ev {
        Event::Record { epoch, item } => {
            if !filter.keeps(epoch, item) {
                return None;
            }
            let op = ctx.catalog.get(item.opcode());
            Row {
                kind: "record",
                offset: item.offset,
                epoch,
                record: Some(RecordPart {
                    seq: item.seq(),
                    timestamp_ns: item.timestamp_ns(),
                    opcode: item.opcode(),
                    name: op.map_or("", |o| o.name.as_str()),
                    fallback_name: if op.is_some() {
                        String::new()
                    } else {
                        ctx.catalog.name(item.opcode())
                    },
                    source: item.source(),
                    length: item.payload.len(),
                    payload: payload.then(|| hex(item.payload)),
                }),
                fields: fields(&ctx.catalog, item),
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

/// Quote a CSV cell if it needs it (names come from a user catalog).
fn cell(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

fn write_csv(out: &mut dyn Write, r: &Row<'_>, payload: bool) -> std::io::Result<()> {
    let mut fields = String::new();
    for (i, (k, v)) in r.fields.iter().enumerate() {
        if i > 0 {
            fields.push(';');
        }
        use std::fmt::Write as _;
        let _ = write!(fields, "{k}={v}");
    }
    write!(out, "{},{},{},", r.kind, r.offset, r.epoch)?;
    match &r.record {
        Some(p) => write!(
            out,
            "{},{},{:#06x},{},{},{},{}",
            p.seq,
            p.timestamp_ns,
            p.opcode,
            cell(p.name()),
            p.source,
            p.length,
            cell(&fields)
        )?,
        None => write!(out, ",,,,,,{}", cell(&fields))?,
    }
    if payload {
        write!(
            out,
            ",{}",
            r.record.as_ref().and_then(|p| p.payload.as_deref()).unwrap_or("")
        )?;
    }
    writeln!(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::cli::FilterArgs;
    use crate::format::Style;
    use hmb_trace_abi::hmb_record_hdr;
    use hmb_trace_file::Item;
    use zerocopy::FromBytes;

    /// The fast formatters (`crate::textout`) write every record byte for
    /// byte as the general `Row` path (`write!` and serde_json, which wrote
    /// every row before them) does: every opcode of the builtin catalog and
    /// an unknown one, payloads from empty (no field readable) to full,
    /// numbers of every magnitude in every header field and payload byte,
    /// with and without the payload's hex.
    #[test]
    fn fast_rows_equal_the_general_rows() {
        let ctx = Ctx {
            catalog: Catalog::builtin(),
            style: Style { color: false },
            progress: false,
        };
        let filter = Filter::new(&FilterArgs::default(), &ctx.catalog).unwrap();
        let mut opcodes: Vec<u16> = ctx.catalog.file.opcodes.iter().map(|o| o.opcode).collect();
        opcodes.push(0x7eef);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every magnitude, small ones often.
            x >> (x % 64)
        };
        let mut ops = OpCache::new(&ctx.catalog);
        let (mut fast, mut general) = (Vec::new(), Vec::new());
        for round in 0..400u64 {
            for &opcode in &opcodes {
                let len = (next() % 73) as usize;
                let payload: Vec<u8> = (0..len).map(|_| next() as u8).collect();
                let mut hdr = [0u8; 32];
                hdr[..4].copy_from_slice(&(len as u32).to_le_bytes());
                hdr[4..6].copy_from_slice(&opcode.to_le_bytes());
                hdr[8..16].copy_from_slice(&next().to_le_bytes());
                hdr[16..24].copy_from_slice(&next().to_le_bytes());
                hdr[24..28].copy_from_slice(&(next() as u32).to_le_bytes());
                let item = Item {
                    offset: next(),
                    hdr: hmb_record_hdr::read_from_bytes(&hdr).unwrap(),
                    payload: &payload,
                };
                let epoch = next();
                let ev = Event::Record { epoch, item: &item };
                for payload_hex in [false, true] {
                    fast.clear();
                    general.clear();
                    let mut chunk = ChunkOut::new(&mut fast);
                    let op = ops.get(opcode);
                    assert!(chunk.csv_record(op, epoch, &item, payload_hex).unwrap());
                    chunk.jsonl_record(op, epoch, &item, payload_hex).unwrap();
                    chunk.finish().unwrap();
                    let row = to_row(&ctx, &filter, payload_hex, &ev).unwrap();
                    write_csv(&mut general, &row, payload_hex).unwrap();
                    serde_json::to_writer(&mut general, &row).unwrap();
                    general.push(b'\n');
                    assert_eq!(
                        String::from_utf8_lossy(&fast),
                        String::from_utf8_lossy(&general),
                        "opcode {opcode:#06x}, round {round}"
                    );
                }
            }
        }
    }
}
