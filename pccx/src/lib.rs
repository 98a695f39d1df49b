//! The `.pccx` container of the pccx-lab NPU profiler, format major 1.
//!
//! `docs/pccx.md` is the specification as implemented here, including where
//! the seed document and pccx-lab's own source disagree. Reading is strict:
//! every length is bounded before anything is allocated, a different major
//! version is refused, truncation and trailing bytes are errors. Unknown JSON
//! fields and unknown minor versions are accepted, as the format requires.

pub mod bincode_payload;
pub mod checksum;
pub mod error;
pub mod flatbuf;
pub mod header;
pub mod read;
pub mod write;

pub use bincode_payload::{encode_event, encode_prefix, encoded_event_len, BincodeLayout, NpuEvent, NpuTrace};
pub use checksum::fnv1a_64;
pub use error::PccxError;
pub use flatbuf::{event_type_name, FlatEvent, FlatEvents, FLAT_EVENT_SIZE};
pub use header::{ArchConfig, Encoding, PayloadConfig, PccxHeader, TraceConfig};
pub use read::{
    parse_preamble, ChecksumStatus, MappedPccx, PayloadView, PccxFile, Preamble, ReadOptions, Verified, PREAMBLE_SIZE,
};
pub use write::{encode_preamble, write_pccx, write_pccx_streamed};

/// The four magic bytes at offset 0.
pub const MAGIC: [u8; 4] = *b"PCCX";
/// Major version this crate reads and writes.
pub const MAJOR_VERSION: u8 = 1;
/// Minor version this crate writes.
pub const MINOR_VERSION: u8 = 1;
