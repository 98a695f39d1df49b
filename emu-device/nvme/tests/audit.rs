//! The controller's private data in its HMB and the host-write detector (src/audit.rs):
//! a clean Memory Return cycle reports nothing; a host write into a controller-private page
//! while the HMB is released (then MR=1) or while it is enabled is reported with its offset;
//! a shared slice is excluded; the Set Features 0Dh and vendor commands are recorded.

mod common;

use std::sync::{Arc, Mutex};

use common::ready_host;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{AuditPhase, ChunkSizes, ControllerConfig, HmbViolation, HostMemoryBuffer, Status, VendorFeatures};
use rstest::rstest;

const MB: u64 = 1 << 20;
const PAGE: u64 = 4096;

fn put_list(h: &mut FakeHost, entries: &[(u64, u64)]) -> u64 {
    let list = h.alloc((entries.len() as u64 * 16).max(16));
    for (i, &(addr, bytes)) in entries.iter().enumerate() {
        let mut e = [0u8; 16];
        e[0..8].copy_from_slice(&addr.to_le_bytes());
        e[8..12].copy_from_slice(&((bytes / PAGE) as u32).to_le_bytes());
        h.guest_write(list + 16 * i as u64, &e);
    }
    list
}

struct Hmb {
    chunks: Vec<(u64, u64)>,
    list: u64,
}

impl Hmb {
    fn new(h: &mut FakeHost, sizes: &[u64]) -> Hmb {
        let chunks: Vec<(u64, u64)> = sizes.iter().map(|&b| (h.alloc(b), b)).collect();
        let list = put_list(h, &chunks);
        Hmb { chunks, list }
    }
    fn pages(&self) -> u64 {
        self.chunks.iter().map(|c| c.1).sum::<u64>() / PAGE
    }
    fn set(&self, h: &mut FakeHost, bits: u32) -> Status {
        let c = Command::set_features(0x0D, bits)
            .cdw(12, self.pages() as u32)
            .cdw(13, self.list as u32)
            .cdw(14, (self.list >> 32) as u32)
            .cdw(15, self.chunks.len() as u32);
        h.admin(c).status
    }
    /// Guest address of HMB-view offset `at`.
    fn addr(&self, mut at: u64) -> u64 {
        for &(a, b) in &self.chunks {
            if at < b {
                return a + at;
            }
            at -= b;
        }
        panic!("offset outside the HMB");
    }
}

/// Release the HMB the way `how` says, then enable the controller again if that took it down.
fn release(h: &mut FakeHost, hmb: &Hmb, how: &str) {
    match how {
        "ehm0" => assert_eq!(hmb.set(h, 0), Status::SUCCESS),
        "disable" => {
            h.disable();
        }
        "shutdown" => {
            assert_eq!((h.shutdown() >> 2) & 3, 2);
            h.disable();
        }
        _ => unreachable!(),
    }
    assert!(h.ctrl.hmb().is_none(), "released by {how}");
    if how != "ehm0" {
        assert_eq!(h.enable(32) & 3, 1);
        h.forget_queues();
    }
}

#[rstest]
#[case::ehm_0("ehm0")]
#[case::cc_en_0("disable")]
#[case::shutdown("shutdown")]
fn a_clean_memory_return_cycle_reports_nothing(#[case] how: &str) {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[2 * MB, 2 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    let pages = hmb.pages();
    // The controller keeps its own data in every page (no trace contract: all of it).
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.private_pages, pages);
    for at in [0, 2 * MB - PAGE, 2 * MB, 4 * MB - PAGE] {
        assert_ne!(
            h.guest_read(hmb.addr(at), PAGE as usize),
            vec![0u8; PAGE as usize],
            "page at {at:#x}"
        );
    }
    release(&mut h, &hmb, how);
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    assert!(h.ctrl.hmb().unwrap().returned());
    let a = h.ctrl.hmb_audit();
    assert_eq!((a.enables, a.mr_reenables, a.checks), (2, 1, 2));
    assert_eq!(a.pages_checked, 2 * pages, "every page at the loss and at the return");
    assert_eq!(a.violations, 0, "{:?}", a.first_violations);
    assert!(a.first_violations.is_empty());
    assert!(!a.c0h_received);
}

#[rstest]
#[case::ehm_0("ehm0")]
#[case::cc_en_0("disable")]
#[case::shutdown("shutdown")]
fn a_host_write_while_released_is_reported_at_the_mr1_re_enable(#[case] how: &str) {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[2 * MB, 2 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    release(&mut h, &hmb, how);
    // One byte in the second chunk's third page, and one 8-byte store in the last page.
    let (p1, p2) = (2 * MB + 2 * PAGE, 4 * MB - PAGE);
    let old = h.guest_read(hmb.addr(p1 + 77), 1)[0];
    h.guest_write(hmb.addr(p1 + 77), &[old ^ 0x40]);
    h.guest_write(hmb.addr(p2 + 8), &0xdead_beef_u64.to_le_bytes());
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.violations, 2);
    assert_eq!(
        a.first_violations,
        vec![
            HmbViolation {
                offset: p1,
                phase: AuditPhase::WhileReleased
            },
            HmbViolation {
                offset: p2,
                phase: AuditPhase::WhileReleased
            },
        ]
    );
    // Counted once: another clean cycle adds nothing.
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    assert_eq!(h.ctrl.hmb_audit().violations, 2);
}

#[test]
fn a_host_write_while_enabled_is_reported_when_the_controller_loses_the_hmb() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[4 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    h.guest_write(hmb.addr(5 * PAGE + 4000), b"host");
    h.disable();
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.violations, 1);
    assert_eq!(
        a.first_violations,
        vec![HmbViolation {
            offset: 5 * PAGE,
            phase: AuditPhase::WhileEnabled
        }]
    );
}

#[test]
fn mr0_means_a_fresh_buffer_the_host_may_have_written() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[4 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    h.guest_write(hmb.addr(0), &[0u8; 4096]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS, "EHM=1, MR=0");
    let a = h.ctrl.hmb_audit();
    assert_eq!((a.violations, a.mr_reenables), (0, 0));
    assert_ne!(
        h.guest_read(hmb.addr(0), 4096),
        vec![0u8; 4096],
        "rewritten by the controller"
    );
}

#[test]
fn set_features_0d_commands_are_recorded_with_their_chunk_sizes() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[4 * MB, 4 * MB, 2 * MB, PAGE]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.set_features_0d_total, 3);
    let first = &a.set_features_0d[0];
    assert!(first.ehm && !first.mr && !first.returned);
    assert_eq!((first.bytes, first.descriptors), (10 * MB + PAGE, 4));
    assert_eq!(
        first.chunk_sizes,
        vec![
            ChunkSizes {
                bytes: 4 * MB,
                count: 2
            },
            ChunkSizes {
                bytes: 2 * MB,
                count: 1
            },
            ChunkSizes { bytes: PAGE, count: 1 },
        ]
    );
    assert!(!a.set_features_0d[1].ehm && a.set_features_0d[1].chunk_sizes.is_empty());
    assert!(a.set_features_0d[2].mr && a.set_features_0d[2].returned);
    assert_eq!(a.set_features_0d[2].chunk_sizes, first.chunk_sizes);
    // A vendor Set Features without vendor features: recorded, Invalid Field.
    assert_eq!(h.admin(Command::set_features(0xC0, 0)).status, Status::INVALID_FIELD);
    let a = h.ctrl.hmb_audit();
    assert!(a.c0h_received);
    assert_eq!(a.vendor_features.len(), 1);
    assert!(a.vendor_features[0].set && a.vendor_features[0].fid == 0xC0);
}

/// A minimal trace-contract vendor: Set Features C0h with (offset, len) in CDW12/CDW13
/// (in pages) adopts that slice, unless told to refuse.
#[derive(Default)]
struct Sharing {
    slice: Option<(u64, u64)>,
    refuse: Arc<Mutex<bool>>,
}

impl VendorFeatures for Sharing {
    fn set(&mut self, fid: u8, cdw11: u32, _data: &[u8], hmb: Option<&HostMemoryBuffer>) -> Result<u32, Status> {
        if fid != 0xC0 || hmb.is_none() || *self.refuse.lock().unwrap() {
            return Err(Status::INVALID_FIELD);
        }
        let (offset, len) = (u64::from(cdw11 & 0xffff) * PAGE, u64::from(cdw11 >> 16) * PAGE);
        self.slice = Some((offset, len));
        Ok(0)
    }
    fn get(&mut self, _: u8, _: u32) -> Result<(u32, Vec<u8>), Status> {
        Err(Status::INVALID_FIELD)
    }
    fn advert_fid(&self) -> Option<u8> {
        Some(0xC0)
    }
    fn shared_slice(&self) -> Option<(u64, u64)> {
        self.slice
    }
}

fn advert(first_page: u32, pages: u32) -> Command {
    Command::set_features(0xC0, pages << 16 | first_page)
}

#[test]
fn a_declaring_controller_waits_for_the_advert_and_leaves_the_shared_slice_alone() {
    let mut h = ready_host(ControllerConfig::default());
    let refuse = Arc::new(Mutex::new(false));
    h.ctrl.set_vendor_features(Box::new(Sharing {
        slice: None,
        refuse: refuse.clone(),
    }));
    let hmb = Hmb::new(&mut h, &[4 * MB, 4 * MB]);
    // The host writes its ring header into the slice (the second chunk) before 0Dh.
    let slice = (4 * MB, 4 * MB);
    h.guest_write(hmb.addr(slice.0), b"HEADER");
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    let a = h.ctrl.hmb_audit();
    assert!(a.claim_pending);
    assert_eq!(a.private_pages, 0);
    assert_eq!(
        h.guest_read(hmb.addr(slice.0), 6),
        b"HEADER",
        "not claimed before the advert"
    );
    assert!(h.admin(advert(1024, 1024)).ok());
    let a = h.ctrl.hmb_audit();
    assert!(!a.claim_pending);
    assert_eq!(a.private_pages, 1024, "the first chunk only");
    assert_eq!(a.shared_slice.map(|s| (s.offset, s.len)), Some(slice));
    assert_eq!(h.guest_read(hmb.addr(slice.0), 6), b"HEADER");
    // The host writes the slice while enabled and while released (FROZEN, re-init): allowed.
    h.guest_write(hmb.addr(slice.0 + 8), b"tail");
    h.disable();
    h.guest_write(hmb.addr(slice.0 + 16), b"frozen");
    assert_eq!(h.enable(32) & 3, 1);
    h.forget_queues();
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    let a = h.ctrl.hmb_audit();
    assert_eq!((a.violations, a.mr_reenables), (0, 1));
    assert_eq!(
        a.shared_slice.map(|s| (s.offset, s.len)),
        Some(slice),
        "shared across MR=1"
    );
    // A re-advert refused: the slice is dead, the controller's; a host write there is
    // now a violation.
    *refuse.lock().unwrap() = true;
    assert_eq!(h.admin(advert(1024, 1024)).status, Status::INVALID_FIELD);
    let a = h.ctrl.hmb_audit();
    assert_eq!((a.private_pages, a.shared_slice), (2048, None));
    h.guest_write(hmb.addr(slice.0 + 3 * PAGE), b"mark frozen");
    h.disable();
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.violations, 1);
    assert_eq!(a.first_violations[0].offset, slice.0 + 3 * PAGE);
    assert_eq!(a.first_violations[0].phase, AuditPhase::WhileEnabled);
    assert!(a.c0h_received);
}

#[test]
fn without_an_advert_the_first_other_command_claims_the_whole_hmb() {
    let mut h = ready_host(ControllerConfig::default());
    h.ctrl.set_vendor_features(Box::new(Sharing {
        slice: None,
        refuse: Arc::new(Mutex::new(true)),
    }));
    let hmb = Hmb::new(&mut h, &[4 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    assert!(h.ctrl.hmb_audit().claim_pending);
    // A refused advert keeps it waiting (the host may retry) ...
    assert_eq!(h.admin(advert(0, 1)).status, Status::INVALID_FIELD);
    assert!(h.ctrl.hmb_audit().claim_pending);
    assert_eq!(h.ctrl.hmb_audit().private_pages, 0);
    // ... and so does I/O (it keeps flowing when the host re-enables the HMB at run time) ...
    let (c, _) = h.read_lbas(1, 0, 8, 9);
    assert!(c.ok());
    assert!(
        h.ctrl.hmb_audit().claim_pending,
        "I/O must not end the wait for the advert"
    );
    // ... any other admin command ends the wait: everything is the controller's.
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    let a = h.ctrl.hmb_audit();
    assert!(!a.claim_pending);
    assert_eq!(a.private_pages, 1024);
}

#[test]
fn a_device_side_fatal_status_is_a_loss_and_the_recovery_a_return() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[4 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    assert!(h.ctrl.inject_fatal("test"));
    assert_eq!(h.ctrl.hmb_audit().checks, 1, "checked when CFS released the HMB");
    h.guest_write(hmb.addr(MB), &[0xAA; 16]);
    h.disable();
    assert_eq!(h.enable(32) & 3, 1);
    h.forget_queues();
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    let a = h.ctrl.hmb_audit();
    assert_eq!((a.checks, a.violations), (2, 1));
    assert_eq!(
        a.first_violations,
        vec![HmbViolation {
            offset: MB,
            phase: AuditPhase::WhileReleased
        }]
    );
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(16))]

    /// Any set of host writes into the released HMB: exactly the written pages are
    /// reported at the MR=1 re-enable, in page order, each once.
    #[test]
    fn exactly_the_pages_the_host_wrote_are_reported(
        writes in proptest::collection::vec((0u64..1024, 0u64..4096, 1u8..=255), 0..24)
    ) {
        let mut h = ready_host(ControllerConfig::default());
        let hmb = Hmb::new(&mut h, &[2 * MB, 2 * MB]);
        proptest::prop_assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
        proptest::prop_assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
        let mut pages = std::collections::BTreeSet::new();
        for &(page, at, flip) in &writes {
            let addr = hmb.addr(page * PAGE + at);
            let old = h.guest_read(addr, 1)[0];
            h.guest_write(addr, &[old ^ flip]);
            pages.insert(page);
        }
        proptest::prop_assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
        let a = h.ctrl.hmb_audit();
        // A page written twice with the same flip is back to its old bytes: unchanged.
        let mut changed = std::collections::BTreeSet::new();
        for &p in &pages {
            let mut flips = std::collections::HashMap::new();
            for &(wp, at, flip) in &writes {
                if wp == p {
                    *flips.entry(at).or_insert(0u8) ^= flip;
                }
            }
            if flips.values().any(|&f| f != 0) {
                changed.insert(p);
            }
        }
        proptest::prop_assert_eq!(a.violations, changed.len() as u64);
        let want: Vec<u64> = changed.iter().take(16).map(|p| p * PAGE).collect();
        let got: Vec<u64> = a.first_violations.iter().map(|v| v.offset).collect();
        proptest::prop_assert_eq!(got, want);
    }
}
