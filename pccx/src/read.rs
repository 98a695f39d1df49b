//! Reading .pccx files: the fixed 16-byte preamble, the bounded JSON header,
//! and the payload, either copied from any `Read` or memory-mapped.

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::Path;

use memmap2::Mmap;

use crate::bincode_payload::{detect_layout, BincodeLayout, NpuTrace};
use crate::checksum::fnv1a_64;
use crate::error::PccxError;
use crate::flatbuf::FlatEvents;
use crate::header::{Encoding, PccxHeader};
use crate::{MAGIC, MAJOR_VERSION, MINOR_VERSION};

pub const PREAMBLE_SIZE: usize = 16;

/// The fixed bytes before the JSON header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub major: u8,
    pub minor: u8,
    pub reserved: [u8; 2],
    pub header_len: u64,
}

/// Limits and strictness of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOptions {
    /// Turn warnings (checksum mismatch, non-zero reserved bytes, unknown
    /// payload encoding) into errors.
    pub strict: bool,
    /// Largest JSON header accepted, checked before allocating it.
    pub max_header_len: u64,
    /// Largest payload accepted, checked before allocating or mapping it.
    pub max_payload_len: u64,
    /// Hash the payload and compare with `checksum_fnv64` while reading.
    pub verify_checksum: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            strict: false,
            max_header_len: 16 << 20,
            max_payload_len: 1 << 40,
            verify_checksum: true,
        }
    }
}

/// Outcome of the checksum comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumStatus {
    /// The header has no checksum (null or missing).
    Absent,
    /// Not computed (`verify_checksum` was false).
    NotChecked,
    Match(u64),
    Mismatch {
        expected: u64,
        actual: u64,
    },
}

/// What a lenient read noticed without failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub checksum: ChecksumStatus,
    pub warnings: Vec<String>,
}

/// Parse and check the 16-byte preamble.
pub fn parse_preamble(b: &[u8], opts: &ReadOptions) -> Result<Preamble, PccxError> {
    if b.len() < PREAMBLE_SIZE {
        return Err(PccxError::Truncated {
            what: "preamble",
            need: PREAMBLE_SIZE as u64,
            have: b.len() as u64,
        });
    }
    let magic = [b[0], b[1], b[2], b[3]];
    if magic != MAGIC {
        return Err(PccxError::BadMagic { found: magic });
    }
    if b[4] != MAJOR_VERSION {
        return Err(PccxError::UnsupportedMajor {
            found: b[4],
            supported: MAJOR_VERSION,
        });
    }
    let reserved = [b[6], b[7]];
    if opts.strict && reserved != [0, 0] {
        return Err(PccxError::ReservedNotZero { found: reserved });
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&b[8..16]);
    let header_len = u64::from_le_bytes(len);
    if header_len > opts.max_header_len {
        return Err(PccxError::HeaderTooLong {
            len: header_len,
            max: opts.max_header_len,
        });
    }
    Ok(Preamble {
        major: b[4],
        minor: b[5],
        reserved,
        header_len,
    })
}

/// Parse the JSON header bytes: UTF-8, a JSON object, the pccx-lab fields.
pub fn parse_header_json(bytes: &[u8]) -> Result<PccxHeader, PccxError> {
    let text = std::str::from_utf8(bytes).map_err(|e| PccxError::HeaderNotUtf8 {
        valid_up_to: e.valid_up_to(),
    })?;
    if !text.trim_start().starts_with('{') {
        return Err(PccxError::HeaderNotObject);
    }
    serde_json::from_str(text).map_err(|e| PccxError::HeaderJson(e.to_string()))
}

fn check_payload_len(header: &PccxHeader, opts: &ReadOptions) -> Result<u64, PccxError> {
    let len = header.payload.byte_length;
    if len > opts.max_payload_len {
        return Err(PccxError::PayloadTooLong {
            len,
            max: opts.max_payload_len,
        });
    }
    Ok(len)
}

/// Checks shared by both readers once the payload is in reach.
fn verify(pre: &Preamble, header: &PccxHeader, payload: &[u8], opts: &ReadOptions) -> Result<Verified, PccxError> {
    let mut warnings = Vec::new();
    if pre.reserved != [0, 0] {
        warnings.push(format!("reserved bytes are {:02x?}, should be zero", pre.reserved));
    }
    if pre.minor > MINOR_VERSION {
        warnings.push(format!(
            "minor version {} is newer than {MINOR_VERSION}; unknown fields ignored",
            pre.minor
        ));
    }
    if header.format_minor != pre.minor {
        warnings.push(format!(
            "JSON format_minor {} differs from the preamble's minor version {}",
            header.format_minor, pre.minor
        ));
    }
    if header.payload.encoding().is_none() {
        if opts.strict {
            return Err(PccxError::UnknownEncoding(header.payload.encoding.clone()));
        }
        warnings.push(format!(
            "unknown payload encoding {:?}; payload kept as opaque bytes",
            header.payload.encoding
        ));
    }
    let checksum = match header.payload.checksum_fnv64 {
        None => ChecksumStatus::Absent,
        Some(_) if !opts.verify_checksum => ChecksumStatus::NotChecked,
        Some(expected) => {
            let actual = fnv1a_64(payload);
            if actual == expected {
                ChecksumStatus::Match(actual)
            } else if opts.strict {
                return Err(PccxError::ChecksumMismatch { expected, actual });
            } else {
                warnings.push(PccxError::ChecksumMismatch { expected, actual }.to_string());
                ChecksumStatus::Mismatch { expected, actual }
            }
        }
    };
    Ok(Verified { checksum, warnings })
}

/// A whole .pccx file in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct PccxFile {
    pub preamble: Preamble,
    pub header: PccxHeader,
    pub payload: Vec<u8>,
    pub verified: Verified,
}

impl PccxFile {
    /// Read from any reader. Allocation follows the bytes actually read, so
    /// a header claiming more than the input holds fails without a huge
    /// allocation. Bytes after the payload are an error.
    pub fn read_from<R: Read>(mut r: R, opts: &ReadOptions) -> Result<Self, PccxError> {
        let mut pre = [0u8; PREAMBLE_SIZE];
        let got = read_up_to(&mut r, &mut pre)?;
        let preamble = parse_preamble(&pre[..got], opts)?;
        let json = read_exact_bounded(&mut r, preamble.header_len, "JSON header")?;
        let header = parse_header_json(&json)?;
        let len = check_payload_len(&header, opts)?;
        let payload = read_exact_bounded(&mut r, len, "payload")?;
        let mut extra = [0u8; 1];
        if read_up_to(&mut r, &mut extra)? > 0 {
            let more = std::io::copy(&mut r, &mut std::io::sink())?;
            return Err(PccxError::TrailingBytes {
                count: more + 1,
                declared: len,
            });
        }
        let verified = verify(&preamble, &header, &payload, opts)?;
        Ok(Self {
            preamble,
            header,
            payload,
            verified,
        })
    }

    pub fn from_bytes(bytes: &[u8], opts: &ReadOptions) -> Result<Self, PccxError> {
        Self::read_from(bytes, opts)
    }
}

fn read_up_to<R: Read>(r: &mut R, buf: &mut [u8]) -> Result<usize, PccxError> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

fn read_exact_bounded<R: Read>(r: &mut R, len: u64, what: &'static str) -> Result<Vec<u8>, PccxError> {
    let mut out = Vec::new();
    let got = r.take(len).read_to_end(&mut out)? as u64;
    if got < len {
        return Err(PccxError::Truncated {
            what,
            need: len,
            have: got,
        });
    }
    Ok(out)
}

/// A .pccx file memory-mapped: the payload is borrowed, never copied.
pub struct MappedPccx {
    map: Option<Mmap>,
    pub preamble: Preamble,
    pub header: PccxHeader,
    payload: Range<usize>,
    pub verified: Verified,
}

impl MappedPccx {
    pub fn open(path: &Path, opts: &ReadOptions) -> Result<Self, PccxError> {
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        let map = if file_len == 0 {
            None
        } else {
            // SAFETY: read-only map; the file must not be truncated meanwhile.
            Some(unsafe { Mmap::map(&file)? })
        };
        let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
        let preamble = parse_preamble(bytes, opts)?;
        let json_end = (PREAMBLE_SIZE as u64).saturating_add(preamble.header_len);
        if json_end > file_len {
            return Err(PccxError::Truncated {
                what: "JSON header",
                need: preamble.header_len,
                have: file_len - PREAMBLE_SIZE as u64,
            });
        }
        let header = parse_header_json(&bytes[PREAMBLE_SIZE..json_end as usize])?;
        let len = check_payload_len(&header, opts)?;
        let have = file_len - json_end;
        if len > have {
            return Err(PccxError::Truncated {
                what: "payload",
                need: len,
                have,
            });
        }
        if have > len {
            return Err(PccxError::TrailingBytes {
                count: have - len,
                declared: len,
            });
        }
        let payload = json_end as usize..file_len as usize;
        let verified = verify(&preamble, &header, &bytes[payload.clone()], opts)?;
        Ok(Self {
            map,
            preamble,
            header,
            payload,
            verified,
        })
    }

    pub fn payload(&self) -> &[u8] {
        match &self.map {
            Some(m) => &m[self.payload.clone()],
            None => &[],
        }
    }
}

/// Payload views shared by the in-memory and mapped files.
pub trait PayloadView {
    fn header(&self) -> &PccxHeader;
    fn payload_bytes(&self) -> &[u8];

    /// The flatbuf events, zero-copy. Errors if the encoding is not flatbuf.
    fn flat_events(&self) -> Result<FlatEvents<'_>, PccxError> {
        match self.header().payload.encoding() {
            Some(Encoding::Flatbuf) => FlatEvents::new(self.payload_bytes()),
            _ => Err(PccxError::UnknownEncoding(format!(
                "{} (expected flatbuf)",
                self.header().payload.encoding
            ))),
        }
    }

    /// The bincode trace, decoded (allocates the events).
    fn npu_trace(&self) -> Result<(NpuTrace, BincodeLayout), PccxError> {
        match self.header().payload.encoding() {
            Some(Encoding::Bincode) => NpuTrace::decode(self.payload_bytes()),
            _ => Err(PccxError::UnknownEncoding(format!(
                "{} (expected bincode)",
                self.header().payload.encoding
            ))),
        }
    }

    /// Check that the payload decodes under its declared encoding; returns
    /// the number of events (None for raw and unknown encodings).
    fn check_payload(&self) -> Result<Option<u64>, PccxError> {
        match self.header().payload.encoding() {
            Some(Encoding::Flatbuf) => Ok(Some(self.flat_events()?.len() as u64)),
            Some(Encoding::Bincode) => {
                let bytes = self.payload_bytes();
                let layout = detect_layout(bytes)?;
                let events = crate::bincode_payload::BincodeEvents::new(bytes, layout)?;
                Ok(Some(events.remaining()))
            }
            _ => Ok(None),
        }
    }
}

impl PayloadView for PccxFile {
    fn header(&self) -> &PccxHeader {
        &self.header
    }
    fn payload_bytes(&self) -> &[u8] {
        &self.payload
    }
}

impl PayloadView for MappedPccx {
    fn header(&self) -> &PccxHeader {
        &self.header
    }
    fn payload_bytes(&self) -> &[u8] {
        self.payload()
    }
}
