//! `export ctf` read by an independent reader: Debian's babeltrace2 (the
//! `babeltrace2` command and its Python bindings, python3-bt2; the harness
//! installs both with the other host packages, and this test installs them
//! with apt when missing). `tests/ctf_check.py` lists every event and
//! discarded-events message bt2 reads; here they are compared with `stats
//! --json` and `convert --format jsonl` of the same trace.

#[path = "common/synth.rs"]
mod synth;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{json, Value};

const PYTHON: &str = "/usr/bin/python3";

/// Debian's babeltrace2 and python3-bt2, installed when missing (as root,
/// as the harness's host packages are).
fn ensure_bt2() {
    let have = || {
        Command::new(PYTHON)
            .args(["-c", "import bt2"])
            .status()
            .is_ok_and(|s| s.success())
            && Command::new("babeltrace2")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
    };
    if have() {
        return;
    }
    let install = || {
        Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-qq",
                "--no-install-recommends",
                "babeltrace2",
                "python3-bt2",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    if !install() {
        let _ = Command::new("apt-get").args(["update", "-qq"]).status();
        assert!(install(), "apt-get install babeltrace2 python3-bt2 failed");
    }
    assert!(have(), "babeltrace2 / python3-bt2 still missing after apt-get");
}

fn analyze(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let (code, out, err) = analyze(dir, args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn bt2_read(dir: &Path) -> Value {
    let out = Command::new(PYTHON)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ctf_check.py"))
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "bt2: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["errors"], json!([]), "bt2 structural errors");
    v
}

/// What bt2 reads equals what `stats --json` and `convert --format jsonl`
/// say of the same trace.
fn check(dir: &Path, trace: &str, ctf: &Value) {
    let stats: Value = serde_json::from_str(&ok(dir, &["stats", "--json", trace])).unwrap();
    let jsonl = ok(dir, &["convert", "--format", "jsonl", trace]);
    let rows: Vec<Value> = jsonl.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events = ctf["events"].as_array().unwrap();

    // Event count per class: records per opcode, markers per kind.
    let mut want: BTreeMap<String, u64> = BTreeMap::new();
    for o in stats["opcodes"].as_array().unwrap() {
        want.insert(o["name"].as_str().unwrap().into(), o["records"].as_u64().unwrap());
    }
    for r in rows.iter().filter(|r| r["kind"] != "record") {
        *want.entry(r["kind"].as_str().unwrap().to_uppercase()).or_default() += 1;
    }
    let got: BTreeMap<String, u64> = ctf["counts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(got, want, "{trace}: events per class");
    assert_eq!(
        got.values().sum::<u64>(),
        stats["records"].as_u64().unwrap() + stats["markers"].as_u64().unwrap()
    );
    let epochs = stats["epochs"].as_array().unwrap();
    assert_eq!(got.get("EPOCH").copied().unwrap_or(0), epochs.len() as u64 - 1);
    assert_eq!(
        got.get("FROZEN").copied().unwrap_or(0),
        epochs.iter().filter(|e| e["frozen"] == true).count() as u64
    );

    // Discarded events: the LOST markers' total, on the marker stream.
    let discarded = ctf["discarded"].as_array().unwrap();
    let lost: u64 = discarded.iter().map(|d| d["count"].as_u64().unwrap()).sum();
    assert_eq!(lost, stats["lost_marked"].as_u64().unwrap(), "{trace}: discarded");
    assert_eq!(discarded.len() as u64, got.get("LOST").copied().unwrap_or(0));
    assert!(discarded.iter().all(|d| d["stream_class"] == 1));
    if trace == "drops.bin" {
        // synth::drops_spec: 4 + 40 + 10 + 7 marked, and every marker kind.
        assert_eq!(lost, 61);
        assert_eq!((got["LOST"], got["FROZEN"], got["EPOCH"]), (4, 1, 1));
    }

    // Every record: clock value, context and every field as in jsonl.
    let mut by_key: BTreeMap<(u64, u64), &Value> = BTreeMap::new();
    for e in events.iter().filter(|e| e["stream_class"] == 0) {
        let c = &e["context"];
        let k = (c["epoch"].as_u64().unwrap(), c["seq"].as_u64().unwrap());
        assert!(by_key.insert(k, e).is_none(), "{trace}: record {k:?} twice");
    }
    let records: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "record").collect();
    assert_eq!(by_key.len(), records.len());
    for r in &records {
        let k = (r["epoch"].as_u64().unwrap(), r["seq"].as_u64().unwrap());
        let e = by_key[&k];
        assert_eq!(e["name"], r["name"], "{trace} {k:?}");
        assert_eq!(e["ts"], r["timestamp_ns"], "{trace} {k:?}: timestamp");
        assert_eq!(e["context"]["source"], r["source"], "{trace} {k:?}");
        assert_eq!(e["context"]["length"], r["length"], "{trace} {k:?}");
        assert_eq!(e["payload"], r["fields"], "{trace} {k:?}: fields");
        assert_eq!(e["packet_source"], r["source"], "{trace} {k:?}: one stream per source");
    }

    // Markers in file order, with their values.
    let markers: Vec<Value> = events
        .iter()
        .filter(|e| e["stream_class"] == 1)
        .map(|e| {
            let p = &e["payload"];
            match e["name"].as_str().unwrap() {
                "LOST" => {
                    json!({"kind": "lost", "epoch": p["epoch"], "first_seq": p["first_seq"], "count": p["count"]})
                }
                "FROZEN" if p["has_last_seq"] == 1 => {
                    json!({"kind": "frozen", "epoch": p["epoch"], "last_seq": p["last_seq"], "next_seq": p["next_seq"]})
                }
                "FROZEN" => json!({"kind": "frozen", "epoch": p["epoch"], "next_seq": p["next_seq"]}),
                "EPOCH" => json!({"kind": "epoch", "epoch": p["epoch"], "ring_size": p["ring_size"]}),
                other => panic!("unexpected marker {other}"),
            }
        })
        .collect();
    let want_markers: Vec<Value> = rows
        .iter()
        .filter(|r| r["kind"] != "record")
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("offset");
            r
        })
        .collect();
    assert_eq!(markers, want_markers, "{trace}: markers");
}

#[test]
fn babeltrace2_reads_every_fixture_as_stats_and_convert_do() {
    ensure_bt2();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for trace in synth::write_fixtures(dir) {
        let out = format!("{trace}.ctf");
        let summary = ok(dir, &["export", "ctf", trace, "-o", &out]);
        assert!(
            summary.contains("timestamps raised to keep a stream monotonic: 0"),
            "{summary}"
        );
        let ctf = bt2_read(&dir.join(&out));
        check(dir, trace, &ctf);
        // The babeltrace2 command prints one line per event.
        let cli = Command::new("babeltrace2").arg(dir.join(&out)).output().unwrap();
        assert!(
            cli.status.success(),
            "babeltrace2: {}",
            String::from_utf8_lossy(&cli.stderr)
        );
        let text = String::from_utf8(cli.stdout).unwrap();
        assert_eq!(
            text.lines().filter(|l| l.starts_with('[')).count(),
            ctf["events"].as_array().unwrap().len(),
            "{trace}: babeltrace2 lines"
        );
    }
    // The filter options keep records as elsewhere; markers stay.
    let summary = ok(
        dir,
        &["export", "ctf", "drops.bin", "-o", "fetch.ctf", "--opcode", "CMD_FETCH"],
    );
    let ctf = bt2_read(&dir.join("fetch.ctf"));
    let names: std::collections::BTreeSet<&str> =
        ctf["counts"].as_object().unwrap().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["CMD_FETCH", "EPOCH", "FROZEN", "LOST"].into(), "{summary}");
}

/// A torn or corrupt trace.bin: the same exit code as the other exports,
/// and a CTF trace of everything before the damage that bt2 reads.
#[test]
fn damaged_traces_end_with_the_exports_exit_codes() {
    ensure_bt2();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    synth::write_fixtures(dir);
    let bytes = std::fs::read(dir.join("drops.bin")).unwrap();
    std::fs::write(dir.join("torn.bin"), &bytes[..bytes.len() - 14]).unwrap();
    let mut corrupt = bytes.clone();
    corrupt[64..68].copy_from_slice(&5000u32.to_le_bytes());
    std::fs::write(dir.join("corrupt.bin"), corrupt).unwrap();
    std::fs::write(
        dir.join("garbage.bin"),
        b"not a trace file, not even close, at all......................",
    )
    .unwrap();
    for (trace, code) in [
        ("torn.bin", 5),
        ("corrupt.bin", 6),
        ("garbage.bin", 4),
        ("missing.bin", 3),
    ] {
        let (c, _, err) = analyze(dir, &["export", "ctf", trace, "-o", &format!("{trace}.ctf")]);
        let (p, _, perr) = analyze(dir, &["export", "perfetto", trace, "-o", &format!("{trace}.pftrace")]);
        assert_eq!((c, p), (code, code), "{trace}: {err} / {perr}");
        assert_eq!(
            err.replace(".ctf", "").lines().last(),
            perr.replace(".pftrace", "").lines().last(),
            "{trace}: the same error"
        );
    }
    let torn = bt2_read(&dir.join("torn.bin.ctf"));
    let stats = analyze(dir, &["stats", "--json", "torn.bin"]);
    let stats: Value = serde_json::from_str(&stats.1).unwrap();
    let records = torn["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["stream_class"] == 0)
        .count();
    assert_eq!(records as u64, stats["records"].as_u64().unwrap());
    assert!(records > 900);
    // An output directory with something in it is refused (exit 2).
    let (c, _, err) = analyze(dir, &["export", "ctf", "drops.bin", "-o", "torn.bin.ctf"]);
    assert_eq!(c, 2, "{err}");
}
