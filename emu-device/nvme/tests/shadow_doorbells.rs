//! Doorbell Buffer Config (7Ch, OACS bit 8) and the shadow doorbells: the fake host writes
//! shadows and rings MMIO only when the EventIdx asks, exactly as Linux's driver
//! (`nvme_dbbuf_update_and_check_event`); the controller reads the shadow SQ tail when it
//! processes the SQ and the shadow CQ head when the CQ looks full.

mod common;

use common::{pattern, ready_host};
use hmb_nvme::fake_host::{Command, FakeHost, PAGE};
use hmb_nvme::{ControllerConfig, Status};

const SQ_DB: u64 = 8; // queue 1's SQ slot in either buffer
const CQ_DB: u64 = 12;

fn le32(h: &FakeHost, addr: u64) -> u32 {
    u32::from_le_bytes(h.guest_read(addr, 4).try_into().unwrap())
}

/// A host with I/O queue pair 1 of `entries` and the doorbell buffers configured after it,
/// as Linux orders them.
fn shadowed_host(entries: u32) -> FakeHost {
    let mut h = FakeHost::new(ControllerConfig::default(), common::GUEST_BYTES);
    assert_eq!(h.enable(32) & 0b11, 1);
    h.create_io_queue(1, entries).unwrap();
    assert!(h.config_doorbell_buffers().ok());
    h
}

fn write_cmd(buf: u64, slba: u64) -> Command {
    Command::new(0x01).nsid(1).prp1(buf).cdw(10, slba as u32).cdw(12, 7)
}

#[test]
fn identify_declares_oacs_bit_8() {
    let mut h = ready_host(ControllerConfig::default());
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    let oacs = u16::from_le_bytes(h.guest_read(buf + 256, 2).try_into().unwrap());
    assert_eq!(oacs, 1 << 8, "Doorbell Buffer Config only");
}

#[test]
fn config_initialises_the_shadows_and_event_indexes_of_existing_queues() {
    let h = shadowed_host(16);
    let (dbs, eis) = h.dbbuf.unwrap();
    assert_eq!((le32(&h, dbs + SQ_DB), le32(&h, dbs + CQ_DB)), (0, 0));
    assert_eq!(le32(&h, eis + SQ_DB), 0, "SQ EventIdx = tail: the first command rings");
    assert_eq!(le32(&h, eis + CQ_DB), 15, "CQ EventIdx one before the head: no CQ ring");
    // The admin queue's slots are not used.
    assert_eq!((le32(&h, eis), le32(&h, eis + 4)), (0, 0));
}

#[test]
fn bad_buffers_are_invalid_field_and_change_nothing() {
    let mut h = ready_host(ControllerConfig::default());
    let (a, b) = (h.alloc(PAGE), h.alloc(PAGE));
    let beyond = h.mem_bytes;
    for (prp1, prp2, what) in [
        (a + 8, b, "shadow buffer not page aligned"),
        (a, b + 0x800, "EventIdx buffer not page aligned"),
        (beyond, b, "shadow buffer outside guest memory"),
        (a, beyond, "EventIdx buffer outside guest memory"),
        (a, a, "the same page for both"),
    ] {
        let c = h.admin(Command::new(0x7C).prp1(prp1).prp2(prp2));
        assert_eq!(c.status, Status::INVALID_FIELD, "{what}");
    }
    assert_eq!(le32(&h, b + CQ_DB), 0, "no EventIdx written by a rejected config");
    // Still unshadowed: the MMIO doorbell values are the queue's tail and head.
    let buf = h.alloc(4096);
    h.guest_write(buf, &pattern(4096, 1));
    assert!(h.submit(1, write_cmd(buf, 0)).unwrap().ok());
    assert_eq!(h.ctrl.report().counters.shadow_doorbell_reads, 0);
}

#[test]
fn qd1_rings_only_the_sq_doorbell_and_the_cq_wraps_from_the_shadow_head() {
    let mut h = shadowed_host(4);
    let buf = h.alloc(4096);
    let before = h.ctrl.report().counters.doorbell_writes;
    let mmio = h.mmio_doorbells;
    for i in 0..20u64 {
        let data = pattern(4096, i);
        h.guest_write(buf, &data);
        let c = h.submit(1, write_cmd(buf, i * 8)).expect("completes inline");
        assert!(c.ok(), "command {i}");
        let (c, back) = h.read_lbas(1, i * 8, 8, 9);
        assert!(c.ok());
        assert_eq!(back, data, "command {i}");
    }
    // 40 commands through a 4-entry CQ (5 laps in each phase), one MMIO write each.
    assert_eq!(h.mmio_doorbells - mmio, 40, "no CQ head doorbell at QD1");
    let r = h.ctrl.report();
    assert_eq!(r.counters.doorbell_writes - before, 40);
    assert_eq!(r.counters.io_completions, 40);
    assert_eq!(r.counters.invalid_shadow_doorbells, 0);
    let (_, eis) = h.dbbuf.unwrap();
    let cq = r.queues.iter().find(|q| q.kind == "cq" && q.qid == 1).unwrap();
    assert_eq!(
        le32(&h, eis + CQ_DB),
        (cq.head + 3) % 4,
        "one before the head read last"
    );
    assert_eq!(le32(&h, eis + SQ_DB), 0, "SQ EventIdx = the consumed tail (40 % 4)");
}

#[test]
fn the_tail_comes_from_the_shadow_not_from_a_stale_mmio_value() {
    let mut h = shadowed_host(16);
    let buf = h.alloc(4096);
    let cids: Vec<u16> = (0..3).map(|i| h.push(1, write_cmd(buf, i * 8))).collect();
    // The host wrote tail 3 into the shadow but the message carries 1 (as if two more
    // commands were queued behind an EventIdx the controller had not moved yet).
    let (dbs, _) = h.dbbuf.unwrap();
    h.guest_write(dbs + SQ_DB, &3u32.to_le_bytes());
    h.write32(0x1000 + 8, 1);
    for cid in cids {
        assert_eq!(h.reap(1).expect("all three processed").cid, cid);
    }
    assert!(h.reap(1).is_none());
    assert_eq!(le32(&h, h.dbbuf.unwrap().1 + SQ_DB), 3, "EventIdx at the consumed tail");
}

#[test]
fn a_full_cq_is_refreshed_from_the_shadow_and_arms_its_event_index() {
    let mut h = shadowed_host(4);
    let (dbs, eis) = h.dbbuf.unwrap();
    let buf = h.alloc(4096);
    let mmio = h.mmio_doorbells;
    // Two commands completed and not reaped: the CQ (3 slots) has room for one more.
    for i in 0..2 {
        h.push(1, write_cmd(buf, i * 8));
    }
    h.ring(1);
    // Three more: one completes, the CQ is full, two wait in the SQ.
    for i in 2..5 {
        h.push(1, write_cmd(buf, i * 8));
    }
    h.ring(1);
    assert_eq!(h.mmio_doorbells - mmio, 2);
    let r = h.ctrl.report();
    assert_eq!(r.counters.io_completions, 3);
    assert_eq!(le32(&h, eis + CQ_DB), 0, "armed: EventIdx = the head the CQ is full at");
    // Each reap frees a slot: the host's move crosses the armed EventIdx and rings; the
    // controller reads the shadow head and completes the next waiting command.
    let mut reaped = 0;
    while let Some(c) = h.reap(1) {
        assert!(c.ok());
        reaped += 1;
    }
    assert_eq!(reaped, 5);
    assert_eq!(h.ctrl.report().counters.io_completions, 5);
    assert_eq!(
        h.mmio_doorbells - mmio,
        2 + 2,
        "one CQ ring per stalled command, no more"
    );
    assert_eq!(le32(&h, dbs + CQ_DB), 1, "head after 5 entries");
    // Nothing waits: the EventIdx is back one before the head the controller read.
    let head = h
        .ctrl
        .report()
        .queues
        .iter()
        .find(|q| q.kind == "cq" && q.qid == 1)
        .unwrap()
        .head;
    assert_eq!(le32(&h, eis + CQ_DB), (head + 3) % 4);
}

#[test]
fn a_shadow_value_out_of_range_is_ignored_and_counted() {
    let mut h = shadowed_host(16);
    let (dbs, _) = h.dbbuf.unwrap();
    let buf = h.alloc(4096);
    h.push(1, write_cmd(buf, 0));
    h.guest_write(dbs + SQ_DB, &16u32.to_le_bytes());
    h.write32(0x1000 + 8, 1);
    assert!(h.reap(1).is_none(), "no command from a tail >= the queue size");
    let r = h.ctrl.report();
    assert!(r.counters.invalid_shadow_doorbells >= 1);
    assert_eq!(r.counters.io_commands, 0);
    assert!(r.ready && !r.fatal);
    // A valid shadow tail then runs the command.
    h.guest_write(dbs + SQ_DB, &1u32.to_le_bytes());
    h.write32(0x1000 + 8, 1);
    assert!(h.reap(1).expect("completes").ok());
    // A CQ head past the posted entries is ignored too (the MMIO value is in range).
    h.guest_write(dbs + CQ_DB, &9u32.to_le_bytes());
    h.write32(0x1000 + 12, 1);
    let r = h.ctrl.report();
    assert!(r.counters.invalid_shadow_doorbells >= 2);
    assert_eq!(r.queues.iter().find(|q| q.kind == "cq" && q.qid == 1).unwrap().head, 0);
    assert_eq!(r.counters.invalid_doorbells, 0, "not an invalid MMIO write");
}

#[test]
fn cc_en_0_and_a_transport_reset_forget_the_buffers() {
    for transport in [false, true] {
        let mut h = shadowed_host(16);
        let (dbs, _) = h.dbbuf.unwrap();
        if transport {
            h.ctrl.reset();
            h.forget_queues();
        } else {
            h.disable();
        }
        assert_eq!(h.enable(32) & 0b11, 1);
        h.create_io_queue(1, 16).unwrap();
        assert!(h.dbbuf.is_none());
        // A stale shadow tail must not be taken: the MMIO value is the tail again.
        h.guest_write(dbs + SQ_DB, &5u32.to_le_bytes());
        let buf = h.alloc(4096);
        assert!(h.submit(1, write_cmd(buf, 0)).unwrap().ok());
        assert!(h.reap(1).is_none(), "one command only");
        let r = h.ctrl.report();
        assert_eq!(r.counters.io_commands, 1, "transport reset {transport}");
        let reads = r.counters.shadow_doorbell_reads;
        assert!(h.submit(1, write_cmd(buf, 8)).unwrap().ok());
        assert_eq!(h.ctrl.report().counters.shadow_doorbell_reads, reads, "no shadow read");
    }
}

#[test]
fn queues_created_after_the_config_are_shadowed_from_the_start() {
    let mut h = shadowed_host(16);
    h.create_io_queue(2, 8).unwrap();
    let (dbs, eis) = h.dbbuf.unwrap();
    assert_eq!((le32(&h, dbs + 16), le32(&h, dbs + 20)), (0, 0));
    assert_eq!((le32(&h, eis + 16), le32(&h, eis + 20)), (0, 7));
    let buf = h.alloc(4096);
    let mmio = h.mmio_doorbells;
    for i in 0..10 {
        assert!(h.submit(2, write_cmd(buf, i * 8)).unwrap().ok());
    }
    assert_eq!(h.mmio_doorbells - mmio, 10);
}

#[test]
fn bus_master_off_holds_a_shadowed_doorbell_until_it_is_on() {
    let mut h = shadowed_host(16);
    let buf = h.alloc(4096);
    h.ctrl.set_bus_master(false);
    let cid = h.push(1, write_cmd(buf, 0));
    h.ring(1);
    assert!(h.reap(1).is_none());
    assert_eq!(h.ctrl.report().counters.bus_master_stalls, 1);
    assert_eq!(h.ctrl.report().counters.shadow_doorbell_reads, 0, "no memory access");
    h.ctrl.set_bus_master(true);
    assert_eq!(h.reap(1).expect("runs once BME = 1").cid, cid);
}

#[test]
fn the_admin_queue_keeps_its_mmio_doorbells() {
    let mut h = shadowed_host(16);
    let before = h.mmio_doorbells;
    let buf = h.alloc(4096);
    for _ in 0..3 {
        assert!(h.admin(Command::identify(1, 0, buf)).ok());
    }
    assert_eq!(h.mmio_doorbells - before, 6, "SQ tail and CQ head for each");
}
