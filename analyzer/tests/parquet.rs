//! `export parquet` read by an independent reader: DuckDB (PyPI `duckdb`,
//! pinned, installed by this test into a venv under the target directory;
//! no extension is downloaded or autoloaded). `tests/parquet_check.py`
//! computes counts, drop totals and latency percentiles in SQL; here they
//! are compared with `stats --json`, for each fixture and for a folder of
//! several exports at once.

#[path = "common/synth.rs"]
mod synth;
#[path = "common/venv.rs"]
mod venv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const PY_PACKAGES: &[&str] = &["duckdb==2.0.1"];

fn venv_python() -> PathBuf {
    venv::venv_python("duckdb-venv", PY_PACKAGES)
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

fn duckdb(python: &Path, path: &Path) -> Value {
    let out = Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/parquet_check.py"))
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "duckdb: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["extensions_loaded"],
        serde_json::json!([]),
        "no extension from the network"
    );
    v
}

fn stats(dir: &Path, trace: &str) -> Value {
    serde_json::from_str(&ok(dir, &["stats", "--json", trace])).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// Counts and drop totals of several stats summed, as DuckDB reports them.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    records_by_name: BTreeMap<String, u64>,
    records: u64,
    markers: u64,
    lost_marked: u64,
    lost_unmarked: u64,
}

impl Totals {
    fn add_stats(&mut self, s: &Value) {
        for o in s["opcodes"].as_array().unwrap() {
            *self
                .records_by_name
                .entry(o["name"].as_str().unwrap().into())
                .or_default() += u(&o["records"]);
        }
        self.records += u(&s["records"]);
        self.markers += u(&s["markers"]);
        self.lost_marked += u(&s["lost_marked"]);
        self.lost_unmarked += u(&s["lost_unmarked"]);
    }

    fn from_duckdb(d: &Value) -> Self {
        let kinds = d["kinds"].as_object().unwrap();
        let kind = |k: &str| kinds.get(k).map_or(0, u);
        Self {
            records_by_name: d["records_by_name"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), u(v)))
                .collect(),
            records: kind("record"),
            markers: kind("lost") + kind("frozen") + kind("epoch") + kind("unknown_marker"),
            lost_marked: u(&d["lost_marked"]),
            lost_unmarked: u(&d["lost_unmarked"]),
        }
    }
}

/// HdrHistogram (2 significant digits) reports the highest value of the
/// bucket holding the exact value at the same rank: equal below 256,
/// above it at most 1/128 higher.
fn within_bucket(exact: u64, hdr: u64) -> bool {
    exact <= hdr && hdr - exact <= exact / 128
}

/// `stats --json`'s `field` latency rows equal the SQL percentiles.
fn check_latency(trace: &str, s: &Value, d: &Value) {
    let sql_rows = |k: &str| -> BTreeMap<(String, Option<u64>), Value> {
        d[k].as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    (r["name"].as_str().unwrap().to_string(), r["source"].as_u64()),
                    r.clone(),
                )
            })
            .collect()
    };
    let mut sql = sql_rows("latency");
    sql.extend(sql_rows("latency_by_source"));
    let field: Vec<&Value> = s["latency"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["measure"] == "field")
        .collect();
    assert_eq!(field.len(), sql.len(), "{trace}: one SQL row per stats row");
    for r in field {
        let key = (r["name"].as_str().unwrap().to_string(), r["source"].as_u64());
        let q = &sql[&key];
        assert_eq!(u(&r["count"]), u(&q["count"]), "{trace} {key:?}: count");
        assert_eq!(u(&r["max"]), u(&q["max"]), "{trace} {key:?}: max");
        for p in ["p50", "p90", "p99", "p999"] {
            assert!(
                within_bucket(u(&q[p]), u(&r[p])),
                "{trace} {key:?} {p}: SQL {} vs stats {}",
                q[p],
                r[p]
            );
        }
    }
}

#[test]
fn duckdb_reads_what_stats_reports_for_each_trace_and_a_folder() {
    let python = venv_python();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let traces = synth::write_fixtures(dir);
    std::fs::create_dir(dir.join("runs")).unwrap();
    let mut all = Totals::default();
    let mut latency_rows = 0;
    for trace in traces {
        let out = format!("runs/{trace}.parquet");
        let summary = ok(dir, &["export", "parquet", trace, "-o", &out]);
        let d = duckdb(&python, &dir.join(&out));
        let s = stats(dir, trace);
        let mut want = Totals::default();
        want.add_stats(&s);
        assert_eq!(Totals::from_duckdb(&d), want, "{trace}: {summary}");
        // Every row is a record, a marker or a derived gap.
        let gaps = d["kinds"].get("gap").map_or(0, u);
        assert_eq!(u(&d["rows"]), want.records + want.markers + gaps);
        check_latency(trace, &s, &d);
        latency_rows += d["latency"].as_array().unwrap().len();
        all.add_stats(&s);
    }
    assert!(latency_rows >= 5, "the fixtures have latencies to compare");
    // The ssd fixture: 4 + 40 + 10 + 7 marked drops, 2 + 2 unmarked.
    assert_eq!((all.lost_marked, all.lost_unmarked), (61, 4));
    // A folder of exports: one query over all of them equals the sum.
    let d = duckdb(&python, &dir.join("runs/*.parquet"));
    assert_eq!(Totals::from_duckdb(&d), all);
}

/// A torn or corrupt trace.bin: the same exit code and message as the other
/// exports, and a readable file of every row before the damage.
#[test]
fn damaged_traces_end_with_the_exports_exit_codes() {
    let python = venv_python();
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
        let (c, _, err) = analyze(dir, &["export", "parquet", trace, "-o", &format!("{trace}.parquet")]);
        let (p, _, perr) = analyze(dir, &["export", "perfetto", trace, "-o", &format!("{trace}.pftrace")]);
        assert_eq!((c, p), (code, code), "{trace}: {err} / {perr}");
        assert_eq!(err.lines().last(), perr.lines().last(), "{trace}: the same error");
    }
    let d = duckdb(&python, &dir.join("torn.bin.parquet"));
    let (code, s, _) = analyze(dir, &["stats", "--json", "torn.bin"]);
    assert_eq!(code, 5);
    let s: Value = serde_json::from_str(&s).unwrap();
    assert_eq!(d["kinds"]["record"], s["records"]);
    assert!(u(&s["records"]) > 900);
    let (c, _, _) = analyze(dir, &["export", "parquet", "drops.bin", "-o", "drops.bin"]);
    assert_eq!(c, 2, "writing over the input is refused");
}
