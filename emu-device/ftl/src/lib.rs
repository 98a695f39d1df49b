//! hmb-ftl: the flash translation layer of the emulated DRAM-less SSD.
//!
//! A page-level logical-to-physical (L2P) map kept in map pages on "NAND" (a byte region
//! of the namespace's backing store, [`Medium`]), cached in a small set of slots
//! ([`SlotStore`]: controller SRAM, or the Host Memory Buffer), log-structured writes
//! striped over channels and dies, greedy garbage collection inside the over-provisioned
//! space, dynamic and static wear levelling, deallocation, and recovery after a power cycle
//! from the pages' out-of-band records. Every NAND operation, map-cache access, GC run and
//! wear-levelling move is reported as an [`FtlEvent`] with its modelled time.
//!
//! Decisions and the on-NAND layout: docs/nvme-controller.md, "The FTL".

mod config;
mod error;
mod events;
mod ftl;
mod gc;
mod geometry;
mod invariants;
mod map_cache;
mod medium;
mod oob;
mod read_target;
mod recovery;
mod slots;
mod staged;
mod timing;
mod vectored;
mod write_source;

pub use config::FtlConfig;
pub use error::FtlError;
pub use events::{CacheEventKind, CorruptionFound, FtlEvent, NandOp, NandOpKind, Purpose};
pub use ftl::{Ftl, FtlStats};
pub use geometry::GeometryReport;
pub use map_cache::{page_checksum, SlotStore, VecSlots};
pub use medium::{FileMedium, Medium, MemMedium, OverlayMedium};
pub use read_target::{BufferTarget, ReadTarget};
pub use slots::CacheSnapshot;
pub use vectored::transfer_all;
pub use write_source::{BufferSource, HostSlice, WriteSource};
