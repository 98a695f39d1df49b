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
    align_record, hmb_record_hdr, HMB_RECORD_FLAG_MARKER, HMB_RECORD_FLAG_PAD, HMB_RECORD_HDR_SIZE,
    HMB_RECORD_MAX_PAYLOAD,
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
                if bytes.len() < PAGER_MIN_BYTES {
                    return walk_bytes(bytes, end.offset, bytes.len() as u64, progress, visit);
                }
                return walk_paged(bytes, end.offset, progress, visit);
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

/// Mapped files from this size are walked with a pager thread
/// (`walk_paged`); below, a thread costs more than it moves.
const PAGER_MIN_BYTES: usize = 8 << 20;
/// The pager keeps the pages up to this far ahead of the walk mapped.
const PAGER_AHEAD: usize = 16 << 20;
/// ... and unmaps the pages more than this far behind it, in steps of
/// at least this size.
const PAGER_BEHIND: usize = 4 << 20;
/// The walk tells the pager where it is every this many items.
const PAGER_TICK: u32 = 16 << 10;

/// `walk_bytes` over a whole mapped file from `start`, with a second
/// thread that maps the file's pages ahead of the walk
/// (`MADV_POPULATE_READ`) and unmaps those it has passed
/// (`MADV_DONTNEED`: the page cache keeps them; a page read again is
/// simply mapped again). The kernel's work for the mapping (about 5 % of
/// `decode`'s or `convert`'s CPU time) and its teardown, which the walk's
/// thread would otherwise do itself (faulting pages in, unmapping them at
/// exit), then runs on the other core: the single-threaded text outputs
/// gain that much wall time. What the walk reads is unchanged.
fn walk_paged(
    bytes: &[u8],
    start: u64,
    progress: &Progress,
    mut visit: impl FnMut(&Item<'_>) -> ControlFlow<()>,
) -> WalkEnd {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let at = AtomicUsize::new(start as usize);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let pager = s.spawn(|| {
            let (mut mapped, mut unmapped) = (start as usize, 0usize);
            loop {
                let pos = at.load(Ordering::Acquire);
                let ahead = pos.saturating_add(PAGER_AHEAD).min(bytes.len());
                if ahead > mapped {
                    populate(bytes, mapped, ahead);
                    mapped = ahead;
                }
                let behind = pos.saturating_sub(PAGER_BEHIND);
                if behind >= unmapped + PAGER_BEHIND {
                    unmap(bytes, unmapped, behind);
                    unmapped = behind;
                }
                if done.load(Ordering::Acquire) {
                    break;
                }
                std::thread::park();
            }
            // The rest goes when the file is unmapped.
        });
        let mut n = 0u32;
        let end = walk_bytes(bytes, start, bytes.len() as u64, progress, |item| {
            n += 1;
            if n == PAGER_TICK {
                n = 0;
                at.store(item.offset as usize, Ordering::Release);
                pager.thread().unpark();
            }
            visit(item)
        });
        done.store(true, Ordering::Release);
        pager.thread().unpark();
        end
    })
}

/// The page size, and the page-aligned range of `bytes[from..to]`'s
/// pages that lie wholly or partly in it, as addresses.
#[cfg(target_os = "linux")]
fn page_range(bytes: &[u8], from: usize, to: usize) -> Option<(usize, usize)> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let page = if page > 0 { page as usize } else { 4096 };
    let base = bytes.as_ptr() as usize;
    let start = (base + from.min(bytes.len())) & !(page - 1);
    let end = base + to.min(bytes.len());
    (end > start && start >= base & !(page - 1)).then_some((start, end))
}

/// Map the pages of `bytes[from..to]` in one call (MADV_POPULATE_READ,
/// Linux 5.14 and later) rather than one page fault per few pages as the
/// walk reaches them. A hint: where it fails nothing changes but speed.
pub(crate) fn populate(bytes: &[u8], from: usize, to: usize) {
    #[cfg(target_os = "linux")]
    if let Some((start, end)) = page_range(bytes, from, to) {
        // SAFETY: the range lies within pages of `bytes`, which stays
        // borrowed (mapped) for the call; MADV_POPULATE_READ only maps
        // pages in and fails with EFAULT where a read would fault.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_READ);
        }
    }
}

/// Unmap the pages wholly inside `bytes[from..to]` from this process
/// (MADV_DONTNEED). `bytes` is a read-only file mapping: the pages stay in
/// the page cache and a later read maps them again with the same bytes,
/// so this only moves the unmapping's work to the calling thread.
pub(crate) fn unmap(bytes: &[u8], from: usize, to: usize) {
    #[cfg(target_os = "linux")]
    if let Some((start, end)) = page_range(bytes, from, to) {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        // Whole pages only: the first page may hold bytes before `from`.
        let start = if start < bytes.as_ptr() as usize + from {
            start + page
        } else {
            start
        };
        let end = end & !(page - 1);
        if end > start {
            // SAFETY: the range lies within pages of `bytes`' read-only
            // file mapping, which stays mapped; DONTNEED drops this
            // process's page table entries only (the file's pages are
            // read again on access).
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
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

/// A device record's header fields, read once from the mapped file
/// (`rec_at`), and its payload: what the record loop of the accounting
/// and the latencies hands each of them.
#[derive(Debug, Clone, Copy)]
pub struct Rec<'a> {
    pub offset: u64,
    pub opcode: u16,
    pub source: u32,
    pub seq: u64,
    pub ts: u64,
    /// Exactly the header's length.
    pub payload: &'a [u8],
    /// Bytes the record occupies in the file (header, payload, padding).
    pub size: u64,
}

impl<'a> Rec<'a> {
    /// The fields of a device record already parsed.
    #[inline(always)]
    pub fn of(item: &Item<'a>) -> Self {
        Self {
            offset: item.offset,
            opcode: item.opcode(),
            source: item.source(),
            seq: item.seq(),
            ts: item.timestamp_ns(),
            payload: item.payload,
            size: item.size(),
        }
    }
}

/// The device record at `pos` as `record_at` finds it (complete, not a
/// marker, not PAD, length in bounds), its header's fields read straight
/// from the bytes without copying the header; None for anything else.
#[inline(always)]
pub(crate) fn rec_at(bytes: &[u8], pos: usize) -> Option<Rec<'_>> {
    const HDR: usize = HMB_RECORD_HDR_SIZE as usize;
    // Two comparisons in all (the header fits, the record fits) instead of
    // the slicing's five (stats' thirteenth pass).
    let avail = bytes.len().checked_sub(pos)?;
    if avail < HDR {
        return None;
    }
    // SAFETY: `pos + HDR <= bytes.len()` (above); `[u8; N]` has alignment 1.
    let h: &[u8; HDR] = unsafe { &*bytes.as_ptr().add(pos).cast::<[u8; HDR]>() };
    let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let u64_at = |i: usize| {
        u64::from_le_bytes([
            h[i],
            h[i + 1],
            h[i + 2],
            h[i + 3],
            h[i + 4],
            h[i + 5],
            h[i + 6],
            h[i + 7],
        ])
    };
    let length = u32_at(0);
    if u16_at(6) & (HMB_RECORD_FLAG_PAD | HMB_RECORD_FLAG_MARKER) != 0 || length > HMB_RECORD_MAX_PAYLOAD {
        return None;
    }
    let size = align_record(length) as usize;
    if avail < size {
        return None;
    }
    // SAFETY: `HDR + length <= size` (`align_record` rounds up) and
    // `pos + size <= bytes.len()` (above).
    let payload = unsafe { std::slice::from_raw_parts(bytes.as_ptr().add(pos + HDR), length as usize) };
    Some(Rec {
        offset: pos as u64,
        opcode: u16_at(4),
        source: u32_at(24),
        seq: u64_at(8),
        ts: u64_at(16),
        payload,
        size: size as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mapped file large enough for the pager (`walk_paged`) hands out
    /// the items one walk of the same bytes does, and a walk that stops
    /// early stops the pager too.
    #[test]
    fn paged_walk_reads_what_the_plain_walk_reads() {
        let mut bytes = FileHeader::new(1, 0, 1 << 16, 3).encode().to_vec();
        let mut seq = 0u64;
        while bytes.len() < PAGER_MIN_BYTES + 3 * PAGER_AHEAD {
            let len = (seq % 57) as u32;
            let start = bytes.len();
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&(0x0101u16 + (seq % 5) as u16).to_le_bytes());
            bytes.extend_from_slice(&0u16.to_le_bytes());
            bytes.extend_from_slice(&seq.to_le_bytes());
            bytes.extend_from_slice(&(1000 + 7 * seq).to_le_bytes());
            bytes.extend_from_slice(&((seq % 3) as u32).to_le_bytes());
            bytes.extend_from_slice(&0u32.to_le_bytes());
            assert_eq!(bytes.len() - start, HMB_RECORD_HDR_SIZE as usize);
            bytes.extend((0..len).map(|k| (k as u64 ^ seq) as u8));
            bytes.resize(start + align_record(len) as usize, 0);
            seq += 1;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        std::fs::write(&path, &bytes).unwrap();
        let digest = |items: &mut Vec<u64>, item: &Item<'_>| {
            let sum = item
                .payload
                .iter()
                .fold(item.offset ^ item.seq(), |h, &b| h.rotate_left(5) ^ b as u64);
            items.push(sum);
        };
        let mut want = Vec::new();
        let first = FileHeader::parse(&bytes).unwrap().header_size as u64;
        let plain = walk_bytes(&bytes, first, bytes.len() as u64, &Progress::hidden(), |item| {
            digest(&mut want, item);
            ControlFlow::Continue(())
        });
        for _ in 0..2 {
            let mut input = TraceInput::open(path.to_str().unwrap()).unwrap();
            let mut got = Vec::new();
            let end = input.walk(&Progress::hidden(), |item| {
                digest(&mut got, item);
                ControlFlow::Continue(())
            });
            assert_eq!(
                (end.offset, end.items, end.error.is_none()),
                (plain.offset, plain.items, true)
            );
            assert!(got == want, "the paged walk read other items");
        }
        assert_eq!(want.len() as u64, seq);
        // Stopping early ends the pager (the scope joins it).
        let mut input = TraceInput::open(path.to_str().unwrap()).unwrap();
        let mut n = 0;
        let end = input.walk(&Progress::hidden(), |_| {
            n += 1;
            if n == 100_000 {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        });
        assert!(end.stopped && end.items == 100_000);
    }
}
