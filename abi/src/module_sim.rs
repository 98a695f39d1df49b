//! What the ring's owner (the kernel module) does, for host tests and the
//! fake devices (here, next to the reference producer, so that the daemon's
//! ring-file device needs no firmware model): initialise the header, publish a consumer tail with the
//! module's checks, and re-initialise after FROZEN.

use std::sync::atomic::Ordering::{Acquire, Release};

use crate::error::{AbiError, OwnerError};
use crate::layout::*;
use crate::shared::SharedRing;

/// Write a fresh header (epoch `epoch`) and zero the data area.
pub fn init(ring: &SharedRing, ring_size: u64, epoch: u64) -> Result<(), OwnerError> {
    if !ring_size_valid(ring_size) {
        return Err(AbiError::BadRingSize(ring_size).into());
    }
    let need = HMB_RING_HDR_SIZE as usize + ring_size as usize;
    if ring.len() < need {
        return Err(OwnerError::SliceTooShort { len: ring.len(), need });
    }
    // SAFETY: the whole slice is ours to write during (re)initialisation.
    unsafe {
        crate::sync::note_write(ring.base_ptr(), need);
        core::ptr::write_bytes(ring.base_ptr(), 0, need)
    };
    let hdr = hmb_ring_hdr::initialised(ring_size, epoch);
    ring.write_header(&hmb_ring_hdr { epoch: 0.into(), ..hdr });
    // Epoch last, with release: a producer waiting for a new epoch sees a
    // complete header.
    ring.atomic_u64(offsets::EPOCH).store(epoch, Release);
    Ok(())
}

/// HMB_TRACE_IOC_REINIT: only when FROZEN; epoch + 1, everything else fresh.
pub fn reinit(ring: &SharedRing) -> Result<u64, OwnerError> {
    let hdr = ring.header_snapshot();
    if ring.atomic_u32(offsets::FLAGS).load(Acquire) & HMB_RING_FLAG_FROZEN == 0 {
        return Err(OwnerError::NotFrozen);
    }
    let epoch = hdr.epoch.get() + 1;
    init(ring, hdr.ring_size.get(), epoch)?;
    Ok(epoch)
}

/// HMB_TRACE_IOC_PUBLISH_TAIL: aligned, not backwards, not beyond head.
pub fn publish_tail(ring: &SharedRing, tail: u64) -> Result<(), OwnerError> {
    let old = ring.atomic_u64(offsets::TAIL).load(Acquire);
    let head = ring.atomic_u64(offsets::HEAD).load(Acquire);
    let why = if tail & (HMB_RING_ALIGN as u64 - 1) != 0 {
        Some("not 8-byte aligned")
    } else if tail < old {
        Some("behind the old tail")
    } else if tail > head {
        Some("beyond head")
    } else {
        None
    };
    if let Some(why) = why {
        return Err(OwnerError::BadTail { tail, head, old, why });
    }
    ring.atomic_u64(offsets::TAIL).store(tail, Release);
    Ok(())
}
