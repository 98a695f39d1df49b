//! Readers yielding borrowed items: `TraceReader` streams from any `Read`
//! through a fixed buffer (bounded memory on any file size), `SliceReader`
//! walks bytes already in memory (the mmap fast path).

use std::io::{ErrorKind, Read};

use hmb_trace_abi::HMB_RECORD_MAX_SIZE;

use crate::error::FileError;
use crate::header::{FileHeader, FILE_HEADER_SIZE};
use crate::item::{parse_item, truncated, Item, ItemParse};

/// Default buffer of the streaming reader: large enough to amortise read
/// calls, small enough to be irrelevant next to the file.
pub const DEFAULT_BUFFER: usize = 1 << 20;

/// Streaming reader over any `Read`. Items borrow the internal buffer, so it
/// is a lending iterator: call [`TraceReader::next_item`] in a loop.
/// After an error (including a torn tail) it yields nothing more.
pub struct TraceReader<R> {
    inner: R,
    header: FileHeader,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// File offset of `buf[start]`.
    offset: u64,
    eof: bool,
    done: bool,
}

impl<R: Read> TraceReader<R> {
    pub fn new(inner: R) -> Result<Self, FileError> {
        Self::with_capacity(inner, DEFAULT_BUFFER)
    }

    /// `capacity` is raised to the largest item (4096 bytes) if smaller.
    pub fn with_capacity(mut inner: R, capacity: usize) -> Result<Self, FileError> {
        let mut head = [0u8; FILE_HEADER_SIZE];
        let have = read_full(&mut inner, &mut head)?;
        let header = FileHeader::parse(&head[..have])?;
        // Skip header bytes a newer minor added after the first 64.
        let extra = header.header_size as u64 - FILE_HEADER_SIZE as u64;
        if extra > 0 {
            let skipped = std::io::copy(&mut (&mut inner).take(extra), &mut std::io::sink())?;
            if skipped < extra {
                return Err(FileError::ShortHeader {
                    have: FILE_HEADER_SIZE as u64 + skipped,
                    need: header.header_size as u64,
                });
            }
        }
        Ok(Self {
            inner,
            header,
            buf: vec![0; capacity.max(HMB_RECORD_MAX_SIZE as usize)],
            start: 0,
            end: 0,
            offset: header.header_size as u64,
            eof: false,
            done: false,
        })
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// File offset of the next item.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The next item, `Ok(None)` at a clean end of file, or an error; a torn
    /// last item is `Err(FileError::Truncated { offset, .. })`.
    #[inline]
    pub fn next_item(&mut self) -> Result<Option<Item<'_>>, FileError> {
        if self.done {
            return Ok(None);
        }
        let result = self.advance();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        let (start, size) = match result {
            Ok(Some(span)) => span,
            Ok(None) => return Ok(None),
            Err(e) => return Err(e),
        };
        let offset = self.offset;
        self.start += size;
        self.offset += size as u64;
        match parse_item(&self.buf[start..start + size], offset) {
            Ok(ItemParse::Item(item)) => Ok(Some(item)),
            // advance() validated this span already.
            Ok(ItemParse::NeedMore { need }) => Err(truncated(offset, size, need)),
            Err(e) => Err(e),
        }
    }

    /// Find the span of the next complete item in the buffer, refilling as
    /// needed. Returns (start index, size).
    fn advance(&mut self) -> Result<Option<(usize, usize)>, FileError> {
        loop {
            let avail = &self.buf[self.start..self.end];
            if avail.is_empty() && self.eof {
                return Ok(None);
            }
            match parse_item(avail, self.offset)? {
                ItemParse::Item(item) => return Ok(Some((self.start, item.size() as usize))),
                ItemParse::NeedMore { need } => {
                    if self.eof {
                        return Err(truncated(self.offset, avail.len(), need));
                    }
                    self.refill()?;
                }
            }
        }
    }

    fn refill(&mut self) -> Result<(), FileError> {
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        let n = read_full(&mut self.inner, &mut self.buf[self.end..])?;
        if n == 0 || self.end + n < self.buf.len() {
            self.eof = true;
        }
        self.end += n;
        Ok(())
    }
}

/// Read until `buf` is full or end of input; returns bytes read.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<usize, FileError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// Reader over a whole file in memory (or mapped). Items borrow the slice,
/// so it is a plain `Iterator`; it stops after the first error.
pub struct SliceReader<'a> {
    bytes: &'a [u8],
    header: FileHeader,
    pos: usize,
    done: bool,
}

impl<'a> SliceReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<Self, FileError> {
        let header = FileHeader::parse(bytes)?;
        let start = header.header_size as usize;
        if bytes.len() < start {
            return Err(FileError::ShortHeader {
                have: bytes.len() as u64,
                need: start as u64,
            });
        }
        Ok(Self {
            bytes,
            header,
            pos: start,
            done: false,
        })
    }

    /// For bytes whose header was already validated (and which are at
    /// least `header_size` long).
    pub(crate) fn with_header(bytes: &'a [u8], header: FileHeader) -> Self {
        let pos = (header.header_size as usize).min(bytes.len());
        Self {
            bytes,
            header,
            pos,
            done: false,
        }
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// File offset of the next item.
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }
}

impl<'a> Iterator for SliceReader<'a> {
    type Item = Result<Item<'a>, FileError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.bytes.len() {
            return None;
        }
        let avail = &self.bytes[self.pos..];
        let offset = self.pos as u64;
        match parse_item(avail, offset) {
            Ok(ItemParse::Item(item)) => {
                self.pos += item.size() as usize;
                Some(Ok(item))
            }
            Ok(ItemParse::NeedMore { need }) => {
                self.done = true;
                Some(Err(truncated(offset, avail.len(), need)))
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
