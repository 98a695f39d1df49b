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

use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::flags::RunDirArg;
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
    /// Also emu-device's NVMe controller beside QEMU's own `-device nvme`:
    /// the same fio jobs on both in one boot of the full Debian guest
    /// (harness/src/full_guest/nvme_bench.rs); several minutes under TCG.
    #[arg(long)]
    pub nvme: bool,
    /// Only the `--nvme` figures.
    #[arg(long)]
    pub nvme_only: bool,
    /// Repetitions of each fio job on each controller within one boot
    /// (the figure is the median of ours over the median of QEMU's).
    #[arg(long, default_value_t = 3)]
    pub nvme_reps: u32,
    /// Seconds per fio job.
    #[arg(long, default_value_t = 3)]
    pub nvme_runtime: u32,
    /// The cost of tracing's modes in one boot, rotated by repetition:
    /// on and off make the figure (fio on CPU 0, the daemon on the guest's
    /// last CPU); on0 (the daemon with --batch-wait-ms 0), shm (trace.bin
    /// in the guest's /dev/shm), slice (the slice adopted, no module, no
    /// daemon), direct (the daemon --direct), big (the daemon with
    /// --batch-wait-ms 500 --max-batch-kib 2048) and disk (trace.bin on a
    /// disk of its own) take the cost apart; off_unpinned and on_unpinned
    /// are off and on with neither fio nor the daemon pinned
    /// (docs/performance.md).
    #[arg(long, value_delimiter = ',', default_value = "on,off")]
    pub nvme_cost_modes: Vec<String>,
    /// Runs of the whole sequence; the table quoted is each figure's
    /// median over them (--quick: always 1).
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    // Default run folder: target/hmb-trace/runs/bench-<unix seconds>.
    #[command(flatten)]
    pub run_dir: RunDirArg,
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

/// Every figure the command must produce: name, target (issue #34's), meaning.
const FIGURES: &[(&str, Target, &str)] = &[
    (
        "daemon_64",
        Target::Ratio(0.90),
        "hmb-trace-daemon draining a 16 MiB memfd ring (firmware model producing 64 B payloads in the bench process) into trace.bin in /dev/shm, GB/s; baseline: 1 MiB write(2) calls of the same byte count to a fresh file in the same directory; each side starts right after a scratch file of its size was written there and removed",
    ),
    (
        "daemon_4064",
        Target::Ratio(0.95),
        "as daemon_64 with 4064 B payloads (4 KiB records)",
    ),
    (
        "ring_64",
        Target::AtLeast(25.0),
        "ring engine alone: producer thread -> 16 MiB memfd ring -> consumer thread copying every batch out, 64 B payloads, M records/s; baseline: one memcpy of the same bytes",
    ),
    (
        "ring_4064",
        Target::Ratio(0.90),
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
        "hmb-trace-analyze stats as the command computes it (mmap, decode, accounting and latencies, the latencies on a second thread) over a synthetic ssd trace.bin, GB/s; baseline: read(2) of the same file from page cache",
    ),
    (
        "analyzer_accounting",
        Target::Ratio(0.60),
        "the accounting alone (decode, epochs, losses, per-opcode and per-core counts, inter-arrival histogram) as info and gaps run it, split over both cores, GB/s; what issue #17 first measured as analyzer stats; baseline: read(2) of the same file from page cache",
    ),
    (
        "analyzer_csv",
        Target::AtLeast(10.0),
        "hmb-trace-analyze convert --format csv, binary run with stdout to /dev/null, M records/s; baseline: the walk alone (decode + bookkeeping, no output)",
    ),
    ("analyzer_jsonl", Target::AtLeast(10.0), "as analyzer_csv for convert --format jsonl"),
    ("analyzer_decode", Target::AtLeast(10.0), "as analyzer_csv for decode"),
];

/// Repetitions of each cost-of-tracing job in each mode (on and off
/// alternating which goes first, each a driver reload) at least, whatever
/// `--nvme-reps` says: three gave QD1 figures 0.80-1.30 apart (issue 28).
/// Seven since the twelfth session: a repetition of both modes takes about
/// 23 s, so five to seven adds under a minute to a run.
const NVME_COST_REPS_MIN: u32 = 7;

/// `--nvme`: emu-device's NVMe controller over QEMU's own nvme (issue 28's
/// goal: at least 1.0 in every row). The names are nvme_bench::JOBS'.
const NVME: &[(&str, Target, &str)] = &[
    (
        "nvme_randread_4k_qd1",
        Target::Ratio(1.0),
        "fio 4 KiB random read, io_uring, direct, QD1 in the full Debian guest (TCG, QEMU 11.1, 6.1 stock nvme driver) on emu-device's controller, IOPS (median of --nvme-reps); baseline: the same job on QEMU's -device nvme in the same boot; both namespaces sparse files through the host page cache",
    ),
    ("nvme_randread_4k_qd32", Target::Ratio(1.0), "as nvme_randread_4k_qd1 at QD32"),
    ("nvme_read_128k_qd16", Target::Ratio(1.0), "as nvme_randread_4k_qd1, 128 KiB sequential read at QD16, MB/s"),
    ("nvme_read_1m_qd1", Target::Ratio(1.0), "as nvme_randread_4k_qd1, 1 MiB sequential read at QD1, MB/s"),
    ("nvme_write_1m_qd1", Target::Ratio(1.0), "as nvme_randread_4k_qd1, 1 MiB sequential write at QD1, MB/s"),
    (
        "nvme_trace_cost_4k_qd1",
        Target::Ratio(0.97),
        "the cost of tracing: fio 4 KiB random read, io_uring, direct, QD1 on emu-device's controller in the same boot, under the patch series' nvme.ko with the module and the daemon tracing, IOPS (median of --nvme-reps, at least 7); fio on CPU 0, the daemon on the guest's last CPU; baseline: the series' nvme.ko with hmb_trace_kb=0, fio on CPU 0, alternating",
    ),
    ("nvme_trace_cost_4k_qd32", Target::Ratio(0.97), "as nvme_trace_cost_4k_qd1 at QD32"),
    (
        "nvme_randread_4k_qd1_hmb_model",
        Target::None,
        "issue 27: fio 4 KiB random read QD1 over 64 MiB written first, on emu-device's controller under its NAND timing model (serve-nvme timing switched to model after the rows above), IOPS with the HMB enabled (the whole L2P map cached in it); baseline: the same with the HMB disabled (nvme reloaded with max_host_mem_size_mb=0: a 4-map-page SRAM cache), same boot",
    ),
    (
        "nvme_randread_4k_qd1_hmb_model_p99",
        Target::None,
        "as nvme_randread_4k_qd1_hmb_model, fio's p99 completion latency in us (lower is better: a ratio below 1 is the HMB's gain)",
    ),
];

const GUEST: (&str, Target, &str) = (
    "guest_drain",
    Target::AtLeast(2.5),
    "cargo xtask boot --rate 0 --duration 5 (TCG guest, real module and daemon, unthrottled producer): records in trace.bin / 5 s, M records/s; baseline: records the firmware produced (written + dropped) per second",
);

impl Bench {
    pub fn run(self, sh: &Shell) -> Result<()> {
        sh.change_dir(workspace_root());
        let run_dir = self.run_dir.or_else(|| {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            target_dir().join("hmb-trace/runs").join(format!("bench-{secs}"))
        });
        std::fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
        let runs = if self.quick { 1 } else { self.runs.max(1) };
        let (daemon_gib, ring_gib, analyzer_mb) = if self.quick {
            (0.01, 0.01, 5)
        } else {
            (self.daemon_gib, self.ring_gib, self.analyzer_mb)
        };
        let mut expected: Vec<(&str, Target, &str)> = if self.nvme_only { Vec::new() } else { FIGURES.to_vec() };
        if self.guest {
            expected.push(GUEST);
        }
        if self.nvme || self.nvme_only {
            expected.extend(NVME.iter().copied());
        }
        let mut all_runs = Vec::new();
        for k in 1..=runs {
            println!("==> bench run {k} of {runs}");
            let dir = run_dir.join(format!("run-{k}"));
            std::fs::create_dir_all(&dir)?;
            let load_before = loadavg();
            let lines = self.one_run(sh, &dir, daemon_gib, ring_gib, analyzer_mb)?;
            let load_after = loadavg();
            let figures = expected
                .iter()
                .map(|(name, target, meaning)| {
                    let f = lines
                        .iter()
                        .find(|l| l["figure"] == *name)
                        .with_context(|| format!("the benches did not report figure {name}"))?;
                    self.judged(f.clone(), *target, meaning)
                })
                .collect::<Result<Vec<_>>>()?;
            println!("run {k} of {runs}:");
            print_table(&figures);
            println!("load average before: {load_before}, after: {load_after}");
            all_runs.push(json!({
                "run": k,
                "loadavg_before": load_before,
                "loadavg_after": load_after,
                "figures": figures,
            }));
        }
        // The figures quoted are the median of the runs, each column's
        // median taken on its own, with the ratio's range beside it.
        let medians = expected
            .iter()
            .map(|(name, target, meaning)| {
                let per_run: Vec<&Value> = all_runs
                    .iter()
                    .filter_map(|r| r["figures"].as_array()?.iter().find(|f| f["figure"] == *name))
                    .collect();
                self.judged(median_figure(name, &per_run)?, *target, meaning)
            })
            .collect::<Result<Vec<_>>>()?;
        println!("median of {runs} run(s) (ratio range: lowest and highest run):");
        print_table(&medians);
        let report = json!({
            "quick": self.quick,
            "runs": runs,
            "daemon_gib": daemon_gib,
            "ring_gib": ring_gib,
            "analyzer_mb": analyzer_mb,
            "figures": medians,
            "each_run": all_runs,
        });
        let path = run_dir.join("bench.json");
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
        if self.quick {
            println!("--quick: tiny sizes on the dev build; these numbers are not figures");
        }
        println!("bench.json: {}", path.display());
        Ok(())
    }

    /// One run of every bench (and the guest with `--guest`): their
    /// `BENCH` lines; each bench's whole output is kept in `dir`.
    fn one_run(&self, sh: &Shell, dir: &Path, daemon_gib: f64, ring_gib: f64, analyzer_mb: u64) -> Result<Vec<Value>> {
        // --quick reuses the dev build of `cargo test`; the real run is
        // the bench profile (release with debug info).
        let profile: &[&str] = if self.quick { &["--profile", "dev"] } else { &[] };
        // ... and so selects the whole workspace, as `cargo test --workspace`
        // does: with `-p` cargo unifies features over that package alone,
        // and a dozen dependencies (zerocopy, regex, clap, serde_json) and
        // the workspace crates above them were built a second time
        // (docs/performance.md, "Ninth session"). Bench names are unique.
        let pick = |package: &'static str| -> Vec<&'static str> {
            match self.quick {
                true => vec!["--workspace"],
                false => vec!["-p", package],
            }
        };
        let (daemon, ring, analyze) = (
            pick("hmb-trace-daemon"),
            pick("hmb-trace-consumer"),
            pick("hmb-trace-analyze"),
        );
        let (dg, rg, am) = (daemon_gib.to_string(), ring_gib.to_string(), analyzer_mb.to_string());
        let mut lines = Vec::new();
        // --nvme-only: the NVMe figures alone (the other benches take
        // minutes to build and run and do not touch the controller).
        if !self.nvme_only {
            for (what, out) in [
                (
                    "daemon",
                    cmd!(sh, "cargo bench {profile...} {daemon...} --bench daemon -- --gib {dg}").read(),
                ),
                (
                    "ring",
                    cmd!(
                        sh,
                        "cargo bench {profile...} {ring...} --bench ring -- --gib {rg} --payloads 64,4064"
                    )
                    .read(),
                ),
                (
                    "analyzer",
                    cmd!(
                        sh,
                        "cargo bench {profile...} {analyze...} --bench analyze -- --size-mb {am}"
                    )
                    .read(),
                ),
            ] {
                let out = out.with_context(|| format!("the {what} bench failed"))?;
                println!("{out}");
                std::fs::write(dir.join(format!("{what}.txt")), &out)?;
                lines.extend(bench_lines(&out)?);
            }
        }
        if self.guest {
            lines.push(guest_figure(sh, dir)?);
        }
        if self.nvme || self.nvme_only {
            lines.extend(self.nvme_figures(sh, dir)?);
        }
        Ok(lines)
    }

    /// Our NVMe controller against QEMU's, one boot: one figure per fio job.
    fn nvme_figures(&self, sh: &Shell, dir: &Path) -> Result<Vec<Value>> {
        use hmb_harness::full_guest::nvme_bench;
        let opts = nvme_bench::BenchOptions {
            kernel: None,
            run_dir: dir.join("nvme"),
            reps: if self.quick { 1 } else { self.nvme_reps },
            cost_reps: if self.quick {
                1
            } else {
                self.nvme_reps.max(NVME_COST_REPS_MIN)
            },
            cost_modes: self.nvme_cost_modes.clone(),
            runtime_s: if self.quick { 1 } else { self.nvme_runtime },
        };
        let mut phases = hmb_harness::phases::Phases::new();
        let (figures, timings) = nvme_bench::run(sh, &opts, &mut phases)?;
        phases.summary();
        std::fs::write(
            opts.run_dir.join("nvme.json"),
            serde_json::to_string_pretty(&json!({ "figures": figures, "timings": timings }))?,
        )?;
        println!(
            "    nvme probe at boot (stock driver, pci function to I/O queues): ours {:.0} ms, QEMU's nvme {:.0} ms; series nvme.ko insmod to a live namespace (median): {:.0} ms; guest uptime at the first fio I/O: {:.1} s; trace bytes per traced rep: {:?}",
            timings.boot_probe_ours_ms,
            timings.boot_probe_qemu_ms,
            timings.series_insmod_to_live_ms,
            timings.uptime_at_first_io_s,
            timings.trace_bytes_per_rep
        );
        for c in &timings.cost_counters {
            println!("    {c}");
        }
        for c in &timings.host_counters {
            println!("    {c}");
        }
        for s in &timings.speed_spreads {
            println!("    {s}");
        }
        for m in &timings.cost_modes {
            println!(
                "    {} trace {} over off, same boot: {:.3} (IOPS {:?})",
                m.job, m.mode, m.ratio_to_off, m.iops
            );
        }
        Ok(figures
            .into_iter()
            .map(|f| {
                println!("    {}: {:?}, baseline {:?} {}", f.figure, f.ours, f.qemu, f.unit);
                json!({
                    "figure": f.figure,
                    "unit": f.unit,
                    "value": f.value,
                    "baseline": f.baseline,
                    "baseline_what": f.baseline_what,
                    "ratio": f.ratio,
                })
            })
            .collect())
    }

    /// A figure with its target, whether the target is met, and its meaning.
    fn judged(&self, mut f: Value, target: Target, meaning: &str) -> Result<Value> {
        let (value, ratio) = (num(&f, "value")?, num(&f, "ratio")?);
        let (target_json, met) = match target {
            Target::Ratio(t) => (json!({"ratio_at_least": t}), Some(ratio >= t)),
            Target::AtLeast(t) => (json!({"value_at_least": t}), Some(value >= t)),
            Target::None => (Value::Null, None),
        };
        // Tiny sizes on a debug build say nothing about a target.
        let met = if self.quick { None } else { met };
        f["target"] = target_json;
        f["met"] = met.map_or(Value::Null, Value::Bool);
        f["meaning"] = json!(meaning);
        Ok(f)
    }
}

/// The median of each number over the runs (value, baseline, ratio and the
/// CPU-time columns where every run has them), with the ratio's range.
fn median_figure(name: &str, per_run: &[&Value]) -> Result<Value> {
    let first = per_run
        .first()
        .with_context(|| format!("no run reported figure {name}"))?;
    let mut f = json!({
        "figure": name,
        "unit": first["unit"],
        "baseline_what": first["baseline_what"],
        "runs": per_run.len(),
    });
    for key in ["value", "baseline", "ratio", "cpu_value", "cpu_ratio"] {
        let mut xs: Vec<f64> = per_run.iter().filter_map(|r| r[key].as_f64()).collect();
        if xs.len() != per_run.len() {
            continue;
        }
        xs.sort_by(f64::total_cmp);
        f[key] = json!(median(&xs));
        if key == "ratio" {
            f["ratio_range"] = json!([xs[0], xs[xs.len() - 1]]);
        }
    }
    Ok(f)
}

/// Median of sorted numbers (the mean of the middle two for an even count).
fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
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
        "{:<20} {:>12} {:<10} {:>12} {:>8} {:>13} {:>14} {:>5} | {:>10} {:>9}",
        "figure", "value", "unit", "baseline", "ratio", "ratio range", "target", "met", "per CPU-s", "CPU ratio"
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
        let range = match (f["ratio_range"][0].as_f64(), f["ratio_range"][1].as_f64()) {
            (Some(lo), Some(hi)) => format!("{lo:.3}-{hi:.3}"),
            _ => "-".to_string(),
        };
        println!(
            "{:<20} {:>12.3} {:<10} {:>12.3} {:>8.3} {:>13} {:>14} {:>5} | {:>10} {:>9}",
            f["figure"].as_str().unwrap_or("?"),
            f["value"].as_f64().unwrap_or(f64::NAN),
            f["unit"].as_str().unwrap_or(""),
            f["baseline"].as_f64().unwrap_or(f64::NAN),
            f["ratio"].as_f64().unwrap_or(f64::NAN),
            range,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[1.0, 2.0, 9.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0, 4.0, 9.0]), 3.0);
    }

    #[test]
    fn median_figure_takes_each_column_and_the_ratio_range() {
        let runs = [
            json!({"figure": "daemon_64", "unit": "GB/s", "value": 1.0, "baseline": 2.0, "ratio": 0.5, "cpu_value": 1.1, "cpu_ratio": 0.4}),
            json!({"figure": "daemon_64", "unit": "GB/s", "value": 3.0, "baseline": 2.5, "ratio": 0.9, "cpu_value": 1.0, "cpu_ratio": 0.3}),
            json!({"figure": "daemon_64", "unit": "GB/s", "value": 2.0, "baseline": 4.0, "ratio": 0.7}),
        ];
        let refs: Vec<&Value> = runs.iter().collect();
        let m = median_figure("daemon_64", &refs).unwrap();
        assert_eq!(m["value"], 2.0);
        assert_eq!(m["baseline"], 2.5);
        assert_eq!(m["ratio"], 0.7);
        assert_eq!(m["ratio_range"], json!([0.5, 0.9]));
        // A column one run lacks is left out rather than made up.
        assert!(m.get("cpu_value").is_none());
        assert_eq!(m["runs"], 3);
    }

    #[test]
    fn a_figure_no_run_reported_is_an_error() {
        assert!(median_figure("ring_64", &[]).is_err());
    }
}
