//! The main job's check of NVMe Telemetry beside the HMB ring (`cargo xtask
//! boot`, the traced path): while the daemon still runs, the guest pulls one
//! Host-Initiated snapshot (07h) and the Controller-Initiated log (08h) with
//! Debian's nvme-cli, then the daemon takes the records those commands made.
//! Both logs come from the same records the ring carried (the controller's
//! history, emu-device/nvme-trace/src/telemetry.rs), so over the records a
//! log and trace.bin both hold they must agree:
//!
//! - every record of the log of a ring epoch is in trace.bin, byte for byte,
//!   and they are a contiguous run of trace.bin's records (no record of
//!   trace.bin between the log's first and last is missing from the log);
//! - the records of epoch 0 (produced while no slice was adopted: before the
//!   first advert, between a FROZEN and the next advert) are not in
//!   trace.bin; each is in the controller's journal (`unadopted`);
//! - every LOST of the log is one of trace.bin's, every FROZEN of the log is
//!   in trace.bin with the same next sequence number;
//! - the Reason Identifier's records count is the stream's, its epoch the
//!   ring's at the snapshot (0 once frozen), its head the bytes trace.bin
//!   holds of that epoch up to the log's last record, its drop count
//!   trace.bin's LOST of that epoch before it.
//!
//! The 07h snapshot ends with the newest records (it was created after the
//! QD32 reads); the 08h log is the capture the controller took when
//! `reset_controller` froze the first epoch, so it ends with that epoch's
//! FROZEN marker. docs/nvme-controller.md, "Telemetry".

use std::collections::{HashMap, HashSet};
use std::path::Path;

use anyhow::{bail, ensure, Context, Result};
use hmb_trace_abi::align_record;
use hmb_trace_file::{Event, SliceReader, TelemetryLog, Walker};
use zerocopy::IntoBytes;

use crate::journal_truth::Journal;

/// One record as the producer wrote it (header and unpadded payload).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    epoch: u64,
    seq: u64,
    bytes: Vec<u8>,
}

/// What a trace stream holds: records in order, LOST ranges, FROZEN next seqs.
#[derive(Debug, Default)]
struct Stream {
    records: Vec<Rec>,
    lost: Vec<(u64, u64, u64)>,
    frozen: Vec<(u64, u64)>,
}

fn walk(bytes: &[u8], what: &str) -> Result<Stream> {
    let reader = SliceReader::new(bytes).with_context(|| format!("{what}: its trace stream"))?;
    let header = *reader.header();
    let mut walker = Walker::new(&header);
    let mut s = Stream::default();
    for item in reader {
        let item = item.with_context(|| format!("{what}: its trace stream"))?;
        let mut fault = None;
        walker.feed(&item, &mut |ev| match ev {
            Event::Record { epoch, item } => {
                let mut bytes = item.hdr.as_bytes().to_vec();
                bytes.extend_from_slice(item.payload);
                s.records.push(Rec {
                    epoch,
                    seq: item.seq(),
                    bytes,
                });
            }
            Event::Lost {
                epoch,
                first_seq,
                count,
                ..
            } => s.lost.push((epoch, first_seq, count)),
            Event::Frozen { epoch, next_seq, .. } => s.frozen.push((epoch, next_seq)),
            Event::Gap {
                epoch,
                first_seq,
                count,
                ..
            } => {
                fault = Some(format!(
                    "{count} records of epoch {epoch} from seq {first_seq} missing with no LOST marker"
                ))
            }
            Event::SeqBackwards { epoch, seq, .. } => fault = Some(format!("epoch {epoch}: seq {seq} goes backwards")),
            Event::UnknownMarker { opcode, .. } => fault = Some(format!("unknown marker {opcode:#06x}")),
            Event::EpochStart { .. } => {}
        });
        if let Some(f) = fault {
            bail!("{what}: {f}");
        }
    }
    Ok(s)
}

/// How one telemetry log agrees with trace.bin. Every field was checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Agreement {
    /// Device records in the log.
    pub records: u64,
    /// Of them, records of a ring epoch, each identical to trace.bin's.
    pub common: u64,
    /// Of them, records of epoch 0 (no slice adopted), each in the journal.
    pub unadopted: u64,
    /// The first and last common record, (epoch, seq).
    pub first: Option<(u64, u64)>,
    pub last: Option<(u64, u64)>,
    /// Records the log's LOST markers count (each in trace.bin's).
    pub lost: u64,
    /// Epochs whose FROZEN marker both hold, with the same next seq.
    pub frozen: Vec<u64>,
    /// The Reason Identifier: ring epoch at the snapshot (0: none adopted) and head.
    pub reason_epoch: u64,
    pub reason_head: u64,
    /// The Reason Identifier's drop count: trace.bin's LOST of that epoch
    /// before the log's last record.
    pub reason_dropped: u64,
    /// Bytes of the log file.
    pub log_bytes: u64,
    /// The log's generation (07h: Host-Initiated, 08h: Controller-Initiated).
    pub generation: u8,
}

impl Agreement {
    pub fn summary(&self) -> String {
        let span = match (self.first, self.last) {
            (Some((e0, s0)), Some((e1, s1))) => format!(" (epoch {e0} seq {s0} to epoch {e1} seq {s1})"),
            _ => String::new(),
        };
        format!(
            "generation {}, {} records: {} identical to trace.bin's, a contiguous run{span}, {} from no adopted slice \
             in the journal, {} lost in both, FROZEN of epochs {:?} in both",
            self.generation, self.records, self.common, self.unadopted, self.lost, self.frozen
        )
    }
}

/// The records of trace.bin, with where each (epoch, seq) sits.
struct TraceIndex {
    stream: Stream,
    at: HashMap<(u64, u64), usize>,
}

impl TraceIndex {
    fn new(trace: &[u8]) -> Result<Self> {
        let stream = walk(trace, "trace.bin")?;
        let at = stream
            .records
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.epoch, r.seq), i))
            .collect();
        Ok(TraceIndex { stream, at })
    }

    /// Ring bytes of `epoch`'s records up to and including index `last`.
    fn epoch_bytes_through(&self, epoch: u64, last: usize) -> u64 {
        self.stream.records[..=last]
            .iter()
            .filter(|r| r.epoch == epoch)
            .map(|r| u64::from(align_record(r.bytes.len() as u32 - 32)))
            .sum()
    }
}

/// One log (`lid` 07h or 08h) against trace.bin and the journal's records
/// of no adopted slice.
fn agree(name: &str, log_bytes: &[u8], lid: u8, trace: &TraceIndex, unadopted: &HashSet<Vec<u8>>) -> Result<Agreement> {
    let log = TelemetryLog::parse(log_bytes).with_context(|| name.to_string())?;
    ensure!(
        log.lid == lid,
        "{name}: log identifier {:#04x}, not {lid:#04x}",
        log.lid
    );
    let s = walk(log.stream, name)?;
    ensure!(
        s.records.len() as u64 == log.reason.records,
        "{name}: {} records, its Reason Identifier says {}",
        s.records.len(),
        log.reason.records
    );
    let mut a = Agreement {
        records: s.records.len() as u64,
        reason_epoch: log.reason.epoch,
        reason_head: log.reason.head,
        reason_dropped: log.reason.dropped,
        log_bytes: log_bytes.len() as u64,
        generation: log.generation(),
        ..Agreement::default()
    };
    let mut prev: Option<usize> = None;
    for r in &s.records {
        if r.epoch == 0 {
            ensure!(
                unadopted.contains(&r.bytes),
                "{name}: record seq {} of epoch 0 (no slice adopted) is not in the controller's journal",
                r.seq
            );
            a.unadopted += 1;
            continue;
        }
        let Some(&i) = trace.at.get(&(r.epoch, r.seq)) else {
            bail!("{name}: record epoch {} seq {} is not in trace.bin", r.epoch, r.seq);
        };
        ensure!(
            trace.stream.records[i].bytes == r.bytes,
            "{name}: record epoch {} seq {} differs from trace.bin's",
            r.epoch,
            r.seq
        );
        if let Some(p) = prev {
            ensure!(
                i == p + 1,
                "{name}: trace.bin has {} records between epoch {} seq {} and the log's next, epoch {} seq {}, \
                 that the log does not",
                i.saturating_sub(p + 1),
                trace.stream.records[p].epoch,
                trace.stream.records[p].seq,
                r.epoch,
                r.seq
            );
        }
        a.first.get_or_insert((r.epoch, r.seq));
        a.last = Some((r.epoch, r.seq));
        prev = Some(i);
        a.common += 1;
    }
    for &(epoch, first, count) in &s.lost {
        let covered: u64 = trace
            .stream
            .lost
            .iter()
            .filter(|l| l.0 == epoch)
            .map(|&(_, f, c)| (first + count).min(f + c).saturating_sub(first.max(f)))
            .sum();
        ensure!(
            covered == count,
            "{name}: LOST of {count} records of epoch {epoch} from seq {first}; trace.bin's LOST markers cover {covered}"
        );
        a.lost += count;
    }
    for &(epoch, next_seq) in &s.frozen {
        let theirs = trace.stream.frozen.iter().find(|f| f.0 == epoch).map(|f| f.1);
        ensure!(
            theirs == Some(next_seq),
            "{name}: FROZEN of epoch {epoch} with next seq {next_seq}; trace.bin has {theirs:?}"
        );
        a.frozen.push(epoch);
    }
    // The ring's state at the snapshot: head counts the bytes of the epoch
    // being produced into, all of which the daemon took.
    if log.reason.epoch != 0 {
        let last =
            prev.with_context(|| format!("{name}: the ring of epoch {} but no record of it", log.reason.epoch))?;
        ensure!(
            trace.stream.records[last].epoch == log.reason.epoch,
            "{name}: the Reason Identifier says epoch {}, its last record is of epoch {}",
            log.reason.epoch,
            trace.stream.records[last].epoch
        );
        let bytes = trace.epoch_bytes_through(log.reason.epoch, last);
        ensure!(
            log.reason.head == bytes,
            "{name}: head {} in the Reason Identifier, trace.bin holds {bytes} bytes of epoch {} up to the log's last record",
            log.reason.head,
            log.reason.epoch
        );
        let last_seq = trace.stream.records[last].seq;
        let dropped: u64 = trace
            .stream
            .lost
            .iter()
            .filter(|l| l.0 == log.reason.epoch && l.1 < last_seq)
            .map(|l| l.2)
            .sum();
        ensure!(
            log.reason.dropped == dropped,
            "{name}: {} records dropped in the Reason Identifier, trace.bin's LOST markers of epoch {} count {dropped} \
             before the log's last record",
            log.reason.dropped,
            log.reason.epoch
        );
        ensure!(
            log.reason.tail <= log.reason.head,
            "{name}: tail {} past head {}",
            log.reason.tail,
            log.reason.head
        );
    }
    ensure!(a.common > 0, "{name}: no record in common with trace.bin");
    Ok(a)
}

/// What the traced boot's two telemetry logs showed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TracedTelemetryOutcome {
    /// The Host-Initiated snapshot (07h), taken at the end.
    pub host: Agreement,
    /// The Controller-Initiated capture (08h) of the first FROZEN.
    pub controller: Agreement,
    /// Guest time the two nvme-cli pulls took, in seconds (10 ms steps).
    pub pull_seconds: f64,
}

/// `host_log` and `controller_log` against `trace` and `journal`: the
/// first snapshot of this controller (generation 1) ends with the newest
/// records of the last epoch; the capture (Data Available 1, generation 1:
/// nvme-cli reads with RAE = 1) ends with the FROZEN of the first epoch.
pub(crate) fn check(
    host_log: &Path,
    controller_log: &Path,
    trace: &Path,
    journal: &Journal,
    pull_centiseconds: u64,
) -> Result<TracedTelemetryOutcome> {
    let read = |p: &Path| std::fs::read(p).with_context(|| format!("the guest left no {}", p.display()));
    let trace_bytes = read(trace)?;
    let index = TraceIndex::new(&trace_bytes)?;
    let unadopted: HashSet<Vec<u8>> = journal.unadopted.iter().map(|e| e.record_bytes()).collect();
    let last_epoch = *journal.epochs.last().context("the journal has no epoch")?;
    let first_epoch = journal.epochs[0];

    let host_bytes = read(host_log)?;
    let host = agree("the Host-Initiated log", &host_bytes, 0x07, &index, &unadopted)?;
    ensure!(
        host.generation == 1,
        "the Host-Initiated log has generation {}: the guest's first create",
        host.generation
    );
    ensure!(
        host.reason_epoch == last_epoch && host.last.is_some_and(|(e, _)| e == last_epoch),
        "the Host-Initiated log is not of the last epoch {last_epoch} (reason epoch {}, last record {:?})",
        host.reason_epoch,
        host.last
    );

    let ctrl_bytes = read(controller_log)?;
    let controller = agree("the Controller-Initiated log", &ctrl_bytes, 0x08, &index, &unadopted)?;
    ensure!(
        (ctrl_bytes[382], controller.generation) == (1, 1),
        "the Controller-Initiated log: Data Available {}, generation {}; want the capture of the first FROZEN (1, 1)",
        ctrl_bytes[382],
        controller.generation
    );
    ensure!(
        controller.frozen.last() == Some(&first_epoch) && controller.last.is_some_and(|(e, _)| e == first_epoch),
        "the Controller-Initiated log does not end with epoch {first_epoch}'s FROZEN (frozen {:?}, last record {:?})",
        controller.frozen,
        controller.last
    );
    ensure!(
        host_bytes[382..384] == ctrl_bytes[382..384],
        "bytes 382/383: {:?} in 07h, {:?} in 08h",
        &host_bytes[382..384],
        &ctrl_bytes[382..384]
    );
    Ok(TracedTelemetryOutcome {
        host,
        controller,
        pull_seconds: pull_centiseconds as f64 / 100.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal_truth::JournalEntry;
    use hmb_trace_abi::{HMB_RING_VERSION_MAJOR, HMB_RING_VERSION_MINOR};
    use hmb_trace_file::{FileHeader, Marker, TelemetryReason, TraceWriter};

    const RING: u64 = 1 << 16;

    fn entry(epoch: u64, seq: u64, t: u64) -> JournalEntry {
        JournalEntry {
            epoch,
            seq,
            opcode: 0x0101,
            source: 1,
            timestamp_ns: t,
            payload: vec![t as u8; 5 + (t % 11) as usize],
            written: true,
        }
    }

    /// What a stream is made of, in order.
    enum Piece {
        Rec(JournalEntry),
        Mark(Marker),
    }

    fn stream(first_epoch: u64, pieces: &[Piece]) -> Vec<u8> {
        let header = FileHeader::new(HMB_RING_VERSION_MAJOR, HMB_RING_VERSION_MINOR, RING, first_epoch);
        let mut w = TraceWriter::new(Vec::new(), &header).unwrap();
        for p in pieces {
            match p {
                Piece::Rec(e) => {
                    let mut b = e.record_bytes();
                    b.resize(align_record(e.payload.len() as u32) as usize, 0);
                    w.write_ring_bytes(&b).unwrap();
                }
                Piece::Mark(m) => w.write_marker(m).unwrap(),
            }
        }
        w.into_inner()
    }

    fn log(lid: u8, stream: &[u8], reason: TelemetryReason, generation: u8) -> Vec<u8> {
        let blocks = stream.len().div_ceil(512);
        let mut b = vec![0u8; 512 * (1 + blocks)];
        b[0] = lid;
        for at in [8, 10, 12] {
            b[at..at + 2].copy_from_slice(&(blocks as u16).to_le_bytes());
        }
        if lid == 7 {
            b[381] = generation;
        }
        (b[382], b[383]) = (1, 1);
        b[384..512].copy_from_slice(&reason.encode());
        b[512..512 + stream.len()].copy_from_slice(stream);
        b
    }

    struct Run {
        dir: tempfile::TempDir,
        journal: Journal,
    }

    impl Run {
        fn path(&self, name: &str) -> std::path::PathBuf {
            self.dir.path().join(name)
        }

        fn check(&self) -> Result<TracedTelemetryOutcome> {
            check(
                &self.path("host.bin"),
                &self.path("ctrl.bin"),
                &self.path("trace.bin"),
                &self.journal,
                123,
            )
        }

        /// Rewrite one file with `f` applied, check, restore.
        fn fails_with(&self, name: &str, f: impl Fn(&mut Vec<u8>), want: &str) {
            let good = std::fs::read(self.path(name)).unwrap();
            let mut bad = good.clone();
            f(&mut bad);
            std::fs::write(self.path(name), &bad).unwrap();
            let e = format!("{:#}", self.check().unwrap_err());
            std::fs::write(self.path(name), good).unwrap();
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    /// A traced boot in small: epoch-0 records before the first advert,
    /// epoch 1 frozen by the reset at seq 6 (seq 4 dropped), epoch-0
    /// records between, epoch 2 live. trace.bin is what the daemon wrote
    /// (epochs 1 and 2, FROZEN, LOST); the controller's history lost its
    /// oldest records, so 07h starts in epoch 1; 08h was taken at the FROZEN.
    fn traced_boot() -> Run {
        let mut t = 0;
        let mut next = |epoch, seq| {
            t += 1;
            entry(epoch, seq, t)
        };
        let before: Vec<_> = (0..3).map(|s| next(0, s)).collect();
        let e1: Vec<_> = [0, 1, 2, 3, 5].iter().map(|&s| next(1, s)).collect();
        let between: Vec<_> = (0..2).map(|s| next(0, s)).collect();
        let e2: Vec<_> = (0..4).map(|s| next(2, s)).collect();
        let lost = Marker::Lost {
            first_seq: 4,
            count: 1,
            epoch: 1,
        };
        let frozen = Marker::Frozen {
            epoch: 1,
            last_seq: Some(5),
            next_seq: 6,
        };
        let epoch = |epoch| Marker::Epoch { epoch, ring_size: RING };
        let recs = |v: &[JournalEntry]| v.iter().cloned().map(Piece::Rec).collect::<Vec<_>>();

        let mut daemon = recs(&e1[..4]);
        daemon.extend([
            Piece::Mark(lost),
            Piece::Rec(e1[4].clone()),
            Piece::Mark(frozen),
            Piece::Mark(epoch(2)),
        ]);
        daemon.extend(recs(&e2));
        let trace = stream(1, &daemon);

        let mut history = recs(&e1[1..4]);
        history.extend([
            Piece::Mark(lost),
            Piece::Rec(e1[4].clone()),
            Piece::Mark(frozen),
            Piece::Mark(epoch(0)),
        ]);
        history.extend(recs(&between));
        history.push(Piece::Mark(epoch(2)));
        history.extend(recs(&e2));
        let head: u64 = e2.iter().map(|e| u64::from(align_record(e.payload.len() as u32))).sum();
        let host_stream = stream(1, &history);
        let host = log(
            7,
            &host_stream,
            TelemetryReason {
                epoch: 2,
                head,
                tail: head,
                records: 10,
                stream_bytes: host_stream.len() as u64,
                ..Default::default()
            },
            1,
        );

        let mut capture = recs(&before);
        capture.push(Piece::Mark(epoch(1)));
        capture.extend(recs(&e1[..4]));
        capture.extend([Piece::Mark(lost), Piece::Rec(e1[4].clone()), Piece::Mark(frozen)]);
        let ctrl_stream = stream(0, &capture);
        let ctrl = log(
            8,
            &ctrl_stream,
            TelemetryReason {
                records: 8,
                stream_bytes: ctrl_stream.len() as u64,
                ..Default::default()
            },
            0,
        );

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("trace.bin"), trace).unwrap();
        std::fs::write(dir.path().join("host.bin"), host).unwrap();
        std::fs::write(dir.path().join("ctrl.bin"), ctrl).unwrap();
        let journal = Journal {
            epochs: vec![1, 2],
            unadopted: before.iter().chain(&between).cloned().collect(),
            ..Journal::default()
        };
        Run { dir, journal }
    }

    #[test]
    fn logs_that_hold_what_trace_bin_holds_agree() {
        let run = traced_boot();
        let out = run.check().unwrap();
        let h = &out.host;
        assert_eq!((h.records, h.common, h.unadopted, h.lost), (10, 8, 2, 1));
        assert_eq!(
            (h.first, h.last, h.frozen.clone()),
            (Some((1, 1)), Some((2, 3)), vec![1])
        );
        let c = &out.controller;
        assert_eq!((c.records, c.common, c.unadopted, c.generation), (8, 5, 3, 1));
        assert_eq!((c.first, c.last), (Some((1, 0)), Some((1, 5))));
        assert_eq!(out.pull_seconds, 1.23);
        assert!(h.summary().contains("8 identical to trace.bin's"), "{}", h.summary());
    }

    /// Byte offset in a log of the payload of its `n`th record (all before
    /// it are records).
    fn payload_at(run: &Run, name: &str, n: usize) -> usize {
        let bytes = std::fs::read(run.path(name)).unwrap();
        let log = TelemetryLog::parse(&bytes).unwrap();
        let item = SliceReader::new(log.stream).unwrap().nth(n).unwrap().unwrap();
        512 + item.offset as usize + 32
    }

    #[test]
    fn each_disagreement_fails() {
        let run = traced_boot();
        // A record's payload altered: the 07h's first is epoch 1 seq 1.
        let at = payload_at(&run, "host.bin", 0);
        run.fails_with("host.bin", |b| b[at] ^= 1, "epoch 1 seq 1 differs from trace.bin's");
        // trace.bin's copy of epoch 1 seq 2 altered instead.
        let trace = std::fs::read(run.path("trace.bin")).unwrap();
        let item = SliceReader::new(&trace).unwrap().nth(2).unwrap().unwrap();
        let at = item.offset as usize + 32;
        run.fails_with("trace.bin", |b| b[at] ^= 1, "epoch 1 seq 2 differs");
        // An epoch-0 record the journal does not have.
        let mut j = run.journal.clone();
        j.unadopted.pop_back();
        let r = Run {
            dir: tempfile::tempdir().unwrap(),
            journal: j,
        };
        for f in ["host.bin", "ctrl.bin", "trace.bin"] {
            std::fs::copy(run.path(f), r.path(f)).unwrap();
        }
        let e = format!("{:#}", r.check().unwrap_err());
        assert!(
            e.contains("of epoch 0 (no slice adopted) is not in the controller's journal"),
            "{e}"
        );
        // Generations and the capture's flags.
        run.fails_with("host.bin", |b| b[381] = 2, "generation 2");
        run.fails_with("ctrl.bin", |b| b[382] = 0, "Data Available 0");
        run.fails_with("ctrl.bin", |b| b[0] = 7, "not 0x08");
        // The Reason Identifier: its head and its records count.
        run.fails_with("host.bin", |b| b[384 + 16] ^= 8, "head");
        run.fails_with("host.bin", |b| b[384 + 40] = 8, "its Reason Identifier says 8");
        run.fails_with(
            "host.bin",
            |b| b[384 + 32] = 1,
            "1 records dropped in the Reason Identifier",
        );
        // trace.bin's FROZEN of epoch 1 with another next seq.
        let at = SliceReader::new(&trace)
            .unwrap()
            .map(Result::unwrap)
            .find(|i| matches!(i.kind(), Ok(hmb_trace_file::ItemKind::Marker(Marker::Frozen { .. }))))
            .unwrap()
            .offset as usize;
        let other = Marker::Frozen {
            epoch: 1,
            last_seq: Some(5),
            next_seq: 5,
        }
        .encode();
        run.fails_with(
            "trace.bin",
            |b| b[at..at + other.len()].copy_from_slice(&other),
            "FROZEN of epoch 1 with next seq 6; trace.bin has Some(5)",
        );
        // A record trace.bin holds that the log skips: epoch 2 seq 1 made a
        // LOST in the snapshot (a plain gap would fail the walk already).
        let mut h = std::fs::read(run.path("host.bin")).unwrap();
        let log = TelemetryLog::parse(&h).unwrap();
        let items: Vec<_> = SliceReader::new(log.stream).unwrap().map(Result::unwrap).collect();
        // Records of epoch 1 (seq 1, 2, 3), LOST, seq 5, FROZEN, EPOCH 0, two
        // records, EPOCH 2, then epoch 2's seq 0 and 1.
        let skip = 11;
        assert!(!items[skip].is_marker() && items[skip].seq() == 1 && items[skip - 2].is_marker());
        let (from, to) = (items[skip].offset as usize, items[skip + 1].offset as usize);
        let lost = Marker::Lost {
            first_seq: 1,
            count: 1,
            epoch: 2,
        }
        .encode();
        let mut s = log.stream.to_vec();
        s.splice(from..to, lost);
        let mut reason = log.reason;
        (reason.records, reason.stream_bytes) = (9, s.len() as u64);
        h.truncate(512);
        h[384..512].copy_from_slice(&reason.encode());
        h.extend(&s);
        h.resize(512 * (1 + s.len().div_ceil(512)), 0);
        run.fails_with(
            "host.bin",
            |b| *b = h.clone(),
            "trace.bin has 1 records between epoch 2 seq 0 and the log's next, epoch 2 seq 2",
        );
        // A LOST the log has and trace.bin has not: one more at its end.
        let log = TelemetryLog::parse(&std::fs::read(run.path("host.bin")).unwrap())
            .map(|l| (l.stream.to_vec(), l.reason))
            .unwrap();
        let (mut s, mut reason) = log;
        s.extend(
            Marker::Lost {
                first_seq: 4,
                count: 3,
                epoch: 2,
            }
            .encode(),
        );
        reason.stream_bytes = s.len() as u64;
        let mut h = std::fs::read(run.path("host.bin")).unwrap();
        h.truncate(512);
        h[384..512].copy_from_slice(&reason.encode());
        h.extend(&s);
        h.resize(512 * (1 + s.len().div_ceil(512)), 0);
        run.fails_with("host.bin", |b| *b = h.clone(), "trace.bin's LOST markers cover 0");
        // The capture without its FROZEN marker at the end.
        let c = std::fs::read(run.path("ctrl.bin")).unwrap();
        let log = TelemetryLog::parse(&c).unwrap();
        let mut s = log.stream.to_vec();
        s.truncate(s.len() - hmb_trace_file::MARKER_SIZE);
        let mut reason = log.reason;
        reason.stream_bytes = s.len() as u64;
        let mut c2 = c[..512].to_vec();
        c2[384..512].copy_from_slice(&reason.encode());
        c2.extend(&s);
        c2.resize(512 * (1 + s.len().div_ceil(512)), 0);
        run.fails_with("ctrl.bin", |b| *b = c2.clone(), "does not end with epoch 1's FROZEN");
    }
}
