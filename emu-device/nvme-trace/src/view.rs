//! One contiguous view of a trace slice that the host scattered over several
//! HMB chunks: each piece (guest address, length) is the range of the
//! guest-RAM file (QEMU's `memory-backend-memfd,share=on`, DMA-mapped to us
//! by vfio-user) that backs it, mapped `MAP_SHARED | MAP_FIXED` at
//! consecutive addresses of one reserved range. The producer then writes the
//! slice as one ring, and every byte lands in guest RAM.

use std::os::fd::AsRawFd;

use hmb_nvme::vm_memory::{GuestAddress, GuestAddressSpace, GuestMemoryBackend, GuestMemoryRegion};
use hmb_nvme::GuestMem;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ViewError {
    #[error("piece {addr:#x}+{len:#x} is not page aligned")]
    Unaligned { addr: u64, len: u64 },
    #[error("piece {addr:#x}+{len:#x} is not inside DMA-mapped memory")]
    OutsideGuestMemory { addr: u64, len: u64 },
    #[error("the region holding {addr:#x} is not backed by a file (guest RAM must be fd-backed and shared)")]
    NotFileBacked { addr: u64 },
    #[error("an empty slice")]
    Empty,
    #[error("mmap failed: {0}")]
    Mmap(String),
}

const PAGE: u64 = 4096;

/// A mapping of the slice's pieces end to end; unmapped on drop.
pub struct SliceView {
    base: *mut u8,
    len: usize,
    /// The guest ranges (address, length) it maps, in view order: what a DMA
    /// unmap is checked against ([`SliceView::overlaps`]).
    pieces: Vec<(u64, u64)>,
}

// SAFETY: the view is plain shared memory; who writes what is the ring
// protocol's business (the producer is the only device-side writer).
unsafe impl Send for SliceView {}

impl SliceView {
    pub fn map(mem: &GuestMem, pieces: &[(u64, u64)]) -> Result<SliceView, ViewError> {
        let total: u64 = pieces.iter().map(|p| p.1).sum();
        if total == 0 {
            return Err(ViewError::Empty);
        }
        // Find every piece's file range before mapping anything.
        let guard = mem.memory();
        let mut ranges = Vec::with_capacity(pieces.len());
        for &(addr, len) in pieces {
            if addr % PAGE != 0 || len % PAGE != 0 || len == 0 {
                return Err(ViewError::Unaligned { addr, len });
            }
            // A piece may span several DMA-mapped regions: behind a
            // (virtual) IOMMU QEMU passes each IOMMU mapping on as its own
            // DMA_MAP, so one chunk the host allocated in one piece arrives
            // as many regions. Each part is mapped from its own region.
            let (mut at, end) = (addr, addr + len);
            while at < end {
                let region = guard
                    .find_region(GuestAddress(at))
                    .ok_or(ViewError::OutsideGuestMemory { addr, len })?;
                let start = region.start_addr().0;
                let part = (start + region.len()).min(end) - at;
                let fo = region.file_offset().ok_or(ViewError::NotFileBacked { addr: at })?;
                let offset = fo.start() + (at - start);
                if offset % PAGE != 0 || part % PAGE != 0 {
                    return Err(ViewError::Unaligned { addr, len });
                }
                ranges.push((fo.file().as_raw_fd(), offset, part));
                at += part;
            }
        }
        let len = total as usize;
        // SAFETY: a fresh anonymous reservation; nothing else refers to it.
        let base = unsafe {
            nix::libc::mmap(
                std::ptr::null_mut(),
                len,
                nix::libc::PROT_NONE,
                nix::libc::MAP_PRIVATE | nix::libc::MAP_ANONYMOUS | nix::libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == nix::libc::MAP_FAILED {
            return Err(ViewError::Mmap(std::io::Error::last_os_error().to_string()));
        }
        let view = SliceView {
            base: base.cast(),
            len,
            pieces: pieces.to_vec(),
        };
        let mut at = 0usize;
        for (fd, offset, plen) in ranges {
            // SAFETY: MAP_FIXED inside our own reservation; the file stays
            // open while the guest memory (the region) exists.
            let p = unsafe {
                nix::libc::mmap(
                    view.base.add(at).cast(),
                    plen as usize,
                    nix::libc::PROT_READ | nix::libc::PROT_WRITE,
                    nix::libc::MAP_SHARED | nix::libc::MAP_FIXED,
                    fd,
                    offset as nix::libc::off_t,
                )
            };
            if p == nix::libc::MAP_FAILED {
                return Err(ViewError::Mmap(std::io::Error::last_os_error().to_string()));
            }
            at += plen as usize;
        }
        Ok(view)
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether any byte of guest memory `address..address + size` backs the
    /// view. The view maps the guest-RAM file itself, so it would go on
    /// reaching a range QEMU no longer lends the device: the owner asks this on
    /// every DMA unmap and stops using the view if so.
    pub fn overlaps(&self, address: u64, size: u64) -> bool {
        let end = address.saturating_add(size);
        self.pieces
            .iter()
            .any(|&(a, l)| a < end && address < a.saturating_add(l))
    }

    /// One acquire load of the 8-aligned u64 at `offset` (a header field
    /// the host writes, such as tail); None outside the view.
    pub fn load_u64(&self, offset: usize) -> Option<u64> {
        if !offset.is_multiple_of(8) || offset.checked_add(8).is_none_or(|end| end > self.len) {
            return None;
        }
        // SAFETY: inside the mapping, aligned (the base is page aligned);
        // the host writes the field concurrently, hence the atomic.
        let v = unsafe { std::sync::atomic::AtomicU64::from_ptr(self.base.add(offset).cast::<u64>()) }
            .load(std::sync::atomic::Ordering::Acquire);
        Some(v)
    }
}

impl Drop for SliceView {
    fn drop(&mut self) {
        // SAFETY: our own mapping, no reference into it outlives the view
        // (the producer that used it is dropped first).
        unsafe {
            nix::libc::munmap(self.base.cast(), self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_nvme::vm_memory::{Bytes, FileOffset, GuestMemoryAtomic, GuestMemoryMmap, GuestRegionMmap};

    fn file_backed(bytes: u64) -> GuestMem {
        let file = tempfile::tempfile().unwrap();
        file.set_len(bytes).unwrap();
        let region =
            GuestRegionMmap::from_range(GuestAddress(0x10_0000), bytes as usize, Some(FileOffset::new(file, 0)))
                .unwrap();
        GuestMemoryAtomic::new(GuestMemoryMmap::from_regions(vec![region]).unwrap())
    }

    #[test]
    fn scattered_pieces_become_one_range_that_writes_through_to_guest_memory() {
        let mem = file_backed(1 << 20);
        // Two chunks in reverse guest order: the view follows piece order.
        let pieces = [(0x10_0000 + 0x8000, 0x1000), (0x10_0000 + 0x2000, 0x2000)];
        let view = SliceView::map(&mem, &pieces).unwrap();
        assert_eq!(view.len(), 0x3000);
        // SAFETY: inside the view.
        unsafe {
            view.as_ptr().write(0xaa);
            view.as_ptr().add(0x1000).write(0xbb);
            view.as_ptr().add(0x2fff).write(0xcc);
        }
        let m = mem.memory();
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x10_8000)).unwrap(), 0xaa);
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x10_2000)).unwrap(), 0xbb);
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x10_3fff)).unwrap(), 0xcc);
    }

    #[test]
    fn overlaps_any_byte_of_any_piece_and_nothing_else() {
        let mem = file_backed(1 << 20);
        let pieces = [(0x10_8000, 0x1000), (0x10_2000, 0x2000)];
        let view = SliceView::map(&mem, &pieces).unwrap();
        for (address, size, want) in [
            (0x10_8000, 0x1000, true),
            (0x10_8fff, 1, true),
            (0x10_7000, 0x1001, true),
            (0x10_3fff, 0x10, true),
            (0, u64::MAX, true),
            (0x10_7000, 0x1000, false),
            (0x10_9000, 0x1000, false),
            (0x10_4000, 0x4000, false),
            (0x10_0000, 0x2000, false),
            (0x10_8000, 0, false),
            (u64::MAX - 1, 0x10, false),
        ] {
            assert_eq!(view.overlaps(address, size), want, "{address:#x}+{size:#x}");
        }
    }

    #[test]
    fn bad_pieces_are_errors() {
        let mem = file_backed(1 << 20);
        assert!(matches!(SliceView::map(&mem, &[]), Err(ViewError::Empty)));
        assert!(matches!(
            SliceView::map(&mem, &[(0x10_0100, 0x1000)]),
            Err(ViewError::Unaligned { .. })
        ));
        assert!(matches!(
            SliceView::map(&mem, &[(0x1000, 0x1000)]),
            Err(ViewError::OutsideGuestMemory { .. })
        ));
        assert!(matches!(
            SliceView::map(&mem, &[(0x10_0000 + 0xff000, 0x2000)]),
            Err(ViewError::OutsideGuestMemory { .. })
        ));
        let anon = GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), 1 << 20)]).unwrap());
        assert!(matches!(
            SliceView::map(&anon, &[(0, 0x1000)]),
            Err(ViewError::NotFileBacked { .. })
        ));
    }

    /// Behind an IOMMU one chunk arrives as several DMA_MAPs: a piece over
    /// two regions (different files, here) is mapped part by part; a piece
    /// reaching past mapped memory is refused.
    #[test]
    fn a_piece_over_several_regions_is_mapped_part_by_part() {
        let (a, b) = (tempfile::tempfile().unwrap(), tempfile::tempfile().unwrap());
        a.set_len(0x4000).unwrap();
        b.set_len(0x8000).unwrap();
        let regions = vec![
            GuestRegionMmap::from_range(GuestAddress(0x20_0000), 0x2000, Some(FileOffset::new(a, 0x2000))).unwrap(),
            GuestRegionMmap::from_range(GuestAddress(0x20_2000), 0x3000, Some(FileOffset::new(b, 0x1000))).unwrap(),
        ];
        let mem = GuestMemoryAtomic::new(GuestMemoryMmap::from_regions(regions).unwrap());
        let view = SliceView::map(&mem, &[(0x20_1000, 0x3000)]).unwrap();
        assert_eq!(view.len(), 0x3000);
        // SAFETY: inside the view.
        unsafe {
            view.as_ptr().write(0x11);
            view.as_ptr().add(0x1000).write(0x22);
            view.as_ptr().add(0x2fff).write(0x33);
        }
        let m = mem.memory();
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x20_1000)).unwrap(), 0x11);
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x20_2000)).unwrap(), 0x22);
        assert_eq!(m.read_obj::<u8>(GuestAddress(0x20_3fff)).unwrap(), 0x33);
        assert!(matches!(
            SliceView::map(&mem, &[(0x20_3000, 0x3000)]),
            Err(ViewError::OutsideGuestMemory { .. })
        ));
    }
}
