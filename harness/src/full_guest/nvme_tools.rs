//! emu-device's NVMe controller as Debian's own tools see it (issue 28), in
//! the full guest that host-integration already boots: `serve-nvme` is
//! attached through `vfio-user-pci` behind its own root port, Debian's stock
//! nvme driver binds it through udev, and the image's nvme-cli, fio,
//! util-linux and e2fsprogs (docs/images.md) drive it unmodified.
//!
//! The guest saves the tools' answers in the share (binary structures with
//! `nvme ... -b`, fio's JSON) and creates `DONE`; the host then reads the
//! controller's own report over its control socket, checks every answer
//! against it ([`check_outputs`]) and answers `OK`. Once QEMU has exited
//! the host checks the namespace, exported from its backing file's FTL ([`check_media`]):
//! `e2fsck -fn` and a file read back with `debugfs`. docs/nvme-controller.md
//! ("Real tools in the full guest") lists the checks.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use crate::guest_script::{self, Script};

/// Namespace size: room for the fio jobs and the discard ranges, and a
/// small file system; the backing is a sparse file.
pub(crate) const NAMESPACE_BYTES: u64 = 128 << 20;
/// Prefix of the NVMe controller's sockets and log in the run folder (the
/// ivshmem emu-device has the plain names).
pub(crate) const PREFIX: &str = "nvme-";
/// The namespace's backing file in the run folder.
pub(crate) const BACKING: &str = "nvme-namespace.img";
/// Folder of the share the guest writes the tools' answers to.
pub(crate) const DIR: &str = "nvme-tools";
/// The guest has finished with the tools; the host has checked them.
pub(crate) const DONE: &str = "nvme-tools.done";
pub(crate) const OK: &str = "nvme-tools.ok";
/// The controller's report at `DONE`, in the run folder.
pub(crate) const STATUS_FILE: &str = "nvme-status.json";
/// The host has injected a firmware assert (the guest waits for it, then
/// pulls the Controller-Initiated log into `TELEMETRY_CONTROLLER`).
pub(crate) const ASSERTED: &str = "nvme-assert.done";
pub(crate) const TELEMETRY_CONTROLLER: &str = "telemetry-controller.bin";
/// The two Host-Initiated logs the guest pulls (`nvme telemetry-log`, each
/// a Create), the host's look at the controller after each (`ask_files`),
/// and the 4 KiB reads the guest makes between them.
pub(crate) const TELEMETRY_HOST: [&str; 2] = ["telemetry-host-1.bin", "telemetry-host-2.bin"];
pub(crate) const TELEMETRY_ASKS: [&str; 2] = ["telemetry-1", "telemetry-2"];
const TELEMETRY_READS: u64 = 16;

/// fio jobs: name, I/O engine, block size in KiB, iodepth, offset and size
/// in MiB (random writes, then fio's own read-back with crc32c
/// verification): 4 KiB and 128 KiB, QD1 and QD32, libaio and io_uring.
const FIO_JOBS: [(&str, &str, u64, u32, u64, u64); 4] = [
    ("qd1", "libaio", 4, 1, 0, 4),
    ("qd32", "libaio", 4, 32, 8, 8),
    ("uring-qd1", "io_uring", 4, 1, 4, 4),
    ("uring-128k-qd32", "io_uring", 128, 32, 16, 16),
];
/// Where the discard checks write, discard and read back (MiB, 4 MiB each).
const DSM_AT_MIB: u64 = 32;
const WZ_AT_MIB: u64 = 40;
const RANGE_MIB: u64 = 4;
/// Where nvme-cli's own compare and dsm work (MiB): one 4 KiB block compared,
/// 1 MiB deallocated.
const COMPARE_AT_MIB: u64 = 48;
const NVME_DSM_AT_MIB: u64 = 52;
/// fio's verifying job across `nvme reset`: where (MiB), how much (MiB, in
/// 4 KiB writes), and its write rate (IOPS), slow enough that the reset
/// lands among the writes (about 3.4 s of writing).
const RESET_JOB_AT_MIB: u64 = 56;
const RESET_JOB_MIB: u64 = 4;
const RESET_JOB_WRITE_IOPS: u64 = 300;
/// Writes of that job completed before the guest sends the reset.
const RESET_AFTER_WRITES: u64 = 64;
/// The same job across a Controller Fatal Status the host sets (`inject
/// reset`) after as many writes, on its own range.
const FATAL_JOB_AT_MIB: u64 = 60;
/// The tag of that failure's rendezvous files (`fatal_files`).
pub(crate) const FATAL_TAG: &str = "tools";
/// fio's verifying job across the HMB released (Set Features 0Dh EHM=0) and
/// returned (EHM=1, MR=1, the driver's own list), both sent with nvme-cli's
/// admin passthrough: where (MiB) and how much (8 MiB: about 6.8 s of
/// writes at `RESET_JOB_WRITE_IOPS`, room for the host's three looks among
/// them).
const HMB_JOB_AT_MIB: u64 = 64;
const HMB_JOB_MIB: u64 = 8;
/// Its actions and after how many of its writes each is taken: the host
/// looks at the controller (`ask-NAME`) with the map cache in the HMB, then
/// after the release with the job still writing, then after the return.
const HMB_ACTIONS: [(&str, u64); 5] = [
    ("ask-hmb-before", 32),
    ("hmb-off", 64),
    ("ask-hmb-off", 96),
    ("hmb-on", 128),
    ("ask-hmb-on", 160),
];
/// The host's looks of that job, in order (`ask_files`).
pub(crate) const HMB_ASKS: [&str; 3] = ["hmb-before", "hmb-off", "hmb-on"];
/// fio's verifying job with trims: where and how much (MiB), the share of
/// written blocks it trims, and after how many writes it trims a batch.
/// At offset 0 (over the first fio job's range, already checked): Debian's
/// fio 3.33 with `rw=randtrimwrite` and any `offset` other than 0 only
/// trims (no write, nothing verified; seen in the guest and on a loop
/// device), which `fio_trimmed` would refuse.
const TRIM_JOB_AT_MIB: u64 = 0;
const TRIM_JOB_MIB: u64 = 4;
const TRIM_PERCENTAGE: u64 = 25;
const TRIM_BACKLOG: u64 = 16;
/// The random file the host reads back from the media with debugfs.
const PROBE_FILE: &str = "data/r3";

/// The guest script's parameters of harness/guest-scripts/full-guest-nvme-tools.sh
/// (its function `nvme_tools`, called after the PID 1 check, before the
/// host-integration steps).
pub(crate) fn guest_section(script: Script) -> Script {
    let fio: Vec<String> = FIO_JOBS
        .iter()
        .map(|(name, engine, bs, qd, off, size)| format!("{name} {engine} {bs} {qd} {off} {size}"))
        .collect();
    script
        .set("TOOLS_DIR", DIR)
        .set("TOOLS_DONE", DONE)
        .set("TOOLS_OK", OK)
        .set("FIO_JOBS", fio.join(" "))
        .set("DSM_AT_MIB", DSM_AT_MIB)
        .set("WZ_AT_MIB", WZ_AT_MIB)
        .set("RANGE_MIB", RANGE_MIB)
        .set("PROBE_FILE", PROBE_FILE)
        .set("ASSERTED", ASSERTED)
        .set("TELEMETRY_CONTROLLER", TELEMETRY_CONTROLLER)
        .set("TELEMETRY_HOST_1", TELEMETRY_HOST[0])
        .set("TELEMETRY_HOST_2", TELEMETRY_HOST[1])
        .set("TELEMETRY_READS", TELEMETRY_READS)
        .set("COMPARE_AT_MIB", COMPARE_AT_MIB)
        .set("NVME_DSM_AT_MIB", NVME_DSM_AT_MIB)
        .set("RESET_JOB_AT_MIB", RESET_JOB_AT_MIB)
        .set("RESET_JOB_MIB", RESET_JOB_MIB)
        .set("RESET_JOB_WRITE_IOPS", RESET_JOB_WRITE_IOPS)
        .set("RESET_AFTER_WRITES", RESET_AFTER_WRITES)
        .set("FATAL_JOB_AT_MIB", FATAL_JOB_AT_MIB)
        .set("HMB_JOB_AT_MIB", HMB_JOB_AT_MIB)
        .set("HMB_JOB_MIB", HMB_JOB_MIB)
        .set(
            "HMB_ACTIONS",
            HMB_ACTIONS
                .iter()
                .map(|(a, n)| format!("{a}:{n}"))
                .collect::<Vec<_>>()
                .join(" "),
        )
        .set("TRIM_JOB_AT_MIB", TRIM_JOB_AT_MIB)
        .set("TRIM_JOB_MIB", TRIM_JOB_MIB)
        .set("TRIM_PERCENTAGE", TRIM_PERCENTAGE)
        .set("TRIM_BACKLOG", TRIM_BACKLOG)
        .file(&guest_script::FULL_GUEST_NVME_TOOLS)
}

/// What the tools saw, every field checked against the controller.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolsOutcome {
    pub(crate) model: String,
    pub(crate) namespace_bytes: u64,
    pub(crate) hmb_bytes: u64,
    pub(crate) hmb_descriptors: u32,
    pub(crate) io_queues: u16,
    /// fio: bytes written and verified per job.
    pub(crate) fio_bytes: Vec<(String, u64)>,
    pub(crate) data_units_written: u128,
    pub(crate) host_write_commands: u128,
    pub(crate) error_log_entries: u128,
    /// The Controller-Initiated log of the injected firmware assert
    /// ([`check_assert_capture`], set once the ground truth is in).
    pub(crate) assert_capture: Option<crate::nvme_telemetry::ControllerLogOutcome>,
    /// The two Host-Initiated logs ([`check_host_telemetry`], set once the
    /// ground truth is in), and the guest seconds of both pulls, the reads
    /// between them and the host's looks.
    pub(crate) host_telemetry: Option<(crate::nvme_telemetry::HostLogsOutcome, f64)>,
    /// The map cache across the HMB released and returned ([`check_hmb_toggle`],
    /// set by the host's looks during that job).
    pub(crate) hmb_toggle: Option<HmbToggleOutcome>,
    /// fio's trim job: trims sent, of those the ones after their block's
    /// write (read back as zeroes), guest seconds.
    pub(crate) trims: u64,
    pub(crate) trims_verified: u64,
    pub(crate) trim_seconds: f64,
    /// Guest seconds of the job across the HMB release and return.
    pub(crate) hmb_seconds: f64,
    /// Bytes `fstrim` discarded on the mounted file system.
    pub(crate) fstrim_bytes: u64,
}

/// What the controller showed of its map cache while the guest's verifying
/// job ran with the HMB released and then returned with MR=1.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct HmbToggleOutcome {
    /// Map cache slots: in the HMB before, in controller SRAM while released.
    pub(crate) slots_in_hmb: u64,
    pub(crate) slots_internal: u64,
    /// Map pages read from NAND by the small internal cache while released.
    pub(crate) map_page_reads_released: u64,
    /// Slots the cache took over unread when the buffer came back (MR=1).
    pub(crate) slots_reused: u64,
}

impl ToolsOutcome {
    pub fn summary(&self) -> String {
        let fio: Vec<String> = self
            .fio_bytes
            .iter()
            .map(|(n, b)| format!("{n} {} KiB", b >> 10))
            .collect();
        format!(
            "{} ({} MiB), HMB {} MiB in {} descriptors, {} I/O queues; fio verified {}; SMART {} data units / {} write commands written, {} error log entries",
            self.model,
            self.namespace_bytes >> 20,
            self.hmb_bytes >> 20,
            self.hmb_descriptors,
            self.io_queues,
            fio.join(", "),
            self.data_units_written,
            self.host_write_commands,
            self.error_log_entries
        ) + &match &self.assert_capture {
            Some(c) => format!(
                "; firmware assert: log 08h generation {}, {} records of the journal",
                c.generation, c.records
            ),
            None => String::new(),
        } + &match &self.host_telemetry {
            Some((h, seconds)) => format!(
                "; log 07h created twice: generations {} -> {}, {} -> {} records, last blocks {} -> {}, {} reads between ({seconds:.1} s)",
                h.generations[0],
                h.generations[1],
                h.records[0],
                h.records[1],
                h.last_blocks[0],
                h.last_blocks[1],
                h.reads_between
            ),
            None => String::new(),
        } + &match &self.hmb_toggle {
            Some(h) => format!(
                "; HMB released and returned under fio verify ({:.1} s): map cache {} slots in the HMB -> {} internal ({} map page reads) -> {} taken over with MR=1",
                self.hmb_seconds, h.slots_in_hmb, h.slots_internal, h.map_page_reads_released, h.slots_reused
            ),
            None => String::new(),
        } + &format!(
            "; fio trim verify: {} trims, {} of written blocks read back as zeroes ({:.1} s); fstrim {} bytes",
            self.trims, self.trims_verified, self.trim_seconds, self.fstrim_bytes
        )
    }
}

/// Before the guest's tools: a recovered firmware assert on the controller
/// (`inject firmware-assert`), then `ASSERTED` for the guest.
pub(crate) fn inject_firmware_assert(nvme: &mut crate::nvme_guest::NvmeDevice, share: &Path) -> Result<()> {
    use hmb_emu_device::control::{Fault, Request};
    let answer = nvme.request(&Request::Inject(Fault::FirmwareAssert))?;
    ensure!(
        answer["controller_telemetry_generation"] == 1,
        "the firmware assert's capture: {answer}; want generation 1, the controller's first"
    );
    std::fs::write(share.join(ASSERTED), b"").context("writing the assert's file to the share")
}

/// The host's look after one of the guest's Host-Initiated pulls
/// (`TELEMETRY_ASKS`): the controller's `status`, saved as
/// `nvme-status-NAME.json`, which holds its own view of log 07h.
pub(crate) fn telemetry_look(nvme: &mut crate::nvme_guest::NvmeDevice, run_dir: &Path, name: &str) -> Result<Value> {
    let status = nvme.status()?;
    std::fs::write(
        run_dir.join(format!("nvme-status-{name}.json")),
        serde_json::to_string_pretty(&status)?,
    )?;
    Ok(status)
}

/// The guest's two Host-Initiated logs against the controller's looks after
/// each and the ground truth's journal (`nvme_telemetry::check_host_logs`),
/// with the guest seconds they took.
pub(crate) fn check_host_telemetry(
    dir: &Path,
    looks: &[Value; 2],
    ground_truth: &Value,
) -> Result<(crate::nvme_telemetry::HostLogsOutcome, f64)> {
    let outcome = crate::nvme_telemetry::check_host_logs(
        [&dir.join(TELEMETRY_HOST[0]), &dir.join(TELEMETRY_HOST[1])],
        [&looks[0], &looks[1]],
        ground_truth,
        TELEMETRY_READS,
    )
    .context("the Host-Initiated Telemetry logs (nvme telemetry-log)")?;
    let guest = key_values(&String::from_utf8_lossy(&read(dir, "guest.txt")?));
    let seconds = guest
        .get("telemetry.seconds")
        .context("guest.txt has no telemetry.seconds")?
        .parse()
        .context("telemetry.seconds")?;
    Ok((outcome, seconds))
}

/// The share's files of the guest's `ask_host NAME`: its request, and the
/// host's answer.
pub(crate) fn ask_files(name: &str) -> (String, String) {
    (format!("nvme-{name}.ask"), format!("nvme-{name}.done"))
}

/// The share's files of the guest's `ask_fatal TAG`: its request, and the
/// host's answer once CSTS.CFS is set.
pub(crate) fn fatal_files(tag: &str) -> (String, String) {
    ask_files(&format!("fatal-{tag}"))
}

/// The controller's `status` at each of the host's looks during the HMB job
/// (`HMB_ASKS`), and its `hmb-audit` at the last.
pub(crate) struct HmbLooks {
    pub(crate) before: Value,
    pub(crate) released: Value,
    pub(crate) returned: Value,
    pub(crate) audit: Value,
}

/// One of the host's looks during the guest's HMB job (`HMB_ASKS`): the
/// controller's `status` and `hmb-audit`, saved as `nvme-status-NAME.json`
/// and `nvme-hmb-audit-NAME.json`.
pub(crate) fn hmb_look(nvme: &mut crate::nvme_guest::NvmeDevice, run_dir: &Path, name: &str) -> Result<(Value, Value)> {
    let status = nvme.status()?;
    std::fs::write(
        run_dir.join(format!("nvme-status-{name}.json")),
        serde_json::to_string_pretty(&status)?,
    )?;
    let audit = nvme.request(&hmb_emu_device::control::Request::HmbAudit)?;
    std::fs::write(
        run_dir.join(format!("nvme-hmb-audit-{name}.json")),
        serde_json::to_string_pretty(&audit)?,
    )?;
    Ok((status, audit))
}

fn bool_at(v: &Value, path: &str) -> Result<bool> {
    v.pointer(path)
        .and_then(Value::as_bool)
        .with_context(|| format!("the controller's report has no {path}"))
}

/// The map cache left the HMB when the host released it, ran from the
/// controller's internal slots (reading map pages from NAND) while the job
/// went on writing, and came back when the same buffer was returned with
/// MR=1, taking slots over unread; the HMB audit found no host write.
pub(crate) fn check_hmb_toggle(l: &HmbLooks) -> Result<HmbToggleOutcome> {
    const FTL: &str = "/controller/namespace/ftl";
    let ftl = |v: &Value, k: &str| u64_at(v, &format!("{FTL}/{k}"));
    let in_hmb = |v: &Value| bool_at(v, &format!("{FTL}/cache_in_hmb"));
    let enabled = |v: &Value| bool_at(v, "/controller/hmb/enabled");
    let count = |v: &Value, k: &str| u64_at(v, &format!("/controller/hmb/{k}"));
    let (b, off, on) = (&l.before, &l.released, &l.returned);
    let map_pages = ftl(b, "geometry/map_pages")?;
    ensure!(
        enabled(b)? && in_hmb(b)? && ftl(b, "cache_slots")? == map_pages,
        "before the release: HMB enabled {}, map cache in the HMB {}, {} slots; want the whole map ({map_pages} pages) in the HMB",
        enabled(b)?,
        in_hmb(b)?,
        ftl(b, "cache_slots")?
    );
    let internal = ftl(off, "cache_slots")?;
    let reads_released = ftl(off, "map_page_reads")? - ftl(b, "map_page_reads")?.min(ftl(off, "map_page_reads")?);
    ensure!(
        !enabled(off)? && !in_hmb(off)? && internal < map_pages && count(off, "disables")? == count(b, "disables")? + 1,
        "after Set Features 0Dh EHM=0: HMB enabled {}, map cache in the HMB {}, {internal} slots, disables {} -> {}; want the cache moved to fewer internal slots and one release",
        enabled(off)?,
        in_hmb(off)?,
        count(b, "disables")?,
        count(off, "disables")?
    );
    ensure!(
        reads_released > 0,
        "while the HMB was released the job's lookups read no map page from NAND: the map cache did not run from its internal slots"
    );
    let reused = ftl(on, "cache_slots_reused")? - ftl(off, "cache_slots_reused")?.min(ftl(on, "cache_slots_reused")?);
    ensure!(
        enabled(on)?
            && bool_at(on, "/controller/hmb/returned")?
            && count(on, "enables")? == count(off, "enables")? + 1
            && on.pointer("/controller/hmb/descriptors") == b.pointer("/controller/hmb/descriptors"),
        "after Set Features 0Dh EHM=1 MR=1 with the driver's list: HMB enabled {}, returned {}, enables {} -> {}, the same descriptors {}; want the same buffer back with MR=1",
        enabled(on)?,
        on.pointer("/controller/hmb/returned").unwrap_or(&Value::Null),
        count(off, "enables")?,
        count(on, "enables")?,
        on.pointer("/controller/hmb/descriptors") == b.pointer("/controller/hmb/descriptors")
    );
    ensure!(
        in_hmb(on)? && ftl(on, "cache_slots")? == map_pages && reused > 0,
        "after the return: map cache in the HMB {}, {} slots, {reused} taken over; want the whole map back in the HMB and the unchanged slots taken over unread (MR=1)",
        in_hmb(on)?,
        ftl(on, "cache_slots")?
    );
    ensure!(
        ftl(on, "cache_corruptions")? == ftl(b, "cache_corruptions")? && u64_at(&l.audit, "/violations")? == 0,
        "the HMB audit reports {} host-write violations and the map cache {} -> {} corruptions: the host wrote into the HMB",
        u64_at(&l.audit, "/violations")?,
        ftl(b, "cache_corruptions")?,
        ftl(on, "cache_corruptions")?
    );
    Ok(HmbToggleOutcome {
        slots_in_hmb: map_pages,
        slots_internal: internal,
        map_page_reads_released: reads_released,
        slots_reused: reused,
    })
}

/// A device-side failure in the middle of a guest's verifying fio job:
/// Controller Fatal Status over the control socket (`inject reset`), checked
/// on the controller (CFS set, the HMB let go, `fatal_errors` one more than
/// `fatal_before`), then the answer file for the guest. The controller's
/// status right after the injection is saved as `nvme-status-fatal-TAG.json`.
pub(crate) fn inject_fatal(
    nvme: &mut crate::nvme_guest::NvmeDevice,
    share: &Path,
    run_dir: &Path,
    tag: &str,
    fatal_before: u64,
) -> Result<Value> {
    use hmb_emu_device::control::{Fault, Request};
    let answer = nvme.request(&Request::Inject(Fault::Reset))?;
    ensure!(
        answer["fatal_status"] == true,
        "inject reset ({tag}): {answer}; want the controller's fatal status"
    );
    let status = nvme.status()?;
    std::fs::write(
        run_dir.join(format!("nvme-status-fatal-{tag}.json")),
        serde_json::to_string_pretty(&status)?,
    )?;
    crate::nvme_guest::check_failed(&status).with_context(|| format!("right after inject reset ({tag})"))?;
    let fatal = u64_at(&status, "/controller/counters/fatal_errors")?;
    ensure!(
        fatal == fatal_before + 1,
        "the controller counts {fatal} fatal errors after inject reset ({tag}), {fatal_before} before"
    );
    std::fs::write(share.join(fatal_files(tag).1), b"").context("writing the failure's answer to the share")?;
    Ok(status)
}

/// The assert's capture as the guest pulled it, against the controller's
/// journal (`ground-truth`, taken at `DONE`).
pub(crate) fn check_assert_capture(
    dir: &Path,
    ground_truth: &Value,
) -> Result<crate::nvme_telemetry::ControllerLogOutcome> {
    crate::nvme_telemetry::check_assert_capture(&dir.join(TELEMETRY_CONTROLLER), ground_truth)
}

fn read(dir: &Path, name: &str) -> Result<Vec<u8>> {
    std::fs::read(dir.join(name)).with_context(|| format!("the guest left no {name} in {}", dir.display()))
}

fn le(b: &[u8], at: usize, len: usize) -> Result<u128> {
    let s = b
        .get(at..at + len)
        .with_context(|| format!("{len} bytes at {at} past the end ({} bytes)", b.len()))?;
    Ok(s.iter().rev().fold(0u128, |v, &x| v << 8 | u128::from(x)))
}

fn text(b: &[u8], at: usize, len: usize) -> Result<String> {
    let s = b.get(at..at + len).context("text field past the end")?;
    Ok(String::from_utf8_lossy(s).trim().to_string())
}

fn u64_at(v: &Value, path: &str) -> Result<u64> {
    v.pointer(path)
        .and_then(Value::as_u64)
        .with_context(|| format!("the controller's report has no {path}"))
}

/// SMART / Health log fields (NVMe 1.4 figure 194).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Smart {
    critical_warning: u8,
    data_units_written: u128,
    host_write_commands: u128,
    error_log_entries: u128,
}

fn smart(b: &[u8]) -> Result<Smart> {
    ensure!(b.len() == 512, "SMART log of {} bytes, want 512", b.len());
    Ok(Smart {
        critical_warning: b[0],
        data_units_written: le(b, 48, 16)?,
        host_write_commands: le(b, 80, 16)?,
        error_log_entries: le(b, 176, 16)?,
    })
}

/// How much a SMART counter rose; a counter never goes back.
fn rise(before: u128, after: u128) -> Result<u128> {
    after
        .checked_sub(before)
        .with_context(|| format!("a SMART counter went back from {before} to {after}"))
}

/// Data units as the spec counts them: thousands of 512-byte units, rounded up.
fn data_units(bytes: u64) -> u128 {
    u128::from(bytes / 512).div_ceil(1000)
}

/// `get-feature:0x07 (Number of Queues), Current value:0x00030003` -> the value.
fn feature_value(out: &str) -> Result<u32> {
    let at = out.find("value:").context("no 'value:' in get-feature's answer")?;
    let hex = out[at + 6..]
        .trim_start()
        .trim_start_matches("0x")
        .split(|c: char| !c.is_ascii_hexdigit())
        .next()
        .unwrap_or("");
    u32::from_str_radix(hex, 16).with_context(|| format!("get-feature's value is not hex: {out}"))
}

/// fio's JSON: bytes written by the job, which must have no error and have
/// read back (verified) what it wrote.
pub(crate) fn fio_written(json: &str, want_bytes: u64) -> Result<u64> {
    let start = json.find('{').context("no JSON in fio's output")?;
    let v: Value = serde_json::from_str(&json[start..]).context("fio's JSON")?;
    let job = v.pointer("/jobs/0").context("fio reported no job")?;
    let error = job
        .get("error")
        .and_then(Value::as_i64)
        .context("fio job without error field")?;
    ensure!(error == 0, "fio job error {error}");
    let written = job.pointer("/write/io_bytes").and_then(Value::as_u64).unwrap_or(0);
    let read = job.pointer("/read/io_bytes").and_then(Value::as_u64).unwrap_or(0);
    ensure!(
        written == want_bytes && read == want_bytes,
        "fio wrote {written} and verified {read} bytes, want {want_bytes} each"
    );
    Ok(written)
}

/// fio's JSON of the trim job (`randtrimwrite`: each block trimmed, then
/// written; `trim_percentage`: a share of the written blocks trimmed again
/// after `trim_backlog` writes): no error, `want_bytes` written and read
/// back, and more trims than writes, so some written blocks were trimmed
/// afterwards. fio's verify reads those back too and requires zeroes
/// (`trim_verify_zero`); a crc32c check of them would fail, so the run
/// passes only if they really read as zeroes. Returns the trims sent and,
/// of those, the ones after their block's write (verified as zeroes).
fn fio_trimmed(json: &str, want_bytes: u64) -> Result<(u64, u64)> {
    fio_written(json, want_bytes)?;
    let start = json.find('{').context("no JSON in fio's output")?;
    let v: Value = serde_json::from_str(&json[start..]).context("fio's JSON")?;
    let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let (trims, writes) = (n("/jobs/0/trim/total_ios"), n("/jobs/0/write/total_ios"));
    ensure!(
        trims > writes,
        "fio sent {trims} trims for {writes} writes: no written block was trimmed afterwards (trim_percentage)"
    );
    Ok((trims, trims - writes))
}

/// `fstrim -v`'s line `/mnt/nvme: 91.2 MiB (95633408 bytes) trimmed` -> the bytes.
fn fstrim_bytes(line: &str) -> Result<u64> {
    let inner = line
        .split_once('(')
        .and_then(|(_, r)| r.split_once(" bytes)"))
        .with_context(|| format!("fstrim's answer has no '(N bytes)': {line}"))?
        .0;
    inner
        .trim()
        .parse()
        .with_context(|| format!("fstrim's byte count: {line}"))
}

pub(crate) fn key_values(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// fio's verifying job `name` across `actions` (the guest's `fio_across`):
/// every byte of its `mib` MiB written and verified, and each action taken
/// while it was writing (after at least the action's count of its writes,
/// before the last). Returns the bytes.
fn job_across(
    dir: &Path,
    guest: &std::collections::BTreeMap<String, String>,
    name: &str,
    mib: u64,
    what: &str,
    actions: &[(&str, u64)],
) -> Result<u64> {
    let json = String::from_utf8_lossy(&read(dir, &format!("fio-{name}.json"))?).into_owned();
    let job = fio_written(&json, mib << 20).with_context(|| format!("fio job across {what}"))?;
    for (action, least) in actions {
        let key = format!("{name}.{action}_after_writes");
        let after: u64 = guest
            .get(&key)
            .with_context(|| format!("guest.txt has no {key}"))?
            .parse()
            .with_context(|| key.clone())?;
        ensure!(
            (*least..job / 4096).contains(&after),
            "{name}: {action} came after {after} of the job's {} writes: not while it was writing",
            job / 4096
        );
    }
    Ok(job)
}

/// Check the tools' answers in `dir` against `status` (serve-nvme's
/// `status`, taken after the guest's last command).
pub(crate) fn check_outputs(dir: &Path, status: &Value) -> Result<ToolsOutcome> {
    let guest = key_values(&String::from_utf8_lossy(&read(dir, "guest.txt")?));
    let g = |k: &str| guest.get(k).cloned().with_context(|| format!("guest.txt has no {k}"));
    let ns_bytes = u64_at(status, "/controller/namespace/bytes")?;
    let lba_bytes = u64_at(status, "/controller/namespace/lba_bytes")?;
    ensure!(
        ns_bytes == NAMESPACE_BYTES,
        "the controller's namespace is {ns_bytes} bytes, serve-nvme was given {NAMESPACE_BYTES}"
    );
    ensure!(
        g("bytes")? == ns_bytes.to_string(),
        "the guest's block device is {} bytes, the namespace {ns_bytes}",
        g("bytes")?
    );

    // Identify Controller (figure 247) and nvme list.
    let ctrl = read(dir, "id-ctrl.bin")?;
    ensure!(ctrl.len() == 4096, "id-ctrl gave {} bytes, want 4096", ctrl.len());
    let (serial, model, firmware) = (text(&ctrl, 4, 20)?, text(&ctrl, 24, 40)?, text(&ctrl, 64, 8)?);
    ensure!(
        g("model")? == model && g("serial")? == serial,
        "sysfs says {}/{}, id-ctrl {model}/{serial}",
        g("model")?,
        g("serial")?
    );
    let oncs = le(&ctrl, 520, 2)? as u16;
    for (bit, what) in [(0, "Compare"), (2, "Dataset Management"), (3, "Write Zeroes")] {
        ensure!(oncs & 1 << bit != 0, "id-ctrl ONCS {oncs:#x} lacks {what}");
    }
    // Format NVM (OACS bit 1) is not declared, so nvme format is not run;
    // a controller that declares it must be formatted here too.
    let oacs = le(&ctrl, 256, 2)? as u16;
    ensure!(
        oacs & 1 << 1 == 0,
        "id-ctrl OACS {oacs:#x} declares Format NVM: add nvme format to the guest's tools"
    );
    let tnvmcap = le(&ctrl, 280, 16)?;
    ensure!(
        tnvmcap == u128::from(ns_bytes),
        "id-ctrl TNVMCAP {tnvmcap}, the namespace is {ns_bytes}"
    );
    let hmpre = le(&ctrl, 272, 4)? as u64 * 4096;
    ensure!(
        hmpre == u64_at(status, "/controller/hmb/preferred_bytes")?,
        "id-ctrl HMPRE {hmpre} bytes, the controller prefers {}",
        u64_at(status, "/controller/hmb/preferred_bytes")?
    );
    let list: Value = serde_json::from_slice(&read(dir, "list.json")?).context("nvme list -o json")?;
    let devices = list
        .get("Devices")
        .and_then(Value::as_array)
        .context("nvme list: no Devices")?;
    ensure!(devices.len() == 1, "nvme list shows {} devices, want 1", devices.len());
    let d = &devices[0];
    ensure!(
        d.get("DevicePath").and_then(Value::as_str) == Some("/dev/nvme0n1")
            && d.get("ModelNumber").and_then(Value::as_str).map(str::trim) == Some(model.as_str())
            && d.get("SerialNumber").and_then(Value::as_str).map(str::trim) == Some(serial.as_str())
            && d.get("PhysicalSize").and_then(Value::as_u64) == Some(ns_bytes),
        "nvme list: {d}; want /dev/nvme0n1, {model}, {serial}, {ns_bytes} bytes"
    );

    // Identify Namespace (figure 245).
    let ns = read(dir, "id-ns.bin")?;
    ensure!(ns.len() == 4096, "id-ns gave {} bytes, want 4096", ns.len());
    let nsze = le(&ns, 0, 8)?;
    let flbas = (ns[26] & 0xf) as usize;
    let lbads = ns[128 + 4 * flbas + 2];
    ensure!(
        1u64 << lbads == lba_bytes && nsze * u128::from(lba_bytes) == u128::from(ns_bytes),
        "id-ns: NSZE {nsze} of 2^{lbads} bytes; the controller has {ns_bytes} bytes in {lba_bytes}-byte LBAs"
    );
    ensure!(
        ns[33] & 7 == 1,
        "id-ns DLFEAT {:#x}: deallocated blocks are not declared to read as zeroes",
        ns[33]
    );
    ensure!(
        g("logical_block_size")? == lba_bytes.to_string(),
        "the kernel's logical block size {} is not the LBA size {lba_bytes}",
        g("logical_block_size")?
    );
    for q in ["discard_max_bytes", "write_zeroes_max_bytes"] {
        ensure!(
            g(q)? != "0",
            "the kernel's {q} is 0: it does not use the controller's DSM / Write Zeroes"
        );
    }

    // Changed Namespace List (04h, OAES bit 8): 4096 bytes, no namespace
    // changed (the one namespace never does).
    let changed = read(dir, "log-04.bin")?;
    ensure!(
        changed.len() == 4096 && changed.iter().all(|&b| b == 0),
        "get-log 04h gave {} bytes, {} of them non-zero; want 4096 zero bytes (no namespace changed)",
        changed.len(),
        changed.iter().filter(|&&b| b != 0).count()
    );
    ensure!(
        le(&ctrl, 92, 4)? & 1 << 8 != 0,
        "id-ctrl OAES lacks bit 8 (Namespace Attribute Notices) although log 04h is served"
    );

    // Firmware Slot log: slot 1 active, holding the revision id-ctrl reports.
    let fw = read(dir, "fw-log.bin")?;
    ensure!(fw.len() == 512, "fw-log gave {} bytes", fw.len());
    ensure!(
        fw[0] & 7 == 1 && text(&fw, 8, 8)? == firmware,
        "fw-log: AFI {:#x}, slot 1 '{}'; id-ctrl FR '{firmware}'",
        fw[0],
        text(&fw, 8, 8)?
    );

    // Number of Queues (07h): NSQA/NCQA are 0-based.
    let queues = feature_value(&String::from_utf8_lossy(&read(dir, "feature-07.txt")?))?;
    let io_queues = u64::from((queues & 0xffff).min(queues >> 16)) + 1;
    ensure!(
        io_queues == u64_at(status, "/controller/io_queues_allocated")?,
        "get-feature 07h allocates {io_queues} I/O queue pairs, the controller {}",
        u64_at(status, "/controller/io_queues_allocated")?
    );

    // Host Memory Buffer (0Dh): EHM in DW0, the attributes in the data.
    let hmb0 = feature_value(&String::from_utf8_lossy(&read(dir, "feature-0d.txt")?))?;
    ensure!(hmb0 & 1 == 1, "get-feature 0Dh: EHM is 0 ({hmb0:#x})");
    let attrs = read(dir, "feature-0d.bin")?;
    let hsize = le(&attrs, 0, 4)? as u64 * 4096;
    let hmdlec = le(&attrs, 12, 4)? as u32;
    let list_addr = le(&attrs, 4, 4)? | le(&attrs, 8, 4)? << 32;
    let hmb_bytes = u64_at(status, "/controller/hmb/bytes")?;
    let descriptors = status
        .pointer("/controller/hmb/descriptors")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    ensure!(
        status.pointer("/controller/hmb/enabled") == Some(&Value::Bool(true))
            && hsize == hmb_bytes
            && hmdlec as usize == descriptors
            && list_addr != 0,
        "get-feature 0Dh: HSIZE {hsize} bytes, {hmdlec} descriptors at {list_addr:#x}; the controller: {hmb_bytes} bytes, {descriptors} descriptors"
    );

    // Error log: the newest entry is the read past the end, the one before it
    // nvme compare's miscompare.
    let past_end: u128 = g("past_end_lba")?.parse().context("past_end_lba")?;
    let compare_lba: u128 = g("compare_lba")?.parse().context("compare_lba")?;
    let errors = read(dir, "error-log.bin")?;
    ensure!(
        errors.len() >= 128 && errors.len() % 64 == 0,
        "error-log gave {} bytes, want at least two 64-byte entries",
        errors.len()
    );
    let count = le(&errors, 0, 8)?;
    for (entry, want_count, (want_sct, want_sc), want_lba, what) in [
        (0, count, (0, 0x80), past_end, "0/80h (LBA Out of Range)"),
        (
            1,
            count.wrapping_sub(1),
            (2, 0x85),
            compare_lba,
            "2/85h (Compare Failure)",
        ),
    ] {
        let at = entry * 64;
        let n = le(&errors, at, 8)?;
        let sqid = le(&errors, at + 8, 2)?;
        let sf = le(&errors, at + 12, 2)? >> 1;
        let (sct, sc) = ((sf >> 8) & 7, sf & 0xff);
        let lba = le(&errors, at + 16, 8)?;
        let nsid = le(&errors, at + 24, 4)?;
        ensure!(
            n == want_count && sct == want_sct && sc == want_sc && lba == want_lba && nsid == 1 && sqid != 0,
            "error-log entry {entry}: number {n}, SQ {sqid}, status {sct:#x}/{sc:#x}, LBA {lba}, NSID {nsid}; want number {want_count}, an I/O queue, {what}, LBA {want_lba}, NSID 1"
        );
    }

    // nvme flush: with no volatile write cache (VWC bit 0) the kernel sends
    // no flush of its own, so the controller saw exactly nvme-cli's.
    let vwc = ctrl[525] & 1;
    let flushes = u64_at(status, "/controller/counters/flushes")?;
    ensure!(
        if vwc == 0 { flushes == 1 } else { flushes >= 1 },
        "the controller saw {flushes} Flush commands (VWC {vwc}); the guest sent one with nvme flush"
    );

    // SMART: the counters against the tools' own actions and the controller.
    let s = |n: &str| smart(&read(dir, &format!("smart-{n}.bin"))?);
    let (before_fio, after_fio) = (s("before-fio")?, s("after-fio")?);
    let (before_dsm, after_dsm, after_wz, last) = (s("before-dsm")?, s("after-dsm")?, s("after-wz")?, s("final")?);
    // The driver's re-initialisation after nvme reset may fail commands the
    // controller does not support (as at the probe), after error-log was read:
    // the final count is the controller's own.
    let failed = u64_at(status, "/controller/counters/errors")?;
    let bad_doorbells = u64_at(status, "/controller/counters/invalid_doorbells")?;
    ensure!(
        last.error_log_entries >= count && last.error_log_entries == u128::from(failed + bad_doorbells),
        "SMART counts {} error log entries; error-log's newest entry was number {count}, the controller logged {failed} failed commands and {bad_doorbells} invalid doorbells",
        last.error_log_entries
    );
    let mut fio_bytes = Vec::new();
    let mut fio_total = 0;
    let mut fio_writes = 0;
    for (name, _, bs_kib, _, _, mib) in FIO_JOBS {
        let json = String::from_utf8_lossy(&read(dir, &format!("fio-{name}.json"))?).into_owned();
        let b = fio_written(&json, mib << 20).with_context(|| format!("fio job {name}"))?;
        fio_total += b;
        fio_writes += b / (bs_kib << 10);
        fio_bytes.push((name.to_string(), b));
    }
    // The jobs across nvme reset and across a Controller Fatal Status: every
    // byte verified, and the failure made while the job was still writing.
    for (name, action, what) in [
        ("reset", "reset", "nvme reset"),
        ("fatal", "fatal-tools", "the Controller Fatal Status"),
    ] {
        let job = job_across(dir, &guest, name, RESET_JOB_MIB, what, &[(action, RESET_AFTER_WRITES)])?;
        fio_bytes.push((name.to_string(), job));
    }
    // The job across the HMB released and returned: the same, for each of
    // its Set Features and the host's looks.
    let job = job_across(
        dir,
        &guest,
        "hmb",
        HMB_JOB_MIB,
        "the HMB released and returned",
        &HMB_ACTIONS,
    )?;
    fio_bytes.push(("hmb".to_string(), job));
    let seconds = |k: &str| -> Result<f64> { g(k)?.parse().with_context(|| k.to_string()) };
    let hmb_seconds = seconds("hmb.seconds")?;
    // fio's trims: the trimmed blocks read back as zeroes (DLFEAT 001b), the
    // rest as written; each trim one Dataset Management deallocate.
    let json = String::from_utf8_lossy(&read(dir, "fio-trim.json")?).into_owned();
    let (trims, trims_verified) = fio_trimmed(&json, TRIM_JOB_MIB << 20).context("fio trim job")?;
    fio_bytes.push(("trim".to_string(), TRIM_JOB_MIB << 20));
    let trim_seconds = seconds("trim.seconds")?;
    let fstrim = fstrim_bytes(&g("fstrim")?)?;
    ensure!(fstrim > 0, "fstrim discarded nothing on the new file system");
    // The failure counted once, and the controller running again with its HMB.
    let fatal_errors = u64_at(status, "/controller/counters/fatal_errors")?;
    ensure!(
        fatal_errors == 1
            && status.pointer("/controller/ready") == Some(&Value::Bool(true))
            && status.pointer("/controller/fatal") == Some(&Value::Bool(false)),
        "after the fatal job the controller counts {fatal_errors} fatal errors (want 1), ready {}, fatal {}",
        status.pointer("/controller/ready").unwrap_or(&Value::Null),
        status.pointer("/controller/fatal").unwrap_or(&Value::Null)
    );
    let commands = rise(before_fio.host_write_commands, after_fio.host_write_commands)?;
    let units = rise(before_fio.data_units_written, after_fio.data_units_written)?;
    ensure!(
        commands == u128::from(fio_writes) && units + 1 >= data_units(fio_total),
        "SMART across fio: {commands} write commands and {units} data units, fio wrote {fio_total} bytes in {fio_writes} writes"
    );
    ensure!(
        after_dsm.host_write_commands == before_dsm.host_write_commands
            && after_dsm.data_units_written == before_dsm.data_units_written,
        "SMART: blkdiscard (deallocate) counted as writes ({before_dsm:?} -> {after_dsm:?})"
    );
    ensure!(
        after_wz.host_write_commands > after_dsm.host_write_commands
            && after_wz.data_units_written == after_dsm.data_units_written,
        "SMART across blkdiscard -z: {after_dsm:?} -> {after_wz:?}; Write Zeroes is a write command that moves no data (the kernel wrote zero pages instead?)"
    );
    let written = u64_at(status, "/controller/counters/bytes_written")?;
    let writes = u64_at(status, "/controller/counters/writes")?;
    ensure!(
        last.data_units_written == data_units(written) && last.host_write_commands == u128::from(writes),
        "SMART after the last command: {} data units, {} write commands; the controller: {written} bytes ({} units), {writes} writes",
        last.data_units_written,
        last.host_write_commands,
        data_units(written)
    );
    ensure!(
        last.critical_warning == 0,
        "SMART critical warning {:#x}",
        last.critical_warning
    );
    let deallocations = u64_at(status, "/controller/counters/deallocations")?;
    ensure!(
        deallocations >= 4 + trims,
        "the controller saw {deallocations} Dataset Management deallocations; nvme dsm, blkdiscard, mkfs.ext4 and fstrim each send at least one, and fio sent {trims} trims"
    );

    // The kernel log: nothing but the one error asked for and the recoveries.
    let dmesg = String::from_utf8_lossy(&read(dir, "dmesg-nvme.txt")?).into_owned();
    check_recoveries(&dmesg, &[&format!("LBA {past_end}")], 3, 1)?;

    Ok(ToolsOutcome {
        model,
        namespace_bytes: ns_bytes,
        hmb_bytes,
        hmb_descriptors: hmdlec,
        io_queues: io_queues as u16,
        fio_bytes,
        data_units_written: last.data_units_written,
        host_write_commands: last.host_write_commands,
        error_log_entries: last.error_log_entries,
        assert_capture: None,
        host_telemetry: None,
        hmb_toggle: None,
        trims,
        trims_verified,
        trim_seconds,
        hmb_seconds,
        fstrim_bytes: fstrim,
    })
}

/// The guest's nvme kernel log `dmesg`: the driver set its I/O queues up
/// `queue_setups` times (the probe and one per recovery: nvme reset, each
/// Controller Fatal Status), found the failed controller (`FATAL_DRIVER_LINE`)
/// `fatals` times (at least once per failure: one line per command that
/// timed out on it), and no other trouble line but those containing one of
/// `asked` (errors made on purpose).
pub(crate) fn check_recoveries(dmesg: &str, asked: &[&str], queue_setups: usize, fatals: usize) -> Result<()> {
    use crate::nvme_guest::FATAL_DRIVER_LINE;
    let trouble: Vec<&str> = dmesg
        .lines()
        .filter(|l| {
            crate::nvme_guest::is_trouble_line(l)
                && !l.contains(FATAL_DRIVER_LINE)
                && !asked.iter().any(|a| l.contains(a))
        })
        .collect();
    ensure!(trouble.is_empty(), "the guest's kernel log: {}", trouble.join("\n"));
    let setups = dmesg.lines().filter(|l| l.contains("default/read/poll queues")).count();
    ensure!(
        setups == queue_setups,
        "the guest's kernel log sets the I/O queues up {setups} times; want {queue_setups} (the probe and one per recovery)"
    );
    let found = dmesg.lines().filter(|l| l.contains(FATAL_DRIVER_LINE)).count();
    ensure!(
        found >= fatals && (fatals > 0 || found == 0),
        "the guest's kernel log has {found} '{FATAL_DRIVER_LINE}' lines; want at least {fatals} (one per Controller Fatal Status)"
    );
    Ok(())
}

/// The namespace as a flat image, exported from the backing file's FTL
/// (`emu-device export-namespace` does the same), beside the backing file.
pub(crate) const EXPORT: &str = "nvme-namespace.export.img";

/// After QEMU has exited: the file system on the controller's namespace (the
/// backing file's FTL exported as a flat image) is clean (`e2fsck -fn` on the
/// host) and holds the probe file the guest wrote, byte for byte (`debugfs -R cat`).
pub(crate) fn check_media(backing: &Path, dir: &Path) -> Result<()> {
    let image = backing.with_file_name(EXPORT);
    hmb_nvme::NamespaceImage::open(backing, NAMESPACE_BYTES)
        .and_then(|mut ns| ns.export(&image))
        .with_context(|| format!("exporting the namespace of {}", backing.display()))?;
    let backing = image.as_path();
    let fsck = Command::new("e2fsck")
        .args(["-fn"])
        .arg(backing)
        .output()
        .context("running e2fsck on the namespace's backing file")?;
    if !fsck.status.success() {
        bail!(
            "e2fsck -fn {} on the host: {}\n{}",
            backing.display(),
            fsck.status,
            String::from_utf8_lossy(&fsck.stdout)
        );
    }
    let cat = Command::new("debugfs")
        .args(["-R", &format!("cat /{PROBE_FILE}")])
        .arg(backing)
        .output()
        .context("running debugfs on the namespace's backing file")?;
    let want = read(dir, "probe.bin")?;
    ensure!(
        cat.status.success() && cat.stdout == want,
        "debugfs cat /{PROBE_FILE} from the backing file: {} bytes, the guest wrote {} ({})",
        cat.stdout.len(),
        want.len(),
        String::from_utf8_lossy(&cat.stderr).trim()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feature_values_parse_as_nvme_cli_prints_them() {
        assert_eq!(
            feature_value("get-feature:0x07 (Number of Queues), Current value:0x00030003\n").unwrap(),
            0x0003_0003
        );
        assert_eq!(
            feature_value("get-feature:0xd (Host Memory Buffer), Current value:0x000001\n\tMemory Return").unwrap(),
            1
        );
        assert!(feature_value("NVMe status: INVALID_FIELD").is_err());
    }

    #[test]
    fn smart_fields_sit_where_the_spec_puts_them() {
        let mut b = vec![0u8; 512];
        b[48] = 0x10;
        b[49] = 0x01;
        b[80] = 7;
        b[176] = 3;
        let s = smart(&b).unwrap();
        assert_eq!(
            (s.data_units_written, s.host_write_commands, s.error_log_entries),
            (0x110, 7, 3)
        );
        assert!(smart(&b[..100]).is_err());
        assert_eq!(data_units(0), 0);
        assert_eq!(data_units(512), 1);
        assert_eq!(data_units(512_000), 1);
        assert_eq!(data_units(512_512), 2);
    }

    #[test]
    fn fio_json_needs_no_error_and_every_byte_verified() {
        let ok = r#"{"jobs":[{"error":0,"write":{"io_bytes":4096},"read":{"io_bytes":4096}}]}"#;
        assert_eq!(fio_written(ok, 4096).unwrap(), 4096);
        assert!(fio_written(ok, 8192).is_err());
        let unverified = r#"{"jobs":[{"error":0,"write":{"io_bytes":4096},"read":{"io_bytes":0}}]}"#;
        assert!(fio_written(unverified, 4096).is_err());
        let failed = r#"note: x
{"jobs":[{"error":84,"write":{"io_bytes":4096},"read":{"io_bytes":4096}}]}"#;
        assert!(fio_written(failed, 4096).is_err());
    }

    /// A real run's answers (host-integration on 6.1, 2026-12-05) and the
    /// controller's report at `DONE`, in a scratch copy that a test may alter.
    fn real_run() -> (tempfile::TempDir, Value) {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/full_guest/testdata");
        let dir = tempfile::tempdir().unwrap();
        for e in std::fs::read_dir(data.join(DIR)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dir.path().join(e.file_name())).unwrap();
        }
        let status = serde_json::from_str(&std::fs::read_to_string(data.join(STATUS_FILE)).unwrap()).unwrap();
        (dir, status)
    }

    /// fio's JSON of a job that failed (EILSEQ: a verify error).
    fn fio_error(b: &mut Vec<u8>) {
        *b = String::from_utf8_lossy(b)
            .replacen("\"error\" : 0", "\"error\" : 84", 1)
            .into_bytes()
    }

    fn set_at(v: &mut Value, path: &str, x: Value) {
        *v.pointer_mut(path).unwrap() = x;
    }

    fn bump(v: &mut Value, path: &str, by: i64) {
        let x = v.pointer_mut(path).unwrap();
        *x = (x.as_i64().unwrap() + by).into();
    }

    #[test]
    fn a_real_runs_answers_pass_and_each_altered_one_fails() {
        let (dir, status) = real_run();
        let seen = check_outputs(dir.path(), &status).unwrap();
        assert_eq!(
            (seen.namespace_bytes, seen.hmb_bytes, seen.io_queues),
            (128 << 20, 32 << 20, 2)
        );

        // The controller's view differs from the tools' in one field.
        for (path, by, want) in [
            (
                "/controller/counters/bytes_written",
                512_000,
                "SMART after the last command",
            ),
            ("/controller/counters/writes", 1, "SMART after the last command"),
            ("/controller/hmb/bytes", -4096, "get-feature 0Dh"),
            ("/controller/io_queues_allocated", 1, "get-feature 07h"),
            ("/controller/namespace/bytes", 4096, "serve-nvme was given"),
            ("/controller/hmb/preferred_bytes", 4096, "HMPRE"),
            ("/controller/counters/deallocations", -100, "deallocations"),
            ("/controller/counters/flushes", 1, "Flush commands"),
            ("/controller/counters/errors", 1, "error log entries"),
            ("/controller/counters/fatal_errors", 1, "fatal errors (want 1)"),
        ] {
            let mut s = status.clone();
            bump(&mut s, path, by);
            let e = check_outputs(dir.path(), &s).unwrap_err().to_string();
            assert!(e.contains(want), "{path}: {e}");
        }

        // One of the tools' answers differs.
        let alter = |file: &str, f: &dyn Fn(&mut Vec<u8>), want: &str| {
            let (dir, status) = real_run();
            let p = dir.path().join(file);
            let mut b = std::fs::read(&p).unwrap();
            f(&mut b);
            std::fs::write(&p, b).unwrap();
            let e = match check_outputs(dir.path(), &status) {
                Ok(_) => panic!("{file} altered ({want}) passed"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(want), "{file}: {e}");
        };
        // Write Zeroes done as zero-page writes: data units grow.
        alter("smart-after-wz.bin", &|b| b[48] += 8, "blkdiscard -z");
        alter("smart-after-dsm.bin", &|b| b[80] += 1, "blkdiscard (deallocate)");
        alter(
            "smart-after-fio.bin",
            &|b| b[80] = b[80].wrapping_add(1),
            "SMART across fio",
        );
        alter("smart-before-fio.bin", &|b| b[95] = 0xff, "went back");
        alter("error-log.bin", &|b| b[16] ^= 1, "error-log entry 0");
        alter("error-log.bin", &|b| b[13] = 0, "error-log entry 0");
        // The miscompare: another LBA, another status, missing.
        alter("error-log.bin", &|b| b[64 + 16] ^= 1, "error-log entry 1");
        alter("error-log.bin", &|b| b[64 + 13] = 0, "error-log entry 1");
        alter("error-log.bin", &|b| b.truncate(64), "two 64-byte entries");
        alter(
            "fio-reset.json",
            &|b| {
                *b = String::from_utf8_lossy(b)
                    .replacen("\"error\" : 0", "\"error\" : 5", 1)
                    .into_bytes()
            },
            "across nvme reset",
        );
        let set_reset_after = |n: u64| {
            move |b: &mut Vec<u8>| {
                let text: String = String::from_utf8_lossy(b)
                    .lines()
                    .map(|l| match l.starts_with("reset.reset_after_writes=") {
                        true => format!("reset.reset_after_writes={n}\n"),
                        false => format!("{l}\n"),
                    })
                    .collect();
                *b = text.into_bytes();
            }
        };
        alter("guest.txt", &set_reset_after(4096), "not while it was writing");
        alter("guest.txt", &set_reset_after(3), "not while it was writing");
        alter(
            "guest.txt",
            &|b| {
                *b = String::from_utf8_lossy(b)
                    .replace("fatal.fatal-tools_after_writes=", "fatal.fatal-tools_after_writes=9")
                    .into_bytes()
            },
            "fatal-tools came after",
        );
        alter("fio-fatal.json", &fio_error, "across the Controller Fatal Status");
        // The recovery from the fatal status is missing from the kernel log.
        alter(
            "dmesg-nvme.txt",
            &|b| {
                let text: String = String::from_utf8_lossy(b)
                    .lines()
                    .filter(|l| !l.contains(crate::nvme_guest::FATAL_DRIVER_LINE))
                    .map(|l| format!("{l}\n"))
                    .collect();
                *b = text.into_bytes();
            },
            "want at least 1",
        );
        alter(
            "dmesg-nvme.txt",
            &|b| {
                let text: String = String::from_utf8_lossy(b)
                    .lines()
                    .filter(|l| !l.contains("default/read/poll queues"))
                    .map(|l| format!("{l}\n"))
                    .collect();
                *b = text.into_bytes();
            },
            "sets the I/O queues up 0 times",
        );
        alter("fio-trim.json", &fio_error, "fio trim job");
        alter("fio-hmb.json", &fio_error, "across the HMB released and returned");
        alter(
            "guest.txt",
            &|b| {
                *b = String::from_utf8_lossy(b)
                    .replace("hmb.hmb-on_after_writes=", "hmb.hmb-on_after_writes=9")
                    .into_bytes()
            },
            "hmb-on came after",
        );
        alter(
            "guest.txt",
            &|b| {
                let text: String = String::from_utf8_lossy(b)
                    .lines()
                    .map(|l| match l.starts_with("fstrim=") {
                        true => "fstrim=/mnt/nvme: 0 B (0 bytes) trimmed\n".to_string(),
                        false => format!("{l}\n"),
                    })
                    .collect();
                *b = text.into_bytes();
            },
            "fstrim discarded nothing",
        );
        alter("log-04.bin", &|b| b[4] = 1, "get-log 04h");
        alter("log-04.bin", &|b| b.truncate(512), "get-log 04h");
        alter("id-ns.bin", &|b| b[33] = 0, "DLFEAT");
        alter("id-ctrl.bin", &|b| b[520] = 0, "ONCS");
        alter("id-ctrl.bin", &|b| b[256] = 2, "OACS");
        alter("fw-log.bin", &|b| b[8] = b'9', "fw-log");
        alter(
            "feature-0d.txt",
            &|b| *b = b"get-feature:0x0d (Host Memory Buffer), Current value:0x00000000\n".to_vec(),
            "EHM is 0",
        );
        alter("fio-qd1.json", &fio_error, "fio job qd1");
        alter(
            "list.json",
            &|b| *b = String::from_utf8_lossy(b).replace("134217728", "67108864").into_bytes(),
            "nvme list",
        );
        alter(
            "guest.txt",
            &|b| {
                *b = String::from_utf8_lossy(b)
                    .replace("write_zeroes_max_bytes=524288", "write_zeroes_max_bytes=0")
                    .into_bytes()
            },
            "write_zeroes_max_bytes is 0",
        );
        alter(
            "dmesg-nvme.txt",
            &|b| b.extend_from_slice(b"[   50.1] nvme nvme0: I/O 9 QID 1 timeout, aborting\n"),
            "kernel log",
        );
    }

    #[test]
    fn the_kernel_log_may_show_the_recoveries_and_nothing_else() {
        let fatal = "[ 9.1] nvme nvme0: controller is down; will reset: CSTS=0x3, PCI_STATUS=0x10";
        let setup = "[ 1.0] nvme nvme0: 2/0/0 default/read/poll queues";
        let log = [setup, setup, fatal, setup].join("\n");
        check_recoveries(&log, &[], 3, 1).unwrap();
        assert!(check_recoveries(&log, &[], 2, 1)
            .unwrap_err()
            .to_string()
            .contains("up 3 times"));
        assert!(check_recoveries(&log, &[], 3, 2)
            .unwrap_err()
            .to_string()
            .contains("at least 2"));
        assert!(
            check_recoveries(&log, &[], 3, 0).is_err(),
            "a fatal line where none was made"
        );
        let timeout = format!("{log}\n[ 9.2] nvme nvme0: I/O 7 QID 1 timeout, reset controller");
        assert!(check_recoveries(&timeout, &[], 3, 1)
            .unwrap_err()
            .to_string()
            .contains("QID 1 timeout"));
        let asked = format!("{log}\n[ 5.0] I/O error, dev nvme0n1, sector 262144 op 0x0:(READ) LBA 262144");
        check_recoveries(&asked, &["LBA 262144"], 3, 1).unwrap();
        assert!(check_recoveries(&asked, &[], 3, 1).is_err());
    }

    /// The three looks of an HMB job as a real run's status would show them:
    /// the whole map in the HMB, then 4 internal slots with map pages read
    /// from NAND, then the same buffer back with slots taken over.
    fn hmb_looks() -> HmbLooks {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/full_guest/testdata");
        let before: Value = serde_json::from_str(&std::fs::read_to_string(data.join(STATUS_FILE)).unwrap()).unwrap();
        let set = set_at;
        let mut released = before.clone();
        set(&mut released, "/controller/hmb/enabled", false.into());
        bump(&mut released, "/controller/hmb/disables", 1);
        set(&mut released, "/controller/namespace/ftl/cache_in_hmb", false.into());
        set(&mut released, "/controller/namespace/ftl/cache_slots", 4.into());
        bump(&mut released, "/controller/namespace/ftl/map_page_reads", 2);
        let mut returned = released.clone();
        set(&mut returned, "/controller/hmb/enabled", true.into());
        bump(&mut returned, "/controller/hmb/enables", 1);
        set(&mut returned, "/controller/namespace/ftl/cache_in_hmb", true.into());
        set(&mut returned, "/controller/namespace/ftl/cache_slots", 32.into());
        bump(&mut returned, "/controller/namespace/ftl/cache_slots_reused", 30);
        HmbLooks {
            before,
            released,
            returned,
            audit: serde_json::json!({"violations": 0}),
        }
    }

    /// A real run's looks (host-integration on 6.1, 2026-12-05). That run
    /// did not save the `hmb-audit` answer (its emu-device log has every
    /// audit check "controller-private pages unchanged"), so the audit here
    /// is the answer's one field the check reads, as that log says it was.
    #[test]
    fn a_real_runs_hmb_looks_pass() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/full_guest/testdata");
        let load =
            |f: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(data.join(f)).unwrap()).unwrap() };
        let seen = check_hmb_toggle(&HmbLooks {
            before: load("nvme-status-hmb-before.json"),
            released: load("nvme-status-hmb-off.json"),
            returned: load("nvme-status-hmb-on.json"),
            audit: serde_json::json!({"violations": 0}),
        })
        .unwrap();
        assert!(seen.slots_reused > 0 && seen.map_page_reads_released > 0, "{seen:?}");
    }

    #[test]
    fn the_map_cache_must_leave_the_hmb_and_come_back_with_memory_return() {
        let seen = check_hmb_toggle(&hmb_looks()).unwrap();
        assert_eq!(
            (
                seen.slots_in_hmb,
                seen.slots_internal,
                seen.map_page_reads_released,
                seen.slots_reused
            ),
            (32, 4, 2, 30)
        );
        /// An alteration of the looks, and what the failure must say.
        type Case = (fn(&mut HmbLooks), &'static str);
        let cases: [Case; 10] = [
            (
                |l| set_at(&mut l.before, "/controller/namespace/ftl/cache_in_hmb", false.into()),
                "before the release",
            ),
            (
                |l| set_at(&mut l.released, "/controller/hmb/enabled", true.into()),
                "after Set Features 0Dh EHM=0",
            ),
            (
                |l| set_at(&mut l.released, "/controller/namespace/ftl/cache_in_hmb", true.into()),
                "after Set Features 0Dh EHM=0",
            ),
            (
                |l| bump(&mut l.released, "/controller/namespace/ftl/map_page_reads", -2),
                "read no map page",
            ),
            (
                |l| set_at(&mut l.returned, "/controller/hmb/returned", false.into()),
                "want the same buffer back with MR=1",
            ),
            (
                |l| bump(&mut l.returned, "/controller/hmb/descriptors/0/addr", 4096),
                "want the same buffer back with MR=1",
            ),
            (
                |l| bump(&mut l.returned, "/controller/namespace/ftl/cache_slots_reused", -30),
                "taken over unread",
            ),
            (
                |l| set_at(&mut l.returned, "/controller/namespace/ftl/cache_in_hmb", false.into()),
                "after the return",
            ),
            (
                |l| l.audit = serde_json::json!({"violations": 1}),
                "host-write violations",
            ),
            (
                |l| bump(&mut l.returned, "/controller/namespace/ftl/cache_corruptions", 1),
                "host-write violations",
            ),
        ];
        for (alter, want) in cases {
            let mut l = hmb_looks();
            alter(&mut l);
            let e = format!("{:#}", check_hmb_toggle(&l).unwrap_err());
            assert!(e.contains(want), "{want}: {e}");
        }
    }

    #[test]
    fn fio_trims_and_fstrim_are_read_from_their_answers() {
        let ok = r#"{"jobs":[{"error":0,"write":{"io_bytes":8192,"total_ios":2},"read":{"io_bytes":8192},"trim":{"io_bytes":12288,"total_ios":3}}]}"#;
        assert_eq!(fio_trimmed(ok, 8192).unwrap(), (3, 1));
        // Only the trims paired with the writes: nothing trimmed after it was written.
        let paired = r#"{"jobs":[{"error":0,"write":{"io_bytes":8192,"total_ios":2},"read":{"io_bytes":8192},"trim":{"io_bytes":8192,"total_ios":2}}]}"#;
        assert!(fio_trimmed(paired, 8192)
            .unwrap_err()
            .to_string()
            .contains("trimmed afterwards"));
        // Only trims, nothing written or verified (fio 3.33 with an offset).
        let trims_only = r#"{"jobs":[{"error":0,"write":{"io_bytes":0,"total_ios":0},"read":{"io_bytes":0},"trim":{"io_bytes":8192,"total_ios":2}}]}"#;
        assert!(fio_trimmed(trims_only, 8192).is_err());
        // A trimmed block that did not read back as zeroes: fio's verify error.
        let bad = r#"{"jobs":[{"error":84,"write":{"io_bytes":8192,"total_ios":2},"read":{"io_bytes":4096},"trim":{"io_bytes":12288,"total_ios":3}}]}"#;
        assert!(fio_trimmed(bad, 8192).is_err());
        assert_eq!(
            fstrim_bytes("/mnt/nvme: 91.2 MiB (95633408 bytes) trimmed").unwrap(),
            95_633_408
        );
        assert!(fstrim_bytes("fstrim: /mnt/nvme: the discard operation is not supported").is_err());
    }

    #[test]
    fn the_section_gets_the_fio_jobs_and_the_ranges() {
        let s = guest_section(Script::new()).build();
        for want in [
            "FIO_JOBS='qd1 libaio 4 1 0 4 qd32 libaio 4 32 8 8 uring-qd1 io_uring 4 1 4 4 uring-128k-qd32 io_uring 128 32 16 16'\n",
            "WZ_AT_MIB='40'\n",
            "TOOLS_DONE='nvme-tools.done'\n",
            "PROBE_FILE='data/r3'\n",
            "nvme_tools() {",
            // Unquoted: the jobs' words must split (a quoted one word
            // would run no job at all).
            "    set -- $FIO_JOBS\n",
            "COMPARE_AT_MIB='48'\n",
            "NVME_DSM_AT_MIB='52'\n",
            "RESET_JOB_WRITE_IOPS='300'\n",
            "FATAL_JOB_AT_MIB='60'\n",
            "fio_across fatal \"$FATAL_JOB_AT_MIB\" \"$RESET_JOB_MIB\" \"$RESET_JOB_WRITE_IOPS\" \"fatal-tools:$RESET_AFTER_WRITES\"",
            "nv flush.txt flush \"$ns\"",
            "--data=/tmp/cmp-off",
            "reset) run nvme reset /dev/nvme0 ;;",
            "--controller-init --output-file=\"$out/$TELEMETRY_CONTROLLER\"",
            "TELEMETRY_HOST_2='telemetry-host-2.bin'\n",
            "run nvme telemetry-log \"$ctrl\" --output-file=\"$out/$TELEMETRY_HOST_1\"\n    ask_host telemetry-1\n",
            "ask_host telemetry-2\n",
            "HMB_ACTIONS='ask-hmb-before:32 hmb-off:64 ask-hmb-off:96 hmb-on:128 ask-hmb-on:160'\n",
            "hmb-on) hmb_set 3 ;;",
            "--cdw10=0x0d --cdw11=\"$1\"",
            "--trim_percentage=\"$TRIM_PERCENTAGE\" --trim_backlog=\"$TRIM_BACKLOG\" --trim_verify_zero=1",
            "fstrim -v /mnt/nvme",
            "nv log-04.bin get-log \"$ctrl\" --log-id=4 --log-len=4096 -b",
            "nv write-zeroes.txt write-zeroes \"$ns\"",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
    }
}
