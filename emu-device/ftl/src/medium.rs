//! The byte region the FTL keeps its NAND in: part of the namespace's backing store.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use crate::write_source::HostSlice;

pub trait Medium: Send {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()>;
    /// Make what was written durable.
    fn sync(&mut self) -> io::Result<()>;

    /// The file this medium is a region of, and the file offset of the region's byte 0,
    /// if reading the file there is reading the medium: a host read's destination may then
    /// take a run of pages from the file itself ([`crate::ReadTarget`]), with no copy
    /// through a buffer of the FTL's.
    fn file_region(&self) -> Option<(&File, u64)> {
        None
    }

    /// Write `slices` one after another from `off` (a staged run of a host write's pages,
    /// staged as the memory that holds them: write_source.rs). A file writes them with
    /// `pwritev`, straight from that memory; this default copies them into one buffer
    /// and writes it with one `write_at`.
    fn write_slices_at(&mut self, off: u64, slices: &[HostSlice]) -> io::Result<()> {
        let mut buf = vec![0u8; slices.iter().map(HostSlice::len).sum()];
        let mut at = 0;
        for s in slices {
            s.copy_to(&mut buf[at..at + s.len()]);
            at += s.len();
        }
        self.write_at(off, &buf)
    }

    /// Zeroes over [off, off+len), skipping what already reads as zero so that a sparse
    /// store stays sparse.
    fn zero(&mut self, off: u64, len: u64) -> io::Result<()> {
        const CHUNK: u64 = 1 << 20;
        let mut buf = vec![0u8; len.min(CHUNK) as usize];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(CHUNK) as usize;
            self.read_at(off + at, &mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                buf[..n].fill(0);
                self.write_at(off + at, &buf[..n])?;
            }
            at += n as u64;
        }
        Ok(())
    }
}

/// Zeroed memory (pages allocated when written).
pub struct MemMedium(Vec<u8>);

impl MemMedium {
    pub fn new(bytes: u64) -> io::Result<Self> {
        let n = usize::try_from(bytes).map_err(|_| io::Error::other("medium does not fit in memory"))?;
        Ok(MemMedium(vec![0; n]))
    }

    fn range(&self, off: u64, len: usize) -> io::Result<std::ops::Range<usize>> {
        let start = usize::try_from(off).map_err(|_| io::Error::other("offset"))?;
        match start.checked_add(len) {
            Some(end) if end <= self.0.len() => Ok(start..end),
            _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "outside the medium")),
        }
    }
}

impl Medium for MemMedium {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let r = self.range(off, buf.len())?;
        buf.copy_from_slice(&self.0[r]);
        Ok(())
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        let r = self.range(off, buf.len())?;
        self.0[r].copy_from_slice(buf);
        Ok(())
    }
    fn write_slices_at(&mut self, off: u64, slices: &[HostSlice]) -> io::Result<()> {
        let r = self.range(off, slices.iter().map(HostSlice::len).sum())?;
        let mut at = r.start;
        for s in slices {
            s.copy_to(&mut self.0[at..at + s.len()]);
            at += s.len();
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A region of a file starting at `base` (the namespace's backing file after its logical
/// image).
pub struct FileMedium {
    file: File,
    base: u64,
}

impl FileMedium {
    pub fn new(file: File, base: u64) -> Self {
        FileMedium { file, base }
    }
}

impl Medium for FileMedium {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, self.base + off)
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, self.base + off)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn file_region(&self) -> Option<(&File, u64)> {
        Some((&self.file, self.base))
    }
    fn write_slices_at(&mut self, off: u64, slices: &[HostSlice]) -> io::Result<()> {
        pwritev_all(&self.file, self.base + off, slices)
    }
}

/// All of `slices` into `file` from `pos`: `pwritev`s, more only if the kernel writes less.
fn pwritev_all(file: &File, pos: u64, slices: &[HostSlice]) -> io::Result<()> {
    let mut iov: Vec<libc::iovec> = slices
        .iter()
        .filter(|s| !s.is_empty())
        .map(|s| libc::iovec {
            iov_base: s.as_ptr().cast_mut().cast(),
            iov_len: s.len(),
        })
        .collect();
    crate::vectored::transfer_all(
        &mut iov,
        pos,
        // SAFETY: every iovec is a HostSlice, readable while the FTL operation that staged
        // it runs (`HostSlice::new`), which is past this call; the kernel only reads them.
        |iov, count, offset| unsafe { libc::pwritev(file.as_raw_fd(), iov, count, offset) },
        || io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"),
    )
}

/// A read-only view of another medium: writes (recovery's map-page programs, the cache's
/// write-backs of an export) land in memory over it, in 4 KiB pages, and never reach it.
/// For reading a backing store the controller may still be using, or keep unchanged.
pub struct OverlayMedium<M> {
    base: M,
    pages: std::collections::HashMap<u64, Box<[u8]>>,
}

const OVERLAY_PAGE: u64 = 4096;

impl<M: Medium> OverlayMedium<M> {
    pub fn new(base: M) -> Self {
        OverlayMedium {
            base,
            pages: Default::default(),
        }
    }

    /// `f(page index, offset in page, range in the caller's buffer)` for each overlay page
    /// [off, off+len) touches.
    fn pieces(
        off: u64,
        len: usize,
        mut f: impl FnMut(u64, usize, std::ops::Range<usize>) -> io::Result<()>,
    ) -> io::Result<()> {
        for s in crate::geometry::page_spans(OVERLAY_PAGE, off, len) {
            f(s.index, s.in_page, s.at..s.at + s.n)?;
        }
        Ok(())
    }
}

impl<M: Medium> Medium for OverlayMedium<M> {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.pages.is_empty() {
            return self.base.read_at(off, buf);
        }
        Self::pieces(off, buf.len(), |page, in_page, r| match self.pages.get(&page) {
            Some(p) => {
                buf[r.clone()].copy_from_slice(&p[in_page..in_page + r.len()]);
                Ok(())
            }
            None => self.base.read_at(off + r.start as u64, &mut buf[r]),
        })
    }
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        let (base, pages) = (&self.base, &mut self.pages);
        Self::pieces(off, buf.len(), |page, in_page, r| {
            let p = pages.entry(page).or_insert_with(|| {
                let mut p = vec![0u8; OVERLAY_PAGE as usize].into_boxed_slice();
                // A page past the base's end (an FTL region the base was cut short of)
                // starts as zeroes, as a sparse file's hole would.
                if base.read_at(page * OVERLAY_PAGE, &mut p).is_err() {
                    p.fill(0);
                }
                p
            });
            p[in_page..in_page + r.len()].copy_from_slice(&buf[r]);
            Ok(())
        })
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_overlay_keeps_writes_to_itself_and_reads_them_back() {
        let mut base = MemMedium::new(3 * OVERLAY_PAGE).unwrap();
        base.write_at(0, &[7u8; 3 * OVERLAY_PAGE as usize]).unwrap();
        let mut o = OverlayMedium::new(base);
        o.write_at(OVERLAY_PAGE - 2, &[1, 2, 3, 4]).unwrap();
        let mut b = [0u8; 8];
        o.read_at(OVERLAY_PAGE - 4, &mut b).unwrap();
        assert_eq!(b, [7, 7, 1, 2, 3, 4, 7, 7]);
        let mut under = [0u8; 4];
        o.base.read_at(OVERLAY_PAGE - 2, &mut under).unwrap();
        assert_eq!(under, [7; 4], "the base is untouched");
    }

    /// Slices written to a file (`pwritev`, more iovecs than one call takes, empty ones
    /// among them) and to memory land one after another, as one buffer's write would.
    #[test]
    fn slices_are_written_in_order_to_a_file_and_to_memory() {
        use crate::write_source::{BufferSource, WriteSource};
        let data: Vec<u8> = (0..3 * 1024 + 5).map(|i| (i * 13 % 251) as u8).collect();
        let src = BufferSource(&data);
        let mut slices = Vec::new();
        // One-byte slices, an empty one after each tenth.
        for i in 0..data.len() {
            src.slices(i, 1, &mut slices);
            if i % 10 == 0 {
                src.slices(i, 0, &mut slices);
            }
        }
        let mut file = FileMedium::new(tempfile::tempfile().unwrap(), 100);
        file.write_slices_at(7, &slices).unwrap();
        let mut back = vec![0u8; data.len()];
        file.read_at(7, &mut back).unwrap();
        assert_eq!(back, data);
        let mut mem = MemMedium::new(data.len() as u64 + 7).unwrap();
        mem.write_slices_at(7, &slices).unwrap();
        mem.read_at(7, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(mem.write_slices_at(8, &slices).is_err(), "past the medium's end");
    }
}
