//! The controller's own memory of its newest trace records, served as the
//! Telemetry Host-Initiated log (07h) for hosts without the patched driver
//! (docs/nvme-controller.md, "Telemetry").
//!
//! The history holds what the HMB ring got (records of an adopted epoch,
//! drops as LOST, FROZEN) and, while no slice is adopted, the records the
//! controller would have traced, under epoch 0 with sequence numbers of
//! their own (ring epochs are generations, which start at 1). A snapshot is
//! a trace.bin stream (docs/trace-file.md), so `hmb-trace-analyze` reads
//! the log's data area as it is; the Reason Identifier
//! (`hmb_trace_file::TelemetryReason`) gives the stream's length.
//!
//! The history's bound is a controller option (`serve-nvme
//! --telemetry-history`), at most [`MAX_HISTORY_BYTES`]: the whole stream
//! then fits data areas 1-3, so Data Area 4 is never needed (every item is
//! counted with the EPOCH marker it may need in front of it).

use std::collections::VecDeque;

use hmb_trace_abi::{align_record, HMB_RING_MIN_SIZE, HMB_RING_VERSION_MAJOR, HMB_RING_VERSION_MINOR};
use hmb_trace_file::{FileHeader, Marker, TraceWriter};

/// The epoch of records produced while no slice is adopted.
pub const UNADOPTED_EPOCH: u64 = 0;

/// Default bound of the history, in trace.bin bytes.
pub const DEFAULT_HISTORY_BYTES: usize = 4 << 20;
/// Largest bound: the stream (its 64-byte header and the history) fits the
/// 65535 blocks of data areas 1-3.
pub const MAX_HISTORY_BYTES: usize = hmb_nvme::TELEMETRY_MAX_DATA_BYTES - hmb_trace_file::FILE_HEADER_SIZE;
/// Smallest bound: room for the largest record.
pub const MIN_HISTORY_BYTES: usize = 64 << 10;

/// A history bound outside [`MIN_HISTORY_BYTES`]..=[`MAX_HISTORY_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a telemetry history of {0} bytes: it must hold the largest record ({MIN_HISTORY_BYTES} bytes at least) and \
     fit data areas 1-3 ({MAX_HISTORY_BYTES} bytes at most)"
)]
pub struct HistoryBytesError(pub usize);

/// Check a history bound (`serve-nvme --telemetry-history`).
pub fn check_history_bytes(bytes: usize) -> Result<usize, HistoryBytesError> {
    if (MIN_HISTORY_BYTES..=MAX_HISTORY_BYTES).contains(&bytes) {
        Ok(bytes)
    } else {
        Err(HistoryBytesError(bytes))
    }
}

#[derive(Debug, Clone)]
enum Item {
    Record {
        epoch: u64,
        ring_size: u64,
        seq: u64,
        /// Bytes (header and payload) in `History::data`, after the
        /// bytes of every older record.
        len: usize,
    },
    Lost {
        epoch: u64,
        first_seq: u64,
        count: u64,
    },
    Frozen {
        epoch: u64,
        next_seq: u64,
    },
}

impl Item {
    fn epoch(&self) -> u64 {
        match *self {
            Item::Record { epoch, .. } | Item::Lost { epoch, .. } | Item::Frozen { epoch, .. } => epoch,
        }
    }

    /// Bytes the item takes in trace.bin (a marker is 56).
    fn file_bytes(&self) -> usize {
        match self {
            Item::Record { len, .. } => align_record(*len as u32 - 32) as usize,
            _ => hmb_trace_file::MARKER_SIZE,
        }
    }
}

/// The newest items, bounded in bytes: each item costs its own bytes and,
/// when it starts a new epoch (or a new unadopted stretch), the 56-byte
/// EPOCH marker the snapshot writes in front of it, so the stream never
/// exceeds its header plus the bound.
#[derive(Debug)]
pub(crate) struct History {
    items: VecDeque<(Item, usize)>,
    bytes: usize,
    capacity: usize,
    /// The next seq of the current unadopted stretch (None: not in one).
    unadopted_seq: Option<u64>,
    /// The records' bytes, oldest first: one arena reused in place once the
    /// history is full, so a record neither allocates nor touches a cold
    /// buffer of its own (a `Vec` per record did both: docs/nvme-controller.md,
    /// "Tenth round").
    data: VecDeque<u8>,
    /// Where `make` writes a record before it is appended to `data`.
    scratch: Vec<u8>,
}

impl History {
    pub(crate) fn new(capacity: usize) -> Self {
        History {
            items: VecDeque::new(),
            bytes: 0,
            capacity,
            unadopted_seq: None,
            data: VecDeque::new(),
            scratch: Vec::new(),
        }
    }

    fn push(&mut self, item: Item) {
        let restarts = matches!(
            item,
            Item::Record {
                epoch: UNADOPTED_EPOCH,
                seq: 0,
                ..
            }
        );
        let new_epoch = self
            .items
            .back()
            .is_some_and(|(last, _)| last.epoch() != item.epoch() || restarts);
        let cost = item.file_bytes() + if new_epoch { hmb_trace_file::MARKER_SIZE } else { 0 };
        self.bytes += cost;
        self.items.push_back((item, cost));
        self.trim();
    }

    fn trim(&mut self) {
        while self.bytes > self.capacity {
            let Some((item, cost)) = self.items.pop_front() else {
                break;
            };
            self.bytes -= cost;
            if let Item::Record { len, .. } = item {
                self.data.drain(..len);
            }
        }
    }

    /// A new bound; the oldest items go if the history is over it.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.trim();
    }

    /// A record the ring of `epoch` got; `make` writes its bytes (header and
    /// payload) into the buffer it gets (a trimmed record's, cleared, when
    /// there is one).
    pub(crate) fn written(&mut self, epoch: u64, ring_size: u64, seq: u64, make: impl FnOnce(&mut Vec<u8>)) {
        self.unadopted_seq = None;
        let len = self.append(make);
        self.push(Item::Record {
            epoch,
            ring_size,
            seq,
            len,
        });
    }

    /// A record the ring of `epoch` had no room for.
    pub(crate) fn dropped(&mut self, epoch: u64, seq: u64) {
        self.unadopted_seq = None;
        if let Some((
            Item::Lost {
                epoch: e,
                first_seq,
                count,
            },
            _,
        )) = self.items.back_mut()
        {
            if *e == epoch && *first_seq + *count == seq {
                *count += 1;
                return;
            }
        }
        self.push(Item::Lost {
            epoch,
            first_seq: seq,
            count: 1,
        });
    }

    /// The ring of `epoch` froze with `next_seq`.
    pub(crate) fn frozen(&mut self, epoch: u64, next_seq: u64) {
        self.push(Item::Frozen { epoch, next_seq });
    }

    /// A record produced with no slice adopted; `make` writes its bytes
    /// for the seq it gets into the buffer it gets (a trimmed record's,
    /// cleared, when there is one).
    pub(crate) fn unadopted(&mut self, make: impl FnOnce(u64, &mut Vec<u8>)) {
        let seq = self.unadopted_seq.unwrap_or(0);
        self.unadopted_seq = Some(seq + 1);
        let len = self.append(|b| make(seq, b));
        self.push(Item::Record {
            epoch: UNADOPTED_EPOCH,
            ring_size: u64::from(HMB_RING_MIN_SIZE),
            seq,
            len,
        });
    }

    /// A record's bytes as `make` writes them, appended to `data`; their length.
    fn append(&mut self, make: impl FnOnce(&mut Vec<u8>)) -> usize {
        self.scratch.clear();
        make(&mut self.scratch);
        self.data.extend(self.scratch.iter());
        self.scratch.len()
    }

    /// The history as a trace.bin stream: the first item's epoch in the
    /// header, an EPOCH marker at every change of epoch, LOST and FROZEN
    /// markers where they happened. Empty history: a header only.
    pub(crate) fn snapshot(&self) -> (Vec<u8>, u64) {
        let first = self.items.front().map(|(i, _)| i);
        let first_epoch = first.map_or(UNADOPTED_EPOCH, Item::epoch);
        let ring_size_of = |epoch: u64| {
            self.items
                .iter()
                .find_map(|(i, _)| match i {
                    Item::Record {
                        epoch: e, ring_size, ..
                    } if *e == epoch => Some(*ring_size),
                    _ => None,
                })
                .unwrap_or(u64::from(HMB_RING_MIN_SIZE))
        };
        let header = FileHeader::new(
            HMB_RING_VERSION_MAJOR,
            HMB_RING_VERSION_MINOR,
            ring_size_of(first_epoch),
            first_epoch,
        );
        let mut w = TraceWriter::new(Vec::with_capacity(64 + self.bytes), &header).expect("writes to a Vec");
        let mut epoch = first_epoch;
        let mut last_seq: Option<u64> = None;
        let mut records = 0u64;
        let mut at = 0;
        for (item, _) in &self.items {
            // An unadopted stretch after a ring's epoch starts a new epoch 0:
            // its seqs start over, so it needs its EPOCH marker.
            let restart = matches!(
                item,
                Item::Record {
                    epoch: UNADOPTED_EPOCH,
                    seq: 0,
                    ..
                }
            ) && records > 0;
            if item.epoch() != epoch || restart {
                epoch = item.epoch();
                last_seq = None;
                w.write_marker(&Marker::Epoch {
                    epoch,
                    ring_size: ring_size_of(epoch),
                })
                .expect("writes to a Vec");
            }
            match *item {
                Item::Record { seq, len, .. } => {
                    let mut bytes: Vec<u8> = self.data.range(at..at + len).copied().collect();
                    at += len;
                    bytes.resize(align_record(len as u32 - 32) as usize, 0);
                    w.write_ring_bytes(&bytes).expect("a record the producer wrote");
                    last_seq = Some(seq);
                    records += 1;
                }
                Item::Lost {
                    epoch,
                    first_seq,
                    count,
                } => w
                    .write_marker(&Marker::Lost {
                        first_seq,
                        count,
                        epoch,
                    })
                    .expect("writes to a Vec"),
                Item::Frozen { epoch, next_seq } => w
                    .write_marker(&Marker::Frozen {
                        epoch,
                        last_seq,
                        next_seq,
                    })
                    .expect("writes to a Vec"),
            }
        }
        (w.into_inner(), records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_trace_file::{ItemKind, SliceReader, FILE_HEADER_SIZE};

    /// A record of `payload` bytes with seq `seq` (header and payload).
    fn record(seq: u64, payload: usize) -> Vec<u8> {
        let mut b = hmb_trace_abi::hmb_record_hdr {
            length: (payload as u32).into(),
            opcode: 0x0101.into(),
            flags: 0.into(),
            seq: seq.into(),
            timestamp_ns: seq.into(),
            source: 0.into(),
            reserved: 0.into(),
        }
        .as_bytes()
        .to_vec();
        b.resize(32 + payload, 7);
        b
    }

    use zerocopy::IntoBytes;

    #[test]
    fn a_recycled_buffer_holds_only_the_new_record() {
        // Long and short records alternate, so a trimmed long record's buffer
        // is reused for a short one and the other way round.
        let capacity = MIN_HISTORY_BYTES;
        let mut h = History::new(capacity);
        let len = |seq: u64| if seq.is_multiple_of(2) { 200 } else { 8 };
        let n = 3 * capacity as u64 / 100;
        for _ in 0..n {
            h.unadopted(|seq, b| {
                assert!(b.is_empty(), "the buffer comes cleared");
                b.extend_from_slice(&record(seq, len(seq)));
            });
        }
        let (stream, _) = h.snapshot();
        let records: Vec<_> = SliceReader::new(&stream)
            .unwrap()
            .map(Result::unwrap)
            .filter(|i| !i.is_marker())
            .collect();
        assert!(records.len() > 10 && (records.len() as u64) < n, "trimmed, not emptied");
        let first = n - records.len() as u64;
        for (i, r) in records.iter().enumerate() {
            let seq = first + i as u64;
            let want = record(seq, len(seq));
            assert_eq!((r.hdr.seq.get(), r.payload), (seq, &want[32..]), "record {seq}");
        }
    }

    #[test]
    fn the_bound_counts_the_epoch_markers_so_the_stream_never_exceeds_it() {
        // The worst case for markers: one record per epoch, each one needing
        // an EPOCH marker (56 bytes) in front of a 40-byte record.
        let capacity = MIN_HISTORY_BYTES;
        let mut h = History::new(capacity);
        for epoch in 1..5000u64 {
            h.written(epoch, 1 << 16, 0, |b| b.extend(record(0, 8)));
            h.unadopted(|seq, b| b.extend_from_slice(&record(seq, 8)));
        }
        let (stream, records) = h.snapshot();
        assert!(
            stream.len() <= FILE_HEADER_SIZE + capacity,
            "{} bytes over {capacity} + header",
            stream.len()
        );
        assert!(stream.len() > capacity / 2, "the history is not trimmed to nothing");
        let items: Vec<_> = SliceReader::new(&stream).unwrap().map(Result::unwrap).collect();
        let markers = items.iter().filter(|i| i.is_marker()).count();
        assert_eq!(items.len() as u64 - markers as u64, records);
        assert!(
            markers as u64 >= records - 1,
            "an EPOCH marker in front of every record but the first"
        );
        assert!(items
            .iter()
            .filter(|i| i.is_marker())
            .all(|i| matches!(i.kind(), Ok(ItemKind::Marker(Marker::Epoch { .. })))));
    }

    #[test]
    fn a_smaller_bound_drops_the_oldest_and_bounds_are_checked() {
        let mut h = History::new(DEFAULT_HISTORY_BYTES);
        for seq in 0..10_000 {
            h.written(1, 1 << 16, seq, |b| b.extend(record(seq, 24)));
        }
        let (_, all) = h.snapshot();
        assert_eq!(all, 10_000, "4 MiB holds 10 000 records of 56 bytes");
        h.set_capacity(MIN_HISTORY_BYTES);
        let (stream, kept) = h.snapshot();
        assert_eq!(kept, (MIN_HISTORY_BYTES / 56) as u64);
        let last = SliceReader::new(&stream).unwrap().last().unwrap().unwrap();
        assert_eq!(last.seq(), 9_999, "the newest stay");

        assert_eq!(check_history_bytes(DEFAULT_HISTORY_BYTES), Ok(DEFAULT_HISTORY_BYTES));
        assert_eq!(check_history_bytes(MAX_HISTORY_BYTES), Ok(MAX_HISTORY_BYTES));
        assert_eq!(
            check_history_bytes(MAX_HISTORY_BYTES + 1),
            Err(HistoryBytesError(MAX_HISTORY_BYTES + 1))
        );
        assert_eq!(check_history_bytes(4096), Err(HistoryBytesError(4096)));
        assert_eq!(MAX_HISTORY_BYTES + FILE_HEADER_SIZE, 65535 * 512);
    }
}
