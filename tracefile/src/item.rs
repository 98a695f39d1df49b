//! One item of a trace.bin: the ring record header, its payload, and where
//! it sits in the file. The parsing rule lives here once, shared by the
//! streaming reader, the mmap reader and recovery.

use hmb_trace_abi::{
    align_record, hmb_record_hdr, HMB_RECORD_FLAG_MARKER, HMB_RECORD_FLAG_PAD, HMB_RECORD_HDR_SIZE,
    HMB_RECORD_MAX_PAYLOAD,
};
use zerocopy::FromBytes;

use crate::error::FileError;
use crate::marker::Marker;

/// An item borrowed from the reader's buffer or the mapped file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item<'a> {
    /// Byte offset of the item in the file.
    pub offset: u64,
    pub hdr: hmb_record_hdr,
    /// Exactly `hdr.length` bytes; the alignment padding is not included.
    pub payload: &'a [u8],
}

/// What an item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemKind {
    /// A device record copied from the ring.
    Record,
    /// A daemon marker.
    Marker(Marker),
}

impl<'a> Item<'a> {
    #[inline]
    pub fn is_marker(&self) -> bool {
        self.hdr.flags.get() & HMB_RECORD_FLAG_MARKER != 0
    }

    /// Bytes the item occupies in the file (header, payload, padding to 8).
    #[inline]
    pub fn size(&self) -> u64 {
        align_record(self.hdr.length.get()) as u64
    }

    #[inline]
    pub fn seq(&self) -> u64 {
        self.hdr.seq.get()
    }
    #[inline]
    pub fn opcode(&self) -> u16 {
        self.hdr.opcode.get()
    }
    #[inline]
    pub fn timestamp_ns(&self) -> u64 {
        self.hdr.timestamp_ns.get()
    }
    #[inline]
    pub fn source(&self) -> u32 {
        self.hdr.source.get()
    }

    /// Classify the item, decoding a marker's payload.
    #[inline]
    pub fn kind(&self) -> Result<ItemKind, FileError> {
        if self.is_marker() {
            Marker::decode(self.offset, &self.hdr, self.payload).map(ItemKind::Marker)
        } else {
            Ok(ItemKind::Record)
        }
    }
}

/// Result of looking at the bytes available at an item boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemParse<'a> {
    /// A complete item.
    Item(Item<'a>),
    /// `need` bytes are required but fewer are available. At end of file
    /// this means the last item is torn.
    NeedMore { need: u64 },
}

/// Parse the item starting at `bytes[0]`, which is at file offset `offset`.
/// `bytes` may extend past the item. Markers are validated here too, so an
/// item handed out is always classifiable.
#[inline]
pub fn parse_item(bytes: &[u8], offset: u64) -> Result<ItemParse<'_>, FileError> {
    let hdr_size = HMB_RECORD_HDR_SIZE as usize;
    let Ok((hdr, rest)) = hmb_record_hdr::read_from_prefix(bytes) else {
        return Ok(ItemParse::NeedMore { need: hdr_size as u64 });
    };
    let length = hdr.length.get();
    let flags = hdr.flags.get();
    if flags & HMB_RECORD_FLAG_PAD != 0 {
        return Err(FileError::PadInFile { offset, flags });
    }
    if length > HMB_RECORD_MAX_PAYLOAD {
        return Err(FileError::LengthTooLarge { offset, length });
    }
    let size = align_record(length) as usize;
    if bytes.len() < size {
        return Ok(ItemParse::NeedMore { need: size as u64 });
    }
    let item = Item {
        offset,
        hdr,
        payload: &rest[..length as usize],
    };
    item.kind()?;
    Ok(ItemParse::Item(item))
}

/// Turn a `NeedMore` at end of input into the torn-tail error.
pub(crate) fn truncated(offset: u64, have: usize, need: u64) -> FileError {
    FileError::Truncated {
        offset,
        have: have as u64,
        need,
    }
}
