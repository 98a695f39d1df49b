//! Compare, Write Zeroes, Dataset Management (deallocate) and Verify: what they store,
//! what they answer, and the Identify fields that announce them.

mod common;

use common::{pattern, ready_host};
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{ControllerConfig, Status};

fn range(cmd: Command, slba: u64, nlb: u32) -> Command {
    cmd.nsid(1)
        .cdw(10, slba as u32)
        .cdw(11, (slba >> 32) as u32)
        .cdw(12, nlb - 1)
}

fn st(h: &mut FakeHost, c: Command) -> Status {
    h.submit(1, c).expect("completes inline").status
}

#[test]
fn identify_announces_the_commands_and_zero_reading_deallocation() {
    let mut h = ready_host(ControllerConfig::default());
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    let idc = h.guest_read(buf, 4096);
    let oncs = u16::from_le_bytes(idc[520..522].try_into().unwrap());
    assert_eq!(oncs, 0b1100_1101, "Compare, DSM, Write Zeroes, Timestamp, Verify");
    assert!(h.admin(Command::identify(0, 1, buf)).ok());
    let idn = h.guest_read(buf, 4096);
    assert_eq!(idn[33] & 0b111, 0b001, "DLFEAT: deallocated blocks read as zeroes");
    assert_ne!(idn[33] & 1 << 3, 0, "DLFEAT: Write Zeroes DEAC supported");
}

#[test]
fn write_zeroes_zeroes_exactly_its_range() {
    let mut h = ready_host(ControllerConfig::default());
    let data = pattern(8 * 512, 3);
    assert!(h.write_lbas(1, 10, &data, 9).ok());
    // Zero LBAs 12..14 (DEAC set: still zeroes).
    assert_eq!(
        st(&mut h, range(Command::new(0x08), 12, 3).cdw(12, 2 | 1 << 25)),
        Status::SUCCESS
    );
    let (c, back) = h.read_lbas(1, 10, 8, 9);
    assert!(c.ok());
    assert_eq!(&back[..1024], &data[..1024]);
    assert!(back[1024..2560].iter().all(|&b| b == 0), "zeroed blocks");
    assert_eq!(&back[2560..], &data[2560..]);
    // Above MDTS is fine: no data moves. 65536 blocks = 32 MiB.
    assert_eq!(st(&mut h, range(Command::new(0x08), 0, 65536)), Status::SUCCESS);
    let (_, back) = h.read_lbas(1, 10, 8, 9);
    assert!(back.iter().all(|&b| b == 0));
    let lbas = ControllerConfig::default().namespace_bytes / 512;
    assert_eq!(
        st(&mut h, range(Command::new(0x08), lbas - 1, 2)),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(
        st(&mut h, range(Command::new(0x08), 0, 1).nsid(2)),
        Status::INVALID_NAMESPACE
    );
}

/// Dataset Management ranges: (length in LBAs, SLBA).
fn dsm(h: &mut FakeHost, ranges: &[(u32, u64)], attrs: u32) -> Status {
    let buf = h.alloc(4096);
    let mut raw = Vec::new();
    for (nlb, slba) in ranges {
        raw.extend(0u32.to_le_bytes());
        raw.extend(nlb.to_le_bytes());
        raw.extend(slba.to_le_bytes());
    }
    h.guest_write(buf, &raw);
    let cmd = Command::new(0x09)
        .nsid(1)
        .prp1(buf)
        .cdw(10, ranges.len() as u32 - 1)
        .cdw(11, attrs);
    st(h, cmd)
}

#[test]
fn deallocated_ranges_read_back_as_zeroes() {
    let mut h = ready_host(ControllerConfig::default());
    let data = pattern(16 * 512, 5);
    assert!(h.write_lbas(1, 0, &data, 9).ok());
    // Hints only (AD = 0): nothing changes.
    assert_eq!(dsm(&mut h, &[(16, 0)], 0b11), Status::SUCCESS);
    assert_eq!(h.read_lbas(1, 0, 16, 9).1, data);
    // Two ranges deallocated, one empty range ignored.
    assert_eq!(dsm(&mut h, &[(2, 1), (0, 9), (3, 10)], 1 << 2), Status::SUCCESS);
    let (_, back) = h.read_lbas(1, 0, 16, 9);
    for lba in 0..16 {
        let blk = &back[lba * 512..(lba + 1) * 512];
        if (1..3).contains(&lba) || (10..13).contains(&lba) {
            assert!(blk.iter().all(|&b| b == 0), "LBA {lba} deallocated");
        } else {
            assert_eq!(blk, &data[lba * 512..(lba + 1) * 512], "LBA {lba} kept");
        }
    }
    assert_eq!(h.ctrl.report().counters.deallocations, 1);
    // A range past the end fails the whole command and changes nothing.
    let lbas = ControllerConfig::default().namespace_bytes / 512;
    assert_eq!(dsm(&mut h, &[(1, 4), (2, lbas - 1)], 1 << 2), Status::LBA_OUT_OF_RANGE);
    assert_eq!(&h.read_lbas(1, 4, 1, 9).1, &data[4 * 512..5 * 512]);
    // The range list must be readable.
    let bad = Command::new(0x09).nsid(1).prp1(0x7000_0000).cdw(11, 1 << 2);
    assert_eq!(st(&mut h, bad), Status::DATA_TRANSFER_ERROR);
}

#[test]
fn compare_matches_or_reports_compare_failure() {
    let mut h = ready_host(ControllerConfig::default());
    let data = pattern(4 * 512, 9);
    assert!(h.write_lbas(1, 40, &data, 9).ok());
    let buf = h.alloc(4096);
    h.guest_write(buf, &data);
    assert_eq!(st(&mut h, range(Command::new(0x05), 40, 4).prp1(buf)), Status::SUCCESS);
    let mut other = data.clone();
    other[1000] ^= 1;
    h.guest_write(buf, &other);
    let fail = st(&mut h, range(Command::new(0x05), 40, 4).prp1(buf));
    assert_eq!(fail, Status::COMPARE_FAILURE);
    assert_eq!((fail.sct, fail.sc), (2, 0x85));
    let lbas = ControllerConfig::default().namespace_bytes / 512;
    assert_eq!(
        st(&mut h, range(Command::new(0x05), lbas, 1).prp1(buf)),
        Status::LBA_OUT_OF_RANGE
    );
    assert_eq!(
        st(&mut h, range(Command::new(0x05), 0, 1025).prp1(buf)),
        Status::INVALID_FIELD,
        "above MDTS"
    );
}

#[test]
fn verify_checks_the_range_without_moving_data() {
    let mut h = ready_host(ControllerConfig::default());
    let before = h.ctrl.report().counters.bytes_read;
    assert_eq!(st(&mut h, range(Command::new(0x0C), 0, 65536)), Status::SUCCESS);
    assert_eq!(h.ctrl.report().counters.bytes_read, before, "no host transfer");
    let lbas = ControllerConfig::default().namespace_bytes / 512;
    assert_eq!(st(&mut h, range(Command::new(0x0C), lbas - 1, 1)), Status::SUCCESS);
    assert_eq!(st(&mut h, range(Command::new(0x0C), lbas, 1)), Status::LBA_OUT_OF_RANGE);
}

#[test]
fn unknown_io_opcode_with_psdt_is_invalid_opcode() {
    let mut h = ready_host(ControllerConfig::default());
    assert_eq!(
        st(&mut h, Command::new(0x7f).nsid(1).cdw(0, 0x7f | 1 << 14)),
        Status::INVALID_OPCODE
    );
}

#[test]
fn a_namespace_above_4_gib_on_a_sparse_file() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let bytes: u64 = (4 << 30) + (1 << 20);
    let cfg = ControllerConfig {
        backing: hmb_nvme::Backing::SparseFile(path.clone()),
        namespace_bytes: bytes,
        ..Default::default()
    };
    let mut h = ready_host(cfg);
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(0, 1, buf)).ok());
    let nsze = u64::from_le_bytes(h.guest_read(buf, 8).try_into().unwrap());
    assert_eq!(nsze, bytes / 512);
    // The last blocks, past the 32-bit byte offset boundary.
    let last = nsze - 8;
    let data = pattern(8 * 512, 11);
    assert!(h.write_lbas(1, last, &data, 9).ok());
    assert_eq!(h.read_lbas(1, last, 8, 9).1, data);
    assert_eq!(st(&mut h, range(Command::new(0x08), last, 9)), Status::LBA_OUT_OF_RANGE);
    // Zeroing 32 MiB of unwritten space allocates nothing: the file stays sparse.
    assert_eq!(st(&mut h, range(Command::new(0x08), 0, 65536)), Status::SUCCESS);
    let meta = std::fs::metadata(&path).unwrap();
    let region = hmb_ftl::Ftl::region_bytes(&hmb_nvme::MediaConfig::default(), bytes).unwrap();
    assert_eq!(meta.len(), region, "the FTL region only: no flat image beside it");
    assert!(meta.blocks() * 512 < 1 << 20, "{} bytes allocated", meta.blocks() * 512);
    // Deallocating the written blocks reads them back as zeroes.
    assert_eq!(dsm(&mut h, &[(8, last)], 1 << 2), Status::SUCCESS);
    assert!(h.read_lbas(1, last, 8, 9).1.iter().all(|&b| b == 0));
}
