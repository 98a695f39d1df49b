//! Host conformance: producer (firmware model) and consumer in two threads
//! over one shared memfd mapping. Each scenario's observable outcome is
//! snapshotted with insta.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::thread::{Cmd, ProducerThread};
use common::*;
use hmb_firmware_model::{module_sim, Workload};
use hmb_trace_abi::*;
use hmb_trace_consumer::{ConsumerConfig, ConsumerError, Step};
use rstest::rstest;
use serde::Serialize;

const SEED: u64 = 0x5EED;

/// Streaming exactness, truly concurrent: a lossless producer (it waits
/// for space, which only a test does) against the consumer; every record
/// arrives once, in order, byte-identical to the ground truth.
#[rstest]
#[case::ssd("ssd", 65536)]
#[case::npu("npu", 8192)]
#[case::sizes("sizes", 16384)]
#[case::sizes_max("sizes:fixed=4064", 8192)]
fn streaming_is_exact(#[case] workload: &str, #[case] ring_size: u64) {
    let workload = Workload::parse(workload).unwrap();
    let shm = Shm::new(ring_size);
    let total = 20_000u64;
    let mut p = shm.producer();
    let producer = std::thread::spawn(move || {
        for seq in 0..total {
            let r = hmb_firmware_model::expected_record(SEED, workload, seq);
            while !p.fits(r.payload.len()) {
                std::thread::yield_now();
            }
            assert!(
                matches!(p.produce(r.opcode, r.source, seq, &r.payload), hmb_firmware_model::Produced::Written { seq: s } if s == seq)
            );
        }
    });
    let mut c = shm.consumer(ConsumerConfig {
        max_iov: 64,
        max_batch_bytes: 4096,
    });
    let mut next = 0u64;
    while next < total {
        match c.next_batch().unwrap() {
            Step::Batch(b) => {
                assert!(b.lost.is_none());
                assert!(b.iov.len() <= 64);
                for seen in records_of(&b) {
                    assert_eq!(seen.seq, next);
                    check_truth(SEED, workload, &seen);
                    next += 1;
                }
            }
            Step::Empty => std::thread::yield_now(),
            Step::Frozen(f) => panic!("unexpected freeze {f:?}"),
        }
        c.commit().unwrap();
    }
    producer.join().unwrap();
    assert_eq!(c.stats().records, total);
    assert_eq!(c.stats().lost_records, 0);
    assert!(matches!(c.next_batch().unwrap(), Step::Empty));
}

#[derive(Serialize)]
struct Outcome {
    events: Vec<Event>,
    flags: u32,
    next_seq: u64,
    dropped_records: u64,
    overflow_events: u64,
    epoch: u64,
}

fn outcome(shm: &Shm, events: Vec<Event>) -> Outcome {
    let view = shm.view();
    Outcome {
        events,
        flags: view.flags(),
        next_seq: view.next_seq(),
        dropped_records: view.dropped_records(),
        overflow_events: view.overflow_events(),
        epoch: view.epoch(),
    }
}

#[test]
fn overflow_counts_drops_exactly_and_clears() {
    let shm = Shm::new(8192);
    let pt = ProducerThread::spawn(shm.producer(), SEED, Workload::Ssd);
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut events = Vec::new();
    let r = pt.run(Cmd::UntilDrops {
        payload: 1000,
        drops: 3,
    });
    assert_eq!(r.dropped, 3);
    assert_eq!(shm.view().flags() & HMB_RING_FLAG_OVERFLOWED, HMB_RING_FLAG_OVERFLOWED);
    let seen = drain(&mut c, &mut events);
    assert_eq!(seen.len() as u64, r.written);
    // Space is free again: the next record is written and OVERFLOWED clears.
    let r2 = pt.run(Cmd::RecordOfSize { payload: 8 });
    assert_eq!(r2.written, 1);
    assert_eq!(shm.view().flags() & HMB_RING_FLAG_OVERFLOWED, 0);
    let seen2 = drain(&mut c, &mut events);
    assert_eq!(seen2[0].seq, r.written + 3);
    assert_eq!(c.stats().lost_records, 3);
    assert_eq!(c.stats().lost_events, 1);
    // A second overflow episode counts a second event.
    pt.run(Cmd::UntilDrops {
        payload: 1000,
        drops: 2,
    });
    drain(&mut c, &mut events);
    pt.run(Cmd::RecordOfSize { payload: 0 });
    drain(&mut c, &mut events);
    assert_eq!(c.stats().lost_records, 5);
    insta::assert_yaml_snapshot!(outcome(&shm, events));
}

#[test]
fn freeze_then_reinit_continues_with_a_new_epoch() {
    let shm = Shm::new(8192);
    let pt = ProducerThread::spawn(shm.producer(), SEED, Workload::Npu);
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut events = Vec::new();
    pt.run(Cmd::Produce { n: 5 });
    pt.run(Cmd::Freeze);
    // Frozen producer produces nothing, not even a sequence number.
    let r = pt.run(Cmd::Produce { n: 4 });
    assert_eq!((r.written, r.dropped, r.next_seq), (0, 0, 5));
    let seen = drain(&mut c, &mut events);
    assert_eq!(seen.len(), 5);
    seen.iter().for_each(|s| check_truth(SEED, Workload::Npu, s));
    // Frozen is reported again until the owner re-initialises.
    assert!(matches!(c.next_batch().unwrap(), Step::Frozen(_)));
    assert_eq!(module_sim::reinit(&shm.owner()).unwrap(), 2);
    assert!(matches!(
        c.next_batch(),
        Err(ConsumerError::EpochChanged { old: 1, new: 2 })
    ));
    c.reattach().unwrap();
    pt.run(Cmd::WaitReinit);
    pt.run(Cmd::Produce { n: 3 });
    let seen = drain(&mut c, &mut events);
    assert_eq!(seen.iter().map(|s| s.seq).collect::<Vec<_>>(), vec![0, 1, 2]);
    insta::assert_yaml_snapshot!(outcome(&shm, events));
}

#[test]
fn drops_before_a_freeze_are_reported_as_final_loss() {
    let shm = Shm::new(8192);
    let pt = ProducerThread::spawn(shm.producer(), SEED, Workload::Ssd);
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut events = Vec::new();
    let r = pt.run(Cmd::UntilDrops {
        payload: 2000,
        drops: 4,
    });
    pt.run(Cmd::Freeze);
    drain(&mut c, &mut events);
    match events.last() {
        Some(Event::Frozen {
            lost: Some((first, 4)), ..
        }) => assert_eq!(*first, r.written),
        other => panic!("expected a frozen event with 4 lost, got {other:?}"),
    }
    insta::assert_yaml_snapshot!(outcome(&shm, events));
}

/// Every small-tail case: the head is brought to `room` bytes before the
/// ring end, then a record of `payload` bytes is produced.
#[rstest]
fn wrap_small_tails(#[values(8, 16, 24, 32, 40, 64, 1000)] room: u64, #[values(0, 100, 4064)] payload: usize) {
    let ring = 8192u64;
    let shm = Shm::new(ring);
    let pt = ProducerThread::spawn(shm.producer(), SEED, Workload::Ssd);
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut events = Vec::new();
    let mut head = 0;
    while head < ring - room {
        let left = ring - room - head;
        let mut size = left.min(2048);
        if left > size && left - size < 32 {
            size = left - 32;
        }
        head = pt
            .run(Cmd::RecordOfSize {
                payload: size as usize - 32,
            })
            .head;
        drain(&mut c, &mut events);
    }
    assert_eq!(head, ring - room);
    events.clear();
    let r = pt.run(Cmd::RecordOfSize { payload });
    assert_eq!(r.written, 1);
    let seen = drain(&mut c, &mut events);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].payload.len(), payload);
    let size = align_record(payload as u32) as u64;
    let expected_end = if room >= size { ring - room + size } else { ring + size };
    assert_eq!(c.tail(), expected_end);
    insta::assert_yaml_snapshot!(format!("wrap_room{room}_payload{payload}"), events);
}

#[test]
fn unknown_minor_and_unknown_flag_are_tolerated() {
    let shm = Shm::new(8192);
    let owner = shm.owner();
    let mut hdr = owner.header_snapshot();
    hdr.version_minor = 7.into();
    owner.write_header(&hdr);
    owner.atomic_u32(offsets::FLAGS).fetch_or(1 << 9, Ordering::Release);
    let pt = ProducerThread::spawn(shm.producer(), SEED, Workload::Ssd);
    let mut c = shm.consumer(ConsumerConfig::default());
    pt.run(Cmd::Produce { n: 20 });
    let mut events = Vec::new();
    let seen = drain(&mut c, &mut events);
    assert_eq!(seen.len(), 20);
    seen.iter().for_each(|s| check_truth(SEED, Workload::Ssd, s));
    insta::assert_yaml_snapshot!(outcome(&shm, events));
}

#[rstest]
#[case::bad_magic("bad_magic", |h: &mut hmb_ring_hdr| h.magic = 0xdead_beef.into())]
#[case::too_new_major("too_new_major", |h: &mut hmb_ring_hdr| h.version_major = 2.into())]
#[case::bad_ring_size("bad_ring_size", |h: &mut hmb_ring_hdr| h.ring_size = 12288.into())]
#[case::ring_bigger_than_mapping("ring_bigger_than_mapping", |h: &mut hmb_ring_hdr| h.ring_size = 16384.into())]
#[case::bad_hdr_size("bad_hdr_size", |h: &mut hmb_ring_hdr| h.hdr_size = 64.into())]
#[case::head_too_far("head_too_far", |h: &mut hmb_ring_hdr| h.head = 8200.into())]
fn bad_identity_is_rejected_at_attach(#[case] name: &str, #[case] corrupt: fn(&mut hmb_ring_hdr)) {
    let shm = Shm::new(8192);
    let owner = shm.owner();
    let mut hdr = owner.header_snapshot();
    corrupt(&mut hdr);
    owner.write_header(&hdr);
    let err =
        hmb_trace_consumer::Consumer::attach(shm.view(), hmb_trace_consumer::NoPublish, ConsumerConfig::default())
            .err()
            .expect("attach must fail");
    insta::assert_snapshot!(format!("attach_{name}"), err.to_string());
}

/// Hostile contents written while the consumer runs are rejected cleanly.
#[rstest]
#[case::lying_length("lying_length")]
#[case::head_backwards("head_backwards")]
#[case::head_misaligned("head_misaligned")]
#[case::seq_backwards("seq_backwards")]
#[case::marker_flag("marker_flag")]
#[case::bad_pad("bad_pad")]
fn hostile_contents_are_rejected(#[case] how: &str) {
    let shm = Shm::new(8192);
    let owner = shm.owner();
    let pt = ProducerThread::spawn(shm.producer(), SEED, Workload::Ssd);
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut events = Vec::new();
    pt.run(Cmd::RecordOfSize { payload: 40 });
    drain(&mut c, &mut events); // tail = 72
    pt.run(Cmd::RecordOfSize { payload: 40 });
    pt.run(Cmd::RecordOfSize { payload: 40 });
    let mut rec = [0u8; 32];
    owner.read_data(72, &mut rec);
    let patch = |off: usize, bytes: &[u8]| {
        // SAFETY: in bounds of the test mapping.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), owner.base_ptr().add(4096 + off), bytes.len()) }
    };
    match how {
        "lying_length" => patch(72, &5000u32.to_le_bytes()),
        "head_backwards" => owner.atomic_u64(offsets::HEAD).store(64, Ordering::Release),
        "head_misaligned" => owner.atomic_u64(offsets::HEAD).store(150, Ordering::Release),
        "seq_backwards" => patch(72 + 8, &0u64.to_le_bytes()),
        "marker_flag" => patch(72 + 6, &HMB_RECORD_FLAG_MARKER.to_le_bytes()),
        "bad_pad" => patch(72 + 6, &HMB_RECORD_FLAG_PAD.to_le_bytes()),
        _ => unreachable!(),
    }
    drain(&mut c, &mut events);
    assert!(matches!(events.last(), Some(Event::Error { .. })), "{events:?}");
    // Nothing past the bad record was committed.
    assert_eq!(c.tail(), 72);
    insta::assert_yaml_snapshot!(format!("hostile_{how}"), events);
}

/// The engine loop and the consumer, both threads free-running with drops:
/// records received plus losses reported equal records attempted, and
/// every received record matches the ground truth.
#[test]
fn engine_with_drops_accounts_for_every_sequence_number() {
    let shm = Shm::new(8192);
    let engine_producer = shm.producer();
    let stop = Arc::new(AtomicBool::new(false));
    let workload = Workload::parse("sizes").unwrap();
    let mut engine =
        hmb_firmware_model::Engine::new(engine_producer, workload, SEED, hmb_firmware_model::Rate::Unlimited, ())
            .with_limit(50_000);
    let control = engine.control();
    let t = std::thread::spawn(move || {
        let out = engine.run_until(&AtomicBool::new(false));
        assert_eq!(out, hmb_firmware_model::RunOutcome::LimitReached);
        control.request_freeze();
        assert_eq!(
            engine.run_until(&AtomicBool::new(false)),
            hmb_firmware_model::RunOutcome::Frozen
        );
        engine.stats()
    });
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut received = 0u64;
    let mut lost = 0u64;
    let mut next = 0u64;
    loop {
        match c.next_batch().unwrap() {
            Step::Batch(b) => {
                if let Some(l) = b.lost {
                    assert_eq!(l.first_seq, next);
                    lost += l.count;
                    next += l.count;
                }
                for s in records_of(&b) {
                    assert_eq!(s.seq, next);
                    check_truth(SEED, workload, &s);
                    next += 1;
                    received += 1;
                }
            }
            Step::Empty => std::thread::yield_now(),
            Step::Frozen(f) => {
                lost += f.lost.map_or(0, |l| l.count);
                break;
            }
        }
        c.commit().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let stats = t.join().unwrap();
    assert_eq!(received, stats.written);
    assert_eq!(lost, stats.dropped);
    assert_eq!(received + lost, 50_000);
}
