//! How a consumer hands its tail back to the ring owner.

use std::io;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::Arc;

use hmb_trace_abi::sync::{self, AtomicU64};
use hmb_trace_abi::{offsets, HMB_RING_ALIGN};
use memmap2::MmapRaw;

/// Publishes the consumer's tail: once per batch.
pub trait TailPublisher {
    fn publish_tail(&mut self, tail: u64) -> io::Result<()>;
}

impl<T: TailPublisher + ?Sized> TailPublisher for Box<T> {
    fn publish_tail(&mut self, tail: u64) -> io::Result<()> {
        (**self).publish_tail(tail)
    }
}

/// Never publishes (a read-only inspection of a ring).
pub struct NoPublish;

impl TailPublisher for NoPublish {
    fn publish_tail(&mut self, _tail: u64) -> io::Result<()> {
        Ok(())
    }
}

/// Host stand-in for the PUBLISH_TAIL ioctl: a release store into the
/// header's tail of a writable mapping, with the module's checks (aligned,
/// not backwards, not beyond head: else EINVAL).
pub struct AtomicTailPublisher {
    hdr: *mut u8,
    _owner: Option<Arc<MmapRaw>>,
}

// SAFETY: only atomic accesses through `hdr`.
unsafe impl Send for AtomicTailPublisher {}

impl AtomicTailPublisher {
    /// # Safety
    /// `hdr` must point at a mapped, writable ring header that outlives
    /// this value, 8-aligned.
    pub unsafe fn from_raw(hdr: *mut u8) -> Self {
        Self { hdr, _owner: None }
    }

    /// Over a writable mapping of the trace slice (header at offset 0).
    pub fn from_mmap(map: Arc<MmapRaw>) -> Self {
        Self {
            hdr: map.as_mut_ptr(),
            _owner: Some(map),
        }
    }

    fn field(&self, off: usize) -> &AtomicU64 {
        // SAFETY: per the constructors' contracts.
        unsafe { sync::atomic_u64(self.hdr.add(off)) }
    }
}

impl TailPublisher for AtomicTailPublisher {
    fn publish_tail(&mut self, tail: u64) -> io::Result<()> {
        let old = self.field(offsets::TAIL).load(Acquire);
        let head = self.field(offsets::HEAD).load(Acquire);
        if tail & (HMB_RING_ALIGN as u64 - 1) != 0 || tail < old || tail > head {
            return Err(io::Error::from_raw_os_error(22)); // EINVAL, as the module
        }
        self.field(offsets::TAIL).store(tail, Release);
        Ok(())
    }
}
