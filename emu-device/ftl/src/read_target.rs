//! Where a host read's bytes go (`Ftl::read_into`): a buffer of the caller's
//! ([`BufferTarget`]), or, for the NVMe controller, the command's guest pages, which can
//! take a run of pages from the backing file itself (one `preadv` into guest memory, no
//! copy through a buffer: docs/nvme-controller.md, "Where a large transfer's time goes").

use std::io;

use crate::medium::Medium;

/// The destination of a host read of `len` bytes; `at` is a position in the transfer.
/// The FTL calls these once per byte range, in any order, each byte exactly once.
pub trait ReadTarget {
    /// Bytes [at, at + n) read as zeroes (pages never written or deallocated).
    fn zeroes(&mut self, at: usize, n: usize);
    /// Bytes [at, at + src.len()) are `src` (part of a page, read by the FTL).
    fn put(&mut self, at: usize, src: &[u8]);
    /// Bytes [at, at + n) are `medium`'s at `off` (a run of whole pages). An error is the
    /// medium's; where the destination cannot take the bytes is the target's to keep.
    fn medium_run(&mut self, medium: &dyn Medium, off: u64, at: usize, n: usize) -> io::Result<()>;
}

/// A read into a buffer (`Ftl::read`).
pub struct BufferTarget<'a>(pub &'a mut [u8]);

impl ReadTarget for BufferTarget<'_> {
    fn zeroes(&mut self, at: usize, n: usize) {
        self.0[at..at + n].fill(0);
    }
    fn put(&mut self, at: usize, src: &[u8]) {
        self.0[at..at + src.len()].copy_from_slice(src);
    }
    fn medium_run(&mut self, medium: &dyn Medium, off: u64, at: usize, n: usize) -> io::Result<()> {
        medium.read_at(off, &mut self.0[at..at + n])
    }
}
