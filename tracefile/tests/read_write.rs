//! Files made by the writer and by hand read back exactly, through both
//! readers; torn and corrupt tails are reported at the right offset.

use std::io::Cursor;

use hmb_trace_abi::hmb_record_hdr;
use hmb_trace_file::*;
use proptest::prelude::*;

fn rec(seq: u64, opcode: u16, ts: u64, len: u32) -> hmb_record_hdr {
    hmb_record_hdr {
        length: len.into(),
        opcode: opcode.into(),
        seq: seq.into(),
        timestamp_ns: ts.into(),
        source: 3.into(),
        ..Default::default()
    }
}

fn payload(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 7 + i) as u8).collect()
}

/// A file with records, a drop, a freeze and a second epoch.
fn sample_file() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &FileHeader::new(1, 0, 8192, 4)).unwrap();
    for seq in 0..3u64 {
        w.write_record(
            &rec(seq, 0x0101, 100 + seq, seq as u32 * 5),
            &payload(seq, seq as usize * 5),
        )
        .unwrap();
    }
    w.write_marker(&Marker::Lost {
        first_seq: 3,
        count: 2,
        epoch: 4,
    })
    .unwrap();
    w.write_record(&rec(5, 0x0102, 200, 8), &payload(5, 8)).unwrap();
    w.write_marker(&Marker::Frozen {
        epoch: 4,
        last_seq: Some(5),
        next_seq: 7,
    })
    .unwrap();
    w.write_marker(&Marker::Lost {
        first_seq: 6,
        count: 1,
        epoch: 4,
    })
    .unwrap();
    w.write_marker(&Marker::Epoch {
        epoch: 5,
        ring_size: 16384,
    })
    .unwrap();
    w.write_record(&rec(0, 0x0103, 300, 4064), &payload(0, 4064)).unwrap();
    w.into_inner()
}

#[derive(Debug, PartialEq)]
struct Owned {
    offset: u64,
    seq: u64,
    opcode: u16,
    marker: Option<Marker>,
    payload: Vec<u8>,
}

fn own(item: Item<'_>) -> Owned {
    Owned {
        offset: item.offset,
        seq: item.seq(),
        opcode: item.opcode(),
        marker: match item.kind().unwrap() {
            ItemKind::Marker(m) => Some(m),
            ItemKind::Record => None,
        },
        payload: item.payload.to_vec(),
    }
}

fn read_stream(bytes: &[u8], cap: usize) -> (Vec<Owned>, Option<FileError>) {
    let mut r = TraceReader::with_capacity(Cursor::new(bytes), cap).unwrap();
    let mut out = Vec::new();
    loop {
        match r.next_item() {
            Ok(Some(item)) => out.push(own(item)),
            Ok(None) => return (out, None),
            Err(e) => {
                assert!(matches!(r.next_item(), Ok(None)), "reader must stop after an error");
                return (out, Some(e));
            }
        }
    }
}

fn read_slice(bytes: &[u8]) -> (Vec<Owned>, Option<FileError>) {
    let mut out = Vec::new();
    for item in SliceReader::new(bytes).unwrap() {
        match item {
            Ok(item) => out.push(own(item)),
            Err(e) => return (out, Some(e)),
        }
    }
    (out, None)
}

#[test]
fn sample_reads_back_in_order_with_markers() {
    let bytes = sample_file();
    let (items, err) = read_slice(&bytes);
    assert!(err.is_none());
    let seqs: Vec<_> = items.iter().map(|i| (i.seq, i.opcode)).collect();
    assert_eq!(
        seqs,
        [
            (0, 0x0101),
            (1, 0x0101),
            (2, 0x0101),
            (0, 0xFF01),
            (5, 0x0102),
            (0, 0xFF02),
            (0, 0xFF01),
            (0, 0xFF03),
            (0, 0x0103)
        ]
    );
    assert_eq!(items[0].offset, 64);
    assert_eq!(items[1].offset, 64 + 32);
    assert_eq!(items[2].offset, 64 + 32 + 40);
    assert_eq!(items[1].payload, payload(1, 5));
    assert_eq!(
        items[7].marker,
        Some(Marker::Epoch {
            epoch: 5,
            ring_size: 16384
        })
    );
    assert_eq!(items[8].payload.len(), 4064);
    // Streaming with the smallest buffer and the mmap path agree with it.
    assert_eq!(read_stream(&bytes, 0).0, items);
    assert_eq!(read_stream(&bytes, 1 << 20).0, items);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    std::fs::write(&path, &bytes).unwrap();
    let mapped = MappedTrace::open(&path).unwrap();
    let via_map: Vec<_> = mapped.items().map(|i| own(i.unwrap())).collect();
    assert_eq!(via_map, items);
}

#[test]
fn every_truncation_point_is_reported_at_the_item_it_cuts() {
    let bytes = sample_file();
    let (all, _) = read_slice(&bytes);
    let starts: Vec<u64> = all.iter().map(|i| i.offset).collect();
    for cut in 64..bytes.len() {
        let (items, err) = read_stream(&bytes[..cut], 4096);
        let (items2, err2) = read_slice(&bytes[..cut]);
        assert_eq!(items, items2);
        let complete = starts
            .iter()
            .zip(all.iter())
            .filter(|(s, i)| **s + aligned(i) <= cut as u64)
            .count();
        assert_eq!(items.len(), complete, "cut at {cut}");
        assert_eq!(items[..], all[..complete]);
        let on_boundary = starts.contains(&(cut as u64));
        match (err, err2) {
            (None, None) => assert!(on_boundary, "cut at {cut} inside an item went unnoticed"),
            (Some(FileError::Truncated { offset, have, .. }), Some(FileError::Truncated { offset: o2, .. })) => {
                assert!(!on_boundary);
                assert_eq!(offset, o2);
                assert_eq!(offset, starts[complete]);
                assert_eq!(offset + have, cut as u64);
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
}

fn aligned(i: &Owned) -> u64 {
    (32 + i.payload.len() as u64).div_ceil(8) * 8
}

#[test]
fn corrupt_items_stop_reading_with_their_offset() {
    let mut bytes = sample_file();
    // Second record's length becomes 5000.
    bytes[96..100].copy_from_slice(&5000u32.to_le_bytes());
    let (items, err) = read_stream(&bytes, 4096);
    assert_eq!(items.len(), 1);
    assert!(matches!(
        err,
        Some(FileError::LengthTooLarge {
            offset: 96,
            length: 5000
        })
    ));

    let mut bytes = sample_file();
    bytes[96 + 6] = 1; // PAD flag
    assert!(matches!(
        read_slice(&bytes).1,
        Some(FileError::PadInFile { offset: 96, .. })
    ));

    let mut bytes = sample_file();
    // The LOST marker claims only 16 payload bytes.
    let lost_at = 64 + 32 + 40 + 48;
    bytes[lost_at..lost_at + 4].copy_from_slice(&16u32.to_le_bytes());
    assert!(matches!(
        read_slice(&bytes).1,
        Some(FileError::BadMarker { opcode: 0xFF01, .. })
    ));
}

#[test]
fn header_problems_are_errors_not_items() {
    let bytes = sample_file();
    assert!(matches!(
        TraceReader::new(Cursor::new(&bytes[..10])),
        Err(FileError::ShortHeader { have: 10, .. })
    ));
    assert!(matches!(SliceReader::new(&[]), Err(FileError::ShortHeader { .. })));
    let mut b = bytes.clone();
    b[8] = 2;
    assert!(matches!(
        TraceReader::new(Cursor::new(&b)),
        Err(FileError::UnsupportedFormat { found: 2, .. })
    ));
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        MappedTrace::open(&empty),
        Err(FileError::ShortHeader { have: 0, .. })
    ));
}

#[test]
fn larger_header_of_a_newer_minor_is_skipped() {
    let sample = sample_file();
    let mut bytes = sample[..64].to_vec();
    bytes[10] = 3; // minor 3
    bytes[12..16].copy_from_slice(&72u32.to_le_bytes());
    bytes.extend_from_slice(&[0xAB; 8]);
    bytes.extend_from_slice(&sample[64..]);
    let (a, ea) = read_stream(&bytes, 4096);
    let (b, eb) = read_slice(&bytes);
    assert!(ea.is_none() && eb.is_none());
    assert_eq!(a.len(), 9);
    assert_eq!(a, b);
    assert_eq!(a[0].offset, 72);
}

#[test]
fn recovery_finds_torn_tail_and_per_epoch_progress() {
    let bytes = sample_file();
    let full = recover_from(Cursor::new(&bytes)).unwrap();
    assert_eq!(full.tail, TailState::Clean);
    assert_eq!(full.valid_len, bytes.len() as u64);
    assert_eq!(full.items, 9);
    assert_eq!(full.epochs.len(), 2);
    let e4 = full.epochs[0];
    assert_eq!(
        (e4.epoch, e4.last_seq, e4.next_seq, e4.records, e4.frozen),
        (4, Some(5), 7, 4, true)
    );
    let e5 = *full.last_epoch();
    assert_eq!(
        (e5.epoch, e5.ring_size, e5.last_seq, e5.next_seq, e5.records),
        (5, 16384, Some(0), 1, 1)
    );

    let cut = bytes.len() - 100;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("torn.bin");
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let torn = recover(&path).unwrap();
    let last_start = bytes.len() as u64 - 4096;
    assert_eq!(
        torn.tail,
        TailState::Torn {
            offset: last_start,
            have: cut as u64 - last_start,
            need: 4096
        }
    );
    assert_eq!(torn.valid_len, last_start);
    assert_eq!(torn.file_len, cut as u64);
    assert_eq!(last_complete_offset(&path).unwrap(), last_start);
    assert_eq!(torn.last_epoch().last_seq, None);
    // Truncating to valid_len gives a clean file.
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(torn.valid_len).unwrap();
    assert_eq!(recover(&path).unwrap().tail, TailState::Clean);
}

#[test]
fn writer_refuses_what_a_file_must_not_hold() {
    let mut w = TraceWriter::new(Vec::new(), &FileHeader::new(1, 0, 8192, 0)).unwrap();
    let mut h = rec(0, 1, 0, 4);
    assert!(w.write_record(&h, &[0; 3]).is_err());
    h.flags = 1.into();
    assert!(w.write_record(&h, &[0; 4]).is_err());
    h.flags = 0.into();
    w.write_record(&h, &[1; 4]).unwrap();
    let mut ring_bytes = w.get_ref()[64..].to_vec();
    assert_eq!(ring_bytes.len(), 40);
    w.write_ring_bytes(&ring_bytes).unwrap();
    assert!(w.write_ring_bytes(&ring_bytes[..36]).is_err());
    ring_bytes[6] = 2; // MARKER
    assert!(w.write_ring_bytes(&ring_bytes).is_err());
    assert_eq!(w.offset(), 64 + 80);
}

proptest! {
    #[test]
    fn write_then_read_is_identity(recs in proptest::collection::vec((any::<u16>(), any::<u64>(), 0u32..300), 0..40)) {
        let mut w = TraceWriter::new(Vec::new(), &FileHeader::new(1, 0, 1 << 20, 0)).unwrap();
        for (i, (op, ts, len)) in recs.iter().enumerate() {
            w.write_record(&rec(i as u64, *op, *ts, *len), &payload(i as u64, *len as usize)).unwrap();
        }
        let bytes = w.into_inner();
        let (items, err) = read_stream(&bytes, 4096);
        prop_assert!(err.is_none());
        prop_assert_eq!(items.len(), recs.len());
        for (i, (item, (op, _, len))) in items.iter().zip(recs.iter()).enumerate() {
            prop_assert_eq!(item.seq, i as u64);
            prop_assert_eq!(item.opcode, *op);
            prop_assert_eq!(&item.payload, &payload(i as u64, *len as usize));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut bytes = FileHeader::new(1, 0, 8192, 0).encode().to_vec();
        bytes.extend_from_slice(&tail);
        let (a, ea) = read_stream(&bytes, 4096);
        let (b, eb) = read_slice(&bytes);
        prop_assert_eq!(a, b);
        prop_assert_eq!(ea.map(|e| e.to_string()), eb.map(|e| e.to_string()));
        let _ = recover_from(Cursor::new(&bytes));
    }
}

#[test]
fn copying_every_item_reproduces_the_file() {
    let bytes = sample_file();
    let reader = SliceReader::new(&bytes).unwrap();
    let mut w = TraceWriter::new(Vec::new(), reader.header()).unwrap();
    for item in reader {
        w.write_item(&item.unwrap()).unwrap();
    }
    assert_eq!(w.into_inner(), bytes);
}

#[test]
fn recovery_through_a_small_buffer_finds_the_same() {
    let bytes = sample_file();
    for cut in [bytes.len(), bytes.len() - 100, 200, 97] {
        let full = recover_from(Cursor::new(&bytes[..cut])).unwrap();
        let small = recover::recover_from_with_capacity(Cursor::new(&bytes[..cut]), 4096).unwrap();
        assert_eq!(full, small, "cut at {cut}");
    }
}
