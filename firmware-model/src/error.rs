use hmb_trace_abi::{AbiError, OwnerError};
use thiserror::Error;

/// Why the model cannot use a trace slice or a workload description.
#[derive(Debug, Error)]
pub enum ModelError {
    #[error("trace slice of {len} bytes is too short: the header says it needs {need}")]
    SliceTooShort { len: usize, need: usize },
    #[error("ring header rejected: {0}")]
    Header(#[from] AbiError),
    #[error("ring is FROZEN and has not been re-initialised yet")]
    StillFrozen,
    #[error("mapping the trace slice failed: {0}")]
    Map(#[from] std::io::Error),
    #[error("unknown workload {0:?} (expected ssd, npu, sizes, sizes:fixed=N, sizes:uniform=A-B, sizes:small)")]
    UnknownWorkload(String),
    #[error(transparent)]
    Owner(#[from] OwnerError),
}
