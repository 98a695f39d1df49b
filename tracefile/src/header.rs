//! The 64-byte file header. It holds no timestamp or host name, so the same
//! ring contents always give the same bytes (reproducible files).

use hmb_trace_abi::{ring_size_valid, HMB_RING_VERSION_MAJOR};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::error::FileError;

pub const FILE_MAGIC: [u8; 8] = *b"HMBTRACE";
pub const FORMAT_MAJOR: u16 = 1;
pub const FORMAT_MINOR: u16 = 0;
/// Size of the v1.0 header, and the smallest `header_size` a reader accepts.
pub const FILE_HEADER_SIZE: usize = 64;
/// A newer minor may grow the header; readers skip to `header_size`, which is
/// bounded so a corrupt value cannot make them read far.
pub const MAX_HEADER_SIZE: u32 = 4096;

/// On-disk layout of the header, little-endian.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable)]
pub struct file_hdr_raw {
    pub magic: [u8; 8],
    pub format_major: U16,
    pub format_minor: U16,
    pub header_size: U32,
    pub ring_abi_major: U16,
    pub ring_abi_minor: U16,
    pub flags: U32,
    pub ring_size: U64,
    pub first_epoch: U64,
    pub reserved1: [u8; 24],
}

const _: () = assert!(core::mem::size_of::<file_hdr_raw>() == FILE_HEADER_SIZE);

/// Header flag: the file was derived from another by removing records
/// (`hmb-trace-analyze filter`), so sequence gaps are not losses. The daemon
/// always writes 0.
pub const FILE_FLAG_FILTERED: u32 = 1 << 0;

/// The decoded file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    pub format_major: u16,
    pub format_minor: u16,
    /// Where the first item starts (64 for v1.0 files).
    pub header_size: u32,
    pub ring_abi_major: u16,
    pub ring_abi_minor: u16,
    /// Data-area size of the ring in the first epoch.
    pub ring_size: u64,
    /// Epoch of the ring when the file was started.
    pub first_epoch: u64,
    /// `FILE_FLAG_*` bits; unknown bits are ignored by readers.
    pub flags: u32,
}

impl FileHeader {
    /// A v1.0 header for a ring, as the daemon writes it.
    pub fn new(ring_abi_major: u16, ring_abi_minor: u16, ring_size: u64, first_epoch: u64) -> Self {
        Self {
            format_major: FORMAT_MAJOR,
            format_minor: FORMAT_MINOR,
            header_size: FILE_HEADER_SIZE as u32,
            ring_abi_major,
            ring_abi_minor,
            ring_size,
            first_epoch,
            flags: 0,
        }
    }

    pub fn is_filtered(&self) -> bool {
        self.flags & FILE_FLAG_FILTERED != 0
    }

    /// The 64 bytes to write at offset 0. Writers always emit a 64-byte
    /// header whatever `header_size` says about a file that was read.
    pub fn encode(&self) -> [u8; FILE_HEADER_SIZE] {
        let raw = file_hdr_raw {
            magic: FILE_MAGIC,
            format_major: self.format_major.into(),
            format_minor: self.format_minor.into(),
            header_size: (FILE_HEADER_SIZE as u32).into(),
            ring_abi_major: self.ring_abi_major.into(),
            ring_abi_minor: self.ring_abi_minor.into(),
            flags: self.flags.into(),
            ring_size: self.ring_size.into(),
            first_epoch: self.first_epoch.into(),
            reserved1: [0; 24],
        };
        let mut out = [0u8; FILE_HEADER_SIZE];
        out.copy_from_slice(raw.as_bytes());
        out
    }

    /// Parse and validate the first bytes of a file. `bytes` needs at least
    /// 64 bytes; the caller skips to `header_size` before the first item.
    /// Reserved bytes and unknown flag bits are ignored (a newer minor may use them).
    pub fn parse(bytes: &[u8]) -> Result<Self, FileError> {
        let (raw, _) = file_hdr_raw::read_from_prefix(bytes).map_err(|_| FileError::ShortHeader {
            have: bytes.len() as u64,
            need: FILE_HEADER_SIZE as u64,
        })?;
        if raw.magic != FILE_MAGIC {
            return Err(FileError::BadMagic { found: raw.magic });
        }
        let major = raw.format_major.get();
        if major != FORMAT_MAJOR {
            return Err(FileError::UnsupportedFormat {
                found: major,
                supported: FORMAT_MAJOR,
            });
        }
        let header_size = raw.header_size.get();
        if header_size < FILE_HEADER_SIZE as u32 || header_size > MAX_HEADER_SIZE || header_size % 8 != 0 {
            return Err(FileError::BadHeaderSize(header_size));
        }
        let abi_major = raw.ring_abi_major.get();
        if abi_major != HMB_RING_VERSION_MAJOR {
            return Err(FileError::UnsupportedRingAbi {
                found: abi_major,
                supported: HMB_RING_VERSION_MAJOR,
            });
        }
        let ring_size = raw.ring_size.get();
        if !ring_size_valid(ring_size) {
            return Err(FileError::BadRingSize(ring_size));
        }
        Ok(Self {
            format_major: major,
            format_minor: raw.format_minor.get(),
            header_size,
            ring_abi_major: abi_major,
            ring_abi_minor: raw.ring_abi_minor.get(),
            ring_size,
            first_epoch: raw.first_epoch.get(),
            flags: raw.flags.get(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FileHeader {
        FileHeader::new(1, 0, 1 << 24, 7)
    }

    #[test]
    fn encode_parse_round_trip_and_layout() {
        let bytes = sample().encode();
        assert_eq!(&bytes[0..8], b"HMBTRACE");
        assert_eq!(&bytes[8..10], &1u16.to_le_bytes());
        assert_eq!(&bytes[12..16], &64u32.to_le_bytes());
        assert_eq!(&bytes[24..32], &(1u64 << 24).to_le_bytes());
        assert_eq!(&bytes[32..40], &7u64.to_le_bytes());
        assert!(bytes[40..].iter().all(|&b| b == 0));
        assert_eq!(FileHeader::parse(&bytes).unwrap(), sample());
    }

    #[test]
    fn newer_minor_is_accepted_other_major_is_not() {
        let mut bytes = sample().encode();
        bytes[10] = 9;
        assert_eq!(FileHeader::parse(&bytes).unwrap().format_minor, 9);
        bytes[8] = 2;
        assert!(matches!(
            FileHeader::parse(&bytes),
            Err(FileError::UnsupportedFormat { found: 2, .. })
        ));
    }

    #[test]
    fn bad_fields_are_errors() {
        let good = sample().encode();
        let mut b = good;
        b[0] = b'X';
        assert!(matches!(FileHeader::parse(&b), Err(FileError::BadMagic { .. })));
        let mut b = good;
        b[12..16].copy_from_slice(&60u32.to_le_bytes());
        assert!(matches!(FileHeader::parse(&b), Err(FileError::BadHeaderSize(60))));
        let mut b = good;
        b[16] = 2;
        assert!(matches!(
            FileHeader::parse(&b),
            Err(FileError::UnsupportedRingAbi { found: 2, .. })
        ));
        let mut b = good;
        b[24..32].copy_from_slice(&12345u64.to_le_bytes());
        assert!(matches!(FileHeader::parse(&b), Err(FileError::BadRingSize(12345))));
        assert!(matches!(
            FileHeader::parse(&good[..63]),
            Err(FileError::ShortHeader { have: 63, .. })
        ));
    }
}
