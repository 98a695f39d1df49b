//! hmb-nvme: an NVMe 1.4 controller model with a real Host Memory Buffer.
//!
//! The model owns the controller's registers (BAR0), its admin and I/O queues, one
//! namespace and the HMB the host lends it. It has no transport inside: a transport
//! (vfio-user in `hmb-emu-device`) forwards BAR0 accesses to [`Controller::bar0_read`] /
//! [`Controller::bar0_write`], swaps the [`GuestMem`] on DMA map/unmap and turns
//! [`InterruptSink::raise`] into MSI-X interrupts. Every guest memory access goes through
//! vm-memory, bounds-checked: a bad guest address is an NVMe status, never a panic.
//!
//! docs/nvme-controller.md describes the decisions (ids, register values, admin commands and
//! their statuses, HMB rules, media model).

mod admin;
mod audit;
mod bar0;
mod command;
mod config;
mod controller;
mod dma;
mod doorbell;
mod error;
#[cfg(feature = "test-util")]
pub mod fake_host;
mod guest_read;
mod guest_write;
mod held;
mod hmb;
mod io;
mod lifecycle;
mod map_cache;
mod media;
mod namespace;
mod nvm_ops;
mod observer;
mod prp;
mod queue;
mod regs;
mod report;
mod shadow;
mod status;
mod timing;

pub use admin::{CaptureRefused, TelemetryData, TELEMETRY_MAX_DATA_BYTES};
pub use audit::{AuditPhase, ChunkSizes, HmbAuditReport, HmbRange, HmbViolation, SetHmbSeen, VendorFeatureSeen};
pub use config::{Backing, ControllerConfig, PciIdentity};
pub use controller::Controller;
pub use error::Error;
pub use hmb::{HmbDescriptor, HostMemoryBuffer};
pub use hmb_ftl::{CacheEventKind, CorruptionFound, FtlEvent, FtlStats, NandOp, NandOpKind, Purpose};
pub use media::{MediaConfig, MediaOp, MediaOpKind};
pub use namespace::NamespaceImage;
pub use observer::{
    CommandObserver, CompletionEvent, FetchEvent, FtlTraceEvent, InterruptSink, MediaEvent, NoVendorFeatures,
    NullObserver, VendorFeatures,
};
pub use report::{ControllerReport, Counters, HmbReport, NamespaceReport, QueueReport, TelemetryReport};
pub use status::Status;
pub use timing::{CompletionWaker, Timing};

/// The transport and the model must agree on one vm-memory version: use this re-export.
pub use vm_memory;

/// Guest memory: vm-memory's atomic view, swapped by the transport on DMA_MAP / DMA_UNMAP.
pub type GuestMem = vm_memory::GuestMemoryAtomic<vm_memory::GuestMemoryMmap<()>>;
