//! Every way untrusted ring bytes can be wrong, each with its own variant so
//! callers can map them to distinct exit codes.

use thiserror::Error;

/// Why the ring owner's stand-in (`module_sim`) or a `SharedRing` refused.
#[derive(Debug, Error)]
pub enum OwnerError {
    #[error("trace slice of {len} bytes is too short: the header says it needs {need}")]
    SliceTooShort { len: usize, need: usize },
    #[error("trace slice base {0:#x} is not 8-byte aligned")]
    Misaligned(usize),
    #[error("ring header rejected: {0}")]
    Header(#[from] AbiError),
    #[error("REINIT refused: the ring is not FROZEN")]
    NotFrozen,
    #[error("mapping the trace slice failed: {0}")]
    Map(#[from] std::io::Error),
    #[error("tail {tail} rejected: {why} (head {head}, old tail {old})")]
    BadTail {
        tail: u64,
        head: u64,
        old: u64,
        why: &'static str,
    },
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AbiError {
    #[error("bad ring magic {found:#010x} (expected {expected:#010x})")]
    BadMagic { found: u32, expected: u32 },
    #[error("ring ABI major version {found} is not supported (this build speaks {supported})")]
    UnsupportedMajor { found: u16, supported: u16 },
    #[error("ring header size {0} is not {expected}", expected = crate::HMB_RING_HDR_SIZE)]
    BadHeaderSize(u32),
    #[error("ring max_record {0} is not {expected}", expected = crate::HMB_RECORD_MAX_SIZE)]
    BadMaxRecord(u32),
    #[error("ring size {0} is not a power of two in [{min}, {max}]", min = crate::HMB_RING_MIN_SIZE, max = crate::HMB_RING_MAX_SIZE)]
    BadRingSize(u64),
    #[error("buffer of {have} bytes is too short for {what} ({need} bytes)")]
    Short {
        what: &'static str,
        have: usize,
        need: usize,
    },
    #[error("head {head} is behind tail {tail}")]
    HeadBehindTail { head: u64, tail: u64 },
    #[error("head {head} is more than ring size {ring_size} ahead of tail {tail}")]
    HeadTooFarAhead { head: u64, tail: u64, ring_size: u64 },
    #[error("cursor {0} is not 8-byte aligned")]
    Misaligned(u64),
    #[error("record at {pos}: payload length {length} exceeds {max}", max = crate::HMB_RECORD_MAX_PAYLOAD)]
    LengthTooLarge { pos: u64, length: u32 },
    #[error("record at {pos}: {size} bytes do not fit in the {room} bytes before the ring end")]
    Straddles { pos: u64, size: u32, room: u64 },
    #[error("record at {pos}: {size} bytes run past head ({available} bytes published)")]
    PastHead { pos: u64, size: u32, available: u64 },
    #[error("pad record at {pos}: length {length} does not fill the {room} bytes to the ring end")]
    BadPad { pos: u64, length: u32, room: u64 },
    #[error("record at {pos}: flag bits {flags:#06x} are not allowed in a ring")]
    BadRecordFlags { pos: u64, flags: u16 },
    #[error("record at {pos}: sequence {seq} goes backwards (expected at least {expected})")]
    SeqBackwards { pos: u64, seq: u64, expected: u64 },
    /// A producer never gets there (2^64 records); only a hostile or
    /// corrupt ring shows it, and nothing could follow it in order.
    #[error("record at {pos}: sequence {seq} is the last a u64 holds; no record can follow it")]
    SeqExhausted { pos: u64, seq: u64 },
}
