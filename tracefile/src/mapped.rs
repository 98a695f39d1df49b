//! The mmap fast path: map a finished trace.bin and iterate without copying.

use std::fs::File;
use std::path::Path;

use memmap2::Mmap;

use crate::error::FileError;
use crate::header::FileHeader;
use crate::reader::SliceReader;

/// A trace.bin mapped read-only.
pub struct MappedTrace {
    map: Option<Mmap>,
    header: FileHeader,
}

impl MappedTrace {
    /// Map `path` and validate its header.
    ///
    /// The file must not be truncated by another process while mapped (that
    /// would fault, as with any mmap); use [`crate::TraceReader`] on a file
    /// the daemon is still writing. Appends are harmless: the map keeps the
    /// length seen at open.
    pub fn open(path: &Path) -> Result<Self, FileError> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        // mmap of length 0 fails; let header parsing report the short file.
        let map = if len == 0 {
            None
        } else {
            // SAFETY: read-only private map; see the truncation caveat above.
            Some(unsafe { Mmap::map(&file)? })
        };
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let header = *SliceReader::new(bytes)?.header();
        #[cfg(unix)]
        if let Some(m) = &map {
            let _ = m.advise(memmap2::Advice::Sequential);
        }
        Ok(Self { map, header })
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    pub fn len(&self) -> u64 {
        self.bytes().len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Iterate the items. The header was validated at open.
    pub fn items(&self) -> SliceReader<'_> {
        SliceReader::with_header(self.bytes(), self.header)
    }
}
