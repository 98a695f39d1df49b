//! A trace carried in an NVMe Telemetry log (`nvme telemetry-log` output):
//! the 512-byte telemetry header, then data areas holding a trace.bin
//! stream padded with zeros to whole 512-byte blocks. The header's Reason
//! Identifier (bytes 384..512, vendor-specific) says how long the stream is
//! and the ring's state at the snapshot. docs/trace-file.md, "Inside a
//! Telemetry log", is the specification; emu-device's controller writes it,
//! the analyzer reads it.

pub use crate::error::TelemetryError;
use crate::header::FILE_MAGIC;

/// Telemetry data comes in blocks of 512 bytes; block 0 is the header.
pub const TELEMETRY_BLOCK: usize = 512;
/// Log identifiers: Host-Initiated and Controller-Initiated.
pub const LID_TELEMETRY_HOST: u8 = 0x07;
pub const LID_TELEMETRY_CONTROLLER: u8 = 0x08;
/// Where the Reason Identifier starts in the header, and its size.
pub const REASON_OFFSET: usize = 384;
pub const REASON_SIZE: usize = 128;
/// The Reason Identifier of an hmb-trace snapshot starts with this.
pub const REASON_MAGIC: &[u8; 4] = b"HMBT";
/// The Reason Identifier layout version this build writes and reads.
pub const REASON_VERSION: u16 = 1;

/// The ring's state when the snapshot was taken, and the stream's length.
/// Layout: magic "HMBT", u16 version, u16 0, then u64 each at 8 epoch,
/// 16 head, 24 tail, 32 dropped, 40 records, 48 stream_bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TelemetryReason {
    /// The ring epoch being produced into (0: no ring adopted).
    pub epoch: u64,
    pub head: u64,
    pub tail: u64,
    /// Records the ring of `epoch` had no room for.
    pub dropped: u64,
    /// Device records in the stream.
    pub records: u64,
    /// Bytes of the trace.bin stream at the start of data area 1.
    pub stream_bytes: u64,
}

impl TelemetryReason {
    pub fn encode(&self) -> [u8; REASON_SIZE] {
        let mut r = [0u8; REASON_SIZE];
        r[0..4].copy_from_slice(REASON_MAGIC);
        r[4..6].copy_from_slice(&REASON_VERSION.to_le_bytes());
        let words = [
            self.epoch,
            self.head,
            self.tail,
            self.dropped,
            self.records,
            self.stream_bytes,
        ];
        for (i, v) in words.into_iter().enumerate() {
            r[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_le_bytes());
        }
        r
    }

    /// None when the bytes are not an hmb-trace reason (another vendor's
    /// telemetry, or a newer layout).
    pub fn decode(r: &[u8]) -> Option<Self> {
        if r.len() < 56 || &r[0..4] != REASON_MAGIC || r[4..6] != REASON_VERSION.to_le_bytes() {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(r[8 + 8 * i..16 + 8 * i].try_into().expect("8 bytes"));
        Some(TelemetryReason {
            epoch: w(0),
            head: w(1),
            tail: w(2),
            dropped: w(3),
            records: w(4),
            stream_bytes: w(5),
        })
    }
}

/// A parsed telemetry log holding an hmb-trace snapshot.
#[derive(Debug, Clone, Copy)]
pub struct TelemetryLog<'a> {
    pub lid: u8,
    /// Last block of data areas 1, 2 and 3.
    pub last_blocks: [u16; 3],
    pub host_generation: u8,
    pub controller_available: bool,
    pub controller_generation: u8,
    pub reason: TelemetryReason,
    /// The trace.bin stream (without the block padding).
    pub stream: &'a [u8],
}

/// Whether `bytes` look like a telemetry log carrying a trace.bin stream
/// (cheap: for choosing a reader).
pub fn is_telemetry_trace(bytes: &[u8]) -> bool {
    bytes.len() >= TELEMETRY_BLOCK + FILE_MAGIC.len()
        && matches!(bytes[0], LID_TELEMETRY_HOST | LID_TELEMETRY_CONTROLLER)
        && bytes[TELEMETRY_BLOCK..TELEMETRY_BLOCK + FILE_MAGIC.len()] == FILE_MAGIC[..]
}

impl<'a> TelemetryLog<'a> {
    /// The generation number of the data this log holds: the Host-Initiated
    /// one (byte 381) in a 07h log, the Controller-Initiated one (byte 383)
    /// in an 08h log (whose byte 381 is reserved).
    pub fn generation(&self) -> u8 {
        match self.lid {
            LID_TELEMETRY_CONTROLLER => self.controller_generation,
            _ => self.host_generation,
        }
    }

    pub fn parse(bytes: &'a [u8]) -> Result<Self, TelemetryError> {
        if bytes.len() < TELEMETRY_BLOCK {
            return Err(TelemetryError::Short(bytes.len()));
        }
        let lid = bytes[0];
        if !matches!(lid, LID_TELEMETRY_HOST | LID_TELEMETRY_CONTROLLER) {
            return Err(TelemetryError::NotTelemetry(lid));
        }
        let le16 = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let last_blocks = [le16(8), le16(10), le16(12)];
        let reason = TelemetryReason::decode(&bytes[REASON_OFFSET..REASON_OFFSET + REASON_SIZE])
            .ok_or(TelemetryError::ForeignReason)?;
        let last = last_blocks.iter().copied().max().unwrap_or(0);
        let need = (u64::from(last) + 1) * TELEMETRY_BLOCK as u64;
        if (bytes.len() as u64) < need {
            return Err(TelemetryError::Truncated {
                last_block: last,
                need,
                have: bytes.len() as u64,
            });
        }
        let room = need - TELEMETRY_BLOCK as u64;
        if reason.stream_bytes > room {
            return Err(TelemetryError::StreamTooLong {
                stream: reason.stream_bytes,
                room,
            });
        }
        let start = TELEMETRY_BLOCK;
        Ok(TelemetryLog {
            lid,
            last_blocks,
            host_generation: bytes[381],
            controller_available: bytes[382] != 0,
            controller_generation: bytes[383],
            reason,
            stream: &bytes[start..start + reason.stream_bytes as usize],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(stream: &[u8], last_block: u16, reason: TelemetryReason) -> Vec<u8> {
        let mut b = vec![0u8; (usize::from(last_block) + 1) * 512];
        b[0] = 7;
        for at in [8, 10, 12] {
            b[at..at + 2].copy_from_slice(&last_block.to_le_bytes());
        }
        b[381] = 3;
        b[384..512].copy_from_slice(&reason.encode());
        b[512..512 + stream.len()].copy_from_slice(stream);
        b
    }

    #[test]
    fn round_trip_and_hostile_headers() {
        let mut stream = FILE_MAGIC.to_vec();
        stream.extend([1u8; 100]);
        let reason = TelemetryReason {
            epoch: 2,
            head: 10,
            tail: 5,
            dropped: 1,
            records: 4,
            stream_bytes: stream.len() as u64,
        };
        let b = log(&stream, 1, reason);
        assert!(is_telemetry_trace(&b));
        let t = TelemetryLog::parse(&b).unwrap();
        assert_eq!((t.lid, t.host_generation, t.last_blocks), (7, 3, [1, 1, 1]));
        assert_eq!(t.reason, reason);
        assert_eq!(t.stream, &stream[..]);

        assert_eq!(t.generation(), 3, "07h: the host-initiated generation");
        let mut ctrl = b.clone();
        (ctrl[0], ctrl[381], ctrl[382], ctrl[383]) = (8, 0, 1, 5);
        let c = TelemetryLog::parse(&ctrl).unwrap();
        assert_eq!((c.lid, c.generation(), c.controller_available), (8, 5, true));

        assert_eq!(TelemetryLog::parse(&b[..100]).unwrap_err(), TelemetryError::Short(100));
        let mut other = b.clone();
        other[0] = 2;
        assert_eq!(
            TelemetryLog::parse(&other).unwrap_err(),
            TelemetryError::NotTelemetry(2)
        );
        let mut foreign = b.clone();
        foreign[384] = b'X';
        assert_eq!(
            TelemetryLog::parse(&foreign).unwrap_err(),
            TelemetryError::ForeignReason
        );
        let truncated = log(&stream, 4, reason);
        assert!(matches!(
            TelemetryLog::parse(&truncated[..1024]).unwrap_err(),
            TelemetryError::Truncated { last_block: 4, .. }
        ));
        let long = log(
            &stream,
            1,
            TelemetryReason {
                stream_bytes: 513,
                ..reason
            },
        );
        assert!(matches!(
            TelemetryLog::parse(&long).unwrap_err(),
            TelemetryError::StreamTooLong { stream: 513, room: 512 }
        ));
    }
}
