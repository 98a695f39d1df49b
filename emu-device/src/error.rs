//! Errors of the ivshmem device (and its HMB), one variant per way things
//! go wrong so callers and the control protocol can report them precisely.
//! The layers under it have their own and are wrapped: the socket path
//! (`sockpath::SocketPathError`) and the control socket
//! (`control::ControlError`); vfio-user's `vfio_user::VfioUserError` wraps
//! this one in turn.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum EmuError {
    #[error("HMB size {0} must be a power of two between 64 KiB and 4 GiB (ivshmem exposes it as a PCI BAR)")]
    BadHmbSize(u64),
    #[error("access of {len} bytes at offset {off} is outside the {hmb}-byte HMB or misaligned")]
    OutOfBounds { off: u64, len: u64, hmb: u64 },
    #[error("{what} failed: {errno}")]
    Sys { what: &'static str, errno: nix::Error },
    #[error("I/O error during {what}: {source}")]
    Io { what: &'static str, source: std::io::Error },
    #[error("ivshmem protocol: {0}")]
    Protocol(String),
    #[error("handshake: {0}")]
    Handshake(String),
    #[error("no guest peer is connected")]
    NoGuest,
    #[error("vector {vector} is out of range (the device has {vectors} vectors)")]
    BadVector { vector: u16, vectors: u16 },
    /// A control request the device refuses (answered as `ok: false`).
    #[error("{0}")]
    Control(String),
    #[error(transparent)]
    Socket(#[from] crate::sockpath::SocketPathError),
    #[error(transparent)]
    ControlSocket(#[from] crate::control::ControlError),
}

impl EmuError {
    pub(crate) fn sys(what: &'static str, errno: nix::Error) -> Self {
        EmuError::Sys { what, errno }
    }

    pub(crate) fn io(what: &'static str, source: std::io::Error) -> Self {
        EmuError::Io { what, source }
    }
}
