//! IOPS and bandwidth of emu-device's NVMe controller beside QEMU's own
//! `-device nvme`, in one boot of the full guest (issue 28): the same fio
//! jobs (io_uring, direct) on both, alternating which goes first, each
//! repeated; a figure is the median of our controller over the median of
//! QEMU's. Both namespaces are sparse files of the same size read through
//! the host's page cache (serve-nvme's pread/pwrite on its backing file;
//! QEMU's drive with `cache=writeback`, its default, `aio=threads`).
//! It is a bench (`cargo xtask bench --nvme`), not a test: nothing here
//! judges the figures. docs/performance.md has the figures.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;
use xshell::Shell;

use super::{boot, nvme_tools, prepare};
use crate::guest_script::{self, Script};
use crate::phases::Phases;
use crate::qemu::args;
use crate::qemu::console;

/// The fio jobs: figure name, fio arguments, and whether the figure is
/// IOPS (else MB/s).
pub const JOBS: &[(&str, &str, bool)] = &[
    ("nvme_randread_4k_qd1", "--rw=randread --bs=4k --iodepth=1", true),
    ("nvme_randread_4k_qd32", "--rw=randread --bs=4k --iodepth=32", true),
    ("nvme_read_128k_qd16", "--rw=read --bs=128k --iodepth=16", false),
    ("nvme_read_1m_qd1", "--rw=read --bs=1M --iodepth=1", false),
    ("nvme_write_1m_qd1", "--rw=write --bs=1M --iodepth=1", false),
];

/// QEMU's namespace file in the run folder.
const QEMU_BACKING: &str = "qemu-nvme.img";

pub struct BenchOptions {
    pub kernel: Option<String>,
    pub run_dir: std::path::PathBuf,
    /// Repetitions of every job on each controller (the median is taken).
    pub reps: u32,
    /// Seconds per fio job (after one second of ramp).
    pub runtime_s: u32,
}

/// One figure: ours against QEMU's nvme, medians of `reps` (the HMB rows: ours with
/// the HMB enabled in `ours`, disabled in `qemu`, as `baseline_what` says).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Figure {
    pub figure: String,
    pub unit: &'static str,
    pub value: f64,
    pub baseline: f64,
    pub ratio: f64,
    pub ours: Vec<f64>,
    pub qemu: Vec<f64>,
    pub baseline_what: &'static str,
}

/// The HMB rows (issue 27): ours with the HMB enabled over ours with it disabled, both
/// under `--timing model` (switched on over the control socket after the rows above):
/// 4 KiB random-read IOPS at QD1, and its p99 completion latency (lower is better).
pub const HMB_IOPS: &str = "nvme_randread_4k_qd1_hmb_model";
pub const HMB_P99: &str = "nvme_randread_4k_qd1_hmb_model_p99";
const HMB_BASELINE: &str = "the same controller and job with the HMB disabled (nvme reloaded with max_host_mem_size_mb=0), timing model on, same boot";
const QEMU_BASELINE: &str = "QEMU 11.1 -device nvme, same guest, same boot";

/// The guest's script (harness/guest-scripts/full-guest-nvme-bench.sh):
/// find both controllers by model, run every job on each, `reps` times,
/// fio's JSON into the share.
fn script(reps: u32, runtime_s: u32) -> String {
    let jobs: Vec<String> = JOBS.iter().map(|(name, args, _)| format!("{name}|{args}")).collect();
    Script::new()
        .set("JOBS", jobs.join("\n"))
        .set("REPS", reps)
        .set("RUNTIME_S", runtime_s)
        .file(&guest_script::FULL_GUEST_NVME_BENCH)
        .build()
}

/// fio's figure for one run: IOPS, or MB/s (10^6 bytes).
fn fio_figure(json: &str, iops: bool) -> Result<f64> {
    let start = json.find('{').context("no JSON in fio's output")?;
    let v: Value = serde_json::from_str(&json[start..]).context("fio's JSON")?;
    let job = v.pointer("/jobs/0").context("fio reported no job")?;
    ensure!(
        job.get("error").and_then(Value::as_i64) == Some(0),
        "fio job error: {:?}",
        job.get("error")
    );
    let dir = if job.pointer("/write/io_bytes").and_then(Value::as_u64).unwrap_or(0) > 0 {
        "write"
    } else {
        "read"
    };
    let key = if iops { "iops" } else { "bw_bytes" };
    let x = job
        .pointer(&format!("/{dir}/{key}"))
        .and_then(Value::as_f64)
        .with_context(|| format!("fio JSON has no {dir}.{key}"))?;
    ensure!(x > 0.0, "fio measured nothing ({dir}.{key} = 0)");
    Ok(if iops { x } else { x / 1e6 })
}

fn median(xs: &[f64]) -> f64 {
    let mut s = xs.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Boot the full guest with both controllers, run the jobs, return one
/// figure per job.
pub fn run(sh: &Shell, opts: &BenchOptions, phases: &mut Phases) -> Result<Vec<Figure>> {
    ensure!(
        opts.reps >= 1 && opts.runtime_s >= 1,
        "reps and runtime must be at least 1"
    );
    let p = prepare(sh, opts.kernel.as_deref(), phases)?;
    std::fs::create_dir_all(&opts.run_dir)?;
    let share = opts.run_dir.join("share");
    let _ = std::fs::remove_dir_all(&share);
    std::fs::create_dir_all(&share)?;
    std::fs::write(
        share.join(super::script::files::SCRIPT),
        script(opts.reps, opts.runtime_s),
    )?;
    // QEMU's nvme: a sparse raw file of our namespace's size, behind its own root port.
    let qemu_img = opts.run_dir.join(QEMU_BACKING);
    let _ = std::fs::remove_file(&qemu_img);
    std::fs::File::create(&qemu_img)?.set_len(nvme_tools::NAMESPACE_BYTES)?;
    let mut extra: Vec<OsString> = vec![
        "-drive".into(),
        format!(
            "file={},format=raw,if=none,id=qnvme,cache=writeback,aio=threads",
            qemu_img.display()
        )
        .into(),
    ];
    extra.extend(args::pcie_root_port("qnvmerp", 3, 3));
    extra.extend([
        "-device".into(),
        "nvme,serial=qemu-nvme0,drive=qnvme,bus=qnvmerp".into(),
    ]);
    let (mut emu, mut nvme, mut vm) =
        phases.run("boot (both controllers)", || boot(&p, &opts.run_dir, &share, &extra))?;
    let per_job = u64::from(opts.runtime_s) + 4;
    let budget = Duration::from_secs(300 + per_job * JOBS.len() as u64 * 2 * u64::from(opts.reps));
    let ended = phases.run("fio on ours and QEMU's nvme, then the HMB rows", || {
        let asked = "HMBT-STEP hmb rows: timing model please";
        let line = vm.wait_for(asked, budget, |l| {
            l.contains(asked) || console::parse_result(l).is_some()
        })?;
        if line.contains(asked) {
            nvme.request(&hmb_emu_device::control::Request::Timing { timing: "model".into() })
                .context("switching the controller's timing model on")?;
            std::fs::write(share.join("timing-model"), "")?;
            let hmb_budget = Duration::from_secs(300 + per_job * 2 * 8 * u64::from(opts.reps));
            let line = vm.wait_for("HMBT-RESULT", hmb_budget, |l| console::parse_result(l).is_some())?;
            let _ = vm.wait_exit(Duration::from_secs(120));
            return Ok(console::parse_result(&line).unwrap_or(-1));
        }
        let _ = vm.wait_exit(Duration::from_secs(120));
        Ok(console::parse_result(&line).unwrap_or(-1))
    });
    vm.kill();
    emu.shutdown();
    nvme.shutdown();
    let rc = ended?;
    if rc != 0 {
        bail!(
            "the bench guest failed (rc={rc}); see {}",
            opts.run_dir.join("console.log").display()
        );
    }
    let mut figures = Vec::new();
    for (name, _, iops) in JOBS {
        let side = |who: &str| -> Result<Vec<f64>> {
            (1..=opts.reps)
                .map(|rep| {
                    let f = share.join(format!("fio-{name}-{who}-{rep}.json"));
                    let text = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
                    fio_figure(&text, *iops).with_context(|| format!("{}", f.display()))
                })
                .collect()
        };
        let (ours, qemu) = (side("ours")?, side("qemu")?);
        let (value, baseline) = (median(&ours), median(&qemu));
        figures.push(Figure {
            figure: name.to_string(),
            unit: if *iops { "IOPS" } else { "MB/s" },
            value,
            baseline,
            ratio: value / baseline,
            ours,
            qemu,
            baseline_what: QEMU_BASELINE,
        });
    }
    figures.extend(hmb_figures(&share, opts.reps)?);
    Ok(figures)
}

/// The HMB rows from fio-hmb_{on,off}-REP.json: IOPS and p99 latency, medians of `reps`.
fn hmb_figures(share: &std::path::Path, reps: u32) -> Result<Vec<Figure>> {
    let side = |mode: &str, what: fn(&str) -> Result<f64>| -> Result<Vec<f64>> {
        (1..=reps)
            .map(|rep| {
                let f = share.join(format!("fio-hmb_{mode}-{rep}.json"));
                let text = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
                what(&text).with_context(|| format!("{}", f.display()))
            })
            .collect()
    };
    let iops = |t: &str| fio_figure(t, true);
    let mut out = Vec::new();
    for (figure, unit, what) in [
        (HMB_IOPS, "IOPS", iops as fn(&str) -> Result<f64>),
        (HMB_P99, "us", fio_p99_us),
    ] {
        let (on, off) = (side("on", what)?, side("off", what)?);
        let (value, baseline) = (median(&on), median(&off));
        out.push(Figure {
            figure: figure.to_string(),
            unit,
            value,
            baseline,
            ratio: value / baseline,
            ours: on,
            qemu: off,
            baseline_what: HMB_BASELINE,
        });
    }
    Ok(out)
}

/// fio's 99th percentile completion latency of a read job, in microseconds.
fn fio_p99_us(json: &str) -> Result<f64> {
    let start = json.find('{').context("no JSON in fio's output")?;
    let v: Value = serde_json::from_str(&json[start..]).context("fio's JSON")?;
    let p99 = v
        .pointer("/jobs/0/read/clat_ns/percentile/99.000000")
        .and_then(Value::as_f64)
        .context("fio JSON has no read.clat_ns.percentile 99.000000")?;
    ensure!(p99 > 0.0, "fio measured no latency");
    Ok(p99 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_figures_come_from_the_direction_that_moved_data() {
        let read = r#"{"jobs":[{"error":0,"read":{"io_bytes":10,"iops":1234.5,"bw_bytes":5000000},"write":{"io_bytes":0,"iops":0}}]}"#;
        assert_eq!(fio_figure(read, true).unwrap(), 1234.5);
        assert_eq!(fio_figure(read, false).unwrap(), 5.0);
        let write = r#"{"jobs":[{"error":0,"read":{"io_bytes":0},"write":{"io_bytes":10,"bw_bytes":2000000}}]}"#;
        assert_eq!(fio_figure(write, false).unwrap(), 2.0);
        assert!(fio_figure(r#"{"jobs":[{"error":5,"read":{"io_bytes":1,"iops":1}}]}"#, true).is_err());
        assert!(fio_figure(r#"{"jobs":[{"error":0,"read":{"io_bytes":0,"iops":0}}]}"#, true).is_err());
        let lat = r#"{"jobs":[{"read":{"clat_ns":{"percentile":{"99.000000":123456}}}}]}"#;
        assert_eq!(fio_p99_us(lat).unwrap(), 123.456);
        assert!(fio_p99_us(r#"{"jobs":[{"read":{}}]}"#).is_err());
    }

    #[test]
    fn the_script_runs_every_job_on_both() {
        let s = script(3, 4);
        for (name, args, _) in JOBS {
            assert!(s.contains(&format!("{name}|{args}")), "{name}");
        }
        assert!(s.contains("REPS='3'\n") && s.contains("RUNTIME_S='4'\n"));
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
    }
}
