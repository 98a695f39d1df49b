//! Errors of the FTL: the medium's I/O, a backing store made for another geometry, a
//! full device, or on-NAND metadata that cannot be right.

#[derive(Debug, thiserror::Error)]
pub enum FtlError {
    #[error("FTL configuration: {0}")]
    Config(String),
    #[error("the store holds no FTL (no superblock): nothing was ever written through one")]
    NotFormatted,
    #[error("NAND medium: {0}")]
    Io(#[from] std::io::Error),
    #[error("the backing store holds an FTL of another geometry: {0}")]
    Geometry(String),
    #[error("no free NAND line left (over-provisioning exhausted)")]
    NoSpace,
    #[error("FTL metadata on NAND is inconsistent: {0}")]
    Corrupt(String),
    #[error("byte range [{off:#x}, +{len:#x}) outside the {size:#x}-byte logical space")]
    Range { off: u64, len: u64, size: u64 },
}
