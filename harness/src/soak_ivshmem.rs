//! The ivshmem soak (`cargo xtask soak --device ivshmem`, docs/soak.md):
//! the guest (real module and daemon) streams for `duration` at `rate`
//! records/s with a controller reset injected every `reset_every`; at the
//! end trace.bin must match the firmware model's ground truth, every
//! skipped record covered by a LOST marker. The NVMe soak is `soak_nvme`.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use hmb_emu_device::control::Fault;
use hmb_emu_device::ivshmem::hmb::hmb_size_for;
use serde_json::json;
use xshell::Shell;

use crate::guest_script::{self, files};
use crate::host::{load_average, workspace_root};
use crate::ivshmem_session::{self, Session, SessionConfig};
use crate::output_disk::{self, OutputDisk};
use crate::phases::{Every, Phases};
use crate::qemu::binary::QemuVersion;
use crate::qemu::Accel;
use crate::{interrupt, ivshmem_truth};

/// Where the daemon writes trace.bin.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Output {
    /// A scratch ext4 disk (virtio-blk) sized for the run, read back with debugfs.
    Disk,
    /// The guest's /tmp, copied out through 9p at the end (half the guest's RAM).
    Tmpfs,
}

/// What an ivshmem soak runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// A name from images/KERNELS (default: its first line).
    pub kernel: Option<String>,
    pub minutes: u64,
    /// Seconds between two injected resets.
    pub reset_every: u64,
    /// Records per second.
    pub rate: u64,
    pub output: Output,
    /// Guest RAM in MiB (default 1024 with `Output::Disk`, 6144 with `Output::Tmpfs`).
    pub guest_memory_mb: Option<u32>,
}

/// The ring size of `cargo xtask boot`'s default.
const RING: u64 = 16 << 20;

impl Options {
    pub(crate) fn guest_memory_mb(&self) -> u32 {
        self.guest_memory_mb.unwrap_or(match self.output {
            Output::Disk => 1024,
            Output::Tmpfs => 6144,
        })
    }

    /// With `Output::Tmpfs`, trace.bin must fit in half the guest's RAM
    /// (the tmpfs): refused up front rather than ending in ENOSPC (the
    /// daemon's exit 11) minutes into the run.
    pub fn check_tmpfs_room(&self) -> Result<()> {
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

    pub(crate) fn duration(&self) -> Duration {
        Duration::from_secs(self.minutes * 60)
    }

    /// Reset times: every `reset_every` seconds, strictly inside the run.
    pub(crate) fn reset_times(&self) -> Vec<Duration> {
        (1..)
            .map(|i| Duration::from_secs(i * self.reset_every))
            .take_while(|t| *t < self.duration())
            .collect()
    }
}

/// Run the soak in `run_dir`; its figures (soak.json), printed too.
pub fn run(sh: &Shell, args: &Options, run_dir: &Path, phases: &mut Phases) -> Result<serde_json::Value> {
    let _dir = sh.push_dir(workspace_root());
    let tools = ivshmem_session::prepare(sh, args.kernel.as_deref(), QemuVersion::V7_2, phases)?;
    // A later -m overrides the session's 512 MiB.
    let mut extra_qemu_args = vec!["-m".to_string(), args.guest_memory_mb().to_string()];
    let disk = match args.output {
        Output::Disk => {
            let disk = phases.run("output disk", || {
                OutputDisk::create(sh, &run_dir.join("output.img"), args.expected_output_bytes())
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
    let (ground_truth, stats) = s.dev.save_truth(run_dir)?;
    s.signal(files::STOP)?;
    // The guest copies trace.bin (GBs) from its tmpfs to the 9p share.
    let rc = phases.run("guest stop", || s.finish(Duration::from_secs(1800)))?;
    let daemon_rc = s.daemon_exit_codes();
    let trace = run_dir.join(files::TRACE);
    drop(s);
    if let Some(disk) = &disk {
        let bytes = phases.run("copy out of the disk", || disk.extract(sh, files::TRACE, &trace))?;
        println!("    trace.bin: {:.2} GB", bytes as f64 / 1e9);
        // Sparse, but as large as what the guest wrote: not kept twice.
        std::fs::remove_file(&disk.image)?;
    }
    let report = phases.run("ground truth", || {
        ivshmem_truth::check(&trace, &ground_truth.segments, ivshmem_truth::live_ring(&stats))
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

/// The prelude and harness/guest-scripts/ivshmem-soak.sh: the daemon
/// follows the ring (`--follow`) into the `output` (the file says how each
/// is mounted and emptied).
fn soak_script(module: &str, output: Output) -> String {
    guest_script::prelude(module)
        .set(
            "OUTPUT",
            match output {
                Output::Disk => "disk",
                Output::Tmpfs => "tmpfs",
            },
        )
        .set("OUTPUT_DEVICE", output_disk::GUEST_DEVICE)
        .set("RING_SIZE", RING)
        .file(&guest_script::IVSHMEM_SOAK)
        .build()
}

/// Produce for the whole run, a controller reset at every reset time.
fn stream(args: &Options, s: &mut Session) -> Result<(Duration, u64)> {
    let mut pending = args.reset_times();
    pending.reverse();
    s.dev.start_workload("ssd", 1, args.rate)?;
    let start = Instant::now();
    let mut resets = 0;
    let mut report = Every::new(Duration::from_secs(30));
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
        if report.due() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn soak(minutes: u64, reset_every: u64) -> Options {
        Options {
            kernel: None,
            minutes,
            reset_every,
            rate: 1,
            output: Output::Tmpfs,
            guest_memory_mb: Some(512),
        }
    }

    #[test]
    fn resets_come_every_period_strictly_inside_the_run() {
        let secs = |s: &Options| s.reset_times().iter().map(Duration::as_secs).collect::<Vec<_>>();
        assert_eq!(secs(&soak(10, 60)), (1..=9).map(|i| i * 60).collect::<Vec<_>>());
        assert_eq!(secs(&soak(1, 20)), vec![20, 40]);
        assert!(secs(&soak(1, 60)).is_empty());
    }

    #[test]
    fn the_guest_copies_trace_bin_out_after_the_daemon_stopped() {
        let s = soak_script("/lib/hmbt/nvme-hmb-trace.ko", Output::Tmpfs);
        assert!(s.contains("OUTPUT='tmpfs'\n") && s.contains(&format!("RING_SIZE='{RING}'\n")));
        // The body, after the prelude's function definitions.
        let daemon = s.rfind("start_daemon --follow").unwrap();
        let stop = s.rfind("stop_daemon\n").unwrap();
        let copy = s
            .rfind("dd if=\"/tmp/$TRACE\" of=\"$SHARE/$TRACE\" bs=1048576")
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
        assert!(s.contains("OUTPUT='disk'\n") && s.contains("OUTPUT_DEVICE='/dev/vda'\n"));
        let mount = s.rfind("mount -t ext4 \"$OUTPUT_DEVICE\" /tmp").unwrap();
        let daemon = s.rfind("start_daemon --follow").unwrap();
        let stop = s.rfind("stop_daemon\n").unwrap();
        let unmount = s.rfind("umount /tmp").unwrap();
        let copy = s.rfind("dd if=\"/tmp/$TRACE\"").unwrap();
        assert!(mount < daemon && daemon < stop && stop < unmount && unmount < copy);
        // On the disk the copy through 9p is the other branch's.
        assert!(s[unmount..copy].contains("else\n"), "no copy through 9p");
        assert!(copy < s.rfind("\ncollect\n").unwrap());
    }
}
