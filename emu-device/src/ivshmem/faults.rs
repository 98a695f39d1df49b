//! Faults written straight into the ring in shared memory, the way a buggy
//! or hostile device would. Resets and stalls go through the firmware model
//! (see `device.rs`); these change bytes the model does not own.

use std::sync::atomic::Ordering;

use hmb_trace_abi::{
    hmb_record_hdr, offsets, HMB_RECORD_HDR_SIZE, HMB_RECORD_MAX_PAYLOAD, HMB_RING_HDR_SIZE, HMB_RING_MAGIC,
};
use serde::Serialize;
use zerocopy::IntoBytes;

use crate::control::VersionPart;
use crate::error::EmuError;
use crate::ivshmem::advert::Slice;
use crate::ivshmem::hmb::MemRegion;

/// The magic `corrupt-magic` writes: every byte of the real one flipped.
pub const CORRUPT_MAGIC: u32 = !HMB_RING_MAGIC;
/// Payload length the hostile record claims: past the 4064-byte maximum.
pub const HOSTILE_LENGTH: u32 = HMB_RECORD_MAX_PAYLOAD + 4096;

const VERSION_MAJOR_OFF: usize = core::mem::offset_of!(hmb_trace_abi::hmb_ring_hdr, version_major);
const VERSION_MINOR_OFF: usize = core::mem::offset_of!(hmb_trace_abi::hmb_ring_hdr, version_minor);

/// What a fault changed, for the control response and the ground truth.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FaultEffect {
    pub fault: String,
    pub epoch: u64,
    pub before: u64,
    pub after: u64,
}

fn hdr_off(slice: &Slice, field: usize) -> usize {
    slice.offset as usize + field
}

/// Overwrite the ring magic (it stays wrong until the module re-initialises).
pub(crate) fn corrupt_magic(mem: &MemRegion, slice: &Slice) -> Result<FaultEffect, EmuError> {
    let off = hdr_off(slice, offsets::MAGIC);
    let before = mem.load_u32(off)?;
    mem.store_u32(off, CORRUPT_MAGIC)?;
    Ok(FaultEffect {
        fault: "corrupt-magic".into(),
        epoch: slice.epoch,
        before: before.into(),
        after: CORRUPT_MAGIC.into(),
    })
}

/// The bit `unknown-flag` sets: the lowest one ABI v1 leaves undefined.
pub(crate) const UNKNOWN_FLAG: u32 = 1 << 9;

/// Set a flag bit ABI v1 does not define. Atomic OR, because the producer
/// updates the same word with its own atomic OR/AND.
pub(crate) fn unknown_flag(mem: &MemRegion, slice: &Slice) -> Result<FaultEffect, EmuError> {
    let flags = mem.atomic_u32(hdr_off(slice, offsets::FLAGS))?;
    let before = flags.fetch_or(UNKNOWN_FLAG, std::sync::atomic::Ordering::Release);
    Ok(FaultEffect {
        fault: "unknown-flag".into(),
        epoch: slice.epoch,
        before: before.into(),
        after: (before | UNKNOWN_FLAG).into(),
    })
}

/// Raise the major or minor version by one.
pub(crate) fn bump_version(mem: &MemRegion, slice: &Slice, part: VersionPart) -> Result<FaultEffect, EmuError> {
    let (field, name) = match part {
        VersionPart::Major => (VERSION_MAJOR_OFF, "bump-version major"),
        VersionPart::Minor => (VERSION_MINOR_OFF, "bump-version minor"),
    };
    let off = hdr_off(slice, field);
    let mut raw = [0u8; 2];
    mem.read(off, &mut raw)?;
    let before = u16::from_le_bytes(raw);
    let after = before.wrapping_add(1);
    mem.store_u16(off, after)?;
    Ok(FaultEffect {
        fault: name.into(),
        epoch: slice.epoch,
        before: before.into(),
        after: after.into(),
    })
}

/// Publish one record whose header claims `HOSTILE_LENGTH` payload bytes
/// while only its 32-byte header is published, at the producer's `head`,
/// carrying sequence `seq`. The producer must be stopped (it owns head and
/// next_seq) and must not resume on this epoch: its cached cursors are now
/// stale. Returns the new head.
pub(crate) fn hostile_record(mem: &MemRegion, slice: &Slice, head: u64, seq: u64) -> Result<FaultEffect, EmuError> {
    let ring_size = slice.ring_size;
    let mut pos = head;
    let room = ring_size - (pos & (ring_size - 1));
    if room < HMB_RECORD_HDR_SIZE as u64 {
        // Same skip rule as a real producer, so only the length lies.
        pos += room;
    }
    let tail = mem.load_u64(hdr_off(slice, offsets::TAIL))?;
    if (pos + HMB_RECORD_HDR_SIZE as u64).saturating_sub(tail) > ring_size {
        return Err(EmuError::Control("ring too full to place the hostile record".into()));
    }
    let data = slice.offset as usize + HMB_RING_HDR_SIZE as usize;
    let rec = hmb_record_hdr {
        length: HOSTILE_LENGTH.into(),
        seq: seq.into(),
        opcode: 0x7fff.into(),
        ..Default::default()
    };
    mem.write(data + (pos & (ring_size - 1)) as usize, rec.as_bytes())?;
    let new_head = pos + HMB_RECORD_HDR_SIZE as u64;
    mem.atomic_u64(hdr_off(slice, offsets::NEXT_SEQ))?
        .store(seq.wrapping_add(1), Ordering::Relaxed);
    mem.atomic_u64(hdr_off(slice, offsets::HEAD))?
        .store(new_head, Ordering::Release);
    Ok(FaultEffect {
        fault: "hostile".into(),
        epoch: slice.epoch,
        before: head,
        after: new_head,
    })
}

/// Rewrite the two header fields only the module may write: `tail` to 0
/// (backwards) and `epoch` one lower. A hostile device can do this; the
/// module must check against its own copies, not re-read them.
pub(crate) fn rewind_header(mem: &MemRegion, slice: &Slice) -> Result<FaultEffect, EmuError> {
    let tail_off = hdr_off(slice, offsets::TAIL);
    let epoch_off = hdr_off(slice, offsets::EPOCH);
    let tail = mem.load_u64(tail_off)?;
    let epoch = mem.load_u64(epoch_off)?;
    mem.atomic_u64(tail_off)?.store(0, Ordering::Release);
    mem.store_u64(epoch_off, epoch.saturating_sub(1))?;
    Ok(FaultEffect {
        fault: "rewind-header".into(),
        epoch: slice.epoch,
        before: tail,
        after: 0,
    })
}

/// All-ones over everything from the advert to the end of the ring header
/// page: what a vanished device's BAR reads. The records stay (nothing
/// reads them once the header is gone).
pub(crate) fn vanish(mem: &MemRegion, slice: &Slice) -> Result<FaultEffect, EmuError> {
    let end = slice.offset as usize + HMB_RING_HDR_SIZE as usize;
    let head = mem.load_u64(hdr_off(slice, offsets::HEAD))?;
    mem.write(0, &vec![0xff; end])?;
    Ok(FaultEffect {
        fault: "vanish".into(),
        epoch: slice.epoch,
        before: head,
        after: u64::MAX,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ivshmem::advert::tests::module_advertise;
    use crate::ivshmem::advert::{read_advert, Slice};
    use crate::ivshmem::hmb::Hmb;
    use hmb_trace_abi::{check_compat, parse_record_at, AbiError, RingSnapshot};

    fn setup() -> (Hmb, Slice) {
        let h = Hmb::create(1 << 20).unwrap();
        module_advertise(&h, 4096, 8192, 5);
        let s = read_advert(&h, 0).unwrap();
        (h, s)
    }

    fn snapshot(h: &Hmb, s: &Slice) -> hmb_trace_abi::hmb_ring_hdr {
        let mut raw = vec![0u8; 192];
        h.read(s.offset as usize, &mut raw).unwrap();
        RingSnapshot::parse(&raw).unwrap().hdr
    }

    #[test]
    fn vanish_makes_advert_device_block_and_header_read_all_ones() {
        let (h, s) = setup();
        h.store_u64(s.offset as usize + HMB_RING_HDR_SIZE as usize, 0x1234)
            .unwrap();
        let eff = vanish(&h, &s).unwrap();
        assert_eq!((eff.fault.as_str(), eff.after), ("vanish", u64::MAX));
        for off in [
            0,
            64,
            s.offset as usize,
            s.offset as usize + offsets::HEAD,
            s.offset as usize + 4088,
        ] {
            assert_eq!(h.load_u64(off).unwrap(), u64::MAX, "offset {off}");
        }
        assert_eq!(
            h.load_u64(s.offset as usize + HMB_RING_HDR_SIZE as usize).unwrap(),
            0x1234,
            "the data area is left alone"
        );
        assert!(read_advert(&h, 0).is_err());
    }

    #[test]
    fn corrupt_magic_is_what_a_consumer_rejects() {
        let (h, s) = setup();
        let eff = corrupt_magic(&h, &s).unwrap();
        assert_eq!(eff.before, HMB_RING_MAGIC as u64);
        assert!(matches!(
            check_compat(&snapshot(&h, &s)),
            Err(AbiError::BadMagic {
                found: CORRUPT_MAGIC,
                ..
            })
        ));
    }

    #[test]
    fn bumping_major_is_fatal_and_minor_is_not() {
        let (h, s) = setup();
        bump_version(&h, &s, VersionPart::Minor).unwrap();
        let c = check_compat(&snapshot(&h, &s)).unwrap();
        assert!(c.newer_minor);
        let eff = bump_version(&h, &s, VersionPart::Major).unwrap();
        assert_eq!((eff.before, eff.after), (1, 2));
        assert!(matches!(
            check_compat(&snapshot(&h, &s)),
            Err(AbiError::UnsupportedMajor { found: 2, .. })
        ));
        // Nothing else in the header moved.
        let hdr = snapshot(&h, &s);
        assert_eq!(
            (hdr.magic.get(), hdr.version_minor.get(), hdr.epoch.get()),
            (HMB_RING_MAGIC, 1, 5)
        );
    }

    #[test]
    fn rewind_header_moves_tail_and_epoch_back() {
        let (h, s) = setup();
        h.store_u64(s.offset as usize + offsets::TAIL, 4096).unwrap();
        let eff = rewind_header(&h, &s).unwrap();
        assert_eq!((eff.before, eff.after), (4096, 0));
        let hdr = snapshot(&h, &s);
        assert_eq!((hdr.tail.get(), hdr.epoch.get()), (0, 4));
    }

    #[test]
    fn the_hostile_record_is_published_and_rejected_by_the_parser() {
        let (h, s) = setup();
        let eff = hostile_record(&h, &s, 0, 0).unwrap();
        assert_eq!(eff.after, 32);
        let hdr = snapshot(&h, &s);
        assert_eq!((hdr.head.get(), hdr.next_seq.get()), (32, 1));
        let mut data = vec![0u8; 8192];
        h.read(s.offset as usize + 4096, &mut data).unwrap();
        assert!(matches!(
            parse_record_at(&data, 0, 32),
            Err(AbiError::LengthTooLarge {
                pos: 0,
                length: HOSTILE_LENGTH
            })
        ));
    }

    #[test]
    fn the_hostile_record_follows_the_skip_rule_at_the_ring_end() {
        let (h, s) = setup();
        h.store_u64(s.offset as usize + offsets::TAIL, 8192 - 16).unwrap();
        let eff = hostile_record(&h, &s, 8192 - 16, 9).unwrap();
        assert_eq!(eff.after, 8192 + 32);
        let mut data = vec![0u8; 8192];
        h.read(s.offset as usize + 4096, &mut data).unwrap();
        assert!(matches!(
            parse_record_at(&data, 8192, 8192 + 32),
            Err(AbiError::LengthTooLarge { .. })
        ));
    }
}
