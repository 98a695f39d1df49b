use hmb_trace_abi::AbiError;
use thiserror::Error;

/// Everything that stops a consumer. All are fatal for the current epoch.
#[derive(Debug, Error)]
pub enum ConsumerError {
    /// The ring bytes break the ABI (bad magic, major version, lengths,
    /// window, sequence going backwards, ...).
    #[error(transparent)]
    Abi(#[from] AbiError),
    #[error("mapping of {len} bytes is too short for the ring (needs {need})")]
    MappingTooShort { len: usize, need: usize },
    #[error("mapping base is not 8-byte aligned")]
    Misaligned,
    #[error("head went backwards from {last} to {head}")]
    HeadWentBackwards { head: u64, last: u64 },
    #[error("ring epoch changed from {old} to {new} without a re-attach")]
    EpochChanged { old: u64, new: u64 },
    #[error("ring size changed from {old} to {new}")]
    RingSizeChanged { old: u64, new: u64 },
    #[error("publishing tail {tail} failed: {source}")]
    Publish { tail: u64, source: std::io::Error },
    #[error("mapping the ring failed: {0}")]
    Map(#[from] std::io::Error),
    /// The device's chunk table does not tile the ring view.
    #[error("bad chunk table: {0}")]
    Chunks(String),
}

impl ConsumerError {
    /// The ABI error inside, if this is one (for exit-code mapping).
    pub fn abi(&self) -> Option<&AbiError> {
        match self {
            Self::Abi(e) => Some(e),
            _ => None,
        }
    }
}
