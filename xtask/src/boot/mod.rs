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

use hmb_emu_device::ivshmem::hmb::hmb_size_for;
use hmb_harness::guest::BootError;
use hmb_harness::guest_script::{self, files};
use hmb_harness::ivshmem_session::{self, Session, SessionConfig};
pub use hmb_harness::nvme_checks::Checks;
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::qemu::Accel;
use hmb_harness::{interrupt, ivshmem_truth, target_dir, workspace_root};
use hmb_nvme_trace::ProducerKind;
use inject::Injection;

use crate::flags::GuestArgs;

/// `--device`: nvme (the default: the patch series' nvme.ko lends the
/// controller the HMB, the module and the daemon carry its trace, checked
/// against the controller's journal) or ivshmem. Without --device, an
/// ivshmem-only option (--workload, --rate, --duration, --ring-size,
/// --seed, --keep, a timed --inject) selects ivshmem.
#[derive(Args, Clone)]
pub struct Boot {
    #[command(flatten)]
    pub guest: GuestArgs,
    /// QEMU to run: trixie-backports' 11.1 (nvme, the only one with
    /// vfio-user-pci), bookworm's 7.2 (ivshmem's default) or 10.0.
    #[arg(long, value_enum)]
    pub qemu: Option<QemuVersion>,
    /// ivshmem: firmware workload: ssd (default), npu, sizes,
    /// sizes:fixed=N, sizes:uniform=A-B.
    #[arg(long)]
    pub workload: Option<String>,
    /// ivshmem: records per second (0 = as fast as possible; default 2000).
    #[arg(long)]
    pub rate: Option<u64>,
    /// ivshmem: seconds of production (default 3).
    #[arg(long)]
    pub duration: Option<f64>,
    /// ivshmem: ring data area in bytes (power of two, 8 KiB..1 GiB; K/M
    /// suffixes allowed; default 16M). On nvme the ring is the series'
    /// `hmb_trace_kb` (16 MiB).
    #[arg(long, value_parser = parse_size)]
    pub ring_size: Option<u64>,
    /// ivshmem: workload seed, the same seed gives the same records (default 1).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Faults: reset[@SECS] (controller reset), stall@SECS:DUR (QMP stop/cont
    /// of the guest, a real overflow). Repeatable. With --device nvme: one
    /// `reset`, a device-side failure (CSTS.CFS) after reset_controller.
    #[arg(long)]
    pub inject: Vec<Injection>,
    /// nvme: 4 KiB O_DIRECT reads timed for the QD1 figure (default 2000).
    #[arg(long)]
    pub nvme_reads: Option<u32>,
    /// nvme: the kernel's stock nvme.ko and no trace: the controller and
    /// its HMB alone, as any Linux host sees them.
    #[arg(long)]
    pub stock_driver: bool,
    /// nvme: which producer writes the controller's trace ring: rust (the
    /// firmware model, default) or c (firmware-sdk's C library, the code
    /// SSD firmware links; docs/firmware-sdk.md).
    #[arg(long)]
    pub producer: Option<ProducerKind>,
    /// nvme: put the controller behind QEMU's intel-iommu and boot the
    /// guest with intel_iommu=on, so the controller sees IOVAs, not guest
    /// physical addresses (issue 26).
    #[arg(long)]
    pub viommu: bool,
    /// nvme: which checks the boot makes. main (the default): the probe
    /// and the HMB, data written and read back, reset_controller (the HMB
    /// back with MR=1, a second epoch), 2000 QD1 reads, trace.bin byte for
    /// byte against the controller's journal, the analyzer's report. full:
    /// also the QD32 reads, NVMe Telemetry beside the trace, poll(2)
    /// wake-up latency, the ring's chunk mapping, module removal with a
    /// reader, the personalities of issue 26 and two controllers in one
    /// guest (what `cargo xtask test` runs on every kernel).
    #[arg(long, value_enum)]
    pub checks: Option<Checks>,
}

impl Boot {
    pub fn workload(&self) -> &str {
        self.workload.as_deref().unwrap_or("ssd")
    }
    pub fn rate(&self) -> u64 {
        self.rate.unwrap_or(2000)
    }
    pub fn duration(&self) -> f64 {
        self.duration.unwrap_or(3.0)
    }
    pub fn ring_size(&self) -> u64 {
        self.ring_size.unwrap_or(16 << 20)
    }
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or(1)
    }

    fn ivshmem_options(&self) -> Vec<&'static str> {
        [
            ("--workload", self.workload.is_some()),
            ("--rate", self.rate.is_some()),
            ("--duration", self.duration.is_some()),
            ("--ring-size", self.ring_size.is_some()),
            ("--seed", self.seed.is_some()),
            ("--keep", self.guest.keep),
            (
                "--inject with a time or a stall",
                self.inject.iter().any(|i| *i != Injection::Reset { at: None }),
            ),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    /// The device asked for; without --device, ivshmem when an option only
    /// it has was given, else nvme.
    pub fn device(&self) -> Device {
        match self.guest.device {
            Some(d) => d,
            None if !self.ivshmem_options().is_empty() => Device::Ivshmem,
            None => Device::Nvme,
        }
    }

    /// Options of the other device are refused, not ignored.
    fn check_device_options(&self) -> Result<()> {
        let (device, foreign): (&str, Vec<&str>) = match self.device() {
            Device::Nvme => ("nvme", self.ivshmem_options()),
            Device::Ivshmem => (
                "ivshmem",
                [
                    ("--nvme-reads", self.nvme_reads.is_some()),
                    ("--stock-driver", self.stock_driver),
                    ("--producer", self.producer.is_some()),
                    ("--viommu", self.viommu),
                    ("--checks", self.checks.is_some()),
                ]
                .into_iter()
                .filter_map(|(name, given)| given.then_some(name))
                .collect(),
            ),
        };
        if !foreign.is_empty() {
            let other = if device == "nvme" { "ivshmem" } else { "nvme" };
            bail!(
                "{} {} the {other} device's; on --device {device} the records are {}. Add --device {other}.",
                foreign.join(", "),
                if foreign.len() == 1 { "is" } else { "are" },
                if device == "nvme" {
                    "the guest's own NVMe commands"
                } else {
                    "the firmware model's workload"
                }
            );
        }
        Ok(())
    }
}

pub use crate::flags::Device;

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
    pub truth: ivshmem_truth::TruthReport,
}

impl Boot {
    pub fn run(self, sh: &Shell) -> Result<()> {
        run(self, sh)
    }
}

fn run(args: Boot, sh: &Shell) -> Result<()> {
    args.check_device_options()?;
    let mut phases = Phases::new();
    if args.guest.device.is_none() && args.device() == Device::Ivshmem {
        println!(
            "device: ivshmem ({} given; the default device is nvme)",
            args.ivshmem_options().join(", ")
        );
    }
    if args.device() == Device::Nvme {
        let run_dir = args.guest.run_dir.or_else(default_run_dir);
        let result = nvme::boot(sh, &args, &run_dir, &mut phases);
        phases.summary();
        nvme::print(&result?, &run_dir);
        return Ok(());
    }
    let result = boot(sh, &args, &mut phases);
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
pub fn boot(sh: &Shell, args: &Boot, phases: &mut Phases) -> Result<RunOutcome> {
    if args.device() != Device::Ivshmem {
        bail!("the trace main job runs on --device ivshmem; --device nvme is nvme::boot");
    }
    sh.change_dir(workspace_root());
    let qemu = args.qemu.unwrap_or(QemuVersion::V7_2);
    let tools = ivshmem_session::prepare(sh, args.guest.kernel.name(), qemu, phases)?;
    let run_dir = args.guest.run_dir.or_else(default_run_dir);
    let follow = args.inject.iter().any(|i| matches!(i, Injection::Reset { .. }));
    let memory_mb = guest_memory_mb(args.rate(), args.duration());
    let cfg = SessionConfig {
        run_dir: run_dir.clone(),
        accel: args.guest.accel.accel,
        keep: args.guest.keep,
        hmb_size: hmb_size_for(args.ring_size()),
        guest_script: guest_script::streaming(
            tools.module()?,
            &format!("ring_size={}", args.ring_size()),
            if follow { "--follow" } else { "" },
        ),
        extra_qemu_args: [
            vec!["-m".into(), memory_mb.to_string()],
            tcg_copy_cpu(args.guest.accel.accel),
        ]
        .concat(),
        extra_cmdline: Vec::new(),
    };
    let mut s = Session::start(&tools, &cfg, phases)?;
    phases.run("module + daemon", || {
        s.wait_share_file(files::STARTED, Duration::from_secs(60))
    })?;
    phases.run("workload", || produce(args, &mut s))?;
    phases.run("drain", || s.wait_drained(Duration::from_secs(60)))?;
    let (ground_truth, stats) = s.dev.save_truth(&run_dir)?;
    s.signal(files::STOP)?;
    if args.guest.keep {
        println!("--keep: the guest shell is on this terminal; `poweroff -f` ends the VM");
    }
    // The guest copies trace.bin to the share before it powers off: 2.5 MB/s
    // through 9p under TCG on a loaded machine, so a bigger run (more guest
    // RAM, see guest_memory_mb) gets longer.
    let timeout = Duration::from_secs(if args.guest.keep {
        86_400
    } else {
        60 + (memory_mb - 512) / 2
    });
    let result = phases.run("guest stop", || s.finish(timeout))?;
    BootError::check_script("the guest job", result, || {
        format!("see {}", run_dir.join("console.log").display())
    })?;
    let dmesg = std::fs::read_to_string(run_dir.join(files::DMESG)).context("the guest saved no dmesg.txt")?;
    hmb_harness::qemu::kernel_checks::verify_active(&dmesg, tools.image.has_kfence)?;
    let daemon_rc = s.daemon_exit_codes();
    if daemon_rc != [0] {
        bail!(
            "hmb-trace-daemon exited with {daemon_rc:?}; see {}",
            run_dir.join(files::DAEMON_STDERR).display()
        );
    }
    let trace = run_dir.join(files::TRACE);
    let report = phases.run("ground truth", || {
        ivshmem_truth::check(&trace, &ground_truth.segments, ivshmem_truth::live_ring(&stats))
    })?;
    phases.run("analyze", || analyze(sh, &tools.analyzer_bin, &run_dir, &trace))?;
    Ok(RunOutcome { run_dir, truth: report })
}

/// Under TCG, the guest CPU without ERMS and FSRM (a later `-cpu` replaces
/// the machine's `-cpu max`). With them the guest kernel copies with `rep
/// movsb`, which TCG runs one byte per iteration, and the daemon's
/// `writev` from the ring (the ivshmem BAR) into /tmp alternates two pages
/// that evict each other from QEMU's direct-mapped soft TLB on every byte:
/// a quarter of QEMU's time went to victim-TLB swaps. Without them the
/// kernel copies 8 bytes per iteration; the guest drained 0.42-0.43 of
/// what an unthrottled producer wrote instead of 0.19 at the same load
/// (docs/performance.md, "The guest's drain under load").
/// Nothing under KVM (`-cpu host`), nor for `Auto` where /dev/kvm exists.
fn tcg_copy_cpu(accel: Accel) -> Vec<String> {
    let tcg = match accel {
        Accel::Tcg => true,
        Accel::Kvm => false,
        Accel::Auto => !Path::new("/dev/kvm").exists(),
    };
    match tcg {
        true => vec!["-cpu".into(), "max,-erms,-fsrm".into()],
        false => Vec::new(),
    }
}

/// Guest RAM for a run: trace.bin grows in the guest's /tmp, a tmpfs of
/// half the RAM, until the host copies it out at the end. Sized for the
/// records the run can produce at ~64 bytes each, twice over, plus room
/// for the system; an unthrottled run (`--rate 0`) is sized for 5 M
/// records/s, above the 3.07 M a TCG guest without ERMS drained on a
/// loaded machine (`tcg_copy_cpu`; 775 MB of trace.bin in 5 s, which the
/// 2 M/s sizing's 867 MB /tmp nearly did not hold). (At 512 MiB a 5 s
/// unthrottled run on an idle machine filled /tmp after 4.7 M records and
/// the daemon stopped with exit 11, output full.)
fn guest_memory_mb(rate: u64, duration_s: f64) -> u64 {
    const BASE_MB: u64 = 512;
    const RECORD_BYTES: f64 = 64.0;
    const UNTHROTTLED_PER_S: f64 = 5e6;
    let per_s = if rate == 0 { UNTHROTTLED_PER_S } else { rate as f64 };
    let trace_mb = (per_s * duration_s * RECORD_BYTES / f64::from(1 << 20)).ceil() as u64;
    (BASE_MB + 2 * trace_mb).clamp(BASE_MB, 8192)
}

fn produce(args: &Boot, s: &mut Session) -> Result<()> {
    let duration = Duration::from_secs_f64(args.duration());
    let mut pending: Vec<Injection> = args.inject.clone();
    pending.sort_by_key(|i| i.at(duration));
    s.dev.start_workload(args.workload(), args.seed(), args.rate())?;
    let start = Instant::now();
    while start.elapsed() < duration {
        if let Some(next) = pending.first().copied() {
            if start.elapsed() >= next.at(duration) {
                pending.remove(0);
                fire(next, s)?;
                continue;
            }
        }
        s.dev.check_alive()?;
        s.check_daemon_running()?;
        if interrupt::requested() {
            bail!("interrupted");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s.dev.stop_workload()
}

fn fire(injection: Injection, s: &mut Session) -> Result<()> {
    match injection {
        Injection::Reset { .. } => {
            println!("    inject: controller reset");
            s.dev.inject(Fault::Reset).map(drop)
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

pub fn analyze(sh: &Shell, analyzer: &Path, run_dir: &Path, trace: &Path) -> Result<()> {
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

pub fn default_run_dir() -> PathBuf {
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

#[cfg(test)]
mod tests {
    use super::guest_memory_mb;

    #[test]
    fn checks_is_an_nvme_option_main_unless_full_is_asked_for() {
        use super::{Boot, Checks, Device};
        let parse = |argv: &[&str]| crate::flags::parse::<Boot>(argv);
        let plain = parse(&["boot"]).unwrap();
        assert_eq!(
            (plain.device(), plain.checks.unwrap_or_default()),
            (Device::Nvme, Checks::Main)
        );
        let full = parse(&["boot", "--checks", "full"]).unwrap();
        assert_eq!((full.device(), full.checks), (Device::Nvme, Some(Checks::Full)));
        full.check_device_options().unwrap();
        let ivshmem = parse(&["boot", "--device", "ivshmem", "--checks", "full"]).unwrap();
        let e = ivshmem.check_device_options().unwrap_err().to_string();
        assert!(e.contains("--checks") && e.contains("--device nvme"), "{e}");
        assert!(parse(&["boot", "--checks", "most"]).is_err());
    }

    #[test]
    fn only_a_tcg_guest_loses_the_byte_copy_features() {
        use hmb_harness::qemu::Accel;
        assert_eq!(super::tcg_copy_cpu(Accel::Tcg).join(" "), "-cpu max,-erms,-fsrm");
        assert!(super::tcg_copy_cpu(Accel::Kvm).is_empty());
    }

    #[test]
    fn guest_memory_grows_with_what_the_run_can_produce() {
        // The default run (2000 records/s for 3 s) needs no more than the base.
        assert_eq!(guest_memory_mb(2000, 3.0), 514);
        // Unthrottled for 5 s: 5 M/s x 64 B x 5 s = 1526 MiB of trace, twice over.
        assert_eq!(guest_memory_mb(0, 5.0), 512 + 2 * 1526);
        // Never beyond 8 GiB, however long the run.
        assert_eq!(guest_memory_mb(0, 3600.0), 8192);
    }
}
