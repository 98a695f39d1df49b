//! The output file system fills up (docs/daemon.md, exit 11). Simulated with
//! a file size limit (RLIMIT_FSIZE) on the daemon process: its writes then
//! fail exactly as on a full file system (a short write, then an error:
//! EFBIG instead of ENOSPC, both handled alike), without root or a mount.

mod common;

use std::os::unix::process::CommandExt;
use std::time::Duration;

use common::*;
use hmb_firmware_model::Workload;
use hmb_trace_file::{recover, Marker, TailState, FILE_HEADER_SIZE};

const SEED: u64 = 0xF011;

/// The daemon with its file size limited to `limit` bytes.
fn spawn_limited(rig: &Rig, limit: u64, extra: &[&str]) -> std::process::Child {
    let mut c = rig.command(extra);
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(move || {
            let r = libc::rlimit {
                rlim_cur: limit,
                rlim_max: limit,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &r) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    c.spawn().unwrap()
}

/// Buffered and `--direct` (O_DIRECT: its padded write past the limit is
/// refused whole, never cut short to an unaligned length).
#[rstest::rstest]
#[case::buffered(&[])]
#[case::direct(&["--direct"])]
fn a_full_output_ends_at_a_whole_batch_and_a_restart_resumes_exactly(#[case] mode: &[&str]) {
    let mut rig = Rig::new(65536);
    let disk = tempfile::tempdir().unwrap();
    rig.out = disk.path().join("trace.bin");
    let mut p = rig.producer();
    for _ in 0..200 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    let first = rig.head();
    // Room for the header, the first 200 records and half of the next 200.
    for _ in 0..200 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    let second = rig.head();
    assert!(second < 65536, "no wrap: ring bytes are file bytes");
    let limit = FILE_HEADER_SIZE as u64 + first + (second - first) / 2;

    let daemon = spawn_limited(&rig, limit, mode);
    let out = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(11), "{stderr}");
    assert!(stderr.contains("exit 11"), "{stderr}");

    // Nothing torn: the file ends on an item boundary, within the limit,
    // and holds exactly what the published tail says was consumed.
    let len = std::fs::metadata(&rig.out).unwrap().len();
    assert!(len <= limit, "{len} > {limit}");
    let rec = recover(&rig.out).unwrap();
    assert!(matches!(rec.tail, TailState::Clean), "{:?}", rec.tail);
    assert_eq!(rec.valid_len, len);
    assert_eq!(
        len,
        FILE_HEADER_SIZE as u64 + rig.tail(),
        "file and published tail agree"
    );
    let items = read_trace(&rig.out);
    let seqs = check_records(&items, SEED, Workload::Ssd);
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "a prefix, once each");
    assert!(seqs.len() < 400, "the limit was hit before the end");
    assert!(markers(&items).is_empty());

    // Space is back: a restart resumes from the ring and writes every
    // record exactly once.
    p.freeze();
    let (code, stderr) = rig.run(mode);
    assert_eq!(code, 8, "{stderr}");
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, Workload::Ssd), (0..400).collect::<Vec<_>>());
    assert_eq!(
        markers(&items),
        vec![Marker::Frozen {
            epoch: 1,
            last_seq: Some(399),
            next_seq: 400
        }]
    );
}

/// Full while streaming: the daemon drains batches of at most 4 KiB as they
/// come, so several are in the file when the limit falls in the middle of
/// one. Same guarantees.
#[rstest::rstest]
#[case::buffered(&[])]
#[case::direct(&["--direct"])]
fn the_output_fills_up_while_streaming(#[case] mode: &[&str]) {
    let mut rig = Rig::new(65536);
    let disk = tempfile::tempdir().unwrap();
    rig.out = disk.path().join("trace.bin");
    let mut p = rig.producer();
    // Room for several 4 KiB batches also with --direct, whose padded
    // write is refused up to a block before the limit.
    let limit = FILE_HEADER_SIZE as u64 + 20_000;
    let mut args = vec!["--max-batch-kib", "4"];
    args.extend_from_slice(mode);
    let mut daemon = spawn_limited(&rig, limit, &args);
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = daemon.try_wait().unwrap() {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the daemon never filled its output"
        );
        // Lossless: only produce what fits, so every gap would be a bug.
        if p.fits(hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD as usize) {
            produce(&mut p, SEED, Workload::Ssd, false);
        } else {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    assert_eq!(status.code(), Some(11));
    let len = std::fs::metadata(&rig.out).unwrap().len();
    assert!(len <= limit, "{len} > {limit}");
    let rec = recover(&rig.out).unwrap();
    assert!(matches!(rec.tail, TailState::Clean), "{:?}", rec.tail);
    assert_eq!(rec.valid_len, len);
    assert_eq!(
        len,
        FILE_HEADER_SIZE as u64 + rig.tail(),
        "file and published tail agree"
    );
    let items = read_trace(&rig.out);
    let seqs = check_records(&items, SEED, Workload::Ssd);
    // Batches of at most 4 KiB: more than one is kept whole before the one
    // that did not fit.
    assert!(len > FILE_HEADER_SIZE as u64 + 4096, "whole batches kept: {len} bytes");
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>(), "a prefix, once each");
    assert!(markers(&items).is_empty());
}
