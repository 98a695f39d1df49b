//! The namespace's data: zeroed memory or a sparse file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;

use crate::{Backing, Error};

pub(crate) enum Store {
    Memory(Vec<u8>),
    File(File),
}

pub(crate) struct Namespace {
    pub bytes: u64,
    pub lba_shift: u8,
    store: Store,
}

impl Namespace {
    pub fn new(backing: &Backing, bytes: u64, lba_shift: u8) -> Result<Self, Error> {
        let store = match backing {
            // vec! of zeros comes from calloc: untouched pages cost nothing.
            Backing::Memory => Store::Memory(vec![0u8; usize::try_from(bytes).map_err(|_| cfg_err(bytes))?]),
            Backing::SparseFile(path) => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)?;
                f.set_len(bytes)?;
                Store::File(f)
            }
        };
        Ok(Namespace {
            bytes,
            lba_shift,
            store,
        })
    }

    pub fn lbas(&self) -> u64 {
        self.bytes >> self.lba_shift
    }

    pub fn backing_name(&self) -> &'static str {
        match self.store {
            Store::Memory(_) => "memory",
            Store::File(_) => "sparse-file",
        }
    }

    /// Read `buf.len()` bytes at byte offset `off` (the caller checked the range).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match &self.store {
            Store::Memory(v) => {
                buf.copy_from_slice(&v[off as usize..off as usize + buf.len()]);
                Ok(())
            }
            Store::File(f) => f.read_exact_at(buf, off),
        }
    }

    pub fn write(&mut self, off: u64, buf: &[u8]) -> std::io::Result<()> {
        match &mut self.store {
            Store::Memory(v) => {
                v[off as usize..off as usize + buf.len()].copy_from_slice(buf);
                Ok(())
            }
            Store::File(f) => f.write_all_at(buf, off),
        }
    }

    /// Store zeroes over [off, off+len) (the caller checked the range). Memory stays
    /// unallocated and a file backing keeps its holes: a chunk that already reads as zeroes (never written, or a hole) is
    /// not rewritten, so deallocating or zeroing unwritten space of a large sparse
    /// namespace allocates no disk.
    pub fn zero(&mut self, off: u64, len: u64) -> std::io::Result<()> {
        const CHUNK: u64 = 1 << 20;
        match &mut self.store {
            Store::Memory(v) => {
                // Only pieces holding data are written: reading an untouched calloc page
                // maps the shared zero page, writing it would make it resident (fstrim or
                // mkfs discard of a large memory namespace).
                for piece in v[off as usize..(off + len) as usize].chunks_mut(CHUNK as usize) {
                    if piece.iter().any(|&b| b != 0) {
                        piece.fill(0);
                    }
                }
                Ok(())
            }
            Store::File(f) => {
                let mut buf = vec![0u8; len.min(CHUNK) as usize];
                let mut at = 0;
                while at < len {
                    let n = (len - at).min(CHUNK) as usize;
                    f.read_exact_at(&mut buf[..n], off + at)?;
                    if buf[..n].iter().any(|&b| b != 0) {
                        buf[..n].fill(0);
                        f.write_all_at(&buf[..n], off + at)?;
                    }
                    at += n as u64;
                }
                Ok(())
            }
        }
    }

    pub fn flush(&self) -> std::io::Result<()> {
        match &self.store {
            Store::Memory(_) => Ok(()),
            Store::File(f) => f.sync_data(),
        }
    }
}

fn cfg_err(bytes: u64) -> Error {
    Error::Config(format!("namespace of {bytes} bytes does not fit in memory"))
}
