//! Soak: 10^8 records of random sizes through a 16 MiB ring, two threads,
//! zero loss, every record checked against the ground truth.
//! `cargo test --release -p hmb-trace-consumer --test soak -- --ignored`
//! (HMB_SOAK_RECORDS overrides the count).

mod common;

use common::*;
use hmb_firmware_model::{fill_record, Workload};
use hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD;
use hmb_trace_consumer::{ConsumerConfig, Step};

#[test]
#[ignore = "soak: minutes in release mode"]
fn soak_hundred_million_records() {
    let total: u64 = std::env::var("HMB_SOAK_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000_000);
    let seed = 0x50A4;
    let workload = Workload::parse("sizes").unwrap();
    let shm = Shm::new(16 << 20);
    let mut p = shm.producer();
    let started = std::time::Instant::now();
    let producer = std::thread::spawn(move || {
        let mut buf = [0u8; HMB_RECORD_MAX_PAYLOAD as usize];
        for seq in 0..total {
            let shape = fill_record(seed, workload, seq, &mut buf);
            while !p.fits(shape.len) {
                std::hint::spin_loop();
            }
            p.produce(shape.opcode, shape.source, seq, &buf[..shape.len]);
        }
    });
    let mut c = shm.consumer(ConsumerConfig::default());
    let mut next = 0u64;
    let mut bytes = 0u64;
    let mut want = [0u8; HMB_RECORD_MAX_PAYLOAD as usize];
    while next < total {
        match c.next_batch().unwrap() {
            Step::Batch(b) => {
                assert!(b.lost.is_none(), "loss at {next}");
                bytes += b.bytes;
                for slice in b.iov {
                    let mut rest: &[u8] = slice;
                    while !rest.is_empty() {
                        let len = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
                        let seq = u64::from_le_bytes(rest[8..16].try_into().unwrap());
                        assert_eq!(seq, next);
                        let shape = fill_record(seed, workload, seq, &mut want);
                        assert_eq!(shape.len, len);
                        assert!(rest[32..32 + len] == want[..len], "payload of seq {seq}");
                        rest = &rest[hmb_trace_abi::align_record(len as u32) as usize..];
                        next += 1;
                    }
                }
            }
            Step::Empty => std::hint::spin_loop(),
            Step::Frozen(_) => panic!("frozen"),
        }
        c.commit().unwrap();
    }
    producer.join().unwrap();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "soak: {total} records, {bytes} bytes, {secs:.1} s, {:.1} M records/s",
        total as f64 / secs / 1e6
    );
    assert_eq!(c.stats().records, total);
    assert_eq!(c.stats().lost_records, 0);
}
