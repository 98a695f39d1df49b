//! Opening a trace.bin: a regular file is memory-mapped (the fast path),
//! anything else (stdin as "-", a pipe) is streamed through a fixed buffer.
//! Either way memory stays bounded by the buffer, not the file. A Telemetry
//! log (`nvme telemetry-log` output, at most 32 MiB of data areas 1-3) is
//! read whole and its trace.bin stream streamed from memory.

use std::fs::File;
use std::io::{Cursor, Read};
use std::ops::ControlFlow;
use std::path::Path;

use hmb_trace_abi::{
    align_record, hmb_record_hdr, HMB_RECORD_FLAG_MARKER, HMB_RECORD_FLAG_PAD, HMB_RECORD_MAX_PAYLOAD,
};
use hmb_trace_file::{
    is_telemetry_trace, parse_item, FileError, FileHeader, Item, ItemParse, MappedTrace, TelemetryLog, TraceReader,
};

use zerocopy::FromBytes;

use crate::exit::{from_file_error, AppError};
use crate::progress::Progress;

enum Source {
    Mapped(MappedTrace),
    Stream(TraceReader<Box<dyn Read>>),
}

pub struct TraceInput {
    pub name: String,
    pub header: FileHeader,
    /// Size of the file when known (regular files).
    pub file_len: Option<u64>,
    source: Source,
}

/// How a walk over the items ended.
#[derive(Debug)]
pub struct WalkEnd {
    /// Offset after the last item visited: the readable length.
    pub offset: u64,
    pub items: u64,
    /// The error that stopped reading (a torn tail, a corrupt item).
    pub error: Option<FileError>,
    /// The visitor asked to stop (e.g. a record limit).
    pub stopped: bool,
}

/// A finished walk.
pub struct Walked {
    pub name: String,
    pub header: FileHeader,
    pub file_len: Option<u64>,
    pub end: WalkEnd,
}

impl Walked {
    /// The reading error, if any, as the command's final error. Commands
    /// print what they could read first, then return this.
    pub fn status(&mut self) -> Result<(), AppError> {
        match self.end.error.take() {
            Some(e) => Err(from_file_error(&self.name, e)),
            None => Ok(()),
        }
    }

    /// Human description of how the walk ended, for summaries.
    pub fn ending(&self) -> Option<String> {
        self.end.error.as_ref().map(|e| e.to_string())
    }
}

impl TraceInput {
    pub fn open(path: &str) -> Result<Self, FileError> {
        if path == "-" {
            let reader = TraceReader::new(Box::new(std::io::stdin().lock()) as Box<dyn Read>)?;
            return Ok(Self {
                name: "<stdin>".into(),
                header: *reader.header(),
                file_len: None,
                source: Source::Stream(reader),
            });
        }
        let meta = std::fs::metadata(path)?;
        if meta.is_file() && starts_as_telemetry(path)? {
            let bytes = std::fs::read(path)?;
            let log = TelemetryLog::parse(&bytes)?;
            let stream = log.stream.to_vec();
            let len = stream.len() as u64;
            let reader = TraceReader::new(Box::new(Cursor::new(stream)) as Box<dyn Read>)?;
            return Ok(Self {
                name: format!(
                    "{path} (telemetry log {:02x}h, generation {})",
                    log.lid,
                    log.generation()
                ),
                header: *reader.header(),
                file_len: Some(len),
                source: Source::Stream(reader),
            });
        }
        if meta.is_file() {
            let mapped = MappedTrace::open(Path::new(path))?;
            return Ok(Self {
                name: path.into(),
                header: *mapped.header(),
                file_len: Some(meta.len()),
                source: Source::Mapped(mapped),
            });
        }
        let reader = TraceReader::new(Box::new(File::open(path)?) as Box<dyn Read>)?;
        Ok(Self {
            name: path.into(),
            header: *reader.header(),
            file_len: None,
            source: Source::Stream(reader),
        })
    }

    /// Done: the walk's outcome with the input's name and header.
    pub fn into_walked(self, end: WalkEnd) -> Walked {
        Walked {
            name: self.name,
            header: self.header,
            file_len: self.file_len,
            end,
        }
    }

    /// The whole file (header included) when it is memory-mapped: the
    /// parallel walks split it.
    pub fn mapped_bytes(&self) -> Option<&[u8]> {
        match &self.source {
            Source::Mapped(m) => Some(m.bytes()),
            Source::Stream(_) => None,
        }
    }

    /// Visit every item in file order until the end, an error, or the
    /// visitor breaks.
    pub fn walk(&mut self, progress: &Progress, mut visit: impl FnMut(&Item<'_>) -> ControlFlow<()>) -> WalkEnd {
        let mut end = WalkEnd {
            offset: self.header.header_size as u64,
            items: 0,
            error: None,
            stopped: false,
        };
        let mut since_tick = 0u32;
        match &mut self.source {
            Source::Mapped(m) => {
                let bytes = m.bytes();
                return walk_bytes(bytes, end.offset, bytes.len() as u64, progress, visit);
            }
            Source::Stream(r) => loop {
                match r.next_item() {
                    Ok(Some(item)) => {
                        end.items += 1;
                        end.offset = item.offset + item.size();
                        if visit(&item).is_break() {
                            end.stopped = true;
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        end.error = Some(e);
                        break;
                    }
                }
                since_tick += 1;
                if since_tick == 65536 {
                    since_tick = 0;
                    progress.set(end.offset);
                }
            },
        }
        progress.set(end.offset);
        end
    }
}

/// Whether the file begins as a Telemetry log holding a trace.bin stream.
fn starts_as_telemetry(path: &str) -> Result<bool, FileError> {
    let mut head = Vec::with_capacity(520);
    File::open(path)?.take(520).read_to_end(&mut head)?;
    Ok(is_telemetry_trace(&head))
}

/// Visit the items of a mapped file (`bytes` is the whole file) in file
/// order from file offset `start`, an item boundary, while the next item
/// starts below `stop` (the file's length for a whole walk), until an
/// error or the visitor breaks. The same items, errors and end offset as
/// the crate's `SliceReader`; the parallel walks call it on a part of the
/// file. `WalkEnd::offset` starts at `start`.
#[inline]
pub fn walk_bytes(
    bytes: &[u8],
    start: u64,
    stop: u64,
    progress: &Progress,
    mut visit: impl FnMut(&Item<'_>) -> ControlFlow<()>,
) -> WalkEnd {
    let mut end = WalkEnd {
        offset: start,
        items: 0,
        error: None,
        stopped: false,
    };
    let len = bytes.len();
    let stop = (stop as usize).min(len);
    let mut pos = (start as usize).min(len);
    let mut since_tick = 0u32;
    while pos < stop {
        // The common case, a complete device record, read here with the
        // same checks as `parse_item`; anything else goes through it.
        if let Some(item) = record_at(bytes, pos) {
            pos += item.size() as usize;
            end.items += 1;
            end.offset = pos as u64;
            if visit(&item).is_break() {
                end.stopped = true;
                break;
            }
            since_tick += 1;
            if since_tick == 65536 {
                since_tick = 0;
                progress.set(end.offset);
            }
            continue;
        }
        match parse_item(&bytes[pos..], pos as u64) {
            Ok(ItemParse::Item(item)) => {
                pos += item.size() as usize;
                end.items += 1;
                end.offset = pos as u64;
                if visit(&item).is_break() {
                    end.stopped = true;
                    break;
                }
            }
            Ok(ItemParse::NeedMore { need }) => {
                end.error = Some(FileError::Truncated {
                    offset: pos as u64,
                    have: (len - pos) as u64,
                    need,
                });
                break;
            }
            Err(e) => {
                end.error = Some(e);
                break;
            }
        }
        since_tick += 1;
        if since_tick == 65536 {
            since_tick = 0;
            progress.set(end.offset);
        }
    }
    progress.set(end.offset);
    end
}

/// The device record at `pos` when it is complete and valid (not a marker,
/// not PAD, length in bounds): exactly the item `parse_item` returns for it.
/// None for anything else, which `parse_item` then judges.
#[inline(always)]
fn record_at(bytes: &[u8], pos: usize) -> Option<Item<'_>> {
    let rest = bytes.get(pos..)?;
    let (hdr, payload) = hmb_record_hdr::read_from_prefix(rest).ok()?;
    let length = hdr.length.get();
    if hdr.flags.get() & (HMB_RECORD_FLAG_PAD | HMB_RECORD_FLAG_MARKER) != 0
        || length > HMB_RECORD_MAX_PAYLOAD
        || rest.len() < align_record(length) as usize
    {
        return None;
    }
    Some(Item {
        offset: pos as u64,
        hdr,
        payload: &payload[..length as usize],
    })
}
