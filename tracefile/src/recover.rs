//! Recovery after a crash or power cut: find where the last complete item
//! ends, and how far each epoch got, so the daemon can truncate a torn tail
//! and resume without duplicating or silently skipping records.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::FileError;
use crate::header::FileHeader;
use crate::item::ItemKind;
use crate::marker::Marker;
use crate::reader::TraceReader;

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

/// Progress of one ring epoch as recorded in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochProgress {
    pub epoch: u64,
    /// From the file header (first epoch) or the EPOCH marker.
    pub ring_size: u64,
    /// Seq of the last device record written in this epoch.
    pub last_seq: Option<u64>,
    /// First seq not yet accounted for: one past the highest seq that is in
    /// the file as a record, covered by a LOST marker, or final per FROZEN.
    pub next_seq: u64,
    /// Device records of this epoch in the file.
    pub records: u64,
    /// A FROZEN marker for this epoch is in the file.
    pub frozen: bool,
}

impl EpochProgress {
    fn new(epoch: u64, ring_size: u64) -> Self {
        Self {
            epoch,
            ring_size,
            last_seq: None,
            next_seq: 0,
            records: 0,
            frozen: false,
        }
    }
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
    let mut reader = TraceReader::new(inner)?;
    let header = *reader.header();
    let mut epochs = vec![EpochProgress::new(header.first_epoch, header.ring_size)];
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
        let kind = match item.kind() {
            Ok(k) => k,
            Err(e) => {
                break TailState::Corrupt {
                    offset: item.offset,
                    reason: e.to_string(),
                }
            }
        };
        let seq = item.seq();
        let current = epochs.len() - 1;
        match kind {
            ItemKind::Record => {
                let p = &mut epochs[current];
                p.last_seq = Some(p.last_seq.map_or(seq, |s| s.max(seq)));
                p.next_seq = p.next_seq.max(seq.saturating_add(1));
                p.records += 1;
            }
            ItemKind::Marker(Marker::Epoch { epoch, ring_size }) => {
                epochs.push(EpochProgress::new(epoch, ring_size));
            }
            ItemKind::Marker(Marker::Lost {
                first_seq,
                count,
                epoch,
            }) => {
                if let Some(p) = epochs.iter_mut().rev().find(|p| p.epoch == epoch) {
                    p.next_seq = p.next_seq.max(first_seq.saturating_add(count));
                }
            }
            ItemKind::Marker(Marker::Frozen { epoch, next_seq, .. }) => {
                if let Some(p) = epochs.iter_mut().rev().find(|p| p.epoch == epoch) {
                    p.frozen = true;
                    p.next_seq = p.next_seq.max(next_seq);
                }
            }
            ItemKind::Marker(Marker::Unknown { .. }) => {}
        }
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
        epochs,
        items,
    })
}
