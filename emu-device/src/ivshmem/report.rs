//! The typed answers of the ivshmem device's control socket (`status`,
//! `stats`, `ground-truth`): defined once here, serialised by the device and
//! deserialised by the harness and the conformance suite, so nobody reads a
//! field back by its name in a `serde_json::Value`.

use hmb_trace_abi::{offsets, HMB_RING_FLAG_FROZEN, HMB_RING_FLAG_OVERFLOWED};
use serde::{Deserialize, Serialize};

use crate::ivshmem::advert::Slice;
use crate::ivshmem::faults::FaultEffect;
use crate::ivshmem::hmb::MemRegion;
use crate::ivshmem::production::Plan;
use hmb_firmware_model::EngineStats;

/// Where the device stands, as `status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    WaitingForGuest,
    WaitingForAdvert,
    Ready,
    Producing,
    Stalled,
    Frozen,
    Halted,
}

/// One stretch of production with one plan in one epoch: the ground truth
/// a consumer's records are checked against (`expected_record(seed,
/// workload, seq)` for every seq in `first_seq..end_seq`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub epoch: u64,
    pub workload: String,
    pub seed: u64,
    pub first_seq: u64,
    /// Exclusive; `None` while producing.
    pub end_seq: Option<u64>,
    /// How the segment ended: stopped, frozen, stalled, hostile, ...
    pub ended_by: Option<String>,
}

/// The ring header as the device sees it in the HMB at the time of the answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeaderView {
    /// `0x........` as hex: the one field people compare by eye.
    pub magic: String,
    pub epoch: u64,
    pub head: u64,
    pub tail: u64,
    pub next_seq: u64,
    pub flags: u32,
    pub dropped_records: u64,
    pub overflow_events: u64,
}

impl HeaderView {
    /// Read the header of `slice` (a field that cannot be read is 0: the
    /// answer is a diagnostic, not a ring operation).
    pub(crate) fn read(mem: &MemRegion, slice: &Slice) -> HeaderView {
        let base = slice.offset as usize;
        let at = |off: usize| mem.load_u64(base + off).unwrap_or(0);
        let magic = mem.load_u32(base + offsets::MAGIC).unwrap_or(0);
        HeaderView {
            magic: format!("{magic:#010x}"),
            epoch: at(offsets::EPOCH),
            head: at(offsets::HEAD),
            tail: at(offsets::TAIL),
            next_seq: at(offsets::NEXT_SEQ),
            flags: mem.load_u32(base + offsets::FLAGS).unwrap_or(0),
            dropped_records: at(offsets::DROPPED_RECORDS),
            overflow_events: at(offsets::OVERFLOW_EVENTS),
        }
    }

    pub fn frozen(&self) -> bool {
        self.flags & HMB_RING_FLAG_FROZEN != 0
    }

    pub fn overflowed(&self) -> bool {
        self.flags & HMB_RING_FLAG_OVERFLOWED != 0
    }

    /// The consumer has taken everything the producer published.
    pub fn drained(&self) -> bool {
        self.head == self.tail
    }
}

/// The slice the device adopted from the advert.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SliceView {
    pub offset: u64,
    pub len: u64,
    pub epoch: u64,
    pub ring_size: u64,
}

impl From<Slice> for SliceView {
    fn from(s: Slice) -> Self {
        SliceView {
            offset: s.offset,
            len: s.len,
            epoch: s.epoch,
            ring_size: s.ring_size,
        }
    }
}

/// The advert block as the device reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdvertView {
    pub withdrawn: bool,
    /// `None` while the advert block holds no valid advert.
    pub generation: Option<u64>,
    pub ack_generation: u64,
}

/// `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub phase: Phase,
    pub transport: String,
    pub guests: Vec<u16>,
    pub hmb_size: usize,
    pub slice: Option<SliceView>,
    pub plan: Option<Plan>,
    pub halted: Option<String>,
    pub last_advert_error: Option<String>,
    pub doorbells: u64,
    pub advert: AdvertView,
}

/// Interrupts the device raised, by vector role.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InterruptCounts {
    pub data: u64,
    pub state: u64,
    /// Raises the transport refused (no guest, no vector).
    pub failed: u64,
}

/// `stats`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub phase: Phase,
    /// `None` before a guest has advertised a slice.
    pub header: Option<HeaderView>,
    pub interrupts: InterruptCounts,
    pub doorbells: u64,
    /// The firmware engines' counters summed as of the last stop; the
    /// header is live.
    pub engine_totals: EngineStats,
    pub producing: bool,
}

/// `ground-truth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroundTruth {
    pub segments: Vec<Segment>,
    pub faults: Vec<FaultEffect>,
    pub header: Option<HeaderView>,
}
