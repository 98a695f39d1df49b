//! Ground-truth check: does a trace.bin hold exactly what emu-device's
//! firmware model produced? Every record must match `expected_record(seed,
//! workload, seq)` byte for byte, appear once, in order, and every sequence
//! number it skips must be covered by a LOST marker.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use hmb_firmware_model::{expected_record, Workload};
use hmb_trace_file::{ItemKind, Marker, TraceReader};
use serde::Deserialize;

/// One stretch of production, as emu-device's `ground-truth` reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct Segment {
    pub epoch: u64,
    pub workload: String,
    pub seed: u64,
    pub first_seq: u64,
    pub end_seq: Option<u64>,
}

/// What the check found. `passed()` is the verdict.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TruthReport {
    pub records: u64,
    pub bytes: u64,
    pub epochs: u64,
    pub lost_counted: u64,
    /// Sequence numbers skipped without a LOST marker, as (epoch, first, count).
    pub uncounted_gaps: Vec<(u64, u64, u64)>,
    /// Records produced at the end of an epoch but absent from the file.
    pub missing_at_end: Vec<(u64, u64, u64)>,
    pub duplicates: u64,
    pub mismatches: Vec<String>,
    pub unknown: Vec<String>,
    pub truncated: Option<String>,
}

impl TruthReport {
    pub fn passed(&self) -> bool {
        self.uncounted_gaps.is_empty()
            && self.missing_at_end.is_empty()
            && self.duplicates == 0
            && self.mismatches.is_empty()
            && self.unknown.is_empty()
            && self.truncated.is_none()
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} records ({} payload bytes) in {} epoch(s) match the firmware model; {} counted as lost",
            self.records, self.bytes, self.epochs, self.lost_counted
        );
        for (e, first, n) in &self.uncounted_gaps {
            s += &format!("\n  UNCOUNTED LOSS: epoch {e}: {n} record(s) from seq {first}");
        }
        for (e, first, n) in &self.missing_at_end {
            s += &format!("\n  MISSING: epoch {e}: {n} record(s) from seq {first} never reached the file");
        }
        if self.duplicates > 0 {
            s += &format!("\n  DUPLICATES: {}", self.duplicates);
        }
        for m in self.mismatches.iter().chain(&self.unknown).take(10) {
            s += &format!("\n  {m}");
        }
        if let Some(t) = &self.truncated {
            s += &format!("\n  TRUNCATED: {t}");
        }
        s
    }
}

/// Per-epoch progress through the sequence space.
#[derive(Default)]
struct EpochCursor {
    next: u64,
}

pub fn check(trace: &Path, segments: &[Segment]) -> Result<TruthReport> {
    let file = std::fs::File::open(trace).with_context(|| format!("opening {}", trace.display()))?;
    let mut reader = TraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("reading {}", trace.display()))?;
    let mut epoch = reader.header().first_epoch;
    let mut cursors: BTreeMap<u64, EpochCursor> = BTreeMap::new();
    let mut report = TruthReport::default();
    let mut parsed: BTreeMap<String, Workload> = BTreeMap::new();
    loop {
        let item = match reader.next_item() {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) => {
                report.truncated = Some(e.to_string());
                break;
            }
        };
        let cursor = cursors.entry(epoch).or_default();
        match item.kind().context("decoding a marker")? {
            ItemKind::Marker(Marker::Epoch { epoch: e, .. }) => epoch = e,
            ItemKind::Marker(Marker::Lost {
                first_seq,
                count,
                epoch: e,
            }) => {
                if e == epoch && first_seq == cursor.next {
                    cursor.next += count;
                    report.lost_counted += count;
                } else {
                    report.mismatches.push(format!(
                        "LOST marker at {} (epoch {e}, seq {first_seq}+{count}) does not follow seq {} of epoch {epoch}",
                        item.offset, cursor.next
                    ));
                }
            }
            ItemKind::Marker(_) => {}
            ItemKind::Record => {
                let seq = item.seq();
                if seq < cursor.next {
                    report.duplicates += 1;
                    continue;
                }
                if seq > cursor.next {
                    report.uncounted_gaps.push((epoch, cursor.next, seq - cursor.next));
                }
                cursor.next = seq + 1;
                let Some(seg) = segments
                    .iter()
                    .find(|s| s.epoch == epoch && s.first_seq <= seq && s.end_seq.is_none_or(|end| seq < end))
                else {
                    report
                        .unknown
                        .push(format!("record epoch {epoch} seq {seq} was never produced"));
                    continue;
                };
                let workload = match parsed.get(&seg.workload) {
                    Some(w) => *w,
                    None => {
                        let w = Workload::parse(&seg.workload).map_err(|e| anyhow::anyhow!("{e}"))?;
                        parsed.insert(seg.workload.clone(), w);
                        w
                    }
                };
                let want = expected_record(seg.seed, workload, seq);
                if want.opcode != item.opcode() || want.source != item.source() || want.payload != item.payload {
                    report.mismatches.push(format!(
                        "epoch {epoch} seq {seq} at offset {}: opcode {:#06x}/{:#06x}, source {}/{}, {} / {} payload bytes (file/model)",
                        item.offset,
                        item.opcode(),
                        want.opcode,
                        item.source(),
                        want.source,
                        item.payload.len(),
                        want.payload.len()
                    ));
                }
                report.records += 1;
                report.bytes += item.payload.len() as u64;
            }
        }
    }
    for seg in segments {
        cursors.entry(seg.epoch).or_default();
    }
    report.epochs = cursors.len() as u64;
    for (epoch, cursor) in &cursors {
        let produced = segments
            .iter()
            .filter(|s| s.epoch == *epoch)
            .filter_map(|s| s.end_seq)
            .max()
            .unwrap_or(0);
        if produced > cursor.next {
            report
                .missing_at_end
                .push((*epoch, cursor.next, produced - cursor.next));
        }
    }
    Ok(report)
}
