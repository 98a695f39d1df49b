//! The emulated Host Memory Buffer: an anonymous memfd, mapped shared.
//!
//! A memfd has no name in any file system, so nothing is left in /dev/shm
//! whatever way the process ends (SIGKILL and QEMU crashes included): the
//! memory goes away with the last fd and the last mapping.

use std::ffi::CString;
use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::mman::{mmap, munmap, MapFlags, ProtFlags};
use nix::unistd::ftruncate;

use crate::error::EmuError;

/// Smallest HMB accepted: the advert page plus the smallest legal slice.
pub(crate) const HMB_MIN_SIZE: u64 = 64 * 1024;
/// Default HMB: room for the default 16 MiB ring at offset 4096.
pub const HMB_DEFAULT_SIZE: u64 = 32 * 1024 * 1024;
/// Largest HMB accepted (QEMU maps it as a 64-bit BAR, but keep it sane).
pub(crate) const HMB_MAX_SIZE: u64 = 4 * 1024 * 1024 * 1024;

/// The HMB to serve for a ring of `ring_size` data bytes: the module puts
/// the trace slice (header + data) at the first 4 KiB boundary after the
/// advert, and a BAR is a power of two.
pub fn hmb_size_for(ring_size: u64) -> u64 {
    (ring_size + hmb_trace_abi::HMB_RING_HDR_SIZE as u64 + hmb_trace_abi::HMB_TRACE_SLICE_ALIGN).next_power_of_two()
}

/// A view of memory shared with the guest, whoever owns the mapping: the
/// ivshmem memfd today, guest RAM under vfio-user later. Every access is
/// bounds checked; accesses that race with the guest go through atomics.
pub struct MemRegion {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the owner keeps the mapping alive as long as the view; all
// accesses that may race go through atomics or through the byte copies
// below, which tolerate concurrent writers (the memory is shared with
// another machine anyway).
unsafe impl Send for MemRegion {}
unsafe impl Sync for MemRegion {}

/// Shared memory the device, QEMU and (through BAR2) the guest all map.
pub struct Hmb {
    fd: OwnedFd,
    region: MemRegion,
}

impl std::ops::Deref for Hmb {
    type Target = MemRegion;
    fn deref(&self) -> &MemRegion {
        &self.region
    }
}

impl Hmb {
    /// Create a memfd of `size` bytes and map it. ivshmem exposes the memory
    /// as a PCI BAR, and PCI BARs are powers of two, so `size` must be one.
    pub fn create(size: u64) -> Result<Self, EmuError> {
        if !size.is_power_of_two() || !(HMB_MIN_SIZE..=HMB_MAX_SIZE).contains(&size) {
            return Err(EmuError::BadHmbSize(size));
        }
        let name = CString::new("hmb-emu-device").expect("no NUL in literal");
        let fd = memfd_create(&name, MemFdCreateFlag::MFD_CLOEXEC).map_err(|e| EmuError::sys("memfd_create", e))?;
        ftruncate(&fd, size as i64).map_err(|e| EmuError::sys("ftruncate", e))?;
        let len = usize::try_from(size).map_err(|_| EmuError::BadHmbSize(size))?;
        let nz = NonZeroUsize::new(len).ok_or(EmuError::BadHmbSize(size))?;
        // SAFETY: a fresh shared mapping of a file we own, never aliased by
        // Rust references (only raw pointers and atomics touch it).
        let ptr = unsafe {
            mmap(
                None,
                nz,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_SHARED,
                &fd,
                0,
            )
        }
        .map_err(|e| EmuError::sys("mmap", e))?;
        Ok(Self {
            fd,
            region: MemRegion { base: ptr.cast(), len },
        })
    }

    /// The memfd, to send to ivshmem peers.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl MemRegion {
    /// # Safety
    /// `base..base+len` must stay mapped read/write for the life of the view.
    pub unsafe fn from_raw(base: NonNull<u8>, len: usize) -> Self {
        Self { base, len }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Base pointer of the mapping, for code that lays its own structures
    /// over it (the firmware model's producer).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    fn check(&self, off: usize, len: usize, align: usize) -> Result<(), EmuError> {
        match off.checked_add(len) {
            Some(end) if end <= self.len && off.is_multiple_of(align) => Ok(()),
            _ => Err(EmuError::OutOfBounds {
                off: off as u64,
                len: len as u64,
                hmb: self.len as u64,
            }),
        }
    }

    /// Copy `out.len()` bytes starting at `off` out of the HMB.
    pub fn read(&self, off: usize, out: &mut [u8]) -> Result<(), EmuError> {
        self.check(off, out.len(), 1)?;
        // SAFETY: bounds checked; a volatile-free byte copy from shared
        // memory is fine because the result is only interpreted after
        // validation.
        unsafe { std::ptr::copy_nonoverlapping(self.base.as_ptr().add(off), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copy `data` into the HMB at `off`.
    pub fn write(&self, off: usize, data: &[u8]) -> Result<(), EmuError> {
        self.check(off, data.len(), 1)?;
        // SAFETY: bounds checked, source is a separate Rust buffer.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.base.as_ptr().add(off), data.len()) };
        Ok(())
    }

    pub(crate) fn atomic_u32(&self, off: usize) -> Result<&AtomicU32, EmuError> {
        self.check(off, 4, 4)?;
        // SAFETY: in bounds, aligned, and the mapping outlives the borrow.
        Ok(unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU32) })
    }

    pub fn atomic_u64(&self, off: usize) -> Result<&AtomicU64, EmuError> {
        self.check(off, 8, 8)?;
        // SAFETY: as above.
        Ok(unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU64) })
    }

    pub(crate) fn load_u32(&self, off: usize) -> Result<u32, EmuError> {
        Ok(self.atomic_u32(off)?.load(Ordering::Acquire))
    }

    pub fn load_u64(&self, off: usize) -> Result<u64, EmuError> {
        Ok(self.atomic_u64(off)?.load(Ordering::Acquire))
    }

    pub fn store_u32(&self, off: usize, v: u32) -> Result<(), EmuError> {
        self.atomic_u32(off)?.store(v, Ordering::Release);
        Ok(())
    }

    pub(crate) fn store_u64(&self, off: usize, v: u64) -> Result<(), EmuError> {
        self.atomic_u64(off)?.store(v, Ordering::Release);
        Ok(())
    }

    pub(crate) fn store_u16(&self, off: usize, v: u16) -> Result<(), EmuError> {
        self.write(off, &v.to_le_bytes())
    }
}

impl Drop for Hmb {
    fn drop(&mut self) {
        // SAFETY: base/len came from mmap and nothing uses them after drop.
        if let Err(e) = unsafe { munmap(self.region.base.cast(), self.region.len) } {
            log::warn!("munmap of the HMB failed: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmb_for_a_ring_holds_the_slice_after_the_advert() {
        for ring in [8u64 << 10, 64 << 10, 1 << 20, 16 << 20] {
            let hmb = hmb_size_for(ring);
            assert!(hmb.is_power_of_two());
            assert!(hmb >= hmb_trace_abi::HMB_TRACE_SLICE_ALIGN + hmb_trace_abi::HMB_RING_HDR_SIZE as u64 + ring);
        }
        assert_eq!(hmb_size_for(16 << 20), HMB_DEFAULT_SIZE);
    }

    #[test]
    fn sizes_must_be_powers_of_two_within_bounds() {
        assert!(matches!(Hmb::create(3 << 20), Err(EmuError::BadHmbSize(_))));
        assert!(matches!(Hmb::create(4096), Err(EmuError::BadHmbSize(_))));
        let hmb = Hmb::create(HMB_MIN_SIZE).unwrap();
        assert_eq!(hmb.len(), HMB_MIN_SIZE as usize);
    }

    #[test]
    fn accesses_are_bounds_checked() {
        let hmb = Hmb::create(HMB_MIN_SIZE).unwrap();
        hmb.store_u64(8, 42).unwrap();
        assert_eq!(hmb.load_u64(8).unwrap(), 42);
        assert!(hmb.load_u64(HMB_MIN_SIZE as usize - 4).is_err());
        assert!(hmb.load_u64(4).is_err(), "misaligned atomic");
        let mut buf = [0u8; 16];
        assert!(hmb.read(HMB_MIN_SIZE as usize - 8, &mut buf).is_err());
        assert!(hmb.read(usize::MAX - 2, &mut buf).is_err());
    }

    #[test]
    fn a_second_mapping_of_the_fd_sees_the_same_bytes() {
        let hmb = Hmb::create(HMB_MIN_SIZE).unwrap();
        hmb.write(100, b"hello").unwrap();
        let file = std::fs::File::from(hmb.fd().try_clone_to_owned().unwrap());
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 5];
        file.read_exact_at(&mut buf, 100).unwrap();
        assert_eq!(&buf, b"hello");
    }
}
