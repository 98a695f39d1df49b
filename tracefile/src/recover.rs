//! Recovery after a crash or power cut: find where the last complete item
//! ends, and how far each epoch got, so the daemon can truncate a torn tail
//! and resume without duplicating or silently skipping records.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::FileError;
use crate::header::FileHeader;
use crate::reader::TraceReader;
pub use crate::walk::EpochProgress;
use crate::walk::Walker;

/// How the file ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailState {
    /// The last item is complete.
    Clean,
    /// The file ends inside an item that starts at `offset` (an interrupted
    /// write). Truncating to `offset` gives a clean file.
    Torn { offset: u64, have: u64, need: u64 },
    /// The item at `offset` is malformed: the file was damaged, not merely
    /// cut short. Items after it cannot be located.
    Corrupt { offset: u64, reason: String },
}

/// What recovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub header: FileHeader,
    /// Bytes in the file.
    pub file_len: u64,
    /// End of the last complete, valid item: the length to truncate to.
    pub valid_len: u64,
    pub tail: TailState,
    /// Epochs in file order; the last one is where appending continues.
    pub epochs: Vec<EpochProgress>,
    /// Items (records and markers) before `valid_len`.
    pub items: u64,
}

impl Recovery {
    pub fn last_epoch(&self) -> &EpochProgress {
        // `recover_from` always pushes the header's first epoch.
        &self.epochs[self.epochs.len() - 1]
    }
}

/// Scan a whole file from `path` (streaming, bounded memory).
pub fn recover(path: &Path) -> Result<Recovery, FileError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut rec = recover_from(file)?;
    rec.file_len = file_len;
    Ok(rec)
}

/// Offset just past the last complete item of the file at `path`.
pub fn last_complete_offset(path: &Path) -> Result<u64, FileError> {
    Ok(recover(path)?.valid_len)
}

/// Scan from any reader. Header errors are returned as errors (there is
/// nothing to resume); item errors end the scan and are described in `tail`.
/// `file_len` is the number of bytes consumed.
pub fn recover_from<R: Read>(inner: R) -> Result<Recovery, FileError> {
    recover_from_with_capacity(inner, crate::reader::DEFAULT_BUFFER)
}

/// [`recover_from`] through a read buffer of `capacity` bytes (at least the
/// largest item): the fuzz target scans thousands of small inputs a second,
/// for which a 1 MiB buffer per scan was most of the cost.
pub fn recover_from_with_capacity<R: Read>(inner: R, capacity: usize) -> Result<Recovery, FileError> {
    let mut reader = TraceReader::with_capacity(inner, capacity)?;
    let header = *reader.header();
    let mut walker = Walker::new(&header);
    let mut items = 0u64;
    let tail = loop {
        let item = match reader.next_item() {
            Ok(Some(item)) => item,
            Ok(None) => break TailState::Clean,
            Err(FileError::Truncated { offset, have, need }) => break TailState::Torn { offset, have, need },
            Err(e) => match e.item_offset() {
                Some(offset) => {
                    break TailState::Corrupt {
                        offset,
                        reason: e.to_string(),
                    }
                }
                None => return Err(e),
            },
        };
        items += 1;
        // A marker that does not decode is damage here, not an unknown marker.
        if let Err(e) = item.kind() {
            break TailState::Corrupt {
                offset: item.offset,
                reason: e.to_string(),
            };
        }
        walker.feed(&item, &mut |_| {});
    };
    let valid_len = match &tail {
        TailState::Clean => reader.offset(),
        TailState::Torn { offset, .. } | TailState::Corrupt { offset, .. } => *offset,
    };
    let file_len = match &tail {
        TailState::Torn { offset, have, .. } => offset + have,
        _ => valid_len,
    };
    Ok(Recovery {
        header,
        file_len,
        valid_len,
        tail,
        epochs: walker.into_epochs(),
        items,
    })
}
