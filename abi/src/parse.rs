//! Safe parsing of untrusted ring bytes: the header and one record at a
//! cursor. Shared by the reference decoder, the daemon's consumer core and the
//! analyzer, so every consumer applies the same checks.

use zerocopy::FromBytes;

use crate::error::AbiError;
use crate::layout::*;
use crate::wrap::align_record;

/// What a consumer learns from a header that passed `check_compat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compat {
    /// The producer speaks a newer minor version: fine, reserved bytes may
    /// carry data this consumer ignores.
    pub newer_minor: bool,
    /// Flag bits this consumer does not know: log them and continue.
    pub unknown_flags: u32,
}

/// Check identity fields of a ring header. Errors are fatal for a consumer.
pub fn check_compat(hdr: &hmb_ring_hdr) -> Result<Compat, AbiError> {
    let magic = hdr.magic.get();
    if magic != HMB_RING_MAGIC {
        return Err(AbiError::BadMagic {
            found: magic,
            expected: HMB_RING_MAGIC,
        });
    }
    let major = hdr.version_major.get();
    if major != HMB_RING_VERSION_MAJOR {
        return Err(AbiError::UnsupportedMajor {
            found: major,
            supported: HMB_RING_VERSION_MAJOR,
        });
    }
    if hdr.hdr_size.get() != HMB_RING_HDR_SIZE {
        return Err(AbiError::BadHeaderSize(hdr.hdr_size.get()));
    }
    if hdr.max_record.get() != HMB_RECORD_MAX_SIZE {
        return Err(AbiError::BadMaxRecord(hdr.max_record.get()));
    }
    if !ring_size_valid(hdr.ring_size.get()) {
        return Err(AbiError::BadRingSize(hdr.ring_size.get()));
    }
    Ok(Compat {
        newer_minor: hdr.version_minor.get() > HMB_RING_VERSION_MINOR,
        unknown_flags: hdr.flags.get() & !HMB_RING_FLAGS_KNOWN,
    })
}

/// A ring header copied out of untrusted bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSnapshot {
    pub hdr: hmb_ring_hdr,
}

impl RingSnapshot {
    pub fn parse(bytes: &[u8]) -> Result<Self, AbiError> {
        let (hdr, _) = hmb_ring_hdr::read_from_prefix(bytes).map_err(|_| AbiError::Short {
            what: "ring header",
            have: bytes.len(),
            need: core::mem::size_of::<hmb_ring_hdr>(),
        })?;
        Ok(Self { hdr })
    }

    /// Check that `[tail, head)` is a possible window for this ring.
    pub fn check_window(head: u64, tail: u64, ring_size: u64) -> Result<(), AbiError> {
        if head < tail {
            return Err(AbiError::HeadBehindTail { head, tail });
        }
        if head - tail > ring_size {
            return Err(AbiError::HeadTooFarAhead { head, tail, ring_size });
        }
        if !head.is_multiple_of(HMB_RING_ALIGN as u64) {
            return Err(AbiError::Misaligned(head));
        }
        if !tail.is_multiple_of(HMB_RING_ALIGN as u64) {
            return Err(AbiError::Misaligned(tail));
        }
        Ok(())
    }
}

/// What sits at a consumer cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordAt {
    /// Fewer than 32 bytes to the ring end: skip them, nothing was written.
    Skip { bytes: u64 },
    /// A PAD record filling the rest of the lap.
    Pad { bytes: u64 },
    /// A record: its header, its offset in the data area and its aligned size.
    Record {
        hdr: hmb_record_hdr,
        offset: usize,
        size: u32,
    },
}

impl RecordAt {
    /// Bytes the cursor advances past this item.
    pub fn advance(&self) -> u64 {
        match *self {
            RecordAt::Skip { bytes } | RecordAt::Pad { bytes } => bytes,
            RecordAt::Record { size, .. } => size as u64,
        }
    }
}

/// Parse the item at cursor `pos`, given that `[pos, head)` is published.
/// `data` is the whole data area (`ring_size` bytes, a power of two).
///
/// A data area outside the ABI's sizes is refused, not only one that is not
/// a power of two: below `HMB_RING_ALIGN` bytes a lap's end would be a
/// misaligned skip (found by the ring_parse fuzz target with an 8-byte area).
pub fn parse_record_at(data: &[u8], pos: u64, head: u64) -> Result<RecordAt, AbiError> {
    let ring_size = data.len() as u64;
    if !ring_size_valid(ring_size) {
        return Err(AbiError::BadRingSize(ring_size));
    }
    if !pos.is_multiple_of(HMB_RING_ALIGN as u64) {
        return Err(AbiError::Misaligned(pos));
    }
    let available = head.saturating_sub(pos);
    let offset = (pos & (ring_size - 1)) as usize;
    let room = ring_size - offset as u64;
    if room < HMB_RECORD_HDR_SIZE as u64 {
        if available < room {
            return Err(AbiError::PastHead {
                pos,
                size: room as u32,
                available,
            });
        }
        return Ok(RecordAt::Skip { bytes: room });
    }
    if available < HMB_RECORD_HDR_SIZE as u64 {
        return Err(AbiError::PastHead {
            pos,
            size: HMB_RECORD_HDR_SIZE,
            available,
        });
    }
    let hdr = match hmb_record_hdr::read_from_prefix(&data[offset..]) {
        Ok((hdr, _)) => hdr,
        Err(_) => unreachable_short(room),
    };
    let length = hdr.length.get();
    let flags = hdr.flags.get();
    if flags & HMB_RECORD_FLAG_PAD != 0 {
        if length as u64 != room - HMB_RECORD_HDR_SIZE as u64 {
            return Err(AbiError::BadPad { pos, length, room });
        }
        if available < room {
            return Err(AbiError::PastHead {
                pos,
                size: room as u32,
                available,
            });
        }
        return Ok(RecordAt::Pad { bytes: room });
    }
    if flags & HMB_RECORD_FLAG_MARKER != 0 {
        return Err(AbiError::BadRecordFlags { pos, flags });
    }
    if length > HMB_RECORD_MAX_PAYLOAD {
        return Err(AbiError::LengthTooLarge { pos, length });
    }
    let size = align_record(length);
    if size as u64 > room {
        return Err(AbiError::Straddles { pos, size, room });
    }
    if size as u64 > available {
        return Err(AbiError::PastHead { pos, size, available });
    }
    Ok(RecordAt::Record { hdr, offset, size })
}

/// `room >= 32` was checked, so the prefix read cannot fail; returning a
/// default keeps this path panic-free regardless.
fn unreachable_short(_room: u64) -> hmb_record_hdr {
    hmb_record_hdr::default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Regression (ring_parse fuzz target): an 8-byte data area gave an
    /// 8-byte skip, so the next cursor was misaligned.
    #[test]
    fn data_area_below_the_minimum_is_refused() {
        for len in [8usize, 16, 32, 4096] {
            let data = vec![0u8; len];
            assert_eq!(
                parse_record_at(&data, 0, 64),
                Err(AbiError::BadRingSize(len as u64)),
                "data area of {len} bytes"
            );
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 8192), pos in any::<u64>(), head in any::<u64>()) {
            let _ = parse_record_at(&data, pos & !7, head);
            let _ = parse_record_at(&data, pos, head);
            if let Ok(s) = RingSnapshot::parse(&data) { let _ = check_compat(&s.hdr); }
        }
    }

    #[test]
    fn short_header_is_an_error() {
        assert!(matches!(RingSnapshot::parse(&[0u8; 100]), Err(AbiError::Short { .. })));
    }
}
