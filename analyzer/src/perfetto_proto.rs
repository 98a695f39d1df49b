//! The part of Perfetto's trace schema that `export perfetto` writes, as
//! `prost` messages (derived here, no build script, no protoc) instead of
//! compiling Perfetto's whole schema (the `perfetto_protos` crate: 226
//! generated files, most of the analyzer's release build time,
//! docs/performance.md). Each message lists only the fields the export
//! sets; names, numbers and types are copied from Perfetto's .proto files
//! (v51, google/perfetto `protos/perfetto/trace/...`, named per message).
//! A one-field `oneof` upstream (`name_field`, `counter_value_field`,
//! `static_or_dynamic_name`, `optional_trusted_packet_sequence_id`) has the
//! same wire form as an `optional` field and is declared as one.
//!
//! Every field is `optional` (Perfetto's schema is proto2), so a zero
//! counter value or uuid is still written. prost writes fields in
//! field-number order (a `oneof` in the place of its lowest number). `tests/perfetto.rs` decodes
//! the files with Perfetto's own Python bindings.

/// `Trace` (trace.proto). The export writes one packet per `Trace`: a file
/// of concatenated `Trace` messages is one `Trace` with all the packets.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub(crate) packet: Vec<TracePacket>,
}

/// `TracePacket` (trace_packet.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub(crate) timestamp: Option<u64>,
    /// The one field of upstream's `oneof optional_trusted_packet_sequence_id`.
    #[prost(uint32, optional, tag = "10")]
    pub(crate) trusted_packet_sequence_id: Option<u32>,
    /// `SequenceFlags` bits.
    #[prost(uint32, optional, tag = "13")]
    pub(crate) sequence_flags: Option<u32>,
    #[prost(oneof = "Data", tags = "11, 60")]
    pub(crate) data: Option<Data>,
}

/// `TracePacket`'s `oneof data` (the two members the export writes).
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Data {
    #[prost(message, tag = "11")]
    TrackEvent(TrackEvent),
    #[prost(message, tag = "60")]
    TrackDescriptor(TrackDescriptor),
}

/// `TrackDescriptor` (track_event/track_descriptor.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub(crate) uuid: Option<u64>,
    /// The `static_or_dynamic_name` member the export uses.
    #[prost(string, optional, tag = "2")]
    pub(crate) name: Option<String>,
    #[prost(uint64, optional, tag = "5")]
    pub(crate) parent_uuid: Option<u64>,
    #[prost(message, optional, tag = "8")]
    pub(crate) counter: Option<CounterDescriptor>,
}

/// `CounterDescriptor` (track_event/counter_descriptor.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CounterDescriptor {
    #[prost(string, optional, tag = "6")]
    pub(crate) unit_name: Option<String>,
}

/// `TrackEvent` (track_event/track_event.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackEvent {
    #[prost(message, repeated, tag = "4")]
    pub(crate) debug_annotations: Vec<DebugAnnotation>,
    #[prost(enumeration = "EventType", optional, tag = "9")]
    pub(crate) r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub(crate) track_uuid: Option<u64>,
    /// The one field of upstream's `oneof name_field`.
    #[prost(string, optional, tag = "23")]
    pub(crate) name: Option<String>,
    /// The one field of upstream's `oneof counter_value_field`.
    #[prost(int64, optional, tag = "30")]
    pub(crate) counter_value: Option<i64>,
    /// Flows (v2): events with the same id are linked by arrows, in time order.
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub(crate) flow_ids: Vec<u64>,
    /// Flows this event ends (no later event continues them).
    #[prost(fixed64, repeated, packed = "false", tag = "48")]
    pub(crate) terminating_flow_ids: Vec<u64>,
}

/// `TrackEvent.Type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
pub(crate) enum EventType {
    Unspecified = 0,
    SliceBegin = 1,
    SliceEnd = 2,
    Instant = 3,
    Counter = 4,
}

/// `DebugAnnotation` (track_event/debug_annotation.proto).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DebugAnnotation {
    #[prost(oneof = "ArgValue", tags = "2, 3")]
    pub(crate) value: Option<ArgValue>,
    /// The `name_field` member the export uses.
    #[prost(string, optional, tag = "10")]
    pub(crate) name: Option<String>,
}

/// `DebugAnnotation`'s `oneof value` (the members the export writes).
#[derive(Clone, Copy, PartialEq, prost::Oneof)]
pub(crate) enum ArgValue {
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(uint64, tag = "3")]
    Uint(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes worked out by hand from the protobuf wire format.
    #[test]
    fn a_slice_begin_with_an_argument() {
        let p = TracePacket {
            timestamp: Some(5),
            sequence_flags: None,
            data: Some(Data::TrackEvent(TrackEvent {
                r#type: Some(EventType::SliceBegin as i32),
                track_uuid: Some(2),
                name: Some("R".into()),
                debug_annotations: vec![DebugAnnotation {
                    name: Some("qid".into()),
                    value: Some(ArgValue::Uint(300)),
                }],
                ..Default::default()
            })),
            trusted_packet_sequence_id: Some(1),
        };
        let trace = Trace { packet: vec![p] };
        let out = trace.encode_to_vec();
        // Fields in number order: uint_value (3) before name (10).
        let arg = [0x18, 0xac, 0x02, 0x52, 3, b'q', b'i', b'd'];
        let mut event = vec![0x22, arg.len() as u8];
        event.extend_from_slice(&arg);
        event.extend_from_slice(&[0x48, 1, 0x58, 2, 0xba, 0x01, 1, b'R']);
        // timestamp (8), sequence id (10), track_event (11).
        let mut packet = vec![0x40, 5, 0x50, 1, 0x5a, event.len() as u8];
        packet.extend_from_slice(&event);
        let mut want = vec![0x0a, packet.len() as u8];
        want.extend_from_slice(&packet);
        assert_eq!(out, want);
        assert_eq!(Trace::decode(want.as_slice()).unwrap(), trace);
    }

    /// Flow ids as upstream declares them (proto2 `repeated fixed64`, not packed): one
    /// field per id, wire type 1 (64-bit), tags 47 and 48.
    #[test]
    fn flow_ids_and_terminating_flow_ids() {
        let e = TrackEvent {
            flow_ids: vec![1, 2],
            terminating_flow_ids: vec![3],
            ..Default::default()
        };
        let mut want = Vec::new();
        for (tag, id) in [([0xf9, 0x02], 1u64), ([0xf9, 0x02], 2), ([0x81, 0x03], 3)] {
            want.extend_from_slice(&tag);
            want.extend_from_slice(&id.to_le_bytes());
        }
        assert_eq!(e.encode_to_vec(), want);
        assert_eq!(TrackEvent::decode(want.as_slice()).unwrap(), e);
    }

    #[test]
    fn a_counter_track_and_a_negative_counter() {
        let out = TracePacket {
            timestamp: None,
            sequence_flags: Some(1),
            data: Some(Data::TrackDescriptor(TrackDescriptor {
                uuid: Some(7),
                name: Some("n".into()),
                parent_uuid: Some(1),
                counter: Some(CounterDescriptor {
                    unit_name: Some("u".into()),
                }),
            })),
            trusted_packet_sequence_id: Some(1),
        }
        .encode_to_vec();
        // sequence id (10), track descriptor (60: tag 0xe2 0x03, in the
        // place of the `data` oneof's lowest number, 11), flags (13).
        let track = [0x08, 7, 0x12, 1, b'n', 0x28, 1, 0x42, 3, 0x32, 1, b'u'];
        let mut want = vec![0x50, 1, 0xe2, 0x03, track.len() as u8];
        want.extend_from_slice(&track);
        want.extend_from_slice(&[0x68, 1]);
        assert_eq!(out, want);

        let m = TrackEvent {
            r#type: Some(EventType::Counter as i32),
            track_uuid: Some(3),
            name: None,
            counter_value: Some(-1),
            ..Default::default()
        }
        .encode_to_vec();
        // int64: a negative value is its 64-bit two's complement.
        let mut want = vec![0x48, 4, 0x58, 3, 0xf0, 0x01];
        want.extend_from_slice(&[0xff; 9]);
        want.push(0x01);
        assert_eq!(m, want);

        // A zero counter value is still written (proto2 presence).
        let zero = TrackEvent {
            r#type: Some(EventType::Counter as i32),
            track_uuid: Some(3),
            name: None,
            counter_value: Some(0),
            ..Default::default()
        };
        assert_eq!(zero.encode_to_vec(), [0x48, 4, 0x58, 3, 0xf0, 0x01, 0]);
    }
}
