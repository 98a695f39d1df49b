//! Errors of the model's own API (configuration, backing store, HMB accessors).
//! Guest mistakes are never `Error`s: they are NVMe statuses or controller fatal status.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid controller configuration: {0}")]
    Config(String),
    #[error("namespace backing store: {0}")]
    Backing(#[from] std::io::Error),
    #[error("HMB access [{offset:#x}, +{len:#x}) outside the {size:#x}-byte buffer")]
    HmbRange { offset: u64, len: u64, size: u64 },
    #[error("FTL: {0}")]
    Ftl(#[from] hmb_ftl::FtlError),
    #[error("guest memory at {addr:#x} (+{len:#x}) is not mapped")]
    GuestMemory { addr: u64, len: u64 },
}
