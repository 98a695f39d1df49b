//! `cargo xtask soak`: a long run, as a bench (docs/soak.md), not a test.
//!
//! * `--device ivshmem` (default): the guest (real module and daemon)
//!   streams for `--minutes` at `--rate` records/s with a controller reset
//!   injected every `--reset-every` seconds; at the end trace.bin must match
//!   the firmware model's ground truth, every skipped record covered by a
//!   LOST marker.
//! * `--device nvme`: the NVMe controller over vfio-user with the patched
//!   nvme.ko, nvme-hmb-trace.ko and the daemon, a dd loop on /dev/nvme0n1
//!   for the whole run and a device-side failure (CSTS.CFS) every
//!   `--reset-every` seconds; trace.bin must equal the controller's journal
//!   (harness/src/soak_nvme.rs).
//!
//! Figures are printed and written to `soak.json` in the run folder.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::Args;
use hmb_emu_device::control::Fault;
use hmb_emu_device::hmb::hmb_size_for;
use hmb_harness::guest_script::{self, files};
use hmb_harness::output_disk::{self, OutputDisk};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::QemuVersion;
use hmb_harness::qemu::Accel;
use hmb_harness::session::{self, Session, SessionConfig};
use hmb_harness::{interrupt, target_dir, truth, workspace_root};
use serde_json::json;
use xshell::Shell;

use crate::boot::Device;

#[derive(Args)]
pub struct Soak {
    /// Which device soaks: ivshmem (the ring over ivshmem-doorbell) or nvme
    /// (the NVMe controller over vfio-user, with guest I/O).
    #[arg(long, value_enum, default_value = "ivshmem")]
    pub device: Device,
    /// Minutes of streaming.
    #[arg(long, default_value_t = 10)]
    pub minutes: u64,
    /// Seconds between two injected resets.
    #[arg(long, default_value_t = 60)]
    pub reset_every: u64,
    /// ivshmem: records per second. 400 k/s, the highest rate found lossless
    /// on 6.1, was lossless for 10 minutes with 9 resets (docs/soak.md); it
    /// writes ~12 GB of trace.bin, and the host needs twice that free.
    #[arg(long, default_value_t = 400_000)]
    pub rate: u64,
    /// ivshmem: where the daemon writes trace.bin. `disk`: a scratch ext4
    /// disk (virtio-blk) sized for the run, read back with debugfs; `tmpfs`:
    /// the guest's /tmp, copied out through 9p at the end (half the guest's
    /// RAM: 100 k rec/s for 10 minutes needs 6 GiB of it).
    #[arg(long, value_enum, default_value = "disk")]
    pub output: Output,
    /// ivshmem: guest RAM in MiB (default 1024 with `--output disk`, 6144
    /// with `--output tmpfs`).
    #[arg(long)]
    pub guest_memory_mb: Option<u32>,
    /// Guest kernel, a name from images/KERNELS (default: its first line).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Run folder (default: target/hmb-trace/runs/soak-<device>-<timestamp>).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Output {
    Disk,
    Tmpfs,
}

impl Soak {
    pub fn run(self) -> Result<()> {
        if self.minutes == 0 || self.reset_every == 0 {
            bail!("--minutes and --reset-every must be at least 1");
        }
        self.check_tmpfs_room()?;
        // The ground-truth check of a 10-minute run covers ~2.4e8 records:
        // ~4 us each in a debug build (15 min), so the soak runs in a
        // release build of xtask.
        if cfg!(debug_assertions) && std::env::var_os(RELEASE_ENV).is_none() {
            println!("soak: running in a release build of xtask (the ground-truth check is long)");
            let status = std::process::Command::new("cargo")
                .args(["run", "--release", "--quiet", "--package", "xtask", "--"])
                .args(std::env::args_os().skip(1))
                .env(RELEASE_ENV, "1")
                .current_dir(workspace_root())
                .status()?;
            if !status.success() {
                bail!("the soak failed ({status})");
            }
            return Ok(());
        }
        let run_dir = self.run_dir.clone().unwrap_or_else(|| {
            let device = match self.device {
                Device::Ivshmem => "ivshmem",
                Device::Nvme => "nvme",
            };
            target_dir()
                .join("hmb-trace/runs")
                .join(format!("soak-{device}-{}", unix_secs()))
        });
        std::fs::create_dir_all(&run_dir)?;
        let mut phases = Phases::new();
        let result = match self.device {
            Device::Ivshmem => soak_ivshmem(&self, &run_dir, &mut phases),
            Device::Nvme => soak_nvme(&self, &run_dir, &mut phases),
        };
        phases.summary();
        let figures = result?;
        std::fs::write(
            run_dir.join("soak.json"),
            serde_json::to_string_pretty(&figures)? + "\n",
        )?;
        println!("run folder: {}", run_dir.display());
        println!("  soak.json      {}", run_dir.join("soak.json").display());
        if figures["passed"] != json!(true) {
            bail!(
                "the soak did not end clean: see {}",
                run_dir.join("soak.json").display()
            );
        }
        Ok(())
    }

    fn guest_memory_mb(&self) -> u32 {
        self.guest_memory_mb.unwrap_or(match self.output {
            Output::Disk => 1024,
            Output::Tmpfs => 6144,
        })
    }

    /// With `--output tmpfs`, trace.bin must fit in half the guest's RAM
    /// (the tmpfs): refused up front rather than ending in ENOSPC (the
    /// daemon's exit 11) minutes into the run.
    fn check_tmpfs_room(&self) -> Result<()> {
        let tmpfs = u64::from(self.guest_memory_mb()) << 19;
        if self.output == Output::Tmpfs && self.expected_output_bytes() > tmpfs {
            bail!(
                "~{:.1} GB of trace.bin does not fit the guest's tmpfs ({:.1} GB, half of --guest-memory-mb): \
                 use --output disk, a smaller --rate or --minutes, or more --guest-memory-mb",
                self.expected_output_bytes() as f64 / 1e9,
                tmpfs as f64 / 1e9
            );
        }
        Ok(())
    }

    /// trace.bin's size at ~50 bytes a record (the `ssd` workload's mean).
    fn expected_output_bytes(&self) -> u64 {
        self.rate * self.minutes * 60 * 50
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs(self.minutes * 60)
    }

    /// Reset times: every `reset_every` seconds, strictly inside the run.
    pub fn reset_times(&self) -> Vec<Duration> {
        (1..)
            .map(|i| Duration::from_secs(i * self.reset_every))
            .take_while(|t| *t < self.duration())
            .collect()
    }
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Set for the release re-run of the soak.
const RELEASE_ENV: &str = "HMB_SOAK_RELEASE";

/// The ring size of `cargo xtask boot`'s default.
const RING: u64 = 16 << 20;

fn soak_ivshmem(args: &Soak, run_dir: &std::path::Path, phases: &mut Phases) -> Result<serde_json::Value> {
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    let tools = session::prepare(&sh, args.kernel.as_deref(), QemuVersion::V7_2, phases)?;
    // A later -m overrides the session's 512 MiB.
    let mut extra_qemu_args = vec!["-m".to_string(), args.guest_memory_mb().to_string()];
    let disk = match args.output {
        Output::Disk => {
            let disk = phases.run("output disk", || {
                OutputDisk::create(&sh, &run_dir.join("output.img"), args.expected_output_bytes())
            })?;
            extra_qemu_args.extend(disk.qemu_args().iter().map(|a| a.to_string_lossy().into_owned()));
            Some(disk)
        }
        Output::Tmpfs => None,
    };
    let cfg = SessionConfig {
        run_dir: run_dir.to_path_buf(),
        accel: Accel::Tcg,
        keep: false,
        hmb_size: hmb_size_for(RING),
        guest_script: soak_script(tools.module()?, args.output),
        extra_qemu_args,
        extra_cmdline: Vec::new(),
    };
    let load_start = load_average();
    let mut s = Session::start(&tools, &cfg, phases)?;
    phases.run("module + daemon", || {
        s.wait_share_file(files::STARTED, Duration::from_secs(60))
    })?;
    let (streamed, resets) = phases.run("soak", || stream(args, &mut s))?;
    phases.run("drain", || s.dev.wait_drained(Duration::from_secs(120)))?;
    let ground_truth = s.dev.ground_truth()?;
    std::fs::write(
        run_dir.join("ground-truth.json"),
        serde_json::to_string_pretty(&ground_truth)?,
    )?;
    let stats = s.dev.stats()?;
    std::fs::write(run_dir.join("emu-stats.json"), serde_json::to_string_pretty(&stats)?)?;
    s.signal(files::STOP)?;
    // The guest copies trace.bin (GBs) from its tmpfs to the 9p share.
    let rc = phases.run("guest stop", || s.finish(Duration::from_secs(1800)))?;
    let daemon_rc = s.daemon_exit_codes();
    let trace = run_dir.join(files::TRACE);
    drop(s);
    if let Some(disk) = &disk {
        let bytes = phases.run("copy out of the disk", || disk.extract(&sh, files::TRACE, &trace))?;
        println!("    trace.bin: {:.2} GB", bytes as f64 / 1e9);
        // Sparse, but as large as what the guest wrote: not kept twice.
        std::fs::remove_file(&disk.image)?;
    }
    let report = phases.run("ground truth", || {
        truth::check(&trace, &ground_truth.segments, truth::live_ring(&stats))
    })?;
    let produced: u64 = ground_truth
        .segments
        .iter()
        .map(|g| g.end_seq.unwrap_or(g.first_seq) - g.first_seq)
        .sum();
    let secs = streamed.as_secs_f64();
    println!("soak (ivshmem, kernel {}):", tools.image.kernel_name);
    println!(
        "  {:.0} s at {} rec/s requested, {} resets injected, load average {} at the start, {} at the end",
        secs,
        args.rate,
        resets,
        load_start,
        load_average()
    );
    println!(
        "  produced {produced} records; trace.bin: {} records ({:.0} rec/s), {} epochs, {} lost and counted, \
         {} device drops after the last record",
        report.records,
        report.records as f64 / secs,
        report.epochs,
        report.lost_counted,
        report.trailing_device_drops
    );
    println!("  ground truth: {}", report.summary());
    let passed = report.passed() && rc == 0 && daemon_rc == [0];
    Ok(json!({
        "device": "ivshmem",
        "kernel": tools.image.kernel_name,
        "minutes": args.minutes,
        "seconds_streamed": secs,
        "rate_requested": args.rate,
        "output": format!("{:?}", args.output).to_lowercase(),
        "guest_memory_mb": args.guest_memory_mb(),
        "resets_injected": resets,
        "records_produced": produced,
        "records_in_trace": report.records,
        "payload_bytes": report.bytes,
        "rate_achieved": report.records as f64 / secs,
        "epochs": report.epochs,
        "lost_counted": report.lost_counted,
        "uncounted_gaps": report.uncounted_gaps,
        "missing_at_end": report.missing_at_end,
        "trailing_device_drops": report.trailing_device_drops,
        "duplicates": report.duplicates,
        "mismatches": report.mismatches.len(),
        "engine_totals": stats.engine_totals,
        "guest_rc": rc,
        "daemon_rc": daemon_rc,
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "passed": passed,
    }))
}

/// `guest_script::streaming` with `--follow` (the daemon follows the ring
/// across resets, new epochs) and the free space of the output noted.
///
/// * `disk`: the output disk is mounted over /tmp, where the daemon writes;
///   unmounted at the end (which flushes it), the host reads it back.
/// * `tmpfs`: trace.bin grows in the guest's RAM and goes to the share at
///   the end with 1 MiB writes (`collect`'s cp moved it at ~1.5 MB/s over
///   9p under TCG: 176 MB in two minutes).
fn soak_script(module: &str, output: Output) -> String {
    let (mount, unmount_or_copy) = match output {
        Output::Disk => (
            format!(
                "load_on_demand_modules\nmount -t ext4 {dev} /tmp || fail \"mounting the output disk\"\n",
                dev = output_disk::GUEST_DEVICE
            ),
            "step unmount\numount /tmp || fail \"unmounting the output disk\"\n".to_string(),
        ),
        Output::Tmpfs => (
            String::new(),
            format!(
                "step copy\n\
                 dd if=/tmp/{trace} of=\"$SHARE/{trace}\" bs=1048576 2>/dev/null || fail \"copying trace.bin\"\n\
                 rm -f /tmp/{trace}\n",
                trace = files::TRACE
            ),
        ),
    };
    guest_script::prelude(module)
        .body(&mount)
        .body(&format!(
            "step output \"$(grep ' /tmp ' /proc/mounts | tail -n 1 | cut -d ' ' -f 1-3), $(df -k | grep ' /tmp$' | tail -n 1)\"\n\
             load_module ring_size={RING}\nstart_daemon --follow\nwait_stop\nstop_daemon\n"
        ))
        .body(&unmount_or_copy)
        .body("collect\nexit 0\n")
        .build()
}

/// Produce for the whole run, a controller reset at every reset time.
fn stream(args: &Soak, s: &mut Session) -> Result<(Duration, u64)> {
    let mut pending = args.reset_times();
    pending.reverse();
    s.dev.start_workload("ssd", 1, args.rate)?;
    let start = Instant::now();
    let mut resets = 0;
    let mut last_report = Instant::now();
    while start.elapsed() < args.duration() {
        if pending.last().is_some_and(|t| start.elapsed() >= *t) {
            pending.pop();
            s.dev.inject(Fault::Reset)?;
            resets += 1;
            println!(
                "    {:>4.0} s: controller reset {resets}",
                start.elapsed().as_secs_f64()
            );
        }
        s.dev.check_alive()?;
        if interrupt::requested() {
            bail!("interrupted");
        }
        if last_report.elapsed() >= Duration::from_secs(30) {
            last_report = Instant::now();
            let st = s.dev.stats()?;
            println!(
                "    {:>4.0} s: {} records written, {} dropped (engines, as of the last stop)",
                start.elapsed().as_secs_f64(),
                st.engine_totals.written,
                st.engine_totals.dropped
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    s.dev.stop_workload()?;
    Ok((start.elapsed(), resets))
}

fn soak_nvme(args: &Soak, run_dir: &std::path::Path, phases: &mut Phases) -> Result<serde_json::Value> {
    let sh = Shell::new()?;
    sh.change_dir(workspace_root());
    let tools = hmb_harness::nvme_guest::prepare(&sh, args.kernel.as_deref(), true, phases)?;
    let load_start = load_average();
    let soak = hmb_harness::soak_nvme::run(
        &tools,
        run_dir,
        args.duration(),
        Duration::from_secs(args.reset_every),
        phases,
    )?;
    println!("soak (nvme, kernel {}):", soak.kernel);
    println!(
        "  {:.0} s, {} controller failures (CSTS.CFS) injected, {} driver recoveries seen, {} controller resets, \
         load average {} at the start, {} at the end",
        soak.seconds,
        soak.resets_injected,
        soak.driver_recoveries,
        soak.controller_resets,
        load_start,
        load_average()
    );
    println!(
        "  guest I/O: {} rounds of 256 KiB written and read back ({} MiB), {} failed",
        soak.io_rounds,
        soak.io_bytes >> 20,
        soak.io_failed_rounds
    );
    println!(
        "  trace: {} records ({:.0} rec/s) in epochs {:?}; {} dropped by the controller, {} counted as lost",
        soak.records,
        soak.records as f64 / soak.seconds,
        soak.epochs,
        soak.journal_dropped,
        soak.lost_counted
    );
    println!("  journal check: {}", soak.summary);
    let mut v = serde_json::to_value(&soak)?;
    v["device"] = json!("nvme");
    v["minutes"] = json!(args.minutes);
    v["load_average_start"] = json!(load_start);
    v["load_average_end"] = json!(load_average());
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soak(minutes: u64, reset_every: u64) -> Soak {
        Soak {
            device: Device::Ivshmem,
            minutes,
            reset_every,
            rate: 1,
            output: Output::Tmpfs,
            guest_memory_mb: Some(512),
            kernel: None,
            run_dir: None,
        }
    }

    #[test]
    fn resets_come_every_period_strictly_inside_the_run() {
        let secs = |s: &Soak| s.reset_times().iter().map(Duration::as_secs).collect::<Vec<_>>();
        assert_eq!(secs(&soak(10, 60)), (1..=9).map(|i| i * 60).collect::<Vec<_>>());
        assert_eq!(secs(&soak(1, 20)), vec![20, 40]);
        assert!(secs(&soak(1, 60)).is_empty());
    }

    #[test]
    fn the_guest_copies_trace_bin_out_after_the_daemon_stopped() {
        let s = soak_script("/lib/hmbt/nvme-hmb-trace.ko", Output::Tmpfs);
        // The body, after the prelude's function definitions.
        let daemon = s.rfind("start_daemon --follow").unwrap();
        let stop = s.rfind("stop_daemon\n").unwrap();
        let copy = s
            .rfind("dd if=/tmp/trace.bin of=\"$SHARE/trace.bin\" bs=1048576")
            .unwrap();
        assert!(daemon < stop && stop < copy && copy < s.rfind("\ncollect\n").unwrap());
    }

    #[test]
    fn a_tmpfs_run_that_cannot_fit_is_refused() {
        let mut s = soak(10, 60);
        s.rate = 400_000;
        s.guest_memory_mb = Some(6144);
        assert!(s.check_tmpfs_room().is_err(), "12 GB in a 3 GiB tmpfs");
        s.rate = 100_000;
        assert!(s.check_tmpfs_room().is_ok(), "3.0 GB in 3.2 GB, the 2 December run");
        s.output = Output::Disk;
        s.rate = 400_000;
        assert!(s.check_tmpfs_room().is_ok());
    }

    #[test]
    fn on_the_disk_the_daemon_writes_to_the_mounted_disk_and_it_is_unmounted_before_the_end() {
        let s = soak_script("/lib/hmbt/nvme-hmb-trace.ko", Output::Disk);
        let mount = s.rfind("mount -t ext4 /dev/vda /tmp").unwrap();
        let daemon = s.rfind("start_daemon --follow").unwrap();
        let stop = s.rfind("stop_daemon\n").unwrap();
        let unmount = s.rfind("umount /tmp").unwrap();
        assert!(mount < daemon && daemon < stop && stop < unmount && unmount < s.rfind("\ncollect\n").unwrap());
        assert!(!s.contains("dd if=/tmp/trace.bin"), "no copy through 9p");
    }
}
