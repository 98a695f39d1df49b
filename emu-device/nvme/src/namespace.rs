//! The namespace's data: the FTL (hmb-ftl) keeps it on "NAND", the backing store, and
//! nothing else holds it. Host tools that want the namespace's bytes (e2fsck, debugfs, a
//! pattern check) read them through the FTL with [`NamespaceImage`] (`emu-device
//! export-namespace`), which recovers the FTL read-only as a power-on would.
//!
//! Backing file layout: the FTL's region (superblock, erase counts, OOB records, physical
//! pages; hmb-ftl's geometry.rs) from byte 0. Files from before this layout kept a flat
//! image of the namespace in [0, namespace size) and the region after it; they are used
//! as they are ([`region_offset`]): a region there is mounted (the old flat image is no
//! longer written), and a file with no region at all (made before the FTL) is imported
//! once: its non-zero pages are written through the FTL into a region after the image.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use hmb_ftl::{FileMedium, Ftl, FtlError, FtlEvent, Medium, MemMedium, OverlayMedium, ReadTarget, WriteSource};

use crate::media::MediaConfig;
use crate::{Backing, Error};

pub(crate) struct Namespace {
    pub bytes: u64,
    pub lba_shift: u8,
    backing_name: &'static str,
    pub(crate) ftl: Ftl,
    /// Where the FTL's map cache is (map_cache.rs).
    pub(crate) cache_home: crate::map_cache::CacheHome,
}

/// An error of the data path (the FTL's).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DataError {
    #[error(transparent)]
    Ftl(#[from] FtlError),
}

/// Where a backing file's FTL region starts: 0 for a new file or one made with this
/// layout; after the flat image (`bytes`) for a file of the older layouts.
fn region_offset(f: &File, bytes: u64) -> Result<u64, Error> {
    if f.metadata()?.len() == 0 || Ftl::is_formatted(&FileMedium::new(f.try_clone()?, 0))? {
        Ok(0)
    } else {
        Ok(bytes)
    }
}

impl Namespace {
    pub fn new(backing: &Backing, bytes: u64, lba_shift: u8, media: &MediaConfig) -> Result<Self, Error> {
        let region = Ftl::region_bytes(media, bytes)?;
        let (ftl, import, backing_name) = match backing {
            Backing::Memory => (
                Ftl::open(media, bytes, Box::new(MemMedium::new(region)?))?.0,
                None,
                "memory",
            ),
            Backing::SparseFile(path) => {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)?;
                let base = region_offset(&f, bytes)?;
                if base != 0 {
                    log::warn!(
                        "nvme: {} has the older layout (a flat image, then the FTL region): its image is no longer written",
                        path.display()
                    );
                }
                let len = f.metadata()?.len();
                f.set_len(len.max(base + region))?;
                let (ftl, formatted) = Ftl::open(media, bytes, Box::new(FileMedium::new(f.try_clone()?, base)))?;
                // A region just formatted after an image with data: a file from before the FTL.
                let import = (formatted && base != 0).then_some(f);
                (ftl, import, "sparse-file")
            }
        };
        let mut ns = Namespace {
            bytes,
            lba_shift,
            backing_name,
            ftl,
            cache_home: Default::default(),
        };
        if let Some(f) = import {
            ns.import(&f)?;
        }
        Ok(ns)
    }

    /// Write a flat image's non-zero pages through the FTL (a backing file from before
    /// the FTL).
    fn import(&mut self, image: &File) -> Result<(), Error> {
        let pb = self.ftl.page_bytes();
        let mut buf = vec![0u8; pb as usize];
        let mut ev = Vec::new();
        let mut at = 0;
        while at < self.bytes {
            let n = pb.min(self.bytes - at) as usize;
            image.read_exact_at(&mut buf[..n], at)?;
            if buf[..n].iter().any(|&b| b != 0) {
                self.ftl.write(at, &buf[..n], 0, &mut ev)?;
                ev.clear();
            }
            at += n as u64;
        }
        self.ftl.flush(0, &mut ev)?;
        Ok(())
    }

    pub fn lbas(&self) -> u64 {
        self.bytes >> self.lba_shift
    }

    pub fn backing_name(&self) -> &'static str {
        self.backing_name
    }

    /// Read `buf.len()` bytes at byte offset `off` (the caller checked the range) through
    /// the FTL; returns when its last NAND operation ends.
    pub fn read(&mut self, off: u64, buf: &mut [u8], now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        Ok(self.ftl.read(off, buf, now, ev)?)
    }

    /// [`Namespace::read`] of `len` bytes into `target` (a Read command's guest pages).
    pub fn read_into(
        &mut self,
        off: u64,
        len: usize,
        target: &mut dyn ReadTarget,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, DataError> {
        Ok(self.ftl.read_into(off, len, target, now, ev)?)
    }

    /// Write `source`'s bytes (a Write command's guest pages) at byte offset `off`.
    pub fn write_from(
        &mut self,
        off: u64,
        source: &dyn WriteSource,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, DataError> {
        Ok(self.ftl.write_from(off, source, now, ev)?)
    }

    /// Deallocate [off, off+len) (reads back zeroes: DLFEAT 001b).
    pub fn zero(&mut self, off: u64, len: u64, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        Ok(self.ftl.deallocate(off, len, now, ev)?)
    }

    /// The Flush command: the FTL's dirty map pages to NAND, everything durable.
    pub fn flush_at(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, DataError> {
        Ok(self.ftl.flush(now, ev)?)
    }

    /// Shutdown: as Flush, outside any command (its NAND work is not reported).
    pub fn flush(&mut self) -> Result<(), DataError> {
        self.flush_at(0, &mut Vec::new()).map(|_| ())
    }
}

/// A namespace's bytes as host tools want them, read from a backing file through its FTL
/// (recovered as at a power-on, in an overlay: the file is never written, so it can be
/// read while a controller still serves it, though it sees only what reached the file).
pub struct NamespaceImage {
    bytes: u64,
    ftl: Ftl,
}

impl NamespaceImage {
    /// Open `backing`, served with a namespace of `namespace_bytes` and the default media
    /// configuration (what `serve-nvme` uses). A file that holds no FTL is an error.
    pub fn open(backing: &Path, namespace_bytes: u64) -> Result<Self, Error> {
        Self::open_with(backing, namespace_bytes, &MediaConfig::default())
    }

    pub fn open_with(backing: &Path, namespace_bytes: u64, media: &MediaConfig) -> Result<Self, Error> {
        let f = File::open(backing)?;
        let base = region_offset(&f, namespace_bytes)?;
        let region = FileMedium::new(f, base);
        if !Ftl::is_formatted(&region)? {
            return Err(FtlError::NotFormatted.into());
        }
        let medium: Box<dyn Medium> = Box::new(OverlayMedium::new(region));
        let ftl = Ftl::open_existing(media, namespace_bytes, medium)?;
        Ok(NamespaceImage {
            bytes: namespace_bytes,
            ftl,
        })
    }

    /// Read `buf.len()` bytes at byte `off` of the namespace.
    pub fn read(&mut self, off: u64, buf: &mut [u8]) -> Result<(), Error> {
        self.ftl.read(off, buf, 0, &mut Vec::new())?;
        Ok(())
    }

    /// Write the whole namespace as a sparse flat image to `out` (created or truncated);
    /// returns the bytes of data written.
    pub fn export(&mut self, out: &Path) -> Result<u64, Error> {
        let f = OpenOptions::new().write(true).create(true).truncate(true).open(out)?;
        Ok(self.ftl.export_image(&f, self.bytes)?)
    }
}
