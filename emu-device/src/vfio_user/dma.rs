//! Guest memory as the controller sees it: the ranges QEMU lends with
//! DMA_MAP (a file descriptor of the memfd behind guest RAM and an offset
//! in it), mapped into this process and collected in vm-memory's
//! `GuestMemoryMmap`, which the controller reads through bounds-checked
//! accessors. The collection is swapped atomically, so a controller holding
//! a snapshot never sees a half-updated map.
//!
//! A range QEMU maps without a file descriptor (e.g. a ROM) cannot be
//! reached (the `vfio_user` crate has no DMA_READ/DMA_WRITE messages): it
//! is logged and left out, so a queue or PRP pointing there fails as an
//! access outside guest memory, with an NVMe status, as a real controller
//! whose IOMMU has no mapping would.

use std::fs::File;
use std::sync::{Arc, Mutex};

use vm_memory::{
    FileOffset, GuestAddress, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryMmap,
    GuestMemoryRegion, GuestRegionMmap,
};

/// The controller's guest memory (same type as `hmb_nvme::GuestMem`).
pub type GuestMem = GuestMemoryAtomic<GuestMemoryMmap<()>>;

/// Why a DMA_MAP was not applied (logged; QEMU is still answered "done":
/// an error reply carries errno 0 in this crate and would abort QEMU's
/// memory listener for a range the guest may never use for DMA).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(crate) enum MapRefused {
    #[error("no file descriptor came with it")]
    NoFd,
    #[error("it has zero size or wraps around the address space")]
    BadRange,
    #[error("it overlaps a mapped range")]
    Overlap,
    #[error("it reaches past the end of its file ({file_len:#x} bytes)")]
    PastEof { file_len: u64 },
    #[error("mmap failed: {0}")]
    Mmap(String),
}

/// One mapped range, for reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Mapping {
    pub address: u64,
    pub size: u64,
}

/// Told of every DMA_UNMAP before it takes effect: the range's guest address
/// and size, `(0, u64::MAX)` for UNMAP_ALL and a disconnect.
pub(crate) type UnmapListener = Box<dyn Fn(u64, u64) + Send + Sync>;

/// Applies DMA_MAP / DMA_UNMAP to a [`GuestMem`].
pub struct DmaMap {
    mem: GuestMem,
    /// Users that map guest memory on their own and must stop at an unmap
    /// (the trace slice's view: hmb-nvme-trace's `NvmeTrace::dma_unmapped`).
    listeners: Mutex<Vec<UnmapListener>>,
}

impl DmaMap {
    /// Starts empty: nothing is reachable until QEMU maps guest RAM.
    pub fn new() -> DmaMap {
        DmaMap {
            mem: GuestMemoryAtomic::new(GuestMemoryMmap::new()),
            listeners: Mutex::new(Vec::new()),
        }
    }

    /// Call `f` at every unmap, before the range goes (docs/nvme-controller.md,
    /// "Transport": a user of its own mapping of guest RAM stops first).
    pub(crate) fn on_unmap(&self, f: impl Fn(u64, u64) + Send + Sync + 'static) {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(f));
    }

    fn tell_unmap(&self, address: u64, size: u64) {
        for f in self.listeners.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            f(address, size);
        }
    }

    /// The memory handle to give the controller (a clone sees every change).
    pub fn guest_mem(&self) -> GuestMem {
        self.mem.clone()
    }

    /// Map `size` bytes of `fd` at `offset` to guest address `address`.
    pub(crate) fn map(&self, address: u64, size: u64, offset: u64, fd: Option<File>) -> Result<(), MapRefused> {
        let fd = fd.ok_or(MapRefused::NoFd)?;
        if size == 0 || address.checked_add(size - 1).is_none() {
            return Err(MapRefused::BadRange);
        }
        let len = usize::try_from(size).map_err(|_| MapRefused::BadRange)?;
        // mmap accepts a range past the end of the file, but the first
        // access there is SIGBUS: one hostile or buggy DMA_MAP would kill
        // the device at the controller's next queue access (found by the
        // vfio_user_backend fuzz target). Refused, the range is unreachable
        // and the controller answers with an NVMe status instead.
        let file_len = fd.metadata().map_err(|e| MapRefused::Mmap(e.to_string()))?.len();
        if offset.checked_add(size).is_none_or(|end| end > file_len) {
            return Err(MapRefused::PastEof { file_len });
        }
        let region = GuestRegionMmap::from_range(GuestAddress(address), len, Some(FileOffset::new(fd, offset)))
            .map_err(|e| MapRefused::Mmap(e.to_string()))?;
        let guard = self.mem.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.mem.memory();
        let next = current
            .insert_region(Arc::new(region))
            .map_err(|_| MapRefused::Overlap)?;
        guard.replace(next);
        Ok(())
    }

    /// Unmap every byte of [`address`, `address + size`): ranges that lie
    /// partly inside keep their outside parts (re-mapped from the same file).
    /// Returns how many bytes were unmapped.
    pub(crate) fn unmap(&self, address: u64, size: u64) -> u64 {
        self.tell_unmap(address, size);
        let end = address.saturating_add(size);
        let guard = self.mem.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.mem.memory();
        let mut kept: Vec<Arc<GuestRegionMmap<()>>> = Vec::new();
        let mut removed = 0u64;
        for region in current.iter() {
            let (start, len) = (region.start_addr().0, region.len());
            let rend = start + len;
            if rend <= address || start >= end {
                match GuestRegionMmap::with_arc(region.get_mmap(), region.start_addr()) {
                    Some(r) => kept.push(Arc::new(r)),
                    None => log::warn!("dropping a mapping at {start:#x} that no longer fits"),
                }
                continue;
            }
            let cut_from = start.max(address);
            let cut_to = rend.min(end);
            removed += cut_to - cut_from;
            for (from, to) in [(start, cut_from), (cut_to, rend)] {
                if to > from {
                    match clone_part(region, from, to - from) {
                        Some(r) => kept.push(Arc::new(r)),
                        None => log::warn!("could not keep {from:#x}..{to:#x} mapped after a partial DMA_UNMAP"),
                    }
                }
            }
        }
        let next = if kept.is_empty() {
            GuestMemoryMmap::new()
        } else {
            kept.sort_by_key(|r| r.start_addr());
            GuestMemoryMmap::from_arc_regions(kept).unwrap_or_default()
        };
        guard.replace(next);
        removed
    }

    /// DMA_UNMAP with UNMAP_ALL, a reset of the connection, a disconnect.
    pub(crate) fn unmap_all(&self) {
        self.tell_unmap(0, u64::MAX);
        let guard = self.mem.lock().unwrap_or_else(|p| p.into_inner());
        guard.replace(GuestMemoryMmap::new());
    }

    pub fn mappings(&self) -> Vec<Mapping> {
        self.mem
            .memory()
            .iter()
            .map(|r| Mapping {
                address: r.start_addr().0,
                size: r.len(),
            })
            .collect()
    }
}

impl Default for DmaMap {
    fn default() -> Self {
        Self::new()
    }
}

/// A new mapping of `len` bytes of `region`'s file, starting at guest
/// address `from` (inside the region).
fn clone_part(region: &GuestRegionMmap<()>, from: u64, len: u64) -> Option<GuestRegionMmap<()>> {
    if from == region.start_addr().0 && len == region.len() {
        // The whole region: share the existing mapping instead of a new mmap.
        return GuestRegionMmap::with_arc(region.get_mmap(), region.start_addr());
    }
    let fo = region.file_offset()?;
    let file = fo.file().try_clone().ok()?;
    let offset = fo.start() + (from - region.start_addr().0);
    GuestRegionMmap::from_range(
        GuestAddress(from),
        usize::try_from(len).ok()?,
        Some(FileOffset::new(file, offset)),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vm_memory::Bytes;

    fn memfd(size: u64) -> File {
        let fd = nix::sys::memfd::memfd_create(c"dma-test", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
        let f = File::from(fd);
        f.set_len(size).unwrap();
        f
    }

    #[test]
    fn mapped_ranges_are_reachable_and_share_the_file() {
        let dma = DmaMap::new();
        let mem = dma.guest_mem();
        let f = memfd(0x20000);
        dma.map(0x1_0000, 0x1_0000, 0x1_0000, Some(f.try_clone().unwrap()))
            .unwrap();
        mem.memory().write_obj(0xdead_beefu32, GuestAddress(0x1_0010)).unwrap();
        // The write landed in the file at offset 0x10010.
        let mut b = [0u8; 4];
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut b, 0x1_0010).unwrap();
        assert_eq!(u32::from_le_bytes(b), 0xdead_beef);
        assert!(
            mem.memory().read_obj::<u32>(GuestAddress(0x2_0000)).is_err(),
            "past the end"
        );
        assert!(
            mem.memory().read_obj::<u32>(GuestAddress(0xfffe)).is_err(),
            "before the start"
        );
        assert_eq!(
            dma.mappings(),
            [Mapping {
                address: 0x1_0000,
                size: 0x1_0000
            }]
        );
    }

    #[test]
    fn refused_maps_leave_the_memory_unchanged() {
        let dma = DmaMap::new();
        assert_eq!(dma.map(0, 0x1000, 0, None), Err(MapRefused::NoFd));
        assert_eq!(dma.map(0, 0, 0, Some(memfd(0x1000))), Err(MapRefused::BadRange));
        assert_eq!(
            dma.map(u64::MAX - 10, 0x1000, 0, Some(memfd(0x1000))),
            Err(MapRefused::BadRange)
        );
        dma.map(0x4000, 0x2000, 0, Some(memfd(0x2000))).unwrap();
        assert_eq!(
            dma.map(0x5000, 0x2000, 0, Some(memfd(0x2000))),
            Err(MapRefused::Overlap)
        );
        assert_eq!(dma.mappings().len(), 1);
    }

    /// Regression (vfio_user_backend fuzz target,
    /// fuzz/regressions/vfio_user_backend/map_past_eof): a DMA_MAP reaching
    /// past the end of its memfd was mapped, and the controller's first
    /// completion written there killed the process with SIGBUS.
    #[test]
    fn a_range_past_the_end_of_its_file_is_refused() {
        let dma = DmaMap::new();
        assert_eq!(
            dma.map(0, 0x4_0000, 0x3_f000, Some(memfd(0x4_0000))),
            Err(MapRefused::PastEof { file_len: 0x4_0000 })
        );
        assert_eq!(
            dma.map(0, 0x2000, u64::MAX - 0xfff, Some(memfd(0x4_0000))),
            Err(MapRefused::PastEof { file_len: 0x4_0000 })
        );
        assert!(dma.mappings().is_empty());
        // Up to the last byte is fine.
        dma.map(0, 0x1000, 0x3_f000, Some(memfd(0x4_0000))).unwrap();
        assert_eq!(dma.mappings().len(), 1);
    }

    #[test]
    fn partial_unmap_keeps_the_rest_with_its_contents() {
        let dma = DmaMap::new();
        let mem = dma.guest_mem();
        dma.map(0x10_0000, 0x4000, 0, Some(memfd(0x4000))).unwrap();
        dma.map(0x20_0000, 0x1000, 0, Some(memfd(0x1000))).unwrap();
        mem.memory().write_obj(7u64, GuestAddress(0x10_3000)).unwrap();
        assert_eq!(dma.unmap(0x10_1000, 0x1000), 0x1000);
        assert_eq!(
            dma.mappings(),
            [
                Mapping {
                    address: 0x10_0000,
                    size: 0x1000
                },
                Mapping {
                    address: 0x10_2000,
                    size: 0x2000
                },
                Mapping {
                    address: 0x20_0000,
                    size: 0x1000
                },
            ]
        );
        assert!(mem.memory().read_obj::<u64>(GuestAddress(0x10_1000)).is_err());
        assert_eq!(mem.memory().read_obj::<u64>(GuestAddress(0x10_3000)).unwrap(), 7);
        assert_eq!(dma.unmap(0x0, 0x100_0000), 0x4000);
        assert!(dma.mappings().is_empty());
        dma.map(0x20_0000, 0x1000, 0, Some(memfd(0x1000))).unwrap();
        dma.unmap_all();
        assert!(dma.mappings().is_empty());
        assert!(mem.memory().read_obj::<u8>(GuestAddress(0x20_0000)).is_err());
    }

    #[test]
    fn listeners_hear_every_unmap_before_it_takes_effect() {
        let dma = Arc::new(DmaMap::new());
        let heard = Arc::new(Mutex::new(Vec::new()));
        let (h, d) = (heard.clone(), dma.clone());
        // What the listener sees of the range: still mapped when it is told.
        dma.on_unmap(move |a, s| h.lock().unwrap().push((a, s, d.mappings().len())));
        dma.map(0x10_0000, 0x4000, 0, Some(memfd(0x4000))).unwrap();
        dma.unmap(0x10_1000, 0x1000);
        dma.unmap(0x50_0000, 0x1000);
        dma.unmap_all();
        assert_eq!(
            *heard.lock().unwrap(),
            [(0x10_1000, 0x1000, 1), (0x50_0000, 0x1000, 2), (0, u64::MAX, 2)]
        );
    }
}
