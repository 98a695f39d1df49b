//! The controller's state for the JSON control socket.

use serde::Serialize;

use crate::HmbDescriptor;

#[derive(Clone, Debug, Default, Serialize)]
pub struct Counters {
    pub admin_commands: u64,
    pub io_commands: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Doorbell writes whose work waited because Bus Master Enable was 0.
    pub bus_master_stalls: u64,
    /// Dataset Management commands with Deallocate that succeeded.
    pub deallocations: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Completions with a status other than success.
    pub errors: u64,
    /// Doorbell writes to a queue that does not exist or with an out-of-range value.
    pub invalid_doorbells: u64,
    /// Doorbell register writes (each one transport message), valid or not.
    pub doorbell_writes: u64,
    /// Shadow doorbell reads (Doorbell Buffer Config), and shadow values ignored because
    /// they were out of range for their queue (an SQ tail >= its size, a CQ head moved
    /// past the posted entries).
    pub shadow_doorbell_reads: u64,
    pub invalid_shadow_doorbells: u64,
    /// Register writes the model ignored (read-only, reserved, narrow doorbell writes).
    pub ignored_register_writes: u64,
    /// Controller resets: CC.EN 1->0 and transport resets.
    pub resets: u64,
    pub shutdowns: u64,
    /// Times CSTS.CFS was set.
    pub fatal_errors: u64,
    pub media_ops: u64,
    /// Completions posted on I/O queues, and the sum of their latencies
    /// (fetch to completion, each saturated to u32 ns as the trace's
    /// CMD_COMPLETE records carry it): a traced run's records must add up
    /// to the same figures.
    pub io_completions: u64,
    pub io_latency_ns_total: u64,
    /// I/O completions the timing model held until their media work ended, and those a
    /// reset or Controller Fatal Status dropped while held (timing.rs).
    pub deferred_completions: u64,
    pub deferred_dropped: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct QueueReport {
    /// "sq" or "cq".
    pub kind: &'static str,
    pub qid: u16,
    pub entries: u32,
    pub head: u32,
    pub tail: u32,
    /// SQ: its completion queue.
    pub cqid: Option<u16>,
    /// CQ: interrupt vector and whether interrupts are enabled.
    pub iv: Option<u16>,
    pub ien: Option<bool>,
    /// SQ: commands fetched; CQ: completions posted.
    pub commands: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct HmbReport {
    /// Identify HMPRE/HMMIN in bytes (0 = the controller asks for no HMB).
    pub preferred_bytes: u64,
    pub minimum_bytes: u64,
    pub enabled: bool,
    /// The enabled buffer came back with MR=1 and the same descriptor list.
    pub returned: bool,
    pub descriptors: Vec<HmbDescriptor>,
    pub bytes: u64,
    pub enables: u64,
    pub disables: u64,
    /// Status of the last rejected Set Features 0Dh, as "sct/sc" text.
    pub last_rejection: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct NamespaceReport {
    pub nsid: u32,
    pub bytes: u64,
    pub lba_bytes: u32,
    pub backing: &'static str,
    /// The FTL's counters and geometry (hmb-ftl).
    pub ftl: hmb_ftl::FtlStats,
}

#[derive(Clone, Debug, Serialize)]
pub struct ControllerReport {
    pub cc: u32,
    pub csts: u32,
    pub ready: bool,
    pub fatal: bool,
    /// CSTS.SHST: 0 normal, 2 shutdown complete.
    pub shutdown_status: u8,
    /// Why the last CC.EN 0->1 or the last queue access failed (CSTS.CFS), if it did.
    pub fatal_reason: Option<String>,
    /// PCI command register Bus Master Enable as the transport last reported it.
    pub bus_master: bool,
    /// When I/O completions are posted (`serve-nvme --timing`), and how many wait now.
    pub timing: crate::Timing,
    pub completions_deferred_now: usize,
    pub io_queues_allocated: u16,
    pub queues: Vec<QueueReport>,
    pub aer_outstanding: usize,
    pub counters: Counters,
    pub hmb: HmbReport,
    pub namespace: NamespaceReport,
    pub telemetry: TelemetryReport,
}

/// The Telemetry logs (07h, 08h) as the controller holds them: what a host's
/// `nvme telemetry-log` must find in the headers it reads (docs/nvme-controller.md,
/// "Telemetry"). All zero while the vendor declares no telemetry.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TelemetryReport {
    /// Host-Initiated Data Generation Number of the last create (byte 381 of 07h).
    pub host_generation: u8,
    /// Data Area 3 Last Block of that snapshot (07h bytes 12-13; 0 before the first).
    pub host_last_block: u16,
    /// Controller-Initiated Data Available and Generation Number (bytes 382, 383 of both).
    pub controller_available: bool,
    pub controller_generation: u8,
    /// Data Area 3 Last Block of the capture (08h bytes 12-13; 0 before the first).
    pub controller_last_block: u16,
}
