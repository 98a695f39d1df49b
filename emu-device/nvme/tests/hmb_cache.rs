//! The FTL's map cache in the HMB (src/map_cache.rs): the L2P really is in host memory, a
//! host write into it is found at the next use, reported by the HMB audit (control socket
//! `hmb-audit`) and in the FTL's counters, and no data is lost; a memory return takes the
//! slots over; without an HMB the small internal cache misses far more.

mod common;

use common::*;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{AuditPhase, ControllerConfig, HmbViolation, Status};

const MB: u64 = 1 << 20;
const PAGE: u64 = 4096;

struct Hmb {
    chunks: Vec<(u64, u64)>,
    list: u64,
}

impl Hmb {
    fn new(h: &mut FakeHost, sizes: &[u64]) -> Hmb {
        let chunks: Vec<(u64, u64)> = sizes.iter().map(|&b| (h.alloc(b), b)).collect();
        let list = h.alloc(16 * chunks.len() as u64);
        for (i, &(addr, bytes)) in chunks.iter().enumerate() {
            let mut e = [0u8; 16];
            e[0..8].copy_from_slice(&addr.to_le_bytes());
            e[8..12].copy_from_slice(&((bytes / PAGE) as u32).to_le_bytes());
            h.guest_write(list + 16 * i as u64, &e);
        }
        Hmb { chunks, list }
    }
    fn set(&self, h: &mut FakeHost, bits: u32) -> Status {
        let pages: u64 = self.chunks.iter().map(|c| c.1).sum::<u64>() / PAGE;
        let c = Command::set_features(0x0D, bits)
            .cdw(12, pages as u32)
            .cdw(13, self.list as u32)
            .cdw(14, (self.list >> 32) as u32)
            .cdw(15, self.chunks.len() as u32);
        h.admin(c).status
    }
    /// Guest address of HMB-view offset `at` (inside the first chunk here).
    fn addr(&self, at: u64) -> u64 {
        assert!(at < self.chunks[0].1);
        self.chunks[0].0 + at
    }
}

/// 4 KiB at the start of each 4 MiB of the 64 MiB namespace: one LPN per map page.
fn touch_every_map_page(h: &mut FakeHost, seed: u64) -> Vec<Vec<u8>> {
    (0..16u64)
        .map(|m| {
            let data = pattern(4096, seed + m);
            assert!(h.write_lbas(1, m * 8192, &data, 9).ok());
            data
        })
        .collect()
}

/// The cache found one changed page and rebuilt it, and the audit one host write, at HMB
/// offset 0 (slot 0) while the HMB was enabled.
fn found_once_at_slot_0(h: &mut FakeHost) {
    let ftl = h.ctrl.report().namespace.ftl;
    assert_eq!((ftl.cache_corruptions, ftl.map_page_rebuilds), (1, 1), "{ftl:?}");
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.violations, 1);
    assert_eq!(
        a.first_violations,
        vec![HmbViolation {
            offset: 0,
            phase: AuditPhase::WhileEnabled
        }]
    );
}

fn read_every_map_page(h: &mut FakeHost, want: &[Vec<u8>]) {
    for (m, data) in want.iter().enumerate() {
        let (c, back) = h.read_lbas(1, m as u64 * 8192, 8, 9);
        assert!(c.ok());
        assert!(back == *data, "map page {m}");
    }
}

#[test]
fn a_host_write_into_the_cache_part_is_found_reported_and_loses_nothing() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[2 * MB, 2 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    let data = touch_every_map_page(&mut h, 1);
    let ftl = h.ctrl.report().namespace.ftl;
    assert!(ftl.cache_in_hmb && ftl.cache_slots == 16, "{ftl:?}");
    assert_eq!(ftl.cache_misses, 16);
    // Slot 0 (HMB offset 0) is map page 0: entry 0 is LPN 0's PPN, in host memory.
    let e0 = u32::from_le_bytes(h.guest_read(hmb.addr(0), 4).try_into().unwrap());
    assert_ne!(e0, u32::MAX, "LPN 0 is mapped, and its entry is in the HMB");
    // The host overwrites LPN 0's entry (the slot still holds updates not on NAND).
    h.guest_write(hmb.addr(0), &0x1234u32.to_le_bytes());
    read_every_map_page(&mut h, &data);
    found_once_at_slot_0(&mut h);
    // Released and returned with MR=1: the audit's checks of both find nothing new, and
    // the cache takes its 16 slots over without reading NAND.
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    assert!(!h.ctrl.report().namespace.ftl.cache_in_hmb);
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    let reads = h.ctrl.report().namespace.ftl.map_page_reads;
    read_every_map_page(&mut h, &data);
    let ftl = h.ctrl.report().namespace.ftl;
    assert_eq!((ftl.cache_slots_reused, ftl.map_page_reads), (16, reads), "{ftl:?}");
    assert_eq!(h.ctrl.hmb_audit().violations, 1);
    // A host write while released: the audit reports it at the return, the cache does not
    // take that slot over (and does not count it as a second violation).
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    h.guest_write(hmb.addr(PAGE + 64), &[0xAA; 8]);
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    read_every_map_page(&mut h, &data);
    let a = h.ctrl.hmb_audit();
    assert_eq!(a.violations, 2, "{a:?}");
    assert_eq!(
        a.first_violations[1],
        HmbViolation {
            offset: PAGE,
            phase: AuditPhase::WhileReleased
        }
    );
    let ftl = h.ctrl.report().namespace.ftl;
    assert_eq!((ftl.cache_corruptions, ftl.cache_slots_reused), (2, 31), "{ftl:?}");
}

#[test]
fn without_an_hmb_the_internal_cache_misses_and_the_hmb_does_not() {
    let run = |with_hmb: bool| {
        let mut h = ready_host(ControllerConfig::default());
        let hmb = Hmb::new(&mut h, &[4 * MB]);
        if with_hmb {
            assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
        }
        let data = touch_every_map_page(&mut h, 7);
        for _ in 0..3 {
            read_every_map_page(&mut h, &data);
        }
        h.ctrl.report().namespace.ftl
    };
    let (hmb, sram) = (run(true), run(false));
    assert_eq!((hmb.cache_slots, hmb.cache_misses), (16, 16), "{hmb:?}");
    assert_eq!(sram.cache_slots, 4);
    assert_eq!(
        sram.cache_misses,
        16 * 4,
        "LRU over 16 pages in 4 slots: every access misses"
    );
    assert!(sram.map_page_reads > 0 && sram.map_page_writes > 0 && hmb.map_page_reads == 0);
}

/// What the full guest's fio job does (docs/host-integration.md, the HMB released and
/// returned): writes go on while the HMB is released, so the internal cache serves them
/// and writes their map pages back to NAND; at the MR=1 return exactly the slots whose
/// map pages did not change meanwhile are taken over, and every byte reads back.
#[test]
fn writes_while_the_hmb_is_released_change_only_their_map_pages_and_lose_nothing() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[2 * MB, 2 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    let mut data = touch_every_map_page(&mut h, 1);
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    let released = h.ctrl.report().namespace.ftl;
    assert!(!released.cache_in_hmb && released.cache_slots == 4, "{released:?}");
    // Overwrite the LPNs of map pages 3 and 9 with the HMB gone: the internal cache reads
    // those map pages from NAND.
    for m in [3u64, 9] {
        data[m as usize] = pattern(4096, 100 + m);
        assert!(h.write_lbas(1, m * 8192, &data[m as usize], 9).ok());
    }
    let ftl = h.ctrl.report().namespace.ftl;
    assert!(ftl.map_page_reads >= released.map_page_reads + 2, "{ftl:?}");
    assert_eq!(hmb.set(&mut h, 0b11), Status::SUCCESS);
    read_every_map_page(&mut h, &data);
    let ftl = h.ctrl.report().namespace.ftl;
    assert!(ftl.cache_in_hmb && ftl.cache_slots == 16, "{ftl:?}");
    assert_eq!(
        ftl.cache_slots_reused, 14,
        "the two changed map pages are read anew: {ftl:?}"
    );
    assert_eq!(ftl.cache_corruptions, 0);
    assert_eq!(h.ctrl.hmb_audit().violations, 0);
}

/// The map cache per command (docs/nvme-controller.md, "The map cache per command"): a
/// 512 KiB Write's 128 lookups and updates of one map page check its slot in the HMB once,
/// at the first; a host write into that slot between two such Writes is still found at
/// the second one's first lookup and reported once by the audit (offset, while enabled),
/// and every byte reads back.
#[test]
fn a_host_write_between_two_large_writes_is_found_at_the_second() {
    let mut h = ready_host(ControllerConfig::default());
    let hmb = Hmb::new(&mut h, &[4 * MB]);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);
    let first = pattern(512 << 10, 1);
    assert!(h.write_lbas(1, 0, &first, 9).ok());
    let ftl = h.ctrl.report().namespace.ftl;
    assert!(ftl.cache_in_hmb, "{ftl:?}");
    let hits = ftl.cache_hits;
    // Entries 0-127 of map page 0 (slot 0, HMB offset 0) are in host memory.
    let e5 = u32::from_le_bytes(h.guest_read(hmb.addr(5 * 4), 4).try_into().unwrap());
    assert_ne!(e5, u32::MAX);
    // A second Write with no host write between: nothing found.
    let second = pattern(512 << 10, 2);
    assert!(h.write_lbas(1, 0, &second, 9).ok());
    let ftl = h.ctrl.report().namespace.ftl;
    assert_eq!(ftl.cache_hits - hits, 128, "every lookup counted: {ftl:?}");
    assert_eq!((ftl.cache_corruptions, h.ctrl.hmb_audit().violations), (0, 0));
    // The host overwrites an entry the next Write does not update (entry 900).
    h.guest_write(hmb.addr(900 * 4), &0x1234u32.to_le_bytes());
    let third = pattern(512 << 10, 3);
    assert!(h.write_lbas(1, 0, &third, 9).ok());
    found_once_at_slot_0(&mut h);
    let (c, back) = h.read_lbas(1, 0, 1024, 9);
    assert!(c.ok());
    assert!(back == third);
    // Rebuilt and rewritten in the HMB: the audit's baseline followed, nothing more found.
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    assert_eq!(h.ctrl.hmb_audit().violations, 1);
    assert_eq!(h.ctrl.report().namespace.ftl.cache_corruptions, 1);
}
