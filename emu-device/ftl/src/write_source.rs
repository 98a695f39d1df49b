//! Where a host write's bytes come from (`Ftl::write_from`): a buffer of the caller's
//! ([`BufferSource`]), or, for the NVMe controller, the command's guest pages. A whole
//! page is staged as the memory that holds it ([`HostSlice`]s), not copied: the staged
//! run goes to the medium in one vectored write from that memory (one `pwritev` from guest
//! memory into the backing file, as a DMA to the media would: docs/nvme-controller.md,
//! "Where a large transfer's time goes"). A partial page is copied out and merged with
//! the page's old content as before.

/// A piece of memory holding host data that the FTL does not own (part of the command's
/// guest pages): an address range, read only by the medium's write of a staged run.
#[derive(Clone, Copy, Debug)]
pub struct HostSlice {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a HostSlice is an address range whose readability its maker promises for the
// FTL operation it is given to (`HostSlice::new`); the FTL never sends it to another
// thread, and Send is needed only because the FTL keeps a scratch list of them.
unsafe impl Send for HostSlice {}

impl HostSlice {
    /// # Safety
    /// [ptr, ptr + len) must stay valid for reads until the FTL operation it is handed to
    /// (the `Ftl::write_from` call whose source made it) returns: every staged run is
    /// written to the medium before the operation returns (staged.rs).
    pub unsafe fn new(ptr: *const u8, len: usize) -> Self {
        HostSlice { ptr, len }
    }

    pub fn as_ptr(&self) -> *const u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes into `dst` (exactly `self.len()` of them).
    pub fn copy_to(&self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len, "a host slice copied into a buffer of another size");
        // SAFETY: readable for `len` bytes (`HostSlice::new`'s contract); `dst` is a
        // distinct, writable buffer of that size.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, dst.as_mut_ptr(), self.len) }
    }
}

/// The data of a host write of `len()` bytes; `at` is a position in the transfer.
pub trait WriteSource {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes [at, at + dst.len()) into `dst` (a partial page, merged by the FTL).
    fn copy_to(&self, at: usize, dst: &mut [u8]);

    /// Append the memory that holds bytes [at, at + n), in transfer order, to `out` (a
    /// whole page, staged without a copy).
    fn slices(&self, at: usize, n: usize, out: &mut Vec<HostSlice>);
}

/// A write from a buffer (`Ftl::write`).
pub struct BufferSource<'a>(pub &'a [u8]);

impl WriteSource for BufferSource<'_> {
    fn len(&self) -> usize {
        self.0.len()
    }

    fn copy_to(&self, at: usize, dst: &mut [u8]) {
        dst.copy_from_slice(&self.0[at..at + dst.len()]);
    }

    fn slices(&self, at: usize, n: usize, out: &mut Vec<HostSlice>) {
        let s = &self.0[at..at + n];
        // SAFETY: `s` is borrowed for 'a, which outlives the `Ftl::write_from` call this
        // source is passed to, and nothing writes it meanwhile (a shared borrow).
        out.push(unsafe { HostSlice::new(s.as_ptr(), s.len()) });
    }
}
