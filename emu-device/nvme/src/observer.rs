//! What the controller tells the outside: interrupts, command events, HMB life cycle,
//! vendor-specific features.

use serde::Serialize;

use crate::media::MediaOp;
use crate::{HostMemoryBuffer, Status, TelemetryData};

/// Raises MSI-X vector `vector` (the transport signals the eventfd QEMU gave for it, or
/// does nothing if none is set: masking/MSI-X table emulation is QEMU's job in vfio-user).
pub trait InterruptSink: Send + Sync {
    fn raise(&self, vector: u16);
}

/// A command read from a submission queue.
#[derive(Clone, Debug, Serialize)]
pub struct FetchEvent {
    pub qid: u16,
    pub cid: u16,
    pub opcode: u8,
    pub nsid: u32,
    /// Starting LBA (Read/Write), else 0.
    pub slba: u64,
    /// Number of logical blocks as a count (NVMe's 0-based NLB + 1) for Read/Write, else 0.
    pub nlb: u32,
    /// Nanoseconds since the controller was created (the clock of every event).
    pub time_ns: u64,
    /// The whole 64-byte entry, for observers that need CDW10..15.
    pub sqe: [u32; 16],
}

/// One NAND operation of the media model, caused by command (qid, cid).
#[derive(Clone, Debug, Serialize)]
pub struct MediaEvent {
    pub qid: u16,
    pub cid: u16,
    pub op: MediaOp,
}

/// What the FTL did (hmb-ftl's event: a NAND operation, a map-cache access, GC, wear
/// levelling, a changed cache page), caused by command (qid, cid) or in the background.
#[derive(Clone, Debug, Serialize)]
pub struct FtlTraceEvent {
    /// The command that caused it; None: background (the HMB released by a reset,
    /// shutdown or CFS, outside any command).
    pub command: Option<(u16, u16)>,
    /// The command's fetch time, or the controller clock for background work: the
    /// event's own times (NAND start) are at or after it.
    pub time_ns: u64,
    /// The map cache is in the HMB (cache events' offsets are HMB offsets).
    pub cache_in_hmb: bool,
    pub event: hmb_ftl::FtlEvent,
}

/// A completion posted to a completion queue.
#[derive(Clone, Debug, Serialize)]
pub struct CompletionEvent {
    pub qid: u16,
    pub cid: u16,
    pub opcode: u8,
    /// The CQE's 15-bit status field (see [`Status::field`]).
    pub status: u16,
    pub dw0: u32,
    /// When the CQE was written (same clock as [`FetchEvent::time_ns`]).
    pub time_ns: u64,
    /// Measured: fetch to CQE, on the controller's clock.
    pub latency_ns: u64,
    /// Modelled: fetch to the end of the command's last media operation (0 without media work).
    pub media_latency_ns: u64,
}

/// Sees what the controller really does (the firmware model hooks in here, issue 14).
/// Default methods do nothing. Order per command: on_fetch, on_media*, on_complete. An I/O
/// queue's commands are told of after the interrupt of the pass that ran them, before
/// the doorbell write that started it returns (held.rs).
pub trait CommandObserver: Send {
    fn on_fetch(&mut self, _f: &FetchEvent) {}
    fn on_media(&mut self, _m: &MediaEvent) {}
    /// Every FTL event, in order (NAND operations also come as `on_media`).
    fn on_ftl(&mut self, _e: &FtlTraceEvent) {}
    fn on_complete(&mut self, _c: &CompletionEvent) {}
    fn on_hmb_enabled(&mut self, _hmb: &HostMemoryBuffer) {}
    /// Called BEFORE the controller stops touching the HMB (EHM=0, CC.EN 1->0, shutdown,
    /// CFS, transport reset): the last chance to write into it.
    fn on_hmb_disabling(&mut self, _hmb: &HostMemoryBuffer) {}
}

/// An observer that ignores everything (the default).
pub struct NullObserver;
impl CommandObserver for NullObserver {}

/// Vendor-specific features C0h..FFh. Default: Invalid Field in Command.
pub trait VendorFeatures: Send {
    fn set(&mut self, fid: u8, cdw11: u32, data: &[u8], hmb: Option<&HostMemoryBuffer>) -> Result<u32, Status>;
    fn get(&mut self, fid: u8, cdw11: u32) -> Result<(u32, Vec<u8>), Status>;
    /// Bytes of host data a Set Features of `fid` carries (read through PRP1/PRP2 before
    /// `set` is called). Default 0: no data transfer.
    fn set_data_len(&self, _fid: u8, _cdw11: u32) -> usize {
        0
    }
    /// Identify Controller's vendor-specific area (bytes 3072..4096): what the vendor
    /// features declare there (the trace contract, docs/abi.md decision 9). Default:
    /// nothing, the area stays zero.
    fn identify_vendor_specific(&self, _area: &mut [u8; 1024]) {}
    /// Whether [`telemetry`](Self::telemetry) gives data: Identify LPA bit 3 and the
    /// Telemetry Host-Initiated log page (07h). Default: no telemetry.
    fn has_telemetry(&self) -> bool {
        false
    }
    /// A snapshot of device-internal data for a Telemetry Host-Initiated create (the
    /// firmware trace). Called only when [`has_telemetry`](Self::has_telemetry) is true.
    fn telemetry(&mut self) -> TelemetryData {
        TelemetryData::default()
    }
    /// The FID whose Set Features offers the controller a slice of the HMB to share with
    /// the host (the trace contract's advert). Default None: the controller shares nothing
    /// and owns its whole HMB from the enable (audit.rs).
    fn advert_fid(&self) -> Option<u8> {
        None
    }
    /// The slice adopted as shared with the host: (HMB offset, length).
    fn shared_slice(&self) -> Option<(u64, u64)> {
        None
    }
}

/// No vendor features: every C0h..FFh feature is Invalid Field in Command.
pub struct NoVendorFeatures;
impl VendorFeatures for NoVendorFeatures {
    fn set(&mut self, _: u8, _: u32, _: &[u8], _: Option<&HostMemoryBuffer>) -> Result<u32, Status> {
        Err(Status::INVALID_FIELD)
    }
    fn get(&mut self, _: u8, _: u32) -> Result<(u32, Vec<u8>), Status> {
        Err(Status::INVALID_FIELD)
    }
}
