//! IOPS and bandwidth of emu-device's NVMe controller beside QEMU's own
//! `-device nvme`, in one boot of the full guest (issue 28): the same fio
//! jobs (io_uring, direct) on both, alternating which goes first, each
//! repeated; a figure is the median of our controller over the median of
//! QEMU's. Both namespaces are sparse files of the same size read through
//! the host's page cache (serve-nvme's pread/pwrite on its backing file;
//! QEMU's drive with `cache=writeback`, its default, `aio=threads`).
//! The same boot then measures the cost of tracing (`COST_JOBS`: the
//! series' nvme.ko with the module and the daemon tracing against
//! `hmb_trace_kb=0`) and reports probe times and the guest's uptime at the
//! first fio I/O (`Timings`).
//! It is a bench (`cargo xtask bench --nvme`), not a test: nothing here
//! judges the figures. docs/performance.md has the figures.

use std::ffi::OsString;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use xshell::Shell;

use super::{boot, nvme_tools, prepare};

mod cost_counters;
mod host_counters;
mod speed_probe;
use crate::guest_script::{self, Script};
use crate::phases::Phases;
use crate::qemu::args;
use crate::qemu::console;
pub use cost_counters::CostCounters;
pub use host_counters::HostCounters;
pub use speed_probe::{SpeedRep, SpeedSpread};

/// The fio jobs: figure name, fio arguments, and whether the figure is
/// IOPS (else MB/s).
pub(crate) const JOBS: &[(&str, &str, bool)] = &[
    ("nvme_randread_4k_qd1", "--rw=randread --bs=4k --iodepth=1", true),
    ("nvme_randread_4k_qd32", "--rw=randread --bs=4k --iodepth=32", true),
    ("nvme_read_128k_qd16", "--rw=read --bs=128k --iodepth=16", false),
    ("nvme_read_1m_qd1", "--rw=read --bs=1M --iodepth=1", false),
    ("nvme_write_1m_qd1", "--rw=write --bs=1M --iodepth=1", false),
];

/// The cost of tracing: the same kind of fio job on our controller under the
/// patch series' nvme.ko with the module and the daemon tracing (`on`) and
/// with `hmb_trace_kb=0` (`off`, no slice: the series' code paths without a
/// trace), alternating; the figure is on over off.
pub(crate) const COST_JOBS: &[(&str, &str, bool)] = &[
    ("nvme_trace_cost_4k_qd1", "--rw=randread --bs=4k --iodepth=1", true),
    ("nvme_trace_cost_4k_qd32", "--rw=randread --bs=4k --iodepth=32", true),
];

/// The cost part's modes (COST_MODES in the guest script): `on` and `off`
/// make the figure; the others take the trace apart to find where its cost
/// goes, in the same boot: `on0` the daemon with `--batch-wait-ms 0` (a look
/// at every sample), `shm` trace.bin in the guest's /dev/shm instead of on
/// its ext4 root, `slice` the series' slice adopted with no module and no
/// daemon (the controller produces into a ring nobody drains: once it is
/// full, records are counted as dropped), `direct` the daemon with
/// `--direct` (trace.bin by O_DIRECT, no page cache, no writeback), `big`
/// the daemon with `--batch-wait-ms 500 --max-batch-kib 2048` (fewer,
/// larger writes), `disk` trace.bin on an ext4 of its own on a second
/// virtio disk (a raw host file, `cache=unsafe`, no qcow2 snapshot: a
/// deployment with a dedicated trace disk). Every mode runs fio on CPU 0 and
/// the daemon on the guest's last CPU (a CPU of its own, as a deployment
/// runs it), but `off_unpinned` and `on_unpinned`: `off` and `on` with
/// neither pinned.
pub const COST_MODES: &[&str] = &[
    "on",
    "off",
    "on0",
    "shm",
    "slice",
    "direct",
    "big",
    "disk",
    "off_unpinned",
    "on_unpinned",
];

/// The `disk` mode's virtio disk: a sparse raw file in the run folder (the
/// guest script finds it by this size, 512-byte sectors).
const TRACE_DISK_BYTES: u64 = 256 << 20;

/// QEMU's namespace file in the run folder.
const QEMU_BACKING: &str = "qemu-nvme.img";

pub struct BenchOptions {
    pub kernel: Option<String>,
    pub run_dir: std::path::PathBuf,
    /// Repetitions of every job on each controller (the median is taken).
    pub reps: u32,
    /// Repetitions of each cost-of-tracing job in each mode.
    pub cost_reps: u32,
    /// The cost part's modes (of `COST_MODES`, `on` and `off` among them),
    /// rotated by repetition.
    pub cost_modes: Vec<String>,
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
    /// Every run of the figure and of its baseline.
    pub ours: Vec<f64>,
    pub qemu: Vec<f64>,
    pub baseline_what: &'static str,
}

/// Times of the same boot: probe of our controller and of QEMU's by the stock
/// driver at boot (its `pci function` line to its I/O queues line), the
/// series' driver's probes of ours in the cost part (insmod to a live
/// namespace, median), and the guest's uptime at the first fio I/O.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Timings {
    pub boot_probe_ours_ms: f64,
    pub boot_probe_qemu_ms: f64,
    pub series_insmod_to_live_ms: f64,
    pub uptime_at_first_io_s: f64,
    pub trace_bytes_per_rep: Vec<u64>,
    /// The cost part's counters, per job and mode (where a traced job's time goes).
    pub cost_counters: Vec<CostCounters>,
    /// The host's side of the same jobs: CPU per I/O of serve-nvme and QEMU.
    pub host_counters: Vec<HostCounters>,
    /// Every mode beside `off` (`on` too): IOPS per repetition and the ratio
    /// of medians.
    pub cost_modes: Vec<ModeRatio>,
    /// The host's speed probe: every repetition of every marked job (the
    /// ours/QEMU rows and the cost jobs), and each job and mode's spread.
    pub speed_reps: Vec<SpeedRep>,
    pub speed_spreads: Vec<SpeedSpread>,
}

/// One cost job in one mode against `off`, same boot.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModeRatio {
    pub job: String,
    pub mode: String,
    pub iops: Vec<f64>,
    pub ratio_to_off: f64,
}

/// `nvmeN: pci function` to `nvmeN: ... default/read/poll queues` in `dmesg`, the first of
/// each (the boot's probe), in milliseconds.
fn boot_probe_ms(dmesg: &str, ctrl: &str) -> Option<f64> {
    let stamp = |l: &str| -> Option<f64> { l.strip_prefix('[')?.split(']').next()?.trim().parse().ok() };
    let start = dmesg
        .lines()
        .find(|l| l.contains(&format!("{ctrl}: pci function")))
        .and_then(stamp)?;
    let end = dmesg
        .lines()
        .find(|l| l.contains(&format!("{ctrl}:")) && l.contains("default/read/poll queues"))
        .and_then(stamp)?;
    (end >= start).then_some((end - start) * 1000.0)
}

fn timings(
    share: &std::path::Path,
    cost_counters: Vec<CostCounters>,
    host_counters: Vec<HostCounters>,
    cost_modes: Vec<ModeRatio>,
    speed_reps: Vec<SpeedRep>,
) -> Result<Timings> {
    let text = std::fs::read_to_string(share.join("timing.txt")).context("the bench guest left no timing.txt")?;
    let dmesg = std::fs::read_to_string(share.join("dmesg.txt")).context("the bench guest left no dmesg.txt")?;
    let values = |key: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .filter(|(k, _)| *k == key || k.starts_with(&format!("{key}_")))
            .map(|(_, v)| v.trim().to_string())
            .collect()
    };
    let ours = values("ours").into_iter().next().context("timing.txt: no ours")?;
    let qemu = if ours == "nvme0" { "nvme1" } else { "nvme0" };
    let probes: Vec<f64> = values("series_probe_ms")
        .iter()
        .filter_map(|v| v.parse().ok())
        .collect();
    ensure!(!probes.is_empty(), "timing.txt: no series_probe_ms");
    Ok(Timings {
        boot_probe_ours_ms: boot_probe_ms(&dmesg, &ours).context("no boot probe of our controller in dmesg")?,
        boot_probe_qemu_ms: boot_probe_ms(&dmesg, qemu).context("no boot probe of QEMU's nvme in dmesg")?,
        series_insmod_to_live_ms: median(&probes),
        uptime_at_first_io_s: values("first_io_uptime")
            .first()
            .and_then(|v| v.parse().ok())
            .context("timing.txt: no first_io_uptime")?,
        trace_bytes_per_rep: values("trace_bytes").iter().filter_map(|v| v.parse().ok()).collect(),
        cost_counters,
        host_counters,
        cost_modes,
        speed_spreads: speed_probe::spreads(&speed_reps),
        speed_reps,
    })
}

/// The HMB rows (issue 27): ours with the HMB enabled over ours with it disabled, both
/// under `--timing model` (switched on over the control socket after the rows above):
/// 4 KiB random-read IOPS at QD1, and its p99 completion latency (lower is better).
pub(crate) const HMB_IOPS: &str = "nvme_randread_4k_qd1_hmb_model";
pub(crate) const HMB_P99: &str = "nvme_randread_4k_qd1_hmb_model_p99";
const HMB_BASELINE: &str = "the same controller and job with the HMB disabled (nvme reloaded with max_host_mem_size_mb=0), timing model on, same boot";
const QEMU_BASELINE: &str = "QEMU 11.1 -device nvme, same guest, same boot";

/// The guest's script (harness/guest-scripts/full-guest-nvme-bench.sh):
/// find both controllers by model, run every job on each, `reps` times,
/// fio's JSON into the share.
fn script(reps: u32, cost_reps: u32, cost_modes: &[String], runtime_s: u32) -> String {
    let lines = |jobs: &[(&str, &str, bool)]| -> String {
        jobs.iter()
            .map(|(name, args, _)| format!("{name}|{args}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Script::new()
        .set("JOBS", lines(JOBS))
        .set("COST_JOBS", lines(COST_JOBS))
        .set("SERIES_NVME", super::nvme_traced::SERIES_NVME)
        .set("DKMS_TAR", super::script::files::DKMS_TAR)
        .set("DAEMON", super::script::files::DAEMON)
        .set("REPS", reps)
        .set("COST_REPS", cost_reps)
        .set("COST_MODES", cost_modes.join(" "))
        .set("RUNTIME_S", runtime_s)
        .set("TRACE_DISK_SECTORS", TRACE_DISK_BYTES / 512)
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
pub fn run(sh: &Shell, opts: &BenchOptions, phases: &mut Phases) -> Result<(Vec<Figure>, Timings)> {
    ensure!(
        opts.reps >= 1 && opts.cost_reps >= 1 && opts.runtime_s >= 1,
        "reps and runtime must be at least 1"
    );
    check_modes(&opts.cost_modes)?;
    let p = prepare(sh, opts.kernel.as_deref(), phases)?;
    std::fs::create_dir_all(&opts.run_dir)?;
    let share = opts.run_dir.join("share");
    let _ = std::fs::remove_dir_all(&share);
    std::fs::create_dir_all(&share)?;
    std::fs::write(
        share.join(super::script::files::SCRIPT),
        script(opts.reps, opts.cost_reps, &opts.cost_modes, opts.runtime_s),
    )?;
    // The cost part's series driver, module and daemon.
    for (from, to) in [
        (&p.series_nvme, super::nvme_traced::SERIES_NVME),
        (&p.module.tar, super::script::files::DKMS_TAR),
        (&p.daemon_bin, super::script::files::DAEMON),
    ] {
        std::fs::copy(from, share.join(to)).with_context(|| format!("copying {}", from.display()))?;
    }
    let daemon = share.join(super::script::files::DAEMON);
    xshell::cmd!(sh, "strip --strip-debug {daemon}")
        .quiet()
        .run()
        .context("strip")?;
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
    if opts.cost_modes.iter().any(|m| m == "disk") {
        let img = opts.run_dir.join("trace-disk.img");
        let _ = std::fs::remove_file(&img);
        std::fs::File::create(&img)?.set_len(TRACE_DISK_BYTES)?;
        // Behind a root port of its own: probed after the root disk on the
        // root bus, so that one stays /dev/vda (the kernel's root=).
        extra.extend(args::pcie_root_port("tdiskrp", 5, 5));
        extra.extend([
            "-drive".into(),
            format!("file={},if=none,id=tracedisk,format=raw,cache=unsafe", img.display()).into(),
            "-device".into(),
            "virtio-blk-pci,drive=tracedisk,bus=tdiskrp".into(),
        ]);
    }
    let (mut emu, mut nvme, mut vm) =
        phases.run("boot (both controllers)", || boot(&p, &opts.run_dir, &share, &extra))?;
    let per_job = u64::from(opts.runtime_s) + 4;
    let modes = opts.cost_modes.len() as u64;
    let budget = Duration::from_secs(
        300 + (per_job * JOBS.len() as u64 * 2 + 20) * u64::from(opts.reps)
            + (per_job * COST_JOBS.len() as u64 + 10) * modes * u64::from(opts.cost_reps),
    );
    let host = host_counters::HostSampler::new(
        vm.pid().context("QEMU has no pid")?,
        &opts.run_dir.join(nvme_tools::BACKING),
    );
    if !host.found_serve_nvme() {
        eprintln!("warning: no serve-nvme process of this run found: its host CPU reads 0");
    }
    let ended = phases.run("fio on ours and QEMU's nvme, then the HMB rows", || {
        let asked = "HMBT-STEP hmb rows: timing model please";
        let line = vm.wait_for(asked, budget, |l| {
            host.on_line(l);
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
    crate::guest::BootError::check_script("the bench guest", rc, || {
        format!("see {}", opts.run_dir.join("console.log").display())
    })?;
    let mut figures = Vec::new();
    let all = JOBS.iter().map(|j| (j, "ours", "qemu", QEMU_BASELINE));
    let cost = COST_JOBS.iter().map(|j| {
        (
            j,
            "on",
            "off",
            "the same job under the series' nvme.ko with hmb_trace_kb=0 (no slice, no module), same boot; fio on CPU 0, the daemon on the last CPU",
        )
    });
    for ((name, _, iops), mine, theirs, baseline_what) in all.chain(cost) {
        let reps = if mine == "on" { opts.cost_reps } else { opts.reps };
        let side = |who: &str| -> Result<Vec<f64>> {
            (1..=reps)
                .map(|rep| {
                    let f = share.join(format!("fio-{name}-{who}-{rep}.json"));
                    let text = std::fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
                    fio_figure(&text, *iops).with_context(|| format!("{}", f.display()))
                })
                .collect()
        };
        let (ours, qemu) = (side(mine)?, side(theirs)?);
        let (value, baseline) = (median(&ours), median(&qemu));
        figures.push(Figure {
            figure: name.to_string(),
            unit: if *iops { "IOPS" } else { "MB/s" },
            value,
            baseline,
            ratio: value / baseline,
            ours,
            qemu,
            baseline_what,
        });
    }
    figures.extend(hmb_figures(&share, opts.reps)?);
    let counters = std::fs::read_to_string(share.join("cost-counters.txt"))
        .context("the bench guest left no cost-counters.txt")?;
    let iops_of = |job: &str, mode: &str, rep: u32| -> Result<f64> {
        let f = share.join(format!("fio-{job}-{mode}-{rep}.json"));
        fio_figure(&std::fs::read_to_string(&f)?, true).with_context(|| format!("{}", f.display()))
    };
    let cost = cost_counters::parse(&counters, iops_of).context("cost-counters.txt")?;
    std::fs::write(share.join("host-counters.txt"), host.lines())?;
    let samples = host.probe_samples();
    let host_reps = host_counters::reps(&host.lines(), iops_of).context("host-counters.txt")?;
    let value_of = |job: &str, mode: &str, rep: u32| -> Result<(f64, &'static str)> {
        let iops = JOBS.iter().chain(COST_JOBS).find(|j| j.0 == job).is_none_or(|j| j.2);
        let f = share.join(format!("fio-{job}-{mode}-{rep}.json"));
        let v = fio_figure(&std::fs::read_to_string(&f)?, iops).with_context(|| format!("{}", f.display()))?;
        Ok((v, if iops { "IOPS" } else { "MB/s" }))
    };
    let speed = speed_probe::speed_reps(&host_reps, &samples, value_of)?;
    std::fs::write(
        share.join("speed-probe.txt"),
        samples
            .iter()
            .map(|s| {
                format!(
                    "at_ns={} cpu={} dep_ns={} indep_ns={} mixed_ns={}\n",
                    s.at_ns, s.cpu, s.dep_ns, s.indep_ns, s.mixed_ns
                )
            })
            .collect::<String>(),
    )?;
    let host = host_counters::parse(&host.lines(), iops_of).context("host-counters.txt")?;
    let mut ratios = Vec::new();
    for (name, _, _) in COST_JOBS {
        let side =
            |mode: &str| -> Result<Vec<f64>> { (1..=opts.cost_reps).map(|rep| iops_of(name, mode, rep)).collect() };
        let off = median(&side("off")?);
        for mode in opts.cost_modes.iter().filter(|m| *m != "off") {
            let iops = side(mode)?;
            ratios.push(ModeRatio {
                job: name.to_string(),
                mode: mode.clone(),
                ratio_to_off: median(&iops) / off,
                iops,
            });
        }
    }
    Ok((figures, timings(&share, cost, host, ratios, speed)?))
}

/// The cost part's modes: known ones, each once, `on` and `off` among them.
fn check_modes(modes: &[String]) -> Result<()> {
    for m in modes {
        ensure!(
            COST_MODES.contains(&m.as_str()),
            "unknown cost mode {m:?} (known: {COST_MODES:?})"
        );
        ensure!(
            modes.iter().filter(|x| *x == m).count() == 1,
            "cost mode {m:?} given twice"
        );
    }
    ensure!(
        modes.iter().any(|m| m == "on") && modes.iter().any(|m| m == "off"),
        "the cost modes must include on and off (the figure)"
    );
    Ok(())
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
        let s = script(3, 5, &["on".to_string(), "off".to_string()], 4);
        for (name, args, _) in JOBS {
            assert!(s.contains(&format!("{name}|{args}")), "{name}");
        }
        for (name, args, _) in COST_JOBS {
            assert!(s.contains(&format!("{name}|{args}")), "{name}");
        }
        assert!(s.contains("REPS='3'\n") && s.contains("COST_REPS='5'\n") && s.contains("RUNTIME_S='4'\n"));
        assert!(s.contains("series hmb_trace_kb=0\n") && s.contains("SERIES_NVME='nvme-series.ko'\n"));
        assert!(s.contains("COST_MODES='on off'\n"));
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0]), 2.5);
    }

    #[test]
    fn cost_modes_must_be_known_once_each_with_on_and_off() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(check_modes(&v(&["on", "off"])).is_ok());
        assert!(check_modes(&v(&["off", "on0", "on", "shm", "slice"])).is_ok());
        assert!(check_modes(&v(&["on", "on0"])).is_err());
        assert!(check_modes(&v(&["on", "off", "on"])).is_err());
        assert!(check_modes(&v(&["on", "off", "fast"])).is_err());
    }

    #[test]
    fn probe_times_come_from_each_controllers_own_lines() {
        let dmesg = "[    2.100000] nvme nvme0: pci function 0000:02:00.0\n\
                     [    2.150000] nvme nvme1: pci function 0000:03:00.0\n\
                     [    2.400000] nvme nvme1: 2/0/0 default/read/poll queues\n\
                     [    2.900000] nvme nvme0: 2/0/0 default/read/poll queues\n";
        assert!((boot_probe_ms(dmesg, "nvme0").unwrap() - 800.0).abs() < 1e-6);
        assert!((boot_probe_ms(dmesg, "nvme1").unwrap() - 250.0).abs() < 1e-6);
        assert!(boot_probe_ms(dmesg, "nvme2").is_none());
    }
}
