//! The stock-driver run's check of NVMe Telemetry: the two Host-Initiated
//! logs Debian's nvme-cli pulled (`nvme telemetry-log`, unmodified, on the
//! kernel's own nvme driver) hold trace.bin streams whose records are, byte
//! for byte, a contiguous run of what the controller produced with no slice
//! adopted (the ground truth's `unadopted` journal), ending with the newest;
//! the second log has the next generation and the reads made between the
//! two. docs/nvme-controller.md, "Telemetry".

use std::path::Path;

use anyhow::{ensure, Context, Result};
use hmb_trace_file::{ItemKind, SliceReader, TelemetryLog};

use crate::journal_truth::{journal_from_ground_truth, JournalEntry};
use crate::nvme_guest::{files, TELEMETRY_READS_BETWEEN};

/// What the two logs held. Every field was checked before it is returned.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TelemetryOutcome {
    /// Host-Initiated Data Generation Numbers of the two logs.
    pub generations: [u8; 2],
    /// Device records in each log's stream.
    pub records: [u64; 2],
    /// Bytes of each log file, header and padding included.
    pub log_bytes: [u64; 2],
}

/// The device records of a log's stream, as the bytes the producer made
/// (header and unpadded payload), with the log's generation.
fn records(path: &Path) -> Result<(u8, Vec<Vec<u8>>, u64)> {
    let bytes = std::fs::read(path).with_context(|| format!("the guest left no {}", path.display()))?;
    let log = TelemetryLog::parse(&bytes).with_context(|| format!("{}", path.display()))?;
    ensure!(log.lid == 0x07, "{}: log identifier {:#x}", path.display(), log.lid);
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

pub fn check(run_dir: &Path, ground_truth: &serde_json::Value) -> Result<TelemetryOutcome> {
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
    Ok(TelemetryOutcome {
        generations: [g1, g2],
        records: [r1.len() as u64, r2.len() as u64],
        log_bytes: [b1, b2],
    })
}
