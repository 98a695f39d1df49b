//! The one epoch and sequence walk over a trace.bin: items in, events out
//! (which epoch a record belongs to, daemon LOST markers, sequence gaps no
//! marker explains, derived from the records themselves as the ABI asks
//! consumers to do), and each epoch's progress. The analyzer, crash
//! recovery (`recover.rs`) and the harness's ground-truth check all walk a
//! file with it.

use crate::header::FileHeader;
use crate::item::{Item, ItemKind};
use crate::marker::Marker;

#[derive(Debug, Clone, Copy)]
pub enum Event<'a, 'b> {
    Record {
        epoch: u64,
        item: &'b Item<'a>,
    },
    /// A daemon LOST marker.
    Lost {
        offset: u64,
        epoch: u64,
        first_seq: u64,
        count: u64,
    },
    /// Sequence numbers missing with no LOST marker for them, found at the
    /// record at `offset` (whose timestamp is `timestamp_ns`).
    Gap {
        offset: u64,
        epoch: u64,
        first_seq: u64,
        count: u64,
        timestamp_ns: u64,
    },
    Frozen {
        offset: u64,
        epoch: u64,
        last_seq: Option<u64>,
        next_seq: u64,
    },
    EpochStart {
        offset: u64,
        epoch: u64,
        ring_size: u64,
    },
    UnknownMarker {
        offset: u64,
        opcode: u16,
    },
    /// A record whose seq is not above the previous one in its epoch.
    SeqBackwards {
        offset: u64,
        epoch: u64,
        seq: u64,
        expected: u64,
    },
}

/// Progress of one ring epoch as recorded in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochProgress {
    pub epoch: u64,
    /// From the file header (first epoch) or the EPOCH marker.
    pub ring_size: u64,
    /// Seq of the last device record written in this epoch.
    pub last_seq: Option<u64>,
    /// First seq not yet accounted for: one past the highest seq that is in
    /// the file as a record, covered by a LOST marker, or final per FROZEN.
    pub next_seq: u64,
    /// Device records of this epoch in the file.
    pub records: u64,
    /// A FROZEN marker for this epoch is in the file.
    pub frozen: bool,
}

impl EpochProgress {
    fn new(epoch: u64, ring_size: u64) -> Self {
        Self {
            epoch,
            ring_size,
            last_seq: None,
            next_seq: 0,
            records: 0,
            frozen: false,
        }
    }
}

/// Epoch and sequence state across a walk.
pub struct Walker {
    epoch: u64,
    /// Next seq expected in this epoch; None until the file's first record
    /// (a file may start in the middle of an epoch).
    expected: Option<u64>,
    /// Records were removed on purpose (a filtered file): gaps are not losses.
    filtered: bool,
    /// Every epoch seen, in file order; the header's first epoch is always there.
    epochs: Vec<EpochProgress>,
    /// Records `in_order` took since the last `settle`, all of the current
    /// epoch with consecutive seqs ending at `expected - 1`: the last
    /// epoch's progress is brought up to date from this count once, not
    /// on every record (cachegrind: ~12 of the analyzer's ~124 instructions
    /// per record in `info`).
    run: u64,
}

impl Walker {
    /// A walk over a file that may start in the middle of its first epoch
    /// (a daemon attached to a live ring): the first record sets the pace.
    pub fn new(header: &FileHeader) -> Self {
        Self {
            epoch: header.first_epoch,
            expected: None,
            filtered: header.is_filtered(),
            epochs: vec![EpochProgress::new(header.first_epoch, header.ring_size)],
            run: 0,
        }
    }

    /// A walk over a file that holds its first epoch from seq 0: missing
    /// leading records are a gap too (the ground-truth check).
    pub fn from_start(header: &FileHeader) -> Self {
        Self {
            expected: Some(0),
            ..Self::new(header)
        }
    }

    /// The epoch the next record belongs to.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The seq the next record of the current epoch should have, once known.
    pub fn expected(&self) -> Option<u64> {
        self.expected
    }

    /// Every epoch seen so far, in file order; the last is the current one.
    pub fn epochs(&mut self) -> &[EpochProgress] {
        self.settle();
        &self.epochs
    }

    pub fn into_epochs(mut self) -> Vec<EpochProgress> {
        self.settle();
        self.epochs
    }

    /// Fold the records `in_order` counted into the current epoch's
    /// progress: what `in_order` did per record before, for the whole run
    /// (its seqs are consecutive, so the run's highest is `expected - 1`).
    #[inline]
    fn settle(&mut self) {
        if self.run == 0 {
            return;
        }
        let next = self
            .expected
            .expect("in_order takes records only once a seq is expected");
        let p = self.epochs.last_mut().expect("the first epoch is pushed by new()");
        p.last_seq = Some(p.last_seq.map_or(next - 1, |s| s.max(next - 1)));
        p.next_seq = p.next_seq.max(next);
        p.records += self.run;
        self.run = 0;
    }

    fn progress_of(&mut self, epoch: u64) -> Option<&mut EpochProgress> {
        self.epochs.iter_mut().rev().find(|p| p.epoch == epoch)
    }

    /// `feed`'s state change for a device record whose seq is the one
    /// expected next, nearly every record of a file (the epoch's progress
    /// counted, brought up to date by `settle`): true, and the caller
    /// takes the record as `feed`'s `Event::Record` in the current epoch
    /// (no other event comes with it). False, with nothing changed, for any
    /// other seq and before the first record: the caller then feeds it.
    /// The analyzer's record loop reads a record's header once through it
    /// instead of building and matching an `Event`.
    #[inline(always)]
    pub fn in_order(&mut self, seq: u64) -> bool {
        // Only the value is stored: `expected` stays `Some`.
        match &mut self.expected {
            Some(want) if *want == seq && seq != u64::MAX => {
                *want = seq + 1;
                // The epoch's progress waits for `settle`.
                self.run += 1;
                true
            }
            _ => false,
        }
    }

    /// The seq a record loop may take in order next, without calling
    /// `in_order` per record: u64::MAX when it may take none (before the
    /// first record; `in_order` refuses seq u64::MAX). The loop keeps it in
    /// a register, takes each record whose seq equals it and is not
    /// u64::MAX as `in_order` would, adding one, and hands the value back
    /// with `took_in_order` before anything else reaches the walker.
    #[inline(always)]
    pub fn in_order_from(&self) -> u64 {
        self.expected.unwrap_or(u64::MAX)
    }

    /// The record loop took every seq from `in_order_from()` to `next`
    /// (exclusive), in order: what `in_order` of each did. Returns how many
    /// records that was.
    #[inline(always)]
    pub fn took_in_order(&mut self, next: u64) -> u64 {
        let from = self.in_order_from();
        if next <= from {
            return 0;
        }
        self.expected = Some(next);
        self.run += next - from;
        next - from
    }

    #[inline]
    pub fn feed<'a, 'b>(&mut self, item: &'b Item<'a>, out: &mut impl FnMut(Event<'a, 'b>)) {
        self.settle();
        let offset = item.offset;
        let kind = match item.kind() {
            Ok(k) => k,
            // Readers validate markers before handing items out.
            Err(_) => ItemKind::Marker(Marker::Unknown { opcode: item.opcode() }),
        };
        match kind {
            ItemKind::Record => {
                let seq = item.seq();
                match self.expected {
                    Some(want) if seq > want && !self.filtered => out(Event::Gap {
                        offset,
                        epoch: self.epoch,
                        first_seq: want,
                        count: seq - want,
                        timestamp_ns: item.timestamp_ns(),
                    }),
                    Some(want) if seq < want => out(Event::SeqBackwards {
                        offset,
                        epoch: self.epoch,
                        seq,
                        expected: want,
                    }),
                    _ => {}
                }
                self.expected = Some(
                    self.expected
                        .map_or(seq.saturating_add(1), |w| w.max(seq.saturating_add(1))),
                );
                let p = self.epochs.last_mut().expect("the first epoch is pushed by new()");
                p.last_seq = Some(p.last_seq.map_or(seq, |s| s.max(seq)));
                p.next_seq = p.next_seq.max(seq.saturating_add(1));
                p.records += 1;
                out(Event::Record {
                    epoch: self.epoch,
                    item,
                });
            }
            ItemKind::Marker(Marker::Lost {
                first_seq,
                count,
                epoch,
            }) => {
                let end = first_seq.saturating_add(count);
                if epoch == self.epoch {
                    self.expected = Some(self.expected.map_or(end, |w| w.max(end)));
                }
                if let Some(p) = self.progress_of(epoch) {
                    p.next_seq = p.next_seq.max(end);
                }
                out(Event::Lost {
                    offset,
                    epoch,
                    first_seq,
                    count,
                });
            }
            ItemKind::Marker(Marker::Frozen {
                epoch,
                last_seq,
                next_seq,
            }) => {
                // next_seq is final once frozen: drops after the last record
                // that no LOST marker covered are losses too.
                if epoch == self.epoch && !self.filtered {
                    if let Some(want) = self.expected.filter(|&w| next_seq > w) {
                        out(Event::Gap {
                            offset,
                            epoch,
                            first_seq: want,
                            count: next_seq - want,
                            timestamp_ns: 0,
                        });
                        self.expected = Some(next_seq);
                    }
                }
                if let Some(p) = self.progress_of(epoch) {
                    p.frozen = true;
                    p.next_seq = p.next_seq.max(next_seq);
                }
                out(Event::Frozen {
                    offset,
                    epoch,
                    last_seq,
                    next_seq,
                });
            }
            ItemKind::Marker(Marker::Epoch { epoch, ring_size }) => {
                self.epoch = epoch;
                // A new epoch's ring starts at seq 0.
                self.expected = Some(0);
                self.epochs.push(EpochProgress::new(epoch, ring_size));
                out(Event::EpochStart {
                    offset,
                    epoch,
                    ring_size,
                });
            }
            ItemKind::Marker(Marker::Unknown { opcode }) => out(Event::UnknownMarker { offset, opcode }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::SliceReader;
    use crate::writer::TraceWriter;
    use hmb_trace_abi::hmb_record_hdr;

    enum In {
        Rec(u64),
        Lost(u64, u64, u64),
        Frozen(u64, u64),
        Epoch(u64),
    }

    fn file(items: &[In]) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), &FileHeader::new(1, 0, 1 << 16, 1)).unwrap();
        for i in items {
            match *i {
                In::Rec(seq) => {
                    let hdr = hmb_record_hdr {
                        length: 4u32.into(),
                        seq: seq.into(),
                        ..Default::default()
                    };
                    w.write_record(&hdr, b"abcd").unwrap();
                }
                In::Lost(epoch, first_seq, count) => w
                    .write_marker(&Marker::Lost {
                        first_seq,
                        count,
                        epoch,
                    })
                    .unwrap(),
                In::Frozen(epoch, next_seq) => w
                    .write_marker(&Marker::Frozen {
                        epoch,
                        last_seq: None,
                        next_seq,
                    })
                    .unwrap(),
                In::Epoch(epoch) => w
                    .write_marker(&Marker::Epoch {
                        epoch,
                        ring_size: 1 << 16,
                    })
                    .unwrap(),
            }
        }
        w.into_inner()
    }

    /// An event as a short string.
    fn show(e: Event<'_, '_>) -> String {
        match e {
            Event::Record { epoch, item } => format!("rec {epoch}/{}", item.seq()),
            Event::Lost {
                epoch,
                first_seq,
                count,
                ..
            } => format!("lost {epoch}/{first_seq}+{count}"),
            Event::Gap {
                epoch,
                first_seq,
                count,
                ..
            } => format!("gap {epoch}/{first_seq}+{count}"),
            Event::Frozen { epoch, next_seq, .. } => format!("frozen {epoch}@{next_seq}"),
            Event::EpochStart { epoch, .. } => format!("epoch {epoch}"),
            Event::SeqBackwards { seq, expected, .. } => format!("back {seq}<{expected}"),
            Event::UnknownMarker { opcode, .. } => format!("unknown {opcode}"),
        }
    }

    /// Walk a file; events as short strings, and the walker at the end.
    fn walk(bytes: &[u8], from_start: bool) -> (Vec<String>, Vec<EpochProgress>) {
        let mut r = SliceReader::new(bytes).unwrap();
        let header = *r.header();
        let mut w = if from_start {
            Walker::from_start(&header)
        } else {
            Walker::new(&header)
        };
        let mut seen = Vec::new();
        for item in r.by_ref() {
            let item = item.unwrap();
            w.feed(&item, &mut |e| seen.push(show(e)));
        }
        (seen, w.into_epochs())
    }

    /// `in_order` then `feed` for what it refuses gives `feed`'s events and
    /// epochs, on seqs in order, repeated, going back and jumping, around
    /// LOST, FROZEN and EPOCH markers, from the start and not.
    #[test]
    fn in_order_is_feeds_record_path() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut items = Vec::new();
        let mut seq = 5u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match x % 23 {
                0 => items.push(In::Lost(1 + x % 3, seq.saturating_add(1), 2)),
                1 => items.push(In::Frozen(1 + x % 3, seq.saturating_add(x % 4))),
                2 => items.push(In::Epoch(1 + x % 3)),
                3 => seq = seq.saturating_sub(x % 5),
                4 => seq = seq.saturating_add(x % 7),
                // One record at the top of the range (the walk saturates).
                5 => items.push(In::Rec(u64::MAX - x % 2)),
                _ => {}
            }
            items.push(In::Rec(seq));
            seq = seq.saturating_add(1);
        }
        let bytes = file(&items);
        for from_start in [false, true] {
            let (want, want_epochs) = walk(&bytes, from_start);
            let mut r = SliceReader::new(&bytes).unwrap();
            let header = *r.header();
            let mut w = if from_start {
                Walker::from_start(&header)
            } else {
                Walker::new(&header)
            };
            // A walker fed every item, in step: the epochs' progress
            // (`in_order` counts its runs and settles them later) must be
            // the same whenever it is asked for, here every 7th item.
            let mut fed = if from_start {
                Walker::from_start(&header)
            } else {
                Walker::new(&header)
            };
            let (mut got, mut fast) = (Vec::new(), 0);
            for (k, item) in r.by_ref().enumerate() {
                let item = item.unwrap();
                fed.feed(&item, &mut |_| {});
                if !item.is_marker() && w.in_order(item.seq()) {
                    fast += 1;
                    got.push(format!("rec {}/{}", w.epoch(), item.seq()));
                } else {
                    w.feed(&item, &mut |e| got.push(show(e)));
                }
                if k % 7 == 0 {
                    assert_eq!(w.epochs(), fed.epochs(), "after item {k}");
                }
            }
            assert_eq!(got, want);
            assert_eq!(w.into_epochs(), want_epochs);
            assert!(fast > 500, "{fast} records in order");

            // The same with the next in-order seq kept outside the walker
            // (`in_order_from`, `took_in_order`), as the analyzer's loop does.
            let mut r = SliceReader::new(&bytes).unwrap();
            let mut w = if from_start {
                Walker::from_start(&header)
            } else {
                Walker::new(&header)
            };
            let (mut got, mut taken) = (Vec::new(), 0);
            let mut want_seq = w.in_order_from();
            for item in r.by_ref() {
                let item = item.unwrap();
                if !item.is_marker() && item.seq() == want_seq && want_seq != u64::MAX {
                    want_seq += 1;
                    got.push(format!("rec {}/{}", w.epoch(), item.seq()));
                    continue;
                }
                taken += w.took_in_order(want_seq);
                w.feed(&item, &mut |e| got.push(show(e)));
                want_seq = w.in_order_from();
            }
            taken += w.took_in_order(want_seq);
            assert_eq!(got, want);
            assert_eq!(w.into_epochs(), want_epochs);
            assert_eq!(taken, fast);
        }
    }

    #[test]
    fn gaps_losses_duplicates_and_epochs_are_told_apart() {
        let bytes = file(&[
            In::Rec(3),
            In::Rec(4),
            In::Lost(1, 5, 2),
            In::Rec(9),
            In::Rec(9),
            In::Frozen(1, 12),
            In::Epoch(2),
            In::Rec(0),
        ]);
        let (events, epochs) = walk(&bytes, false);
        assert_eq!(
            events,
            [
                "rec 1/3",
                "rec 1/4",
                "lost 1/5+2",
                "gap 1/7+2",
                "rec 1/9",
                "back 9<10",
                "rec 1/9",
                "gap 1/10+2",
                "frozen 1@12",
                "epoch 2",
                "rec 2/0"
            ]
        );
        assert_eq!(epochs.len(), 2);
        assert_eq!(
            (
                epochs[0].last_seq,
                epochs[0].next_seq,
                epochs[0].records,
                epochs[0].frozen
            ),
            (Some(9), 12, 4, true)
        );
        assert_eq!((epochs[1].epoch, epochs[1].next_seq, epochs[1].records), (2, 1, 1));
        // From the start of the epoch, the three leading records are missing.
        let (events, _) = walk(&bytes, true);
        assert_eq!(events[0], "gap 1/0+3");
    }
}
