//! The host integration in a full Debian guest (issue 19): systemd and
//! systemd-udevd boot from a debootstrapped disk image
//! (`images::debian_root`) on the project's kernel, with emu-device's
//! ivshmem controller attached; the guest installs the module through DKMS,
//! loads it with modprobe, gets the node from the shipped udev rule, runs
//! the daemon under the shipped systemd unit, survives a SIGKILL of it,
//! and removes everything again (`script`). The host drives the producer
//! and checks trace.bin against emu-device's ground truth: exactly once
//! across the restart. See docs/host-integration.md.
//!
//! The same boot carries emu-device's NVMe controller (`serve-nvme` over
//! vfio-user, hence QEMU 11.1 and memfd guest RAM): before the module's
//! steps the guest drives it with Debian's nvme-cli, fio, blkdiscard and
//! e2fsprogs, checked against the controller (`nvme_tools`); `nvme_bench`
//! boots the same guest for fio figures beside QEMU's own nvme.
//!
//! QEMU and both emu-devices are owned here (`Vm`, `EmuDevice`,
//! `NvmeDevice`): all are killed on every exit path (drop, Ctrl-C, our
//! death through PDEATHSIG).

pub mod nvme_bench;
pub(crate) mod nvme_tools;
pub(crate) mod nvme_traced;
pub(crate) mod script;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::emu::EmuDevice;
use crate::guest::devices::RootPort;
use crate::guest::{BootError, FirstLine, GuestDevice};
use crate::guest_script::ScriptFile;
use crate::host::apt::{self, Need};
use crate::host::{cache_dir, lock_cache, target_dir, workspace_root};
use crate::images::{self, debian_root, dkms_prebuilt, fetch, kernels, kmod_build, toolchain};
use crate::ivshmem_truth::{self, TruthReport};
use crate::nvme_guest::NvmeDevice;
use crate::phases::Phases;
use crate::qemu::binary::{self, QemuVersion};
use crate::qemu::{console, Vm, VmConfig, WaitError};
use script::files;

/// The ring size the module uses by default (its `ring_size` parameter is
/// not given: modprobe loads it as a user would).
const MODULE_DEFAULT_RING: u64 = 16 << 20;

pub struct Options {
    /// A name from images/KERNELS (default: its first line).
    pub kernel: Option<String>,
    pub run_dir: PathBuf,
    pub workload: String,
    pub seed: u64,
    /// Records per second.
    pub rate: u64,
    /// How long the device produces before the daemon is killed, and again
    /// after systemd has restarted it.
    pub produce: Duration,
}

pub struct Outcome {
    pub truth: TruthReport,
    /// What nvme-cli, fio and e2fsprogs saw of emu-device's NVMe controller.
    pub nvme: nvme_tools::ToolsOutcome,
    /// The traced run on the NVMe controller (series nvme.ko, module, daemon).
    pub traced: nvme_traced::TracedOutcome,
}

/// Everything prepared before the guest starts.
struct Prepared {
    boot_kernel: PathBuf,
    /// The kernel has KFENCE (qemu::kernel_checks::verify_active).
    has_kfence: bool,
    image: debian_root::DebianRoot,
    module: dkms_prebuilt::Prebuilt,
    qemu: binary::QemuBinary,
    emu_bin: PathBuf,
    daemon_bin: PathBuf,
    /// The patch series' nvme.ko for the traced run (`nvme_traced`).
    series_nvme: PathBuf,
}

pub fn run(sh: &Shell, opts: &Options, phases: &mut Phases) -> Result<Outcome> {
    let p = prepare(sh, opts.kernel.as_deref(), phases)?;
    std::fs::create_dir_all(&opts.run_dir).with_context(|| format!("creating {}", opts.run_dir.display()))?;
    // Only our own files: the run folder may be one the user named.
    for stale in [
        files::TRACE,
        files::LOG,
        files::JOURNAL,
        files::DMESG,
        "ground-truth.json",
        "emu-stats.json",
        "console.1.log",
        nvme_tools::BACKING,
        nvme_tools::EXPORT,
        nvme_tools::STATUS_FILE,
    ] {
        let _ = std::fs::remove_file(opts.run_dir.join(stale));
    }
    let share = opts.run_dir.join("share");
    phases.run("share", || fill_share(sh, &p, &share))?;
    let (mut emu, mut nvme, mut vm) =
        phases.run("boot to systemd and the check", || boot(&p, &opts.run_dir, &share, &[]))?;
    let mut guest = Guest {
        vm: &mut vm,
        emu: &mut emu,
        nvme: &mut nvme,
        share: &share,
    };
    let driven = drive(&mut guest, opts, phases);
    // Stop both on every path (drop would too), then keep what the guest
    // left in the share beside console.log, also after a failure.
    if driven.is_err() {
        // The script's fail() saves the journal and dmesg, then prints its result.
        let _ = vm.wait_for("HMBT-RESULT", Duration::from_secs(30), |l| {
            console::parse_result(l).is_some()
        });
    }
    vm.kill();
    emu.shutdown();
    nvme.shutdown();
    for dir in [nvme_tools::DIR, nvme_traced::DIR] {
        let _ = std::fs::remove_dir_all(opts.run_dir.join(dir));
    }
    for name in [
        files::TRACE,
        files::LOG,
        files::JOURNAL,
        files::DMESG,
        nvme_tools::DIR,
        nvme_traced::DIR,
    ] {
        let from = share.join(name);
        if from.exists() {
            std::fs::rename(&from, opts.run_dir.join(name))?;
        }
    }
    let (rc, ground_truth, stats, tools, traced) = driven.with_context(|| {
        format!(
            "the full-guest check failed; see {} and {}",
            opts.run_dir.join(files::LOG).display(),
            opts.run_dir.join("console.log").display()
        )
    })?;
    BootError::check_script("the full-guest check", rc, || {
        format!("see {}", opts.run_dir.join(files::LOG).display())
    })?;
    // The journal keeps the kernel's boot lines even if a busy systemd boot
    // has pushed them out of the kernel's ring buffer by the time of dmesg.
    let mut kernel_log =
        std::fs::read_to_string(opts.run_dir.join(files::DMESG)).context("the full guest saved no dmesg")?;
    kernel_log.push_str(&std::fs::read_to_string(opts.run_dir.join(files::JOURNAL)).unwrap_or_default());
    crate::qemu::kernel_checks::verify_active(&kernel_log, p.has_kfence)?;
    let trace = opts.run_dir.join(files::TRACE);
    let report = phases.run("ground truth", || {
        ivshmem_truth::check(&trace, &ground_truth.segments, ivshmem_truth::live_ring(&stats))
    })?;
    if report.records == 0 {
        bail!("trace.bin holds no record: the device produced nothing the daemon saw");
    }
    Ok(Outcome {
        truth: report,
        nvme: tools,
        traced,
    })
}

/// What `drive` returns: the script's exit code, the ivshmem device's
/// ground truth and statistics, and the NVMe tools' checked answers.
type Driven = (
    i32,
    hmb_emu_device::ivshmem::report::GroundTruth,
    hmb_emu_device::ivshmem::report::Stats,
    nvme_tools::ToolsOutcome,
    nvme_traced::TracedOutcome,
);

/// The host's side of the check, from the guest's first line to its
/// result: the NVMe tools' answers checked against the controller, then
/// the script's exit code and the device's ground truth and statistics,
/// taken once the ring was drained.
fn drive(guest: &mut Guest, opts: &Options, phases: &mut Phases) -> Result<Driven> {
    let tools = phases.run("nvme-cli, fio, blkdiscard, mkfs.ext4 on the NVMe controller", || {
        nvme_tools::inject_firmware_assert(guest.nvme, guest.share)?;
        // The guest's two Host-Initiated pulls: the controller's view after each.
        let mut telemetry_looks = Vec::new();
        for name in nvme_tools::TELEMETRY_ASKS {
            let (ask, done) = nvme_tools::ask_files(name);
            guest.wait_file(&ask, Duration::from_secs(600))?;
            telemetry_looks.push(nvme_tools::telemetry_look(guest.nvme, &opts.run_dir, name)?);
            std::fs::write(guest.share.join(done), b"")?;
        }
        let telemetry_looks: [serde_json::Value; 2] = telemetry_looks.try_into().expect("one look per name");
        // The guest's fio job across a Controller Fatal Status asks for it.
        guest.wait_file(
            &nvme_tools::fatal_files(nvme_tools::FATAL_TAG).0,
            Duration::from_secs(900),
        )?;
        nvme_tools::inject_fatal(guest.nvme, guest.share, &opts.run_dir, nvme_tools::FATAL_TAG, 0)?;
        // The guest's fio job across the HMB released and returned asks for
        // the host's looks at the controller.
        let mut looks = Vec::new();
        for name in nvme_tools::HMB_ASKS {
            let (ask, done) = nvme_tools::ask_files(name);
            guest.wait_file(&ask, Duration::from_secs(600))?;
            looks.push(nvme_tools::hmb_look(guest.nvme, &opts.run_dir, name)?);
            std::fs::write(guest.share.join(done), b"")?;
        }
        let [(before, _), (released, _), (returned, audit)]: [(serde_json::Value, serde_json::Value); 3] =
            looks.try_into().expect("one look per name");
        let hmb = nvme_tools::check_hmb_toggle(&nvme_tools::HmbLooks {
            before,
            released,
            returned,
            audit,
        })
        .context("the map cache across the HMB released and returned under fio verify")?;
        guest.wait_file(nvme_tools::DONE, Duration::from_secs(900))?;
        let status = guest.nvme.status()?;
        std::fs::write(
            opts.run_dir.join(nvme_tools::STATUS_FILE),
            serde_json::to_string_pretty(&status)?,
        )?;
        let dir = guest.share.join(nvme_tools::DIR);
        let mut tools = nvme_tools::check_outputs(&dir, &status)?;
        tools.hmb_toggle = Some(hmb);
        let truth = guest.nvme.request(&hmb_emu_device::control::Request::GroundTruth)?;
        tools.assert_capture = Some(nvme_tools::check_assert_capture(&dir, &truth)?);
        tools.host_telemetry = Some(nvme_tools::check_host_telemetry(&dir, &telemetry_looks, &truth)?);
        let untraced = nvme_traced::untraced(&crate::journal_truth::journal_from_ground_truth(&truth)?)?;
        // The file system as the guest left it, before the traced run
        // writes over the namespace (the guest waits for OK, idle; every
        // page it wrote is programmed in the backing file's FTL region, so
        // a read-only recovery of that file exports it).
        nvme_tools::check_media(&opts.run_dir.join(nvme_tools::BACKING), &dir)
            .context("nvme media (e2fsck, debugfs on the namespace exported from the backing file)")?;
        std::fs::write(guest.share.join(nvme_tools::OK), b"")?;
        Ok((tools, status, untraced))
    })?;
    let (tools, tools_status, untraced_before) = tools;
    println!("    nvme: {}", tools.summary());
    phases.run("DKMS install, modprobe, udev, users, unit start", || {
        guest.wait_file(files::STARTED, Duration::from_secs(600))
    })?;
    phases.run("produce, SIGKILL, systemd restart, produce", || {
        guest.emu.start_workload(&opts.workload, opts.seed, opts.rate)?;
        guest.produce_for(opts.produce)?;
        std::fs::write(guest.share.join(files::KILL), b"")?;
        guest.wait_file(files::RESTARTED, Duration::from_secs(120))?;
        guest.produce_for(opts.produce)?;
        guest.emu.stop_workload()?;
        guest.emu.wait_drained(Duration::from_secs(60))
    })?;
    let ground_truth = guest.emu.ground_truth()?;
    let stats = guest.emu.stats()?;
    std::fs::write(
        opts.run_dir.join("ground-truth.json"),
        serde_json::to_string_pretty(&ground_truth)?,
    )?;
    std::fs::write(
        opts.run_dir.join("emu-stats.json"),
        serde_json::to_string_pretty(&stats)?,
    )?;
    std::fs::write(guest.share.join(files::STOP), b"")?;
    let traced = phases.run(
        "nvme traced: series nvme.ko, module, daemon; fio verify, reset, fatal status, GC",
        || {
            let (ask, _) = nvme_tools::fatal_files(nvme_traced::FATAL_TAG);
            guest.wait_file(&ask, Duration::from_secs(900))?;
            nvme_tools::inject_fatal(guest.nvme, guest.share, &opts.run_dir, nvme_traced::FATAL_TAG, 1)?;
            guest.wait_file(nvme_traced::DONE, Duration::from_secs(900))?;
            let after = guest.nvme.status()?;
            std::fs::write(
                opts.run_dir.join("nvme-status-traced.json"),
                serde_json::to_string_pretty(&after)?,
            )?;
            let truth = guest.nvme.request(&hmb_emu_device::control::Request::GroundTruth)?;
            let journal = crate::journal_truth::journal_from_ground_truth(&truth)?;
            drop(truth);
            let outcome = nvme_traced::check(&nvme_traced::RunData {
                dir: &guest.share.join(nvme_traced::DIR),
                before: &tools_status,
                after: &after,
                untraced_before: &untraced_before,
                journal: &journal,
            })?;
            std::fs::write(guest.share.join(nvme_traced::OK), b"")?;
            Ok(outcome)
        },
    )?;
    println!("    nvme traced: {}", traced.summary());
    let rc = phases.run("unit stop, modprobe -r, dkms remove, poweroff", || {
        let line = guest.vm.wait_for("HMBT-RESULT", Duration::from_secs(300), |l| {
            console::parse_result(l).is_some()
        })?;
        guest.vm.wait_exit(Duration::from_secs(120))?;
        Ok(console::parse_result(&line).unwrap_or(-1))
    })?;
    Ok((rc, ground_truth, stats, tools, traced))
}

/// How long the guest may take to reach its check script (34 s seen at load
/// 8; TCG under a loaded host can be several times slower).
const BOOT_TIMEOUT: Duration = Duration::from_secs(300);

/// Start emu-device and the guest and wait for the check's first line. A
/// TCG guest very rarely hangs or faults in early boot before any of our
/// code runs (see `guest::boot`): such a boot is retried once,
/// from scratch (emu-device exits with its last QEMU, so both restart).
/// `extra`: QEMU arguments after the guest's own devices (the bench's
/// QEMU nvme).
fn boot(
    p: &Prepared,
    run_dir: &Path,
    share: &Path,
    extra: &[std::ffi::OsString],
) -> Result<(EmuDevice, NvmeDevice, Vm)> {
    let mut cfg = vm_config(p, run_dir, share);
    cfg.extra_args.extend(extra.iter().cloned());
    let first = FirstLine {
        what: "the check's first line",
        marker: "HMBT-STEP PID 1",
        timeout: BOOT_TIMEOUT,
    };
    let guest = crate::guest::Guest::boot(cfg, first, |attempt| {
        if attempt == 2 {
            // The first boot's console, kept beside the second's.
            let _ = std::fs::rename(run_dir.join("console.log"), run_dir.join("console.1.log"));
        }
        let emu = EmuDevice::start(
            &p.emu_bin,
            run_dir,
            &hmb_emu_device::ivshmem::hmb::hmb_size_for(MODULE_DEFAULT_RING).to_string(),
        )?;
        let backing = run_dir.join(nvme_tools::BACKING);
        let _ = std::fs::remove_file(&backing);
        let nvme = NvmeDevice::start_with(
            &p.emu_bin,
            run_dir,
            &backing,
            nvme_tools::NAMESPACE_BYTES,
            nvme_tools::PREFIX,
            &Default::default(),
        )?;
        Ok(Devices {
            emu,
            nvme: nvme.behind(RootPort::SECOND),
        })
    })?;
    Ok((guest.dev.emu, guest.dev.nvme, guest.vm))
}

/// The full guest's two controllers: emu-device's ivshmem one and its NVMe
/// one, each behind its own root port.
struct Devices {
    emu: EmuDevice,
    nvme: NvmeDevice,
}

impl GuestDevice for Devices {
    /// The check hands its files over itself (`run`).
    const MORE_FILES: &'static [&'static str] = &[];
    /// The check is its own script (`script`).
    const PRELUDE: &'static [ScriptFile] = &[];

    fn configure(&self, vm: &mut VmConfig) {
        self.emu.configure(vm);
        self.nvme.configure(vm);
    }

    fn check_alive(&mut self) -> Result<()> {
        self.emu.check_alive()?;
        self.nvme.check_alive()
    }

    fn shutdown(&mut self) {
        self.emu.shutdown();
        self.nvme.shutdown();
    }
}

/// Host packages, the kernel, the full guest's image, DKMS's build of the
/// module in it, QEMU, emu-device and the daemon. All cached.
fn prepare(sh: &Shell, kernel: Option<&str>, phases: &mut Phases) -> Result<Prepared> {
    let root = workspace_root();
    let cache = cache_dir();
    let specs = kernels::load(&root.join("images/KERNELS"))?;
    let spec = kernels::select(&specs, kernel)?;
    let mut needs = apt::base_needs();
    needs.push(Need::new("e2fsprogs", "mkfs.ext4 -d: the full guest's disk image"));
    phases.run("host packages", || apt::ensure(sh, &needs))?;
    let daemon_bin = phases.run("static daemon", || images::build_static_daemon(sh))?;
    // 11.1: the first Debian QEMU with vfio-user-pci, for the NVMe controller.
    let qemu = phases.run("qemu 11.1", || binary::ensure(sh, QemuVersion::V11_1))?;
    let emu_bin = phases.run("emu-device", || {
        let _dir = sh.push_dir(&root);
        cmd!(sh, "cargo build --release --quiet -p hmb-emu-device").run()?;
        Ok(target_dir().join("release/emu-device"))
    })?;
    // Before the cache lock: the series takes it itself.
    let series = phases.run("nvme series (cached)", || {
        crate::images::nvme_series::prepare_cached(sh, &spec)
    })?;
    let series_nvme = series.nvme_ko.context("the series built no nvme.ko")?;
    let (resolved, kernel) = {
        let _lock = lock_cache(&cache)?;
        let (env, resolved) = phases.run(&format!("toolchain ({})", spec.name), || {
            toolchain::ensure_toolchain(sh, &spec)
        })?;
        let kernel = phases.run(&format!("kernel fetch ({})", spec.name), || {
            fetch::fetch(sh, &env, &spec, &resolved, &cache)
        })?;
        (resolved, kernel)
    };
    // The image and the DKMS build are this guest's own entries
    // (cache/full-guest), under a lock of their own: a cold debootstrap
    // (minutes) does not hold the guests that share the cache, such as the
    // test command's boots beside this run.
    let _lock = lock_cache(&cache.join("full-guest"))?;
    let image = phases.run("full guest image (debootstrap, cached)", || {
        debian_root::ensure(sh, &cache, &spec, &resolved)
    })?;
    println!(
        "    image {} ({})",
        image.disk.display(),
        if image.rebuilt { "built" } else { "cached" }
    );
    let module = phases.run("dkms build in the image's tree (chroot, cached)", || {
        dkms_prebuilt::build(sh, &image, &resolved.abi, &root.join("kmod"), &cache)
    })?;
    println!(
        "    module {} ({})",
        module.package.id(),
        if module.rebuilt { "built" } else { "cached" }
    );
    Ok(Prepared {
        has_kfence: crate::qemu::kernel_checks::kernel_has_kfence(&std::fs::read_to_string(
            images::linux_source::find_config(&kernel.root, &kernel.resolved.abi)?,
        )?),
        boot_kernel: kernel.vmlinux.clone().unwrap_or(kernel.vmlinuz.clone()),
        image,
        module,
        qemu,
        emu_bin,
        daemon_bin,
        series_nvme,
    })
}

/// What the guest script reads from the share: the script, the module's
/// source tree and DKMS build, and the shipped daemon, unit and udev rule.
fn fill_share(sh: &Shell, p: &Prepared, share: &Path) -> Result<()> {
    let root = workspace_root();
    let _ = std::fs::remove_dir_all(share);
    std::fs::create_dir_all(share.join(files::KMOD)).with_context(|| format!("creating {}", share.display()))?;
    std::fs::write(share.join(files::SCRIPT), script::check_script(&p.module.package))?;
    kmod_build::copy_tree(&root.join("kmod"), &share.join(files::KMOD))?;
    for (from, to) in [
        (p.module.tar.clone(), files::DKMS_TAR),
        (p.daemon_bin.clone(), files::DAEMON),
        (root.join("daemon/dist/hmb-trace-daemon.service"), files::UNIT),
        (root.join("kmod/udev/60-nvme-hmb-trace.rules"), files::UDEV_RULE),
        (p.series_nvme.clone(), nvme_traced::SERIES_NVME),
    ] {
        std::fs::copy(&from, share.join(to)).with_context(|| format!("copying {}", from.display()))?;
    }
    // 21 MB with debug info, 9p under TCG copies it slowly; the code is the same.
    let daemon = share.join(files::DAEMON);
    cmd!(sh, "strip --strip-debug {daemon}")
        .quiet()
        .run()
        .context("strip")?;
    Ok(())
}

fn vm_config(p: &Prepared, run_dir: &Path, share: &Path) -> VmConfig {
    let mut cfg = VmConfig::new(
        p.qemu.clone(),
        p.boot_kernel.clone(),
        p.image.initrd.clone(),
        run_dir.to_path_buf(),
    );
    // systemd, udev and a DKMS install want more than the busybox guests' 512 MiB.
    cfg.memory_mb = 1024;
    cfg.share_dir = Some(share.to_path_buf());
    // Debian's initramfs mounts the disk and hands over to systemd.
    cfg.extra_cmdline = ["root=/dev/vda", "rw", "systemd.show_status=error"]
        .map(String::from)
        .to_vec();
    cfg.boot_disk = Some(p.image.disk.clone());
    cfg
}

/// The guest script ended (`line`: its HMBT-ERROR or HMBT-RESULT) while
/// the host still waited for `what`: a script failure, reported as every
/// script failure is ([`BootError::check_script`]); its `fail` prints
/// HMBT-ERROR, then HMBT-RESULT rc=1.
fn script_ended(line: &str, what: &str) -> anyhow::Error {
    let code = console::parse_result(line).unwrap_or(1);
    match BootError::check_script("the full-guest check", code, || {
        format!("it ended before {what}: {line}")
    }) {
        Err(e) => e.into(),
        Ok(()) => anyhow::anyhow!("the full-guest check ended (rc=0) before {what}: {line}"),
    }
}

/// The running guest and device, as the host side of the script sees them.
struct Guest<'a> {
    vm: &'a mut Vm,
    emu: &'a mut EmuDevice,
    nvme: &'a mut NvmeDevice,
    share: &'a Path,
}

impl Guest<'_> {
    /// Wait until the guest creates `name` in the share, watching the
    /// console for faults and for the script ending first.
    fn wait_file(&mut self, name: &str, timeout: Duration) -> Result<()> {
        let path = self.share.join(name);
        let deadline = Instant::now() + timeout;
        while !path.exists() {
            self.emu.check_alive()?;
            self.nvme.check_alive()?;
            match self.vm.wait_for(name, Duration::from_millis(250), |l| {
                l.contains("HMBT-ERROR") || l.contains("HMBT-RESULT")
            }) {
                Ok(_) if path.exists() => break,
                Ok(line) => return Err(script_ended(&line, name)),
                Err(e) if WaitError::is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
            if Instant::now() > deadline {
                bail!(
                    "timeout: the guest made no {name} within {}s; see console.log",
                    timeout.as_secs()
                );
            }
        }
        Ok(())
    }

    /// Let the device produce for `how_long`, watching both processes.
    fn produce_for(&mut self, how_long: Duration) -> Result<()> {
        let end = Instant::now() + how_long;
        while Instant::now() < end {
            self.emu.check_alive()?;
            match self
                .vm
                .wait_for("the production time", Duration::from_millis(200), |l| {
                    l.contains("HMBT-ERROR") || l.contains("HMBT-RESULT")
                }) {
                Ok(line) => return Err(script_ended(&line, "the end of the production time")),
                Err(e) if WaitError::is_timeout(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_script_that_ends_early_fails_as_every_script_does() {
        let code = |e: anyhow::Error| match e.downcast::<BootError>() {
            Ok(BootError::ScriptFailed { code, detail, .. }) => Some((code, detail)),
            _ => None,
        };
        let (rc, detail) = code(script_ended(
            "HMBT-ERROR nvme telemetry-log (exit 1)",
            "nvme-tools.done",
        ))
        .unwrap();
        assert_eq!(rc, 1, "fail() prints rc=1 after its HMBT-ERROR");
        assert!(
            detail.contains("before nvme-tools.done") && detail.contains("telemetry-log"),
            "{detail}"
        );
        assert_eq!(code(script_ended("HMBT-RESULT rc=3", "x")).unwrap().0, 3);
        // Ended well, but too soon: still an error, not a script failure.
        let early = script_ended("HMBT-RESULT rc=0", "x");
        assert!(early.to_string().contains("rc=0") && code(early).is_none());
    }
}
