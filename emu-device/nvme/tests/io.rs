//! I/O: data written is read back identical through PRP1/PRP2, PRP lists and chained lists;
//! MDTS, LBA range, namespace and PRP errors; polled queues; the sparse-file backing.

mod common;

use common::{pattern, ready_host};
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{Backing, ControllerConfig, Status};
use rstest::rstest;

#[rstest]
#[case::one_lba(512)]
#[case::one_page(4096)]
#[case::two_pages(8192)]
#[case::list(64 << 10)]
#[case::mdts(512 << 10)]
fn write_then_read_back(#[case] len: usize) {
    let mut h = ready_host(ControllerConfig::default());
    let data = pattern(len, len as u64);
    assert!(h.write_lbas(1, 100, &data, 9).ok());
    let (c, back) = h.read_lbas(1, 100, (len / 512) as u32, 9);
    assert!(c.ok());
    assert!(back == data, "data read back differs");
    let r = h.ctrl.report();
    assert_eq!(
        (r.counters.bytes_written, r.counters.bytes_read),
        (len as u64, len as u64)
    );
}

#[rstest]
#[case::offset_into_first_page(3 * 4096, 0x200, 512)]
#[case::chained_lists(40 * 4096, 0, 3)]
#[case::chained_with_offset(40 * 4096 + 3072, 0x400, 2)]
fn prp_lists_with_offsets_and_chaining(#[case] len: usize, #[case] first_offset: u64, #[case] per_list: u64) {
    let mut h = ready_host(ControllerConfig::default());
    let data = pattern(len, 7);
    let (prp1, prp2, segs) = h.build_prps(len, first_offset, per_list);
    let mut at = 0;
    for (a, n) in &segs {
        h.guest_write(*a, &data[at..at + n]);
        at += n;
    }
    let nlb = (len / 512) as u32 - 1;
    let w = Command::new(0x01).nsid(1).prp1(prp1).prp2(prp2).cdw(10, 8).cdw(12, nlb);
    assert_eq!(h.submit(1, w).unwrap().status, Status::SUCCESS);
    // Read back through a plain list and compare.
    let (c, back) = h.read_lbas(1, 8, nlb + 1, 9);
    assert!(c.ok());
    assert!(back == data);
    // And read through the chained layout too.
    let (prp1, prp2, segs) = h.build_prps(len, first_offset, per_list);
    let r = Command::new(0x02).nsid(1).prp1(prp1).prp2(prp2).cdw(10, 8).cdw(12, nlb);
    assert!(h.submit(1, r).unwrap().ok());
    let mut out = Vec::new();
    for (a, n) in segs {
        out.extend(h.guest_read(a, n));
    }
    assert!(out == data);
}

#[test]
fn bad_io_commands_get_statuses() {
    let cfg = ControllerConfig::default();
    let lbas = cfg.namespace_bytes / 512;
    let mut h = ready_host(cfg);
    let buf = h.alloc(8192);
    let read = |slba: u64, nlb: u32| {
        Command::new(0x02)
            .nsid(1)
            .prp1(buf)
            .cdw(10, slba as u32)
            .cdw(11, (slba >> 32) as u32)
            .cdw(12, nlb - 1)
    };
    let st = |h: &mut FakeHost, c: Command| h.submit(1, c).unwrap().status;
    assert_eq!(st(&mut h, read(lbas - 1, 1)), Status::SUCCESS);
    assert_eq!(st(&mut h, read(lbas - 1, 2)), Status::LBA_OUT_OF_RANGE);
    assert_eq!(
        st(&mut h, read(u64::MAX, 2)),
        Status::LBA_OUT_OF_RANGE,
        "slba + nlb wraps"
    );
    assert_eq!(st(&mut h, read(0, 1).nsid(2)), Status::INVALID_NAMESPACE);
    assert_eq!(st(&mut h, read(0, 1).nsid(0)), Status::INVALID_NAMESPACE);
    assert_eq!(
        st(&mut h, read(0, 1025).prp2(0)),
        Status::INVALID_FIELD,
        "above MDTS (512 KiB)"
    );
    assert_eq!(st(&mut h, read(0, 1).prp1(0x7000_0000)), Status::DATA_TRANSFER_ERROR);
    assert_eq!(st(&mut h, read(0, 1).prp1(buf + 1)), Status::INVALID_PRP_OFFSET);
    assert_eq!(
        st(&mut h, read(0, 8).prp1(buf + 0x800).prp2(buf + 0x1008)),
        Status::INVALID_PRP_OFFSET,
        "second page with an offset"
    );
    assert_eq!(
        st(&mut h, read(0, 16).prp1(buf + 0x800).prp2(0x7000_0000)),
        Status::DATA_TRANSFER_ERROR
    );
    assert_eq!(
        st(&mut h, Command::new(0x04).nsid(1)),
        Status::INVALID_OPCODE,
        "write uncorrectable: ONCS bit 1 = 0"
    );
    assert_eq!(
        st(&mut h, Command::new(0x06).nsid(1)),
        Status::INVALID_OPCODE,
        "admin opcodes are not I/O"
    );
    assert_eq!(st(&mut h, Command::new(0x00).nsid(1)), Status::SUCCESS, "flush");
    assert_eq!(
        st(&mut h, Command::new(0x00).nsid(0xFFFF_FFFF)),
        Status::SUCCESS,
        "flush all"
    );
    assert_eq!(st(&mut h, Command::new(0x00).nsid(3)), Status::INVALID_NAMESPACE);
    // A failed write leaves the namespace untouched.
    let (_, before) = h.read_lbas(1, 0, 1, 9);
    assert_eq!(
        st(&mut h, Command::new(0x01).nsid(1).prp1(0x7000_0000)),
        Status::DATA_TRANSFER_ERROR
    );
    let (_, after) = h.read_lbas(1, 0, 1, 9);
    assert_eq!(before, after);
}

#[test]
fn polled_queue_and_full_cq_back_pressure() {
    let mut h = FakeHost::new(ControllerConfig::default(), 32 << 20);
    assert_eq!(h.enable(8), 1);
    // A polled CQ (IEN = 0) of 4 entries: holds 3 completions at most.
    let cq = h.alloc(4096);
    let sq = h.alloc(4096);
    assert!(h
        .admin(Command::new(0x05).prp1(cq).cdw(10, 3 << 16 | 1).cdw(11, 1))
        .ok());
    assert!(h
        .admin(Command::new(0x01).prp1(sq).cdw(10, 7 << 16 | 1).cdw(11, 1 << 16 | 1))
        .ok());
    let irq_before = h.irq.count(0) + h.irq.count(1);
    // Five flushes in one doorbell: three complete, two wait for CQ space.
    for i in 0..5u32 {
        let raw = Command::new(0x00).nsid(1).cdw(0, (10 + i) << 16).0;
        let mut b = [0u8; 64];
        for (c, d) in b.chunks_exact_mut(4).zip(raw) {
            c.copy_from_slice(&d.to_le_bytes());
        }
        h.guest_write(sq + 64 * u64::from(i), &b);
    }
    h.write32(0x1008, 5);
    let r = h.ctrl.report();
    let sqr = r.queues.iter().find(|q| q.kind == "sq" && q.qid == 1).unwrap();
    assert_eq!(sqr.head, 3, "stopped at a full CQ");
    // The host consumes them by phase (polling) and frees the CQ; the rest follow.
    let cqe = |h: &FakeHost, slot: u64| {
        let b = h.guest_read(cq + 16 * slot, 16);
        u32::from_le_bytes(b[12..16].try_into().unwrap())
    };
    for slot in 0..3 {
        assert_eq!(cqe(&h, slot) >> 16 & 1, 1, "phase 1 in slot {slot}");
        assert_eq!(cqe(&h, slot) as u16, 10 + slot as u16);
    }
    h.write32(0x100C, 3);
    assert_eq!(cqe(&h, 3) as u16, 13);
    assert_eq!(cqe(&h, 0) as u16, 14, "wrapped");
    assert_eq!(cqe(&h, 0) >> 16 & 1, 0, "phase flipped on wrap");
    assert_eq!(
        h.irq.count(0) + h.irq.count(1),
        irq_before,
        "no interrupt on a polled queue"
    );
}

#[test]
fn interrupts_go_to_the_queue_vector() {
    let mut h = ready_host(ControllerConfig::default());
    let before = h.irq.count(1);
    assert!(h.submit(1, Command::new(0x00).nsid(1)).unwrap().ok());
    assert_eq!(h.irq.count(1), before + 1);
    let before0 = h.irq.count(0);
    let buf = h.alloc(4096);
    h.admin(Command::identify(1, 0, buf));
    assert_eq!(h.irq.count(0), before0 + 1);
}

#[test]
fn sparse_file_backing_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ns.img");
    let cfg = ControllerConfig {
        backing: Backing::SparseFile(path.clone()),
        namespace_bytes: 8 << 20,
        ..Default::default()
    };
    let data = pattern(16384, 3);
    {
        let mut h = ready_host(cfg.clone());
        assert!(h.write_lbas(1, 2048, &data, 9).ok());
        assert_eq!(h.ctrl.report().namespace.backing, "sparse-file");
    }
    // The file is the FTL's region and nothing else (no flat image beside it).
    let region = hmb_ftl::Ftl::region_bytes(&cfg.media, 8 << 20).unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), region);
    // A new controller over the same file reads it back.
    let mut h = ready_host(cfg);
    let (c, back) = h.read_lbas(1, 2048, 32, 9);
    assert!(c.ok());
    assert!(back == data);
}

#[test]
fn lba_size_4096() {
    let cfg = ControllerConfig {
        lba_shift: 12,
        ..Default::default()
    };
    let mut h = ready_host(cfg);
    let data = pattern(3 * 4096, 9);
    assert!(h.write_lbas(1, 5, &data, 12).ok());
    let (c, back) = h.read_lbas(1, 5, 3, 12);
    assert!(c.ok());
    assert!(back == data);
}
