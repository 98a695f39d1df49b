//! The drain state machine: one batch at a time, committed by publishing
//! the tail.

use std::io::IoSlice;

use hmb_trace_abi::*;

use crate::error::ConsumerError;
use crate::publish::TailPublisher;
use crate::view::RingView;

/// Limits of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerConfig {
    /// At most this many I/O slices (IOV_MAX is 1024 on Linux).
    pub max_iov: usize,
    /// Stop a batch once it holds this many record bytes, so the tail is
    /// published (and space freed for the producer) at least this often.
    pub max_batch_bytes: u64,
}

impl Default for ConsumerConfig {
    fn default() -> Self {
        Self {
            max_iov: 1024,
            // 256 KiB, the daemon's default too: a batch and the buffer it
            // is copied into stay in the core's L2 together. With 1 MiB
            // batches the ring bench's consumer needed 72-87 ns of CPU per
            // KiB at 4064 B against 58-66 with 256 KiB (one-thread memcpy:
            // 62-64; docs/performance.md, "The ring engine at 4 KiB").
            max_batch_bytes: 256 << 10,
        }
    }
}

/// Records the producer dropped: sequence numbers
/// `first_seq..first_seq + count` never reached the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lost {
    pub first_seq: u64,
    pub count: u64,
}

/// The ring is FROZEN and everything published before the freeze has been
/// handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrozenInfo {
    pub epoch: u64,
    /// Last sequence number handed out in this epoch, if any.
    pub last_seq: Option<u64>,
    /// The producer's final `next_seq`.
    pub next_seq: u64,
    /// Records dropped after the last one handed out (final, since the
    /// producer has stopped).
    pub lost: Option<Lost>,
}

/// One batch: records in ring order, without fillers.
#[derive(Debug)]
pub struct Batch<'a> {
    /// Records missing just before the first record of this batch. A batch
    /// never has a gap inside; a gap starts the next batch.
    pub lost: Option<Lost>,
    /// The records' bytes (headers, payloads, alignment padding) straight
    /// from the mapping, adjacent records coalesced.
    pub iov: &'a [IoSlice<'a>],
    pub records: u64,
    pub bytes: u64,
    pub first_seq: Option<u64>,
    pub last_seq: Option<u64>,
    /// Records skipped because their sequence number was below the resume
    /// point (already durable before a restart).
    pub duplicates: u64,
    /// Ring cursor range this batch covers, fillers included.
    pub start: u64,
    pub end: u64,
}

/// What [`Consumer::next_batch`] found.
#[derive(Debug)]
pub enum Step<'a> {
    Batch(Batch<'a>),
    /// Nothing published and not frozen: sleep (poll) and try again.
    Empty,
    Frozen(FrozenInfo),
}

/// Committed totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerStats {
    pub records: u64,
    pub bytes: u64,
    pub batches: u64,
    pub lost_records: u64,
    pub lost_events: u64,
    pub duplicates: u64,
    pub empty_polls: u64,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    tail: u64,
    expected: Option<u64>,
    records: u64,
    bytes: u64,
    lost: Option<Lost>,
    duplicates: u64,
}

pub struct Consumer<P: TailPublisher> {
    view: RingView,
    publisher: P,
    config: ConsumerConfig,
    ring_size: u64,
    epoch: u64,
    tail: u64,
    /// Next sequence number expected; `None` until the first record when
    /// attached to a ring whose tail is not 0 (earlier history unknown).
    expected: Option<u64>,
    skip_below: u64,
    last_head: u64,
    pending: Option<Pending>,
    /// Slices into the mapping; only lent out while `self` is borrowed, and
    /// the view keeps the mapping alive.
    iov: Vec<IoSlice<'static>>,
    stats: ConsumerStats,
    frozen_lost_counted: bool,
    unknown_flags_logged: u32,
}

impl<P: TailPublisher> Consumer<P> {
    /// Check the ring's identity (magic, major version, geometry) and start
    /// at its current tail.
    pub fn attach(view: RingView, publisher: P, config: ConsumerConfig) -> Result<Self, ConsumerError> {
        let mut c = Self {
            view,
            publisher,
            config: ConsumerConfig {
                max_iov: config.max_iov.max(1),
                ..config
            },
            ring_size: 0,
            epoch: 0,
            tail: 0,
            expected: None,
            skip_below: 0,
            last_head: 0,
            pending: None,
            iov: Vec::with_capacity(config.max_iov.max(1)),
            stats: ConsumerStats::default(),
            frozen_lost_counted: false,
            unknown_flags_logged: 0,
        };
        c.load_identity(None)?;
        Ok(c)
    }

    fn load_identity(&mut self, old_size: Option<u64>) -> Result<(), ConsumerError> {
        let epoch = self.view.epoch();
        let hdr = self.view.header();
        let compat = check_compat(&hdr)?;
        if compat.newer_minor {
            log::info!(
                "ring speaks ABI 1.{}, newer than 1.{}: reading what 1.{} defines",
                hdr.version_minor.get(),
                HMB_RING_VERSION_MINOR,
                HMB_RING_VERSION_MINOR
            );
        }
        let ring_size = hdr.ring_size.get();
        if let Some(old) = old_size {
            if old != ring_size {
                return Err(ConsumerError::RingSizeChanged { old, new: ring_size });
            }
        }
        self.view.data(ring_size)?;
        let tail = self.view.tail();
        let head = self.view.head();
        RingSnapshot::check_window(head, tail, ring_size)?;
        self.ring_size = ring_size;
        self.epoch = epoch;
        self.tail = tail;
        self.last_head = head;
        self.expected = if tail == 0 { Some(0) } else { None };
        self.skip_below = 0;
        self.pending = None;
        self.frozen_lost_counted = false;
        Ok(())
    }

    /// After the ring owner re-initialised the ring (new epoch): start over
    /// at its new tail with sequence numbers from 0.
    pub fn reattach(&mut self) -> Result<(), ConsumerError> {
        self.load_identity(Some(self.ring_size))
    }

    /// Resume after a restart: records with a sequence number below
    /// `next_seq` are already stored and are skipped (counted as
    /// duplicates); a gap after `next_seq` is reported as lost.
    pub fn resume_from(&mut self, next_seq: u64) {
        self.expected = Some(next_seq);
        self.skip_below = next_seq;
    }

    pub fn view(&self) -> &RingView {
        &self.view
    }
    pub fn ring_size(&self) -> u64 {
        self.ring_size
    }
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    /// The committed (published) tail.
    pub fn tail(&self) -> u64 {
        self.tail
    }
    /// Next sequence number expected after the committed tail.
    pub fn expected_seq(&self) -> Option<u64> {
        self.expected
    }
    pub fn stats(&self) -> ConsumerStats {
        self.stats
    }
    pub fn publisher_mut(&mut self) -> &mut P {
        &mut self.publisher
    }

    /// Bytes published and not yet committed (head - tail), for callers
    /// that wait for a fuller batch.
    pub fn available(&self) -> u64 {
        self.view.head().saturating_sub(self.tail)
    }

    /// Take the next batch from the committed tail. Calling it again
    /// without [`Consumer::commit`] yields the same records again.
    pub fn next_batch(&mut self) -> Result<Step<'_>, ConsumerError> {
        self.pending = None;
        self.iov.clear();
        // ABI order: flags first, then head; a FROZEN seen here means the
        // head loaded after it is final.
        let flags = self.view.flags();
        let head = self.view.head();
        let epoch = self.view.epoch();
        if epoch != self.epoch {
            return Err(ConsumerError::EpochChanged {
                old: self.epoch,
                new: epoch,
            });
        }
        let unknown = flags & !HMB_RING_FLAGS_KNOWN & !self.unknown_flags_logged;
        if unknown != 0 {
            log::warn!("ring flags carry unknown bits {unknown:#x}; ignoring them");
            self.unknown_flags_logged |= unknown;
        }
        if head < self.last_head {
            return Err(ConsumerError::HeadWentBackwards {
                head,
                last: self.last_head,
            });
        }
        RingSnapshot::check_window(head, self.tail, self.ring_size)?;
        self.last_head = head;
        if head == self.tail {
            if flags & HMB_RING_FLAG_FROZEN != 0 {
                return Ok(Step::Frozen(self.frozen_info()));
            }
            self.stats.empty_polls += 1;
            return Ok(Step::Empty);
        }
        self.collect(head)
    }

    fn frozen_info(&mut self) -> FrozenInfo {
        let next_seq = self.view.next_seq();
        let lost = match self.expected {
            Some(e) if next_seq > e => Some(Lost {
                first_seq: e,
                count: next_seq - e,
            }),
            _ => None,
        };
        if let (Some(l), false) = (lost, self.frozen_lost_counted) {
            // A hostile next_seq can claim almost 2^64 lost records: saturate.
            self.stats.lost_records = self.stats.lost_records.saturating_add(l.count);
            self.stats.lost_events += 1;
        }
        self.frozen_lost_counted = true;
        FrozenInfo {
            epoch: self.epoch,
            last_seq: self.expected.and_then(|e| e.checked_sub(1)),
            next_seq,
            lost,
        }
    }

    fn collect(&mut self, head: u64) -> Result<Step<'_>, ConsumerError> {
        let data = self.view.data(self.ring_size)?;
        let start = self.tail;
        let mut pos = start;
        let mut expected = self.expected;
        let mut lost = None;
        let (mut records, mut bytes, mut duplicates) = (0u64, 0u64, 0u64);
        let (mut first_seq, mut last_seq) = (None, None);
        // Open run of adjacent records: (offset in data, length).
        let mut run: Option<(usize, usize)> = None;
        let iov = &mut self.iov;
        let close = |run: &mut Option<(usize, usize)>, iov: &mut Vec<IoSlice<'static>>| {
            if let Some((off, len)) = run.take() {
                let slice = &data[off..off + len];
                // SAFETY: the slice points into the mapping the view keeps
                // alive; `iov` is only lent out while `self` is borrowed.
                let slice: &'static [u8] = unsafe { &*(slice as *const [u8]) };
                iov.push(IoSlice::new(slice));
            }
        };
        while pos < head {
            // Fast path: a stretch of plain records, each the expected
            // sequence number and adjacent to the open run, extends the run
            // in one tight loop; anything else (first record of the batch,
            // PAD, wrap, gap, duplicate, a bad header, a full batch) falls
            // through to the general, record-by-record code below.
            if let (Some(e), Some((off, len))) = (expected, run.as_mut()) {
                if records > 0 && e >= self.skip_below {
                    let budget = self.config.max_batch_bytes.saturating_sub(bytes);
                    let s = fast_stretch(data, pos, head, e, *off + *len, budget);
                    if s.records > 0 {
                        self.view.note_read(*off + *len, s.bytes as usize);
                        *len += s.bytes as usize;
                        records += s.records;
                        bytes += s.bytes;
                        last_seq = Some(e + s.records - 1);
                        expected = Some(e + s.records);
                        pos += s.bytes;
                        continue;
                    }
                }
            }
            // A bad item ends the batch before it: the good records ahead
            // of it are handed out, and the next call reports the error.
            let item = match parse_record_at(data, pos, head) {
                Ok(item) => item,
                Err(_) if pos > start => break,
                Err(e) => return Err(e.into()),
            };
            // What the walk reads (and, for records, hands out) with plain
            // loads; skipped bytes are never read.
            match item {
                RecordAt::Record { offset, size, .. } => self.view.note_read(offset, size as usize),
                RecordAt::Pad { .. } => self
                    .view
                    .note_read((pos & (self.ring_size - 1)) as usize, HMB_RECORD_HDR_SIZE as usize),
                RecordAt::Skip { .. } => {}
            }
            let RecordAt::Record { hdr, offset, size } = item else {
                close(&mut run, iov);
                pos += item.advance();
                continue;
            };
            let seq = hdr.seq.get();
            if seq == u64::MAX {
                // Hostile: it has no successor (found by the consumer_walk
                // fuzz target as an overflow of `seq + 1`).
                if pos > start {
                    break;
                }
                return Err(AbiError::SeqExhausted { pos, seq }.into());
            }
            if seq < self.skip_below {
                close(&mut run, iov);
                duplicates += 1;
                pos += size as u64;
                continue;
            }
            match expected {
                Some(_) if pos > start && seq < expected.unwrap_or(0) => break,
                Some(e) if seq < e => return Err(AbiError::SeqBackwards { pos, seq, expected: e }.into()),
                Some(e) if seq > e => {
                    if records > 0 {
                        break; // the gap opens the next batch
                    }
                    lost = Some(Lost {
                        first_seq: e,
                        count: seq - e,
                    });
                }
                _ => {}
            }
            if records > 0 && bytes + size as u64 > self.config.max_batch_bytes {
                break;
            }
            match run {
                Some((off, ref mut len)) if off + *len == offset => *len += size as usize,
                _ => {
                    if iov.len() + usize::from(run.is_some()) >= self.config.max_iov {
                        break;
                    }
                    close(&mut run, iov);
                    run = Some((offset, size as usize));
                }
            }
            records += 1;
            bytes += size as u64;
            first_seq.get_or_insert(seq);
            last_seq = Some(seq);
            expected = Some(seq + 1);
            pos += size as u64;
        }
        close(&mut run, iov);
        self.pending = Some(Pending {
            tail: pos,
            expected,
            records,
            bytes,
            lost,
            duplicates,
        });
        Ok(Step::Batch(Batch {
            lost,
            iov: &self.iov,
            records,
            bytes,
            first_seq,
            last_seq,
            duplicates,
            start,
            end: pos,
        }))
    }

    /// Publish the tail after the batch last returned by
    /// [`Consumer::next_batch`] (once per batch). Nothing to do after
    /// `Empty` or `Frozen`.
    pub fn commit(&mut self) -> Result<(), ConsumerError> {
        let Some(p) = self.pending.take() else { return Ok(()) };
        if p.tail != self.tail {
            self.publisher
                .publish_tail(p.tail)
                .map_err(|source| ConsumerError::Publish { tail: p.tail, source })?;
        }
        self.tail = p.tail;
        self.expected = p.expected;
        self.iov.clear();
        self.stats.records += p.records;
        self.stats.bytes += p.bytes;
        self.stats.batches += 1;
        self.stats.duplicates += p.duplicates;
        if let Some(l) = p.lost {
            self.stats.lost_records = self.stats.lost_records.saturating_add(l.count);
            self.stats.lost_events += 1;
        }
        Ok(())
    }
}

/// What [`fast_stretch`] took.
struct Stretch {
    records: u64,
    bytes: u64,
}

/// Records at least this large start a new page every record or two: the
/// hardware prefetcher does not cross pages, so without a hint the walk
/// waits for every header's cache line, which the producer's core wrote a
/// moment ago (`perf record` of the ring bench at 4064 B: the walk's header
/// load took more samples than the consumer's copy of the payloads;
/// docs/performance.md). Smaller records share pages and lines.
const PREFETCH_MIN_SIZE: u64 = 1024;
/// How many records ahead the hint goes, assuming the same size (a wrong
/// guess costs one useless prefetch, nothing else).
const PREFETCH_AHEAD: u64 = 4;
/// Smaller records: each record's position depends on the length loaded
/// from the one before, so the walk is a chain of dependent loads, and it
/// is the first to touch a batch's lines (the kernel's copy then finds
/// them in L1/L2). A hint one page ahead keeps the lines coming across the
/// page boundaries the hardware prefetchers stop at; a hint for a line
/// already there costs nothing. Daemon draining a filled 64 MiB ring of
/// 64 B records, medians of two rounds: 49.9/49.6 ms of CPU without,
/// 44.9/46.7 with 1 KiB ahead, 42.5/44.5 with 4 KiB (docs/performance.md).
const PREFETCH_AHEAD_SMALL: u64 = 4096;

/// A cache hint for `data[off]` (the callers pass an offset masked into
/// the ring, so inside `data`).
#[inline(always)]
fn prefetch(data: &[u8], off: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let p = data.as_ptr().wrapping_add(off);
        // SAFETY: a prefetch only hints the cache: it never faults, reads
        // nothing into the program and writes nothing, whatever the address.
        unsafe { core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, off);
}

/// Plain records from `pos` on, as long as each one is valid (as
/// `parse_record_at` would find it: no PAD or MARKER flag, length within
/// the limit, inside the lap and below `head`), carries exactly the next
/// sequence number from `expected`, starts at `run_end` (adjacent to the
/// open run) and fits in `budget` bytes. Reads only each record's length,
/// flags and sequence number.
///
/// The bounds that do not change along a stretch are taken once: the
/// record at `pos` must start the open run's end (then every later one
/// does, until the lap's end), and head, the lap's end and the budget are
/// one window the records must fit in. A stretch holds at most
/// `ring_size / 32` records, so a sequence number that could reach
/// `u64::MAX` in it sends the walk to the general path instead. Per record
/// then: two header loads, three checks, one bound and two cache hints, the
/// first and the last line of the record ahead (64 B records: one line in
/// three holds no header, so the first-line hints alone left it to the
/// kernel's copy). Daemon draining 64 B records: 50.4 -> 33.4 instructions
/// per record (docs/performance.md, "Ninth pass: the daemon's walk"). Not
/// inlined: in its own function the loop keeps its bounds in registers
/// (one call per stretch, a stretch being most of a batch).
#[inline(never)]
fn fast_stretch(data: &[u8], pos: u64, head: u64, expected: u64, run_end: usize, budget: u64) -> Stretch {
    const NONE: Stretch = Stretch { records: 0, bytes: 0 };
    let ring_size = data.len() as u64;
    let mask = ring_size.wrapping_sub(1);
    let off = (pos & mask) as usize;
    if off != run_end || pos >= head || expected > u64::MAX - ring_size {
        return NONE;
    }
    // Where the stretch must end: head, the lap's end or the budget.
    let room = (head - pos).min(ring_size - off as u64).min(budget) as usize;
    let window = &data[off..off + room];
    let mut rel = 0usize;
    let mut seq = expected;
    while let Some(h) = window
        .get(rel..)
        .and_then(|r| r.first_chunk::<{ HMB_RECORD_HDR_SIZE as usize }>())
    {
        let length = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let flags = u16::from_le_bytes([h[6], h[7]]);
        let s = u64::from_le_bytes([h[8], h[9], h[10], h[11], h[12], h[13], h[14], h[15]]);
        if flags & (HMB_RECORD_FLAG_PAD | HMB_RECORD_FLAG_MARKER) != 0 || length > HMB_RECORD_MAX_PAYLOAD || s != seq {
            break;
        }
        let size = align_record(length) as usize;
        let ahead = if size as u64 >= PREFETCH_MIN_SIZE {
            PREFETCH_AHEAD * size as u64
        } else {
            PREFETCH_AHEAD_SMALL
        };
        if size > room - rel {
            break;
        }
        let hint = pos.wrapping_add(rel as u64 + ahead);
        prefetch(data, (hint & mask) as usize);
        prefetch(data, (hint.wrapping_add(size as u64 - 1) & mask) as usize);
        seq += 1;
        rel += size;
    }
    Stretch {
        records: seq - expected,
        bytes: rel as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the walk before the ninth pass took, record by record, with
    /// the checks written out one by one (the reference for the hoisted
    /// bounds of [`fast_stretch`]).
    fn reference(
        data: &[u8],
        mut pos: u64,
        head: u64,
        mut expected: u64,
        mut run_end: usize,
        budget: u64,
    ) -> (u64, u64) {
        let (start, first) = (pos, expected);
        let ring_size = data.len() as u64;
        let hdr = HMB_RECORD_HDR_SIZE as usize;
        while pos < head {
            let off = (pos & (ring_size - 1)) as usize;
            if off != run_end || off + hdr > data.len() || head - pos < hdr as u64 {
                break;
            }
            let h = &data[off..off + hdr];
            let length = u32::from_le_bytes(h[0..4].try_into().unwrap());
            let flags = u16::from_le_bytes(h[6..8].try_into().unwrap());
            let seq = u64::from_le_bytes(h[8..16].try_into().unwrap());
            if flags & (HMB_RECORD_FLAG_PAD | HMB_RECORD_FLAG_MARKER) != 0
                || length > HMB_RECORD_MAX_PAYLOAD
                || seq != expected
                || seq == u64::MAX
            {
                break;
            }
            let size = align_record(length) as u64;
            if off as u64 + size > ring_size || size > head - pos || pos - start + size > budget {
                break;
            }
            expected += 1;
            pos += size;
            run_end += size as usize;
        }
        (expected - first, pos - start)
    }

    fn put(data: &mut [u8], off: usize, length: u32, flags: u16, seq: u64) {
        data[off..off + 4].copy_from_slice(&length.to_le_bytes());
        data[off + 6..off + 8].copy_from_slice(&flags.to_le_bytes());
        data[off + 8..off + 16].copy_from_slice(&seq.to_le_bytes());
    }

    /// Every way a stretch ends (head, the lap's end, the budget, a flag,
    /// a length over the limit, a sequence gap, a size change, a run that
    /// is not adjacent) gives what the record-by-record walk gives.
    #[test]
    fn the_stretch_ends_where_the_record_by_record_walk_ends() {
        const RING: usize = 4096;
        // Records of mixed sizes from ring offset 1024 to the lap's end.
        let lengths = [64u32, 64, 64, 0, 200, 200, 64, 1000, 64, 64, 500, 64, 64, 64, 64, 64];
        let mut data = vec![0u8; RING];
        let mut ends = vec![1024usize];
        for (i, &l) in lengths.iter().enumerate() {
            let off = *ends.last().unwrap();
            let size = align_record(l) as usize;
            if off + size > RING {
                break;
            }
            put(&mut data, off, l, 0, 100 + i as u64);
            ends.push(off + size);
        }
        let lap = RING as u64;
        let mut cases = 0;
        for (k, &from) in ends.iter().enumerate() {
            for pos in [from as u64, from as u64 + 3 * lap] {
                let expected = 100 + k as u64;
                for head in [pos, pos + 31, pos + 32, pos + 96, pos + 700, pos + 5000] {
                    for budget in [0, 32, 95, 96, 97, 1 << 20] {
                        for run_end in [from, from + 8] {
                            let want = reference(&data, pos, head, expected, run_end, budget);
                            let got = fast_stretch(&data, pos, head, expected, run_end, budget);
                            assert_eq!(
                                (got.records, got.bytes),
                                want,
                                "pos {pos} head {head} budget {budget} run_end {run_end}"
                            );
                            cases += 1;
                        }
                    }
                }
            }
        }
        assert!(cases > 1000);
        // A flag, a long length or a gap in the middle stops both at it.
        for (flags, length, seq) in [
            (HMB_RECORD_FLAG_PAD, 64, 102),
            (HMB_RECORD_FLAG_MARKER, 64, 102),
            (0, HMB_RECORD_MAX_PAYLOAD + 1, 102),
            (0, 64, 103),
        ] {
            let mut d = data.clone();
            put(&mut d, ends[2], length, flags, seq);
            let want = reference(&d, 1024, lap * 2, 100, 1024, 1 << 20);
            let got = fast_stretch(&d, 1024, lap * 2, 100, 1024, 1 << 20);
            assert_eq!((got.records, got.bytes), want);
            assert_eq!(want.0, 2);
        }
    }

    /// Near the end of the sequence numbers the fast walk takes nothing and
    /// leaves the records to the general path, which reports `u64::MAX`.
    #[test]
    fn sequence_numbers_near_the_end_go_to_the_general_path() {
        let mut data = vec![0u8; 4096];
        for i in 0..4 {
            put(&mut data, i * 96, 64, 0, u64::MAX - 3 + i as u64);
        }
        let s = fast_stretch(&data, 0, 4096, u64::MAX - 3, 0, 1 << 20);
        assert_eq!((s.records, s.bytes), (0, 0));
        // Far enough from the end: the whole lap that fits.
        for (i, off) in (0..4096).step_by(96).enumerate() {
            put(&mut data, off, 64, 0, 7 + i as u64);
        }
        let s = fast_stretch(&data, 0, 4096, 7, 0, 1 << 20);
        assert_eq!((s.records, s.bytes), (42, 42 * 96));
    }
}
