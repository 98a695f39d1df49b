//! `cargo xtask boot`: emulated controller -> real guest kernel with the real
//! module and daemon -> trace.bin back on the host -> ground-truth check ->
//! analyzer report. Every phase prints its duration and has a timeout; QEMU
//! and emu-device are stopped on every exit path.

pub mod inject;
pub mod nvme;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use hmb_emu_device::control::Fault;
use xshell::{cmd, Shell};

use hmb_emu_device::hmb::hmb_size_for;
use hmb_harness::guest_script::{self, files};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::qemu::Accel;
use hmb_harness::session::{self, Session, SessionConfig};
use hmb_harness::{interrupt, target_dir, truth, workspace_root};
use inject::Injection;

#[derive(Args, Clone)]
pub struct Boot {
    /// Guest kernel, a name from images/KERNELS (default: its first line).
    #[arg(long)]
    pub kernel: Option<String>,
    /// The emulated controller: ivshmem (the ring over ivshmem-doorbell,
    /// the main job) or nvme (the NVMe controller over vfio-user, probed by
    /// the guest's stock nvme driver; implies --qemu 11.1).
    #[arg(long, value_enum, default_value = "ivshmem")]
    pub device: Device,
    /// QEMU to run: bookworm's 7.2 (default), bookworm-backports' 10.0, or
    /// trixie-backports' 11.1 (the default with --device nvme).
    #[arg(long, value_enum)]
    pub qemu: Option<QemuVersion>,
    /// Accelerator: tcg (default: KVM guests hang on some hosts), kvm, or
    /// auto (probe KVM with a short boot, else TCG, saying why).
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
    /// Firmware workload: ssd, npu, sizes, sizes:fixed=N, sizes:uniform=A-B.
    #[arg(long, default_value = "ssd")]
    pub workload: String,
    /// Records per second (0 = as fast as possible).
    #[arg(long, default_value_t = 2000)]
    pub rate: u64,
    /// Seconds of production.
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// Ring data area in bytes (power of two, 8 KiB..1 GiB); K/M suffixes allowed.
    #[arg(long, default_value = "16M", value_parser = parse_size)]
    pub ring_size: u64,
    /// Workload seed: the same seed gives the same records.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Faults: reset[@SECS] (controller reset), stall@SECS:DUR (QMP stop/cont
    /// of the guest, a real overflow). Repeatable. With --device nvme: one
    /// `reset`, a device-side failure (CSTS.CFS) after reset_controller.
    #[arg(long)]
    pub inject: Vec<Injection>,
    /// Leave the VM running with a shell on the console after the job.
    #[arg(long)]
    pub keep: bool,
    /// Run folder (default: target/hmb-trace/runs/<timestamp>).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// --device nvme: 4 KiB O_DIRECT reads timed for the QD1 figure.
    #[arg(long, default_value_t = 2000)]
    pub nvme_reads: u32,
    /// --device nvme: the patch series' nvme.ko instead of the stock one,
    /// with nvme-hmb-trace.ko and the daemon; trace.bin is checked against
    /// the controller's journal byte for byte.
    #[arg(long)]
    pub nvme_trace: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    Ivshmem,
    Nvme,
}

pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, mult) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1u64 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size"))?;
    let size = n.checked_mul(mult).ok_or_else(|| format!("{s:?} is too large"))?;
    if !hmb_trace_abi::ring_size_valid(size) {
        return Err(format!("{s:?}: a ring is a power of two between 8K and 1G"));
    }
    Ok(size)
}

/// Everything a finished run left behind.
pub struct RunOutcome {
    pub run_dir: PathBuf,
    pub truth: truth::TruthReport,
}

impl Boot {
    pub fn run(self) -> Result<()> {
        run(self)
    }
}

fn run(args: Boot) -> Result<()> {
    let mut phases = Phases::new();
    if args.device == Device::Nvme {
        let run_dir = args.run_dir.clone().unwrap_or_else(default_run_dir);
        let result = nvme::boot(&args, &run_dir, &mut phases);
        phases.summary();
        nvme::print(&result?, &run_dir);
        return Ok(());
    }
    let result = boot(&args, &mut phases);
    phases.summary();
    let outcome = result?;
    println!("run folder: {}", outcome.run_dir.display());
    for name in [
        "trace.bin",
        "info.txt",
        "report.html",
        "console.log",
        "daemon.stderr",
        "emu-device.log",
    ] {
        let path = outcome.run_dir.join(name);
        if path.exists() {
            println!("  {name:<14} {}", path.display());
        }
    }
    println!("ground truth: {}", outcome.truth.summary());
    if !outcome.truth.passed() {
        bail!("trace.bin does not match what the firmware model produced");
    }
    Ok(())
}

/// The whole main job; returns what it produced. Used by `boot` and tests.
pub fn boot(args: &Boot, phases: &mut Phases) -> Result<RunOutcome> {
    if args.device != Device::Ivshmem {
        bail!("the trace main job runs on --device ivshmem; --device nvme is nvme::boot");
    }
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    let qemu = args.qemu.unwrap_or(QemuVersion::V7_2);
    let tools = session::prepare(&sh, args.kernel.as_deref(), qemu, phases)?;
    let run_dir = args.run_dir.clone().unwrap_or_else(default_run_dir);
    let follow = args.inject.iter().any(|i| matches!(i, Injection::Reset { .. }));
    let cfg = SessionConfig {
        run_dir: run_dir.clone(),
        accel: args.accel,
        keep: args.keep,
        hmb_size: hmb_size_for(args.ring_size),
        guest_script: guest_script::streaming(
            tools.module()?,
            &format!("ring_size={}", args.ring_size),
            if follow { "--follow" } else { "" },
        ),
        extra_qemu_args: Vec::new(),
        extra_cmdline: Vec::new(),
    };
    let mut s = Session::start(&tools, &cfg, phases)?;
    phases.run("module + daemon", || {
        s.wait_share_file(files::STARTED, Duration::from_secs(60))
    })?;
    phases.run("workload", || produce(args, &mut s))?;
    phases.run("drain", || s.emu.wait_drained(Duration::from_secs(60)))?;
    let ground_truth = s.emu.ground_truth()?;
    std::fs::write(
        run_dir.join("ground-truth.json"),
        serde_json::to_string_pretty(&ground_truth)?,
    )?;
    let stats = s.emu.stats()?;
    std::fs::write(run_dir.join("emu-stats.json"), serde_json::to_string_pretty(&stats)?)?;
    s.signal(files::STOP)?;
    if args.keep {
        println!("--keep: the guest shell is on this terminal; `poweroff -f` ends the VM");
    }
    let timeout = Duration::from_secs(if args.keep { 86_400 } else { 60 });
    let result = phases.run("guest stop", || s.finish(timeout))?;
    if result != 0 {
        bail!(
            "the guest job failed (rc={result}); see {}",
            run_dir.join("console.log").display()
        );
    }
    let daemon_rc = s.daemon_exit_codes();
    if daemon_rc != [0] {
        bail!(
            "hmb-trace-daemon exited with {daemon_rc:?}; see {}",
            run_dir.join(files::DAEMON_STDERR).display()
        );
    }
    let trace = run_dir.join(files::TRACE);
    let report = phases.run("ground truth", || {
        truth::check(&trace, &ground_truth.segments, truth::live_ring(&stats))
    })?;
    phases.run("analyze", || analyze(&sh, &tools.analyzer_bin, &run_dir, &trace))?;
    Ok(RunOutcome { run_dir, truth: report })
}

fn produce(args: &Boot, s: &mut Session) -> Result<()> {
    let duration = Duration::from_secs_f64(args.duration);
    let mut pending: Vec<Injection> = args.inject.clone();
    pending.sort_by_key(|i| i.at(duration));
    s.emu.start_workload(&args.workload, args.seed, args.rate)?;
    let start = Instant::now();
    while start.elapsed() < duration {
        if let Some(next) = pending.first().copied() {
            if start.elapsed() >= next.at(duration) {
                pending.remove(0);
                fire(next, s)?;
                continue;
            }
        }
        s.emu.check_alive()?;
        if interrupt::requested() {
            bail!("interrupted");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s.emu.stop_workload()
}

fn fire(injection: Injection, s: &mut Session) -> Result<()> {
    match injection {
        Injection::Reset { .. } => {
            println!("    inject: controller reset");
            s.emu.inject(Fault::Reset).map(drop)
        }
        Injection::Stall { dur, .. } => {
            println!(
                "    inject: guest stopped for {:.1}s (QMP stop/cont)",
                dur.as_secs_f64()
            );
            let mut qmp = s.qmp()?;
            qmp.stop(Duration::from_secs(5))?;
            std::thread::sleep(dur);
            qmp.cont(Duration::from_secs(5))?;
            Ok(())
        }
    }
}

fn analyze(sh: &Shell, analyzer: &Path, run_dir: &Path, trace: &Path) -> Result<()> {
    let info = cmd!(sh, "{analyzer} info {trace}")
        .read()
        .context("hmb-trace-analyze info")?;
    println!("{info}");
    std::fs::write(run_dir.join("info.txt"), format!("{info}\n"))?;
    let report = run_dir.join("report.html");
    cmd!(sh, "{analyzer} report {trace} --output {report}")
        .run()
        .context("hmb-trace-analyze report")?;
    Ok(())
}

fn default_run_dir() -> PathBuf {
    target_dir().join("hmb-trace/runs").join(timestamp())
}

fn timestamp() -> String {
    let out = std::process::Command::new("date").arg("+%Y%m%d-%H%M%S").output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => format!(
            "{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs()
        ),
    }
}
