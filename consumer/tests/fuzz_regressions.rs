//! Inputs the fuzz targets (fuzz/) found; each test says what broke.

use hmb_trace_abi::reference::RefRing;
use hmb_trace_consumer::{Consumer, ConsumerConfig, ConsumerError, NoPublish, RingView, Step};

/// One epoch's ring: record seq 0, then a gap the producer claims reaches
/// almost 2^64 (next_seq jumped to u64::MAX - 2), then one more record.
fn ring_with_huge_gap(epoch: u64) -> Vec<u8> {
    let mut ring = RefRing::new(8192, epoch);
    ring.produce(1, 0, 10, b"first");
    let mut hdr = ring.hdr();
    hdr.next_seq = (u64::MAX - 2).into();
    ring.set_hdr(&hdr);
    ring.produce(1, 0, 20, b"second");
    ring.image
}

/// consumer_walk: two epochs each reporting a gap of ~2^64 records overflowed
/// the lost-records total (a panic with overflow checks, a wrong total
/// without). It saturates now.
#[test]
fn lost_records_saturate_instead_of_overflowing() {
    let first = ring_with_huge_gap(1);
    let mut words = vec![0u64; first.len() / 8];
    let base = words.as_mut_ptr() as *mut u8;
    // SAFETY: `words` holds the image and outlives the consumer; the
    // consumer only reads it through the view's atomics.
    unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), base, first.len()) };
    let view = unsafe { RingView::from_raw(base, first.len()) }.unwrap();
    let mut c = Consumer::attach(view, NoPublish, ConsumerConfig::default()).unwrap();
    let drain = |c: &mut Consumer<NoPublish>| loop {
        match c.next_batch() {
            Ok(Step::Batch(_)) => c.commit().unwrap(),
            Ok(Step::Empty) => return,
            Ok(Step::Frozen(_)) => panic!("not frozen"),
            Err(ConsumerError::EpochChanged { .. }) => c.reattach().unwrap(),
            Err(e) => panic!("{e}"),
        }
    };
    drain(&mut c);
    assert_eq!(c.stats().lost_records, u64::MAX - 3);
    // The ring owner re-initialises the ring (epoch 2) with the same story.
    let second = ring_with_huge_gap(2);
    unsafe { std::ptr::copy_nonoverlapping(second.as_ptr(), base, second.len()) };
    drain(&mut c);
    assert_eq!(c.stats().lost_records, u64::MAX, "saturated, not wrapped");
    assert_eq!(c.stats().lost_events, 2);
    drop(c);
    drop(words);
}

/// consumer_walk (CI run of 2026-12-02, seed 1): a record claiming sequence
/// u64::MAX overflowed `seq + 1`. Such a record has no successor: it is a
/// hostile ring (`SeqExhausted`), reported after the good records before it.
#[test]
fn a_record_with_the_last_sequence_number_is_refused() {
    let mut ring = RefRing::new(8192, 1);
    ring.produce(1, 0, 10, b"good");
    let mut hdr = ring.hdr();
    hdr.next_seq = u64::MAX.into();
    ring.set_hdr(&hdr);
    ring.produce(1, 0, 20, b"last");
    let image = ring.image;
    let mut words = vec![0u64; image.len() / 8];
    let base = words.as_mut_ptr() as *mut u8;
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), base, image.len()) };
    let view = unsafe { RingView::from_raw(base, image.len()) }.unwrap();
    let mut c = Consumer::attach(view, NoPublish, ConsumerConfig::default()).unwrap();
    match c.next_batch() {
        Ok(Step::Batch(b)) => assert_eq!((b.records, b.first_seq), (1, Some(0))),
        other => panic!("expected the good record first, got {other:?}"),
    }
    c.commit().unwrap();
    match c.next_batch() {
        Err(ConsumerError::Abi(hmb_trace_abi::AbiError::SeqExhausted { seq, .. })) => assert_eq!(seq, u64::MAX),
        other => panic!("expected SeqExhausted, got {other:?}"),
    }
    drop(c);
    drop(words);
}
