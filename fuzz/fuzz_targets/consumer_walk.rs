//! The consumer's batch walk over a hostile ring: attach to the bytes as a
//! mapped ring, then drain batch by batch while the "producer" (the rest of
//! the input) rewrites head, flags, epoch and counters between batches.
//! Never panic; every batch's slices lie inside the mapping and add up to
//! its byte count.
#![no_main]

use hmb_trace_abi::{offsets, HMB_RING_HDR_SIZE};
use hmb_trace_consumer::{Consumer, ConsumerConfig, NoPublish, RingView, Step};
use libfuzzer_sys::fuzz_target;

/// The data area size: the smallest valid ring keeps walks short.
const RING: usize = 8192;
const MAP: usize = HMB_RING_HDR_SIZE as usize + RING;

fuzz_target!(|input: &[u8]| {
    let (image, mut producer) = input.split_at(input.len().min(MAP));
    // u64 storage: the view needs 8-byte alignment for its atomics.
    let mut words = vec![0u64; MAP / 8];
    let base = words.as_mut_ptr() as *mut u8;
    // SAFETY: `words` holds MAP bytes; nothing else references them now.
    unsafe { std::ptr::copy_nonoverlapping(image.as_ptr(), base, image.len()) };
    let lo = base as usize;
    // SAFETY: `words` outlives the view and the consumer (dropped first, in
    // reverse order of declaration).
    let Ok(view) = (unsafe { RingView::from_raw(base, MAP) }) else {
        return;
    };
    let config = ConsumerConfig {
        max_iov: 1 + producer.first().map_or(7, |b| usize::from(b % 16)),
        max_batch_bytes: 1 << 12,
    };
    let Ok(mut consumer) = Consumer::attach(view, NoPublish, config) else {
        return;
    };
    for _ in 0..64 {
        match consumer.next_batch() {
            Ok(Step::Batch(batch)) => {
                let mut sum = 0u64;
                for s in batch.iov {
                    let p = s.as_ptr() as usize;
                    assert!(
                        p >= lo + HMB_RING_HDR_SIZE as usize && p + s.len() <= lo + MAP,
                        "slice outside the data area"
                    );
                    sum += s.len() as u64;
                }
                assert_eq!(sum, batch.bytes, "slices do not add up to the batch");
                assert!(batch.end >= batch.start);
                if consumer.commit().is_err() {
                    return;
                }
            }
            Ok(Step::Empty) | Ok(Step::Frozen(_)) => {}
            Err(_) => {
                // Errors a daemon re-attaches after (a new epoch): do the same.
                if consumer.reattach().is_err() {
                    return;
                }
            }
        }
        // The producer's next move: one header field, from the input.
        let Some((&[which, a, b, c, d, e, f, g, h], rest)) = producer.split_first_chunk::<9>() else {
            return;
        };
        producer = rest;
        let value = u64::from_le_bytes([a, b, c, d, e, f, g, h]);
        let at = match which % 6 {
            0 => offsets::HEAD,
            1 => offsets::FLAGS,
            2 => offsets::EPOCH,
            3 => offsets::NEXT_SEQ,
            4 => offsets::DROPPED_RECORDS,
            _ => offsets::OVERFLOW_EVENTS,
        };
        // SAFETY: header offsets are inside the mapping; the consumer reads
        // these fields with atomics, as it does with a live producer.
        unsafe {
            if at == offsets::FLAGS {
                std::ptr::write_volatile(base.add(at) as *mut u32, value as u32);
            } else {
                std::ptr::write_volatile(base.add(at) as *mut u64, value);
            }
        }
    }
    drop(consumer);
    drop(words);
});
