//! `cargo xtask bench`: every throughput figure of docs/performance.md in
//! one run: the daemon binary, the ring engine, the analyzer, the
//! firmware producer's cost per record and (with `--guest`) the drain rate
//! in a TCG guest. Each bench measures its baseline in the same run; this
//! command collects their `BENCH {json}` lines, prints one table (figure,
//! baseline, ratio, target) and writes `bench.json` to the run folder.
//!
//! It is a bench, not a test: it fails only when a bench fails or a figure
//! is missing, never because a target is missed. `--quick` runs tiny sizes
//! on the dev build the tests already made (the test command uses it to
//! check that every figure is produced; its numbers mean nothing).

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use hmb_harness::{target_dir, workspace_root};
use serde_json::{json, Value};
use xshell::{cmd, Shell};

#[derive(Args, Debug)]
pub struct Bench {
    /// Tiny sizes on the dev build: checks that every figure is produced
    /// (what `cargo xtask test` runs); the numbers mean nothing.
    #[arg(long)]
    pub quick: bool,
    /// GiB of records per payload size through the daemon binary.
    #[arg(long, default_value_t = 1.0)]
    pub daemon_gib: f64,
    /// GiB of records per payload size through the ring engine.
    #[arg(long, default_value_t = 0.5)]
    pub ring_gib: f64,
    /// Size of the analyzer's synthetic trace.bin in MB.
    #[arg(long, default_value_t = 200)]
    pub analyzer_mb: u64,
    /// Also the guest figure: `cargo xtask boot --rate 0 --duration 5`
    /// (needs the guest image; several minutes under TCG).
    #[arg(long)]
    pub guest: bool,
    /// Run folder (default: target/hmb-trace/runs/bench-<unix seconds>).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
}

/// How a figure is judged against its target.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// ratio (figure / its baseline in the same run) at least this.
    Ratio(f64),
    /// the figure itself at least this, in its unit.
    AtLeast(f64),
    /// Reported beside a published figure; no target.
    None,
}

/// Every figure the command must produce: name, target, meaning.
const FIGURES: &[(&str, Target, &str)] = &[
    (
        "daemon_64",
        Target::Ratio(0.70),
        "hmb-trace-daemon draining a 16 MiB ring file in /dev/shm (firmware model producing 64 B payloads in the bench process) into trace.bin on the same tmpfs, GB/s; baseline: 1 MiB write(2) calls of the same byte count to the same file system",
    ),
    (
        "daemon_4064",
        Target::Ratio(0.85),
        "as daemon_64 with 4064 B payloads (4 KiB records)",
    ),
    (
        "ring_64",
        Target::AtLeast(25.0),
        "ring engine alone: producer thread -> 16 MiB memfd ring -> consumer thread copying every batch out, 64 B payloads, M records/s; baseline: one memcpy of the same bytes",
    ),
    (
        "ring_4064",
        Target::Ratio(0.80),
        "as ring_64 with 4064 B payloads, GB/s against memcpy of the same bytes",
    ),
    (
        "ring_file_64",
        Target::Ratio(0.70),
        "ring engine with the consumer writev-ing each batch to a tmpfs file, 64 B payloads, GB/s; baseline: 1 MiB write(2) calls of the same bytes",
    ),
    ("ring_file_4064", Target::Ratio(0.85), "as ring_file_64 with 4064 B payloads"),
    (
        "producer_64_ns",
        Target::None,
        "firmware model Producer::produce, one thread, 64 B payload: ns per record (the firmware's overhead per traced event); beside BPF ringbuf reserve+commit as published for the kernel's bench_ringbufs (12-21.5 M/s single producer = 83-46.5 ns), not measured here",
    ),
    (
        "analyzer_stats",
        Target::Ratio(0.50),
        "hmb-trace-analyze stats path (mmap, decode + accounting) over a synthetic ssd trace.bin, GB/s; baseline: read(2) of the same file from page cache",
    ),
    (
        "analyzer_csv",
        Target::AtLeast(5.0),
        "hmb-trace-analyze convert --format csv, binary run with stdout to /dev/null, M records/s; baseline: the walk alone (decode + bookkeeping, no output)",
    ),
    ("analyzer_jsonl", Target::AtLeast(5.0), "as analyzer_csv for convert --format jsonl"),
    ("analyzer_decode", Target::AtLeast(5.0), "as analyzer_csv for decode"),
];

const GUEST: (&str, Target, &str) = (
    "guest_drain",
    Target::AtLeast(2.0),
    "cargo xtask boot --rate 0 --duration 5 (TCG guest, real module and daemon, unthrottled producer): records in trace.bin / 5 s, M records/s; baseline: records the firmware produced (written + dropped) per second",
);

impl Bench {
    pub fn run(self) -> Result<()> {
        let sh = Shell::new()?;
        sh.change_dir(workspace_root());
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            target_dir().join("hmb-trace/runs").join(format!("bench-{secs}"))
        });
        std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
        let load_before = loadavg();
        let (daemon_gib, ring_gib, analyzer_mb) = if self.quick {
            (0.01, 0.01, 5)
        } else {
            (self.daemon_gib, self.ring_gib, self.analyzer_mb)
        };
        // --quick reuses the dev build of `cargo test`; the real run is
        // the bench profile (release with debug info).
        let profile: &[&str] = if self.quick { &["--profile", "dev"] } else { &[] };
        let (dg, rg, am) = (daemon_gib.to_string(), ring_gib.to_string(), analyzer_mb.to_string());
        let mut lines = Vec::new();
        for (what, out) in [
            (
                "daemon",
                cmd!(
                    sh,
                    "cargo bench {profile...} -p hmb-trace-daemon --bench daemon -- --gib {dg}"
                )
                .read(),
            ),
            (
                "ring",
                cmd!(
                    sh,
                    "cargo bench {profile...} -p hmb-trace-consumer --bench ring -- --gib {rg} --payloads 64,4064"
                )
                .read(),
            ),
            (
                "analyzer",
                cmd!(
                    sh,
                    "cargo bench {profile...} -p hmb-trace-analyze --bench analyze -- --size-mb {am}"
                )
                .read(),
            ),
        ] {
            let out = out.with_context(|| format!("the {what} bench failed"))?;
            println!("{out}");
            std::fs::write(run_dir.join(format!("{what}.txt")), &out)?;
            lines.extend(bench_lines(&out)?);
        }
        let mut expected: Vec<(&str, Target, &str)> = FIGURES.to_vec();
        if self.guest {
            lines.push(guest_figure(&sh, &run_dir)?);
            expected.push(GUEST);
        }
        let load_after = loadavg();
        let mut figures = Vec::new();
        for (name, target, meaning) in &expected {
            let Some(f) = lines.iter().find(|l| l["figure"] == *name) else {
                bail!("the benches did not report figure {name}");
            };
            let (value, ratio) = (num(f, "value")?, num(f, "ratio")?);
            let (target_json, met) = match target {
                Target::Ratio(t) => (json!({"ratio_at_least": t}), Some(ratio >= *t)),
                Target::AtLeast(t) => (json!({"value_at_least": t}), Some(value >= *t)),
                Target::None => (Value::Null, None),
            };
            // Tiny sizes on a debug build say nothing about a target.
            let met = if self.quick { None } else { met };
            let mut f = f.clone();
            f["target"] = target_json;
            f["met"] = met.map_or(Value::Null, Value::Bool);
            f["meaning"] = json!(meaning);
            figures.push(f);
        }
        print_table(&figures);
        let report = json!({
            "quick": self.quick,
            "daemon_gib": daemon_gib,
            "ring_gib": ring_gib,
            "analyzer_mb": analyzer_mb,
            "loadavg_before": load_before,
            "loadavg_after": load_after,
            "figures": figures,
        });
        let path = run_dir.join("bench.json");
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
        println!("load average before: {load_before}, after: {load_after}");
        if self.quick {
            println!("--quick: tiny sizes on the dev build; these numbers are not figures");
        }
        println!("bench.json: {}", path.display());
        Ok(())
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn num(v: &Value, key: &str) -> Result<f64> {
    v[key]
        .as_f64()
        .with_context(|| format!("figure {} has no number {key}", v["figure"]))
}

/// The `BENCH {json}` lines of a bench's output.
fn bench_lines(out: &str) -> Result<Vec<Value>> {
    out.lines()
        .filter_map(|l| l.strip_prefix("BENCH "))
        .map(|j| serde_json::from_str(j).with_context(|| format!("bad BENCH line {j:?}")))
        .collect()
}

fn print_table(figures: &[Value]) {
    println!(
        "{:<16} {:>12} {:<10} {:>12} {:>8} {:>14} {:>5} | {:>10} {:>9}",
        "figure", "value", "unit", "baseline", "ratio", "target", "met", "per CPU-s", "CPU ratio"
    );
    for f in figures {
        let target = if let Some(t) = f["target"]["ratio_at_least"].as_f64() {
            format!("ratio >= {t:.2}")
        } else if let Some(t) = f["target"]["value_at_least"].as_f64() {
            format!(">= {t}")
        } else {
            "-".to_string()
        };
        let met = match f["met"].as_bool() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let opt = |k: &str| f[k].as_f64().map_or("-".to_string(), |v| format!("{v:.3}"));
        println!(
            "{:<16} {:>12.3} {:<10} {:>12.3} {:>8.3} {:>14} {:>5} | {:>10} {:>9}",
            f["figure"].as_str().unwrap_or("?"),
            f["value"].as_f64().unwrap_or(f64::NAN),
            f["unit"].as_str().unwrap_or(""),
            f["baseline"].as_f64().unwrap_or(f64::NAN),
            f["ratio"].as_f64().unwrap_or(f64::NAN),
            target,
            met,
            opt("cpu_value"),
            opt("cpu_ratio")
        );
    }
}

/// `cargo xtask boot --rate 0 --duration 5` into the bench's run folder;
/// the figure is the daemon's record count (its `--stats` line) over the
/// 5 s of production, beside what the firmware produced in that time.
fn guest_figure(sh: &Shell, run_dir: &std::path::Path) -> Result<Value> {
    let dir = run_dir.join("guest");
    cmd!(sh, "cargo xtask boot --rate 0 --duration 5 --run-dir {dir}")
        .run()
        .context("cargo xtask boot --rate 0 --duration 5 failed")?;
    let stderr = std::fs::read_to_string(dir.join("daemon.stderr")).context("reading daemon.stderr")?;
    let field = |line: &str, key: &str| -> Option<u64> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
    };
    let stats = stderr
        .lines()
        .rev()
        .find(|l| l.contains("hmb-trace-daemon: records="))
        .context("daemon.stderr has no --stats line")?;
    let records = field(stats, "records=").context("no records= in the daemon's stats")?;
    let drops = field(stats, "drops=").unwrap_or(0);
    let secs = 5.0;
    let value = records as f64 / secs / 1e6;
    let produced = (records + drops) as f64 / secs / 1e6;
    Ok(json!({
        "figure": GUEST.0,
        "value": value,
        "unit": "M rec/s",
        "baseline": produced,
        "baseline_what": "records the firmware produced (drained + counted lost) per second",
        "ratio": if produced > 0.0 { value / produced } else { 0.0 },
    }))
}

/// What the test command checks after `--quick`: bench.json holds every
/// figure with a finite value, baseline and ratio.
pub fn check_json(path: &std::path::Path) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let report: Value = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let figures = report["figures"].as_array().context("bench.json has no figures")?;
    for (name, _, _) in FIGURES {
        let Some(f) = figures.iter().find(|f| f["figure"] == *name) else {
            bail!("bench.json lacks figure {name}");
        };
        for key in ["value", "baseline", "ratio"] {
            if !num(f, key)?.is_finite() {
                bail!("bench.json: {name}.{key} is not a finite number");
            }
        }
    }
    println!("bench.json holds all {} figures", FIGURES.len());
    Ok(())
}
