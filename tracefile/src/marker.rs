//! Daemon markers: items the daemon writes itself, flagged
//! `HMB_RECORD_FLAG_MARKER` with seq, source and timestamp zero. Each encodes
//! to a fixed 56-byte array (32-byte header + 24-byte payload), so the daemon
//! can hand it to `writev` without allocating.

use hmb_trace_abi::{hmb_record_hdr, HMB_RECORD_FLAG_MARKER, HMB_RECORD_HDR_SIZE};
use zerocopy::IntoBytes;

use crate::error::FileError;

/// Records lost: `count` sequence numbers from `first_seq` never reached the file.
pub const MARKER_LOST: u16 = 0xFF01;
/// The ring froze (controller reset) in `epoch`.
pub const MARKER_FROZEN: u16 = 0xFF02;
/// A new ring epoch starts after this marker.
pub const MARKER_EPOCH: u16 = 0xFF03;

/// Payload bytes of every v1 marker (three u64).
pub const MARKER_PAYLOAD_SIZE: usize = 24;
/// Total bytes of every v1 marker item.
pub const MARKER_SIZE: usize = HMB_RECORD_HDR_SIZE as usize + MARKER_PAYLOAD_SIZE;

/// `last_seq` value in a FROZEN marker when the epoch wrote no record.
pub const NO_SEQ: u64 = u64::MAX;

/// A decoded daemon marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    /// `count` records starting at `first_seq` of `epoch` were dropped (by the
    /// device for lack of room, or lost for any other reason).
    Lost { first_seq: u64, count: u64, epoch: u64 },
    /// The ring of `epoch` froze. `last_seq` is the last record's seq written
    /// in that epoch (None if none); `next_seq` is the ring's final next_seq.
    Frozen {
        epoch: u64,
        last_seq: Option<u64>,
        next_seq: u64,
    },
    /// Items after this belong to `epoch`, whose ring has `ring_size` bytes.
    Epoch { epoch: u64, ring_size: u64 },
    /// A marker opcode this build does not know (a newer minor may add
    /// them): readers skip it.
    Unknown { opcode: u16 },
}

impl Marker {
    pub fn opcode(&self) -> u16 {
        match *self {
            Marker::Lost { .. } => MARKER_LOST,
            Marker::Frozen { .. } => MARKER_FROZEN,
            Marker::Epoch { .. } => MARKER_EPOCH,
            Marker::Unknown { opcode } => opcode,
        }
    }

    /// Encode a known marker. `Unknown` has no payload to write and encodes
    /// as a marker header with three zero words.
    pub fn encode(&self) -> [u8; MARKER_SIZE] {
        let words = match *self {
            Marker::Lost {
                first_seq,
                count,
                epoch,
            } => [first_seq, count, epoch],
            Marker::Frozen {
                epoch,
                last_seq,
                next_seq,
            } => [epoch, last_seq.unwrap_or(NO_SEQ), next_seq],
            Marker::Epoch { epoch, ring_size } => [epoch, ring_size, 0],
            Marker::Unknown { .. } => [0, 0, 0],
        };
        encode_words(self.opcode(), words)
    }

    /// Decode a marker item from its header and payload. A known opcode
    /// needs at least 24 payload bytes; extra bytes (a newer minor) are
    /// ignored.
    pub fn decode(offset: u64, hdr: &hmb_record_hdr, payload: &[u8]) -> Result<Self, FileError> {
        let opcode = hdr.opcode.get();
        let needs_words = matches!(opcode, MARKER_LOST | MARKER_FROZEN | MARKER_EPOCH);
        if !needs_words {
            return Ok(Marker::Unknown { opcode });
        }
        if payload.len() < MARKER_PAYLOAD_SIZE {
            return Err(FileError::BadMarker {
                offset,
                opcode,
                length: payload.len() as u32,
                need: MARKER_PAYLOAD_SIZE as u32,
            });
        }
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&payload[i * 8..i * 8 + 8]);
            u64::from_le_bytes(b)
        };
        Ok(match opcode {
            MARKER_LOST => Marker::Lost {
                first_seq: word(0),
                count: word(1),
                epoch: word(2),
            },
            MARKER_FROZEN => Marker::Frozen {
                epoch: word(0),
                last_seq: Some(word(1)).filter(|&s| s != NO_SEQ),
                next_seq: word(2),
            },
            _ => Marker::Epoch {
                epoch: word(0),
                ring_size: word(1),
            },
        })
    }
}

/// LOST marker bytes: `count` records from `first_seq` of `epoch` are missing.
pub fn encode_lost(first_seq: u64, count: u64, epoch: u64) -> [u8; MARKER_SIZE] {
    encode_words(MARKER_LOST, [first_seq, count, epoch])
}

/// FROZEN marker bytes; `last_seq` is `None` when the epoch wrote no record.
pub fn encode_frozen(epoch: u64, last_seq: Option<u64>, next_seq: u64) -> [u8; MARKER_SIZE] {
    encode_words(MARKER_FROZEN, [epoch, last_seq.unwrap_or(NO_SEQ), next_seq])
}

/// EPOCH marker bytes, written before the first item of every epoch after
/// the file's first.
pub fn encode_epoch(epoch: u64, ring_size: u64) -> [u8; MARKER_SIZE] {
    encode_words(MARKER_EPOCH, [epoch, ring_size, 0])
}

fn encode_words(opcode: u16, words: [u64; 3]) -> [u8; MARKER_SIZE] {
    let hdr = hmb_record_hdr {
        length: (MARKER_PAYLOAD_SIZE as u32).into(),
        opcode: opcode.into(),
        flags: HMB_RECORD_FLAG_MARKER.into(),
        ..hmb_record_hdr::default()
    };
    let mut out = [0u8; MARKER_SIZE];
    out[..HMB_RECORD_HDR_SIZE as usize].copy_from_slice(hdr.as_bytes());
    for (i, w) in words.iter().enumerate() {
        let at = HMB_RECORD_HDR_SIZE as usize + i * 8;
        out[at..at + 8].copy_from_slice(&w.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use zerocopy::FromBytes;

    fn round_trip(m: Marker) -> Marker {
        let bytes = m.encode();
        let (hdr, payload) = hmb_record_hdr::read_from_prefix(&bytes).unwrap();
        assert_eq!(hdr.flags.get(), HMB_RECORD_FLAG_MARKER);
        assert_eq!((hdr.seq.get(), hdr.timestamp_ns.get(), hdr.source.get()), (0, 0, 0));
        Marker::decode(0, &hdr, payload).unwrap()
    }

    #[test]
    fn markers_round_trip() {
        for m in [
            Marker::Lost {
                first_seq: 10,
                count: 5,
                epoch: 2,
            },
            Marker::Frozen {
                epoch: 3,
                last_seq: Some(99),
                next_seq: 104,
            },
            Marker::Frozen {
                epoch: 3,
                last_seq: None,
                next_seq: 0,
            },
            Marker::Epoch {
                epoch: 4,
                ring_size: 1 << 20,
            },
        ] {
            assert_eq!(round_trip(m), m);
        }
    }

    #[test]
    fn free_functions_match_enum_encoding() {
        assert_eq!(
            encode_lost(1, 2, 3),
            Marker::Lost {
                first_seq: 1,
                count: 2,
                epoch: 3
            }
            .encode()
        );
        assert_eq!(
            encode_frozen(1, None, 3),
            Marker::Frozen {
                epoch: 1,
                last_seq: None,
                next_seq: 3
            }
            .encode()
        );
        assert_eq!(
            encode_epoch(5, 8192),
            Marker::Epoch {
                epoch: 5,
                ring_size: 8192
            }
            .encode()
        );
        let bytes = encode_lost(0x0102, 3, 4);
        assert_eq!(&bytes[0..4], &24u32.to_le_bytes());
        assert_eq!(&bytes[4..6], &0xFF01u16.to_le_bytes());
        assert_eq!(&bytes[6..8], &2u16.to_le_bytes());
        assert_eq!(&bytes[32..40], &0x0102u64.to_le_bytes());
    }

    #[test]
    fn short_known_marker_is_an_error_unknown_is_kept() {
        let bytes = encode_lost(1, 2, 3);
        let (mut hdr, payload) = hmb_record_hdr::read_from_prefix(&bytes).unwrap();
        assert!(matches!(
            Marker::decode(8, &hdr, &payload[..16]),
            Err(FileError::BadMarker { offset: 8, .. })
        ));
        hdr.opcode = 0xFF7Au16.into();
        assert_eq!(
            Marker::decode(0, &hdr, &[]).unwrap(),
            Marker::Unknown { opcode: 0xFF7A }
        );
    }
}
