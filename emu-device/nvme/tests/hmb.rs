//! Host Memory Buffer: descriptor lists (good, too many entries, overlapping, zero-sized,
//! unaligned, outside guest memory, wrong HSIZE), EHM/MR rules, Get Features 0Dh, and that
//! the controller lets go of the HMB (observer told first) on every way out.

mod common;

use std::sync::{Arc, Mutex};

use common::ready_host;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{CommandObserver, ControllerConfig, HostMemoryBuffer, Status};
use rstest::rstest;

const MB: u64 = 1 << 20;

/// Writes a descriptor list of (addr, pages) into guest memory; returns its address.
fn put_list(h: &mut FakeHost, entries: &[(u64, u32)]) -> u64 {
    let list = h.alloc((entries.len() as u64 * 16).max(16));
    for (i, &(addr, pages)) in entries.iter().enumerate() {
        let mut e = [0u8; 16];
        e[0..8].copy_from_slice(&addr.to_le_bytes());
        e[8..12].copy_from_slice(&pages.to_le_bytes());
        h.guest_write(list + 16 * i as u64, &e);
    }
    list
}

fn set_hmb(bits: u32, hsize: u32, list: u64, count: u32) -> Command {
    Command::set_features(0x0D, bits)
        .cdw(12, hsize)
        .cdw(13, list as u32)
        .cdw(14, (list >> 32) as u32)
        .cdw(15, count)
}

/// Chunks the way nvme_alloc_host_mem hands them out: `n` chunks of `bytes`.
fn chunks(h: &mut FakeHost, n: usize, bytes: u64) -> Vec<(u64, u32)> {
    (0..n).map(|_| (h.alloc(bytes), (bytes / 4096) as u32)).collect()
}

#[derive(Default)]
struct Seen {
    log: Vec<String>,
}

struct Recorder(Arc<Mutex<Seen>>);

impl CommandObserver for Recorder {
    fn on_hmb_enabled(&mut self, hmb: &HostMemoryBuffer) {
        self.0
            .lock()
            .unwrap()
            .log
            .push(format!("enabled {} returned={}", hmb.len(), hmb.returned()));
    }
    fn on_hmb_disabling(&mut self, hmb: &HostMemoryBuffer) {
        // The last chance to write: it must still work here.
        hmb.write_at(0, b"FROZEN")
            .expect("HMB still usable in on_hmb_disabling");
        self.0.lock().unwrap().log.push("disabling".into());
    }
}

fn host_with_recorder() -> (FakeHost, Arc<Mutex<Seen>>) {
    let mut h = ready_host(ControllerConfig::default());
    let seen = Arc::new(Mutex::new(Seen::default()));
    h.ctrl.set_observer(Box::new(Recorder(seen.clone())));
    (h, seen)
}

#[test]
fn good_list_enables_and_gives_one_contiguous_view() {
    let (mut h, seen) = host_with_recorder();
    let c = chunks(&mut h, 8, 4 * MB);
    let list = put_list(&mut h, &c);
    assert!(h.admin(set_hmb(1, 8 * 1024, list, 8)).ok());
    let hmb = h.ctrl.hmb().expect("enabled");
    assert_eq!(hmb.len(), 32 * MB);
    assert_eq!(hmb.descriptors().len(), 8);
    assert!(!hmb.returned());
    // A write across the chunk boundary lands in both chunks.
    hmb.write_at(4 * MB - 3, b"across").unwrap();
    assert_eq!(h.guest_read(c[0].0 + 4 * MB - 3, 3), b"acr");
    assert_eq!(h.guest_read(c[1].0, 3), b"oss");
    assert_eq!(
        hmb.pieces(4 * MB - 3, 6).unwrap(),
        vec![(c[0].0 + 4 * MB - 3, 3), (c[1].0, 3)]
    );
    assert_eq!(
        seen.lock().unwrap().log,
        vec![format!("enabled {} returned=false", 32 * MB)]
    );
    // Get Features 0Dh: EHM in DW0, attributes in the buffer.
    let buf = h.alloc(4096);
    let g = h.admin(Command::get_features(0x0D).prp1(buf));
    assert_eq!((g.status, g.dw0), (Status::SUCCESS, 1));
    let a = h.guest_read(buf, 16);
    let u32_at = |i: usize| u32::from_le_bytes(a[i..i + 4].try_into().unwrap());
    assert_eq!(
        (u32_at(0), u32_at(4), u32_at(8), u32_at(12)),
        (8 * 1024, list as u32, (list >> 32) as u32, 8)
    );
    let r = h.ctrl.report();
    assert!(r.hmb.enabled);
    assert_eq!(r.hmb.bytes, 32 * MB);
    assert_eq!(r.hmb.descriptors.len(), 8);
    // Enabling again while enabled: Command Sequence Error.
    assert_eq!(
        h.admin(set_hmb(1, 8 * 1024, list, 8)).status,
        Status::COMMAND_SEQUENCE_ERROR
    );
}

#[rstest]
#[case::too_many_entries(257, Status::INVALID_FIELD)]
#[case::zero_entries(0, Status::INVALID_FIELD)]
fn entry_count_is_bounded_by_hmmaxd(#[case] n: usize, #[case] want: Status) {
    let mut h = ready_host(ControllerConfig::default());
    let c = chunks(&mut h, n, 16384);
    let list = put_list(&mut h, &c);
    let hsize = (n * 4) as u32;
    assert_eq!(h.admin(set_hmb(1, hsize, list, n as u32)).status, want);
    assert!(h.ctrl.hmb().is_none());
}

enum Bad {
    Overlap,
    ZeroSized,
    Outside,
    Unaligned,
    HsizeMismatch,
    BelowHmmin,
    ListOutside,
    ListUnaligned,
    Wraps,
}

#[rstest]
#[case::overlap(Bad::Overlap, Status::INVALID_FIELD)]
#[case::zero_sized(Bad::ZeroSized, Status::INVALID_FIELD)]
#[case::outside_guest_memory(Bad::Outside, Status::INVALID_FIELD)]
#[case::unaligned_chunk(Bad::Unaligned, Status::INVALID_FIELD)]
#[case::hsize_mismatch(Bad::HsizeMismatch, Status::INVALID_FIELD)]
#[case::below_hmmin(Bad::BelowHmmin, Status::INVALID_FIELD)]
#[case::list_outside(Bad::ListOutside, Status::DATA_TRANSFER_ERROR)]
#[case::list_unaligned(Bad::ListUnaligned, Status::INVALID_FIELD)]
#[case::wraps(Bad::Wraps, Status::INVALID_FIELD)]
fn bad_lists_are_rejected(#[case] bad: Bad, #[case] want: Status) {
    let mut h = ready_host(ControllerConfig::default());
    let mut c = chunks(&mut h, 2, 4 * MB);
    let mut hsize = 2048u32;
    let mut list_override = None;
    match bad {
        Bad::Overlap => c[1].0 = c[0].0 + 4 * MB - 4096,
        Bad::ZeroSized => {
            c.push((h.alloc(4096), 0));
        }
        Bad::Outside => c[1].0 = 0x7000_0000,
        Bad::Unaligned => c[1].0 += 512,
        Bad::HsizeMismatch => hsize = 2047,
        Bad::BelowHmmin => {
            c = chunks(&mut h, 1, 2 * MB);
            hsize = 512;
        }
        Bad::ListOutside => list_override = Some(0x7000_0000),
        Bad::ListUnaligned => list_override = Some(h.alloc(4096) + 8),
        Bad::Wraps => c[1].0 = u64::MAX - 4095,
    }
    let list = list_override.unwrap_or_else(|| put_list(&mut h, &c));
    let c = h.admin(set_hmb(1, hsize, list, c.len() as u32));
    assert_eq!(c.status, want);
    assert!(h.ctrl.hmb().is_none());
    assert!(h.ctrl.report().hmb.last_rejection.is_some());
}

#[test]
fn no_hmb_configured_means_feature_0d_is_invalid() {
    let cfg = ControllerConfig {
        hmpre_bytes: 0,
        hmmin_bytes: 0,
        ..Default::default()
    };
    let mut h = ready_host(cfg);
    assert_eq!(h.admin(set_hmb(1, 1, 0x10000, 1)).status, Status::INVALID_FIELD);
    assert_eq!(h.admin(Command::get_features(0x0D)).status, Status::INVALID_FIELD);
}

/// Enable with MR=0, fill, release through `how`, re-enable with MR=1 and the same list:
/// the buffer is "returned" and holds what was left in it (FROZEN from the observer).
#[rstest]
#[case::ehm_0("ehm0")]
#[case::cc_en_0("disable")]
#[case::shutdown("shutdown")]
#[case::transport_reset("reset")]
#[case::injected_fatal("fatal")]
fn memory_return_after_release(#[case] how: &str) {
    let (mut h, seen) = host_with_recorder();
    let c = chunks(&mut h, 2, 2 * MB);
    let list = put_list(&mut h, &c);
    assert!(h.admin(set_hmb(1, 1024, list, 2)).ok());
    h.ctrl.hmb().unwrap().write_at(100, b"kept across reset").unwrap();
    match how {
        "ehm0" => assert!(h.admin(set_hmb(0, 1024, list, 2)).ok()),
        "disable" => {
            h.disable();
        }
        "shutdown" => {
            assert_eq!((h.shutdown() >> 2) & 3, 2);
            h.disable();
        }
        "reset" => h.ctrl.reset(),
        "fatal" => {
            assert!(h.ctrl.inject_fatal("test"));
            let r = h.ctrl.report();
            assert_eq!(r.csts & 2, 2, "CFS");
            assert_eq!(r.counters.fatal_errors, 1);
            assert!(r.fatal_reason.unwrap().contains("injected: test"));
            // Already failed: a second injection changes nothing.
            assert!(!h.ctrl.inject_fatal("again"));
            assert_eq!(h.ctrl.report().counters.fatal_errors, 1);
            h.disable();
        }
        _ => unreachable!(),
    }
    assert!(h.ctrl.hmb().is_none(), "released by {how}");
    assert_eq!(seen.lock().unwrap().log.last().unwrap(), "disabling");
    if how != "ehm0" {
        assert_eq!(h.enable(32), 1);
        h.forget_queues();
    }
    // Released: Get Features 0Dh reports no buffer and no attributes.
    let buf = h.alloc(4096);
    h.guest_write(buf, &[0xAA; 16]);
    let g = h.admin(Command::get_features(0x0D).prp1(buf));
    assert_eq!((g.status, g.dw0), (Status::SUCCESS, 0));
    assert_eq!(h.guest_read(buf, 16), vec![0u8; 16], "attributes cleared by {how}");
    // MR=1 with the same list: returned, same contents.
    assert!(h.admin(set_hmb(0b11, 1024, list, 2)).ok());
    let g = h.admin(Command::get_features(0x0D).prp1(buf));
    assert_eq!(g.dw0, 0b11, "DW0: EHM and MR");
    assert_eq!(h.guest_read(buf, 4), 1024u32.to_le_bytes(), "HSIZE");
    let hmb = h.ctrl.hmb().unwrap();
    assert!(hmb.returned());
    let mut b = [0u8; 17];
    hmb.read_at(100, &mut b).unwrap();
    assert_eq!(&b, b"kept across reset");
    let mut f = [0u8; 6];
    hmb.read_at(0, &mut f).unwrap();
    assert_eq!(&f, b"FROZEN", "what on_hmb_disabling wrote is still there");
    assert!(h.ctrl.report().hmb.returned);
    assert_eq!(
        seen.lock().unwrap().log.last().unwrap(),
        &format!("enabled {} returned=true", 4 * MB)
    );
}

#[test]
fn only_a_running_controller_can_be_failed_on_request() {
    let mut h = ready_host(ControllerConfig::default());
    h.disable();
    assert!(!h.ctrl.inject_fatal("disabled"));
    assert_eq!(h.ctrl.report().csts & 2, 0);
    assert_eq!(h.enable(32), 1);
    assert_eq!((h.shutdown() >> 2) & 3, 2);
    assert!(!h.ctrl.inject_fatal("shut down"));
    assert_eq!(h.ctrl.report().counters.fatal_errors, 0);
}

#[test]
fn mr_with_a_different_list_is_a_fresh_buffer() {
    let mut h = ready_host(ControllerConfig::default());
    let c = chunks(&mut h, 2, 2 * MB);
    let list = put_list(&mut h, &c);
    assert!(h.admin(set_hmb(1, 1024, list, 2)).ok());
    assert!(h.admin(set_hmb(0, 0, 0, 0)).ok());
    let other = chunks(&mut h, 1, 4 * MB);
    let list2 = put_list(&mut h, &other);
    assert!(h.admin(set_hmb(0b11, 1024, list2, 1)).ok());
    assert!(!h.ctrl.hmb().unwrap().returned());
}

#[test]
fn cfs_releases_the_hmb() {
    let (mut h, seen) = host_with_recorder();
    let c = chunks(&mut h, 1, 4 * MB);
    let list = put_list(&mut h, &c);
    assert!(h.admin(set_hmb(1, 1024, list, 1)).ok());
    // The transport unmaps the page of the admin SQ (the HMB stays mapped): the next fetch
    // fails, the controller sets CFS and lets go of the HMB, observer first.
    let sq = h.admin.sq_base;
    let total = common::GUEST_BYTES;
    let ranges = [
        (vm_memory::GuestAddress(0), sq as usize),
        (vm_memory::GuestAddress(sq + 4096), (total - sq - 4096) as usize),
    ];
    let holed = vm_memory::GuestMemoryMmap::<()>::from_ranges(&ranges).unwrap();
    h.mem.lock().unwrap().replace(holed);
    let tail = (h.admin.sq_tail + 1) % h.admin.sq_entries;
    h.write32(0x1000, tail);
    let r = h.ctrl.report();
    assert_eq!(r.csts & 2, 2, "CFS");
    assert!(r.fatal_reason.unwrap().contains("SQ 0"));
    assert!(h.ctrl.hmb().is_none());
    assert_eq!(seen.lock().unwrap().log.last().unwrap(), "disabling");
    // Doorbells are ignored until a reset.
    let before = h.ctrl.report().counters.ignored_register_writes;
    h.write32(0x1000, tail);
    assert_eq!(h.ctrl.report().counters.ignored_register_writes, before + 1);
}

/// Another controller's HMB limits between two drivers: refused while a driver runs it or
/// while it holds an HMB; once shut down, Identify reports the new limits, the old list is
/// no longer a Memory Return and the audit starts afresh.
#[test]
fn hmb_limits_change_only_between_drivers() {
    let mut h = ready_host(ControllerConfig::default());
    let c = chunks(&mut h, 2, 2 * MB);
    let list = put_list(&mut h, &c);
    assert!(h.admin(set_hmb(1, 1024, list, 2)).ok());
    let refused = h.ctrl.set_hmb_limits(4 * MB, 4 * MB, 4096, 4).unwrap_err();
    assert!(refused.to_string().contains("no driver runs"), "{refused}");
    assert!(h.admin(set_hmb(0, 0, 0, 0)).ok());
    assert!(h.ctrl.set_hmb_limits(4 * MB, 4 * MB, 4096, 4).is_err(), "still running");
    assert_eq!((h.shutdown() >> 2) & 3, 2);
    assert!(
        h.ctrl.set_hmb_limits(2 * MB, 4 * MB, 4096, 4).is_err(),
        "HMMIN above HMPRE is refused"
    );
    h.ctrl.set_hmb_limits(4 * MB, 4 * MB, 4096, 4).unwrap();
    assert_eq!(h.ctrl.hmb_audit().enables, 0, "a fresh audit");
    h.disable();
    assert_eq!(h.enable(32), 1);
    h.forget_queues();
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    let id = h.guest_read(buf, 4096);
    let u32_at = |o: usize| u32::from_le_bytes(id[o..o + 4].try_into().unwrap());
    assert_eq!((u32_at(272), u32_at(276)), (1024, 1024), "HMPRE, HMMIN in 4 KiB units");
    assert_eq!(u16::from_le_bytes([id[336], id[337]]), 4, "HMMAXD");
    let report = h.ctrl.report().hmb;
    assert_eq!((report.preferred_bytes, report.enables), (4 * MB, 0));
    // The old list with MR=1 is a fresh buffer for the new controller.
    assert!(h.admin(set_hmb(0b11, 1024, list, 2)).ok());
    assert!(!h.ctrl.hmb().unwrap().returned());
}
