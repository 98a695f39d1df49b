//! The part of Perfetto's trace schema that `export perfetto` writes, encoded
//! here instead of compiling Perfetto's whole schema (the `perfetto_protos`
//! crate: 226 generated files, most of the analyzer's release build time,
//! docs/performance.md). Field numbers are those of Perfetto's .proto files
//! (protos/perfetto/trace/trace_packet.proto, track_event/track_event.proto,
//! track_event/track_descriptor.proto, track_event/counter_descriptor.proto,
//! track_event/debug_annotation.proto); fields are written in the order
//! rust-protobuf's generated code wrote them (plain fields in declaration
//! order, then each oneof), so the files are byte for byte what they were.
//! `tests/perfetto.rs` decodes them with Perfetto's own Python bindings.

/// `TrackEvent.Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
    Counter = 4,
}

/// A `DebugAnnotation` with a name and an unsigned or boolean value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DebugAnnotation {
    pub(crate) name: String,
    pub(crate) value: ArgValue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ArgValue {
    Bool(bool),
    Uint(u64),
}

/// A `TrackDescriptor` (its `counter` a `CounterDescriptor` with a unit).
pub(crate) struct TrackDescriptor<'a> {
    pub(crate) uuid: u64,
    pub(crate) name: &'a str,
    pub(crate) parent_uuid: Option<u64>,
    pub(crate) counter_unit: Option<&'a str>,
}

/// A `TrackEvent`.
pub(crate) struct TrackEvent<'a> {
    pub(crate) ty: EventType,
    pub(crate) track_uuid: u64,
    pub(crate) name: Option<&'a str>,
    pub(crate) args: &'a [DebugAnnotation],
    pub(crate) counter_value: Option<i64>,
}

/// A `TracePacket`'s `data`.
pub(crate) enum Data<'a> {
    Track(TrackDescriptor<'a>),
    Event(TrackEvent<'a>),
}

/// A `TracePacket`.
pub(crate) struct TracePacket<'a> {
    pub(crate) timestamp: Option<u64>,
    pub(crate) sequence_flags: Option<u32>,
    pub(crate) data: Data<'a>,
    pub(crate) trusted_packet_sequence_id: u32,
}

/// `Trace.packet`.
const TRACE_PACKET: u32 = 1;
const VARINT: u32 = 0;
const LEN: u32 = 2;

/// `TracePacket` field numbers.
const PACKET_TIMESTAMP: u32 = 8;
const PACKET_SEQUENCE_FLAGS: u32 = 13;
const PACKET_TRACK_EVENT: u32 = 11;
const PACKET_TRACK_DESCRIPTOR: u32 = 60;
const PACKET_TRUSTED_SEQUENCE_ID: u32 = 10;
/// `TrackDescriptor`.
const TRACK_UUID: u32 = 1;
const TRACK_PARENT_UUID: u32 = 5;
const TRACK_COUNTER: u32 = 8;
const TRACK_NAME: u32 = 2;
/// `CounterDescriptor.unit_name`.
const COUNTER_UNIT_NAME: u32 = 6;
/// `TrackEvent`.
const EVENT_TYPE: u32 = 9;
const EVENT_TRACK_UUID: u32 = 11;
const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
const EVENT_NAME: u32 = 23;
const EVENT_COUNTER_VALUE: u32 = 30;
/// `DebugAnnotation`.
const ARG_NAME: u32 = 10;
const ARG_BOOL: u32 = 2;
const ARG_UINT: u32 = 3;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, ((field << 3) | wire) as u64);
}

fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    tag(out, field, VARINT);
    varint(out, v);
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A message field: `body` encoded on its own (its length comes first),
/// then framed into `out`.
fn message(out: &mut Vec<u8>, field: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    body(&mut inner);
    bytes(out, field, &inner);
}

impl TracePacket<'_> {
    /// The packet as one `Trace.packet` field (field 1), appended to `out`.
    pub(crate) fn encode_as_trace_field(&self, out: &mut Vec<u8>) {
        message(out, TRACE_PACKET, |p| self.encode(p));
    }

    fn encode(&self, p: &mut Vec<u8>) {
        if let Some(ts) = self.timestamp {
            uint(p, PACKET_TIMESTAMP, ts);
        }
        if let Some(f) = self.sequence_flags {
            uint(p, PACKET_SEQUENCE_FLAGS, f as u64);
        }
        match &self.data {
            Data::Event(e) => message(p, PACKET_TRACK_EVENT, |m| e.encode(m)),
            Data::Track(t) => message(p, PACKET_TRACK_DESCRIPTOR, |m| t.encode(m)),
        }
        uint(p, PACKET_TRUSTED_SEQUENCE_ID, self.trusted_packet_sequence_id as u64);
    }
}

impl TrackDescriptor<'_> {
    fn encode(&self, m: &mut Vec<u8>) {
        uint(m, TRACK_UUID, self.uuid);
        if let Some(p) = self.parent_uuid {
            uint(m, TRACK_PARENT_UUID, p);
        }
        if let Some(unit) = self.counter_unit {
            message(m, TRACK_COUNTER, |c| bytes(c, COUNTER_UNIT_NAME, unit.as_bytes()));
        }
        bytes(m, TRACK_NAME, self.name.as_bytes());
    }
}

impl TrackEvent<'_> {
    fn encode(&self, m: &mut Vec<u8>) {
        // An enum is an int32: the values here are positive.
        uint(m, EVENT_TYPE, self.ty as u64);
        uint(m, EVENT_TRACK_UUID, self.track_uuid);
        for a in self.args {
            message(m, EVENT_DEBUG_ANNOTATIONS, |d| a.encode(d));
        }
        if let Some(n) = self.name {
            bytes(m, EVENT_NAME, n.as_bytes());
        }
        if let Some(v) = self.counter_value {
            // int64: a negative value is its 64-bit two's complement.
            uint(m, EVENT_COUNTER_VALUE, v as u64);
        }
    }
}

impl DebugAnnotation {
    fn encode(&self, d: &mut Vec<u8>) {
        bytes(d, ARG_NAME, self.name.as_bytes());
        match self.value {
            ArgValue::Bool(b) => uint(d, ARG_BOOL, b as u64),
            ArgValue::Uint(v) => uint(d, ARG_UINT, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes worked out by hand from the protobuf wire format.
    #[test]
    fn a_slice_begin_with_an_argument() {
        let args = [DebugAnnotation {
            name: "qid".into(),
            value: ArgValue::Uint(300),
        }];
        let p = TracePacket {
            timestamp: Some(5),
            sequence_flags: None,
            data: Data::Event(TrackEvent {
                ty: EventType::SliceBegin,
                track_uuid: 2,
                name: Some("R"),
                args: &args,
                counter_value: None,
            }),
            trusted_packet_sequence_id: 1,
        };
        let mut out = Vec::new();
        p.encode_as_trace_field(&mut out);
        let arg = [0x52, 3, b'q', b'i', b'd', 0x18, 0xac, 0x02];
        let mut event = vec![0x48, 1, 0x58, 2, 0x22, arg.len() as u8];
        event.extend_from_slice(&arg);
        event.extend_from_slice(&[0xba, 0x01, 1, b'R']);
        let mut packet = vec![0x40, 5, 0x5a, event.len() as u8];
        packet.extend_from_slice(&event);
        packet.extend_from_slice(&[0x50, 1]);
        let mut want = vec![0x0a, packet.len() as u8];
        want.extend_from_slice(&packet);
        assert_eq!(out, want);
    }

    #[test]
    fn a_counter_track_and_a_negative_counter() {
        let mut out = Vec::new();
        TracePacket {
            timestamp: None,
            sequence_flags: Some(1),
            data: Data::Track(TrackDescriptor {
                uuid: 7,
                name: "n",
                parent_uuid: Some(1),
                counter_unit: Some("u"),
            }),
            trusted_packet_sequence_id: 1,
        }
        .encode(&mut out);
        // flags, track descriptor (60: tag 0xe2 0x03), sequence id.
        let track = [0x08, 7, 0x28, 1, 0x42, 3, 0x32, 1, b'u', 0x12, 1, b'n'];
        let mut want = vec![0x68, 1, 0xe2, 0x03, track.len() as u8];
        want.extend_from_slice(&track);
        want.extend_from_slice(&[0x50, 1]);
        assert_eq!(out, want);

        let mut m = Vec::new();
        TrackEvent {
            ty: EventType::Counter,
            track_uuid: 3,
            name: None,
            args: &[],
            counter_value: Some(-1),
        }
        .encode(&mut m);
        let mut want = vec![0x48, 4, 0x58, 3, 0xf0, 0x01];
        want.extend_from_slice(&[0xff; 9]);
        want.push(0x01);
        assert_eq!(m, want);
    }
}
