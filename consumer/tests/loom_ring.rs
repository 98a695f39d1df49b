//! The ring protocol's memory ordering under the `loom` model checker
//! (docs/memory-model.md).
//!
//! The firmware model's `Producer`, the consumer's `Consumer` (with its
//! `AtomicTailPublisher`) and the ABI crate's `module_sim` (re)initialisation run as they
//! do in the product, on a slice whose header fields are loom atomics and
//! whose record bytes are checked for unordered plain accesses
//! (`hmb_trace_abi::sync`). loom runs every interleaving (up to
//! `LOOM_MAX_PREEMPTIONS` preemptions, 2 when unset) and every value each
//! load may return under the orderings used.
//!
//!     RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=2 \
//!       cargo test --release -p hmb-trace-consumer --test loom_ring --target-dir target/loom
#![cfg(loom)]

use std::sync::Arc;

use hmb_firmware_model::{Produced, Producer};
use hmb_trace_abi::sync::model::LoomSlice;
use hmb_trace_abi::{
    align_record, module_sim, SharedRing, HMB_RECORD_MAX_PAYLOAD, HMB_RING_FLAG_OVERFLOWED, HMB_RING_HDR_SIZE,
};
use hmb_trace_consumer::{AtomicTailPublisher, Consumer, ConsumerConfig, Lost, RingView, Step};
use loom::thread;

const RING: u64 = 8192;
const LEN: usize = HMB_RING_HDR_SIZE as usize + RING as usize;
const EPOCH: u64 = 1;

/// One loom execution's ring: the slice (kept alive until the end of the
/// execution), the owner's writable handle, and a consumer attached to it.
struct Rig {
    owner: SharedRing,
    consumer: Consumer<AtomicTailPublisher>,
    /// Last: fields drop in order, and the handles above point into it.
    _slice: Arc<LoomSlice>,
}

impl Rig {
    fn new() -> Self {
        let slice = LoomSlice::new(LEN);
        // SAFETY: `slice` lives in the rig until the execution ends, after
        // every thread using these handles has been joined.
        let owner = unsafe { SharedRing::from_raw(slice.base(), slice.len()) }.unwrap();
        module_sim::init(&owner, RING, EPOCH).unwrap();
        let view = unsafe { RingView::from_raw(slice.base(), slice.len()) }.unwrap();
        let publisher = unsafe { AtomicTailPublisher::from_raw(slice.base()) };
        let consumer = Consumer::attach(view, publisher, ConsumerConfig::default()).unwrap();
        Self {
            owner,
            consumer,
            _slice: slice,
        }
    }

    fn producer(&self) -> Producer {
        Producer::attach(self.owner.share()).unwrap()
    }
}

/// The payload of record `seq` in `epoch`: every byte checked on arrival.
fn payload(epoch: u64, seq: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (epoch as u8).wrapping_mul(101) ^ (seq as u8).wrapping_mul(31) ^ i as u8)
        .collect()
}

fn produce(p: &mut Producer, len: usize) -> Produced {
    let seq = p.next_seq();
    p.produce(0x0F01, 7, seq, &payload(p.epoch(), seq, len))
}

/// What the consumer saw in one call.
enum Got {
    Records(Vec<u64>, Option<Lost>),
    Empty,
    Frozen(Option<Lost>),
}

/// One `next_batch` + `commit`, every record's framing and bytes checked
/// against what the producer wrote for its sequence number.
fn step(c: &mut Consumer<AtomicTailPublisher>) -> Got {
    let epoch = c.epoch();
    let got = match c.next_batch().expect("a well-behaved ring never gives an error") {
        Step::Empty => Got::Empty,
        Step::Frozen(info) => Got::Frozen(info.lost),
        Step::Batch(b) => {
            let mut seqs = Vec::new();
            for slice in b.iov {
                let mut rest: &[u8] = slice;
                while !rest.is_empty() {
                    let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
                    let seq = u64::from_le_bytes(rest[8..16].try_into().unwrap());
                    let size = align_record(len as u32) as usize;
                    assert_eq!(u16::from_le_bytes(rest[4..6].try_into().unwrap()), 0x0F01);
                    assert_eq!(&rest[32..32 + len], &payload(epoch, seq, len)[..], "record {seq} bytes");
                    assert!(rest[32 + len..size].iter().all(|&b| b == 0), "record {seq} padding");
                    seqs.push(seq);
                    rest = &rest[size..];
                }
            }
            assert_eq!(seqs.len() as u64, b.records);
            Got::Records(seqs, b.lost)
        }
    };
    c.commit().unwrap();
    got
}

/// Consume until `n` records arrived (yielding while the ring is empty).
fn receive(c: &mut Consumer<AtomicTailPublisher>, n: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.len() < n {
        match step(c) {
            Got::Records(s, lost) => {
                assert_eq!(lost, None, "nothing is dropped here");
                seqs.extend(s);
            }
            Got::Empty => thread::yield_now(),
            Got::Frozen(_) => panic!("not frozen here"),
        }
    }
    seqs
}

/// Run `f` under loom; print how many executions were explored (the
/// figure docs/memory-model.md quotes).
fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(2);
    }
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = runs.clone();
    b.check(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        f()
    });
    eprintln!(
        "{name}: {} executions, preemption bound {:?}",
        runs.load(std::sync::atomic::Ordering::Relaxed),
        b.preemption_bound
    );
}

/// Publish and acquire across the wrap: the producer writes a PAD filler
/// (`room` >= 32) or skips (`room` < 32) before a record at offset 0, then
/// one more; the consumer, concurrently, must get both records whole.
/// Catches: head stored without release (the consumer reads record or PAD
/// bytes not yet ordered before it: a causality violation).
fn wrap(room: u64) {
    model(if room < 32 { "wrap_skip" } else { "wrap_pad" }, move || {
        let mut rig = Rig::new();
        let mut p = rig.producer();
        // Bring head and tail to `room` bytes before the end, sequentially.
        let second = (RING - room) as usize - HMB_RECORD_MAX_PAYLOAD as usize - 64;
        assert!(matches!(
            produce(&mut p, HMB_RECORD_MAX_PAYLOAD as usize),
            Produced::Written { .. }
        ));
        assert!(matches!(produce(&mut p, second), Produced::Written { .. }));
        assert_eq!(receive(&mut rig.consumer, 2), [0, 1]);
        assert_eq!(p.head(), RING - room);

        let producer = thread::spawn(move || {
            let a = produce(&mut p, 32); // 64 bytes: does not fit in `room`
            let b = produce(&mut p, 0);
            (a, b, p.head())
        });
        assert_eq!(receive(&mut rig.consumer, 2), [2, 3]);
        let (a, b, head) = producer.join().unwrap();
        assert_eq!((a, b), (Produced::Written { seq: 2 }, Produced::Written { seq: 3 }));
        assert_eq!(head, RING + 64 + 32, "filler, then both records");
        assert_eq!(rig.consumer.tail(), head);
    });
}

#[test]
fn wrap_with_pad_filler() {
    wrap(40);
}

#[test]
fn wrap_with_skipped_bytes() {
    wrap(24);
}

/// A full ring: the producer writes two 4 KiB records (ring full), tries
/// two small ones (written once it sees the consumer's tail, else dropped,
/// OVERFLOWED set, then cleared by the next write), then freezes. The
/// consumer drains concurrently until FROZEN.
/// Checks: every sequence number is either received whole, in order, or
/// reported lost, never both; a consumer that sees OVERFLOWED (acquire)
/// sees the drop counters stored before it, and one that then sees it
/// cleared sees the head of the record that cleared it; FROZEN is reported
/// only after every written record.
/// Catches: the tail published without release or read without acquire
/// (the producer overwrites bytes the consumer still reads), OVERFLOWED
/// set or cleared, or FROZEN set, without release (stale counters or head,
/// or FROZEN reported with records still unseen).
#[test]
fn full_ring_overflow_and_freeze() {
    model("full_ring_overflow_and_freeze", || {
        let mut rig = Rig::new();
        let mut p = rig.producer();
        let producer = thread::spawn(move || {
            let mut out = Vec::new();
            for len in [HMB_RECORD_MAX_PAYLOAD as usize, HMB_RECORD_MAX_PAYLOAD as usize, 0, 0] {
                out.push(produce(&mut p, len));
            }
            p.freeze();
            out
        });
        let (mut seen, mut lost) = (Vec::new(), Vec::new());
        let mut overflowed_seen = false;
        loop {
            let view = rig.consumer.view();
            if view.flags() & HMB_RING_FLAG_OVERFLOWED != 0 {
                overflowed_seen = true;
                assert!(view.dropped_records() >= 1, "OVERFLOWED seen before the drop count");
                assert!(view.overflow_events() >= 1, "OVERFLOWED seen before its event count");
            } else if overflowed_seen {
                // Cleared after a drop: only a write clears it, and drops
                // come after the ring filled, so that record is past 8 KiB.
                assert!(view.head() >= RING + 32, "OVERFLOWED cleared before its record's head");
            }
            match step(&mut rig.consumer) {
                Got::Records(s, l) => {
                    lost.extend(l.map(|l| l.first_seq..l.first_seq + l.count).into_iter().flatten());
                    seen.extend(s);
                }
                Got::Empty => thread::yield_now(),
                Got::Frozen(l) => {
                    lost.extend(l.map(|l| l.first_seq..l.first_seq + l.count).into_iter().flatten());
                    break;
                }
            }
        }
        let produced = producer.join().unwrap();
        let written: Vec<u64> = produced
            .iter()
            .filter_map(|p| match p {
                Produced::Written { seq } => Some(*seq),
                _ => None,
            })
            .collect();
        let dropped: Vec<u64> = produced
            .iter()
            .filter_map(|p| match p {
                Produced::Dropped { seq } => Some(*seq),
                _ => None,
            })
            .collect();
        assert_eq!(&written[..2], [0, 1], "an empty ring takes 8 KiB");
        assert_eq!(seen, written, "every written record, once, in order");
        assert_eq!(lost, dropped, "every dropped record reported lost");
        assert_eq!(rig.consumer.view().dropped_records(), dropped.len() as u64);
    });
}

/// FROZEN and re-initialisation by epoch: the producer writes a record and
/// freezes; the consumer drains, sees FROZEN, re-initialises the ring
/// (module_sim, as the REINIT ioctl) and re-attaches; the producer, polling
/// for the new epoch, re-attaches and writes again.
/// Checks: the record written before FROZEN is handed out before FROZEN;
/// the new epoch's record (seq 0) arrives whole.
/// Catches: FROZEN set without release (reported before the last record;
/// or the owner's zeroing racing the producer's last writes), the new epoch
/// stored without release or loaded without acquire (the producer reads the
/// header or writes records before the owner's rewrite is ordered before).
#[test]
fn freeze_then_reinit_by_epoch() {
    model("freeze_then_reinit_by_epoch", || {
        let mut rig = Rig::new();
        let mut p = rig.producer();
        let producer = thread::spawn(move || {
            let first = produce(&mut p, 100);
            p.freeze();
            while !p.reattach().unwrap() {
                thread::yield_now();
            }
            (first, p.epoch(), produce(&mut p, 200))
        });
        let mut seen = Vec::new();
        loop {
            match step(&mut rig.consumer) {
                Got::Records(s, lost) => {
                    assert_eq!(lost, None);
                    seen.extend(s);
                }
                Got::Empty => thread::yield_now(),
                Got::Frozen(lost) => {
                    assert_eq!(lost, None);
                    break;
                }
            }
        }
        assert_eq!(seen, [0], "the record before FROZEN is handed out before it");
        assert_eq!(module_sim::reinit(&rig.owner).unwrap(), EPOCH + 1);
        rig.consumer.reattach().unwrap();
        assert_eq!(receive(&mut rig.consumer, 1), [0]);
        let (first, epoch, second) = producer.join().unwrap();
        assert_eq!(first, Produced::Written { seq: 0 });
        assert_eq!((epoch, second), (EPOCH + 1, Produced::Written { seq: 0 }));
        assert_eq!(rig.consumer.epoch(), EPOCH + 1);
    });
}
