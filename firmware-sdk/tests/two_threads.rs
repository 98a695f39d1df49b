//! The C producer on one thread, the Rust consumer (hmb-trace-consumer) on
//! another, over one trace slice in memory; the module's part (tail through
//! the consumer's publisher, re-init by epoch) done by abi::module_sim.
//! A slow consumer makes the producer drop; small rings make it wrap and
//! PAD; every epoch ends with a freeze and a re-init. The consumer must see
//! exactly the records the producer wrote, with the right bytes, and lose
//! exactly the ones it dropped.

use std::sync::atomic::AtomicU64;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Duration;

use hmb_firmware_sdk::{CProducer, Emitted};
use hmb_trace_abi::{module_sim, SharedRing, HMB_RECORD_MAX_PAYLOAD, HMB_RING_HDR_SIZE};
use hmb_trace_consumer::{AtomicTailPublisher, Consumer, ConsumerConfig, RingView, Step};
use proptest::prelude::*;

/// 8-aligned shared memory for one slice.
struct Mem {
    words: Box<[AtomicU64]>,
}

impl Mem {
    fn new(len: usize) -> Arc<Mem> {
        Arc::new(Mem {
            words: (0..len / 8).map(|_| AtomicU64::new(0)).collect(),
        })
    }
    fn base(&self) -> *mut u8 {
        self.words.as_ptr() as *mut u8
    }
    fn len(&self) -> usize {
        self.words.len() * 8
    }
}

fn payload(epoch: u64, seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (seq as usize * 31 + i * 7 + epoch as usize) as u8)
        .collect()
}

fn opcode(seq: u64) -> u16 {
    0x100 + (seq % 13) as u16
}

/// What one epoch looked like from each side.
#[derive(Debug, Default)]
struct Epoch {
    written: Vec<u64>,
    dropped: u64,
    seen: Vec<u64>,
    lost: u64,
    head: u64,
}

fn run(ring_size: u64, plans: Vec<Vec<u32>>, pause_every: u32, pause_us: u64) -> Vec<Epoch> {
    let mem = Mem::new(HMB_RING_HDR_SIZE as usize + ring_size as usize);
    // SAFETY: mem outlives every handle (the Arc is held to the end).
    let owner = unsafe { SharedRing::from_raw(mem.base(), mem.len()) }.unwrap();
    module_sim::init(&owner, ring_size, 1).unwrap();

    let (reinit_tx, reinit_rx) = channel::<u64>();
    let pmem = mem.clone();
    let pplans = plans.clone();
    let producer = std::thread::spawn(move || {
        // SAFETY: pmem keeps the slice alive for the producer's life.
        let mut p = unsafe { CProducer::new(pmem.base(), pmem.len(), false) };
        let mut out = Vec::new();
        for (i, plan) in pplans.iter().enumerate() {
            let epoch = i as u64 + 1;
            if epoch > 1 {
                // The new advert: its generation comes with the doorbell.
                let generation = reinit_rx.recv().unwrap();
                assert_eq!(generation, epoch);
            }
            p.attach(epoch).expect("attach to the advertised epoch");
            let (mut written, mut dropped) = (Vec::new(), 0);
            for (seq, &len) in plan.iter().enumerate() {
                let seq = seq as u64;
                let r = if len > HMB_RECORD_MAX_PAYLOAD {
                    p.emit_oversized(opcode(seq), len)
                } else {
                    p.emit_ts(opcode(seq), epoch as u32, seq, &payload(epoch, seq, len as usize))
                };
                match r {
                    Emitted::Written => written.push(seq),
                    Emitted::Dropped => dropped += 1,
                    Emitted::Frozen => panic!("frozen while live"),
                }
                if seq.is_multiple_of(64) {
                    std::thread::yield_now();
                }
            }
            p.freeze();
            assert_eq!(p.emit(1, 0, b"late"), Emitted::Frozen);
            out.push((written, dropped));
        }
        assert_eq!(p.violations(), 0, "the C producer wrote outside its share");
        out
    });

    // SAFETY: as above; the consumer only reads, the publisher stores tail.
    let view = unsafe { RingView::from_raw(mem.base(), mem.len()) }.unwrap();
    let publisher = unsafe { AtomicTailPublisher::from_raw(mem.base()) };
    let config = ConsumerConfig {
        max_iov: 64,
        max_batch_bytes: ring_size / 4,
    };
    let mut c = Consumer::attach(view, publisher, config).unwrap();
    let mut epochs: Vec<Epoch> = Vec::new();
    let mut cur = Epoch::default();
    let mut batches = 0u32;
    loop {
        let step = c.next_batch().unwrap();
        match step {
            Step::Empty => std::thread::sleep(Duration::from_micros(20)),
            Step::Batch(b) => {
                let epoch = epochs.len() as u64 + 1;
                cur.lost += b.lost.map_or(0, |l| l.count);
                for slice in b.iov {
                    let mut rest: &[u8] = slice;
                    while !rest.is_empty() {
                        let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
                        let seq = u64::from_le_bytes(rest[8..16].try_into().unwrap());
                        let op = u16::from_le_bytes(rest[4..6].try_into().unwrap());
                        let src = u32::from_le_bytes(rest[24..28].try_into().unwrap());
                        let ts = u64::from_le_bytes(rest[16..24].try_into().unwrap());
                        assert_eq!((op, src as u64, ts), (opcode(seq), epoch, seq), "seq {seq}");
                        assert_eq!(len as u32, plans[epoch as usize - 1][seq as usize], "seq {seq}: length");
                        assert!(rest[32..32 + len] == payload(epoch, seq, len)[..], "seq {seq}: payload");
                        let size = hmb_trace_abi::align_record(len as u32) as usize;
                        assert!(rest[32 + len..size].iter().all(|&x| x == 0), "seq {seq}: padding");
                        cur.seen.push(seq);
                        rest = &rest[size..];
                    }
                }
                c.commit().unwrap();
                batches += 1;
                if pause_every > 0 && batches.is_multiple_of(pause_every) {
                    std::thread::sleep(Duration::from_micros(pause_us));
                }
            }
            Step::Frozen(info) => {
                let epoch = epochs.len() as u64 + 1;
                assert_eq!(info.epoch, epoch);
                assert_eq!(info.next_seq, plans[epoch as usize - 1].len() as u64, "final next_seq");
                cur.lost += info.lost.map_or(0, |l| l.count);
                cur.dropped = c.view().dropped_records();
                cur.head = c.view().head();
                epochs.push(std::mem::take(&mut cur));
                if epochs.len() == plans.len() {
                    break;
                }
                let next = module_sim::reinit(&owner).unwrap();
                c.reattach().unwrap();
                reinit_tx.send(next).unwrap();
            }
        }
    }
    let produced = producer.join().unwrap();
    for (e, (written, dropped)) in epochs.iter_mut().zip(produced) {
        assert_eq!(e.dropped, dropped, "dropped_records in the header");
        e.written = written;
    }
    epochs
}

fn check(plans: &[Vec<u32>], epochs: &[Epoch]) {
    assert_eq!(epochs.len(), plans.len());
    for (i, (plan, e)) in plans.iter().zip(epochs).enumerate() {
        assert_eq!(
            e.seen,
            e.written,
            "epoch {}: the consumer saw exactly what C wrote",
            i + 1
        );
        assert_eq!(e.lost, e.dropped, "epoch {}: losses are the drops", i + 1);
        assert_eq!(e.seen.len() as u64 + e.lost, plan.len() as u64, "epoch {}", i + 1);
    }
}

fn len_strategy() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 0u32..64,
        3 => 64u32..=HMB_RECORD_MAX_PAYLOAD,
        1 => Just(HMB_RECORD_MAX_PAYLOAD),
        1 => (HMB_RECORD_MAX_PAYLOAD + 1)..6000,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn c_producer_and_rust_consumer_agree(
        ring_shift in 13u32..=15,
        plans in prop::collection::vec(prop::collection::vec(len_strategy(), 100..800), 1..=3),
        pause_every in 0u32..4,
        pause_us in 50u64..400,
    ) {
        let epochs = run(1 << ring_shift, plans.clone(), pause_every, pause_us);
        check(&plans, &epochs);
    }
}

/// A fixed heavy case: a tiny ring, a consumer that sleeps after every
/// batch, large records: wraps (PAD and skips), many drops, three epochs.
#[test]
fn slow_consumer_small_ring_three_epochs() {
    let plans: Vec<Vec<u32>> = (0..3)
        .map(|e| (0..1500u32).map(|i| (i * 37 + e * 11) % 3000).collect())
        .collect();
    let epochs = run(8192, plans.clone(), 1, 300);
    check(&plans, &epochs);
    for e in &epochs {
        assert!(e.head > 4 * 8192, "wrapped several times (head {})", e.head);
        assert!(e.dropped > 0, "the slow consumer made it drop");
        assert!(!e.seen.is_empty());
    }
}
