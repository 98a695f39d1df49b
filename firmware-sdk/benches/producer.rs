//! The C producer beside the Rust firmware-model producer, same run, same
//! memory, same workload: 64-byte events (32-byte payload) into a 1 MiB
//! ring whose consumer keeps up (tail = head every 1024 events).
//! `cargo bench -p hmb-firmware-sdk --bench producer`; docs/firmware-sdk.md
//! has the figures.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use hmb_firmware_model::Producer;
use hmb_firmware_sdk::{CProducer, Emitted};
use hmb_trace_abi::{module_sim, offsets, SharedRing, HMB_RING_HDR_SIZE};

const RING: u64 = 1 << 20;
const EVENTS: u64 = 4_000_000;

fn fresh(words: &[AtomicU64]) -> SharedRing {
    // SAFETY: words outlives the ring handle in main.
    let ring = unsafe { SharedRing::from_raw(words.as_ptr() as *mut u8, words.len() * 8) }.unwrap();
    module_sim::init(&ring, RING, 1).unwrap();
    ring
}

fn catch_up(ring: &SharedRing) {
    let head = ring.atomic_u64(offsets::HEAD).load(Ordering::Acquire);
    ring.atomic_u64(offsets::TAIL).store(head, Ordering::Release);
}

fn bench_c(words: &[AtomicU64], payload: &[u8]) -> f64 {
    let ring = fresh(words);
    // SAFETY: as in fresh().
    let mut p = unsafe { CProducer::new(words.as_ptr() as *mut u8, words.len() * 8, false) };
    p.attach(1).unwrap();
    let t = Instant::now();
    for i in 0..EVENTS {
        assert_eq!(p.emit_ts(0x0101, 0, i, payload), Emitted::Written);
        if i % 1024 == 1023 {
            catch_up(&ring);
        }
    }
    t.elapsed().as_nanos() as f64 / EVENTS as f64
}

fn bench_rust(words: &[AtomicU64], payload: &[u8]) -> f64 {
    let ring = fresh(words);
    let mut p = Producer::attach(ring.share()).unwrap();
    let t = Instant::now();
    for i in 0..EVENTS {
        let r = p.produce(0x0101, 0, i, payload);
        assert!(matches!(r, hmb_trace_abi::reference::Produced::Written { .. }));
        if i % 1024 == 1023 {
            catch_up(&ring);
        }
    }
    t.elapsed().as_nanos() as f64 / EVENTS as f64
}

fn main() {
    let words: Vec<AtomicU64> = (0..(HMB_RING_HDR_SIZE as u64 + RING) / 8)
        .map(|_| AtomicU64::new(0))
        .collect();
    let payload = [0x5au8; 32];
    let (mut c, mut r) = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        c = c.min(bench_c(&words, &payload));
        r = r.min(bench_rust(&words, &payload));
    }
    println!("producer, 64-byte events, best of 3 x {EVENTS}: C (firmware-sdk via hooks) {c:.1} ns/event, Rust (firmware-model) {r:.1} ns/event");
}
