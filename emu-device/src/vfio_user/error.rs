//! Errors of the vfio-user NVMe device (`serve-nvme`): its own, and the
//! layers under it wrapped (the NVMe model, the telemetry history, the
//! control socket, the socket path, and the device-level errors of the
//! fault writers it shares with the ivshmem device).

use crate::control::ControlError;
use crate::error::EmuError;
use crate::sockpath::SocketPathError;

#[derive(Debug, thiserror::Error)]
pub enum VfioUserError {
    #[error("the NVMe controller cannot be built: {0}")]
    Controller(#[from] hmb_nvme::Error),
    #[error("the controller wants {vectors} MSI-X vectors; BAR4 has room for 1..={max}")]
    Vectors { vectors: u16, max: u16 },
    #[error(transparent)]
    TelemetryHistory(#[from] hmb_nvme_trace::telemetry::HistoryBytesError),
    #[error(transparent)]
    TraceJournal(#[from] hmb_nvme_trace::journal::JournalBytesError),
    #[error("{0:?} is not a ring fault")]
    NotARingFault(crate::control::Fault),
    #[error("the vfio-user server stopped: {0}")]
    Stopped(String),
    #[error("I/O error during {what}: {source}")]
    Io { what: &'static str, source: std::io::Error },
    #[error(transparent)]
    Device(#[from] EmuError),
    #[error(transparent)]
    Control(#[from] ControlError),
    #[error(transparent)]
    Socket(#[from] SocketPathError),
}
