//! The CTF 1.8 trace (`export ctf`): a directory with a TSDL `metadata`
//! file generated from the catalog and binary data streams, for babeltrace2,
//! Trace Compass and the other CTF readers firmware engineers already use.
//!
//! Layout (docs/analyzer.md has the full description):
//! * stream class 0, `records`: one stream file per record source
//!   (`source_<n>`, the first [`MAX_SOURCE_STREAMS`] sources; the rest share
//!   `source_other`), one event class per catalog opcode whose payload is the
//!   catalog's fields with their declared widths, and `RECORD_UNDECODED` for
//!   records the catalog cannot decode (unknown opcode, payload too short);
//! * stream class 1, `markers`: LOST, FROZEN, EPOCH and unknown markers as
//!   events; every LOST marker also raises the packet context's cumulative
//!   `events_discarded` (it opens a new packet), so readers count drops;
//! * one clock, `hmb_device`, 1 GHz: the records' `timestamp_ns`.
//!
//! Memory is bounded: one packet (at most [`PACKET_BYTES`] of events) per
//! open stream file, and a bounded number of stream files.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use hmb_trace_file::Item;

use crate::catalog::{field_width, read_field, Catalog, OpcodeEntry};
use crate::walk::Event;

/// Sources given a stream file of their own; the rest share one.
pub const MAX_SOURCE_STREAMS: usize = 64;
/// Event bytes per packet before it is written out.
pub const PACKET_BYTES: usize = 64 << 10;
const CTF_MAGIC: u32 = 0xC1FC_1FC1;
/// Event class id of records the catalog cannot decode (above every opcode).
pub const UNDECODED_ID: u32 = 1 << 16;
const RECORDS_STREAM: u32 = 0;
const MARKERS_STREAM: u32 = 1;
/// Marker event class ids (stream class 1).
const LOST_ID: u32 = 0;
const FROZEN_ID: u32 = 1;
const EPOCH_ID: u32 = 2;
const UNKNOWN_MARKER_ID: u32 = 3;
/// Packet header: magic, uuid, stream_id, stream_instance_id.
const PACKET_HEADER_BYTES: usize = 4 + 16 + 4 + 8;
/// Packet context: timestamp_begin, timestamp_end, content_size,
/// packet_size, packet_seq_num, events_discarded (u64 each), source (u32).
const PACKET_CONTEXT_BYTES: usize = 6 * 8 + 4;
/// Stream instance id of the shared stream and of the marker stream.
const OTHER_INSTANCE: u64 = 1 << 32;
const MARKERS_INSTANCE: u64 = (1 << 32) + 1;

#[derive(Debug, Default, Clone)]
pub struct Summary {
    pub events: u64,
    pub records: u64,
    pub undecoded: u64,
    pub markers: u64,
    pub lost: u64,
    pub packets: u64,
    pub streams: u64,
    /// Timestamps raised to the stream's previous one (CTF streams are
    /// monotonic); the record's own value is lost for those.
    pub clamped: u64,
    pub bytes: u64,
}

/// One stream file and the packet being filled.
struct Stream {
    out: BufWriter<File>,
    stream_id: u32,
    instance: u64,
    /// The packet context's `source` (u32::MAX for shared/marker streams).
    source: u32,
    content: Vec<u8>,
    /// Timestamp of the packet's first event, and of the stream's last.
    begin: Option<u64>,
    last_ts: u64,
    seq_num: u64,
    discarded: u64,
}

impl Stream {
    fn new(path: &Path, stream_id: u32, instance: u64, source: u32) -> std::io::Result<Self> {
        Ok(Self {
            out: BufWriter::with_capacity(PACKET_BYTES + 256, File::create(path)?),
            stream_id,
            instance,
            source,
            content: Vec::with_capacity(PACKET_BYTES + 8192),
            begin: None,
            last_ts: 0,
            seq_num: 0,
            discarded: 0,
        })
    }

    /// The timestamp an event gets: its own, unless the stream is already
    /// past it (then the stream's last; counted by the caller).
    fn place(&mut self, ts: u64) -> (u64, bool) {
        let clamped = ts < self.last_ts;
        let ts = ts.max(self.last_ts);
        self.last_ts = ts;
        self.begin.get_or_insert(ts);
        (ts, clamped)
    }

    /// Write the packet (header, context, events) and start the next.
    fn flush_packet(&mut self, uuid: &[u8; 16], sum: &mut Summary) -> std::io::Result<()> {
        let begin = self.begin.unwrap_or(self.last_ts);
        let bits = ((PACKET_HEADER_BYTES + PACKET_CONTEXT_BYTES + self.content.len()) * 8) as u64;
        let mut h = [0u8; PACKET_HEADER_BYTES + PACKET_CONTEXT_BYTES];
        let mut at = 0;
        let mut put = |b: &[u8]| {
            h[at..at + b.len()].copy_from_slice(b);
            at += b.len();
        };
        put(&CTF_MAGIC.to_le_bytes());
        put(uuid);
        put(&self.stream_id.to_le_bytes());
        put(&self.instance.to_le_bytes());
        put(&begin.to_le_bytes());
        put(&self.last_ts.to_le_bytes());
        put(&bits.to_le_bytes());
        put(&bits.to_le_bytes());
        put(&self.seq_num.to_le_bytes());
        put(&self.discarded.to_le_bytes());
        put(&self.source.to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&self.content)?;
        sum.packets += 1;
        sum.bytes += bits / 8;
        self.content.clear();
        self.begin = None;
        self.seq_num += 1;
        Ok(())
    }
}

pub struct CtfWriter<'c> {
    dir: PathBuf,
    catalog: &'c Catalog,
    uuid: [u8; 16],
    /// Source → index in `streams`.
    by_source: HashMap<u32, usize>,
    other: Option<usize>,
    streams: Vec<Stream>,
    markers: Stream,
    /// Latest record timestamp seen: markers carry none and are placed there.
    last_record_ts: u64,
    sum: Summary,
}

impl<'c> CtfWriter<'c> {
    /// Create the marker stream in `dir` (which must exist).
    pub fn new(dir: &Path, catalog: &'c Catalog) -> std::io::Result<Self> {
        Ok(Self {
            dir: dir.to_path_buf(),
            catalog,
            uuid: new_uuid(),
            by_source: HashMap::new(),
            other: None,
            streams: Vec::new(),
            markers: Stream::new(&dir.join("markers"), MARKERS_STREAM, MARKERS_INSTANCE, u32::MAX)?,
            last_record_ts: 0,
            sum: Summary {
                streams: 1,
                ..Summary::default()
            },
        })
    }

    fn stream_of(&mut self, source: u32) -> std::io::Result<usize> {
        if let Some(&i) = self.by_source.get(&source) {
            return Ok(i);
        }
        if self.by_source.len() < MAX_SOURCE_STREAMS {
            let s = Stream::new(
                &self.dir.join(format!("source_{source}")),
                RECORDS_STREAM,
                source as u64,
                source,
            )?;
            self.streams.push(s);
            self.sum.streams += 1;
            self.by_source.insert(source, self.streams.len() - 1);
            return Ok(self.streams.len() - 1);
        }
        if let Some(i) = self.other {
            return Ok(i);
        }
        let s = Stream::new(&self.dir.join("source_other"), RECORDS_STREAM, OTHER_INSTANCE, u32::MAX)?;
        self.streams.push(s);
        self.sum.streams += 1;
        self.other = Some(self.streams.len() - 1);
        Ok(self.streams.len() - 1)
    }

    pub fn record(&mut self, epoch: u64, item: &Item<'_>) -> std::io::Result<()> {
        let i = self.stream_of(item.source())?;
        let ts = item.timestamp_ns();
        self.last_record_ts = self.last_record_ts.max(ts);
        let s = &mut self.streams[i];
        let (ts, clamped) = s.place(ts);
        self.sum.clamped += clamped as u64;
        let op = self
            .catalog
            .get(item.opcode())
            .filter(|op| op.fields.iter().all(|f| read_field(item.payload, f).is_some()));
        let id = op.map_or(UNDECODED_ID, |op| op.opcode as u32);
        let c = &mut s.content;
        c.extend_from_slice(&id.to_le_bytes());
        c.extend_from_slice(&ts.to_le_bytes());
        // Event context: seq, epoch, source, length.
        c.extend_from_slice(&item.seq().to_le_bytes());
        c.extend_from_slice(&epoch.to_le_bytes());
        c.extend_from_slice(&item.source().to_le_bytes());
        c.extend_from_slice(&(item.payload.len() as u16).to_le_bytes());
        match op {
            Some(op) => {
                for f in &op.fields {
                    let w = field_width(&f.ty).unwrap_or(0);
                    let at = f.offset as usize;
                    c.extend_from_slice(&item.payload[at..at + w]);
                }
                self.sum.records += 1;
            }
            None => {
                c.extend_from_slice(&item.opcode().to_le_bytes());
                c.extend_from_slice(&(item.payload.len() as u16).to_le_bytes());
                c.extend_from_slice(item.payload);
                self.sum.undecoded += 1;
            }
        }
        self.sum.events += 1;
        if s.content.len() >= PACKET_BYTES {
            s.flush_packet(&self.uuid, &mut self.sum)?;
        }
        Ok(())
    }

    /// A walk event: records go to their source's stream, markers to the
    /// marker stream; derived gaps are analysis (`gaps`), not exported.
    pub fn feed(&mut self, ev: &Event<'_, '_>, keep: impl Fn(u64, &Item<'_>) -> bool) -> std::io::Result<()> {
        match *ev {
            Event::Record { epoch, item } => {
                if keep(epoch, item) {
                    self.record(epoch, item)?;
                }
                Ok(())
            }
            Event::Lost {
                epoch,
                first_seq,
                count,
                ..
            } => {
                // The drop count is carried between packets: close this one
                // and start the next with the new cumulative count.
                self.markers.flush_packet(&self.uuid, &mut self.sum)?;
                self.markers.discarded = self.markers.discarded.saturating_add(count);
                self.sum.lost = self.sum.lost.saturating_add(count);
                self.marker(LOST_ID, &[epoch, first_seq, count])
            }
            Event::Frozen {
                epoch,
                last_seq,
                next_seq,
                ..
            } => self.marker(
                FROZEN_ID,
                &[epoch, last_seq.is_some() as u64, last_seq.unwrap_or(0), next_seq],
            ),
            Event::EpochStart { epoch, ring_size, .. } => self.marker(EPOCH_ID, &[epoch, ring_size]),
            Event::UnknownMarker { opcode, .. } => self.marker(UNKNOWN_MARKER_ID, &[opcode as u64]),
            Event::Gap { .. } | Event::SeqBackwards { .. } => Ok(()),
        }
    }

    /// A marker event; field widths as in `metadata` (FROZEN's has_last_seq
    /// is a u8, an unknown marker's opcode a u16, the rest u64).
    fn marker(&mut self, id: u32, values: &[u64]) -> std::io::Result<()> {
        let m = &mut self.markers;
        let (ts, _) = m.place(self.last_record_ts);
        let c = &mut m.content;
        c.extend_from_slice(&id.to_le_bytes());
        c.extend_from_slice(&ts.to_le_bytes());
        for (i, v) in values.iter().enumerate() {
            match (id, i) {
                (FROZEN_ID, 1) => c.push(*v as u8),
                (UNKNOWN_MARKER_ID, 0) => c.extend_from_slice(&(*v as u16).to_le_bytes()),
                _ => c.extend_from_slice(&v.to_le_bytes()),
            }
        }
        self.sum.markers += 1;
        self.sum.events += 1;
        if m.content.len() >= PACKET_BYTES {
            m.flush_packet(&self.uuid, &mut self.sum)?;
        }
        Ok(())
    }

    /// Write the last packets and the metadata; every stream file ends
    /// with at least one packet.
    pub fn finish(mut self, env: &[(&str, String)]) -> std::io::Result<Summary> {
        for s in self.streams.iter_mut().chain(std::iter::once(&mut self.markers)) {
            if !s.content.is_empty() || s.seq_num == 0 {
                s.flush_packet(&self.uuid, &mut self.sum)?;
            }
            s.out.flush()?;
        }
        let text = metadata(self.catalog, &self.uuid, env);
        self.sum.bytes += text.len() as u64;
        std::fs::write(self.dir.join("metadata"), text)?;
        Ok(self.sum)
    }
}

/// A random (version 4) UUID: identifies this export; the stream files
/// carry it in every packet header.
fn new_uuid() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut u = [0u8; 16];
    for (i, half) in u.chunks_mut(8).enumerate() {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(i);
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        half.copy_from_slice(&h.finish().to_le_bytes());
    }
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

fn uuid_text(u: &[u8; 16]) -> String {
    let mut s = String::with_capacity(36);
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// A TSDL string literal.
fn quoted(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for ch in s.chars() {
        match ch {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            '\n' => q.push_str("\\n"),
            c if c.is_control() => q.push(' '),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// TSDL keywords and names of our own types a field may not be called.
const RESERVED: &[&str] = &[
    "align",
    "callsite",
    "const",
    "char",
    "clock",
    "double",
    "enum",
    "env",
    "event",
    "floating_point",
    "float",
    "integer",
    "int",
    "long",
    "short",
    "signed",
    "stream",
    "string",
    "struct",
    "trace",
    "typealias",
    "typedef",
    "unsigned",
    "variant",
    "void",
    "_Bool",
    "_Complex",
    "_Imaginary",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "uint64_clock_t",
];

/// A catalog field name as a TSDL identifier. Readers strip one leading
/// underscore (CTF 1.8 §4.1.2), so a keyword is written `_name` and read
/// back as `name`; other characters become `_`; a name repeated in one
/// event gets a `_<n>` suffix.
fn identifier(name: &str, taken: &mut Vec<String>) -> String {
    let mut id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' })
        .collect();
    if id.is_empty() || id.starts_with(|c: char| c.is_ascii_digit() || c == '_') || RESERVED.contains(&id.as_str()) {
        id.insert(0, '_');
    }
    let base = id.clone();
    let mut n = 1;
    while taken.contains(&id) {
        n += 1;
        id = format!("{base}_{n}");
    }
    taken.push(id.clone());
    id
}

fn uint_type(ty: &str) -> &'static str {
    match ty {
        "u8" => "uint8_t",
        "u16" => "uint16_t",
        "u32" => "uint32_t",
        _ => "uint64_t",
    }
}

fn event_fields(op: &OpcodeEntry) -> String {
    let mut taken = Vec::new();
    let mut s = String::new();
    for f in &op.fields {
        let _ = write!(s, " {} {};", uint_type(&f.ty), identifier(&f.name, &mut taken));
    }
    s
}

/// The TSDL metadata of the export.
pub fn metadata(catalog: &Catalog, uuid: &[u8; 16], env: &[(&str, String)]) -> String {
    let mut m = String::new();
    let uuid = uuid_text(uuid);
    let _ = write!(
        m,
        r#"/* CTF 1.8 */
/* hmb-trace-analyze export ctf: records of a trace.bin, one event class per
   catalog opcode (docs/analyzer.md). */

typealias integer {{ size = 8; align = 8; signed = false; byte_order = le; }} := uint8_t;
typealias integer {{ size = 16; align = 8; signed = false; byte_order = le; }} := uint16_t;
typealias integer {{ size = 32; align = 8; signed = false; byte_order = le; }} := uint32_t;
typealias integer {{ size = 64; align = 8; signed = false; byte_order = le; }} := uint64_t;
typealias integer {{ size = 64; align = 8; signed = false; byte_order = le; map = clock.hmb_device.value; }} := uint64_clock_t;

trace {{
	major = 1;
	minor = 8;
	uuid = "{uuid}";
	byte_order = le;
	packet.header := struct {{
		uint32_t magic;
		uint8_t uuid[16];
		uint32_t stream_id;
		uint64_t stream_instance_id;
	}};
}};

env {{
"#
    );
    for (k, v) in env {
        let _ = writeln!(m, "\t{k} = {};", quoted(v));
    }
    let _ = write!(
        m,
        r#"}};

clock {{
	name = hmb_device;
	uuid = "{uuid}";
	description = "device clock of the trace.bin records (timestamp_ns); its origin is the device's, the trace.bin header carries no wall-clock offset";
	freq = 1000000000;
	precision = 1;
	offset_s = 0;
	offset = 0;
	absolute = false;
}};

stream {{
	id = {RECORDS_STREAM};
	packet.context := struct {{
		uint64_clock_t timestamp_begin;
		uint64_clock_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		uint64_t events_discarded;
		uint32_t source;
	}};
	event.header := struct {{
		uint32_t id;
		uint64_clock_t timestamp;
	}};
	event.context := struct {{
		uint64_t seq;
		uint64_t epoch;
		uint32_t source;
		uint16_t length;
	}};
}};

stream {{
	id = {MARKERS_STREAM};
	packet.context := struct {{
		uint64_clock_t timestamp_begin;
		uint64_clock_t timestamp_end;
		uint64_t content_size;
		uint64_t packet_size;
		uint64_t packet_seq_num;
		uint64_t events_discarded;
		uint32_t source;
	}};
	event.header := struct {{
		uint32_t id;
		uint64_clock_t timestamp;
	}};
}};

event {{ name = "LOST"; id = {LOST_ID}; stream_id = {MARKERS_STREAM}; fields := struct {{ uint64_t epoch; uint64_t first_seq; uint64_t count; }}; }};
event {{ name = "FROZEN"; id = {FROZEN_ID}; stream_id = {MARKERS_STREAM}; fields := struct {{ uint64_t epoch; uint8_t has_last_seq; uint64_t last_seq; uint64_t next_seq; }}; }};
event {{ name = "EPOCH"; id = {EPOCH_ID}; stream_id = {MARKERS_STREAM}; fields := struct {{ uint64_t epoch; uint64_t ring_size; }}; }};
event {{ name = "UNKNOWN_MARKER"; id = {UNKNOWN_MARKER_ID}; stream_id = {MARKERS_STREAM}; fields := struct {{ uint16_t opcode; }}; }};
event {{ name = "RECORD_UNDECODED"; id = {UNDECODED_ID}; stream_id = {RECORDS_STREAM}; fields := struct {{ uint16_t opcode; uint16_t payload_len; uint8_t payload[payload_len]; }}; }};
"#
    );
    for op in &catalog.file.opcodes {
        let _ = writeln!(
            m,
            "event {{ name = {}; id = {}; stream_id = {RECORDS_STREAM}; fields := struct {{{} }}; }};",
            quoted(&op.name),
            op.opcode,
            event_fields(op)
        );
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_valid_tsdl() {
        let mut t = Vec::new();
        assert_eq!(identifier("qid", &mut t), "qid");
        assert_eq!(identifier("align", &mut t), "_align");
        assert_eq!(identifier("9lives", &mut t), "_9lives");
        assert_eq!(identifier("a-b c", &mut t), "a_b_c");
        assert_eq!(identifier("qid", &mut t), "qid_2");
        assert_eq!(quoted("a\"b\\"), "\"a\\\"b\\\\\"");
        let u = uuid_text(&new_uuid());
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
