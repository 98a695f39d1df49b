//! The latencies of known records, through the catalog.

use super::*;
use hmb_trace_abi::hmb_record_hdr;
use hmb_trace_file::{FileHeader, SliceReader, TraceWriter};

/// Percentiles of a known set, from real records through the catalog.
#[test]
fn percentiles_of_known_latencies() {
    let catalog = Catalog::builtin();
    let mut w = TraceWriter::new(Vec::new(), &FileHeader::new(1, 0, 1 << 20, 1)).unwrap();
    // 1000 NAND reads with latency 1..=1000 µs on die 0x0102; 1000
    // fetch/complete pairs 10 µs apart on queue 3.
    for i in 0..1000u64 {
        let mut p = [0u8; 16];
        p[12..16].copy_from_slice(&(((i + 1) * 1000) as u32).to_le_bytes());
        let hdr = hmb_record_hdr {
            length: 16u32.into(),
            opcode: 0x0301u16.into(),
            seq: (3 * i).into(),
            timestamp_ns: (i * 100_000).into(),
            source: 0x0102u32.into(),
            ..Default::default()
        };
        w.write_record(&hdr, &p).unwrap();
        let mut f = [0u8; 24];
        f[0..2].copy_from_slice(&3u16.to_le_bytes());
        f[2..4].copy_from_slice(&((i % 1024) as u16).to_le_bytes());
        let fetch = hmb_record_hdr {
            length: 24u32.into(),
            opcode: 0x0101u16.into(),
            seq: (3 * i + 1).into(),
            timestamp_ns: (i * 100_000 + 1).into(),
            source: 3u32.into(),
            ..Default::default()
        };
        w.write_record(&fetch, &f).unwrap();
        let mut c = [0u8; 16];
        c[0..4].copy_from_slice(&f[0..4]);
        let done = hmb_record_hdr {
            length: 16u32.into(),
            opcode: 0x0102u16.into(),
            seq: (3 * i + 2).into(),
            timestamp_ns: (i * 100_000 + 10_001).into(),
            source: 3u32.into(),
            ..Default::default()
        };
        w.write_record(&done, &c).unwrap();
    }
    w.flush().unwrap();
    let bytes = w.into_inner();
    let reader = SliceReader::new(&bytes).unwrap();
    let header = *reader.header();
    let mut lat = Latency::new(&catalog);
    let mut walker = crate::walk::Walker::new(&header);
    for item in reader {
        let item = item.unwrap();
        walker.feed(&item, &mut |ev| lat.add(&ev));
    }
    let rows = lat.percentiles();
    let nand = rows.iter().find(|r| r.opcode == 0x0301 && r.source.is_none()).unwrap();
    assert_eq!(nand.count, 1000);
    let near = |got: u64, want: u64| got.abs_diff(want) * 100 <= want;
    assert!(near(nand.p50, 500_000), "{}", nand.p50);
    assert!(near(nand.p90, 900_000), "{}", nand.p90);
    assert!(near(nand.p99, 990_000), "{}", nand.p99);
    assert!(near(nand.p999, 999_000), "{}", nand.p999);
    assert_eq!(nand.max, 1_000_000, "max is exact");
    assert!(rows
        .iter()
        .any(|r| r.opcode == 0x0301 && r.source == Some(0x0102) && r.count == 1000));
    let paired = rows
        .iter()
        .find(|r| r.opcode == 0x0102 && r.measure == Measure::Paired && r.source == Some(3))
        .unwrap();
    assert_eq!(paired.count, 1000);
    assert!(near(paired.p50, 10_000) && near(paired.max, 10_000));
    // The completions' latency field is 0 here: recorded as 1 ns.
    let field = rows
        .iter()
        .find(|r| r.opcode == 0x0102 && r.measure == Measure::Field && r.source.is_none())
        .unwrap();
    assert_eq!(field.max, 1);
    // Queue depth: never more than one command open on queue 3.
    let d = lat.depth_series();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].source, 3);
    assert!(d[0].max.iter().all(|&m| m <= 1) && d[0].max.contains(&1));
    assert!(d[0].max.len() <= DEPTH_BINS);
}
