//! Fill a ring file with records and freeze it, for counting the daemon's
//! instructions per record under callgrind (docs/performance.md): the
//! daemon drains the ring, writes the FROZEN marker and exits 8, so the run
//! is deterministic whatever the machine's load.
//!
//! `cargo run --release -p hmb-trace-daemon --example ring_fill -- PATH PAYLOAD RECORDS [RING_MIB]`

use std::sync::Arc;

use hmb_firmware_model::{module_sim, Producer, SharedRing};
use hmb_trace_abi::HMB_RING_HDR_SIZE;
use memmap2::MmapOptions;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: ring_fill PATH PAYLOAD RECORDS [RING_MIB]");
        std::process::exit(2);
    }
    let num = |s: &str| -> u64 {
        s.parse().unwrap_or_else(|_| {
            eprintln!("ring_fill: not a number: {s}");
            std::process::exit(2)
        })
    };
    let (payload, records) = (num(&args[1]) as usize, num(&args[2]));
    let ring_size = args.get(3).map_or(16, |s| num(s)) << 20;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&args[0])
        .expect("create the ring file");
    file.set_len(HMB_RING_HDR_SIZE as u64 + ring_size)
        .expect("size the ring file");
    let map = Arc::new(MmapOptions::new().populate().map_raw(&file).expect("map the ring file"));
    let ring = SharedRing::from_mmap(map).expect("ring mapping");
    module_sim::init(&ring, ring_size, 1).expect("init the ring");
    let mut p = Producer::attach(ring.share()).expect("attach");
    let body = vec![0x5Au8; payload];
    let mut written = 0u64;
    for i in 0..records {
        if !p.fits(payload) {
            break;
        }
        p.produce(0x0F01, 0, i, &body);
        written += 1;
    }
    p.freeze();
    println!("{written} records, {} bytes", p.head());
}
