#![allow(non_camel_case_types)] // Names match the C uapi header exactly.
//! Byte layout of ABI v1: constants and `#[repr(C)]` structs with fixed
//! little-endian fields. Field names match the C uapi header exactly.

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes, KnownLayout};

pub const HMB_RING_MAGIC: u32 = 0x5442_4d48; // "HMBT" in memory order
pub const HMB_RING_VERSION_MAJOR: u16 = 1;
pub const HMB_RING_VERSION_MINOR: u16 = 0;

/// Version of the character device interface (`hmb_trace_info::abi_major`
/// and `abi_minor`), apart from the ring's: 2.0 maps the ring view one
/// chunk at a time (`hmb_trace_chunk`, docs/abi.md decision 11).
pub const HMB_TRACE_DEV_ABI_MAJOR: u16 = 2;
pub const HMB_TRACE_DEV_ABI_MINOR: u16 = 0;

pub const HMB_RING_HDR_SIZE: u32 = 4096;
pub const HMB_RING_MIN_SIZE: u32 = 8192;
pub const HMB_RING_MAX_SIZE: u64 = 1 << 30;
pub const HMB_RING_ALIGN: u32 = 8;

pub const HMB_RING_FLAG_OVERFLOWED: u32 = 1 << 0;
pub const HMB_RING_FLAG_FROZEN: u32 = 1 << 1;
pub const HMB_RING_FLAGS_KNOWN: u32 = HMB_RING_FLAG_OVERFLOWED | HMB_RING_FLAG_FROZEN;

pub const HMB_RECORD_HDR_SIZE: u32 = 32;
pub const HMB_RECORD_MAX_SIZE: u32 = 4096;
pub const HMB_RECORD_MAX_PAYLOAD: u32 = HMB_RECORD_MAX_SIZE - HMB_RECORD_HDR_SIZE;

pub const HMB_RECORD_FLAG_PAD: u16 = 1 << 0;
pub const HMB_RECORD_FLAG_MARKER: u16 = 1 << 1;

pub const HMB_ADVERT_MAGIC: u32 = 0x4142_4d48; // "HMBA"
pub const HMB_ADVERT_OFFSET: u64 = 0;
pub const HMB_TRACE_SLICE_ALIGN: u64 = 4096;
pub const HMB_ADVERT_STATE_NONE: u32 = 0;
pub const HMB_ADVERT_STATE_READY: u32 = 1;
/// NVMe: vendor-specific Set/Get Features identifier whose data is `HmbAdvert`.
pub const HMB_NVME_FID_TRACE: u8 = 0xc0;
/// NVMe: where the controller's declaration of the trace contract
/// (`hmb_nvme_trace_id`) sits in Identify Controller: the start of its
/// vendor-specific area.
pub const HMB_NVME_ID_VS_OFFSET: u64 = 3072;
/// NVMe: `hmb_nvme_trace_id::magic`, "HMBTRACE" in memory order.
pub const HMB_NVME_ID_MAGIC: u64 = 0x4543_4152_5442_4d48;
pub const HMB_DEVICE_MAGIC: u32 = 0x4442_4d48; // "HMBD"
pub const HMB_DEVICE_OFFSET: u64 = 64;

/// Size of one cache line as the ABI assumes it when separating writers.
pub const CACHE_LINE: usize = 64;

/// The ring header at the start of the trace slice. Three cache lines, one
/// writer each: module (identity), producer (head, flags, counters), module
/// on behalf of the consumer (tail).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_ring_hdr {
    pub magic: U32,
    pub version_major: U16,
    pub version_minor: U16,
    pub hdr_size: U32,
    pub max_record: U32,
    pub ring_size: U64,
    pub epoch: U64,
    pub reserved0: [u8; 32],

    pub head: U64,
    pub flags: U32,
    pub reserved1: U32,
    pub next_seq: U64,
    pub dropped_records: U64,
    pub overflow_events: U64,
    pub reserved2: [u8; 24],

    pub tail: U64,
    pub reserved3: [u8; 56],
}

/// The 32-byte header in front of every record's payload.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_record_hdr {
    pub length: U32,
    pub opcode: U16,
    pub flags: U16,
    pub seq: U64,
    pub timestamp_ns: U64,
    pub source: U32,
    pub reserved: U32,
}

impl hmb_record_hdr {
    /// A record's header as a producer writes it: flags and reserved 0,
    /// `length` the unpadded payload's (docs/abi.md, "struct hmb_record_hdr"). The
    /// one constructor the Rust producers share (the firmware model, the
    /// reference producer, the emulated controller's journal).
    pub fn record(payload_len: u32, opcode: u16, seq: u64, timestamp_ns: u64, source: u32) -> Self {
        Self {
            length: payload_len.into(),
            opcode: opcode.into(),
            flags: 0.into(),
            seq: seq.into(),
            timestamp_ns: timestamp_ns.into(),
            source: source.into(),
            reserved: 0.into(),
        }
    }

    /// The header of a pad record filling `bytes` (its own header included,
    /// at least `HMB_RECORD_HDR_SIZE`) up to the ring's end: the consumer
    /// skips it whole (docs/abi.md, decision 3).
    pub fn pad(bytes: u64) -> Self {
        Self {
            length: ((bytes - HMB_RECORD_HDR_SIZE as u64) as u32).into(),
            flags: HMB_RECORD_FLAG_PAD.into(),
            ..Default::default()
        }
    }
}

/// Advertisement block at offset 0 of the emulated HMB: how the module tells
/// the emulated device where the trace slice is (the NVMe core patch's job on
/// real hardware).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_advert {
    pub magic: U32,
    pub state: U32,
    pub generation: U64,
    pub slice_offset: U64,
    pub slice_len: U64,
    pub reserved: [u8; 32],
}

/// NVMe: the controller's declaration of the trace contract, the first 32
/// bytes of Identify Controller's vendor-specific area (docs/abi.md decision
/// 9). Only a controller that carries it gets a trace slice and the advert.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_nvme_trace_id {
    pub magic: U64,
    pub abi_major: U16,
    pub abi_minor: U16,
    pub fid: u8,
    pub reserved0: [u8; 3],
    pub max_ring_size: U64,
    pub reserved1: [u8; 8],
}

/// The emulated device's block, right after the advert, written by the
/// device only: its magic is the device's opt-in (the module binds only
/// when it finds it), `ack_generation` the last withdrawn advert generation
/// the device has stopped writing for.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_device_block {
    pub magic: U32,
    pub reserved0: U32,
    pub ack_generation: U64,
    pub reserved: [u8; 48],
}

/// Filled by `HMB_TRACE_IOC_GET_INFO`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_trace_info {
    pub abi_major: U16,
    pub abi_minor: U16,
    pub hdr_size: U32,
    pub ring_size: U64,
    pub mmap_len: U64,
    pub epoch: U64,
    pub flags: U32,
    pub nr_chunks: U32,
}

/// One chunk of the ring view: `HMB_TRACE_IOC_GET_CHUNK` fills `offset` and
/// `len` for `index`. The chunks tile `[0, mmap_len)` in index order.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_trace_chunk {
    pub index: U32,
    pub reserved: U32,
    pub offset: U64,
    pub len: U64,
}

/// Filled by `HMB_TRACE_IOC_GET_STATS`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct hmb_trace_stats {
    pub head: U64,
    pub tail: U64,
    pub dropped_records: U64,
    pub overflow_events: U64,
    pub freeze_count: U64,
    pub irq_count: U64,
    pub tail_publishes: U64,
    pub epoch: U64,
}

/// Byte offsets of the fields that producer and consumer access atomically
/// in shared memory.
pub mod offsets {
    use super::hmb_ring_hdr;
    use core::mem::offset_of;

    pub const MAGIC: usize = offset_of!(hmb_ring_hdr, magic);
    pub const EPOCH: usize = offset_of!(hmb_ring_hdr, epoch);
    pub const HEAD: usize = offset_of!(hmb_ring_hdr, head);
    pub const FLAGS: usize = offset_of!(hmb_ring_hdr, flags);
    pub const NEXT_SEQ: usize = offset_of!(hmb_ring_hdr, next_seq);
    pub const DROPPED_RECORDS: usize = offset_of!(hmb_ring_hdr, dropped_records);
    pub const OVERFLOW_EVENTS: usize = offset_of!(hmb_ring_hdr, overflow_events);
    pub const TAIL: usize = offset_of!(hmb_ring_hdr, tail);
}

impl hmb_ring_hdr {
    /// A freshly initialised header, as the module writes it before
    /// advertising the ring to the device.
    pub fn initialised(ring_size: u64, epoch: u64) -> Self {
        Self {
            magic: HMB_RING_MAGIC.into(),
            version_major: HMB_RING_VERSION_MAJOR.into(),
            version_minor: HMB_RING_VERSION_MINOR.into(),
            hdr_size: HMB_RING_HDR_SIZE.into(),
            max_record: HMB_RECORD_MAX_SIZE.into(),
            ring_size: ring_size.into(),
            epoch: epoch.into(),
            ..Self::default()
        }
    }
}

/// Whether `size` is a valid data-area size for a v1 ring.
pub fn ring_size_valid(size: u64) -> bool {
    size.is_power_of_two() && (HMB_RING_MIN_SIZE as u64..=HMB_RING_MAX_SIZE).contains(&size)
}

const _: () = {
    assert!(core::mem::size_of::<hmb_ring_hdr>() == 3 * CACHE_LINE);
    assert!(core::mem::offset_of!(hmb_ring_hdr, head) == CACHE_LINE);
    assert!(core::mem::offset_of!(hmb_ring_hdr, tail) == 2 * CACHE_LINE);
    assert!(core::mem::size_of::<hmb_record_hdr>() == HMB_RECORD_HDR_SIZE as usize);
    assert!(core::mem::size_of::<hmb_advert>() == 64);
    assert!(core::mem::size_of::<hmb_nvme_trace_id>() == 32);
    assert!(core::mem::size_of::<hmb_device_block>() == CACHE_LINE);
    assert!(core::mem::size_of::<hmb_trace_chunk>() == 24);
    assert!(HMB_DEVICE_OFFSET as usize == HMB_ADVERT_OFFSET as usize + core::mem::size_of::<hmb_advert>());
};

/// All-zero defaults: reserved bytes must be zero, and zero is what every
/// counter starts from.
macro_rules! zeroed_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                Self::new_zeroed()
            }
        }
    )*};
}
zeroed_default!(
    hmb_ring_hdr,
    hmb_record_hdr,
    hmb_advert,
    hmb_nvme_trace_id,
    hmb_device_block,
    hmb_trace_info,
    hmb_trace_chunk,
    hmb_trace_stats
);
