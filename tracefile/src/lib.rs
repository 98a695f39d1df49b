//! trace.bin, format v1: what the daemon writes and the analyzer reads.
//!
//! `docs/trace-file.md` is the specification. A file is a 64-byte
//! [`FileHeader`] followed by 8-byte aligned items, each starting with the
//! ring's 32-byte `hmb_record_hdr`: device records copied verbatim from the
//! ring, and daemon [`Marker`]s (LOST, FROZEN, EPOCH).
//!
//! Every reader here treats the file as untrusted: lengths are bounded before
//! use, a torn last item is reported with its offset, and no input panics.

pub mod error;
pub mod header;
pub mod item;
pub mod mapped;
pub mod marker;
pub mod reader;
pub mod recover;
pub mod telemetry;
pub mod walk;
pub mod writer;

pub use error::FileError;
pub use header::{FileHeader, FILE_FLAG_FILTERED, FILE_HEADER_SIZE, FILE_MAGIC, FORMAT_MAJOR, FORMAT_MINOR};
pub use item::{parse_item, Item, ItemKind, ItemParse};
pub use mapped::MappedTrace;
pub use marker::{
    encode_epoch, encode_frozen, encode_lost, Marker, MARKER_EPOCH, MARKER_FROZEN, MARKER_LOST, MARKER_PAYLOAD_SIZE,
    MARKER_SIZE, NO_SEQ,
};
pub use reader::{SliceReader, TraceReader};
pub use recover::{last_complete_offset, recover, recover_from, EpochProgress, Recovery, TailState};
pub use telemetry::{is_telemetry_trace, TelemetryError, TelemetryLog, TelemetryReason};
pub use walk::{Event, Walker};
pub use writer::TraceWriter;
