//! Every way a .pccx file can be wrong, each with its own variant.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum PccxError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("truncated file: {what} needs {need} bytes, only {have} present")]
    Truncated { what: &'static str, need: u64, have: u64 },
    #[error("not a .pccx file: magic {found:02x?} (expected \"PCCX\")")]
    BadMagic { found: [u8; 4] },
    #[error(".pccx major version {found} is not supported (this build reads {supported})")]
    UnsupportedMajor { found: u8, supported: u8 },
    #[error("reserved bytes are {found:02x?}, must be zero (strict mode)")]
    ReservedNotZero { found: [u8; 2] },
    #[error("JSON header length {len} exceeds the limit of {max} bytes")]
    HeaderTooLong { len: u64, max: u64 },
    #[error("payload length {len} exceeds the limit of {max} bytes")]
    PayloadTooLong { len: u64, max: u64 },
    #[error("JSON header is not valid UTF-8 (at byte {valid_up_to})")]
    HeaderNotUtf8 { valid_up_to: usize },
    #[error("JSON header is not a JSON object")]
    HeaderNotObject,
    #[error("JSON header is invalid: {0}")]
    HeaderJson(String),
    #[error("{count} trailing bytes after the {declared}-byte payload")]
    TrailingBytes { count: u64, declared: u64 },
    #[error("payload checksum mismatch: header says {expected:#018x}, payload hashes to {actual:#018x}")]
    ChecksumMismatch { expected: u64, actual: u64 },
    #[error("payload encoding {0:?} is not one of bincode, flatbuf, raw")]
    UnknownEncoding(String),
    #[error("flatbuf payload of {len} bytes is not a whole number of 24-byte events")]
    FlatbufLength { len: u64 },
    #[error("bincode payload invalid at byte {offset}: {reason}")]
    Bincode { offset: u64, reason: String },
    #[error("cannot write: {0}")]
    Write(String),
}
