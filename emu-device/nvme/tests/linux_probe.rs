//! The command sequence of the Linux nvme driver (pci.c/core.c of 6.1..7.x) replayed over the
//! fake host: probe (nvme_reset_work), I/O, `reset_controller` with MR=1, and shutdown at
//! removal. Every step checks what the driver checks.

mod common;

use common::pattern;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{ControllerConfig, Status};

const MB: u64 = 1 << 20;

/// nvme_alloc_host_mem: chunks of min(preferred, 4 MiB) until preferred (max 128 MiB).
struct HostMem {
    list: u64,
    entries: u32,
    pages: u32,
}

fn alloc_host_mem(h: &mut FakeHost, hmpre_pages: u32) -> HostMem {
    let preferred = (u64::from(hmpre_pages) * 4096).min(128 * MB);
    let chunk = preferred.min(4 * MB);
    let n = preferred.div_ceil(chunk);
    let list = h.alloc(n * 16);
    for i in 0..n {
        let addr = h.alloc(chunk);
        let mut e = [0u8; 16];
        e[0..8].copy_from_slice(&addr.to_le_bytes());
        e[8..12].copy_from_slice(&((chunk / 4096) as u32).to_le_bytes());
        h.guest_write(list + 16 * i, &e);
    }
    HostMem {
        list,
        entries: n as u32,
        pages: (preferred / 4096) as u32,
    }
}

fn set_host_mem(h: &mut FakeHost, m: &HostMem, bits: u32) -> Status {
    let c = Command::set_features(0x0D, bits)
        .cdw(12, m.pages)
        .cdw(13, m.list as u32)
        .cdw(14, (m.list >> 32) as u32)
        .cdw(15, m.entries);
    h.admin(c).status
}

/// nvme_reset_work up to live I/O queues; returns the HMB as the driver tracks it.
fn probe(h: &mut FakeHost, nr_io_queues: u32, hmb: Option<&HostMem>) -> HostMem {
    // nvme_pci_enable: CSTS must not read all ones; CAP for MQES / DSTRD.
    assert_ne!(h.csts(), u32::MAX);
    let cap = h.read64(0);
    let q_depth = ((cap & 0xffff) + 1).min(1024) as u32;
    // nvme_pci_configure_admin_queue + nvme_enable_ctrl (NVME_AQ_DEPTH 32).
    assert_eq!(h.enable(32) & 0b11, 1, "RDY within CAP.TO");
    // nvme_init_identify.
    let id = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, id)).ok());
    let idc = h.guest_read(id, 4096);
    let hmpre = u32::from_le_bytes(idc[272..276].try_into().unwrap());
    let oaes = u32::from_le_bytes(idc[92..96].try_into().unwrap());
    let oncs = u16::from_le_bytes(idc[520..522].try_into().unwrap());
    // nvme_init_non_mdts_limits: CNS 06h; a positive NVMe status is tolerated.
    let c = h.admin(Command::identify(6, 0, id));
    assert_eq!(c.status, Status::INVALID_FIELD);
    // nvme_configure_timestamp (ONCS bit 6).
    if oncs & (1 << 6) != 0 {
        let ts = h.alloc(4096);
        h.guest_write(ts, &1_750_000_000_000u64.to_le_bytes());
        assert!(h.admin(Command::set_features(0x0E, 0).prp1(ts)).ok());
    }
    // nvme_hwmon_init: SMART log, NSID_ALL, 512 bytes.
    let log = h.alloc(4096);
    assert!(h
        .admin(Command::new(0x02).nsid(0xFFFF_FFFF).prp1(log).cdw(10, 2 | 127 << 16))
        .ok());
    // nvme_setup_host_mem: MR when the old buffer is reused.
    let mem = match hmb {
        Some(old) => {
            assert!(set_host_mem(h, old, 0b11).is_success());
            HostMem {
                list: old.list,
                entries: old.entries,
                pages: old.pages,
            }
        }
        None => {
            let m = alloc_host_mem(h, hmpre);
            assert!(set_host_mem(h, &m, 0b01).is_success(), "failed to set host mem");
            m
        }
    };
    // nvme_setup_io_queues: Set Features 07h, result min(NSQA, NCQA) + 1.
    let c = h.admin(Command::set_features(
        0x07,
        (nr_io_queues - 1) | (nr_io_queues - 1) << 16,
    ));
    assert!(c.ok());
    let granted = (c.dw0 & 0xffff).min(c.dw0 >> 16) + 1;
    assert_eq!(granted, nr_io_queues.min(8));
    // nvme_create_io_queues: CQ (PC | IEN, vector qid) then SQ (PC | QPRIO medium).
    for qid in 1..=granted {
        let cq = h.alloc(u64::from(q_depth) * 16);
        let sq = h.alloc(u64::from(q_depth) * 64);
        let size = (q_depth - 1) << 16 | qid;
        assert!(h
            .admin(Command::new(0x05).prp1(cq).cdw(10, size).cdw(11, qid << 16 | 0b11))
            .ok());
        assert!(h
            .admin(Command::new(0x01).prp1(sq).cdw(10, size).cdw(11, qid << 16 | 0b100 | 1))
            .ok());
        h.io.push(hmb_nvme::fake_host::HostQueue {
            qid: qid as u16,
            sq_base: sq,
            sq_entries: q_depth,
            sq_tail: 0,
            cq_base: cq,
            cq_entries: q_depth,
            cq_head: 0,
            phase: true,
        });
    }
    // nvme_start_ctrl -> nvme_enable_aen (OAES) + one AER outstanding.
    if oaes != 0 {
        assert!(h
            .admin(Command::set_features(
                0x0B,
                oaes & (1 << 8 | 1 << 9 | 1 << 11 | 1 << 31)
            ))
            .ok());
        assert!(h.submit(0, Command::new(0x0C)).is_none(), "AER held");
    }
    // nvme_scan_work: active ns list, descriptors, identify ns.
    assert!(h.admin(Command::identify(2, 0, id)).ok());
    assert_eq!(u32::from_le_bytes(h.guest_read(id, 4).try_into().unwrap()), 1);
    assert!(h.admin(Command::identify(3, 1, id)).ok());
    assert!(h.admin(Command::identify(0, 1, id)).ok());
    let ns = h.guest_read(id, 4096);
    assert_ne!(
        u64::from_le_bytes(ns[8..16].try_into().unwrap()),
        0,
        "NCAP: namespace active"
    );
    mem
}

/// nvme_dev_disable(shutdown): EHM=0, delete I/O queues, then CC.SHN or CC.EN=0.
fn dev_disable(h: &mut FakeHost, shutdown: bool) {
    assert!(set_host_mem(
        h,
        &HostMem {
            list: 0,
            entries: 0,
            pages: 0
        },
        0
    )
    .is_success());
    let qids: Vec<u16> = h.io.iter().map(|q| q.qid).collect();
    for qid in qids.iter().rev() {
        assert!(h.admin(Command::new(0x00).cdw(10, u32::from(*qid))).ok());
        assert!(h.admin(Command::new(0x04).cdw(10, u32::from(*qid))).ok());
    }
    h.forget_queues();
    if shutdown {
        assert_eq!((h.shutdown() >> 2) & 3, 2, "shutdown complete");
    } else {
        assert_eq!(h.disable() & 1, 0, "RDY clear after reset");
    }
}

#[test]
fn probe_io_reset_controller_and_shutdown() {
    let mut h = FakeHost::new(ControllerConfig::default(), 192 * MB);
    let mem = probe(&mut h, 4, None);
    let r = h.ctrl.report();
    assert!(r.hmb.enabled && !r.hmb.returned);
    assert_eq!(r.hmb.bytes, 32 * MB, "allocated 32 MiB host memory buffer");
    assert_eq!(r.hmb.descriptors.len(), 8);
    assert_eq!(r.aer_outstanding, 1);
    // I/O on every queue, verified.
    for qid in 1..=4u16 {
        let data = pattern(16384, u64::from(qid));
        assert!(h.write_lbas(qid, u64::from(qid) * 1000, &data, 9).ok());
        let (c, back) = h.read_lbas(qid, u64::from(qid) * 1000, 32, 9);
        assert!(c.ok() && back == data);
    }
    h.ctrl.hmb().unwrap().write_at(0, b"ring header").unwrap();
    // echo 1 > reset_controller: disable, then probe again reusing the buffer (MR=1).
    dev_disable(&mut h, false);
    assert!(h.ctrl.hmb().is_none());
    probe(&mut h, 4, Some(&mem));
    let hmb = h.ctrl.hmb().expect("HMB re-enabled");
    assert!(hmb.returned());
    let mut b = [0u8; 11];
    hmb.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"ring header");
    // Data survives the reset.
    let (c, back) = h.read_lbas(2, 2000, 32, 9);
    assert!(c.ok() && back == pattern(16384, 2));
    // Removal: shutdown.
    dev_disable(&mut h, true);
    let r = h.ctrl.report();
    assert!(!r.hmb.enabled);
    assert_eq!(r.shutdown_status, 2);
    assert_eq!(
        r.counters.errors, 2,
        "only the tolerated Identify CNS 06h failed, once per probe"
    );
}
