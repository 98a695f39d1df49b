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
