//! A plain writer of trace.bin files. The daemon may use it or write the
//! same bytes itself with `writev`; the analyzer's tests and tools use it.

use std::io::Write;

use hmb_trace_abi::{
    align_record, hmb_record_hdr, HMB_RECORD_FLAG_MARKER, HMB_RECORD_FLAG_PAD, HMB_RECORD_HDR_SIZE,
    HMB_RECORD_MAX_PAYLOAD,
};
use zerocopy::IntoBytes;

use crate::error::FileError;
use crate::header::{FileHeader, FILE_HEADER_SIZE};
use crate::item::{parse_item, ItemParse};
use crate::marker::Marker;

const ZEROS: [u8; 8] = [0; 8];

pub struct TraceWriter<W> {
    inner: W,
    offset: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Start a new file: writes the 64-byte header.
    pub fn new(mut inner: W, header: &FileHeader) -> Result<Self, FileError> {
        inner.write_all(&header.encode())?;
        Ok(Self {
            inner,
            offset: FILE_HEADER_SIZE as u64,
        })
    }

    /// Continue a file that already holds `offset` valid bytes (after
    /// [`crate::recover`] and truncation); `inner` must be positioned there.
    pub fn append(inner: W, offset: u64) -> Self {
        Self { inner, offset }
    }

    /// Bytes written so far, header included: the offset of the next item.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Write a device record: header, payload, zero padding to 8.
    /// `hdr.length` must equal `payload.len()`; PAD and MARKER flags are
    /// refused (fillers are never copied, markers go through `write_marker`).
    pub fn write_record(&mut self, hdr: &hmb_record_hdr, payload: &[u8]) -> Result<(), FileError> {
        let length = hdr.length.get();
        let flags = hdr.flags.get();
        if length as usize != payload.len() || length > HMB_RECORD_MAX_PAYLOAD {
            return Err(FileError::LengthTooLarge {
                offset: self.offset,
                length: payload.len() as u32,
            });
        }
        if flags & (HMB_RECORD_FLAG_PAD | HMB_RECORD_FLAG_MARKER) != 0 {
            return Err(FileError::PadInFile {
                offset: self.offset,
                flags,
            });
        }
        let size = align_record(length) as usize;
        let pad = size - HMB_RECORD_HDR_SIZE as usize - payload.len();
        self.inner.write_all(hdr.as_bytes())?;
        self.inner.write_all(payload)?;
        self.inner.write_all(&ZEROS[..pad])?;
        self.offset += size as u64;
        Ok(())
    }

    /// Write one record exactly as its aligned bytes sat in the ring.
    pub fn write_ring_bytes(&mut self, bytes: &[u8]) -> Result<(), FileError> {
        match parse_item(bytes, self.offset)? {
            ItemParse::Item(item) if item.size() == bytes.len() as u64 && !item.is_marker() => {
                self.inner.write_all(bytes)?;
                self.offset += bytes.len() as u64;
                Ok(())
            }
            ItemParse::Item(item) if item.is_marker() => Err(FileError::PadInFile {
                offset: self.offset,
                flags: item.hdr.flags.get(),
            }),
            _ => Err(FileError::Truncated {
                offset: self.offset,
                have: bytes.len() as u64,
                need: bytes.len().max(HMB_RECORD_HDR_SIZE as usize) as u64,
            }),
        }
    }

    /// Copy an item read from another trace.bin (record or marker), with
    /// its header as it was and zero padding.
    pub fn write_item(&mut self, item: &crate::item::Item<'_>) -> Result<(), FileError> {
        let length = item.payload.len();
        if length != item.hdr.length.get() as usize || length > HMB_RECORD_MAX_PAYLOAD as usize {
            return Err(FileError::LengthTooLarge {
                offset: self.offset,
                length: length as u32,
            });
        }
        let size = align_record(length as u32) as usize;
        self.inner.write_all(item.hdr.as_bytes())?;
        self.inner.write_all(item.payload)?;
        self.inner
            .write_all(&ZEROS[..size - HMB_RECORD_HDR_SIZE as usize - length])?;
        self.offset += size as u64;
        Ok(())
    }

    pub fn write_marker(&mut self, marker: &Marker) -> Result<(), FileError> {
        let bytes = marker.encode();
        self.inner.write_all(&bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> Result<(), FileError> {
        self.inner.flush()?;
        Ok(())
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    pub fn into_inner(self) -> W {
        self.inner
    }
}
