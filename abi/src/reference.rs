//! A reference producer and decoder over a plain byte image (header page plus
//! data area). Not concurrent and not fast: it exists to state the rules of
//! docs/abi.md as code, to generate the golden vectors, and to be the oracle
//! the real producer and consumer are compared with.

use serde::{Deserialize, Serialize};
use zerocopy::{FromBytes, IntoBytes};

use crate::error::AbiError;
use crate::layout::*;
use crate::parse::{check_compat, parse_record_at, RecordAt, RingSnapshot};
use crate::wrap::{align_record, placement, Placement};

/// Outcome of one production attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Produced {
    Written {
        seq: u64,
    },
    Dropped {
        seq: u64,
    },
    /// FROZEN is set: nothing happens, no sequence number is used.
    Frozen,
}

/// A ring in a byte image, produced into by the rules of docs/abi.md.
#[derive(Debug, Clone)]
pub struct RefRing {
    pub image: Vec<u8>,
}

impl RefRing {
    pub fn new(ring_size: u64, epoch: u64) -> Self {
        let mut image = vec![0u8; HMB_RING_HDR_SIZE as usize + ring_size as usize];
        hmb_ring_hdr::initialised(ring_size, epoch)
            .write_to_prefix(&mut image)
            .expect("image holds a header");
        Self { image }
    }

    pub fn hdr(&self) -> hmb_ring_hdr {
        hmb_ring_hdr::read_from_prefix(&self.image)
            .expect("image holds a header")
            .0
    }

    pub fn set_hdr(&mut self, hdr: &hmb_ring_hdr) {
        hdr.write_to_prefix(&mut self.image).expect("image holds a header");
    }

    fn data_mut(&mut self) -> &mut [u8] {
        &mut self.image[HMB_RING_HDR_SIZE as usize..]
    }

    /// Produce one record, exactly as a device does.
    pub fn produce(&mut self, opcode: u16, source: u32, timestamp_ns: u64, payload: &[u8]) -> Produced {
        let mut hdr = self.hdr();
        if hdr.flags.get() & HMB_RING_FLAG_FROZEN != 0 {
            return Produced::Frozen;
        }
        let ring_size = hdr.ring_size.get();
        let seq = hdr.next_seq.get();
        // Wrapping: a test may place the producer at u64::MAX to build a
        // hostile ring (a real producer never gets 2^64 records far).
        hdr.next_seq = seq.wrapping_add(1).into();
        let size = align_record(payload.len() as u32);
        let head = hdr.head.get();
        let place = placement(head, ring_size, size);
        let free = ring_size - (head - hdr.tail.get());
        if payload.len() > HMB_RECORD_MAX_PAYLOAD as usize || free < place.filler() + size as u64 {
            hdr.dropped_records = (hdr.dropped_records.get() + 1).into();
            if hdr.flags.get() & HMB_RING_FLAG_OVERFLOWED == 0 {
                hdr.overflow_events = (hdr.overflow_events.get() + 1).into();
                hdr.flags = (hdr.flags.get() | HMB_RING_FLAG_OVERFLOWED).into();
            }
            self.set_hdr(&hdr);
            return Produced::Dropped { seq };
        }
        let mut cursor = head;
        if let Placement::Pad { bytes } = place {
            let pad = hmb_record_hdr::pad(bytes);
            let off = (cursor & (ring_size - 1)) as usize;
            pad.write_to_prefix(&mut self.data_mut()[off..]).expect("pad fits");
        }
        cursor += place.filler();
        let off = (cursor & (ring_size - 1)) as usize;
        let rec = hmb_record_hdr::record(payload.len() as u32, opcode, seq, timestamp_ns, source);
        let data = self.data_mut();
        let slot = &mut data[off..off + size as usize];
        slot.fill(0);
        slot[..HMB_RECORD_HDR_SIZE as usize].copy_from_slice(rec.as_bytes());
        slot[HMB_RECORD_HDR_SIZE as usize..][..payload.len()].copy_from_slice(payload);
        hdr.head = (cursor + size as u64).into();
        hdr.flags = (hdr.flags.get() & !HMB_RING_FLAG_OVERFLOWED).into();
        self.set_hdr(&hdr);
        Produced::Written { seq }
    }

    /// The module publishing a consumer tail.
    pub fn publish_tail(&mut self, tail: u64) {
        let mut hdr = self.hdr();
        hdr.tail = tail.into();
        self.set_hdr(&hdr);
    }

    /// A controller reset: the device stops and sets FROZEN.
    pub fn freeze(&mut self) {
        let mut hdr = self.hdr();
        hdr.flags = (hdr.flags.get() | HMB_RING_FLAG_FROZEN).into();
        self.set_hdr(&hdr);
    }

    /// The module re-initialising after FROZEN: a new epoch, empty ring.
    pub fn reinit(&mut self) {
        let old = self.hdr();
        let ring_size = old.ring_size.get();
        self.data_mut().fill(0);
        self.set_hdr(&hmb_ring_hdr::initialised(ring_size, old.epoch.get() + 1));
    }
}

/// One decoded item of a ring window, as the vectors' expected output lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DecodedItem {
    Record {
        pos: u64,
        seq: u64,
        opcode: u16,
        source: u32,
        timestamp_ns: u64,
        length: u32,
        payload_hex: String,
    },
    Lost {
        first_seq: u64,
        count: u64,
    },
    Skip {
        pos: u64,
        bytes: u64,
    },
    Pad {
        pos: u64,
        bytes: u64,
    },
}

/// A whole ring image decoded: header fields and the `[tail, head)` window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decoded {
    pub version: String,
    pub ring_size: u64,
    pub epoch: u64,
    pub head: u64,
    pub tail: u64,
    pub flags: Vec<String>,
    pub next_seq: u64,
    pub dropped_records: u64,
    pub overflow_events: u64,
    pub items: Vec<DecodedItem>,
}

fn flag_names(flags: u32) -> Vec<String> {
    let mut names = Vec::new();
    if flags & HMB_RING_FLAG_OVERFLOWED != 0 {
        names.push("OVERFLOWED".to_string());
    }
    if flags & HMB_RING_FLAG_FROZEN != 0 {
        names.push("FROZEN".to_string());
    }
    if flags & !HMB_RING_FLAGS_KNOWN != 0 {
        names.push(format!("UNKNOWN({:#x})", flags & !HMB_RING_FLAGS_KNOWN));
    }
    names
}

/// Decode the published window of a ring image. Losses are derived from
/// sequence gaps; when FROZEN is set the producer has stopped, so drops after
/// the last record (`next_seq` beyond it) are final and reported too.
pub fn decode(image: &[u8]) -> Result<Decoded, AbiError> {
    let snap = RingSnapshot::parse(image)?;
    let hdr = snap.hdr;
    check_compat(&hdr)?;
    let ring_size = hdr.ring_size.get();
    let need = HMB_RING_HDR_SIZE as usize + ring_size as usize;
    let data = image.get(HMB_RING_HDR_SIZE as usize..need).ok_or(AbiError::Short {
        what: "ring data area",
        have: image.len(),
        need,
    })?;
    let (head, tail) = (hdr.head.get(), hdr.tail.get());
    RingSnapshot::check_window(head, tail, ring_size)?;
    let mut items = Vec::new();
    let mut expected: Option<u64> = if tail == 0 { Some(0) } else { None };
    let mut pos = tail;
    while pos < head {
        let item = parse_record_at(data, pos, head)?;
        match item {
            RecordAt::Skip { bytes } => items.push(DecodedItem::Skip { pos, bytes }),
            RecordAt::Pad { bytes } => items.push(DecodedItem::Pad { pos, bytes }),
            RecordAt::Record { hdr: rec, offset, .. } => {
                let seq = rec.seq.get();
                if seq == u64::MAX {
                    return Err(AbiError::SeqExhausted { pos, seq });
                }
                let want = expected.unwrap_or(seq);
                if seq < want {
                    return Err(AbiError::SeqBackwards {
                        pos,
                        seq,
                        expected: want,
                    });
                }
                if seq > want {
                    items.push(DecodedItem::Lost {
                        first_seq: want,
                        count: seq - want,
                    });
                }
                expected = Some(seq + 1);
                let payload = &data[offset + HMB_RECORD_HDR_SIZE as usize..][..rec.length.get() as usize];
                items.push(DecodedItem::Record {
                    pos,
                    seq,
                    opcode: rec.opcode.get(),
                    source: rec.source.get(),
                    timestamp_ns: rec.timestamp_ns.get(),
                    length: rec.length.get(),
                    payload_hex: hex(payload),
                });
            }
        }
        pos += item.advance();
    }
    let next_seq = hdr.next_seq.get();
    if hdr.flags.get() & HMB_RING_FLAG_FROZEN != 0 {
        if let Some(want) = expected {
            if next_seq > want {
                items.push(DecodedItem::Lost {
                    first_seq: want,
                    count: next_seq - want,
                });
            }
        }
    }
    Ok(Decoded {
        version: format!("{}.{}", hdr.version_major.get(), hdr.version_minor.get()),
        ring_size,
        epoch: hdr.epoch.get(),
        head,
        tail,
        flags: flag_names(hdr.flags.get()),
        next_seq,
        dropped_records: hdr.dropped_records.get(),
        overflow_events: hdr.overflow_events.get(),
        items,
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
