//! The benches' two-core hand-over without the ring's protocol: a writer
//! thread fills `slot`-byte slots of a ring-sized anonymous buffer (one copy
//! each, as the producer copies a payload), publishing its position once per
//! 256 KiB; the calling thread takes each published 256 KiB piece (bytes the
//! other core wrote a moment ago) and frees it. One source for the ring
//! bench's two-core copy and the daemon bench's two-core write(2) (the
//! daemon's bench includes this file with `#[path]`, beside `backoff.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use memmap2::MmapOptions;

use crate::backoff;

/// Bytes published, and taken, at a time.
const STEP: u64 = 256 << 10;

/// `total` bytes through a `ring`-byte buffer from a writer thread to
/// `take`, which is called on this thread with each published piece in
/// order.
pub fn hand_over(ring: u64, total: u64, slot: usize, mut take: impl FnMut(&[u8])) {
    #[repr(align(128))]
    struct Pos(AtomicU64);
    let buf = MmapOptions::new().len(ring as usize).populate().map_anon().unwrap();
    let base = buf.as_ptr() as usize;
    let (written, read) = (Arc::new(Pos(AtomicU64::new(0))), Arc::new(Pos(AtomicU64::new(0))));
    let (written_w, read_w) = (written.clone(), read.clone());
    let slot = slot.clamp(1, STEP as usize);
    let writer = std::thread::spawn(move || {
        let body = vec![0x5Au8; slot];
        let mut at = 0u64;
        while at < total {
            backoff::spin_then_yield(|| at + STEP - read_w.0.load(Ordering::Acquire) <= ring);
            let end = (at + STEP).min(total);
            let mut pos = at;
            while pos < end {
                let n = ((end - pos) as usize).min(slot);
                // SAFETY: [pos % ring, +n) is inside the buffer (STEP divides
                // the ring) and is not read until `written` says so.
                unsafe {
                    std::ptr::copy_nonoverlapping(body.as_ptr(), (base + (pos % ring) as usize) as *mut u8, n);
                }
                pos += n as u64;
            }
            at = end;
            written_w.0.store(at, Ordering::Release);
        }
    });
    let mut at = 0u64;
    while at < total {
        let end = (at + STEP).min(total);
        backoff::spin_then_yield(|| written.0.load(Ordering::Acquire) >= end);
        // SAFETY: published by the writer above, inside the buffer.
        let piece =
            unsafe { std::slice::from_raw_parts((base + (at % ring) as usize) as *const u8, (end - at) as usize) };
        take(piece);
        at = end;
        read.0.store(at, Ordering::Release);
    }
    writer.join().unwrap();
    drop(buf);
}
