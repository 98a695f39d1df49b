//! Host harness: one memfd holding a trace slice, mapped writable for the
//! producer and the "module" (tail publication, re-init) and read-only for
//! the consumer, exactly as in the guest.
#![allow(dead_code)]

pub mod thread;

use std::fs::File;
use std::sync::Arc;

use hmb_firmware_model::{expected_record, Producer, SharedRing, Workload};
use hmb_trace_abi::{align_record, HMB_RING_HDR_SIZE};
use hmb_trace_consumer::{AtomicTailPublisher, Batch, Consumer, ConsumerConfig, RingView};
use memmap2::{MmapOptions, MmapRaw};
use serde::Serialize;

pub struct Shm {
    pub file: File,
    pub rw: Arc<MmapRaw>,
    pub ring_size: u64,
}

impl Shm {
    /// A fresh memfd with an initialised ring of `ring_size` bytes, epoch 1.
    pub fn new(ring_size: u64) -> Self {
        let fd =
            nix::sys::memfd::memfd_create(c"hmb-trace-test", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
        let file = File::from(fd);
        let len = HMB_RING_HDR_SIZE as u64 + ring_size;
        file.set_len(len).unwrap();
        let rw = Arc::new(MmapOptions::new().len(len as usize).map_raw(&file).unwrap());
        let shm = Self { file, rw, ring_size };
        hmb_firmware_model::module_sim::init(&shm.owner(), ring_size, 1).unwrap();
        shm
    }

    pub fn len(&self) -> usize {
        HMB_RING_HDR_SIZE as usize + self.ring_size as usize
    }

    /// The module's writable handle (tail publication, re-init, corruption).
    pub fn owner(&self) -> SharedRing {
        SharedRing::from_mmap(self.rw.clone()).unwrap()
    }

    pub fn producer(&self) -> Producer {
        Producer::attach(self.owner()).unwrap()
    }

    /// A separate read-only mapping of the same memfd.
    pub fn view(&self) -> RingView {
        RingView::map_file(&self.file, 0, self.len()).unwrap()
    }

    pub fn consumer(&self, config: ConsumerConfig) -> Consumer<AtomicTailPublisher> {
        Consumer::attach(self.view(), AtomicTailPublisher::from_mmap(self.rw.clone()), config).unwrap()
    }
}

/// One record seen by a consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub seq: u64,
    pub opcode: u16,
    pub source: u32,
    pub payload: Vec<u8>,
}

/// Split a batch's slices back into records, checking the framing.
pub fn records_of(batch: &Batch<'_>) -> Vec<Seen> {
    let mut out = Vec::new();
    for slice in batch.iov {
        let mut rest: &[u8] = slice;
        while !rest.is_empty() {
            let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
            let size = align_record(len as u32) as usize;
            assert!(size <= rest.len(), "record runs past its slice");
            out.push(Seen {
                seq: u64::from_le_bytes(rest[8..16].try_into().unwrap()),
                opcode: u16::from_le_bytes(rest[4..6].try_into().unwrap()),
                source: u32::from_le_bytes(rest[24..28].try_into().unwrap()),
                payload: rest[32..32 + len].to_vec(),
            });
            assert!(
                rest[32 + len..size].iter().all(|&b| b == 0),
                "alignment padding is zero"
            );
            rest = &rest[size..];
        }
    }
    assert_eq!(out.len() as u64, batch.records);
    out
}

/// Check a record against the model's ground truth.
pub fn check_truth(seed: u64, workload: Workload, seen: &Seen) {
    let want = expected_record(seed, workload, seen.seq);
    assert_eq!(
        (seen.opcode, seen.source),
        (want.opcode, want.source),
        "seq {}",
        seen.seq
    );
    assert!(seen.payload == want.payload, "payload of seq {} differs", seen.seq);
}

/// Produce the ground-truth record for the producer's next seq.
pub fn produce_truth(p: &mut Producer, seed: u64, workload: Workload) -> hmb_firmware_model::Produced {
    let seq = p.next_seq();
    let r = expected_record(seed, workload, seq);
    p.produce(r.opcode, r.source, seq * 10, &r.payload)
}

/// Observable consumer events, for insta snapshots.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Lost {
        first_seq: u64,
        count: u64,
    },
    Records {
        first_seq: u64,
        last_seq: u64,
        count: u64,
        bytes: u64,
        slices: usize,
        start: u64,
        end: u64,
    },
    Fillers {
        start: u64,
        end: u64,
    },
    Frozen {
        epoch: u64,
        last_seq: Option<u64>,
        next_seq: u64,
        lost: Option<(u64, u64)>,
    },
    Error {
        message: String,
    },
}

/// Drain until Empty or Frozen; record events; return the records.
pub fn drain(c: &mut Consumer<AtomicTailPublisher>, events: &mut Vec<Event>) -> Vec<Seen> {
    let mut seen = Vec::new();
    loop {
        match c.next_batch() {
            Err(e) => {
                events.push(Event::Error { message: e.to_string() });
                return seen;
            }
            Ok(hmb_trace_consumer::Step::Empty) => return seen,
            Ok(hmb_trace_consumer::Step::Frozen(f)) => {
                events.push(Event::Frozen {
                    epoch: f.epoch,
                    last_seq: f.last_seq,
                    next_seq: f.next_seq,
                    lost: f.lost.map(|l| (l.first_seq, l.count)),
                });
                return seen;
            }
            Ok(hmb_trace_consumer::Step::Batch(b)) => {
                if let Some(l) = b.lost {
                    events.push(Event::Lost {
                        first_seq: l.first_seq,
                        count: l.count,
                    });
                }
                if b.records > 0 {
                    events.push(Event::Records {
                        first_seq: b.first_seq.unwrap(),
                        last_seq: b.last_seq.unwrap(),
                        count: b.records,
                        bytes: b.bytes,
                        slices: b.iov.len(),
                        start: b.start,
                        end: b.end,
                    });
                } else {
                    events.push(Event::Fillers {
                        start: b.start,
                        end: b.end,
                    });
                }
                seen.extend(records_of(&b));
            }
        }
        c.commit().unwrap();
    }
}
