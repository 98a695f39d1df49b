#![allow(dead_code)]

use hmb_nvme::fake_host::FakeHost;
use hmb_nvme::{ControllerConfig, Status};

pub const GUEST_BYTES: u64 = 96 << 20;

/// A host whose controller is enabled, with I/O queue pair 1 (64 entries).
pub fn ready_host(cfg: ControllerConfig) -> FakeHost {
    let mut h = FakeHost::new(cfg, GUEST_BYTES);
    assert_eq!(h.enable(32) & 0b11, 1, "RDY without CFS");
    h.create_io_queue(1, 64).expect("I/O queue pair 1");
    h
}

pub fn status_of(c: hmb_nvme::fake_host::Completion) -> Status {
    c.status
}

/// A deterministic byte pattern that differs per LBA and per call site.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
