//! Ring header and record parser (abi) over hostile ring bytes: header
//! checks, the window check, and a walk of `[tail, head)` with
//! `parse_record_at` like every consumer does. Never panic; every item
//! parsed lies inside the data area and moves the cursor forward, aligned.
#![no_main]

use hmb_trace_abi::*;
use libfuzzer_sys::fuzz_target;

/// Rings above this are not worth the copy per input.
const MAX_FUZZ_RING: u64 = 64 << 10;

fuzz_target!(|bytes: &[u8]| {
    let Ok(snap) = RingSnapshot::parse(bytes) else {
        return;
    };
    let hdr = snap.hdr;
    let _ = check_compat(&hdr);
    let ring_size = hdr.ring_size.get();
    let (head, tail) = (hdr.head.get(), hdr.tail.get());
    if RingSnapshot::check_window(head, tail, ring_size).is_err() {
        return;
    }
    // The data area as the input gives it, zero-filled to the header's size
    // (the parser itself refuses a size that is not a power of two).
    let size = if ring_size.is_power_of_two() && ring_size <= MAX_FUZZ_RING {
        ring_size as usize
    } else {
        bytes.len().saturating_sub(HMB_RING_HDR_SIZE as usize)
    };
    let mut data = vec![0u8; size];
    if let Some(rest) = bytes.get(HMB_RING_HDR_SIZE as usize..) {
        let n = rest.len().min(size);
        data[..n].copy_from_slice(&rest[..n]);
    }
    let mut pos = tail;
    // Each item advances at least 8 bytes: this bound is never the reason
    // the walk ends unless the parser loops.
    for _ in 0..=(size / 8 + 1) {
        if pos >= head {
            return;
        }
        match parse_record_at(&data, pos, head) {
            Ok(item) => {
                let adv = item.advance();
                assert!(adv > 0, "no progress at {pos}: {item:?}");
                assert_eq!(adv % HMB_RING_ALIGN as u64, 0, "misaligned advance {item:?}");
                assert!(adv <= head - pos, "item past head at {pos}: {item:?}");
                if let RecordAt::Record { hdr, offset, size } = item {
                    assert!(offset + size as usize <= data.len(), "record outside the data area");
                    assert!(hdr.length.get() <= HMB_RECORD_MAX_PAYLOAD);
                }
                pos += adv;
            }
            Err(_) => return,
        }
    }
    panic!("walk of [{tail}, {head}) did not end");
});
