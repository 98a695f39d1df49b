//! docs/abi.md decision 10 (32-bit producers): the library reaches head only
//! through one 8-byte write at head's own aligned address, reads tail only
//! through one 8-byte read, and puts a fence between a record's bytes and
//! the head write that publishes them. With a hook that makes an aligned
//! 8-byte access one transaction (the documented contract), no host reader
//! can see head or tail torn. The access log of a run with wraps, PADs,
//! drops, OVERFLOWED and a freeze shows it.

mod common;

use common::Slice;
use hmb_firmware_sdk::{Access, Emitted};
use hmb_trace_abi::{offsets, HMB_RING_HDR_SIZE};

fn overlaps(off: u64, len: u32, field: usize, size: u64) -> bool {
    off < field as u64 + size && (field as u64) < off + len as u64
}

#[test]
fn head_and_tail_cross_the_hook_whole_and_fenced() {
    let ring_size = 8192u64;
    let mut slice = Slice::new(ring_size, 1);
    let mut p = slice.producer(true);
    p.attach(1).unwrap();
    p.take_accesses();
    let (mut written, mut dropped) = (0, 0);
    let mut tail_moves = 0;
    for i in 0..400u32 {
        let len = (i * 97) % 1500;
        match p.emit(9, 0, &vec![0xa5; len as usize]) {
            Emitted::Written => written += 1,
            Emitted::Dropped => dropped += 1,
            Emitted::Frozen => unreachable!(),
        }
        if i % 15 == 14 {
            // The module frees everything published so far.
            let head = slice.hdr().head.get();
            slice.publish_tail(head);
            tail_moves += 1;
        }
    }
    p.freeze();
    assert!(
        written > 50 && dropped > 50,
        "both paths ran: {written} written, {dropped} dropped"
    );
    assert!(slice.hdr().head.get() > 4 * ring_size, "wrapped");
    assert!(tail_moves > 0);

    let log = p.take_accesses();
    let (mut head_writes, mut tail_reads, mut flag_writes) = (0, 0, 0);
    // Data written since the last fence: a head write must find none.
    let mut unfenced_data = false;
    for a in &log {
        match *a {
            Access::Fence => unfenced_data = false,
            Access::Write { off, len } => {
                if overlaps(off, len, offsets::HEAD, 8) {
                    assert_eq!((off, len), (offsets::HEAD as u64, 8), "head written whole, in one call");
                    assert!(!unfenced_data, "a fence separates the record from its head write");
                    head_writes += 1;
                }
                if overlaps(off, len, offsets::FLAGS, 4) {
                    assert_eq!((off, len), (offsets::FLAGS as u64, 4), "flags written whole");
                    flag_writes += 1;
                }
                assert!(!overlaps(off, len, offsets::TAIL, 8), "the producer never writes tail");
                if off >= HMB_RING_HDR_SIZE as u64 {
                    unfenced_data = true;
                }
            }
            Access::Read { off, len } => {
                if overlaps(off, len, offsets::TAIL, 8) {
                    assert_eq!((off, len), (offsets::TAIL as u64, 8), "tail read whole, in one call");
                    tail_reads += 1;
                }
            }
        }
    }
    assert_eq!(head_writes, written, "one head write per written record");
    assert!(
        tail_reads > 0 && tail_reads <= written + dropped,
        "tail re-read only when short of room"
    );
    assert!(flag_writes >= 2, "OVERFLOWED set and cleared, FROZEN set");
    assert_eq!(p.violations(), 0);
    // The last access is the FROZEN flags write, after a fence.
    assert_eq!(
        &log[log.len() - 2..],
        &[
            Access::Fence,
            Access::Write {
                off: offsets::FLAGS as u64,
                len: 4
            }
        ]
    );
}

#[test]
fn a_64_byte_event_is_one_write() {
    let mut slice = Slice::new(8192, 1);
    let mut p = slice.producer(true);
    p.attach(1).unwrap();
    p.take_accesses();
    assert_eq!(p.emit(1, 2, &[7u8; 32]), Emitted::Written);
    let log = p.take_accesses();
    let data: Vec<_> = log
        .iter()
        .filter(|a| matches!(a, Access::Write { off, .. } if *off >= HMB_RING_HDR_SIZE as u64))
        .collect();
    assert_eq!(
        data,
        [&Access::Write {
            off: HMB_RING_HDR_SIZE as u64,
            len: 64
        }]
    );
}
