//! A read-only view of a trace slice in shared memory.

use std::any::Any;
use std::fs::File;
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Acquire;
use std::sync::Arc;

use hmb_trace_abi::sync::{self, AtomicU64};
use hmb_trace_abi::{hmb_ring_hdr, offsets, HMB_RING_HDR_SIZE};
use memmap2::{Mmap, MmapOptions};
use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};

use crate::error::ConsumerError;

#[cfg(not(target_endian = "little"))]
compile_error!("the ring ABI is little-endian; this consumer uses native atomics on its fields");

/// Header page plus data area, mapped read-only (or at least only read).
pub struct RingView {
    base: NonNull<u8>,
    len: usize,
    _owner: Option<Arc<dyn Any + Send + Sync>>,
}

/// One chunk of the ring view as the trace device reports it (GET_CHUNK,
/// docs/abi.md decision 11): where it starts in the view, which is also
/// its mmap offset, and its exact length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub offset: u64,
    pub len: u64,
}

/// One reserved address range with every chunk of a file mapped at its
/// offset, so the chunks read as one contiguous ring view. Dropping it
/// unmaps the whole range.
struct ChunkedMapping {
    base: NonNull<std::ffi::c_void>,
    len: usize,
}

// SAFETY: the mapping is plain memory; the view only reads it.
unsafe impl Send for ChunkedMapping {}
unsafe impl Sync for ChunkedMapping {}

impl Drop for ChunkedMapping {
    fn drop(&mut self) {
        // SAFETY: base..base+len is the range this object reserved; every
        // chunk mapped into it replaced part of it, so one munmap frees all.
        let _ = unsafe { munmap(self.base, self.len) };
    }
}

/// The chunks must tile `[0, len)` in order, each of them non-empty.
fn check_chunks(len: usize, chunks: &[Chunk]) -> Result<(), ConsumerError> {
    let mut end = 0u64;
    for (i, c) in chunks.iter().enumerate() {
        if c.offset != end || c.len == 0 || c.len > len as u64 - end {
            return Err(ConsumerError::Chunks(format!(
                "chunk {i} at {:#x}+{:#x} does not follow {end:#x} inside {len:#x} bytes",
                c.offset, c.len
            )));
        }
        end += c.len;
    }
    if end != len as u64 {
        return Err(ConsumerError::Chunks(format!(
            "{} chunks cover {end:#x} of {len:#x} bytes",
            chunks.len()
        )));
    }
    Ok(())
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

    /// Map a ring view of `len` bytes that `file` offers in `chunks` (the
    /// trace device, docs/abi.md decision 11): reserve `len` bytes of
    /// address space, inaccessible, then map each chunk read-only over its
    /// part with `MAP_FIXED`, at mmap offset `chunk.offset`. The view is
    /// contiguous however many DMA allocations back it.
    pub fn map_chunks(file: &File, len: usize, chunks: &[Chunk]) -> Result<Self, ConsumerError> {
        check_chunks(len, chunks)?;
        let size = NonZeroUsize::new(len).ok_or(ConsumerError::MappingTooShort {
            len,
            need: HMB_RING_HDR_SIZE as usize,
        })?;
        // SAFETY: a fresh anonymous reservation nobody else knows of.
        let base = unsafe {
            mmap_anonymous(
                None,
                size,
                ProtFlags::PROT_NONE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
            )
        }
        .map_err(std::io::Error::from)?;
        let region = ChunkedMapping { base, len };
        for c in chunks {
            let at = base.as_ptr() as usize + c.offset as usize;
            let offset = i64::try_from(c.offset)
                .map_err(|_| ConsumerError::Chunks(format!("chunk offset {:#x} too large", c.offset)))?;
            // SAFETY: [at, at + c.len) lies inside the reservation above
            // (check_chunks), which this function owns: MAP_FIXED replaces
            // only our own PROT_NONE pages. A shared read-only mapping whose
            // contents change under us by design, only read through the view.
            unsafe {
                mmap(
                    NonZeroUsize::new(at),
                    NonZeroUsize::new(c.len as usize).expect("checked non-empty"),
                    ProtFlags::PROT_READ,
                    MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
                    file.as_fd(),
                    offset,
                )
            }
            .map_err(std::io::Error::from)?;
        }
        let region = Arc::new(region);
        // SAFETY: the Arc keeps the reservation and its chunks alive as long as the view.
        let mut view = unsafe { Self::from_raw(region.base.as_ptr() as *const u8, len)? };
        view._owner = Some(region);
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const PAGE: u64 = 4096;

    /// A file whose every 8-byte word holds its own offset, so any byte
    /// read through a view tells where in the file it came from.
    fn numbered_file(len: u64) -> File {
        let mut f = tempfile::tempfile().unwrap();
        let bytes: Vec<u8> = (0..len / 8).flat_map(|w| (w * 8).to_le_bytes()).collect();
        f.write_all(&bytes).unwrap();
        f
    }

    /// The word at `off` of the view: the header page through the view's
    /// base, the rest through `data()` (what the consumer reads).
    fn word_at(view: &RingView, off: usize) -> u64 {
        let hdr = HMB_RING_HDR_SIZE as usize;
        if off < hdr {
            // SAFETY: in bounds of the header page, which the view maps.
            unsafe { std::ptr::read_unaligned(view.base.as_ptr().add(off) as *const u64) }
        } else {
            let data = view.data((view.len() - hdr) as u64).unwrap();
            u64::from_le_bytes(data[off - hdr..off - hdr + 8].try_into().unwrap())
        }
    }

    /// The header page and data chunks of different sizes, mapped at their
    /// offsets, read back as one contiguous view of the file.
    #[test]
    fn chunks_read_as_one_contiguous_view() {
        let len = PAGE + 2 * PAGE + 4 * PAGE + 2 * PAGE;
        let file = numbered_file(len);
        let chunks = [
            Chunk { offset: 0, len: PAGE },
            Chunk {
                offset: PAGE,
                len: 2 * PAGE,
            },
            Chunk {
                offset: 3 * PAGE,
                len: 4 * PAGE,
            },
            Chunk {
                offset: 7 * PAGE,
                len: 2 * PAGE,
            },
        ];
        let view = RingView::map_chunks(&file, len as usize, &chunks).unwrap();
        assert_eq!(view.len(), len as usize);
        for off in (0..len as usize).step_by(8) {
            assert_eq!(word_at(&view, off), off as u64, "word at {off:#x}");
        }
    }

    /// A table that leaves a gap, overlaps, falls short or runs past the
    /// view is refused before anything is mapped.
    #[test]
    fn chunk_tables_that_do_not_tile_the_view_are_refused() {
        let len = 4 * PAGE;
        let file = numbered_file(len);
        let c = |offset, len| Chunk { offset, len };
        for (why, table) in [
            ("gap", vec![c(0, PAGE), c(2 * PAGE, 2 * PAGE)]),
            ("overlap", vec![c(0, 2 * PAGE), c(PAGE, 3 * PAGE)]),
            ("short", vec![c(0, PAGE), c(PAGE, PAGE)]),
            ("past the end", vec![c(0, PAGE), c(PAGE, 4 * PAGE)]),
            ("empty chunk", vec![c(0, 0), c(0, 4 * PAGE)]),
            ("no chunks", vec![]),
        ] {
            match RingView::map_chunks(&file, len as usize, &table) {
                Err(ConsumerError::Chunks(_)) => {}
                Err(e) => panic!("{why}: wrong error {e}"),
                Ok(_) => panic!("{why}: a table that does not tile the view was mapped"),
            }
        }
    }

    /// A chunk the file cannot map (past its end is fine for mmap, an
    /// unaligned offset is not) fails with the mmap error, and the
    /// reservation made so far is released (no panic, no leak to observe
    /// beyond the error).
    #[test]
    fn a_chunk_mmap_refuses_is_an_error() {
        let len = 2 * PAGE;
        let file = numbered_file(len);
        let table = [
            Chunk { offset: 0, len: 100 },
            Chunk {
                offset: 100,
                len: 2 * PAGE - 100,
            },
        ];
        match RingView::map_chunks(&file, len as usize, &table) {
            Err(ConsumerError::Map(e)) => assert_eq!(e.raw_os_error(), Some(nix::libc::EINVAL), "{e}"),
            Err(e) => panic!("wrong error {e}"),
            Ok(_) => panic!("an unaligned chunk was mapped"),
        }
    }
}
