//! A read-only view of a trace slice in shared memory.

use std::fs::File;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;

use hmb_trace_abi::sync::{self, AtomicU64};
use hmb_trace_abi::{hmb_ring_hdr, offsets, HMB_RING_HDR_SIZE};
use memmap2::{Mmap, MmapOptions};

use crate::error::ConsumerError;

#[cfg(not(target_endian = "little"))]
compile_error!("the ring ABI is little-endian; this consumer uses native atomics on its fields");

/// Header page plus data area, mapped read-only (or at least only read).
pub struct RingView {
    base: NonNull<u8>,
    len: usize,
    _owner: Option<Arc<Mmap>>,
}

// SAFETY: only reads, through atomics for the header fields.
unsafe impl Send for RingView {}
unsafe impl Sync for RingView {}

impl RingView {
    /// # Safety
    /// `base..base+len` must stay mapped and readable while the view (and
    /// any consumer built on it) lives.
    pub unsafe fn from_raw(base: *const u8, len: usize) -> Result<Self, ConsumerError> {
        let base = NonNull::new(base as *mut u8).ok_or(ConsumerError::Misaligned)?;
        if base.as_ptr() as usize & 7 != 0 {
            return Err(ConsumerError::Misaligned);
        }
        if len < HMB_RING_HDR_SIZE as usize {
            return Err(ConsumerError::MappingTooShort {
                len,
                need: HMB_RING_HDR_SIZE as usize,
            });
        }
        Ok(Self {
            base,
            len,
            _owner: None,
        })
    }

    pub fn from_mmap(map: Arc<Mmap>) -> Result<Self, ConsumerError> {
        // SAFETY: the Arc keeps the mapping alive as long as the view.
        let mut view = unsafe { Self::from_raw(map.as_ptr(), map.len())? };
        view._owner = Some(map);
        Ok(view)
    }

    /// Map `len` bytes of `file` read-only (the trace device, or a memfd).
    pub fn map_file(file: &File, offset: u64, len: usize) -> Result<Self, ConsumerError> {
        // SAFETY: a shared read-only mapping; its contents change under us
        // by design and are only ever read through this view.
        let map = unsafe { MmapOptions::new().offset(offset).len(len).map(file)? };
        Self::from_mmap(Arc::new(map))
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: header offsets are in bounds and 8-aligned (base is);
        // atomic loads from read-only memory are fine for lock-free sizes.
        unsafe { sync::atomic_u64(self.base.as_ptr().add(off)) }
    }

    pub fn head(&self) -> u64 {
        self.u64_at(offsets::HEAD).load(Acquire)
    }
    pub fn tail(&self) -> u64 {
        self.u64_at(offsets::TAIL).load(Acquire)
    }
    pub fn epoch(&self) -> u64 {
        self.u64_at(offsets::EPOCH).load(Acquire)
    }
    pub fn next_seq(&self) -> u64 {
        self.u64_at(offsets::NEXT_SEQ).load(Acquire)
    }
    pub fn dropped_records(&self) -> u64 {
        self.u64_at(offsets::DROPPED_RECORDS).load(Acquire)
    }
    pub fn overflow_events(&self) -> u64 {
        self.u64_at(offsets::OVERFLOW_EVENTS).load(Acquire)
    }
    pub fn flags(&self) -> u32 {
        // SAFETY: as for `u64_at`, 4-aligned.
        unsafe { sync::atomic_u32(self.base.as_ptr().add(offsets::FLAGS)) }.load(Acquire)
    }

    /// A volatile copy of the header (identity fields are stable while the
    /// ring lives; the cursors in it are only a snapshot).
    pub fn header(&self) -> hmb_ring_hdr {
        // SAFETY: in bounds; alignment 1; any bit pattern is valid.
        unsafe { sync::read_header(self.base.as_ptr()) }
    }

    /// Tell the memory-model checker that `len` data-area bytes from
    /// `offset` are read with plain loads (nothing in normal builds; a
    /// checked access under `--cfg loom`, docs/memory-model.md).
    #[inline]
    pub fn note_read(&self, offset: usize, len: usize) {
        if offset.saturating_add(len) <= self.len - HMB_RING_HDR_SIZE as usize {
            // SAFETY: in bounds, checked above.
            sync::note_read(
                unsafe { self.base.as_ptr().add(HMB_RING_HDR_SIZE as usize + offset) },
                len,
            );
        }
    }

    /// The data area of `ring_size` bytes, if the mapping holds it.
    ///
    /// The producer writes outside `[tail, head)` while this slice exists;
    /// the consumer only reads inside the published window, which the
    /// protocol freezes until the tail is published (the same contract as
    /// any `&[u8]` over a shared mapping).
    pub fn data(&self, ring_size: u64) -> Result<&[u8], ConsumerError> {
        let need = (HMB_RING_HDR_SIZE as u64).saturating_add(ring_size);
        if need > self.len as u64 {
            return Err(ConsumerError::MappingTooShort {
                len: self.len,
                need: need as usize,
            });
        }
        // SAFETY: bounds checked above.
        Ok(unsafe {
            std::slice::from_raw_parts(self.base.as_ptr().add(HMB_RING_HDR_SIZE as usize), ring_size as usize)
        })
    }
}
