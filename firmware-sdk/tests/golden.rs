//! The golden vectors of docs/test-vectors/v1, produced by the C library
//! and compared byte for byte with the checked-in files. The steps are
//! those of abi/src/vectors.rs, with the C producer in place of
//! RefRing::produce and the module's steps (init, tail, re-init, header
//! edits) done by the reference on the same bytes.

mod common;

use std::path::PathBuf;

use common::Slice;
use hmb_firmware_sdk::{AttachError, CProducer, Emitted};
use hmb_trace_abi::vectors::{payload_for, VECTOR_RING_SIZE};
use hmb_trace_abi::HMB_RING_HDR_SIZE;

struct Ring {
    // Field order: the producer points into `slice`, so it is dropped first.
    p: CProducer,
    slice: Slice,
}

impl Ring {
    fn new(epoch: u64) -> Ring {
        let mut slice = Slice::new(VECTOR_RING_SIZE, epoch);
        let mut p = slice.producer(false);
        p.attach(epoch).expect("fresh ring attaches");
        Ring { p, slice }
    }

    /// vectors.rs `produce`: opcode 0x0101, source 3, ts 1000 + 10 * seq.
    fn produce(&mut self, len: usize) -> Emitted {
        let seq = self.slice.hdr().next_seq.get();
        self.p.emit_ts(0x0101, 3, 1_000 + seq * 10, &payload_for(seq, len))
    }

    fn head(&self) -> u64 {
        self.slice.hdr().head.get()
    }

    fn advance_head_to(&mut self, target: u64) {
        loop {
            let head = self.head();
            if head >= target {
                return;
            }
            let remaining = target - head;
            let mut size = remaining.min(2048);
            if remaining - size > 0 && remaining - size < 32 {
                size = remaining - 32;
            }
            self.slice.publish_tail(head);
            assert_eq!(self.produce(size as usize - 32), Emitted::Written);
        }
    }

    fn fill_until_drop(&mut self) {
        while self.produce(1000) == Emitted::Written {}
    }

    fn image(&self) -> Vec<u8> {
        assert_eq!(self.p.violations(), 0, "the C producer wrote outside its share");
        self.slice.bytes().to_vec()
    }
}

fn wrap_case(room: u64, next_len: usize) -> Vec<u8> {
    let mut r = Ring::new(1);
    r.advance_head_to(VECTOR_RING_SIZE - room - 64);
    let head = r.head();
    r.slice.publish_tail(head);
    assert_eq!(r.produce(32), Emitted::Written);
    assert_eq!(r.produce(next_len), Emitted::Written);
    r.image()
}

fn c_vectors() -> Vec<(&'static str, Vec<u8>)> {
    let mut v = Vec::new();
    v.push(("empty", Ring::new(1).image()));

    let mut one = Ring::new(1);
    one.produce(13);
    v.push(("one_record", one.image()));

    for (name, room) in [("wrap_skip_8", 8u64), ("wrap_skip_16", 16), ("wrap_skip_24", 24)] {
        v.push((name, wrap_case(room, 100)));
    }
    v.push(("wrap_pad_32", wrap_case(32, 100)));
    v.push(("wrap_pad_1000", wrap_case(1000, 4064)));
    v.push(("wrap_exact_fit", wrap_case(136, 100)));

    let mut full = Ring::new(1);
    full.fill_until_drop();
    assert_eq!(full.produce(1000), Emitted::Dropped);
    assert_eq!(full.produce(1000), Emitted::Dropped);
    v.push(("overflow", full.image()));

    // overflow_cleared: tail past the first record (1000-byte payload: 1032 bytes).
    full.slice.publish_tail(1032);
    assert_eq!(full.produce(8), Emitted::Written);
    v.push(("overflow_cleared", full.image()));

    let mut frozen = Ring::new(1);
    for len in [0, 64, 200] {
        assert_eq!(frozen.produce(len), Emitted::Written);
    }
    frozen.p.freeze();
    assert_eq!(frozen.produce(10), Emitted::Frozen);
    v.push(("frozen", frozen.image()));

    let mut frozen_drops = Ring::new(1);
    frozen_drops.fill_until_drop();
    frozen_drops.p.freeze();
    v.push(("frozen_after_drops", frozen_drops.image()));

    // Re-init by epoch: the C producer refuses the frozen ring, then
    // attaches to the re-initialised one only with its new generation.
    let mut reinit = frozen;
    assert_eq!(reinit.p.attach(1), Err(AttachError::Frozen));
    reinit.slice.reinit();
    assert_eq!(reinit.p.attach(1), Err(AttachError::Epoch));
    reinit.p.attach(2).expect("epoch 2 attaches");
    reinit.produce(16);
    reinit.produce(16);
    v.push(("reinit_epoch", reinit.image()));

    let mut minor = Ring::new(1);
    minor.produce(24);
    let mut hdr = minor.slice.hdr();
    hdr.version_minor = 7.into();
    hdr.flags = (1u32 << 9).into();
    minor.slice.set_hdr(&hdr);
    v.push(("newer_minor_unknown_flag", minor.image()));

    let mut lying = Ring::new(1);
    lying.produce(40);
    let data = HMB_RING_HDR_SIZE as usize;
    lying.slice.bytes_mut()[data..data + 4].copy_from_slice(&5000u32.to_le_bytes());
    v.push(("hostile_length", lying.image()));

    let mut backwards = Ring::new(1);
    backwards.produce(40);
    backwards.slice.publish_tail(72);
    let mut hdr = backwards.slice.hdr();
    hdr.head = 8.into();
    backwards.slice.set_hdr(&hdr);
    v.push(("head_behind_tail", backwards.image()));
    v
}

fn vector_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/test-vectors/v1")
}

#[test]
fn c_producer_reproduces_golden_vectors_byte_for_byte() {
    let vectors = c_vectors();
    assert_eq!(vectors.len(), 16, "every vector but bad_magic and too_new_major");
    for (name, image) in vectors {
        let path = vector_dir().join(format!("{name}.ring"));
        let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(image.len(), want.len(), "{name}: length");
        if let Some(at) = image.iter().zip(&want).position(|(a, b)| a != b) {
            panic!(
                "{name}: first difference at byte {at}: C wrote {:#04x}, vector has {:#04x}",
                image[at], want[at]
            );
        }
    }
}

#[test]
fn c_producer_refuses_rings_a_consumer_aborts_on() {
    for (name, err) in [
        ("bad_magic", AttachError::Magic),
        ("too_new_major", AttachError::Version),
    ] {
        let want = std::fs::read(vector_dir().join(format!("{name}.ring"))).unwrap();
        let mut slice = Slice::new(VECTOR_RING_SIZE, 1);
        slice.bytes_mut().copy_from_slice(&want);
        let mut p = slice.producer(false);
        assert_eq!(p.attach(0), Err(err), "{name}");
        assert_eq!(
            p.emit(1, 0, b"x"),
            Emitted::Frozen,
            "{name}: detached producer writes nothing"
        );
        assert_eq!(slice.bytes(), &want[..], "{name}: untouched");
    }
    // Geometry: an advert whose slice_len disagrees with the header.
    let mut slice = Slice::new(VECTOR_RING_SIZE, 1);
    let mut p = slice.producer(false);
    assert_eq!(
        p.attach_len(HMB_RING_HDR_SIZE as u64 + VECTOR_RING_SIZE * 2, 1),
        Err(AttachError::Geometry)
    );
}

#[test]
fn oversized_payload_is_a_counted_drop() {
    let mut r = Ring::new(1);
    assert_eq!(r.p.emit_oversized(7, 4065), Emitted::Dropped);
    assert_eq!(r.produce(8), Emitted::Written);
    let hdr = r.slice.hdr();
    assert_eq!(
        (
            hdr.next_seq.get(),
            hdr.dropped_records.get(),
            hdr.overflow_events.get(),
            hdr.flags.get()
        ),
        (2, 1, 1, 0)
    );
    // The record written after the drop carries seq 1: the gap says what was lost.
    let rec = &r.slice.bytes()[HMB_RING_HDR_SIZE as usize..];
    assert_eq!(u64::from_le_bytes(rec[8..16].try_into().unwrap()), 1);
}

/// Firmware restarted mid-epoch (no reset, the advert kept): a new
/// producer attaches and picks up head, next_seq, the counters and
/// OVERFLOWED from the header, so the ring equals one uninterrupted run of
/// the reference producer.
#[test]
fn reattach_mid_epoch_continues_the_ring() {
    use hmb_trace_abi::reference::RefRing;
    let lens = |i: u64| ((i * 53) % 900) as usize;
    let mut want = RefRing::new(VECTOR_RING_SIZE, 1);
    let mut r = Ring::new(1);
    for i in 0..150u64 {
        if i % 20 == 0 {
            // A restart: the old state is gone, a fresh producer attaches.
            r.p = r.slice.producer(false);
            r.p.attach(1).unwrap();
        }
        if i % 25 == 24 {
            let head = want.hdr().head.get();
            want.publish_tail(head);
            r.slice.publish_tail(head);
        }
        let payload = payload_for(i, lens(i));
        want.produce(0x0101, 3, 1_000 + i * 10, &payload);
        r.p.emit_ts(0x0101, 3, 1_000 + i * 10, &payload);
    }
    let hdr = want.hdr();
    assert!(
        hdr.dropped_records.get() > 0 && hdr.head.get() > VECTOR_RING_SIZE,
        "drops and wraps happened"
    );
    assert!(
        r.image() == want.image,
        "restarted C producer diverged from one reference run"
    );
}
