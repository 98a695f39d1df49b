//! `--direct` (O_DIRECT writes of whole padded blocks, the partial last
//! block carried to the next batch): the same trace.bin as buffered writes,
//! the file's length right at every way out, padding left by a kill cut by
//! the next start. trace.bin on a disk file system (tempfile's default
//! folder), as in a deployment.

mod common;

use std::time::Duration;

use common::*;
use hmb_firmware_model::{SizeDist, Workload};
use hmb_trace_file::{recover, Marker, TailState};
use nix::sys::signal::Signal;

const SEED: u64 = 0xD1EC7;
const SIZES: Workload = Workload::Sizes(SizeDist::LogUniform);
const BLOCK: u64 = 4096;

/// A rig whose trace.bin is on a disk file system.
fn rig(ring_size: u64) -> (Rig, tempfile::TempDir) {
    let mut rig = Rig::new(ring_size);
    let disk = tempfile::tempdir().unwrap();
    rig.out = disk.path().join("trace.bin");
    (rig, disk)
}

/// Produce (nobody draining yet) until the ring holds at least `bytes`;
/// returns how many records.
fn fill(p: &mut hmb_firmware_model::Producer, bytes: u64) -> u64 {
    // Only what fits whatever its size: no record dropped.
    while p.head() < bytes && p.fits(hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD as usize) {
        produce(p, SEED, SIZES, false);
    }
    p.next_seq()
}

/// Streams 100 records into a running daemon and waits until it has
/// drained them.
fn produce_100_drained(rig: &Rig, p: &mut hmb_firmware_model::Producer) {
    for _ in 0..100 {
        produce(p, SEED, SIZES, true);
    }
    rig.wait_drained(Duration::from_secs(10));
}

/// Waits until the daemon's first batch has begun: trace.bin holds more
/// than its header.
fn wait_for_first_batch(rig: &Rig) {
    let start = std::time::Instant::now();
    while std::fs::metadata(&rig.out).map_or(0, |m| m.len()) <= 64 {
        assert!(start.elapsed() < Duration::from_secs(10), "no batch started");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The file ends right after its last item: no padding, nothing torn.
fn assert_exact(rig: &Rig) {
    let len = std::fs::metadata(&rig.out).unwrap().len();
    let rec = recover(&rig.out).unwrap();
    assert_eq!(rec.tail, TailState::Clean, "file of {len} bytes");
    assert_eq!(rec.valid_len, len);
}

/// The same ring contents (with drops: a LOST marker) drained in batches of
/// at most `batch` KiB, frozen: buffered and direct give the same bytes.
#[rstest::rstest]
#[case::small_batches("4")]
#[case::default_batches("256")]
fn a_drained_ring_gives_the_same_bytes_buffered_and_direct(#[case] batch: &str) {
    let mut files = Vec::new();
    for direct in [false, true] {
        let (rig, disk) = rig(16384);
        let mut p = rig.producer();
        // More than the ring holds, nobody draining: the first are dropped.
        for _ in 0..600 {
            produce(&mut p, SEED, SIZES, false);
        }
        p.freeze();
        let mut args = vec!["--max-batch-kib", batch];
        if direct {
            args.push("--direct");
        }
        let (code, stderr) = rig.run(&args);
        assert_eq!(code, 8, "{stderr}");
        assert_exact(&rig);
        let items = read_trace(&rig.out);
        assert!(
            matches!(markers(&items)[0], Marker::Lost { .. }),
            "no LOST marker: the test covers none"
        );
        files.push(std::fs::read(&rig.out).unwrap());
        drop(disk);
    }
    assert_eq!(files[0].len(), files[1].len());
    assert!(files[0] == files[1], "direct and buffered trace.bin differ");
}

/// Streaming while the model produces, batches of at most 4 KiB (most end
/// inside a block, so the carry goes to the next batch): the ground truth,
/// and the same bytes as a buffered run.
#[test]
fn streaming_direct_is_the_ground_truth_and_the_buffered_bytes() {
    let mut files = Vec::new();
    for direct in [false, true] {
        let (rig, disk) = rig(65536);
        let mut args = vec!["--max-batch-kib", "4", "--batch-wait-ms", "0", "--stats"];
        if direct {
            args.push("--direct");
        }
        let daemon = rig.spawn(&args);
        let mut p = rig.producer();
        for _ in 0..5000 {
            produce(&mut p, SEED, SIZES, true);
        }
        p.freeze();
        let out = daemon.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(8), "{stderr}");
        assert_exact(&rig);
        let items = read_trace(&rig.out);
        assert_eq!(check_records(&items, SEED, SIZES), (0..5000).collect::<Vec<_>>());
        files.push(std::fs::read(&rig.out).unwrap());
        drop(disk);
    }
    assert!(files[0] == files[1], "direct and buffered trace.bin differ");
}

/// SIGTERM while a batch's write is split by the crash hook (the first
/// blocks written, the rest not yet): the daemon finishes the batch, drains
/// the ring, exits 0, and the file is every record with its length right.
#[test]
fn sigterm_in_the_middle_of_a_direct_batch() {
    let (rig, _disk) = rig(65536);
    let mut p = rig.producer();
    let n = fill(&mut p, 30_000);
    let daemon = rig.spawn(&["--direct", "--max-batch-kib", "8", "--debug-crash-window-us", "300000"]);
    // Inside the first batch's split write: more than the header is there.
    wait_for_first_batch(&rig);
    signal(&daemon, Signal::SIGTERM);
    let out = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_exact(&rig);
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, SIZES), (0..n).collect::<Vec<_>>());
    assert_eq!(rig.tail(), rig.head());
}

/// SIGKILL between batches leaves the last block's padding in the file; the
/// next start cuts it (rather than setting a "corrupt" file aside) and
/// goes on, buffered or direct.
#[rstest::rstest]
#[case::restart_buffered(&[])]
#[case::restart_direct(&["--direct"])]
fn padding_left_by_sigkill_is_cut_at_the_next_start(#[case] restart: &[&str]) {
    let (rig, disk) = rig(65536);
    let daemon = rig.spawn(&["--direct"]);
    let mut p = rig.producer();
    produce_100_drained(&rig, &mut p);
    signal(&daemon, Signal::SIGKILL);
    daemon.wait_with_output().unwrap();
    let len = std::fs::metadata(&rig.out).unwrap().len();
    assert!(
        len.is_multiple_of(BLOCK) && len > 64 + rig.tail(),
        "no padding left ({len} bytes for {} of records)",
        rig.tail()
    );
    for _ in 0..100 {
        produce(&mut p, SEED, SIZES, true);
    }
    p.freeze();
    let mut args = vec!["-v"];
    args.extend_from_slice(restart);
    let (code, stderr) = rig.run(&args);
    assert_eq!(code, 8, "{stderr}");
    assert!(stderr.contains("O_DIRECT padding"), "{stderr}");
    assert_exact(&rig);
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, SIZES), (0..200).collect::<Vec<_>>());
    let aside = std::fs::read_dir(disk.path()).unwrap().count();
    assert_eq!(aside, 1, "a file was set aside");
}

/// SIGKILL inside a split direct write (the first blocks on disk, unpadded,
/// ending inside an item): the restart truncates the torn item and writes
/// every record once.
#[test]
fn sigkill_inside_a_direct_write_leaves_a_torn_item_recovery_truncates() {
    let (rig, _disk) = rig(65536);
    let mut p = rig.producer();
    // Before the daemon starts: its first batch is all of it, 40 KB, split
    // at a block boundary near its middle.
    let n = fill(&mut p, 40_000);
    let daemon = rig.spawn(&[
        "--direct",
        "--max-batch-kib",
        "64",
        "--debug-crash-window-us",
        "2000000",
    ]);
    wait_for_first_batch(&rig);
    std::thread::sleep(Duration::from_millis(100));
    signal(&daemon, Signal::SIGKILL);
    daemon.wait_with_output().unwrap();
    assert!(
        matches!(recover(&rig.out).unwrap().tail, TailState::Torn { .. }),
        "the kill did not land in the split write"
    );
    p.freeze();
    let (code, stderr) = rig.run(&["-v", "--direct"]);
    assert_eq!(code, 8, "{stderr}");
    assert!(stderr.contains("torn last item"), "{stderr}");
    assert_exact(&rig);
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, SIZES), (0..n).collect::<Vec<_>>());
}

/// SIGHUP (logrotate) with `--direct`: the rotated file is cut to its data
/// before the new one is opened; the two hold every record once.
#[test]
fn sighup_with_direct_leaves_both_files_exact() {
    let (rig, disk) = rig(65536);
    let daemon = rig.spawn(&["--direct"]);
    let mut p = rig.producer();
    produce_100_drained(&rig, &mut p);
    let rotated = disk.path().join("trace.bin.1");
    std::fs::rename(&rig.out, &rotated).unwrap();
    signal(&daemon, Signal::SIGHUP);
    produce_100_drained(&rig, &mut p);
    signal(&daemon, Signal::SIGINT);
    let out = daemon.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_exact(&rig);
    let old_len = std::fs::metadata(&rotated).unwrap().len();
    let old = recover(&rotated).unwrap();
    assert_eq!((old.tail, old.valid_len), (TailState::Clean, old_len));
    let mut seqs = check_records(&read_trace(&rotated), SEED, SIZES);
    seqs.extend(check_records(&read_trace(&rig.out), SEED, SIZES));
    assert_eq!(seqs, (0..200).collect::<Vec<_>>());
}
