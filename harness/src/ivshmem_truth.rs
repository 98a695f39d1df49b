//! Ground-truth check: does a trace.bin hold exactly what emu-device's
//! firmware model produced? Every record must match `expected_record(seed,
//! workload, seq)` byte for byte, appear once, in order, and every sequence
//! number it skips must be covered by a LOST marker.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use hmb_firmware_model::{expected_record, Workload};
use hmb_trace_file::{Event, Item};

pub use hmb_emu_device::ivshmem::report::Segment;
use hmb_emu_device::ivshmem::report::Stats;

use crate::truth_walk::{walk_trace, Place};

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
    /// Records the device dropped after the last record of a ring that was
    /// not frozen: counted in the ring header (`dropped_records`) but, by
    /// the ABI, not final until FROZEN, so no LOST marker can exist yet.
    pub trailing_device_drops: u64,
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
        if self.trailing_device_drops > 0 {
            s += &format!(
                "\n  {} record(s) dropped by the device after the last record (counted in the ring header)",
                self.trailing_device_drops
            );
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

/// Per-epoch progress through the sequence space: where the walk stands
/// and how many records were lost on the way (counted or not).
#[derive(Default)]
struct EpochCursor {
    next: u64,
    lost: u64,
}

/// The ring header of the live (not frozen) epoch at the end of a run.
#[derive(Debug, Clone, Copy)]
pub struct LiveRing {
    pub epoch: u64,
    pub dropped_records: u64,
}

/// The `LiveRing` of emu-device's `stats` answer, if its ring is not frozen.
pub fn live_ring(stats: &Stats) -> Option<LiveRing> {
    let header = stats.header.as_ref().filter(|h| !h.frozen())?;
    Some(LiveRing {
        epoch: header.epoch,
        dropped_records: header.dropped_records,
    })
}

pub fn check(trace: &Path, segments: &[Segment], live: Option<LiveRing>) -> Result<TruthReport> {
    let mut cursors: BTreeMap<u64, EpochCursor> = BTreeMap::new();
    let mut report = TruthReport::default();
    let mut parsed: BTreeMap<String, Workload> = BTreeMap::new();
    let walked = walk_trace(trace, |step| {
        let Place { epoch, expected } = step.before;
        cursors.entry(epoch).or_default();
        for ev in step.events {
            match ev {
                Event::Lost {
                    epoch: e,
                    first_seq,
                    count,
                    offset,
                } => {
                    if e == epoch && first_seq == expected {
                        cursors.entry(e).or_default().lost += count;
                        report.lost_counted += count;
                    } else {
                        report.mismatches.push(format!(
                            "LOST marker at {offset} (epoch {e}, seq {first_seq}+{count}) does not follow seq {expected} of epoch {epoch}"
                        ));
                    }
                }
                Event::Gap {
                    epoch: e,
                    first_seq,
                    count,
                    ..
                } => {
                    report.uncounted_gaps.push((e, first_seq, count));
                    cursors.entry(e).or_default().lost += count;
                }
                Event::Record { epoch: e, item } => check_record(e, item, segments, &mut parsed, &mut report)?,
                Event::SeqBackwards { .. }
                | Event::EpochStart { .. }
                | Event::Frozen { .. }
                | Event::UnknownMarker { .. } => {}
            }
        }
        if let Some(cursor) = cursors.get_mut(&step.after.epoch) {
            cursor.next = step.after.expected;
        }
        Ok(())
    })?;
    report.duplicates = walked.duplicates;
    report.truncated = walked.truncated;
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
            let missing = produced - cursor.next;
            let trailing = live
                .filter(|l| l.epoch == *epoch)
                .map(|l| l.dropped_records.saturating_sub(cursor.lost));
            if trailing == Some(missing) {
                report.trailing_device_drops += missing;
            } else {
                report.missing_at_end.push((*epoch, cursor.next, missing));
            }
        }
    }
    Ok(report)
}

/// One record against the model: which segment produced it, and are its
/// opcode, source and payload what `expected_record` says?
fn check_record(
    epoch: u64,
    item: &Item<'_>,
    segments: &[Segment],
    parsed: &mut BTreeMap<String, Workload>,
    report: &mut TruthReport,
) -> Result<()> {
    let seq = item.seq();
    let Some(seg) = segments
        .iter()
        .find(|s| s.epoch == epoch && s.first_seq <= seq && s.end_seq.is_none_or(|end| seq < end))
    else {
        report
            .unknown
            .push(format!("record epoch {epoch} seq {seq} was never produced"));
        return Ok(());
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_trace_abi::hmb_record_hdr;
    use hmb_trace_file::{FileHeader, Marker, TraceWriter};

    const SEED: u64 = 5;

    fn segment(epoch: u64, end: u64) -> Segment {
        Segment {
            epoch,
            workload: "sizes".into(),
            seed: SEED,
            first_seq: 0,
            end_seq: Some(end),
            ended_by: None,
        }
    }

    /// Write a trace.bin holding `seqs` of epoch 1 (with optional markers)
    /// exactly as the firmware model made them.
    fn trace(items: &[Item]) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut w = TraceWriter::new(file.reopen().unwrap(), &FileHeader::new(1, 0, 1 << 20, 1)).unwrap();
        let workload = Workload::parse("sizes").unwrap();
        for item in items {
            match *item {
                Item::Record(seq) => {
                    let want = expected_record(SEED, workload, seq);
                    let hdr = hmb_record_hdr {
                        length: (want.payload.len() as u32).into(),
                        opcode: want.opcode.into(),
                        seq: seq.into(),
                        source: want.source.into(),
                        ..Default::default()
                    };
                    w.write_record(&hdr, &want.payload).unwrap();
                }
                Item::Corrupt(seq) => {
                    let hdr = hmb_record_hdr {
                        length: 3u32.into(),
                        seq: seq.into(),
                        ..Default::default()
                    };
                    w.write_record(&hdr, b"bad").unwrap();
                }
                Item::Lost(first_seq, count) => {
                    w.write_marker(&Marker::Lost {
                        first_seq,
                        count,
                        epoch: 1,
                    })
                    .unwrap();
                }
            }
        }
        w.flush().unwrap();
        file
    }

    enum Item {
        Record(u64),
        Corrupt(u64),
        Lost(u64, u64),
    }
    use Item::*;

    #[test]
    fn exact_trace_passes() {
        let f = trace(&[Record(0), Record(1), Lost(2, 3), Record(5)]);
        let r = check(f.path(), &[segment(1, 6)], None).unwrap();
        assert!(r.passed(), "{}", r.summary());
        assert_eq!((r.records, r.lost_counted), (3, 3));
    }

    #[test]
    fn every_kind_of_defect_fails() {
        let gap = check(trace(&[Record(0), Record(2)]).path(), &[segment(1, 3)], None).unwrap();
        assert_eq!(gap.uncounted_gaps, vec![(1, 1, 1)]);
        let dup = check(trace(&[Record(0), Record(1), Record(1)]).path(), &[segment(1, 2)], None).unwrap();
        assert_eq!(dup.duplicates, 1);
        let bad = check(trace(&[Record(0), Corrupt(1)]).path(), &[segment(1, 2)], None).unwrap();
        assert_eq!(bad.mismatches.len(), 1);
        let unknown = check(trace(&[Record(0), Record(1)]).path(), &[segment(1, 1)], None).unwrap();
        assert_eq!(unknown.unknown.len(), 1);
        let short = check(trace(&[Record(0)]).path(), &[segment(1, 3)], None).unwrap();
        assert_eq!(short.missing_at_end, vec![(1, 1, 2)]);
        for r in [gap, dup, bad, unknown, short] {
            assert!(!r.passed());
        }
    }

    #[test]
    fn trailing_drops_pass_only_when_the_ring_header_counts_them() {
        let f = trace(&[Record(0), Lost(1, 1), Record(2)]);
        let counted = Some(LiveRing {
            epoch: 1,
            dropped_records: 3,
        });
        let r = check(f.path(), &[segment(1, 5)], counted).unwrap();
        assert!(r.passed(), "{}", r.summary());
        assert_eq!(r.trailing_device_drops, 2);
        let miscounted = Some(LiveRing {
            epoch: 1,
            dropped_records: 2,
        });
        assert!(!check(f.path(), &[segment(1, 5)], miscounted).unwrap().passed());
    }
}
