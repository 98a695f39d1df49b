//! The device side of the ring: writes records the way docs/abi.md says.
//!
//! The producer owns `head`, `flags`, `next_seq`, `dropped_records` and
//! `overflow_events` while the ring is live, so it keeps them in local
//! variables and only stores them; it never writes `tail`. It re-reads the
//! consumer's `tail` (acquire) only when its cached copy says the ring is
//! too full, which gives the same decision as reading it every time since
//! tail only grows.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

use hmb_trace_abi::reference::Produced;
use hmb_trace_abi::*;
use zerocopy::IntoBytes;

use crate::error::ModelError;
use crate::shm::SharedRing;

/// Records at least this large get [`Producer::prefetch_ahead`]; smaller
/// ones share pages, which the hardware prefetchers follow.
const PREFETCH_MIN_SIZE: u64 = 1024;
/// How many records ahead the hint goes: one ahead left the first lines of
/// the next page still in flight when the copy reached them (two-thread
/// copy model, CPU ns per KiB of the writer: 72 one ahead, 63 two ahead,
/// 104 without; docs/performance.md, "Eighth pass").
const PREFETCH_AHEAD: u64 = 2;

/// A cache hint (read, into all levels) for the line at `p`. A read hint
/// rather than PREFETCHW: on this machine the write hint was no faster
/// (docs/performance.md, "Eighth pass"), and the read hint is part of the
/// x86-64 baseline.
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache: it never faults, reads
    // nothing into the program and writes nothing.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

pub struct Producer {
    ring: SharedRing,
    ring_size: u64,
    mask: u64,
    epoch: u64,
    head: u64,
    tail_cache: u64,
    next_seq: u64,
    dropped: u64,
    overflow_events: u64,
    overflowed: bool,
    frozen: bool,
}

impl Producer {
    /// Attach to an initialised ring: check its identity and pick up the
    /// cursors the header holds (head, next_seq, counters, OVERFLOWED).
    pub fn attach(ring: SharedRing) -> Result<Self, ModelError> {
        let mut p = Self {
            ring,
            ring_size: 0,
            mask: 0,
            epoch: 0,
            head: 0,
            tail_cache: 0,
            next_seq: 0,
            dropped: 0,
            overflow_events: 0,
            overflowed: false,
            frozen: false,
        };
        p.load_header()?;
        Ok(p)
    }

    fn load_header(&mut self) -> Result<(), ModelError> {
        let epoch = self.ring.atomic_u64(offsets::EPOCH).load(Acquire);
        let hdr = self.ring.header_snapshot();
        check_compat(&hdr)?;
        let ring_size = hdr.ring_size.get();
        let need = HMB_RING_HDR_SIZE as usize + ring_size as usize;
        if self.ring.len() < need {
            return Err(ModelError::SliceTooShort {
                len: self.ring.len(),
                need,
            });
        }
        let flags = self.ring.atomic_u32(offsets::FLAGS).load(Acquire);
        let head = self.ring.atomic_u64(offsets::HEAD).load(Relaxed);
        let tail = self.ring.atomic_u64(offsets::TAIL).load(Acquire);
        hmb_trace_abi::RingSnapshot::check_window(head, tail, ring_size)?;
        self.ring_size = ring_size;
        self.mask = ring_size - 1;
        self.epoch = epoch;
        self.head = head;
        self.tail_cache = tail;
        self.next_seq = self.ring.atomic_u64(offsets::NEXT_SEQ).load(Relaxed);
        self.dropped = self.ring.atomic_u64(offsets::DROPPED_RECORDS).load(Relaxed);
        self.overflow_events = self.ring.atomic_u64(offsets::OVERFLOW_EVENTS).load(Relaxed);
        self.overflowed = flags & HMB_RING_FLAG_OVERFLOWED != 0;
        self.frozen = flags & HMB_RING_FLAG_FROZEN != 0;
        Ok(())
    }

    pub fn ring(&self) -> &SharedRing {
        &self.ring
    }
    pub fn ring_size(&self) -> u64 {
        self.ring_size
    }
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    pub fn head(&self) -> u64 {
        self.head
    }
    /// Sequence number the next production attempt will use.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
    pub fn dropped_records(&self) -> u64 {
        self.dropped
    }
    pub fn overflow_events(&self) -> u64 {
        self.overflow_events
    }
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Free bytes right now (re-reads the consumer's tail). A real device
    /// never waits for space; tests use this to run a lossless producer.
    pub fn free_bytes(&mut self) -> u64 {
        self.free_for(u64::MAX)
    }

    /// Whether a record with `payload_len` bytes would be written now
    /// (fillers before the ring end included).
    pub fn fits(&mut self, payload_len: usize) -> bool {
        if payload_len > HMB_RECORD_MAX_PAYLOAD as usize {
            return false;
        }
        let size = align_record(payload_len as u32);
        let need = placement(self.head, self.ring_size, size).filler() + size as u64;
        self.free_for(need) >= need
    }

    /// Free bytes, re-reading the consumer's tail only when the cached
    /// value says fewer than `need` bytes are free.
    fn free_for(&mut self, need: u64) -> u64 {
        let free = self.ring_size.saturating_sub(self.head.wrapping_sub(self.tail_cache));
        if free >= need {
            return free;
        }
        let tail = self.ring.atomic_u64(offsets::TAIL).load(Acquire);
        // A tail that is not a possible consumer position (beyond head, more
        // than a ring behind, misaligned) comes from a broken or hostile
        // host: treat the ring as full rather than overwrite unread data.
        let used = self.head.wrapping_sub(tail);
        if used > self.ring_size || tail & (HMB_RING_ALIGN as u64 - 1) != 0 {
            return 0;
        }
        self.tail_cache = tail;
        self.ring_size - used
    }

    /// Produce one record exactly as a device does: written, dropped (seq
    /// consumed, counted) or refused because the ring is FROZEN.
    pub fn produce(&mut self, opcode: u16, source: u32, timestamp_ns: u64, payload: &[u8]) -> Produced {
        if self.frozen {
            return Produced::Frozen;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let too_big = payload.len() > HMB_RECORD_MAX_PAYLOAD as usize;
        let size = align_record(payload.len().min(HMB_RECORD_MAX_PAYLOAD as usize) as u32);
        let place = placement(self.head, self.ring_size, size);
        let need = place.filler() + size as u64;
        if too_big || self.free_for(need) < need {
            self.record_drop();
            return Produced::Dropped { seq };
        }
        let mut cursor = self.head;
        if let Placement::Pad { bytes } = place {
            let pad = hmb_record_hdr::pad(bytes);
            self.write_bytes((cursor & self.mask) as usize, pad.as_bytes());
        }
        cursor += place.filler();
        let rec = hmb_record_hdr::record(payload.len() as u32, opcode, seq, timestamp_ns, source);
        let off = (cursor & self.mask) as usize;
        self.prefetch_ahead(cursor, size as u64);
        self.write_bytes(off, rec.as_bytes());
        self.write_bytes(off + HMB_RECORD_HDR_SIZE as usize, payload);
        let pad_len = size as usize - HMB_RECORD_HDR_SIZE as usize - payload.len();
        self.write_bytes(off + HMB_RECORD_HDR_SIZE as usize + payload.len(), &[0u8; 8][..pad_len]);
        // ABI order: record bytes, next_seq, head (release), then flags.
        self.head = cursor + size as u64;
        self.ring.atomic_u64(offsets::NEXT_SEQ).store(self.next_seq, Relaxed);
        self.ring.atomic_u64(offsets::HEAD).store(self.head, Release);
        if self.overflowed {
            self.overflowed = false;
            self.ring
                .atomic_u32(offsets::FLAGS)
                .fetch_and(!HMB_RING_FLAG_OVERFLOWED, Release);
        }
        Produced::Written { seq }
    }

    fn record_drop(&mut self) {
        self.dropped += 1;
        self.ring.atomic_u64(offsets::NEXT_SEQ).store(self.next_seq, Relaxed);
        self.ring
            .atomic_u64(offsets::DROPPED_RECORDS)
            .store(self.dropped, Relaxed);
        if !self.overflowed {
            self.overflowed = true;
            self.overflow_events += 1;
            self.ring
                .atomic_u64(offsets::OVERFLOW_EVENTS)
                .store(self.overflow_events, Relaxed);
            self.ring
                .atomic_u32(offsets::FLAGS)
                .fetch_or(HMB_RING_FLAG_OVERFLOWED, Release);
        }
    }

    /// For large records, a cache hint for the lines of the record two
    /// ahead of the one at `cursor`, assuming the same size (a wrong guess
    /// costs a few useless hints, nothing else), and only where that space
    /// is already free by the cached tail, so no line the consumer has still
    /// to read is pulled away from it.
    ///
    /// Why: a record of 1 KiB or more starts a new page every record or
    /// four, and the hardware prefetchers stop at page boundaries, so each
    /// record's first stores waited for their lines to come from L3, the
    /// ring being far larger than the L2. The ring bench at 4064 B (two
    /// threads, 16 MiB ring) had the producer at 1.2-2.4 times one-thread
    /// memcpy's CPU per KiB, the slower side of the pipeline; with the hint
    /// it costs about what memcpy does (docs/performance.md, "Eighth pass").
    #[inline]
    fn prefetch_ahead(&self, cursor: u64, size: u64) {
        if size < PREFETCH_MIN_SIZE {
            return;
        }
        // Wrapping: only an address hint is derived from these.
        let start = cursor.wrapping_add(PREFETCH_AHEAD * size);
        if start.wrapping_add(size).wrapping_sub(self.tail_cache) > self.ring_size {
            return;
        }
        let mut line = 0;
        while line < size {
            let off = (start.wrapping_add(line) & self.mask) as usize;
            // SAFETY: `off` < ring_size, inside the data area (checked at
            // attach); only the address is formed, nothing is read or written.
            prefetch(unsafe { self.ring.data_ptr(off) });
            line += CACHE_LINE as u64;
        }
    }

    /// Copy into the data area. Callers guarantee `off + bytes.len()` stays
    /// inside the ring (records never straddle the end, checked by
    /// `placement`).
    fn write_bytes(&self, off: usize, bytes: &[u8]) {
        debug_assert!(off + bytes.len() <= self.ring_size as usize);
        if off + bytes.len() > self.ring_size as usize {
            return;
        }
        // SAFETY: in bounds of the data area (ring_size <= data capacity,
        // checked at attach); this region is owned by the producer until
        // head is published.
        unsafe {
            let dst = self.ring.data_ptr(off);
            hmb_trace_abi::sync::note_write(dst, bytes.len());
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len())
        };
    }

    /// A controller reset: set FROZEN after the last head store and stop.
    /// Nothing produced afterwards (not even a sequence number) until the
    /// ring owner re-initialises the header.
    pub fn freeze(&mut self) {
        if !self.frozen {
            self.frozen = true;
            self.ring
                .atomic_u32(offsets::FLAGS)
                .fetch_or(HMB_RING_FLAG_FROZEN, Release);
        }
    }

    /// After a freeze: if the owner has re-initialised the ring (new epoch,
    /// FROZEN clear), reload the header and return `Ok(true)`.
    pub fn reattach(&mut self) -> Result<bool, ModelError> {
        let epoch = self.ring.atomic_u64(offsets::EPOCH).load(Acquire);
        let flags = self.ring.atomic_u32(offsets::FLAGS).load(Acquire);
        // Only a higher epoch is a new ring: while the owner rewrites the
        // header the epoch reads 0 (zeroed), and it is stored last.
        if epoch <= self.epoch || flags & HMB_RING_FLAG_FROZEN != 0 {
            return Ok(false);
        }
        self.load_header()?;
        Ok(true)
    }

    /// Poll [`Producer::reattach`] until it succeeds, `timeout` passes or
    /// `stop` is set.
    pub fn wait_for_reinit(
        &mut self,
        stop: &std::sync::atomic::AtomicBool,
        timeout: Duration,
    ) -> Result<(), ModelError> {
        let start = Instant::now();
        loop {
            if self.reattach()? {
                return Ok(());
            }
            if stop.load(Relaxed) || start.elapsed() >= timeout {
                return Err(ModelError::StillFrozen);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}
