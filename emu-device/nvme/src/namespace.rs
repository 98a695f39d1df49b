//! The namespace's data: the FTL (hmb-ftl) keeps it on "NAND", and a flat image of the
//! logical space is written through beside it for the host's tools.
//!
//! Backing store layout: bytes [0, namespace size) are the flat image (what `dd`, e2fsck or
//! debugfs on the host read: every write and zeroing lands there too, the controller never
//! reads it back); from the namespace size on, the FTL's region (superblock, erase counts,
//! OOB records, physical pages; hmb-ftl's geometry.rs). Reads come from NAND through the
//! L2P map only. A backing file made before the FTL existed (no FTL superblock) is imported
//! once: its non-zero pages are written through the FTL at the first open.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;

use hmb_ftl::{FileMedium, Ftl, FtlError, FtlEvent, Medium, MemMedium};

use crate::media::MediaConfig;
use crate::{Backing, Error};

pub(crate) enum Store {
    Memory(Vec<u8>),
    File(File),
}

pub(crate) struct Namespace {
    pub bytes: u64,
    pub lba_shift: u8,
    store: Store,
    pub(crate) ftl: Ftl,
    /// Where the FTL's map cache is (map_cache.rs).
    pub(crate) cache_home: crate::map_cache::CacheHome,
}

/// An error of the data path: the FTL's or the flat image's.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DataError {
    #[error(transparent)]
    Ftl(#[from] FtlError),
    #[error("flat image: {0}")]
    Image(#[from] std::io::Error),
}

impl Namespace {
    pub fn new(backing: &Backing, bytes: u64, lba_shift: u8, media: &MediaConfig) -> Result<Self, Error> {
        let region = Ftl::region_bytes(media, bytes)?;
        let (store, medium, had_data): (Store, Box<dyn Medium>, bool) = match backing {
            // vec! of zeros comes from calloc: untouched pages cost nothing.
            Backing::Memory => (
                Store::Memory(vec![0u8; usize::try_from(bytes).map_err(|_| cfg_err(bytes))?]),
                Box::new(MemMedium::new(region)?),
                false,
            ),
            Backing::SparseFile(path) => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)?;
                let had_data = f.metadata()?.len() > 0;
                f.set_len(bytes + region)?;
                let medium = FileMedium::new(f.try_clone()?, bytes);
                (Store::File(f), Box::new(medium), had_data)
            }
        };
        let (ftl, formatted) = Ftl::open(media, bytes, medium)?;
        let mut ns = Namespace {
            bytes,
            lba_shift,
            store,
            ftl,
            cache_home: Default::default(),
        };
        if formatted && had_data {
            ns.import()?;
        }
        Ok(ns)
    }

    /// Write the flat image's non-zero pages through the FTL (a backing file from before
    /// the FTL, or whose region was lost).
    fn import(&mut self) -> Result<(), Error> {
        let pb = self.ftl.page_bytes();
        let mut buf = vec![0u8; pb as usize];
        let mut ev = Vec::new();
        let mut at = 0;
        while at < self.bytes {
            let n = pb.min(self.bytes - at) as usize;
            self.read_image(at, &mut buf[..n])?;
            if buf[..n].iter().any(|&b| b != 0) {
                self.ftl.write(at, &buf[..n], 0, &mut ev)?;
                ev.clear();
            }
            at += n as u64;
        }
        self.ftl.flush(0, &mut ev)?;
        Ok(())
    }

    fn read_image(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
        match &self.store {
            Store::Memory(v) => {
                buf.copy_from_slice(&v[off as usize..off as usize + buf.len()]);
                Ok(())
            }
            Store::File(f) => f.read_exact_at(buf, off),
        }
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

    /// Read `buf.len()` bytes at byte offset `off` (the caller checked the range) through
    /// the FTL; returns when its last NAND operation ends.
    pub fn read(&mut self, off: u64, buf: &mut [u8], now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        Ok(self.ftl.read(off, buf, now, ev)?)
    }

    pub fn write(&mut self, off: u64, buf: &[u8], now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        let end = self.ftl.write(off, buf, now, ev)?;
        match &mut self.store {
            Store::Memory(v) => v[off as usize..off as usize + buf.len()].copy_from_slice(buf),
            Store::File(f) => f.write_all_at(buf, off)?,
        }
        Ok(end)
    }

    /// Deallocate [off, off+len) (reads back zeroes: DLFEAT 001b). The flat image gets
    /// zeroes where it holds data only: memory stays unallocated and a file keeps its holes.
    pub fn zero(&mut self, off: u64, len: u64, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        let end = self.ftl.deallocate(off, len, now, ev)?;
        const CHUNK: u64 = 1 << 20;
        match &mut self.store {
            Store::Memory(v) => {
                // Reading an untouched calloc page maps the shared zero page, writing it
                // would make it resident (fstrim or mkfs discard of a large namespace).
                for piece in v[off as usize..(off + len) as usize].chunks_mut(CHUNK as usize) {
                    if piece.iter().any(|&b| b != 0) {
                        piece.fill(0);
                    }
                }
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
            }
        }
        Ok(end)
    }

    /// The Flush command: the FTL's dirty map pages to NAND, everything durable.
    pub fn flush_at(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        // The FTL's region and the flat image are one file: the FTL's sync covers both.
        Ok(self.ftl.flush(now, ev)?)
    }

    /// Shutdown: as Flush, outside any command (its NAND work is not reported).
    pub fn flush(&mut self) -> Result<(), DataError> {
        self.flush_at(0, &mut Vec::new()).map(|_| ())
    }
}

fn cfg_err(bytes: u64) -> Error {
    Error::Config(format!("namespace of {bytes} bytes does not fit in memory"))
}
