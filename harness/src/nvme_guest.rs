//! A real guest on emu-device's NVMe controller (`serve-nvme`, vfio-user):
//! QEMU 11.1 with guest RAM in a shared memfd and a `vfio-user-pci`
//! device, a Debian kernel whose STOCK nvme.ko and nvme-core.ko (from the
//! kernel's own package) probe the controller. The guest script checks
//! that the driver binds, writes a pattern and reads it back, resets the
//! controller through sysfs and measures 4 KiB QD1 reads; at three
//! checkpoints (probed, reset, done) the host reads the controller's
//! report over the control socket and checks the HMB from the device's
//! side. `NvmeRunConfig::checks` says what else the run does
//! (`nvme_checks`). docs/nvme-controller.md ("Guest runs") has the decisions.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use hmb_emu_device::control::{Fault, Request};
use hmb_nvme_trace::Personality;
use serde_json::Value;
use xshell::Shell;

use crate::guest::tools::{self, GuestTools};
use crate::guest::{share, FirstLine, Guest, GuestDevice};
use crate::guest_script::{self, Script};
use crate::host::{cache_dir, workspace_root};
use crate::images::guest_modules::{self, ModuleIndex};
use crate::images::{initramfs, kernels, nvme_series};
use crate::journal_truth::{self, JournalReport};
use crate::phases::Phases;
use crate::qemu::binary::QemuVersion;
use crate::qemu::{args, console, kernel_checks, Accel, VmConfig};

pub use crate::emu::nvme::{ControllerOptions, NvmeDevice, DEVICE_ID, NAMESPACE_BYTES};
pub use crate::nvme_checks::Checks;
use crate::nvme_checks::Selected;
/// Trace runs: the second controller of the pair phase (issue 26, two
/// controllers in one guest), a `stock` emu-device behind its own root
/// port at a fixed slot (`RootPort::PEER`), so the guest finds it by its
/// port's address.
pub(crate) const PEER_PORT: &str = "0000:00:10.0";
/// Its sockets', log's and namespace's names start so.
const PEER_PREFIX: &str = "peer-";
/// Its serial number (the first controller has serve-nvme's HMBTRACE0001).
const PEER_SERIAL: &str = "HMBTRACE0002";
/// The pattern: 1 MiB at 8 MiB into the namespace (not LBA 0, so a
/// controller that ignored SLBA would be caught by the host's check of
/// the backing file).
pub(crate) const PATTERN_OFFSET: u64 = 8 << 20;
pub(crate) const PATTERN_BYTES: u64 = 1 << 20;

/// Files the guest script writes into the share (and the host's answers).
pub mod files {
    pub(crate) const SCRIPT: &str = "run.sh";
    pub use crate::emu::nvme::RESULTS;
    pub(crate) const PATTERN: &str = "pattern.bin";
    pub(crate) const DMESG: &str = "dmesg.txt";
    pub const TRACE: &str = "trace.bin";
    pub(crate) const DAEMON_STDERR: &str = "daemon.stderr";
    pub(crate) const GROUND_TRUTH: &str = "ground-truth.json";
    /// Stock driver: the Telemetry logs (`nvme_telemetry` names them).
    pub use crate::nvme_telemetry::{TELEMETRY, TELEMETRY_CONTROLLER};
    /// Checkpoints: the guest creates NAME and waits for NAME.ok.
    pub(crate) const PROBED: &str = "probed";
    pub(crate) const RESET: &str = "reset";
    /// With the injected failure: before it (the host sets CFS) and after
    /// the driver's recovery.
    pub(crate) const FATAL: &str = "fatal";
    pub(crate) const RECOVERED: &str = "recovered";
    pub(crate) const DONE: &str = "done";
}

/// Everything built once for NVMe guest runs on one kernel.
pub struct NvmeTools {
    /// The image, QEMU 11.1 and emu-device.
    pub guest: GuestTools,
    /// The kernel's own modules directory (modules.dep).
    pub modules_dir: PathBuf,
    /// nvme and what it needs, dependencies first, relative to `modules_dir`.
    pub stock_modules: Vec<String>,
    /// With the trace: the patched driver and our module.
    pub trace: Option<TraceParts>,
    /// The kernel has lockdep (its config: `CONFIG_PROVE_LOCKING=y`, the
    /// debug kernel): the run must end with lockdep still on.
    pub has_lockdep: bool,
}

impl std::ops::Deref for NvmeTools {
    type Target = GuestTools;

    fn deref(&self) -> &GuestTools {
        &self.guest
    }
}

/// What a trace run adds to the stock one (issue 14).
pub struct TraceParts {
    /// The replacement nvme.ko of `kmod/patches/<kernel>/` (loaded instead
    /// of the stock one, under the stock nvme-core).
    pub patched_nvme: PathBuf,
    /// Guest path of nvme-hmb-trace.ko (with hmb_nvme_glue).
    pub trace_module: String,
    /// `linux-source-X.Y=version` the series was applied to.
    pub series_source: String,
}

/// Image (kernel, our module, static daemon, initramfs), QEMU 11.1 (the
/// first Debian QEMU with vfio-user-pci) and emu-device; with `trace`, also
/// the patch series' nvme.ko. All cached.
pub fn prepare(sh: &Shell, kernel: Option<&str>, trace: bool, phases: &mut Phases) -> Result<NvmeTools> {
    let guest = tools::prepare(sh, kernel, QemuVersion::V11_1, &[], phases)?;
    let image = &guest.image;
    let modules_dir = stock_modules_dir(&image.kernel_name, &image.abi)?;
    // The stock driver: whatever nvme needs on this kernel (nvme-core, and
    // on newer kernels nvme-auth, nvme-keyring, ...), from modules.dep.
    let stock_modules = ModuleIndex::load(&modules_dir)?.load_order(&["nvme".to_string()])?;
    ensure!(
        stock_modules
            .last()
            .is_some_and(|m| guest_modules::module_name(m) == "nvme"),
        "kernel {} builds nvme into the image or lacks it ({:?}): the guest run loads the stock module",
        image.kernel_name,
        stock_modules
    );
    let config = crate::images::linux_source::find_config(
        &cache_dir().join("kernels").join(&image.kernel_name).join("root"),
        &image.abi,
    )?;
    let has_lockdep = kernel_checks::kernel_has_lockdep(
        &std::fs::read_to_string(&config).with_context(|| format!("reading {}", config.display()))?,
    );
    let trace = match trace {
        false => None,
        true => {
            let specs = kernels::load(&workspace_root().join("images/KERNELS"))?;
            let spec = kernels::select(&specs, Some(&image.kernel_name))?;
            let series = phases.run("nvme series", || nvme_series::prepare_cached(sh, &spec))?;
            let trace_module = image.trace_module()?;
            Some(TraceParts {
                patched_nvme: series.nvme_ko.context("the series built no nvme.ko")?,
                trace_module,
                series_source: series.source,
            })
        }
    };
    Ok(NvmeTools {
        guest,
        modules_dir,
        stock_modules,
        trace,
        has_lockdep,
    })
}

/// `cache/kernels/<name>/root/{lib,usr/lib}/modules/<abi>`.
pub fn stock_modules_dir(kernel: &str, abi: &str) -> Result<PathBuf> {
    let root = cache_dir().join("kernels").join(kernel).join("root");
    ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(abi))
        .find(|p| p.join("modules.dep").exists())
        .with_context(|| format!("no modules.dep for {abi} under {}", root.display()))
}

/// One guest run.
pub struct NvmeRunConfig {
    pub run_dir: PathBuf,
    /// `Auto` is resolved (KVM probe) before QEMU starts.
    pub accel: Accel,
    /// 4 KiB O_DIRECT reads for the QD1 figure.
    pub iops_reads: u32,
    /// Seconds allowed from HMBT-READY to the end of the guest script.
    pub timeout: Duration,
    /// Run the patched driver, nvme-hmb-trace.ko and the daemon (the tools
    /// must have `trace`), and check trace.bin against the journal.
    pub trace: bool,
    /// After `reset_controller`, fail the controller from the device's
    /// side (CSTS.CFS over the control socket) and check the driver's
    /// recovery: its I/O timeout (3 s here) finds CFS and resets.
    pub inject_fatal: bool,
    pub controller: ControllerOptions,
    /// Behind QEMU's `intel-iommu` with the guest's IOMMU on (`intel_iommu=on`):
    /// the controller sees DMA addresses (IOVAs), not guest physical ones.
    pub viommu: bool,
    /// The main job, or everything (`nvme_checks`).
    pub checks: Checks,
}

impl NvmeRunConfig {
    /// What this run does beyond the main job.
    pub(crate) fn selected(&self) -> Selected {
        self.checks
            .select(self.trace, self.controller.personality.serves_telemetry())
    }
}

/// What a passing run saw. Every field was checked before it is returned.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NvmeOutcome {
    pub kernel: String,
    pub abi: String,
    pub qemu: String,
    /// Which checks ran (`--checks`).
    pub checks: Checks,
    /// PCI address and driver the controller is bound to in the guest.
    pub pci: String,
    pub driver: String,
    /// Guest uptime from `insmod nvme.ko` to /dev/nvme0n1, in ms (10 ms steps).
    pub probe_ms: u64,
    /// The kernel log's own view: `pci function` to the first `... queues`
    /// line (printk timestamps, µs resolution), in ms.
    pub probe_log_ms: Option<f64>,
    /// The driver's "allocated N MiB host memory buffer" line.
    pub hmb_line: String,
    pub hmb_bytes: u64,
    pub hmb_descriptors: u64,
    /// Pattern bytes written, read back identical (before and after the
    /// reset) and found at the right offset of the backing file.
    pub verified_bytes: u64,
    /// The controller's HMB after `reset_controller`: enabled again with MR=1.
    pub hmb_returned_after_reset: bool,
    pub read_iops_qd1: u64,
    pub iops_reads: u32,
    pub iops_centiseconds: u64,
    /// 4 KiB O_DIRECT reads from 32 processes at once (one in flight each;
    /// `--checks full`).
    pub qd32: Option<Qd32Reads>,
    /// Time from QEMU start to the end of the guest script.
    pub guest_seconds: f64,
    /// With the trace: trace.bin against the controller's journal.
    pub trace: Option<TraceOutcome>,
    /// Stock driver: the Telemetry logs nvme-cli pulled, against the journal.
    pub telemetry: Option<crate::nvme_telemetry::TelemetryOutcome>,
    /// With the trace: the Telemetry logs nvme-cli pulled beside the ring,
    /// against trace.bin.
    pub traced_telemetry: Option<crate::traced_telemetry::TracedTelemetryOutcome>,
    /// With the trace: the drivers against the controller's other personalities.
    pub personalities: Option<Vec<crate::nvme_personalities::PhaseOutcome>>,
    /// Behind the virtual IOMMU: what shows the controller saw IOVAs.
    pub viommu: Option<ViommuOutcome>,
    /// With the trace: two controllers in one guest (the pair phase).
    pub two_controllers: Option<crate::nvme_personalities::PairOutcome>,
    /// The kernel has lockdep and it was still on after the run's last
    /// load (`/proc/lockdep_stats` debug_locks 1, checked).
    pub lockdep_on_at_end: bool,
    /// With the injected failure: the driver's line and the guest time
    /// from the read that found the failed controller to its completion.
    pub fatal_recovery: Option<FatalRecovery>,
}

/// The QD32 loop: 32 processes, one 4 KiB O_DIRECT read in flight each.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Qd32Reads {
    pub read_iops: u64,
    pub reads: u64,
    pub centiseconds: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct FatalRecovery {
    pub driver_line: String,
    pub recovered_ms: u64,
}

/// What the Linux driver prints when a command times out on a controller
/// with CSTS.CFS set (`nvme_warn_reset`).
pub const FATAL_DRIVER_LINE: &str = "controller is down; will reset";

/// nvme_core's I/O timeout (seconds) when a failure is injected: the
/// driver looks at CSTS only when a command times out (default 30 s).
pub const FATAL_IO_TIMEOUT_S: u32 = 3;

#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceOutcome {
    pub series_source: String,
    pub hmb_trace_kb: u64,
    pub records: u64,
    pub dropped: u64,
    pub epochs: Vec<u64>,
    pub summary: String,
    /// poll(2) wake-up after a 4 KiB read, microseconds, over WAKE_ROUNDS
    /// rounds: (min, p50, p90, p99, max) (`--checks full`).
    pub wake_latency_us: Option<[u64; 5]>,
}

/// Lines of the guest's kernel log that fail the run: the console's fault
/// patterns and the nvme driver's timeouts and failures.
pub fn is_trouble_line(line: &str) -> bool {
    const NVME_TROUBLE: &[&str] = &[
        "timeout",
        "Removing after probe failure",
        "controller is down",
        "Device not ready",
        "I/O error",
        "I/O Error",
        "Abort status",
    ];
    console::is_fault_line(line) || NVME_TROUBLE.iter().any(|p| line.contains(p))
}

/// The guest script (run from the share: longer than the kernel command
/// line allows). `mods` are the stock modules' file names in load order
/// (nvme itself excluded: `$share/mods/nvme.ko`, the stock or the patched
/// one, is loaded and timed on its own). With `trace_module`, the trace
/// module and the daemon (`--follow`: the reset starts a second epoch) run
/// from the probe to the end, and trace.bin comes back. `selected`: what
/// the run does beyond the main job (`nvme_checks`).
pub(crate) fn guest_script(
    mods: &[String],
    iops_reads: u32,
    trace_module: Option<&str>,
    inject_fatal: bool,
    selected: Selected,
) -> String {
    let flag = |on: bool| if on { "1" } else { "0" };
    let script = Script::new()
        .set("RESULTS", files::RESULTS)
        .set("MODS", mods.join(" "))
        .set(
            "NVME_CORE_PARAMS",
            if inject_fatal {
                format!("io_timeout={FATAL_IO_TIMEOUT_S}")
            } else {
                String::new()
            },
        )
        .set("DMESG", files::DMESG)
        .set("PATTERN", files::PATTERN)
        .set("TRACE", files::TRACE)
        .set("DAEMON_STDERR", files::DAEMON_STDERR)
        .set("PROBED", files::PROBED)
        .set("RESET", files::RESET)
        .set("FATAL", files::FATAL)
        .set("RECOVERED", files::RECOVERED)
        .set("DONE", files::DONE)
        .set("TRACE_MODULE", trace_module.unwrap_or_default())
        .set("PULL_TELEMETRY", flag(selected.telemetry))
        .set("QD32", flag(selected.qd32))
        .set("MODULE_CHECKS", flag(selected.module_checks))
        .set("TELEMETRY_1", files::TELEMETRY[0])
        .set("TELEMETRY_2", files::TELEMETRY[1])
        .set("TELEMETRY_CONTROLLER", files::TELEMETRY_CONTROLLER)
        .set("TELEMETRY_READS_BETWEEN", TELEMETRY_READS_BETWEEN)
        .set("NVME_CLI", crate::nvme_cli::SHARE_DIR)
        .set("NVME_CLI_LOADER", crate::nvme_cli::LOADER)
        .set("INJECT_FATAL", flag(inject_fatal))
        .set("PATTERN_SEEK", PATTERN_OFFSET / 4096)
        .set("PATTERN_BLOCKS", PATTERN_BYTES / 4096)
        .set("IOPS_READS", iops_reads)
        .set("QD32_PER", qd32_per(iops_reads))
        .set("WAKE_ROUNDS", WAKE_ROUNDS)
        .set("LOCKDEP_NOTE", kernel_checks::LOCKDEP_NOTE);
    let script = NvmeDevice::prelude(script);
    // The module checks have the second (stock) controller of the pair phase.
    let peer_port = (trace_module.is_some() && selected.module_checks).then_some(PEER_PORT);
    crate::nvme_personalities::guest_script(script, peer_port)
        .file(&guest_script::NVME_BOOT)
        .build()
}

pub use crate::nvme_telemetry::TELEMETRY_READS_BETWEEN;

/// Rounds of the poll wake-up latency measurement in trace runs.
pub const WAKE_ROUNDS: u32 = 200;

/// Reads per process of the QD32 loop: the QD1 count spread over 32
/// processes, each on its own range inside the namespace.
fn qd32_per(iops_reads: u32) -> u64 {
    let blocks = NAMESPACE_BYTES / 4096;
    u64::from(iops_reads).div_ceil(32).clamp(1, blocks / 32)
}

/// Copy the stock modules, decompressed, into `share/mods`; their file names.
pub(crate) fn stage_modules(tools: &NvmeTools, share: &Path, with_trace: bool) -> Result<Vec<String>> {
    let mods = share.join("mods");
    std::fs::create_dir_all(&mods)?;
    let mut names = Vec::new();
    for rel in &tools.stock_modules {
        let name = guest_modules::guest_file_name(rel);
        initramfs::decompress_module(&tools.modules_dir.join(rel), &mods.join(&name))?;
        names.push(name);
    }
    // nvme itself is loaded (and timed) on its own, after the others; with
    // the trace it is the series' replacement, under the stock nvme-core.
    names.pop();
    if let (true, Some(trace)) = (with_trace, &tools.trace) {
        // The stock one stays, for the differential (nvme_personalities).
        std::fs::rename(mods.join("nvme.ko"), mods.join("nvme-stock.ko"))?;
        std::fs::copy(&trace.patched_nvme, mods.join("nvme.ko"))
            .with_context(|| format!("copying {}", trace.patched_nvme.display()))?;
    }
    Ok(names)
}

/// KEY=VALUE lines of the guest's results file.
pub fn parse_results(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// Milliseconds from the driver's `nvme nvme0: pci function` line to its
/// first `default/read/poll queues` line (the I/O queues are up).
pub(crate) fn probe_log_ms(dmesg: &str) -> Option<f64> {
    let stamp = |l: &str| -> Option<f64> { l.strip_prefix('[')?.split(']').next()?.trim().parse().ok() };
    let start = dmesg
        .lines()
        .find(|l| l.contains("nvme0: pci function"))
        .and_then(stamp)?;
    let end = dmesg
        .lines()
        .find(|l| l.contains("nvme0:") && l.contains("default/read/poll queues"))
        .and_then(stamp)?;
    (end >= start).then_some((end - start) * 1000.0)
}

/// `allocated 32 MiB host memory buffer.` (6.13+ adds the segment count) -> bytes.
pub(crate) fn hmb_line_bytes(line: &str) -> Option<u64> {
    let rest = line.split("allocated ").nth(1)?;
    let mut words = rest.split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    match words.next()? {
        "MiB" => Some(n << 20),
        "KiB" => Some(n << 10),
        _ => None,
    }
}

/// Start emu-device and QEMU and wait for the guest's init; a boot that
/// hangs (or faults) before init is retried once from scratch
/// (`guest::boot`: nothing of ours has run yet).
pub(crate) fn start(tools: &NvmeTools, cfg: &NvmeRunConfig, share: &Path) -> Result<Guest<NvmeDevice>> {
    start_guest(tools, cfg, share, false)
}

/// `start`; with `peer`, the second (stock) controller of the pair phase
/// too (the boot's trace run: its script keeps that one unbound until then).
fn start_guest(tools: &NvmeTools, cfg: &NvmeRunConfig, share: &Path, peer: bool) -> Result<Guest<NvmeDevice>> {
    let mut vm_cfg = tools.vm_config(&cfg.run_dir, share, cfg.accel);
    if cfg.viommu {
        // Before every device it translates for: QEMU attaches a PCI
        // device to the IOMMU's address space when the device is
        // realized. caching-mode=on: QEMU's vfio (and vfio-user) client
        // needs the guest's map notifications to mirror them as DMA_MAP.
        vm_cfg.devices.extend(args::intel_iommu());
        vm_cfg.extra_cmdline.push("intel_iommu=on".into());
    }
    // A controller that prefers a larger HMB than serve-nvme's default
    // (nvme_big_ring's 1 GiB ring) needs guest RAM for it besides the default.
    if let Some(hmb) = cfg.controller.hmb_preferred {
        vm_cfg.memory_mb = VmConfig::DEFAULT_MEMORY_MB + u32::try_from(hmb.div_ceil(1 << 20)).unwrap_or(u32::MAX);
    }
    let first = FirstLine {
        what: "HMBT-INIT",
        marker: "HMBT-INIT",
        timeout: Duration::from_secs(120),
    };
    Guest::boot(vm_cfg, first, |_| {
        let backing = cfg.run_dir.join("namespace.img");
        let _ = std::fs::remove_file(&backing);
        let dev = NvmeDevice::start(&tools.emu_bin, &cfg.run_dir, &backing, &cfg.controller)?;
        if !peer {
            return Ok(dev);
        }
        let backing = cfg.run_dir.join(format!("{PEER_PREFIX}namespace.img"));
        let _ = std::fs::remove_file(&backing);
        let stock = ControllerOptions {
            personality: Personality::Stock,
            serial: Some(PEER_SERIAL),
            ..Default::default()
        };
        let second = NvmeDevice::start_with(
            &tools.emu_bin,
            &cfg.run_dir,
            &backing,
            NAMESPACE_BYTES,
            PEER_PREFIX,
            &stock,
        )
        .context("the second (stock) controller")?;
        Ok(dev.with_peer(second))
    })
}

/// The controller's report at a checkpoint, saved as `emu-<name>.json`.
fn snapshot(dev: &mut NvmeDevice, run_dir: &Path, name: &str) -> Result<Value> {
    let status = dev.status()?;
    std::fs::write(
        run_dir.join(format!("emu-{name}.json")),
        serde_json::to_string_pretty(&status)?,
    )?;
    Ok(status)
}

fn u64_at(v: &Value, path: &str) -> Result<u64> {
    v.pointer(path)
        .and_then(Value::as_u64)
        .with_context(|| format!("emu-device status has no number at {path}"))
}

fn bool_at(v: &Value, path: &str) -> Result<bool> {
    v.pointer(path)
        .and_then(Value::as_bool)
        .with_context(|| format!("emu-device status has no boolean at {path}"))
}

/// After the probe: ready, I/O queues, the HMB enabled (fresh, not returned).
pub(crate) fn check_probed(status: &Value) -> Result<()> {
    ensure!(
        bool_at(status, "/controller/ready")?,
        "the controller is not ready after the probe"
    );
    ensure!(
        u64_at(status, "/controller/io_queues_allocated")? >= 1,
        "the driver allocated no I/O queues"
    );
    ensure!(
        bool_at(status, "/controller/hmb/enabled")?,
        "the driver did not enable the HMB (last rejection: {})",
        status.pointer("/controller/hmb/last_rejection").unwrap_or(&Value::Null)
    );
    ensure!(
        u64_at(status, "/controller/hmb/enables")? == 1,
        "one HMB enable expected after the probe"
    );
    Ok(())
}

/// After `reset_controller`: the same buffer enabled again with MR=1.
pub(crate) fn check_reset(status: &Value, probed: &Value) -> Result<()> {
    ensure!(
        bool_at(status, "/controller/ready")?,
        "the controller is not ready after the reset"
    );
    ensure!(
        u64_at(status, "/controller/counters/resets")? > u64_at(probed, "/controller/counters/resets")?,
        "the controller saw no reset"
    );
    ensure!(
        bool_at(status, "/controller/hmb/enabled")?,
        "the HMB is not enabled after the reset"
    );
    ensure!(
        bool_at(status, "/controller/hmb/returned")?,
        "the HMB came back without MR=1 and the same descriptor list"
    );
    ensure!(
        u64_at(status, "/controller/hmb/enables")? == 2 && u64_at(status, "/controller/hmb/disables")? >= 1,
        "expected a release and a second enable of the HMB"
    );
    ensure!(
        status.pointer("/controller/hmb/descriptors") == probed.pointer("/controller/hmb/descriptors"),
        "the descriptor list changed across the reset"
    );
    Ok(())
}

/// Right after the injection: CFS set, the HMB let go.
pub(crate) fn check_failed(status: &Value) -> Result<()> {
    ensure!(
        u64_at(status, "/controller/csts")? & 2 == 2,
        "CSTS.CFS is not set after the injection"
    );
    ensure!(
        !bool_at(status, "/controller/hmb/enabled")?,
        "the failed controller still holds the HMB"
    );
    Ok(())
}

/// Over the reads (from `before` to `after`): the driver uses the shadow
/// doorbells (Doorbell Buffer Config, OACS bit 8), so its I/O queues ring at
/// most the SQ tail doorbell, once per command, and never the CQ head one
/// (docs/nvme-controller.md, "Shadow doorbells"); the admin queue rings both.
/// Without them a QD1 read costs two doorbell writes.
pub(crate) fn check_shadow_doorbells(after: &Value, before: &Value) -> Result<()> {
    let delta = |path: &str| -> Result<u64> { Ok(u64_at(after, path)?.saturating_sub(u64_at(before, path)?)) };
    let io = delta("/controller/counters/io_commands")?;
    let admin = delta("/controller/counters/admin_commands")?;
    let rings = delta("/controller/counters/doorbell_writes")?;
    ensure!(
        delta("/controller/counters/shadow_doorbell_reads")? > 0,
        "the controller read no shadow doorbell: the driver did not configure the doorbell buffers"
    );
    // A few CQ rings are allowed: one per CQ that filled up with work waiting.
    ensure!(
        io > 0 && rings <= io + 2 * admin + 16,
        "{rings} doorbell writes for {io} I/O and {admin} admin commands: the I/O queues rang more than their SQ tails"
    );
    Ok(())
}

/// After the driver's recovery: running again, one fatal error counted, the
/// same buffer back with MR=1 a third time.
pub(crate) fn check_recovered(status: &Value, after_reset: &Value) -> Result<()> {
    ensure!(
        bool_at(status, "/controller/ready")? && !bool_at(status, "/controller/fatal")?,
        "the controller is not running again after the driver's recovery"
    );
    ensure!(
        u64_at(status, "/controller/counters/fatal_errors")? == 1,
        "one fatal error expected"
    );
    ensure!(
        bool_at(status, "/controller/hmb/enabled")? && bool_at(status, "/controller/hmb/returned")?,
        "the HMB is not back with MR=1 after the recovery"
    );
    ensure!(
        u64_at(status, "/controller/hmb/enables")? == u64_at(after_reset, "/controller/hmb/enables")? + 1,
        "expected one more HMB enable after the recovery"
    );
    ensure!(
        status.pointer("/controller/hmb/descriptors") == after_reset.pointer("/controller/hmb/descriptors"),
        "the descriptor list changed across the recovery"
    );
    Ok(())
}

/// Boot the guest, run the script, check everything; `Ok` only if all passed.
pub fn run(tools: &NvmeTools, cfg: &NvmeRunConfig, phases: &mut Phases) -> Result<NvmeOutcome> {
    std::fs::create_dir_all(&cfg.run_dir)?;
    let share = cfg.run_dir.join("share");
    let _ = std::fs::remove_dir_all(&share);
    std::fs::create_dir_all(&share)?;
    let trace_parts = match cfg.trace {
        true => Some(
            tools
                .trace
                .as_ref()
                .context("a trace run needs tools prepared with the trace")?,
        ),
        false => None,
    };
    let selected = cfg.selected();
    let mods = stage_modules(tools, &share, cfg.trace)?;
    if selected.telemetry {
        crate::nvme_cli::stage(&share)?;
    }
    std::fs::write(
        share.join(files::SCRIPT),
        guest_script(
            &mods,
            cfg.iops_reads,
            trace_parts.map(|t| t.trace_module.as_str()),
            cfg.inject_fatal,
            selected,
        ),
    )?;
    let started = Instant::now();
    // The pair phase's second controller only when the module checks run.
    let peer = cfg.trace && selected.module_checks;
    let mut g = phases.run("guest boot", || start_guest(tools, cfg, &share, peer))?;

    let probe_phase = if cfg.trace {
        "probe (patched nvme)"
    } else {
        "probe (stock nvme)"
    };
    let probed = phases.run(probe_phase, || {
        g.wait_share_file(files::PROBED, cfg.timeout)?;
        let s = snapshot(&mut g.dev, &cfg.run_dir, files::PROBED)?;
        check_probed(&s)?;
        share::answer(&share, files::PROBED)?;
        Ok(s)
    })?;
    let after_reset = phases.run("data + reset_controller", || {
        g.wait_share_file(files::RESET, cfg.timeout)?;
        let s = snapshot(&mut g.dev, &cfg.run_dir, files::RESET)?;
        check_reset(&s, &probed)?;
        share::answer(&share, files::RESET)?;
        Ok(s)
    })?;
    if cfg.inject_fatal {
        phases.run("controller failure (CFS) + driver recovery", || {
            g.wait_share_file(files::FATAL, cfg.timeout)?;
            g.dev.request(&Request::Inject(Fault::Reset))?;
            let failed = snapshot(&mut g.dev, &cfg.run_dir, files::FATAL)?;
            check_failed(&failed)?;
            share::answer(&share, files::FATAL)?;
            g.wait_share_file(files::RECOVERED, cfg.timeout)?;
            let s = snapshot(&mut g.dev, &cfg.run_dir, files::RECOVERED)?;
            check_recovered(&s, &after_reset)?;
            share::answer(&share, files::RECOVERED)?;
            Ok(())
        })?;
    }
    let reads_phase = match (selected.qd32, selected.telemetry) {
        (false, false) => "4 KiB QD1 reads",
        (true, false) => "4 KiB reads (QD1, QD32)",
        (false, true) => "4 KiB QD1 reads, telemetry",
        (true, true) => "4 KiB reads (QD1, QD32), telemetry",
    };
    let (done, ground_truth) = phases.run(reads_phase, || {
        g.wait_share_file(files::DONE, cfg.timeout)?;
        let s = snapshot(&mut g.dev, &cfg.run_dir, "stats")?;
        check_shadow_doorbells(&s, &after_reset)?;
        // The journal while the controller still runs: power-off ends the
        // epoch and QEMU's disconnect resets the controller.
        // Stock driver: the journal of what was produced with no slice,
        // which the telemetry logs are checked against.
        let t = g.dev.request(&Request::GroundTruth)?;
        share::answer(&share, files::DONE)?;
        Ok((s, Some(t)))
    })?;
    // Saved while the guest goes on (4.5 MB of JSON for a main run took
    // 0.4 s of the guest's wait at the checkpoint when written before it).
    if let Some(t) = &ground_truth {
        std::fs::write(cfg.run_dir.join(files::GROUND_TRUTH), serde_json::to_string_pretty(t)?)?;
    }
    let persona_audits = match peer {
        true => Some(phases.run("removal, personalities (issue 26)", || {
            crate::nvme_personalities::serve(&mut g.vm, &mut g.dev, &share, &cfg.run_dir)
        })?),
        false => None,
    };
    let line = phases.run("guest power-off", || {
        share::wait_result(&mut g.vm, Duration::from_secs(60), Duration::from_secs(60))
    })?;
    let guest_seconds = started.elapsed().as_secs_f64();
    // A clean stop: the namespace's FTL state is read from its backing file below.
    phases.run("emu-device stop", || {
        g.dev.shutdown();
        Ok(())
    })?;
    phases.run("checks (log, data, journal)", || {
    share::move_artifacts(
        &share,
        &cfg.run_dir,
        &[
            files::RESULTS,
            files::DMESG,
            files::PATTERN,
            files::TRACE,
            files::DAEMON_STDERR,
            files::TELEMETRY[0],
            files::TELEMETRY[1],
            files::TELEMETRY_CONTROLLER,
        ],
    )?;
    ensure!(
        console::parse_result(&line) == Some(0),
        "the guest script failed: {line}\n{}",
        g.vm.console.tail(30)
    );
    let dmesg = std::fs::read_to_string(cfg.run_dir.join(files::DMESG)).context("the guest wrote no dmesg")?;
    kernel_checks::verify_active(&dmesg, tools.image.has_kfence)?;
    // The injected failures (this run's, and the personality phase's fatal
    // path) must each be seen by the driver, and are the only trouble allowed.
    let fatals = usize::from(cfg.inject_fatal)
        + if persona_audits.is_some() {
            crate::nvme_personalities::fatal_loads()
        } else {
            0
        };
    let fatal_lines: Vec<&str> = dmesg.lines().filter(|l| l.contains(FATAL_DRIVER_LINE)).collect();
    ensure!(
        fatal_lines.len() == fatals,
        "the driver's '{FATAL_DRIVER_LINE}' line is in the kernel log {} time(s), want {fatals} (one per injected failure)",
        fatal_lines.len()
    );
    let fatal_line = fatal_lines
        .first()
        .filter(|_| cfg.inject_fatal)
        .map(|l| l.split_once("] ").map_or(*l, |(_, m)| m).to_string());
    // But for the stock reports tolerated in their exact shape (qemu::stock_reports).
    let trouble: Vec<String> = crate::qemu::stock_reports::untolerated_lines(&dmesg)
        .into_iter()
        .filter(|l| is_trouble_line(l) && !(fatals > 0 && l.contains(FATAL_DRIVER_LINE)))
        .collect();
    ensure!(
        trouble.is_empty(),
        "the guest's kernel log has faults or nvme errors:\n{}",
        trouble.join("\n")
    );
    let results = parse_results(&std::fs::read_to_string(cfg.run_dir.join(files::RESULTS))?);
    // Lockdep still on at the end, after the run's last load and unload
    // (with the trace: the series' nvme.ko and our module in the pair
    // phase), so every lock taken in the run was checked.
    kernel_checks::verify_lockdep_on(
        results.get(kernel_checks::LOCKDEP_NOTE).map(String::as_str),
        tools.has_lockdep,
    )?;
    let get = |k: &str| {
        results
            .get(k)
            .cloned()
            .with_context(|| format!("the guest reported no {k}"))
    };
    let num = |k: &str| -> Result<u64> { get(k)?.parse().with_context(|| format!("{k} is not a number")) };

    // The driver's view and the controller's view of the HMB agree. With
    // the trace, the driver's line counts the cache only; the slice follows it.
    let hmb_line = get("hmb")?;
    let hmb_bytes = u64_at(&probed, "/controller/hmb/bytes")?;
    let cache_bytes = hmb_line_bytes(&hmb_line);
    match cfg.trace {
        false => ensure!(
            cache_bytes == Some(hmb_bytes),
            "the driver says {hmb_line:?}, the controller holds {hmb_bytes} bytes"
        ),
        true => {
            let ring = num("hmb_trace_kb")? << 10;
            ensure!(
                cache_bytes.is_some_and(|c| c + ring < hmb_bytes),
                "the driver says {hmb_line:?} plus a {ring}-byte ring, the controller holds {hmb_bytes} bytes"
            );
        }
    }
    let viommu = match cfg.viommu {
        true => Some(check_viommu(&probed, &get("iommu_group").unwrap_or_default())?),
        false => None,
    };
    ensure!(
        get("driver")? == "nvme",
        "the controller is bound to {:?}, not nvme",
        get("driver")?
    );

    // The pattern is where the guest put it, on the controller's side.
    let pattern = std::fs::read(cfg.run_dir.join(files::PATTERN)).context("the guest left no pattern.bin")?;
    ensure!(
        pattern.len() as u64 == PATTERN_BYTES,
        "pattern.bin has {} bytes",
        pattern.len()
    );
    // Read through the FTL of the backing file (recovered read-only, as at power-on).
    let mut on_nand = vec![0u8; pattern.len()];
    hmb_nvme::NamespaceImage::open(&cfg.run_dir.join("namespace.img"), NAMESPACE_BYTES)
        .and_then(|mut ns| ns.read(PATTERN_OFFSET, &mut on_nand))
        .context("reading the namespace from its backing file's FTL")?;
    ensure!(
        on_nand == pattern,
        "the namespace does not hold the pattern at byte {PATTERN_OFFSET} (read through the backing file's FTL)"
    );
    ensure!(get("verified_after_reset")? == "yes", "no read-back after the reset");

    let trace = match (&ground_truth, trace_parts) {
        (Some(answer), Some(parts)) => Some(check_trace(cfg, selected, answer, &done, parts, &num)?),
        _ => None,
    };
    let telemetry = match (&ground_truth, cfg.trace) {
        (Some(answer), false) if selected.telemetry => {
            Some(crate::nvme_telemetry::check(&cfg.run_dir, answer, cfg.inject_fatal)?)
        }
        _ => None,
    };
    let traced_telemetry = match (&ground_truth, cfg.trace) {
        (Some(answer), true) if selected.telemetry => Some(
            crate::traced_telemetry::check(
                &cfg.run_dir.join(files::TELEMETRY[0]),
                &cfg.run_dir.join(files::TELEMETRY_CONTROLLER),
                &cfg.run_dir.join(files::TRACE),
                &journal_truth::journal_from_ground_truth(answer)?,
                num("telemetry_centiseconds")?,
            )
            .context("telemetry beside the trace")?,
        ),
        _ => None,
    };
    let (personalities, two_controllers) = match &persona_audits {
        Some(audits) => (
            Some(crate::nvme_personalities::check(&audits.phases, &share, &results)?),
            Some(crate::nvme_personalities::check_pair(
                &audits.pair,
                &audits.phases,
                &share,
                &results,
            )?),
        ),
        None => (None, None),
    };
    let reads = num("iops_reads")?;
    let cs = num("iops_centiseconds")?.max(1);
    let qd32 = match selected.qd32 {
        true => {
            let (reads, cs) = (num("qd32_reads")?, num("qd32_centiseconds")?.max(1));
            Some(Qd32Reads {
                read_iops: reads * 100 / cs,
                reads,
                centiseconds: cs,
            })
        }
        false => None,
    };
    ensure!(
        u64_at(&done, "/controller/counters/reads")? >= reads + qd32.map_or(0, |q| q.reads),
        "the controller counted fewer reads than the guest issued"
    );
    Ok(NvmeOutcome {
        kernel: tools.image.kernel_name.clone(),
        abi: tools.image.abi.clone(),
        qemu: tools.qemu.version.clone(),
        checks: cfg.checks,
        pci: get("pci")?,
        driver: get("driver")?,
        probe_ms: num("probe_ms")?,
        probe_log_ms: probe_log_ms(&dmesg),
        hmb_line,
        hmb_bytes,
        hmb_descriptors: after_reset
            .pointer("/controller/hmb/descriptors")
            .and_then(Value::as_array)
            .map_or(0, |d| d.len() as u64),
        verified_bytes: num("verified_bytes")?,
        hmb_returned_after_reset: bool_at(&after_reset, "/controller/hmb/returned")?,
        read_iops_qd1: reads * 100 / cs,
        iops_reads: reads as u32,
        iops_centiseconds: cs,
        qd32,
        guest_seconds,
        trace,
        telemetry,
        traced_telemetry,
        personalities,
        two_controllers,
        lockdep_on_at_end: tools.has_lockdep,
        viommu,
        fatal_recovery: match fatal_line {
            Some(driver_line) => Some(FatalRecovery {
                driver_line,
                recovered_ms: num("recovered_ms")?,
            }),
            None => None,
        },
    })
    })
}

/// What a run behind QEMU's intel-iommu showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ViommuOutcome {
    /// The controller's IOMMU group in the guest.
    pub iommu_group: String,
    /// The lowest HMB descriptor address the controller was given.
    pub lowest_hmb_address: u64,
}

/// Behind the virtual IOMMU the guest put the controller in an IOMMU group,
/// and every HMB descriptor address is an IOVA beyond guest RAM (512 MiB at
/// guest physical 0 on q35): DMA addresses are not physical addresses, so
/// the trace and HMB checks of this run went through the translation.
pub(crate) fn check_viommu(probed: &Value, iommu_group: &str) -> Result<ViommuOutcome> {
    ensure!(
        !iommu_group.is_empty(),
        "--viommu: the controller has no IOMMU group in the guest (is intel_iommu=on in effect?)"
    );
    let lowest = probed
        .pointer("/controller/hmb/descriptors")
        .and_then(Value::as_array)
        .context("no HMB descriptors in the controller's report")?
        .iter()
        .map(|d| d["addr"].as_u64().unwrap_or(0))
        .min()
        .context("no HMB descriptor")?;
    let ram = u64::from(VmConfig::DEFAULT_MEMORY_MB) << 20;
    ensure!(
        lowest >= ram,
        "--viommu: an HMB descriptor at {lowest:#x} lies in guest RAM (below {ram:#x}): not an IOVA"
    );
    Ok(ViommuOutcome {
        iommu_group: iommu_group.to_string(),
        lowest_hmb_address: lowest,
    })
}

/// trace.bin against the controller's journal, byte for byte; the daemon
/// exited 0.
fn check_trace(
    cfg: &NvmeRunConfig,
    selected: Selected,
    answer: &Value,
    done: &Value,
    parts: &TraceParts,
    num: &dyn Fn(&str) -> Result<u64>,
) -> Result<TraceOutcome> {
    ensure!(
        num("daemon_rc")? == 0,
        "hmb-trace-daemon exited with {}; see daemon.stderr",
        num("daemon_rc")?
    );
    let wake_latency_us = match selected.module_checks {
        true => {
            // The daemon that watched both rmmods be refused stops normally.
            ensure!(
                num("daemon_removal_rc")? == 0,
                "the daemon running through the refused rmmods exited {}",
                num("daemon_removal_rc")?
            );
            Some([
                num("wake_min_us")?,
                num("wake_p50_us")?,
                num("wake_p90_us")?,
                num("wake_p99_us")?,
                num("wake_max_us")?,
            ])
        }
        false => None,
    };
    let journal = journal_truth::journal_from_ground_truth(answer)?;
    ensure!(
        !journal.entries.is_empty(),
        "the controller produced no trace record (was the slice advertised?)"
    );
    // Equal files prove nothing about commands never traced: the controller
    // must still be producing into the last epoch when the reads are done
    // (a REINIT the driver never advertised would end the trace silently).
    let adopted = done.pointer("/trace/adopted_generation").and_then(Value::as_u64);
    ensure!(
        adopted.is_some() && adopted == journal.epochs.last().copied(),
        "the controller is not tracing at the end (adopted generation {adopted:?}, epochs {:?}): \
         the last re-init was never advertised to it",
        journal.epochs
    );
    let report: JournalReport = journal_truth::check(&cfg.run_dir.join(files::TRACE), &journal)?;
    ensure!(
        report.passed(),
        "trace.bin does not match the controller's journal: {}",
        report.summary()
    );
    Ok(TraceOutcome {
        series_source: parts.series_source.clone(),
        hmb_trace_kb: num("hmb_trace_kb")?,
        records: report.matched,
        dropped: report.journal_dropped,
        epochs: report.epochs.clone(),
        summary: report.summary(),
        wake_latency_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_nvme_trace::Personality;
    use serde_json::json;

    #[test]
    fn the_hmb_line_of_each_kernel_gives_its_size() {
        assert_eq!(hmb_line_bytes("allocated 32 MiB host memory buffer."), Some(32 << 20));
        assert_eq!(
            hmb_line_bytes("allocated 32 MiB host memory buffer (8 segments)."),
            Some(32 << 20)
        );
        assert_eq!(hmb_line_bytes("allocated lots of host memory buffer"), None);
    }

    /// The main sequence of nvme-boot.sh: after the function definitions.
    fn main_part(s: &str) -> &str {
        &s[s.find("rm -f \"$SHARE/$RESULTS\"").unwrap()..]
    }

    const TRACE_MODULE: &str = "/lib/hmbt/nvme-hmb-trace.ko";

    #[test]
    fn the_trace_script_starts_the_daemon_after_the_probe_and_stops_it_before_done() {
        let s = guest_script(
            &["nvme_core.ko".into()],
            100,
            Some(TRACE_MODULE),
            false,
            Checks::Full.select(true, true),
        );
        assert!(s.contains("TRACE_MODULE='/lib/hmbt/nvme-hmb-trace.ko'\n"));
        let m = main_part(&s);
        let at = |w: &str| m.find(w).unwrap_or_else(|| panic!("{w} missing"));
        let nvme = at("insmod \"$SHARE/mods/nvme.ko\"");
        let start = at("|| trace_start");
        let reset = at("reset_controller");
        let stop = at("    trace_stop\n");
        let done = at("checkpoint \"$DONE\"");
        let removal = at("[ \"$MODULE_CHECKS\" != 1 ] || { trace_removal; personas; }");
        assert!(nvme < start && start < reset && reset < stop && stop < done && done < removal);
        // Lockdep's state is read after the last load and unload (the
        // personality and pair phases), right before the log is saved.
        let lockdep = at("note \"$LOCKDEP_NOTE\" \"$(sed -n 's/^ *debug_locks: *//p' /proc/lockdep_stats");
        assert!(removal < lockdep && lockdep < at("dmesg > \"$SHARE/$DMESG\"\n"));
        assert!(s.contains("LOCKDEP_NOTE='lockdep_debug_locks'"));
        // Telemetry beside the trace: pulled while the daemon still runs, so
        // trace.bin gets the records nvme-cli's commands make.
        let pull = at("    [ \"$PULL_TELEMETRY\" != 1 ] || telemetry_traced\n");
        assert!(reset < pull && pull < stop);
        assert!(s.contains("PULL_TELEMETRY='1'\n"));
        // Full: the QD32 loop after the QD1 one, the second controller's port.
        let qd1 = at("count=\"$IOPS_READS\"");
        let qd32 = at("[ \"$QD32\" != 1 ] || qd32\n");
        assert!(qd1 < qd32 && qd32 < stop);
        let peer = format!("PEER_PORT='{PEER_PORT}'\n");
        for want in ["QD32='1'\n", "MODULE_CHECKS='1'\n", peer.as_str()] {
            assert!(s.contains(want), "{want} missing");
        }
        let removal = s.find("trace_removal() {").unwrap();
        assert!(s[removal..].find("rmmod nvme_hmb_trace").unwrap() < s[removal..].find("rmmod nvme ||").unwrap());
    }

    #[test]
    fn the_probe_time_comes_from_the_driver_lines() {
        let log = "[    4.505923] nvme nvme0: pci function 0000:01:00.0\n\
                   [    4.631230] nvme nvme0: allocated 32 MiB host memory buffer.\n\
                   [    4.655292] nvme nvme0: 2/0/0 default/read/poll queues\n\
                   [    5.894794] nvme nvme0: 2/0/0 default/read/poll queues\n";
        let ms = probe_log_ms(log).unwrap();
        assert!((ms - 149.369).abs() < 0.01, "{ms}");
        assert_eq!(probe_log_ms("[ 1.0] nvme nvme0: pci function 0000:01:00.0\n"), None);
    }

    #[test]
    fn the_injected_failure_shortens_the_io_timeout_and_sits_between_reset_and_reads() {
        let s = guest_script(
            &["nvme_core.ko".into()],
            100,
            None,
            true,
            Checks::Full.select(false, true),
        );
        assert!(s.contains("NVME_CORE_PARAMS='io_timeout=3'\n") && s.contains("INJECT_FATAL='1'\n"));
        let m = main_part(&s);
        let reset = m.find("checkpoint \"$RESET\"").unwrap();
        let fatal = m.find("|| fatal\n").unwrap();
        let reads = m.find("count=\"$IOPS_READS\"").unwrap();
        assert!(reset < fatal && fatal < reads);
        assert!(s.contains("IOPS_READS='100'\n"));
    }

    #[test]
    fn nvme_timeouts_and_kernel_faults_are_trouble() {
        assert!(is_trouble_line(
            "[   12.3] nvme nvme0: I/O tag 3 (1003) QID 1 timeout, aborting"
        ));
        assert!(is_trouble_line(
            "[    1.0] WARNING: CPU: 0 PID: 1 at drivers/nvme/host/pci.c:1"
        ));
        assert!(is_trouble_line(
            "[    2.0] nvme nvme0: Removing after probe failure status: -19"
        ));
        assert!(!is_trouble_line(
            "[    2.0] nvme nvme0: allocated 32 MiB host memory buffer."
        ));
        assert!(!is_trouble_line("[    2.0] nvme nvme0: 2/0/0 default/read/poll queues"));
    }

    #[test]
    fn the_script_loads_dependencies_then_times_nvme_and_has_three_checkpoints() {
        let s = guest_script(
            &["nvme_core.ko".into(), "nvme_auth.ko".into()],
            100,
            None,
            false,
            Checks::Main.select(false, true),
        );
        for want in [
            "MODS='nvme_core.ko nvme_auth.ko'\n",
            "NVME_CORE_PARAMS=''\n",
            "INJECT_FATAL='0'\n",
            "TRACE_MODULE=''\n",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        let m = main_part(&s);
        assert!(m.find("insmod_stock\n").unwrap() < m.find("insmod \"$SHARE/mods/nvme.ko\"").unwrap());
        for (var, c) in [
            ("PROBED", files::PROBED),
            ("RESET", files::RESET),
            ("DONE", files::DONE),
        ] {
            assert!(s.contains(&format!("{var}='{c}'\n")), "{c}");
            assert!(m.contains(&format!("checkpoint \"${var}\"\n")), "{c}");
        }
    }

    #[test]
    fn the_telemetry_logs_are_pulled_only_from_a_controller_that_serves_them() {
        let with = guest_script(
            &["nvme_core.ko".into()],
            100,
            None,
            false,
            Checks::Main.select(false, true),
        );
        assert!(with.contains("PULL_TELEMETRY='1'\n"));
        let without = guest_script(
            &["nvme_core.ko".into()],
            100,
            None,
            false,
            Checks::Main.select(false, false),
        );
        assert!(without.contains("PULL_TELEMETRY='0'\n"));
        assert!(main_part(&with).contains("elif [ \"$PULL_TELEMETRY\" = 1 ]; then\n    telemetry_pull\n"));
        assert!(!Personality::Stock.serves_telemetry() && Personality::Tracing.serves_telemetry());
    }

    #[test]
    fn the_main_trace_script_skips_only_what_full_adds() {
        let s = guest_script(
            &["nvme_core.ko".into()],
            100,
            Some(TRACE_MODULE),
            false,
            Checks::Main.select(true, true),
        );
        for want in [
            "QD32='0'\n",
            "MODULE_CHECKS='0'\n",
            "PULL_TELEMETRY='0'\n",
            // No second controller to hold: peer_hold does nothing.
            "PEER_PORT=''\n",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        // The main job itself is all there: probe, data, reset, QD1 reads,
        // the trace stopped once the daemon has caught up, then done.
        let m = main_part(&s);
        let at = |w: &str| m.find(w).unwrap_or_else(|| panic!("{w} missing"));
        let order = [
            at("|| trace_start"),
            at("checkpoint \"$PROBED\""),
            at("reset_controller"),
            at("checkpoint \"$RESET\""),
            at("count=\"$IOPS_READS\""),
            at("    trace_stop\n"),
            at("checkpoint \"$DONE\""),
        ];
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        let stop = s.find("trace_stop() {").unwrap();
        assert!(s[stop..].find("trace_caught_up").unwrap() < s[stop..].find("kill -TERM").unwrap());
    }

    fn status(enabled: bool, returned: bool, enables: u64, resets: u64) -> Value {
        json!({"controller": {"ready": true, "io_queues_allocated": 2,
            "counters": {"resets": resets},
            "hmb": {"enabled": enabled, "returned": returned, "enables": enables, "disables": enables.saturating_sub(1),
                    "bytes": 32 << 20, "descriptors": [{"addr": 4096, "bytes": 32 << 20}], "last_rejection": null}}})
    }

    #[test]
    fn the_device_side_checks_fail_when_the_hmb_is_not_back() {
        let probed = status(true, false, 1, 0);
        check_probed(&probed).unwrap();
        assert!(check_probed(&status(false, false, 0, 0)).is_err());
        check_reset(&status(true, true, 2, 1), &probed).unwrap();
        // Enabled again but as a fresh buffer (no MR=1): not what the driver does.
        assert!(check_reset(&status(true, false, 2, 1), &probed).is_err());
        // No reset reached the controller.
        assert!(check_reset(&status(true, true, 2, 0), &probed).is_err());
    }

    #[test]
    fn the_shadow_doorbell_check_needs_one_ring_per_io_command_at_most() {
        let at = |io: u64, admin: u64, rings: u64, reads: u64| {
            json!({"controller": {"counters": {"io_commands": io, "admin_commands": admin,
                "doorbell_writes": rings, "shadow_doorbell_reads": reads}}})
        };
        let before = at(100, 40, 300, 200);
        check_shadow_doorbells(&at(2100, 42, 2304, 4200), &before).unwrap();
        // Both doorbells per read: the shadows are not in use.
        assert!(check_shadow_doorbells(&at(2100, 42, 4304, 4200), &before).is_err());
        // No shadow read at all.
        assert!(check_shadow_doorbells(&at(2100, 42, 2304, 200), &before).is_err());
    }

    #[test]
    fn the_failure_checks_need_cfs_then_the_buffer_back_a_third_time() {
        let after_reset = status(true, true, 2, 1);
        let mut failed = status(false, false, 2, 1);
        failed["controller"]["csts"] = json!(3);
        check_failed(&failed).unwrap();
        failed["controller"]["csts"] = json!(1);
        assert!(check_failed(&failed).is_err(), "no CFS");
        let mut recovered = status(true, true, 3, 2);
        recovered["controller"]["fatal"] = json!(false);
        recovered["controller"]["counters"]["fatal_errors"] = json!(1);
        check_recovered(&recovered, &after_reset).unwrap();
        recovered["controller"]["hmb"]["returned"] = json!(false);
        assert!(check_recovered(&recovered, &after_reset).is_err(), "a fresh buffer");
    }

    #[test]
    fn results_are_key_value_lines() {
        let r = parse_results("probe_ms=230\nhmb=allocated 32 MiB host memory buffer.\n");
        assert_eq!(r["probe_ms"], "230");
        assert_eq!(r["hmb"], "allocated 32 MiB host memory buffer.");
    }

    #[test]
    fn the_viommu_check_wants_a_group_and_iovas_beyond_guest_ram() {
        let probed = |addrs: &[u64]| {
            let d: Vec<Value> = addrs.iter().map(|a| json!({"addr": a, "bytes": 4096})).collect();
            json!({"controller": {"hmb": {"descriptors": d}}})
        };
        let out = check_viommu(&probed(&[0xfff0_0000, 0xffe0_0000]), "3").unwrap();
        assert_eq!(out.lowest_hmb_address, 0xffe0_0000);
        assert!(check_viommu(&probed(&[0xfff0_0000]), "")
            .unwrap_err()
            .to_string()
            .contains("IOMMU group"));
        let e = check_viommu(&probed(&[0xfff0_0000, 0x0100_0000]), "3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an IOVA"), "{e}");
    }
}
