//! Admin commands: Identify, features, logs, queue creation/deletion, AER, Abort,
//! Invalid Opcode/Field statuses.

mod common;

use common::ready_host;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{ControllerConfig, Status};
use rstest::rstest;

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[test]
fn identify_controller_reports_hmb_and_limits() {
    let cfg = ControllerConfig::default();
    let mut h = ready_host(cfg.clone());
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    let id = h.guest_read(buf, 4096);
    assert_eq!(u16_at(&id, 0), hmb_nvme::Controller::pci_identity().vendor);
    assert_eq!(&id[4..16], b"HMBTRACE0001");
    assert_eq!(id[77], cfg.mdts);
    assert_eq!(u32_at(&id, 80), 0x0001_0400);
    assert_eq!(u32_at(&id, 272), (32 << 20) / 4096, "HMPRE");
    assert_eq!(u32_at(&id, 276), (4 << 20) / 4096, "HMMIN");
    assert_eq!(u32_at(&id, 332), 1, "HMMINDS");
    assert_eq!(u16_at(&id, 336), 256, "HMMAXD");
    assert_eq!((id[512], id[513]), (0x66, 0x44));
    assert_eq!(u32_at(&id, 516), 1, "NN");
    assert!(id[768..].starts_with(b"nqn.2026-01.org.hmb-trace:nvme:HMBTRACE0001"));
    // No vendor features: nothing declared in the vendor-specific area (a stock SSD).
    assert!(id[3072..].iter().all(|&b| b == 0), "vendor-specific area not zero");
}

#[test]
fn identify_namespace_list_and_descriptors() {
    let mut h = ready_host(ControllerConfig::default());
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(0, 1, buf)).ok());
    let ns = h.guest_read(buf, 4096);
    assert_eq!(u64_at(&ns, 0), (64 << 20) / 512, "NSZE");
    assert_eq!((u32_at(&ns, 128) >> 16) & 0xff, 9, "LBADS");
    let nguid = ns[104..120].to_vec();
    assert_ne!(nguid, vec![0; 16]);

    assert!(h.admin(Command::identify(2, 0, buf)).ok());
    let list = h.guest_read(buf, 8);
    assert_eq!((u32_at(&list, 0), u32_at(&list, 4)), (1, 0));
    assert!(h.admin(Command::identify(2, 1, buf)).ok());
    assert_eq!(u32_at(&h.guest_read(buf, 4), 0), 0, "no namespace above 1");

    assert!(h.admin(Command::identify(3, 1, buf)).ok());
    let d = h.guest_read(buf, 24);
    assert_eq!((d[0], d[1]), (2, 16), "NGUID descriptor");
    assert_eq!(&d[4..20], &nguid[..]);
}

#[rstest]
#[case::cns_06(Command::identify(6, 0, 0x20000), Status::INVALID_FIELD)]
#[case::cns_10(Command::identify(0x10, 0, 0x20000), Status::INVALID_FIELD)]
#[case::ns_2(Command::identify(0, 2, 0x20000), Status::INVALID_NAMESPACE)]
#[case::ns_all(Command::identify(0, 0xFFFF_FFFF, 0x20000), Status::INVALID_NAMESPACE)]
#[case::descs_ns0(Command::identify(3, 0, 0x20000), Status::INVALID_NAMESPACE)]
#[case::list_ns_fffffffe(Command::identify(2, 0xFFFF_FFFE, 0x20000), Status::INVALID_NAMESPACE)]
#[case::unknown_opcode(Command::new(0x7f), Status::INVALID_OPCODE)]
#[case::keep_alive(Command::new(0x18), Status::INVALID_OPCODE)]
#[case::format(Command::new(0x80), Status::INVALID_OPCODE)]
#[case::fused(Command(Command::identify(1, 0, 0x20000).0.map(|x| x)).cdw(0, 0x06 | 1 << 8), Status::INVALID_FIELD)]
#[case::sgl(Command::identify(1, 0, 0x20000).cdw(0, 0x06 | 1 << 14), Status::INVALID_FIELD)]
#[case::feature_unknown(Command::set_features(0x03, 0), Status::INVALID_FIELD)]
#[case::feature_apst(Command::get_features(0x0C), Status::INVALID_FIELD)]
#[case::feature_vendor_default(Command::get_features(0xC0), Status::INVALID_FIELD)]
#[case::feature_save(Command::set_features(0x01, 0).cdw(10, 1 | 1 << 31), Status::FEATURE_NOT_SAVEABLE)]
#[case::feature_sel_default(Command::get_features(0x01).cdw(10, 1 | 1 << 8), Status::INVALID_FIELD)]
#[case::dulbe(Command::set_features(0x05, 1 << 16), Status::INVALID_FIELD)]
#[case::power_state_1(Command::set_features(0x02, 1), Status::INVALID_FIELD)]
#[case::log_unknown(Command::new(0x02).prp1(0x20000).cdw(10, 0x7f | 127 << 16), Status::INVALID_LOG_PAGE)]
#[case::log_offset_beyond(Command::new(0x02).prp1(0x20000).cdw(10, 2 | 127 << 16).cdw(12, 512), Status::INVALID_FIELD)]
#[case::log_smart_bad_ns(Command::new(0x02).nsid(7).prp1(0x20000).cdw(10, 2 | 127 << 16), Status::INVALID_FIELD)]
#[case::log_smart_ns1_lpa0(Command::new(0x02).nsid(1).prp1(0x20000).cdw(10, 2 | 127 << 16), Status::INVALID_FIELD)]
#[case::unknown_opcode_with_psdt(Command::new(0x7e).cdw(0, 0x7e | 1 << 14), Status::INVALID_OPCODE)]
#[case::feature_not_ns_specific(Command::set_features(0x01, 0).nsid(1), Status::FEATURE_NOT_NAMESPACE_SPECIFIC)]
#[case::get_feature_not_ns_specific(Command::get_features(0x0B).nsid(1), Status::FEATURE_NOT_NAMESPACE_SPECIFIC)]
#[case::feature_no_such_ns(Command::get_features(0x01).nsid(2), Status::INVALID_NAMESPACE)]
#[case::identify_buffer_unmapped(Command::identify(1, 0, 0x7000_0000), Status::DATA_TRANSFER_ERROR)]
#[case::identify_prp_unaligned(Command::identify(1, 0, 0x20002), Status::INVALID_PRP_OFFSET)]
fn bad_admin_commands_get_the_right_status(#[case] cmd: Command, #[case] want: Status) {
    let mut h = ready_host(ControllerConfig::default());
    let c = h.admin(cmd);
    assert_eq!(c.status, want);
    assert!(c.status.dnr, "guest mistakes are not retried");
}

#[test]
fn number_of_queues_is_capped_and_fixed_once_queues_exist() {
    let mut h = FakeHost::new(ControllerConfig::default(), 16 << 20);
    h.enable(16);
    let c = h.admin(Command::set_features(0x07, 63 | 63 << 16));
    assert!(c.ok());
    assert_eq!(c.dw0, 7 | 7 << 16, "8 queues allocated (0-based 7)");
    let c = h.admin(Command::set_features(0x07, 1 | 1 << 16));
    assert_eq!(c.dw0, 1 | 1 << 16);
    assert_eq!(h.admin(Command::get_features(0x07)).dw0, 1 | 1 << 16);
    assert_eq!(
        h.admin(Command::set_features(0x07, 0xffff)).status,
        Status::INVALID_FIELD
    );
    h.create_io_queue(1, 16).unwrap();
    h.create_io_queue(2, 16).unwrap();
    assert_eq!(
        h.create_io_queue(3, 16),
        Err(Status::INVALID_QUEUE_IDENTIFIER),
        "only 2 allocated"
    );
    assert_eq!(
        h.admin(Command::set_features(0x07, 3 | 3 << 16)).status,
        Status::COMMAND_SEQUENCE_ERROR
    );
}

#[test]
fn queue_creation_is_checked() {
    let mut h = ready_host(ControllerConfig::default());
    let mem = h.alloc(1 << 20);
    let cq = |qid: u32, entries: u32, flags: u32, iv: u32| {
        Command::new(0x05)
            .prp1(mem)
            .cdw(10, (entries - 1) << 16 | qid)
            .cdw(11, iv << 16 | flags)
    };
    assert_eq!(h.admin(cq(0, 16, 3, 0)).status, Status::INVALID_QUEUE_IDENTIFIER);
    assert_eq!(
        h.admin(cq(1, 16, 3, 1)).status,
        Status::INVALID_QUEUE_IDENTIFIER,
        "exists"
    );
    assert_eq!(
        h.admin(cq(9, 16, 3, 1)).status,
        Status::INVALID_QUEUE_IDENTIFIER,
        "above allocation"
    );
    assert_eq!(h.admin(cq(2, 1, 3, 1)).status, Status::INVALID_QUEUE_SIZE);
    assert_eq!(
        h.admin(cq(2, 1025, 3, 1)).status,
        Status::INVALID_QUEUE_SIZE,
        "above MQES"
    );
    assert_eq!(h.admin(cq(2, 16, 2, 1)).status, Status::INVALID_FIELD, "PC = 0");
    assert_eq!(h.admin(cq(2, 16, 3, 9)).status, Status::INVALID_INTERRUPT_VECTOR);
    let unaligned = Command::new(0x05).prp1(mem + 8).cdw(10, 15 << 16 | 2).cdw(11, 1);
    assert_eq!(h.admin(unaligned).status, Status::INVALID_PRP_OFFSET);
    let outside = Command::new(0x05).prp1(0x7000_0000).cdw(10, 15 << 16 | 2).cdw(11, 1);
    assert_eq!(h.admin(outside).status, Status::INVALID_FIELD);
    // A polled CQ (IEN = 0) may name any vector.
    assert!(h.admin(cq(2, 16, 1, 999)).ok());

    let sq = |qid: u32, cqid: u32| {
        Command::new(0x01)
            .prp1(mem + 0x10000)
            .cdw(10, 15 << 16 | qid)
            .cdw(11, cqid << 16 | 1)
    };
    assert_eq!(h.admin(sq(2, 0)).status, Status::COMPLETION_QUEUE_INVALID, "admin CQ");
    assert_eq!(h.admin(sq(2, 5)).status, Status::COMPLETION_QUEUE_INVALID, "no such CQ");
    assert_eq!(h.admin(sq(1, 2)).status, Status::INVALID_QUEUE_IDENTIFIER, "exists");
    assert!(h.admin(sq(2, 2)).ok());

    // Deletion: a CQ with an SQ on it cannot go; SQ first, then CQ.
    let del_sq = |qid: u32| Command::new(0x00).cdw(10, qid);
    let del_cq = |qid: u32| Command::new(0x04).cdw(10, qid);
    assert_eq!(h.admin(del_cq(2)).status, Status::INVALID_QUEUE_DELETION);
    assert_eq!(h.admin(del_sq(0)).status, Status::INVALID_QUEUE_IDENTIFIER);
    assert_eq!(h.admin(del_cq(0)).status, Status::INVALID_QUEUE_IDENTIFIER);
    assert!(h.admin(del_sq(2)).ok());
    assert_eq!(h.admin(del_sq(2)).status, Status::INVALID_QUEUE_IDENTIFIER);
    assert!(h.admin(del_cq(2)).ok());
    let r = h.ctrl.report();
    assert_eq!(r.queues.iter().filter(|q| q.qid == 2).count(), 0);
}

#[test]
fn aer_is_held_aborted_and_answers_invalid_doorbells() {
    let mut h = ready_host(ControllerConfig::default());
    assert!(h.submit(0, Command::new(0x0C)).is_none(), "held");
    assert_eq!(h.ctrl.report().aer_outstanding, 1);
    // A doorbell write to a queue that does not exist completes it with an error event.
    h.write32(0x1000 + 8 * 5, 1);
    let c = h.reap(0).expect("AER completed");
    assert!(c.ok());
    assert_eq!(
        c.dw0,
        0x01 << 16,
        "type error, info 0 (invalid doorbell register), log 01h"
    );
    // The next error event is masked until the error log is read.
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    h.write32(0x1000 + 8 * 5, 1);
    assert!(h.reap(0).is_none(), "masked");
    let log = h.alloc(4096);
    let c = h.submit(0, Command::new(0x02).prp1(log).cdw(10, 1 | 15 << 16)).unwrap();
    assert!(c.ok(), "reading the error log");
    // ... which unmasks and delivers the pending one, after the log's own CQE.
    let c = h.reap(0).expect("pending event delivered");
    assert_eq!((c.cid, c.dw0), (aer, 0x01 << 16));
    // Abort an outstanding AER: it completes with Abort Requested, the Abort with DW0 bit0 = 0.
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    let abort = h.push(0, Command::new(0x08).cdw(10, u32::from(aer) << 16));
    h.ring(0);
    let first = h.reap(0).unwrap();
    let second = h.reap(0).unwrap();
    assert_eq!((first.cid, first.status), (aer, Status::ABORT_REQUESTED));
    assert_eq!((second.cid, second.dw0), (abort, 0));
    // Aborting something that is not outstanding: DW0 bit 0 = 1.
    assert_eq!(h.admin(Command::new(0x08).cdw(10, 77 << 16)).dw0, 1);
    // Limit: AERL + 1 = 4 outstanding.
    for _ in 0..4 {
        assert!(h.submit(0, Command::new(0x0C)).is_none());
    }
    assert_eq!(h.admin(Command::new(0x0C)).status, Status::ASYNC_EVENT_LIMIT_EXCEEDED);
    // A reset drops them without completions.
    h.disable();
    assert_eq!(h.ctrl.report().aer_outstanding, 0);
}

#[test]
fn features_the_driver_sets_at_probe() {
    let mut h = ready_host(ControllerConfig::default());
    // Async event configuration (nvme_enable_aen), timestamp (nvme_configure_timestamp).
    assert!(h.admin(Command::set_features(0x0B, 1 << 8)).ok());
    assert_eq!(h.admin(Command::get_features(0x0B)).dw0, 1 << 8);
    let ts = h.alloc(4096);
    h.guest_write(ts, &1_700_000_000_000u64.to_le_bytes());
    assert!(h.admin(Command::set_features(0x0E, 0).prp1(ts)).ok());
    assert!(h.admin(Command::get_features(0x0E).prp1(ts)).ok());
    let back = h.guest_read(ts, 8);
    let ms = u64::from_le_bytes([back[0], back[1], back[2], back[3], back[4], back[5], 0, 0]);
    assert!((1_700_000_000_000..1_700_000_100_000).contains(&ms));
    assert_eq!(back[6] & 0b1110, 0b0010, "origin: set by the host");
    // Temperature threshold (hwmon).
    assert_eq!(h.admin(Command::get_features(0x04)).dw0, 343);
    assert!(h.admin(Command::set_features(0x04, 350)).ok());
    assert_eq!(h.admin(Command::get_features(0x04)).dw0, 350);
    assert_eq!(
        h.admin(Command::set_features(0x04, 1 << 16)).status,
        Status::INVALID_FIELD,
        "sensor 1"
    );
    // Interrupt vector configuration: vectors above the table are invalid.
    assert!(h.admin(Command::set_features(0x09, 3)).ok());
    assert_eq!(h.admin(Command::set_features(0x09, 9)).status, Status::INVALID_FIELD);
}

#[test]
fn smart_log_counts_io() {
    let mut h = ready_host(ControllerConfig::default());
    let data = common::pattern(4096, 1);
    assert!(h.write_lbas(1, 0, &data, 9).ok());
    let log = h.alloc(4096);
    let c = h.admin(Command::new(0x02).nsid(0xFFFF_FFFF).prp1(log).cdw(10, 2 | 127 << 16));
    assert!(c.ok());
    let l = h.guest_read(log, 512);
    assert_eq!(u16_at(&l, 1), 313, "composite temperature");
    assert_eq!(l[3], 100, "available spare");
    assert_eq!(u64_at(&l, 48), 1, "data units written (rounded up)");
    assert_eq!(u64_at(&l, 80), 1, "host write commands");
    // Firmware slot log.
    assert!(h.admin(Command::new(0x02).prp1(log).cdw(10, 3 | 127 << 16)).ok());
    let l = h.guest_read(log, 16);
    assert_eq!(l[0], 1);
    assert_eq!(&l[8..13], b"0.1.0");
}

#[test]
fn report_serialises() {
    let h = ready_host(ControllerConfig::default());
    let json = serde_json::to_value(h.ctrl.report()).unwrap();
    assert_eq!(json["ready"], true);
    assert_eq!(json["queues"].as_array().unwrap().len(), 4, "admin SQ/CQ and pair 1");
    assert_eq!(json["hmb"]["enabled"], false);
    assert_eq!(json["namespace"]["lba_bytes"], 512);
}

#[test]
fn error_log_records_failed_commands_and_smart_counts_them() {
    let mut h = ready_host(ControllerConfig::default());
    let log = h.alloc(4096);
    let lbas = ControllerConfig::default().namespace_bytes / 512;
    // No errors yet: every entry zero.
    assert!(h.admin(Command::new(0x02).prp1(log).cdw(10, 1 | 255 << 16)).ok());
    assert!(h.guest_read(log, 1024).iter().all(|&b| b == 0));
    // Two failures: an admin one and a read past the end.
    assert_eq!(h.admin(Command::identify(0, 9, log)).status, Status::INVALID_NAMESPACE);
    let bad_read = Command::new(0x02)
        .nsid(1)
        .prp1(log)
        .cdw(10, lbas as u32)
        .cdw(11, (lbas >> 32) as u32);
    let c = h.submit(1, bad_read).unwrap();
    assert_eq!(c.status, Status::LBA_OUT_OF_RANGE);
    let buf = h.alloc(4096);
    assert!(h.admin(Command::new(0x02).prp1(buf).cdw(10, 1 | 255 << 16)).ok());
    let l = h.guest_read(buf, 1024);
    // Newest first.
    assert_eq!(u64_at(&l, 0), 2, "error count");
    assert_eq!(u16_at(&l, 8), 1, "SQID");
    assert_eq!(u16_at(&l, 10), c.cid, "CID");
    assert_eq!(u16_at(&l, 12) >> 1, Status::LBA_OUT_OF_RANGE.field());
    assert_eq!(u64_at(&l, 16), lbas, "LBA");
    assert_eq!(u32::from_le_bytes(l[24..28].try_into().unwrap()), 1, "NSID");
    assert_eq!(u64_at(&l, 64), 1);
    assert_eq!(u16_at(&l, 72), 0, "admin SQ");
    assert_eq!(u16_at(&l, 76) >> 1, Status::INVALID_NAMESPACE.field());
    assert!(l[128..].iter().all(|&b| b == 0));
    // SMART: Number of Error Information Log Entries (bytes 176..192).
    assert!(h
        .admin(Command::new(0x02).nsid(0xFFFF_FFFF).prp1(buf).cdw(10, 2 | 127 << 16))
        .ok());
    assert_eq!(u64_at(&h.guest_read(buf, 512), 176), 2);
    // Identify ELPE: 16 entries.
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    assert_eq!(h.guest_read(buf, 4096)[262], 15);
}

#[test]
fn features_accept_the_controller_nsids_and_error_recovery_its_namespace() {
    let mut h = ready_host(ControllerConfig::default());
    assert!(h.admin(Command::set_features(0x01, 3).nsid(0xFFFF_FFFF)).ok());
    assert_eq!(h.admin(Command::get_features(0x01)).dw0, 3);
    assert!(
        h.admin(Command::set_features(0x05, 7).nsid(1)).ok(),
        "05h is namespace specific"
    );
    assert_eq!(h.admin(Command::get_features(0x05).nsid(1)).dw0, 7);
}

#[test]
fn changed_namespace_list_is_4096_zero_bytes() {
    let mut h = ready_host(ControllerConfig::default());
    let buf = h.alloc(8192);
    h.guest_write(buf, &[0xAA; 4096]);
    let c = h.admin(
        Command::new(0x02)
            .nsid(0xFFFF_FFFF)
            .prp1(buf)
            .prp2(buf + 4096)
            .cdw(10, 4 | 1023 << 16),
    );
    assert!(c.ok(), "{:?}", c.status);
    assert!(h.guest_read(buf, 4096).iter().all(|&b| b == 0));
    // Past its end: Invalid Field, like every log.
    let c = h.admin(Command::new(0x02).prp1(buf).cdw(10, 4 | 1 << 16).cdw(12, 4096));
    assert_eq!(c.status, Status::INVALID_FIELD);
}

#[test]
fn a_crossed_temperature_threshold_warns_and_raises_a_smart_event() {
    let mut h = ready_host(ControllerConfig::default());
    let log = h.alloc(4096);
    let smart = |h: &mut FakeHost| {
        assert!(h.admin(Command::new(0x02).prp1(log).cdw(10, 2 | 127 << 16)).ok());
        h.guest_read(log, 1)[0]
    };
    assert_eq!(smart(&mut h), 0, "313 K is below the default 343 K");
    // AEC bit 1: SMART temperature events wanted; one AER outstanding.
    assert!(h.admin(Command::set_features(0x0B, 1 << 1)).ok());
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    assert!(h.reap(0).is_none());
    assert!(h.admin(Command::set_features(0x04, 300)).ok(), "over threshold 300 K");
    let c = h.reap(0).expect("SMART event");
    assert_eq!((c.cid, c.dw0), (aer, 1 | 0x01 << 8 | 0x02 << 16));
    assert_eq!(smart(&mut h) & 1 << 1, 1 << 1, "critical warning: temperature");
    assert!(h.admin(Command::set_features(0x04, 343)).ok());
    assert_eq!(smart(&mut h), 0, "back under the threshold");
    // An under threshold above the temperature counts too.
    assert!(h.admin(Command::set_features(0x04, 320 | 1 << 20)).ok());
    assert_eq!(smart(&mut h) & 1 << 1, 1 << 1);
}

#[test]
fn timestamp_origin_0_counts_from_the_last_reset() {
    let mut h = ready_host(ControllerConfig::default());
    let ts = h.alloc(4096);
    let read = |h: &mut FakeHost| {
        assert!(h.admin(Command::get_features(0x0E).prp1(ts)).ok());
        let b = h.guest_read(ts, 8);
        assert_eq!(b[6] & 0b1110, 0, "origin 000b");
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], 0, 0])
    };
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert!(read(&mut h) >= 1500);
    h.disable();
    assert_eq!(h.enable(32) & 1, 1);
    h.forget_queues();
    assert!(read(&mut h) < 1500, "counted from the reset, not from creation");
}
