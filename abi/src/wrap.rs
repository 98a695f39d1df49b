//! The wrap rule: where the next record goes, and how many bytes are skipped
//! before it so that no record ever straddles the end of the data area.

use crate::layout::{HMB_RECORD_HDR_SIZE, HMB_RING_ALIGN};

/// Bytes a record with `payload_len` payload bytes occupies in the ring:
/// header plus payload, rounded up to 8.
pub const fn align_record(payload_len: u32) -> u32 {
    let raw = HMB_RECORD_HDR_SIZE + payload_len;
    (raw + HMB_RING_ALIGN - 1) & !(HMB_RING_ALIGN - 1)
}

/// How the producer places a record of `size` bytes at cursor `head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// The record fits before the ring end: write it at `head`.
    Fits,
    /// Fewer than 32 bytes (8, 16 or 24) remain before the ring end: skip
    /// them silently (nothing is written there) and write at offset 0.
    Skip { bytes: u64 },
    /// 32 bytes or more remain but not enough for the record: write a PAD
    /// record header covering exactly `bytes`, then the record at offset 0.
    Pad { bytes: u64 },
}

impl Placement {
    /// Bytes consumed before the record itself.
    pub fn filler(self) -> u64 {
        match self {
            Placement::Fits => 0,
            Placement::Skip { bytes } | Placement::Pad { bytes } => bytes,
        }
    }
}

/// Decide the placement of a record of `size` bytes (already aligned, at most
/// 4096) at cursor `head` in a ring of `ring_size` bytes (a power of two).
pub fn placement(head: u64, ring_size: u64, size: u32) -> Placement {
    let room = ring_size - (head & (ring_size - 1));
    if room >= size as u64 {
        Placement::Fits
    } else if room < HMB_RECORD_HDR_SIZE as u64 {
        Placement::Skip { bytes: room }
    } else {
        Placement::Pad { bytes: room }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_sizes_round_up_to_eight() {
        assert_eq!(align_record(0), 32);
        assert_eq!(align_record(1), 40);
        assert_eq!(align_record(8), 40);
        assert_eq!(align_record(4064), 4096);
    }

    #[test]
    fn small_tails_are_skipped_larger_ones_padded() {
        let ring = 8192u64;
        for room in [8u64, 16, 24] {
            assert_eq!(placement(ring - room, ring, 40), Placement::Skip { bytes: room });
        }
        assert_eq!(placement(ring - 32, ring, 40), Placement::Pad { bytes: 32 });
        assert_eq!(placement(ring - 40, ring, 40), Placement::Fits);
        // Cursors are monotonic: the second lap behaves like the first.
        assert_eq!(placement(3 * ring - 16, ring, 40), Placement::Skip { bytes: 16 });
    }
}
