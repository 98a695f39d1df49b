//! The stock-driver run's check of NVMe Telemetry: the two Host-Initiated
//! logs Debian's nvme-cli pulled (`nvme telemetry-log`, unmodified, on the
//! kernel's own nvme driver) hold trace.bin streams whose records are, byte
//! for byte, a contiguous run of what the controller produced with no slice
//! adopted (the ground truth's `unadopted` journal), ending with the newest;
//! the second log has the next generation and the reads made between the
//! two. Then the Controller-Initiated log (08h, `--controller-init`): with
//! an injected failure (`--inject reset`), the capture the controller took
//! at Controller Fatal Status, whose records are also a run of that journal;
//! without, no event happens in the guest and it is a header saying no
//! capture. Either way bytes 382/383 of all three headers agree.
//! The full guest's check of the capture an injected firmware assert makes
//! ([`check_assert_capture`]). docs/nvme-controller.md, "Telemetry".

use std::path::Path;

use anyhow::{ensure, Context, Result};
use hmb_trace_file::{ItemKind, SliceReader, TelemetryLog};

use crate::journal_truth::{journal_from_ground_truth, JournalEntry};

/// Stock driver: two Telemetry Host-Initiated logs by `nvme telemetry-log`,
/// with a few reads between them (files of the share and the run folder).
pub const TELEMETRY: [&str; 2] = ["telemetry-1.bin", "telemetry-2.bin"];
/// Stock driver: the Telemetry Controller-Initiated log
/// (`nvme telemetry-log --controller-init`), after the two above.
pub const TELEMETRY_CONTROLLER: &str = "telemetry-controller.bin";
/// Reads between the two telemetry logs of a stock run.
pub const TELEMETRY_READS_BETWEEN: u64 = 16;

/// The file names, as `nvme_guest::files` spells them.
mod files {
    pub(super) use super::{TELEMETRY, TELEMETRY_CONTROLLER};
}

/// What the two logs held. Every field was checked before it is returned.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TelemetryOutcome {
    /// Host-Initiated Data Generation Numbers of the two logs.
    pub generations: [u8; 2],
    /// Device records in each log's stream.
    pub records: [u64; 2],
    /// Bytes of each log file, header and padding included.
    pub log_bytes: [u64; 2],
    /// The Controller-Initiated log nvme-cli pulled after them.
    pub controller: ControllerLogOutcome,
}

/// What the Controller-Initiated log (08h) held.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ControllerLogOutcome {
    /// Controller-Initiated Data Available (byte 382).
    pub available: bool,
    /// Controller-Initiated Data Generation Number (byte 383).
    pub generation: u8,
    /// Device records in its stream (0 without a capture).
    pub records: u64,
    /// Bytes of the file.
    pub log_bytes: u64,
}

/// Bytes 382 and 383 of a telemetry header: Controller-Initiated Data
/// Available and Generation Number.
fn controller_fields(path: &Path) -> Result<[u8; 2]> {
    let bytes = std::fs::read(path).with_context(|| format!("the guest left no {}", path.display()))?;
    ensure!(
        bytes.len() >= 512,
        "{}: {} bytes, no header",
        path.display(),
        bytes.len()
    );
    Ok([bytes[382], bytes[383]])
}

/// The device records of a log's stream, as the bytes the producer made
/// (header and unpadded payload), with the log's generation.
fn records(path: &Path) -> Result<(u8, Vec<Vec<u8>>, u64)> {
    records_of(path, 0x07)
}

fn records_of(path: &Path, lid: u8) -> Result<(u8, Vec<Vec<u8>>, u64)> {
    let bytes = std::fs::read(path).with_context(|| format!("the guest left no {}", path.display()))?;
    let log = TelemetryLog::parse(&bytes).with_context(|| format!("{}", path.display()))?;
    ensure!(log.lid == lid, "{}: log identifier {:#x}", path.display(), log.lid);
    let mut out = Vec::new();
    for item in SliceReader::new(log.stream)? {
        let item = item.with_context(|| format!("{}: its trace stream", path.display()))?;
        ensure!(
            item.kind()? == ItemKind::Record,
            "{}: a marker in a run that never adopted a slice",
            path.display()
        );
        let mut r = zerocopy::IntoBytes::as_bytes(&item.hdr).to_vec();
        r.extend_from_slice(item.payload);
        out.push(r);
    }
    ensure!(
        out.len() as u64 == log.reason.records,
        "{}: {} records, the header says {}",
        path.display(),
        out.len(),
        log.reason.records
    );
    Ok((log.host_generation, out, bytes.len() as u64))
}

/// Where `records` sit in `journal`: the index of the first, after which
/// every record matches, byte for byte.
fn position(records: &[Vec<u8>], journal: &[JournalEntry], name: &str) -> Result<usize> {
    let first = records.first().with_context(|| format!("{name}: no records"))?;
    let at = journal
        .iter()
        .position(|e| e.record_bytes() == *first)
        .with_context(|| format!("{name}: its first record is not in the controller's journal"))?;
    for (i, r) in records.iter().enumerate() {
        let want = journal
            .get(at + i)
            .with_context(|| format!("{name}: record {i} is past the journal's end"))?;
        ensure!(
            want.record_bytes() == *r,
            "{name}: record {i} differs from journal entry {} (seq {})",
            at + i,
            want.seq
        );
    }
    Ok(at)
}

/// The Controller-Initiated log: a capture iff a failure was injected, and
/// then its records are a run of the journal that ends no later than the
/// first Host-Initiated log (the failure came before it).
fn check_controller_log(
    path: &Path,
    unadopted: &[JournalEntry],
    injected: bool,
    end1: usize,
) -> Result<ControllerLogOutcome> {
    let name = files::TELEMETRY_CONTROLLER;
    let bytes = std::fs::read(path).with_context(|| format!("the guest left no {name}"))?;
    ensure!(bytes.len() >= 512, "{name}: {} bytes, no header", bytes.len());
    ensure!(bytes[0] == 0x08, "{name}: log identifier {:#x}, not 08h", bytes[0]);
    ensure!(bytes[381] == 0, "{name}: byte 381 (reserved in 08h) is {}", bytes[381]);
    let (available, generation) = (bytes[382], bytes[383]);
    if !injected {
        // No event in this guest: no capture, an empty log.
        ensure!(
            (available, generation) == (0, 0),
            "{name}: Data Available {available}, generation {generation} without any event"
        );
        ensure!(bytes[8..14] == [0; 6], "{name}: data areas without a capture");
        return Ok(ControllerLogOutcome {
            available: false,
            generation,
            records: 0,
            log_bytes: bytes.len() as u64,
        });
    }
    // One failure, one capture; nvme-cli reads with RAE = 1: still available.
    ensure!(
        (available, generation) == (1, 1),
        "{name}: Data Available {available}, generation {generation} after one injected failure"
    );
    let (_, recs, log_bytes) = records_of(path, 0x08)?;
    let at = position(&recs, unadopted, name)?;
    ensure!(
        at + recs.len() <= end1,
        "{name}: the capture holds records made after the first Host-Initiated log"
    );
    Ok(ControllerLogOutcome {
        available: true,
        generation,
        records: recs.len() as u64,
        log_bytes,
    })
}

/// An I/O queue's fetch of a Flush (NVM opcode 00h).
fn is_flush_fetch(e: &JournalEntry) -> bool {
    e.opcode == hmb_firmware_model::catalog::OP_CMD_FETCH && e.source != 0 && e.payload.get(4) == Some(&0x00)
}

/// The Controller-Initiated log (`nvme telemetry-log --controller-init`)
/// that the full guest pulled after the host's `inject firmware-assert` and
/// before its one `nvme flush`: the controller's only capture (Data
/// Available 1, generation 1: nvme-cli reads with RAE = 1), whose records
/// are a run of the ground truth's journal, byte for byte, taken at the
/// assert: the guest's Flush, sent after, is in the journal but not in it.
pub(crate) fn check_assert_capture(path: &Path, ground_truth: &serde_json::Value) -> Result<ControllerLogOutcome> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("the guest left no {name}"))?;
    ensure!(bytes.len() >= 512, "{name}: {} bytes, no header", bytes.len());
    ensure!(bytes[0] == 0x08, "{name}: log identifier {:#x}, not 08h", bytes[0]);
    let (available, generation) = (bytes[382], bytes[383]);
    ensure!(
        (available, generation) == (1, 1),
        "{name}: Data Available {available}, generation {generation}; want the firmware assert's capture (1, 1)"
    );
    let journal = journal_from_ground_truth(ground_truth)?;
    let unadopted: Vec<JournalEntry> = journal.unadopted.into_iter().collect();
    let (_, recs, log_bytes) = records_of(path, 0x08)?;
    let at = position(&recs, &unadopted, &name)?;
    let end = at + recs.len();
    ensure!(
        !unadopted[at..end].iter().any(is_flush_fetch),
        "{name}: the capture holds a Flush: it was not taken at the assert, before the guest's nvme flush"
    );
    ensure!(
        unadopted[end..].iter().any(is_flush_fetch),
        "the journal has no Flush after the capture: the guest's nvme flush did not reach the controller"
    );
    Ok(ControllerLogOutcome {
        available: true,
        generation,
        records: recs.len() as u64,
        log_bytes,
    })
}

/// What the full guest's two Host-Initiated logs (07h, each pulled with
/// Create by `nvme telemetry-log`) held. Every field was checked before it
/// is returned.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct HostLogsOutcome {
    /// Host-Initiated Data Generation Numbers: the controller's first two creates.
    pub(crate) generations: [u8; 2],
    /// Data Area 3 Last Block of each (data areas 1-3 end together).
    pub(crate) last_blocks: [u16; 2],
    /// Device records in each log's stream.
    pub(crate) records: [u64; 2],
    /// Bytes of each log file, header and padding included.
    pub(crate) log_bytes: [u64; 2],
    /// Read commands on an I/O queue between the two creates.
    pub(crate) reads_between: u64,
}

/// The controller's own view of its Telemetry logs in a `status` answer of
/// the control socket: (host generation, host last block, controller
/// available, controller generation).
fn reported(status: &serde_json::Value) -> Result<(u8, u16, bool, u8)> {
    let t = status
        .pointer("/controller/telemetry")
        .context("the controller's status has no telemetry report")?;
    let int = |k: &str| -> Result<u64> {
        t.get(k)
            .and_then(serde_json::Value::as_u64)
            .with_context(|| format!("the controller's telemetry report has no {k}"))
    };
    let available = t
        .get("controller_available")
        .and_then(serde_json::Value::as_bool)
        .context("the controller's telemetry report has no controller_available")?;
    Ok((
        u8::try_from(int("host_generation")?)?,
        u16::try_from(int("host_last_block")?)?,
        available,
        u8::try_from(int("controller_generation")?)?,
    ))
}

/// One Host-Initiated log against the controller's `status` taken right
/// after nvme-cli pulled it: log identifier 07h; its generation, data areas
/// and bytes 382/383 those the controller reports; data areas 1-3 ending
/// together on the last block of the stream (nothing but the stream and
/// its padding), the file exactly that long; no ring adopted (epoch 0, the
/// stock driver); the Reason Identifier's record count that of the stream
/// (`records_of`); the records a run of the journal's `unadopted` list,
/// byte for byte, whose last is the fetch of the Get Log Page that created
/// the snapshot. Returns (generation, last block, the run's end in the
/// journal, records, bytes).
fn check_host_log(
    path: &Path,
    status: &serde_json::Value,
    unadopted: &[JournalEntry],
) -> Result<(u8, u16, usize, u64, u64)> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).with_context(|| format!("the guest left no {name}"))?;
    let log = TelemetryLog::parse(&bytes).with_context(|| name.clone())?;
    ensure!(log.lid == 0x07, "{name}: log identifier {:#x}, not 07h", log.lid);
    let (generation, last_block, available, controller_generation) = reported(status)?;
    ensure!(
        log.host_generation == generation,
        "{name}: Host-Initiated generation {}, the controller reports {generation}",
        log.host_generation
    );
    let last = log.last_blocks[2];
    ensure!(
        log.last_blocks == [last; 3] && last == last_block,
        "{name}: data areas 1-3 end at blocks {:?}, the controller reports {last_block} for all three",
        log.last_blocks
    );
    let want_last = log.reason.stream_bytes.div_ceil(512);
    ensure!(
        u64::from(last) == want_last && bytes.len() as u64 == (u64::from(last) + 1) * 512,
        "{name}: {} bytes with last block {last}; want a {}-byte stream padded to block {want_last} and nothing more",
        bytes.len(),
        log.reason.stream_bytes
    );
    ensure!(
        (log.controller_available, log.controller_generation) == (available, controller_generation),
        "{name}: Controller-Initiated fields ({}, {}), the controller reports ({available}, {controller_generation})",
        u8::from(log.controller_available),
        log.controller_generation
    );
    ensure!(
        log.reason.epoch == 0,
        "{name}: epoch {} in the Reason Identifier; the stock driver adopts no ring (epoch 0)",
        log.reason.epoch
    );
    let (_, recs, log_bytes) = records_of(path, 0x07)?;
    let at = position(&recs, unadopted, &name)?;
    let end = at + recs.len();
    let last_record = &unadopted[end - 1];
    ensure!(
        last_record.opcode == hmb_firmware_model::catalog::OP_CMD_FETCH
            && last_record.source == 0
            && last_record.payload.get(4) == Some(&0x02),
        "{name}: its last record (seq {}) is not the fetch of the Get Log Page that created it: not the newest records at the create",
        last_record.seq
    );
    Ok((generation, last, end, recs.len() as u64, log_bytes))
}

/// The full guest's two Host-Initiated logs (`paths`, pulled by
/// `nvme telemetry-log`, each with Create), each against the controller's
/// `status` taken right after it (`looks`) and against the ground truth's
/// journal ([`check_host_log`]): the first is the controller's first create
/// (generation 1), the second the next generation, ending later in the
/// journal with at least `reads_between` reads the guest made between them.
pub(crate) fn check_host_logs(
    paths: [&Path; 2],
    looks: [&serde_json::Value; 2],
    ground_truth: &serde_json::Value,
    reads_between: u64,
) -> Result<HostLogsOutcome> {
    let journal = journal_from_ground_truth(ground_truth)?;
    let unadopted: Vec<JournalEntry> = journal.unadopted.into_iter().collect();
    let (g1, l1, end1, r1, b1) = check_host_log(paths[0], looks[0], &unadopted)?;
    let (g2, l2, end2, r2, b2) = check_host_log(paths[1], looks[1], &unadopted)?;
    ensure!(
        g1 == 1 && g2 == g1.wrapping_add(1),
        "Host-Initiated generations {g1} then {g2}; want 1 (the controller's first create) then 2 (a new Create moves it on)"
    );
    ensure!(
        end2 > end1,
        "the second log ends no later in the journal than the first"
    );
    let reads = unadopted[end1..end2]
        .iter()
        .filter(|e| {
            e.opcode == hmb_firmware_model::catalog::OP_CMD_FETCH && e.source != 0 && e.payload.get(4) == Some(&0x02)
        })
        .count() as u64;
    ensure!(
        reads >= reads_between,
        "{reads} read fetches between the two Host-Initiated logs, the guest made {reads_between}"
    );
    Ok(HostLogsOutcome {
        generations: [g1, g2],
        last_blocks: [l1, l2],
        records: [r1, r2],
        log_bytes: [b1, b2],
        reads_between: reads,
    })
}

/// `injected`: the run injected a controller failure (`--inject reset`).
pub(crate) fn check(run_dir: &Path, ground_truth: &serde_json::Value, injected: bool) -> Result<TelemetryOutcome> {
    let journal = journal_from_ground_truth(ground_truth)?;
    let unadopted: Vec<JournalEntry> = journal.unadopted.into_iter().collect();
    let (g1, r1, b1) = records(&run_dir.join(files::TELEMETRY[0]))?;
    let (g2, r2, b2) = records(&run_dir.join(files::TELEMETRY[1]))?;
    ensure!(g2 == g1.wrapping_add(1), "generations {g1} then {g2}: not the next one");
    let at1 = position(&r1, &unadopted, files::TELEMETRY[0])?;
    let at2 = position(&r2, &unadopted, files::TELEMETRY[1])?;
    let end1 = at1 + r1.len();
    let end2 = at2 + r2.len();
    ensure!(end2 > end1, "the second log ends no later than the first");
    // The reads between the two creates: each a CMD_FETCH of opcode 02h on
    // an I/O queue, in the second log only.
    let reads = unadopted[end1..end2]
        .iter()
        .filter(|e| e.opcode == hmb_firmware_model::catalog::OP_CMD_FETCH && e.source != 0 && e.payload[4] == 0x02)
        .count() as u64;
    ensure!(
        reads >= TELEMETRY_READS_BETWEEN,
        "{reads} read fetches between the two logs, the guest made {TELEMETRY_READS_BETWEEN}"
    );
    let controller = check_controller_log(&run_dir.join(files::TELEMETRY_CONTROLLER), &unadopted, injected, end1)?;
    // The base specification: bytes 382/383 of log 07h equal those of 08h.
    let want = [u8::from(controller.available), controller.generation];
    for name in files::TELEMETRY {
        let got = controller_fields(&run_dir.join(name))?;
        ensure!(
            got == want,
            "{name}: Controller-Initiated fields {got:?}, log 08h has {want:?}"
        );
    }
    Ok(TelemetryOutcome {
        generations: [g1, g2],
        records: [r1.len() as u64, r2.len() as u64],
        log_bytes: [b1, b2],
        controller,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_nvme::fake_host::{Command, FakeHost};
    use hmb_nvme::ControllerConfig;
    use hmb_nvme_trace::{NvmeTrace, Personality};

    /// The full guest's sequence on the controller model with the trace
    /// producer (no slice adopted, as with the stock driver): I/O, the
    /// assert, the whole 08h log read as nvme-cli reads it (RAE = 1), then
    /// one Flush; `flush_first` sends the Flush before the assert instead.
    fn assert_then_flush(dir: &Path, flush_first: bool) -> (std::path::PathBuf, serde_json::Value) {
        let mut h = FakeHost::new(ControllerConfig::default(), 8 << 20);
        let trace = NvmeTrace::new(h.mem.clone());
        trace.install(&mut h.ctrl, Personality::Tracing);
        h.enable(32);
        h.create_io_queue(1, 16).unwrap();
        let buf = h.alloc(64 << 10);
        for lba in 0..4 {
            assert!(h
                .submit(1, Command::new(0x02).nsid(1).prp1(buf).cdw(10, lba))
                .unwrap()
                .ok());
        }
        let flush = |h: &mut FakeHost| assert!(h.submit(1, Command::new(0x00).nsid(1)).unwrap().ok());
        if flush_first {
            flush(&mut h);
        }
        assert_eq!(h.ctrl.firmware_assert("test"), Ok(1));
        let get = |h: &mut FakeHost, bytes: u32| {
            let numd = bytes / 4 - 1;
            let c = h.admin(Command::new(0x02).prp1(buf).cdw(10, 0x08 | 1 << 15 | numd << 16));
            assert!(c.ok());
            h.guest_read(buf, bytes as usize)
        };
        let hdr = get(&mut h, 512);
        let last = u32::from(u16::from_le_bytes([hdr[12], hdr[13]]));
        let log = get(&mut h, (last + 1) * 512);
        if !flush_first {
            flush(&mut h);
        }
        let path = dir.join("telemetry-controller.bin");
        std::fs::write(&path, log).unwrap();
        (path, serde_json::json!({ "journal": trace.journal() }))
    }

    /// The full guest's Host-Initiated sequence on the controller model with
    /// the trace producer (no slice adopted): a few reads, log 07h pulled as
    /// nvme-cli pulls it (the header with Create, then the whole log without),
    /// the controller's status, `reads` reads, the same again. Returns the
    /// two files, the two statuses and the ground truth.
    fn two_host_logs(dir: &Path, reads: u64) -> ([std::path::PathBuf; 2], [serde_json::Value; 2], serde_json::Value) {
        let mut h = FakeHost::new(ControllerConfig::default(), 8 << 20);
        let trace = NvmeTrace::new(h.mem.clone());
        trace.install(&mut h.ctrl, Personality::Tracing);
        h.enable(32);
        h.create_io_queue(1, 16).unwrap();
        let buf = h.alloc(4096);
        let read = |h: &mut FakeHost, lba: u32| {
            assert!(h
                .submit(1, Command::new(0x02).nsid(1).prp1(buf).cdw(10, lba))
                .unwrap()
                .ok())
        };
        // Get Log Page 07h, RAE = 1, one page at most (PRP1 only).
        let get = |h: &mut FakeHost, offset: u32, bytes: u32, create: bool| {
            let numd = bytes / 4 - 1;
            let c = h.admin(
                Command::new(0x02)
                    .prp1(buf)
                    .cdw(10, 0x07 | u32::from(create) << 8 | 1 << 15 | numd << 16)
                    .cdw(12, offset),
            );
            assert!(c.ok());
            h.guest_read(buf, bytes as usize)
        };
        let pull = |h: &mut FakeHost, file: &str| {
            let mut log = get(h, 0, 512, true);
            let end = (u32::from(u16::from_le_bytes([log[12], log[13]])) + 1) * 512;
            while (log.len() as u32) < end {
                let at = log.len() as u32;
                log.extend(get(h, at, (end - at).min(4096), false));
            }
            let path = dir.join(file);
            std::fs::write(&path, log).unwrap();
            (path, serde_json::json!({ "controller": h.ctrl.report() }))
        };
        for lba in 0..4 {
            read(&mut h, lba);
        }
        let (p1, s1) = pull(&mut h, "telemetry-host-1.bin");
        for lba in 0..reads as u32 {
            read(&mut h, lba);
        }
        let (p2, s2) = pull(&mut h, "telemetry-host-2.bin");
        ([p1, p2], [s1, s2], serde_json::json!({ "journal": trace.journal() }))
    }

    #[test]
    fn two_host_initiated_logs_pass_and_each_altered_one_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (paths, looks, truth) = two_host_logs(dir.path(), 16);
        let check = |paths: [&Path; 2], looks: [&serde_json::Value; 2]| {
            check_host_logs(paths, looks, &truth, 16).map_err(|e| format!("{e:#}"))
        };
        let seen = check([&paths[0], &paths[1]], [&looks[0], &looks[1]]).unwrap();
        assert_eq!(seen.generations, [1, 2]);
        assert!(
            seen.records[1] > seen.records[0] && seen.reads_between >= 16,
            "{seen:?}"
        );
        assert_eq!(seen.log_bytes[0], (u64::from(seen.last_blocks[0]) + 1) * 512);

        // An altered file: the second log, so the first still passes.
        let fails = |f: &dyn Fn(&mut Vec<u8>), want: &str| {
            let mut b = std::fs::read(&paths[1]).unwrap();
            f(&mut b);
            let p = dir.path().join("altered.bin");
            std::fs::write(&p, b).unwrap();
            let e = check([&paths[0], &p], [&looks[0], &looks[1]]).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        };
        fails(&|b| b[381] = 3, "Host-Initiated generation 3, the controller reports 2");
        fails(&|b| b[0] = 8, "not 07h");
        fails(
            &|b| b[8..10].copy_from_slice(&1u16.to_le_bytes()),
            "data areas 1-3 end at blocks",
        );
        fails(
            &|b| {
                let last = u16::from_le_bytes([b[12], b[13]]) + 1;
                for at in [8, 10, 12] {
                    b[at..at + 2].copy_from_slice(&last.to_le_bytes());
                }
                b.extend([0; 512]);
            },
            "the controller reports",
        );
        fails(&|b| b.extend([0; 512]), "and nothing more");
        fails(&|b| b[383] = 7, "Controller-Initiated fields");
        // A byte of the first record's payload (after the 64-byte stream
        // header and its 32-byte record header).
        fails(&|b| b[512 + 64 + 32] ^= 1, "not in the controller's journal");

        // The controller's view differs in one field.
        let reported = |k: &str, v: serde_json::Value| {
            let mut s = looks[0].clone();
            *s.pointer_mut(&format!("/controller/telemetry/{k}")).unwrap() = v;
            check([&paths[0], &paths[1]], [&s, &looks[1]]).unwrap_err()
        };
        assert!(reported("host_generation", 2.into()).contains("the controller reports 2"));
        assert!(reported("host_last_block", 999.into()).contains("the controller reports 999"));
        assert!(reported("controller_available", true.into()).contains("Controller-Initiated fields"));

        // The same snapshot twice (no new Create between), the logs swapped,
        // too few reads between them.
        let e = check([&paths[0], &paths[0]], [&looks[0], &looks[0]]).unwrap_err();
        assert!(e.contains("want 1 (the controller's first create) then 2"), "{e}");
        let e = check([&paths[1], &paths[0]], [&looks[1], &looks[0]]).unwrap_err();
        assert!(e.contains("then 2"), "{e}");
        let e = check_host_logs([&paths[0], &paths[1]], [&looks[0], &looks[1]], &truth, 17)
            .map_err(|e| format!("{e:#}"))
            .unwrap_err();
        assert!(e.contains("the guest made 17"), "{e}");
        // A snapshot that does not end at its create: the second log
        // without its last record (the Get Log Page's fetch), its header
        // made to match (records, stream bytes, data areas) and so the
        // controller's report of the last block.
        let mut b = std::fs::read(&paths[1]).unwrap();
        let mut reason = hmb_trace_file::TelemetryReason::decode(&b[384..512]).unwrap();
        let fetch = 32 + 24;
        reason.records -= 1;
        reason.stream_bytes -= fetch;
        b[384..512].copy_from_slice(&reason.encode());
        let stream_end = 512 + reason.stream_bytes as usize;
        b[stream_end..stream_end + fetch as usize].fill(0);
        let last = reason.stream_bytes.div_ceil(512) as u16;
        for at in [8, 10, 12] {
            b[at..at + 2].copy_from_slice(&last.to_le_bytes());
        }
        b.truncate((usize::from(last) + 1) * 512);
        let cut = dir.path().join("cut.bin");
        std::fs::write(&cut, b).unwrap();
        let mut look = looks[1].clone();
        *look.pointer_mut("/controller/telemetry/host_last_block").unwrap() = last.into();
        let e = check([&paths[0], &cut], [&looks[0], &look]).unwrap_err();
        assert!(e.contains("not the fetch of the Get Log Page that created it"), "{e}");
    }

    #[test]
    fn the_assert_capture_passes_and_each_altered_one_fails() {
        let dir = tempfile::tempdir().unwrap();
        let (path, truth) = assert_then_flush(dir.path(), false);
        let seen = check_assert_capture(&path, &truth).unwrap();
        assert!(seen.records >= 10, "{seen:?}");
        assert_eq!((seen.available, seen.generation), (true, 1));

        let fails = |f: &dyn Fn(&mut Vec<u8>), want: &str| {
            let mut b = std::fs::read(&path).unwrap();
            f(&mut b);
            let p = dir.path().join("altered.bin");
            std::fs::write(&p, b).unwrap();
            let e = format!("{:#}", check_assert_capture(&p, &truth).unwrap_err());
            assert!(e.contains(want), "{want}: {e}");
        };
        fails(&|b| b[383] = 2, "generation 2");
        fails(&|b| b[382] = 0, "Data Available 0");
        fails(&|b| b[0] = 7, "not 08h");
        // A byte of the first record's payload (after the 64-byte stream header
        // and its 32-byte record header).
        fails(&|b| b[512 + 64 + 32] ^= 1, "not in the controller's journal");

        // The Flush before the assert: in the capture.
        let other = tempfile::tempdir().unwrap();
        let (p, t) = assert_then_flush(other.path(), true);
        let e = check_assert_capture(&p, &t).unwrap_err().to_string();
        assert!(e.contains("the capture holds a Flush"), "{e}");
        // No Flush at all after it.
        let mut j: hmb_nvme_trace::Journal = serde_json::from_value(truth["journal"].clone()).unwrap();
        j.unadopted.retain(|e| !is_flush_fetch(e));
        let e = check_assert_capture(&path, &serde_json::json!({ "journal": j }))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no Flush after the capture"), "{e}");
    }
}
