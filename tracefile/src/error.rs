//! Every way a trace.bin can be wrong, each with its own variant so callers
//! can map them to distinct exit codes, and every way a telemetry log that
//! carries one can be (`telemetry`). The leaf of the crate: it uses no
//! module of it.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum FileError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("file of {have} bytes is too short for the {need}-byte trace.bin header")]
    ShortHeader { have: u64, need: u64 },
    #[error("not a trace.bin: magic {found:02x?} (expected \"HMBTRACE\")")]
    BadMagic { found: [u8; 8] },
    #[error("trace.bin format major version {found} is not supported (this build reads {supported})")]
    UnsupportedFormat { found: u16, supported: u16 },
    #[error("trace.bin header_size {0} is not a multiple of 8 in [64, 4096]")]
    BadHeaderSize(u32),
    #[error("trace.bin records use ring ABI major {found}; this build reads {supported}")]
    UnsupportedRingAbi { found: u16, supported: u16 },
    #[error("trace.bin header ring_size {0} is not a valid ring size")]
    BadRingSize(u64),
    #[error("truncated item at offset {offset}: {have} of {need} bytes present (torn write?)")]
    Truncated { offset: u64, have: u64, need: u64 },
    #[error("corrupt item at offset {offset}: payload length {length} exceeds {max}", max = hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD)]
    LengthTooLarge { offset: u64, length: u32 },
    #[error("corrupt item at offset {offset}: PAD record (flags {flags:#06x}) must never be copied into a file")]
    PadInFile { offset: u64, flags: u16 },
    #[error("telemetry log: {0}")]
    Telemetry(#[from] TelemetryError),
    #[error("corrupt marker at offset {offset}: opcode {opcode:#06x} needs {need} payload bytes, has {length}")]
    BadMarker {
        offset: u64,
        opcode: u16,
        length: u32,
        need: u32,
    },
}

impl FileError {
    /// Whether this error is the expected result of a power cut: the file
    /// ends inside an item. Everything before `offset` is intact.
    pub fn is_torn_tail(&self) -> bool {
        matches!(self, FileError::Truncated { .. })
    }

    /// Offset of the item that failed, when the error is about an item.
    pub fn item_offset(&self) -> Option<u64> {
        match *self {
            FileError::Truncated { offset, .. }
            | FileError::LengthTooLarge { offset, .. }
            | FileError::PadInFile { offset, .. }
            | FileError::BadMarker { offset, .. } => Some(offset),
            _ => None,
        }
    }
}

/// Why a telemetry log holds no readable hmb-trace snapshot (`telemetry`).
#[derive(Debug, Error, PartialEq, Eq)]
pub enum TelemetryError {
    #[error("telemetry log of {0} bytes is shorter than its 512-byte header")]
    Short(usize),
    #[error("log identifier {0:#04x} is not a telemetry log (07h or 08h)")]
    NotTelemetry(u8),
    #[error("the Reason Identifier is not an hmb-trace snapshot (another vendor's telemetry?)")]
    ForeignReason,
    #[error("data area 3 ends at block {last_block} ({need} bytes) but the file has {have} bytes (truncated?)")]
    Truncated { last_block: u16, need: u64, have: u64 },
    #[error("the trace stream is {stream} bytes but data areas 1-3 hold {room}")]
    StreamTooLong { stream: u64, room: u64 },
}
