//! A trace slice in shared memory: the raw view the firmware model's
//! producer and the host stand-in for the ring's owner (`module_sim`) use.
//!
//! Header fields that another party reads or writes concurrently are
//! accessed only through atomics placed at `hmb_trace_abi::offsets::*`;
//! record bytes are written with plain copies and published by the release
//! store of `head`. Header fields are little-endian in memory: this code
//! only builds for little-endian hosts, where a native atomic is the
//! little-endian field.

use std::fs::File;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::OwnerError;
use crate::layout::{hmb_ring_hdr, HMB_RING_HDR_SIZE};
use crate::sync::{self, AtomicU32, AtomicU64};
use memmap2::{MmapOptions, MmapRaw};

#[cfg(not(target_endian = "little"))]
compile_error!("the ring ABI is little-endian; this code uses native atomics on its fields");

/// A raw view of a trace slice: header page followed by the data area.
pub struct SharedRing {
    base: NonNull<u8>,
    len: usize,
    /// Keeps the mapping alive when the ring was created from one.
    _owner: Option<Arc<MmapRaw>>,
}

// SAFETY: all shared accesses go through atomics or through raw pointer
// copies into regions the protocol gives to exactly one writer.
unsafe impl Send for SharedRing {}
unsafe impl Sync for SharedRing {}

impl SharedRing {
    /// A ring over `len` bytes at `base`.
    ///
    /// # Safety
    /// `base..base+len` must stay mapped, readable and writable for the
    /// lifetime of the returned value (and of clones made with
    /// [`SharedRing::share`]).
    pub unsafe fn from_raw(base: *mut u8, len: usize) -> Result<Self, OwnerError> {
        let base = NonNull::new(base).ok_or(OwnerError::Misaligned(0))?;
        if base.as_ptr() as usize & 7 != 0 {
            return Err(OwnerError::Misaligned(base.as_ptr() as usize));
        }
        if len < HMB_RING_HDR_SIZE as usize {
            return Err(OwnerError::SliceTooShort {
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

    /// A ring over an existing shared mapping; the ring keeps it alive.
    pub fn from_mmap(map: Arc<MmapRaw>) -> Result<Self, OwnerError> {
        // SAFETY: the Arc keeps the mapping alive as long as `Self`.
        let mut ring = unsafe { Self::from_raw(map.as_mut_ptr(), map.len())? };
        ring._owner = Some(map);
        Ok(ring)
    }

    /// Map `len` bytes of `file` (a memfd or a regular file) from `offset`,
    /// shared and writable.
    pub fn map_file(file: &File, offset: u64, len: usize) -> Result<Self, OwnerError> {
        let map = MmapOptions::new().offset(offset).len(len).map_raw(file)?;
        Self::from_mmap(Arc::new(map))
    }

    /// Another handle on the same memory (for a module simulator or a
    /// test thread that publishes the tail).
    pub fn share(&self) -> Self {
        Self {
            base: self.base,
            len: self.len,
            _owner: self._owner.clone(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes available after the header page.
    pub fn data_capacity(&self) -> usize {
        self.len - HMB_RING_HDR_SIZE as usize
    }

    pub fn base_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The header's u64 field at `off` (one of `hmb_trace_abi::offsets`).
    pub fn atomic_u64(&self, off: usize) -> &AtomicU64 {
        assert!(
            off & 7 == 0 && off + 8 <= core::mem::size_of::<hmb_ring_hdr>(),
            "header field offset {off}"
        );
        // SAFETY: in bounds (header page is inside the slice), 8-aligned
        // since base is; the memory is shared, hence atomic access.
        unsafe { sync::atomic_u64(self.base.as_ptr().add(off)) }
    }

    /// The header's u32 field at `off` (flags).
    pub fn atomic_u32(&self, off: usize) -> &AtomicU32 {
        assert!(
            off & 3 == 0 && off + 4 <= core::mem::size_of::<hmb_ring_hdr>(),
            "header field offset {off}"
        );
        // SAFETY: as for `atomic_u64`.
        unsafe { sync::atomic_u32(self.base.as_ptr().add(off)) }
    }

    /// A copy of the whole header, read with volatile loads (the fields
    /// may change concurrently; callers use it only for identity fields or
    /// when the protocol says the header is quiet).
    pub fn header_snapshot(&self) -> hmb_ring_hdr {
        // SAFETY: the header page is in bounds; hmb_ring_hdr has alignment 1
        // and every bit pattern is valid.
        unsafe { sync::read_header(self.base.as_ptr()) }
    }

    /// Overwrite the whole header with volatile stores (ring owner only).
    pub fn write_header(&self, hdr: &hmb_ring_hdr) {
        // SAFETY: in bounds, alignment 1.
        unsafe { sync::write_header(self.base.as_ptr(), hdr) }
    }

    /// Pointer to the data area's byte `offset`.
    ///
    /// # Safety
    /// `offset + len` of the intended access must be within
    /// [`SharedRing::data_capacity`].
    pub unsafe fn data_ptr(&self, offset: usize) -> *mut u8 {
        self.base.as_ptr().add(HMB_RING_HDR_SIZE as usize + offset)
    }

    /// Copy of `len` data-area bytes from `offset` (for tests and tools;
    /// racy against a producer by nature, so volatile).
    pub fn read_data(&self, offset: usize, out: &mut [u8]) {
        let end = offset.checked_add(out.len()).expect("range overflow");
        assert!(end <= self.data_capacity(), "data range out of bounds");
        // SAFETY: bounds checked above.
        sync::note_read(unsafe { self.data_ptr(offset) }, out.len());
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: bounds checked above.
            *b = unsafe { core::ptr::read_volatile(self.data_ptr(offset + i)) };
        }
    }

    /// A byte copy of the whole slice (header page + data), for comparing
    /// with the reference ring image.
    pub fn image(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: the whole slice is readable.
        unsafe { core::ptr::copy_nonoverlapping(self.base.as_ptr(), out.as_mut_ptr(), self.len) };
        out
    }
}
