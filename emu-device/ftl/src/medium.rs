//! The byte region the FTL keeps its NAND in: part of the namespace's backing store.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

pub trait Medium: Send {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()>;
    fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()>;
    /// Make what was written durable.
    fn sync(&mut self) -> io::Result<()>;

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
}
