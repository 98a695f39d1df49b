//! `export perfetto` checked by an independent decoder: Perfetto's own
//! Python bindings (`perfetto_trace_pb2` from the `perfetto` package, with
//! `protobuf`), installed by this test into a venv under the target
//! directory. `tests/perfetto_check.py` decodes the file and reports its
//! tracks, slices, instants and structural errors; here they are compared
//! with what `stats` and `gaps` say about the same trace.

#[path = "common/synth.rs"]
mod synth;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use hmb_firmware_model::Workload;
use serde_json::Value;
use synth::{write_trace, Drop, EpochSpec, SynthSpec};

/// Pinned so the check does not move under us.
const PY_PACKAGES: &[&str] = &["perfetto==0.59.1", "protobuf==7.36.2"];

fn venv_python() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfetto-venv");
    let python = dir.join("bin/python");
    let stamp = dir.join("installed.txt");
    let want = PY_PACKAGES.join(" ");
    // One installer at a time (tests and crates may run in parallel).
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock = std::fs::File::create(Path::new(env!("CARGO_TARGET_TMPDIR")).join("perfetto-venv.lock")).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` drops.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0
    );
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mk = || Command::new("python3").args(["-m", "venv"]).arg(&dir).status();
    if !mk().is_ok_and(|s| s.success()) {
        // Debian splits venv/ensurepip out of python3.
        let _ = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "python3-venv"])
            .status();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(mk().unwrap().success(), "python3 -m venv failed");
    }
    let st = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(PY_PACKAGES)
        .status()
        .unwrap();
    assert!(st.success(), "pip install {want} failed");
    std::fs::write(&stamp, &want).unwrap();
    python
}

fn analyze(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Export `trace` and decode it with the Python checker.
fn export_and_check(python: &Path, dir: &Path, trace: &str) -> (Value, String) {
    let out = format!("{trace}.pftrace");
    let summary = analyze(dir, &["export", "perfetto", trace, "-o", &out]);
    let checked = Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_check.py"))
        .arg(dir.join(&out))
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let v: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(v["error_count"], 0, "structural errors: {}", v["errors"]);
    (v, summary)
}

fn records_by_opcode(dir: &Path, trace: &str) -> BTreeMap<String, u64> {
    let s: Value = serde_json::from_str(&analyze(dir, &["stats", "--json", trace])).unwrap();
    s["opcodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap().to_string(), o["records"].as_u64().unwrap()))
        .collect()
}

fn n(v: &Value, group: &str, name: &str) -> u64 {
    v[group][name].as_u64().unwrap_or(0)
}

/// Pair bookkeeping that holds on any trace: every begin record opens one
/// slice, and every end record either closes one or draws its own; every
/// span is a slice. What is missing is exactly what the exporter reported
/// as dropped over the lane limit (`summary`).
fn check_pairs(v: &Value, ops: &BTreeMap<String, u64>, summary: &str) {
    let dropped: u64 = summary
        .split("dropped: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .expect("summary names the dropped slices");
    let op = |k: &str| ops.get(k).copied().unwrap_or(0);
    let begun = n(v, "slices", "read") + n(v, "slices", "write") + n(v, "slices", "flush");
    assert_eq!(begun, op("CMD_FETCH"), "one slice per fetch");
    let pairs = begun + n(v, "slices", "GC") + n(v, "slices", "WEAR_LEVEL");
    assert_eq!(pairs, op("CMD_FETCH") + op("GC_START") + op("WEAR_LEVEL"));
    let unterminated = v["unterminated"].as_u64().unwrap();
    let orphans = n(v, "slices", "CMD_COMPLETE (no begin)")
        + n(v, "slices", "GC_END (no begin)")
        + n(v, "slices", "WEAR_LEVEL_END (no begin)");
    let ends = op("CMD_COMPLETE") + op("GC_END") + op("WEAR_LEVEL_END");
    let mut missing = ends - (pairs - unterminated + orphans);
    for span in ["NAND_READ", "NAND_PROGRAM", "NAND_ERASE", "FTL_MAP_MISS"] {
        missing += op(span) - n(v, "slices", span);
    }
    assert_eq!(
        missing, dropped,
        "every end closes a slice or draws one, every span is one"
    );
    assert_eq!(n(v, "instants", "FTL_MAP_HIT"), op("FTL_MAP_HIT"));
}

#[test]
fn perfetto_export_decodes_and_matches_stats() {
    let python = venv_python();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // The causal ssd workload, no drops: every pair matches, only the
    // commands still in flight at the end are closed there.
    write_trace(
        std::fs::File::create(d.join("causal.bin")).unwrap(),
        &SynthSpec::simple(Workload::SsdCausal, 11, 20_000),
    )
    .unwrap();
    let (v, summary) = export_and_check(&python, d, "causal.bin");
    let ops = records_by_opcode(d, "causal.bin");
    check_pairs(&v, &ops, &summary);
    assert_eq!(n(&v, "slices", "CMD_COMPLETE (no begin)"), 0);
    assert!(summary.contains("dropped: 0 slices"), "nothing dropped: {summary}");
    let unterminated = v["unterminated"].as_u64().unwrap();
    assert!(unterminated <= 8 * 8 + 2, "{unterminated} open at the end");
    assert!(
        summary.contains(&format!("pairs: {unterminated} closed unterminated")),
        "{summary}"
    );
    let names: Vec<&str> = v["track_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for q in 0..8 {
        assert!(names.contains(&format!("submission queue {q}").as_str()));
        assert!(names.contains(&format!("submission queue {q} in flight").as_str()));
    }
    for t in [
        "NAND channel 0 die 0",
        "NAND channel 7 die 3",
        "FTL core 0",
        "records/s",
    ] {
        assert!(names.contains(&t), "{t} in {names:?}");
    }
    // The NAND slices sit on their die's track.
    assert!(v["slices_per_source"]["NAND channel 3 die 1"].as_u64().unwrap() > 0);
    assert!(v["counter_values"]["records/s"].as_u64().unwrap() > 0);

    // The independent ssd workload with drops, LOST markers, a frozen
    // epoch and a second epoch: markers and losses as instants, counts as
    // `gaps` reports them.
    let spec = SynthSpec {
        workload: Workload::Ssd,
        seed: 1,
        epochs: vec![
            EpochSpec {
                epoch: 3,
                ring_size: 1 << 16,
                seqs: 3000,
                drops: vec![
                    Drop {
                        first_seq: 100,
                        count: 40,
                        marked: true,
                    },
                    Drop {
                        first_seq: 900,
                        count: 7,
                        marked: false,
                    },
                    Drop {
                        first_seq: 2990,
                        count: 10,
                        marked: true,
                    },
                ],
                frozen: true,
            },
            EpochSpec {
                epoch: 4,
                ring_size: 1 << 17,
                seqs: 2000,
                drops: vec![Drop {
                    first_seq: 0,
                    count: 3,
                    marked: false,
                }],
                frozen: false,
            },
        ],
        start_ns: 5_000_000,
        step_ns: 2_000,
    };
    write_trace(std::fs::File::create(d.join("drops.bin")).unwrap(), &spec).unwrap();
    let (v, summary) = export_and_check(&python, d, "drops.bin");
    check_pairs(&v, &records_by_opcode(d, "drops.bin"), &summary);
    let gaps: Value = serde_json::from_str(&analyze(d, &["gaps", "--json", "drops.bin"])).unwrap();
    let (mut markers, mut marked, mut gap_n, mut gap_sum) = (0, 0, 0, 0);
    for l in gaps["losses"].as_array().unwrap() {
        let c = l["count"].as_u64().unwrap();
        if l["kind"] == "lost_marker" {
            markers += 1;
            marked += c;
        } else {
            gap_n += 1;
            gap_sum += c;
        }
    }
    assert_eq!(
        (n(&v, "instants", "LOST"), v["lost_sum"].as_u64().unwrap()),
        (markers, marked)
    );
    assert_eq!(
        (n(&v, "instants", "sequence gap"), v["gap_sum"].as_u64().unwrap()),
        (gap_n, gap_sum)
    );
    assert_eq!((markers, marked, gap_n, gap_sum), (2, 50, 2, 10));
    assert_eq!(n(&v, "instants", "FROZEN"), 1);
    assert_eq!(n(&v, "instants", "EPOCH"), 1);
    assert_eq!(
        n(&v, "counter_values", "lost records (total)"),
        markers + gap_n,
        "the drops counter moves at every loss"
    );

    // NPU events become slices of their pccx type on their core.
    write_trace(
        std::fs::File::create(d.join("npu.bin")).unwrap(),
        &SynthSpec::simple(Workload::Npu, 9, 2000),
    )
    .unwrap();
    let (v, _) = export_and_check(&python, d, "npu.bin");
    let total: u64 = v["slices"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(total, 2000);
    assert_eq!(
        n(&v, "slices", "MAC_COMPUTE"),
        records_by_opcode(d, "npu.bin")["MAC_COMPUTE"]
    );
    assert!(v["slices_per_source"]["NPU core 3"].as_u64().unwrap() > 0);
}
