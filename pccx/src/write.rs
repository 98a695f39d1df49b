//! Writing .pccx files: preamble (major 1, minor 1, zero reserved), the JSON
//! header with `byte_length` and `checksum_fnv64` filled from the payload,
//! then the payload.

use std::io::Write;

use crate::checksum::fnv1a_64;
use crate::error::PccxError;
use crate::header::PccxHeader;
use crate::read::PREAMBLE_SIZE;
use crate::{MAGIC, MAJOR_VERSION, MINOR_VERSION};

pub fn encode_preamble(header_len: u64) -> [u8; PREAMBLE_SIZE] {
    let mut b = [0u8; PREAMBLE_SIZE];
    b[..4].copy_from_slice(&MAGIC);
    b[4] = MAJOR_VERSION;
    b[5] = MINOR_VERSION;
    b[8..].copy_from_slice(&header_len.to_le_bytes());
    b
}

/// Write a complete file. `header.payload.byte_length`, `checksum_fnv64`
/// and `format_minor` are set from the payload and this crate's version;
/// the encoding is the caller's. Returns the header as written.
pub fn write_pccx<W: Write>(w: W, header: &PccxHeader, payload: &[u8]) -> Result<PccxHeader, PccxError> {
    // The in-memory payload is a source that yields exactly its bytes.
    write_pccx_streamed(w, header, payload.len() as u64, fnv1a_64(payload), payload)
}

/// Write a file whose payload is streamed from `payload` (e.g. a spill
/// file) instead of held in memory. `byte_length` and `checksum` must
/// describe exactly the bytes `payload` yields; a short source is an error.
pub fn write_pccx_streamed<W: Write, R: std::io::Read>(
    mut w: W,
    header: &PccxHeader,
    byte_length: u64,
    checksum: u64,
    payload: R,
) -> Result<PccxHeader, PccxError> {
    let mut header = header.clone();
    header.format_minor = MINOR_VERSION;
    header.payload.byte_length = byte_length;
    header.payload.checksum_fnv64 = Some(checksum);
    if !header.arch.peak_tops.is_finite() {
        return Err(PccxError::Write(format!(
            "peak_tops {} is not a finite number",
            header.arch.peak_tops
        )));
    }
    let json = serde_json::to_vec(&header).map_err(|e| PccxError::Write(e.to_string()))?;
    w.write_all(&encode_preamble(json.len() as u64))?;
    w.write_all(&json)?;
    let copied = std::io::copy(&mut payload.take(byte_length), &mut w)?;
    if copied != byte_length {
        return Err(PccxError::Write(format!(
            "payload source gave {copied} of {byte_length} bytes"
        )));
    }
    w.flush()?;
    Ok(header)
}
