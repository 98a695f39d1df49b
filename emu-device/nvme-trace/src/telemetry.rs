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

use std::collections::VecDeque;

use hmb_trace_abi::{align_record, HMB_RING_MIN_SIZE, HMB_RING_VERSION_MAJOR, HMB_RING_VERSION_MINOR};
use hmb_trace_file::{FileHeader, Marker, TraceWriter};

/// The epoch of records produced while no slice is adopted.
pub const UNADOPTED_EPOCH: u64 = 0;

/// Default bound of the history, in trace.bin bytes.
pub const DEFAULT_HISTORY_BYTES: usize = 4 << 20;

#[derive(Debug, Clone)]
enum Item {
    Record {
        epoch: u64,
        ring_size: u64,
        seq: u64,
        bytes: Vec<u8>,
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
            Item::Record { bytes, .. } => align_record(bytes.len() as u32 - 32) as usize,
            _ => hmb_trace_file::MARKER_SIZE,
        }
    }
}

/// The newest items, bounded in bytes.
#[derive(Debug)]
pub(crate) struct History {
    items: VecDeque<Item>,
    bytes: usize,
    capacity: usize,
    /// The next seq of the current unadopted stretch (None: not in one).
    unadopted_seq: Option<u64>,
}

impl History {
    pub(crate) fn new(capacity: usize) -> Self {
        History {
            items: VecDeque::new(),
            bytes: 0,
            capacity,
            unadopted_seq: None,
        }
    }

    fn push(&mut self, item: Item) {
        self.bytes += item.file_bytes();
        self.items.push_back(item);
        while self.bytes > self.capacity {
            let Some(old) = self.items.pop_front() else { break };
            self.bytes -= old.file_bytes();
        }
    }

    /// A record the ring of `epoch` got (`bytes`: header and payload).
    pub(crate) fn written(&mut self, epoch: u64, ring_size: u64, seq: u64, bytes: Vec<u8>) {
        self.unadopted_seq = None;
        self.push(Item::Record {
            epoch,
            ring_size,
            seq,
            bytes,
        });
    }

    /// A record the ring of `epoch` had no room for.
    pub(crate) fn dropped(&mut self, epoch: u64, seq: u64) {
        self.unadopted_seq = None;
        if let Some(Item::Lost {
            epoch: e,
            first_seq,
            count,
        }) = self.items.back_mut()
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

    /// A record produced with no slice adopted; `make` builds its bytes
    /// from the seq it gets.
    pub(crate) fn unadopted(&mut self, make: impl FnOnce(u64) -> Vec<u8>) {
        let seq = self.unadopted_seq.unwrap_or(0);
        self.unadopted_seq = Some(seq + 1);
        self.push(Item::Record {
            epoch: UNADOPTED_EPOCH,
            ring_size: u64::from(HMB_RING_MIN_SIZE),
            seq,
            bytes: make(seq),
        });
    }

    /// The history as a trace.bin stream: the first item's epoch in the
    /// header, an EPOCH marker at every change of epoch, LOST and FROZEN
    /// markers where they happened. Empty history: a header only.
    pub(crate) fn snapshot(&self) -> (Vec<u8>, u64) {
        let first = self.items.front();
        let first_epoch = first.map_or(UNADOPTED_EPOCH, Item::epoch);
        let ring_size_of = |epoch: u64| {
            self.items
                .iter()
                .find_map(|i| match i {
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
        for item in &self.items {
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
            match item {
                Item::Record { seq, bytes, .. } => {
                    w.write_ring_bytes(&padded(bytes)).expect("a record the producer wrote");
                    last_seq = Some(*seq);
                    records += 1;
                }
                &Item::Lost {
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
                &Item::Frozen { epoch, next_seq } => w
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

fn padded(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v.resize(align_record(bytes.len() as u32 - 32) as usize, 0);
    v
}
