//! Does a trace.bin hold exactly what the NVMe controller produced? On the
//! NVMe device the records are born of the guest's real commands, so the
//! truth is not a function of a seed (as in `truth`) but the trace
//! producer's journal (emu-device `ground-truth`: every record in
//! production order, written or dropped). Each record of the file is
//! compared byte for byte with the record the journal's entry encodes
//! (header: length, opcode, flags 0, seq, timestamp, source, reserved 0;
//! then the payload), and every written entry must be in the file.
//!
//! The journal is bounded (`serve-nvme --trace-journal`): in a long run it
//! keeps the newest records and counts the older ones it let go
//! (`Journal::evicted`). The file's records from before the first kept one
//! (earlier epochs of the journal, or its epoch with a lower seq) are then
//! counted, not compared: their number must equal the evicted written
//! records, and the kept tail is compared record by record as before.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{Context, Result};
use hmb_trace_file::Event;
use zerocopy::IntoBytes;

use crate::truth_walk::walk_trace;

pub use hmb_nvme_trace::{Journal, JournalEntry};

/// The journal out of emu-device's `ground-truth` answer on the NVMe device.
pub(crate) fn journal_from_ground_truth(answer: &serde_json::Value) -> Result<Journal> {
    serde_json::from_value(answer["journal"].clone()).context("emu-device's ground truth has no journal")
}

/// What the comparison found; `passed()` is the verdict.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct JournalReport {
    /// Records of the file equal, byte for byte, to their journal entry.
    pub matched: u64,
    /// Written entries the journal kept (each compared).
    pub journal_written: u64,
    /// Entries not written (ring full), kept or evicted: LOST must count them.
    pub journal_dropped: u64,
    /// Written records the journal evicted (counted, not kept).
    pub journal_evicted_written: u64,
    /// Records of the file from before the journal's first kept entry:
    /// counted against `journal_evicted_written`, not compared.
    pub skipped: u64,
    /// Records the daemon's LOST markers account for.
    pub lost_counted: u64,
    pub epochs: Vec<u64>,
    pub mismatches: Vec<String>,
    /// Written journal entries the file does not have: (epoch, seq).
    pub missing: Vec<(u64, u64)>,
    /// Records of the file the journal does not have.
    pub unknown: Vec<String>,
    pub uncounted_gaps: Vec<(u64, u64, u64)>,
    pub duplicates: u64,
    pub truncated: Option<String>,
}

impl JournalReport {
    pub fn passed(&self) -> bool {
        self.mismatches.is_empty()
            && self.missing.is_empty()
            && self.unknown.is_empty()
            && self.uncounted_gaps.is_empty()
            && self.duplicates == 0
            && self.truncated.is_none()
            && self.lost_counted == self.journal_dropped
            && self.matched == self.journal_written
            && self.skipped == self.journal_evicted_written
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "{} records identical to the controller's journal ({} written, {} dropped, {} counted lost), epochs {:?}",
            self.matched, self.journal_written, self.journal_dropped, self.lost_counted, self.epochs
        );
        if self.journal_evicted_written > 0 || self.skipped > 0 {
            s.push_str(&format!(
                "; the journal had evicted its oldest {} written records (its bound): {} records of the file before its first kept one skipped, not compared",
                self.journal_evicted_written, self.skipped
            ));
        }
        for (what, n) in [
            ("mismatches", self.mismatches.len()),
            ("missing", self.missing.len()),
            ("unknown", self.unknown.len()),
            ("uncounted gaps", self.uncounted_gaps.len()),
        ] {
            if n > 0 {
                s.push_str(&format!("; {n} {what}"));
            }
        }
        if let Some(first) = self.mismatches.first().or(self.unknown.first()) {
            s.push_str(&format!(" (first: {first})"));
        }
        if let Some((e, q)) = self.missing.first() {
            s.push_str(&format!(" (first missing: epoch {e} seq {q})"));
        }
        if let Some(t) = &self.truncated {
            s.push_str(&format!("; file truncated: {t}"));
        }
        s
    }
}

pub fn check(trace: &Path, journal: &Journal) -> Result<JournalReport> {
    let mut want: BTreeMap<(u64, u64), &JournalEntry> = BTreeMap::new();
    let mut report = JournalReport {
        epochs: journal.epochs.clone(),
        ..JournalReport::default()
    };
    report.journal_dropped = journal.evicted_dropped;
    report.journal_evicted_written = journal.evicted - journal.evicted_dropped;
    let evicted = evicted_part(journal);
    for e in &journal.entries {
        if e.written {
            report.journal_written += 1;
            want.insert((e.epoch, e.seq), e);
        } else {
            report.journal_dropped += 1;
        }
    }
    let walked = walk_trace(trace, |step| {
        for ev in step.events {
            match ev {
                Event::Lost { count, .. } => report.lost_counted += count,
                Event::Gap {
                    epoch,
                    first_seq,
                    count,
                    ..
                } => report.uncounted_gaps.push((epoch, first_seq, count)),
                Event::Record { epoch, item } if evicted(epoch, item.seq()) => report.skipped += 1,
                Event::Record { epoch, item } => match want.remove(&(epoch, item.seq())) {
                    None => report.unknown.push(format!(
                        "record epoch {epoch} seq {} at offset {} was never produced",
                        item.seq(),
                        item.offset
                    )),
                    Some(entry) => {
                        let mut got = item.hdr.as_bytes().to_vec();
                        got.extend_from_slice(item.payload);
                        if got == entry.record_bytes() {
                            report.matched += 1;
                        } else {
                            report.mismatches.push(format!(
                                "epoch {epoch} seq {} at offset {}: opcode {:#06x}/{:#06x}, timestamp {}/{}, source {}/{}, {}/{} payload bytes (file/journal)",
                                item.seq(),
                                item.offset,
                                item.opcode(),
                                entry.opcode,
                                item.timestamp_ns(),
                                entry.timestamp_ns,
                                item.source(),
                                entry.source,
                                item.payload.len(),
                                entry.payload.len()
                            ));
                        }
                    }
                },
                Event::SeqBackwards { .. }
                | Event::EpochStart { .. }
                | Event::Frozen { .. }
                | Event::UnknownMarker { .. } => {}
            }
        }
        Ok(())
    })?;
    report.duplicates = walked.duplicates;
    report.truncated = walked.truncated;
    report.missing = want.into_keys().collect();
    Ok(report)
}

/// Is (epoch, seq) from before the journal's first kept entry, in the part
/// it evicted? Epochs are ordered as the journal adopted them; a record of an
/// epoch the journal never adopted is not (it stays unknown: a wrong record).
fn evicted_part(journal: &Journal) -> impl Fn(u64, u64) -> bool {
    let mut rank = HashMap::new();
    for (i, &e) in journal.epochs.iter().enumerate() {
        rank.entry(e).or_insert(i);
    }
    let first_kept = if journal.evicted == 0 {
        None
    } else {
        // Nothing kept at all (cannot happen: the bound holds a record)
        // would put every adopted epoch before it.
        Some(journal.entries.first().map_or((usize::MAX, 0), |e| {
            (rank.get(&e.epoch).copied().unwrap_or(usize::MAX), e.seq)
        }))
    };
    move |epoch, seq| match (first_kept, rank.get(&epoch)) {
        (Some((kept_rank, kept_seq)), Some(&r)) => r < kept_rank || (r == kept_rank && seq < kept_seq),
        _ => false,
    }
}

/// What the trace says about one command: (qid, cid) and, for completions,
/// status and latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traced {
    Fetch {
        qid: u16,
        cid: u16,
        opcode: u8,
    },
    Complete {
        qid: u16,
        cid: u16,
        status: u16,
        latency_ns: u32,
    },
}

fn decode(opcode: u16, payload: &[u8]) -> Option<Traced> {
    let u16_at = |o: usize| payload.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        payload
            .get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    match opcode {
        hmb_firmware_model::catalog::OP_CMD_FETCH => Some(Traced::Fetch {
            qid: u16_at(0)?,
            cid: u16_at(2)?,
            opcode: *payload.get(4)?,
        }),
        hmb_firmware_model::catalog::OP_CMD_COMPLETE => Some(Traced::Complete {
            qid: u16_at(0)?,
            cid: u16_at(2)?,
            status: u16_at(4)?,
            latency_ns: u32_at(8)?,
        }),
        _ => None,
    }
}

/// The I/O commands of a trace, paired by (qid, cid): every fetch on an I/O
/// queue has exactly one completion after it and before the cid is fetched
/// again, and every completion a fetch.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pairing {
    pub paired: u64,
    pub unpaired_fetches: u64,
    pub unpaired_completions: u64,
    pub reads: u64,
    pub writes: u64,
    pub latency_ns_total: u64,
    /// Completions with a status other than success.
    pub errors: u64,
}

pub fn pair_io(journal: &Journal) -> Pairing {
    let records: Vec<(u16, &[u8])> = journal
        .entries
        .iter()
        .filter(|e| e.written)
        .map(|e| (e.opcode, e.payload.as_slice()))
        .collect();
    pair_records(&records)
}

fn pair_records(records: &[(u16, &[u8])]) -> Pairing {
    let mut open: std::collections::HashMap<(u16, u16), u8> = std::collections::HashMap::new();
    let mut p = Pairing::default();
    for (opcode, payload) in records {
        match decode(*opcode, payload) {
            Some(Traced::Fetch { qid, cid, opcode }) if qid != 0 => {
                if open.insert((qid, cid), opcode).is_some() {
                    p.unpaired_fetches += 1;
                }
                match opcode {
                    0x02 => p.reads += 1,
                    0x01 => p.writes += 1,
                    _ => {}
                }
            }
            Some(Traced::Complete {
                qid,
                cid,
                status,
                latency_ns,
            }) if qid != 0 => match open.remove(&(qid, cid)) {
                Some(_) => {
                    p.paired += 1;
                    p.latency_ns_total += u64::from(latency_ns);
                    p.errors += u64::from(status >> 1 != 0);
                }
                None => p.unpaired_completions += 1,
            },
            _ => {}
        }
    }
    p.unpaired_fetches += open.len() as u64;
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_firmware_model::catalog::{OP_CMD_COMPLETE, OP_CMD_FETCH};
    use hmb_trace_abi::hmb_record_hdr;
    use hmb_trace_file::{FileHeader, TraceWriter};

    fn entry(seq: u64, written: bool) -> JournalEntry {
        JournalEntry {
            epoch: 1,
            seq,
            opcode: 0x0101,
            source: 3,
            timestamp_ns: 1000 + seq,
            payload: vec![seq as u8; 24],
            written,
        }
    }

    /// A trace.bin of epoch 1 holding `records` (journal encodings).
    fn write_trace(dir: &Path, records: &[Vec<u8>]) -> std::path::PathBuf {
        use zerocopy::FromBytes;
        let path = dir.join("trace.bin");
        let file = std::fs::File::create(&path).unwrap();
        let mut w = TraceWriter::new(file, &FileHeader::new(1, 0, 1 << 16, 1)).unwrap();
        for r in records {
            let (hdr, payload) = hmb_record_hdr::read_from_prefix(r).unwrap();
            w.write_record(&hdr, payload).unwrap();
        }
        path
    }

    #[test]
    fn a_file_with_every_journal_record_passes_and_a_changed_byte_fails() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal {
            entries: (0..4).map(|s| entry(s, true)).collect(),
            epochs: vec![1],
            ..Journal::default()
        };
        let good: Vec<Vec<u8>> = journal.entries.iter().map(JournalEntry::record_bytes).collect();
        let r = check(&write_trace(dir.path(), &good), &journal).unwrap();
        assert!(r.passed(), "{}", r.summary());
        assert_eq!(r.matched, 4);

        let mut bad = good.clone();
        let last = bad[2].len() - 1;
        bad[2][last] ^= 1;
        let r = check(&write_trace(dir.path(), &bad), &journal).unwrap();
        assert!(!r.passed());
        assert_eq!(r.mismatches.len(), 1, "{}", r.summary());

        let short = &good[..3];
        let r = check(&write_trace(dir.path(), short), &journal).unwrap();
        assert!(!r.passed());
        assert_eq!(r.missing, vec![(1, 3)]);
    }

    /// A journal that evicted its oldest records: the file's records before
    /// the first kept one are counted, the rest compared; a changed kept
    /// record, a record past the journal and a missing evicted one all fail.
    #[test]
    fn an_evicting_journal_compares_its_tail_and_counts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let all: Vec<JournalEntry> = (0..12).map(|s| entry(s, true)).collect();
        let journal = Journal {
            entries: all[5..].to_vec(),
            evicted: 5,
            epochs: vec![1],
            ..Journal::default()
        };
        let good: Vec<Vec<u8>> = all.iter().map(JournalEntry::record_bytes).collect();
        let r = check(&write_trace(dir.path(), &good), &journal).unwrap();
        assert!(r.passed(), "{}", r.summary());
        assert_eq!((r.matched, r.skipped, r.journal_evicted_written), (7, 5, 5));
        assert!(r
            .summary()
            .contains("5 records of the file before its first kept one skipped"));

        let mut bad = good.clone();
        let last = bad[9].len() - 1;
        bad[9][last] ^= 1;
        let r = check(&write_trace(dir.path(), &bad), &journal).unwrap();
        assert!(!r.passed());
        assert_eq!(r.mismatches.len(), 1, "{}", r.summary());

        // The file lacks the first evicted record: one fewer skipped.
        let r = check(&write_trace(dir.path(), &good[1..]), &journal).unwrap();
        assert!(!r.passed());
        assert_eq!(r.skipped, 4);

        // A record the controller never produced, after the kept tail.
        let mut extra = good.clone();
        extra.push(entry(12, true).record_bytes());
        let r = check(&write_trace(dir.path(), &extra), &journal).unwrap();
        assert!(!r.passed());
        assert_eq!(r.unknown.len(), 1, "{}", r.summary());

        // The same file against the whole journal: nothing skipped.
        let whole = Journal {
            entries: all,
            epochs: vec![1],
            ..Journal::default()
        };
        let r = check(&write_trace(dir.path(), &good), &whole).unwrap();
        assert!(r.passed(), "{}", r.summary());
        assert_eq!((r.matched, r.skipped), (12, 0));
    }

    fn fetch(qid: u16, cid: u16, opcode: u8) -> (u16, Vec<u8>) {
        let mut p = vec![0u8; 24];
        p[0..2].copy_from_slice(&qid.to_le_bytes());
        p[2..4].copy_from_slice(&cid.to_le_bytes());
        p[4] = opcode;
        (OP_CMD_FETCH, p)
    }

    fn complete(qid: u16, cid: u16, latency: u32) -> (u16, Vec<u8>) {
        let mut p = vec![0u8; 16];
        p[0..2].copy_from_slice(&qid.to_le_bytes());
        p[2..4].copy_from_slice(&cid.to_le_bytes());
        p[8..12].copy_from_slice(&latency.to_le_bytes());
        (OP_CMD_COMPLETE, p)
    }

    #[test]
    fn io_commands_pair_by_queue_and_command_id() {
        let good = [
            fetch(0, 1, 0x0c),
            fetch(1, 7, 0x02),
            fetch(2, 7, 0x01),
            complete(2, 7, 30),
            complete(1, 7, 50),
            complete(0, 9, 1),
        ];
        let good: Vec<(u16, &[u8])> = good.iter().map(|(o, p)| (*o, p.as_slice())).collect();
        let p = pair_records(&good);
        assert_eq!(
            p,
            Pairing {
                paired: 2,
                reads: 1,
                writes: 1,
                latency_ns_total: 80,
                ..Pairing::default()
            }
        );
        // A fetch never completed, a completion never fetched, a cid fetched twice.
        let bad = [
            fetch(1, 1, 0x02),
            fetch(1, 1, 0x02),
            complete(1, 2, 5),
            fetch(1, 3, 0x02),
        ];
        let bad: Vec<(u16, &[u8])> = bad.iter().map(|(o, p)| (*o, p.as_slice())).collect();
        let p = pair_records(&bad);
        assert_eq!((p.unpaired_fetches, p.unpaired_completions, p.paired), (3, 1, 0));
    }
}
