//! Where the journal of an adopted slice keeps its records: one byte arena,
//! bounded in bytes (`serve-nvme --trace-journal`, default
//! [`DEFAULT_JOURNAL_BYTES`]).
//!
//! The journal is the ground truth a trace.bin is checked against, so it used
//! to keep every record of a traced run: a `JournalEntry` of ~64 bytes plus a
//! heap allocation for its payload, per record, for ever. Tracing fio for an
//! hour grew the controller by gigabytes, and the payload's allocation sat on
//! the I/O path. Here an entry is a fixed 33-byte head and its payload, packed
//! into one `VecDeque<u8>` that is reused in place once it is full: the oldest
//! entries go first, and the journal says how many went (and how many of them
//! were drops), so the check can compare the kept tail exactly and count the
//! rest (harness/src/journal_truth.rs).

use std::collections::VecDeque;

use crate::JournalEntry;

/// Default bound of an adopted slice's journal: about 1.1 M records of the
/// usual 16-32 payload bytes, more than the longest checked run keeps (a
/// 10-minute soak: 811 k records; the full guest's traced run: 157 k).
pub const DEFAULT_JOURNAL_BYTES: usize = 64 << 20;
/// Smallest bound: room for the largest record with its head.
pub const MIN_JOURNAL_BYTES: usize = 4 << 10;

/// An entry's head: epoch 8, seq 8, timestamp 8, source 4, opcode 2,
/// payload length 2, written 1 (little-endian).
const HEAD: usize = 33;

/// A journal bound below [`MIN_JOURNAL_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a trace journal of {0} bytes: it must hold the largest record ({MIN_JOURNAL_BYTES} bytes at least)")]
pub struct JournalBytesError(pub usize);

/// Check a journal bound (`serve-nvme --trace-journal`).
pub fn check_journal_bytes(bytes: usize) -> Result<usize, JournalBytesError> {
    if bytes >= MIN_JOURNAL_BYTES {
        Ok(bytes)
    } else {
        Err(JournalBytesError(bytes))
    }
}

/// One record as the producer made it (the payload borrowed).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    pub(crate) epoch: u64,
    pub(crate) seq: u64,
    pub(crate) opcode: u16,
    pub(crate) source: u32,
    pub(crate) timestamp_ns: u64,
    pub(crate) payload: &'a [u8],
    pub(crate) written: bool,
}

/// The bounded arena of entries, oldest first.
#[derive(Debug)]
pub(crate) struct Store {
    arena: VecDeque<u8>,
    len: usize,
    capacity: usize,
    /// Most entries kept (the unadopted list's bound is a count).
    max_len: usize,
    /// Entries produced since the start, and of them not written (drops).
    produced: u64,
    dropped: u64,
    /// Oldest entries no longer kept, and of them drops.
    evicted: u64,
    evicted_dropped: u64,
}

impl Store {
    pub(crate) fn new(capacity: usize) -> Store {
        Store::bounded(capacity, usize::MAX)
    }

    /// At most `capacity` bytes and `max_len` entries.
    pub(crate) fn bounded(capacity: usize, max_len: usize) -> Store {
        Store {
            arena: VecDeque::new(),
            len: 0,
            capacity,
            max_len,
            produced: 0,
            dropped: 0,
            evicted: 0,
            evicted_dropped: 0,
        }
    }

    /// A new bound; the oldest entries go if the store holds more.
    pub(crate) fn set_capacity(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.make_room(0);
        self.arena.shrink_to(capacity);
    }

    pub(crate) fn push(&mut self, e: Entry) {
        let len = u16::try_from(e.payload.len()).expect("a record's payload fits its u16 length");
        let need = HEAD + e.payload.len();
        self.make_room(need);
        // Grow by doubling, but never past the bound (VecDeque's own doubling
        // would allocate up to twice it).
        if self.arena.capacity() - self.arena.len() < need {
            let want = (self.arena.capacity() * 2).clamp(self.arena.len() + need, self.capacity.max(need));
            self.arena.reserve_exact(want - self.arena.len());
        }
        let mut head = [0u8; HEAD];
        head[0..8].copy_from_slice(&e.epoch.to_le_bytes());
        head[8..16].copy_from_slice(&e.seq.to_le_bytes());
        head[16..24].copy_from_slice(&e.timestamp_ns.to_le_bytes());
        head[24..28].copy_from_slice(&e.source.to_le_bytes());
        head[28..30].copy_from_slice(&e.opcode.to_le_bytes());
        head[30..32].copy_from_slice(&len.to_le_bytes());
        head[32] = u8::from(e.written);
        self.arena.extend(head.iter());
        self.arena.extend(e.payload.iter());
        self.len += 1;
        self.produced += 1;
        self.dropped += u64::from(!e.written);
    }

    /// Evict the oldest entries until an entry of `need` bytes (none: 0)
    /// fits the bounds.
    fn make_room(&mut self, need: usize) {
        let adding = usize::from(need > 0);
        while self.len > 0 && (self.arena.len() + need > self.capacity || self.len + adding > self.max_len) {
            // Only the payload length and the written flag: this runs once
            // per record of a full journal.
            let mut tail = [0u8; 3];
            self.copy_out(30, &mut tail);
            let payload = usize::from(u16::from_le_bytes([tail[0], tail[1]]));
            self.arena.drain(..HEAD + payload);
            self.len -= 1;
            self.evicted += 1;
            self.evicted_dropped += u64::from(tail[2] == 0);
        }
    }

    /// `out.len()` bytes of the arena from `at`, which may straddle its wrap.
    fn copy_out(&self, at: usize, out: &mut [u8]) {
        let (a, b) = self.arena.as_slices();
        let n = out.len();
        if at + n <= a.len() {
            out.copy_from_slice(&a[at..at + n]);
        } else if at >= a.len() {
            out.copy_from_slice(&b[at - a.len()..at - a.len() + n]);
        } else {
            let k = a.len() - at;
            out[..k].copy_from_slice(&a[at..]);
            out[k..].copy_from_slice(&b[..n - k]);
        }
    }

    fn head_at(&self, at: usize) -> [u8; HEAD] {
        let mut head = [0u8; HEAD];
        self.copy_out(at, &mut head);
        head
    }

    /// The kept entries, oldest first (for the `ground-truth` answer).
    pub(crate) fn entries(&self) -> Vec<JournalEntry> {
        let mut out = Vec::with_capacity(self.len);
        let mut at = 0;
        let u64_at = |h: &[u8], o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
        while at < self.arena.len() {
            let h = self.head_at(at);
            let mut payload = vec![0u8; usize::from(u16::from_le_bytes([h[30], h[31]]))];
            self.copy_out(at + HEAD, &mut payload);
            at += HEAD + payload.len();
            out.push(JournalEntry {
                epoch: u64_at(&h, 0),
                seq: u64_at(&h, 8),
                timestamp_ns: u64_at(&h, 16),
                source: u32::from_le_bytes(h[24..28].try_into().expect("4 bytes")),
                opcode: u16::from_le_bytes([h[28], h[29]]),
                payload,
                written: h[32] != 0,
            });
        }
        out
    }

    /// Entries produced since the start (kept or not) and of them drops.
    pub(crate) fn totals(&self) -> (u64, u64) {
        (self.produced, self.dropped)
    }

    /// Oldest entries no longer kept, and of them drops.
    pub(crate) fn evicted(&self) -> (u64, u64) {
        (self.evicted, self.evicted_dropped)
    }

    /// Bytes the kept entries take.
    #[cfg(test)]
    fn bytes(&self) -> usize {
        self.arena.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(seq: u64, payload: &[u8]) -> Entry<'_> {
        Entry {
            epoch: 1 + seq / 1000,
            seq,
            opcode: 0x0100 + (seq % 7) as u16,
            source: seq as u32 ^ 0x55,
            timestamp_ns: seq * 3 + 11,
            payload,
            written: !seq.is_multiple_of(5),
        }
    }

    fn payload(seq: u64) -> Vec<u8> {
        // 16, 24 or 32 bytes, so an eviction frees a different size than the push needs.
        (0..16 + 8 * (seq % 3) as usize)
            .map(|i| (seq as u8).wrapping_add(i as u8))
            .collect()
    }

    #[test]
    fn a_full_store_keeps_exactly_the_newest_entries_and_counts_the_rest() {
        let mut s = Store::new(MIN_JOURNAL_BYTES);
        let n = 5000u64;
        let payloads: Vec<Vec<u8>> = (0..n).map(payload).collect();
        for seq in 0..n {
            s.push(entry(seq, &payloads[seq as usize]));
            assert!(s.bytes() <= MIN_JOURNAL_BYTES);
        }
        let kept = s.entries();
        let (evicted, evicted_dropped) = s.evicted();
        assert_eq!(evicted + kept.len() as u64, n);
        assert!(evicted > 0 && kept.len() > 50, "{evicted} evicted, {} kept", kept.len());
        assert!(
            s.arena.capacity() <= 2 * MIN_JOURNAL_BYTES,
            "the arena grew to {}",
            s.arena.capacity()
        );
        assert_eq!(
            evicted_dropped,
            (0..evicted).filter(|q| q.is_multiple_of(5)).count() as u64
        );
        assert_eq!(s.totals(), (n, (0..n).filter(|q| q.is_multiple_of(5)).count() as u64));
        for (i, e) in kept.iter().enumerate() {
            let seq = evicted + i as u64;
            let want = entry(seq, &payloads[seq as usize]);
            assert_eq!(
                (e.epoch, e.seq, e.opcode, e.source, e.timestamp_ns, e.written),
                (
                    want.epoch,
                    want.seq,
                    want.opcode,
                    want.source,
                    want.timestamp_ns,
                    want.written
                )
            );
            assert_eq!(e.payload, want.payload, "seq {seq}");
        }
    }

    #[test]
    fn a_count_bound_keeps_that_many_newest() {
        let mut s = Store::bounded(usize::MAX, 100);
        let payloads: Vec<Vec<u8>> = (0..1000).map(payload).collect();
        for seq in 0..1000 {
            s.push(entry(seq, &payloads[seq as usize]));
        }
        let kept = s.entries();
        assert_eq!(kept.len(), 100);
        assert_eq!((kept[0].seq, kept[99].seq), (900, 999));
        assert_eq!(kept[0].payload, payloads[900]);
        assert_eq!(s.evicted().0, 900);
    }

    #[test]
    fn a_smaller_bound_evicts_at_once_and_bounds_are_checked() {
        let mut s = Store::new(DEFAULT_JOURNAL_BYTES);
        let payloads: Vec<Vec<u8>> = (0..1000).map(payload).collect();
        for seq in 0..1000 {
            s.push(entry(seq, &payloads[seq as usize]));
        }
        assert_eq!(s.evicted(), (0, 0));
        assert_eq!(s.entries().len(), 1000);
        s.set_capacity(MIN_JOURNAL_BYTES);
        assert!(s.bytes() <= MIN_JOURNAL_BYTES);
        let kept = s.entries();
        assert_eq!(kept.last().map(|e| e.seq), Some(999));
        assert_eq!(s.evicted().0 + kept.len() as u64, 1000);
        assert_eq!(check_journal_bytes(MIN_JOURNAL_BYTES - 1), Err(JournalBytesError(4095)));
        assert_eq!(check_journal_bytes(DEFAULT_JOURNAL_BYTES), Ok(DEFAULT_JOURNAL_BYTES));
    }
}
