//! The daemon binary against the firmware model over shared memory.

mod common;

use std::time::Duration;

use common::*;
use hmb_firmware_model::{Produced, Workload};
use hmb_trace_abi::*;
use hmb_trace_file::Marker;
use nix::sys::signal::Signal;

const SEED: u64 = 0xD43;

#[test]
fn streams_ground_truth_then_exits_frozen() {
    let rig = Rig::new(65536);
    let mut daemon = rig.spawn(&["--stats"]);
    let mut p = rig.producer();
    for _ in 0..20_000 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    p.freeze();
    let status = daemon.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(daemon.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("records=20000 "), "{stderr}");
    let items = read_trace(&rig.out);
    assert_eq!(
        check_records(&items, SEED, Workload::Ssd),
        (0..20_000).collect::<Vec<_>>()
    );
    assert_eq!(
        markers(&items),
        vec![Marker::Frozen {
            epoch: 1,
            last_seq: Some(19_999),
            next_seq: 20_000
        }]
    );
    // Restarted on a still-frozen ring: nothing is written twice.
    let len = std::fs::metadata(&rig.out).unwrap().len();
    assert_eq!(rig.run(&[]).0, 8);
    assert_eq!(std::fs::metadata(&rig.out).unwrap().len(), len);
}

#[test]
fn drops_become_exact_lost_markers() {
    let rig = Rig::new(8192);
    let mut p = rig.producer();
    let mut dropped = Vec::new();
    // No daemon yet: produce until the ring is full and five records were
    // dropped (a fixed count would depend on the workload's record sizes).
    for _ in 0..100_000 {
        if let Produced::Dropped { seq } = produce(&mut p, SEED, Workload::Npu, false) {
            dropped.push(seq);
            if dropped.len() == 5 {
                break;
            }
        }
    }
    assert_eq!(dropped.len(), 5, "the ring never filled");
    let mut daemon = rig.spawn(&[]);
    rig.wait_drained(Duration::from_secs(10));
    for _ in 0..30 {
        if let Produced::Dropped { seq } = produce(&mut p, SEED, Workload::Npu, false) {
            dropped.push(seq);
        }
    }
    // Trailing drops, only final once frozen.
    for _ in 0..200 {
        if let Produced::Dropped { seq } = produce(&mut p, SEED, Workload::Npu, false) {
            dropped.push(seq);
        }
    }
    p.freeze();
    assert_eq!(daemon.wait().unwrap().code(), Some(8));
    let items = read_trace(&rig.out);
    let seqs = check_records(&items, SEED, Workload::Npu);
    let mut lost: Vec<u64> = markers(&items)
        .iter()
        .flat_map(|m| match *m {
            Marker::Lost {
                first_seq,
                count,
                epoch,
            } => {
                assert_eq!(epoch, 1);
                first_seq..first_seq + count
            }
            _ => 0..0,
        })
        .collect();
    lost.sort_unstable();
    assert!(!dropped.is_empty());
    assert_eq!(lost, dropped);
    let mut all: Vec<u64> = seqs.iter().chain(lost.iter()).copied().collect();
    all.sort_unstable();
    assert_eq!(all, (0..p.next_seq()).collect::<Vec<_>>());
}

#[test]
fn follow_reinitialises_and_continues_with_the_next_epoch() {
    let rig = Rig::new(16384);
    let daemon = rig.spawn(&["--follow"]);
    let mut p = rig.producer();
    let stop = std::sync::atomic::AtomicBool::new(false);
    for round in 0..3u64 {
        for _ in 0..(100 + round * 10) {
            produce(&mut p, SEED, Workload::Ssd, true);
        }
        p.freeze();
        p.wait_for_reinit(&stop, Duration::from_secs(10)).unwrap();
        assert_eq!(p.epoch(), round + 2);
    }
    for _ in 0..5 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    rig.wait_drained(Duration::from_secs(10));
    signal(&daemon, Signal::SIGTERM);
    assert_eq!(daemon.wait_with_output().unwrap().status.code(), Some(0));
    let items = read_trace(&rig.out);
    let seqs = check_records(&items, SEED, Workload::Ssd);
    let expect: Vec<u64> = (0..100).chain(0..110).chain(0..120).chain(0..5).collect();
    assert_eq!(seqs, expect);
    assert_eq!(
        markers(&items),
        vec![
            Marker::Frozen {
                epoch: 1,
                last_seq: Some(99),
                next_seq: 100
            },
            Marker::Epoch {
                epoch: 2,
                ring_size: 16384
            },
            Marker::Frozen {
                epoch: 2,
                last_seq: Some(109),
                next_seq: 110
            },
            Marker::Epoch {
                epoch: 3,
                ring_size: 16384
            },
            Marker::Frozen {
                epoch: 3,
                last_seq: Some(119),
                next_seq: 120
            },
            Marker::Epoch {
                epoch: 4,
                ring_size: 16384
            },
        ]
    );
}

#[rstest::rstest]
#[case::bad_magic(4, |h: &mut hmb_ring_hdr| h.magic = 0x1234_5678.into())]
#[case::too_new_major(5, |h: &mut hmb_ring_hdr| h.version_major = 2.into())]
#[case::bad_geometry(6, |h: &mut hmb_ring_hdr| h.ring_size = 4096.into())]
fn bad_ring_identity_gives_its_exit_code(#[case] code: i32, #[case] corrupt: fn(&mut hmb_ring_hdr)) {
    let rig = Rig::new(8192);
    let mut hdr = rig.ring.header_snapshot();
    corrupt(&mut hdr);
    rig.ring.write_header(&hdr);
    let (got, stderr) = rig.run(&[]);
    assert_eq!(got, code, "{stderr}");
    assert!(stderr.contains(&format!("(exit {code})")), "{stderr}");
    assert!(!rig.out.exists(), "no trace.bin for a ring that was refused");
}

#[test]
fn corrupt_record_stops_before_it_with_code_6() {
    let rig = Rig::new(8192);
    let mut p = rig.producer();
    for _ in 0..3 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    // Second record claims 5000 payload bytes.
    let first = align_record(expected_record_len(0)) as usize;
    // SAFETY: in bounds of the ring mapping.
    unsafe { std::ptr::copy_nonoverlapping(5000u32.to_le_bytes().as_ptr(), rig.ring.base_ptr().add(4096 + first), 4) };
    let (code, stderr) = rig.run(&[]);
    assert_eq!(code, 6, "{stderr}");
    assert!(stderr.contains("payload length 5000"), "{stderr}");
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, Workload::Ssd), vec![0]);
    assert_eq!(rig.tail(), first as u64);
}

fn expected_record_len(seq: u64) -> u32 {
    hmb_firmware_model::expected_record(SEED, Workload::Ssd, seq)
        .payload
        .len() as u32
}

#[test]
fn missing_device_and_foreign_output_have_their_codes() {
    let out = std::process::Command::new(BIN)
        .args(["--device", "/nonexistent/nvme-hmb-trace9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let rig = Rig::new(8192);
    std::fs::write(&rig.out, vec![b'x'; 100]).unwrap();
    let (code, stderr) = rig.run(&[]);
    assert_eq!(code, 7, "{stderr}");
    assert_eq!(
        std::fs::read(&rig.out).unwrap(),
        vec![b'x'; 100],
        "a foreign file is left alone"
    );
    let bad = std::process::Command::new(BIN).arg("--no-such-flag").output().unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn help_lists_every_option_and_exit_code() {
    let out = std::process::Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "--device",
        "--ring-file",
        "--output",
        "--follow",
        "--stats",
        "--fsync",
        "--poll-timeout-ms",
        "--max-batch-kib",
        "--batch-wait-ms",
        "Exit codes",
        " 10  ",
        " 11  ",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}");
    }
}

#[test]
fn sigterm_finishes_and_exits_zero_with_stats() {
    let rig = Rig::new(65536);
    let daemon = rig.spawn(&["--stats"]);
    let mut p = rig.producer();
    for _ in 0..1000 {
        produce(
            &mut p,
            SEED,
            Workload::Sizes(hmb_firmware_model::SizeDist::LogUniform),
            true,
        );
    }
    rig.wait_drained(Duration::from_secs(10));
    signal(&daemon, Signal::SIGTERM);
    let out = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for field in ["records=1000 ", "bytes=", "drops=0 ", "batches=", "wakeups="] {
        assert!(stderr.contains(field), "{field} missing in {stderr}");
    }
}

#[test]
fn sigterm_ends_a_batch_wait_and_drains_what_gathered() {
    // A nap far longer than the test: only the signal can end it. The nap
    // is also bounded by the producer's rate (an eighth of the ring at the
    // rate the first batch came): with a 16 MiB ring, a batch of up to ten
    // 48-byte records in the first look allows minutes, however slowly the
    // daemon runs (AddressSanitizer) or however few records its first
    // batch caught.
    let rig = Rig::new(16 << 20);
    let daemon = rig.spawn(&["--stats", "--batch-wait-ms", "600000"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut p = rig.producer();
    for _ in 0..10 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    // The first (small) batch taken, whatever it caught of the ten, the
    // daemon naps; the rest and the next ten gather meanwhile.
    let start = std::time::Instant::now();
    while rig.tail() == 0 {
        assert!(start.elapsed() < Duration::from_secs(10), "the daemon took no batch");
        std::thread::sleep(Duration::from_millis(2));
    }
    for _ in 0..10 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_ne!(rig.tail(), rig.head(), "the daemon took records during its nap");
    let start = std::time::Instant::now();
    signal(&daemon, Signal::SIGTERM);
    let out = daemon.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(start.elapsed() < Duration::from_secs(30), "the nap outlived SIGTERM");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // At least one nap: the one SIGTERM ended.
    let naps: u64 = stderr
        .split_once("naps=")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no naps= in {stderr}"));
    assert!(stderr.contains("records=20 ") && naps >= 1, "{stderr}");
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, Workload::Ssd), (0..20).collect::<Vec<_>>());
    assert_eq!(rig.tail(), rig.head());
}

#[test]
fn sighup_reopens_the_output_file() {
    let rig = Rig::new(65536);
    let daemon = rig.spawn(&[]);
    let mut p = rig.producer();
    for _ in 0..100 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    rig.wait_drained(Duration::from_secs(10));
    let rotated = rig.dir.path().join("trace.bin.1");
    std::fs::rename(&rig.out, &rotated).unwrap();
    signal(&daemon, Signal::SIGHUP);
    for _ in 0..100 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    rig.wait_drained(Duration::from_secs(10));
    signal(&daemon, Signal::SIGINT);
    assert_eq!(daemon.wait_with_output().unwrap().status.code(), Some(0));
    let old = read_trace(&rotated);
    let new = read_trace(&rig.out);
    let mut seqs = check_records(&old, SEED, Workload::Ssd);
    seqs.extend(check_records(&new, SEED, Workload::Ssd));
    assert_eq!(seqs, (0..200).collect::<Vec<_>>());
    assert!(markers(&old).is_empty() && markers(&new).is_empty());
}

#[test]
fn torn_last_item_is_truncated_and_resumed_exactly() {
    let rig = Rig::new(65536);
    let mut p = rig.producer();
    for _ in 0..50 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    // A daemon that wrote the file but died before publishing the tail,
    // in the middle of the last record (a power cut).
    let daemon = rig.spawn(&[]);
    rig.wait_drained(Duration::from_secs(10));
    signal(&daemon, Signal::SIGKILL);
    let _ = daemon.wait_with_output();
    let len = std::fs::metadata(&rig.out).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&rig.out).unwrap();
    f.set_len(len - 5).unwrap();
    // The ring's tail cannot go back (the module forbids it), so the torn
    // record is lost for good: the restart must report it as LOST, not
    // misread the torn bytes.
    for _ in 0..10 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    p.freeze();
    assert_eq!(rig.run(&[]).0, 8);
    let items = read_trace(&rig.out);
    let seqs = check_records(&items, SEED, Workload::Ssd);
    assert_eq!(seqs, (0..49).chain(50..60).collect::<Vec<_>>());
    assert_eq!(
        markers(&items),
        vec![
            Marker::Lost {
                first_seq: 49,
                count: 1,
                epoch: 1
            },
            Marker::Frozen {
                epoch: 1,
                last_seq: Some(59),
                next_seq: 60
            }
        ]
    );
}

#[test]
fn a_reloaded_ring_with_the_same_epoch_is_not_mistaken_for_the_old_one() {
    let rig = Rig::new(8192);
    let mut p = rig.producer();
    for _ in 0..40 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    let daemon = rig.spawn(&[]);
    rig.wait_drained(Duration::from_secs(10));
    signal(&daemon, Signal::SIGTERM);
    assert_eq!(daemon.wait_with_output().unwrap().status.code(), Some(0));
    // The module is reloaded: a fresh ring, epoch 1 again, seq from 0.
    hmb_firmware_model::module_sim::init(&rig.ring, 8192, 1).unwrap();
    let mut p = rig.producer();
    for _ in 0..10 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    p.freeze();
    assert_eq!(rig.run(&[]).0, 8);
    let items = read_trace(&rig.out);
    assert_eq!(
        check_records(&items, SEED, Workload::Ssd),
        (0..40).chain(0..10).collect::<Vec<_>>()
    );
    assert_eq!(
        markers(&items),
        vec![
            Marker::Epoch {
                epoch: 1,
                ring_size: 8192
            },
            Marker::Frozen {
                epoch: 1,
                last_seq: Some(9),
                next_seq: 10
            }
        ]
    );
}

#[test]
fn a_corrupt_trace_is_set_aside_and_a_new_one_started() {
    let rig = Rig::new(8192);
    // A valid header followed by an item with the PAD flag: damaged, not torn.
    let mut bytes = hmb_trace_file::FileHeader::new(1, 0, 8192, 1).encode().to_vec();
    let mut item = [0u8; 32];
    item[6..8].copy_from_slice(&HMB_RECORD_FLAG_PAD.to_le_bytes());
    bytes.extend_from_slice(&item);
    std::fs::write(&rig.out, &bytes).unwrap();
    let mut p = rig.producer();
    for _ in 0..5 {
        produce(&mut p, SEED, Workload::Ssd, true);
    }
    p.freeze();
    let (code, stderr) = rig.run(&[]);
    assert_eq!(code, 8, "{stderr}");
    let aside = rig.dir.path().join("trace.bin.corrupt.0");
    assert_eq!(
        std::fs::read(&aside).unwrap(),
        bytes,
        "the damaged file is kept as it was"
    );
    let items = read_trace(&rig.out);
    assert_eq!(check_records(&items, SEED, Workload::Ssd), (0..5).collect::<Vec<_>>());
}

#[test]
fn fsync_per_batch_streams_the_same_file() {
    let rig = Rig::new(16384);
    let daemon = rig.spawn(&["--fsync", "batch", "--max-batch-kib", "4"]);
    let mut p = rig.producer();
    for _ in 0..2000 {
        produce(&mut p, SEED, Workload::Npu, true);
    }
    p.freeze();
    let out = daemon.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(8), "{}", String::from_utf8_lossy(&out.stderr));
    let items = read_trace(&rig.out);
    assert_eq!(
        check_records(&items, SEED, Workload::Npu),
        (0..2000).collect::<Vec<_>>()
    );
}
