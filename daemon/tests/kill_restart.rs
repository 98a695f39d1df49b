//! Exactly once across SIGKILL: the daemon is killed at random points while
//! the firmware model produces, and restarted, at least 100 times; then
//! trace.bin must hold every record exactly once, in order, byte-identical
//! to the ground truth, with no LOST marker (the producer here never drops).
//! Half the rounds write with `--direct` (O_DIRECT, padded blocks), the
//! others buffered, into the same trace.bin on a disk file system.
//! HMB_KILL_ROUNDS overrides the number of rounds, HMB_KILL_SEED the seed.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use hmb_firmware_model::Workload;
use hmb_trace_file::Marker;
use nix::sys::signal::Signal;

#[test]
fn sigkill_at_random_points_then_restart_is_exactly_once() {
    let rounds: u32 = std::env::var("HMB_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(120);
    let seed: u64 = std::env::var("HMB_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("kill/restart: {rounds} rounds, HMB_KILL_SEED={seed}");
    let workload = Workload::parse("sizes").unwrap();
    let mut rig = Rig::new(65536);
    // On a disk file system (the rig's own folder may be tmpfs, which has
    // no O_DIRECT before Linux 6.6).
    let disk = tempfile::tempdir().unwrap();
    rig.out = disk.path().join("trace.bin");
    let mut p = rig.producer();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_p = stop.clone();
    let producer = std::thread::spawn(move || {
        while !stop_p.load(Ordering::Relaxed) {
            // Lossless: waits for room while no daemon is running.
            let seq = p.next_seq();
            let r = hmb_firmware_model::expected_record(0xC0FFEE, workload, seq);
            while !p.fits(r.payload.len()) {
                if stop_p.load(Ordering::Relaxed) {
                    return p;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
            p.produce(r.opcode, r.source, seq, &r.payload);
        }
        p
    });
    let mut rng = hmb_firmware_model::rng::SplitMix64::new(seed);
    let batch_sizes = ["4", "16", "64", "1024"];
    let (mut resumed_with_duplicates, mut truncated, mut padding_cut) = (0u32, 0u32, 0u32);
    for _ in 0..rounds {
        let batch = batch_sizes[rng.below(batch_sizes.len() as u64) as usize];
        // Half the rounds widen the crash windows (torn write, written but
        // not yet published) so that SIGKILL lands in them often.
        let window = if rng.below(2) == 0 { "0" } else { "2000" };
        let direct = rng.below(2) == 0;
        let mut args = vec![
            "-v",
            "--max-batch-kib",
            batch,
            "--poll-timeout-ms",
            "5",
            "--debug-crash-window-us",
            window,
        ];
        if direct {
            args.push("--direct");
        }
        let daemon = rig.spawn(&args);
        std::thread::sleep(Duration::from_micros(rng.below(30_000)));
        signal(&daemon, Signal::SIGKILL);
        let out = daemon.wait_with_output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code().is_none() || out.status.code() == Some(0),
            "daemon failed: {:?} {log}",
            out.status
        );
        resumed_with_duplicates += log.contains("already in") as u32;
        truncated += log.contains("torn last item") as u32;
        padding_cut += log.contains("O_DIRECT padding") as u32;
    }
    stop.store(true, Ordering::Relaxed);
    let mut p = producer.join().unwrap();
    let total = p.next_seq();
    p.freeze();
    let (code, stderr) = rig.run(&["--stats"]);
    assert_eq!(code, 8, "{stderr}");
    eprintln!("final run: {}", stderr.trim());
    eprintln!(
        "restarts that skipped re-read records: {resumed_with_duplicates}, that truncated a torn item: {truncated}, \
         that cut O_DIRECT padding: {padding_cut}"
    );
    let items = read_trace(&rig.out);
    let seqs = check_records(&items, 0xC0FFEE, workload);
    assert!(total > 1000, "too little produced ({total}) to mean anything");
    assert_eq!(seqs.len() as u64, total, "records in file vs produced");
    assert!(
        seqs.iter().enumerate().all(|(i, &s)| s == i as u64),
        "records out of order, duplicated or missing"
    );
    assert_eq!(
        markers(&items),
        vec![Marker::Frozen {
            epoch: 1,
            last_seq: Some(total - 1),
            next_seq: total
        }]
    );
    if rounds >= 100 {
        assert!(
            resumed_with_duplicates > 0 && truncated > 0 && padding_cut > 0,
            "the crash windows were never hit: the test proved little"
        );
    }
}
