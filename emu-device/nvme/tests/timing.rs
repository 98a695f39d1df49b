//! `Timing::Model`: I/O completions are posted when the FTL's timing model says the
//! command's NAND work ends (src/timing.rs), not when the command ran; `Timing::None`
//! posts at once. A deferred completion holds its CQ slot; a reset drops what is held.

mod common;

use std::time::{Duration, Instant};

use common::*;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{ControllerConfig, MediaConfig, Status, Timing};

/// tR and tPROG of the slow NAND below. Slow enough that "not yet due" holds
/// right after the doorbell even when the test thread is descheduled inside
/// it on a loaded machine (at 2 ms, a fresh-clone run beside other builds
/// once saw the first read of `a_doorbell_posts_completions_already_due`
/// already due when its own doorbell returned).
const READ: Duration = Duration::from_millis(20);
const PROGRAM: Duration = Duration::from_millis(30);
const TRANSFER: Duration = Duration::from_micros(10);
/// Longer than any one command's NAND work: what was queued is due after it.
const PAST_DUE: Duration = Duration::from_millis(50);

fn slow_media() -> MediaConfig {
    MediaConfig {
        read_ns: READ.as_nanos() as u32,
        program_ns: PROGRAM.as_nanos() as u32,
        transfer_ns: TRANSFER.as_nanos() as u32,
        ..Default::default()
    }
}

fn cfg(timing: Timing) -> ControllerConfig {
    ControllerConfig {
        media: slow_media(),
        timing,
        ..Default::default()
    }
}

fn read_cmd(h: &mut FakeHost, slba: u64) -> Command {
    let buf = h.alloc(4096);
    Command::new(0x02).nsid(1).prp1(buf).cdw(10, slba as u32).cdw(12, 7)
}

#[test]
fn under_the_model_a_read_completes_after_its_nand_time() {
    let mut h = ready_host(cfg(Timing::Model));
    let data = pattern(4096, 7);
    let start = Instant::now();
    assert!(h.write_lbas(1, 0, &data, 9).ok());
    assert!(start.elapsed() >= PROGRAM, "a write completes after its program");
    // Long enough for the write's program to be over: the die is idle again.
    std::thread::sleep(PAST_DUE);
    let cmd = read_cmd(&mut h, 0);
    let start = Instant::now();
    h.push(1, cmd);
    h.ring(1);
    assert!(h.reap(1).is_none(), "the model holds the completion");
    assert_eq!(h.ctrl.report().completions_deferred_now, 1);
    let wait = h.ctrl.next_due().expect("one completion deferred");
    assert!(wait <= READ + TRANSFER, "due within tR + transfer: {wait:?}");
    let c = h.reap_deferred(1).expect("posted when due");
    assert_eq!(c.status, Status::SUCCESS);
    // A miss of the map cache? The write cached its map page: a hit, one NAND read.
    assert!(start.elapsed() >= READ + TRANSFER, "{:?}", start.elapsed());
    let r = h.ctrl.report();
    assert_eq!((r.counters.deferred_completions, r.completions_deferred_now), (2, 0));
    let (c, back) = h.read_lbas(1, 0, 8, 9);
    assert!(c.ok());
    assert_eq!(back, data);
}

#[test]
fn without_the_model_completions_are_posted_at_once() {
    let mut h = ready_host(cfg(Timing::None));
    let cmd = read_cmd(&mut h, 0);
    h.push(1, cmd);
    h.ring(1);
    assert!(h.reap(1).is_some_and(|c| c.ok()));
    assert!(h.ctrl.next_due().is_none());
    assert_eq!(h.ctrl.report().counters.deferred_completions, 0);
}

/// Reads on different dies run in parallel in the model; reads on one die queue: four
/// reads of one NAND page end one after the other.
#[test]
fn reads_of_one_die_queue_behind_each_other() {
    let mut h = ready_host(cfg(Timing::Model));
    assert!(h.write_lbas(1, 0, &pattern(4096, 1), 9).ok());
    std::thread::sleep(PAST_DUE);
    let start = Instant::now();
    for _ in 0..4 {
        let cmd = read_cmd(&mut h, 0);
        h.push(1, cmd);
    }
    h.ring(1);
    let mut got = 0;
    while got < 4 {
        if h.reap(1).is_some() || h.reap_deferred(1).is_some() {
            got += 1;
        }
    }
    assert!(
        start.elapsed() >= 4 * READ,
        "four reads of one die take four tR: {:?}",
        start.elapsed()
    );
}

/// A CQ of 4 entries holds 3 completions: with 3 deferred, the 4th and 5th command stay
/// in the SQ until the host has taken completions, so the CQ never overflows.
#[test]
fn deferred_completions_hold_their_cq_slots() {
    let mut h = FakeHost::new(cfg(Timing::Model), GUEST_BYTES);
    assert_eq!(h.enable(32) & 0b11, 1);
    h.create_io_queue(1, 4).unwrap();
    // Written first: a read of an unwritten block needs no NAND and completes at once.
    assert!(h.write_lbas(1, 0, &pattern(8192, 3), 9).ok());
    for _ in 0..3 {
        let cmd = read_cmd(&mut h, 0);
        h.push(1, cmd);
    }
    h.ring(1);
    let cmd = read_cmd(&mut h, 8);
    h.push(1, cmd);
    h.ring(1);
    assert_eq!(h.ctrl.report().completions_deferred_now, 3, "the 4th waits for room");
    let mut reaped = 0;
    while reaped < 4 {
        if h.reap(1).is_some() || h.reap_deferred(1).is_some() {
            reaped += 1;
        }
    }
    assert_eq!(h.ctrl.report().counters.fatal_errors, 0, "no CQ overflow");
}

#[test]
fn a_reset_drops_deferred_completions() {
    let mut h = ready_host(cfg(Timing::Model));
    assert!(h.write_lbas(1, 0, &pattern(4096, 3), 9).ok());
    let cmd = read_cmd(&mut h, 0);
    h.push(1, cmd);
    h.ring(1);
    assert_eq!(h.ctrl.report().completions_deferred_now, 1);
    h.disable();
    let r = h.ctrl.report();
    assert_eq!((r.completions_deferred_now, r.counters.deferred_dropped), (0, 1));
    assert!(h.ctrl.next_due().is_none());
}

/// Switching the model off posts what it holds at once; switching it on defers again.
#[test]
fn switching_to_none_posts_what_is_held() {
    let mut h = ready_host(cfg(Timing::Model));
    assert!(h.write_lbas(1, 0, &pattern(4096, 3), 9).ok());
    let cmd = read_cmd(&mut h, 0);
    h.push(1, cmd);
    h.ring(1);
    assert!(h.reap(1).is_none());
    h.ctrl.set_timing(Timing::None);
    assert!(h.reap(1).is_some_and(|c| c.ok()), "posted by the switch");
    assert_eq!(h.ctrl.report().completions_deferred_now, 0);
    h.ctrl.set_timing(Timing::Model);
    std::thread::sleep(PAST_DUE);
    let cmd = read_cmd(&mut h, 0);
    h.push(1, cmd);
    h.ring(1);
    assert!(h.reap(1).is_none(), "held again");
    assert!(h.reap_deferred(1).is_some());
}

/// A completion already due is posted by the next doorbell, without the timer.
#[test]
fn a_doorbell_posts_completions_already_due() {
    let mut h = ready_host(cfg(Timing::Model));
    assert!(h.write_lbas(1, 0, &pattern(4096, 3), 9).ok());
    std::thread::sleep(PAST_DUE);
    let cmd = read_cmd(&mut h, 0);
    let first = h.push(1, cmd);
    h.ring(1);
    assert!(h.reap(1).is_none());
    std::thread::sleep(PAST_DUE); // past its tR + transfer
    let cmd = read_cmd(&mut h, 0);
    h.push(1, cmd);
    h.ring(1);
    assert_eq!(h.reap(1).map(|c| c.cid), Some(first), "posted by the second doorbell");
    assert!(h.reap_deferred(1).is_some());
}
