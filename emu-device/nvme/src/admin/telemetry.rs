//! Telemetry Host-Initiated log page (07h, NVMe 2.0 section 5.16.1.8): the standard
//! channel for device-internal data that an unmodified host reads
//! (`nvme telemetry-log`). The controller frames the log (the 512-byte header, data
//! areas 1-3, the generation number); what the data areas hold comes from the vendor
//! ([`VendorFeatures::telemetry`](crate::VendorFeatures::telemetry): the firmware trace).
//! docs/nvme-controller.md, "Telemetry".

/// Telemetry data is framed in blocks of 512 bytes; block 0 is the header.
pub(crate) const BLOCK: usize = 512;
/// Data Area 3 Last Block is 16 bits: the most blocks data areas 1-3 can hold after the
/// header (no Data Area 4: LPA bit 6 stays 0).
pub(crate) const MAX_DATA_BYTES: usize = (u16::MAX as usize) * BLOCK;

/// What the vendor hands the controller when the host asks for a new snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetryData {
    /// The data areas' contents (data areas 1, 2 and 3 all end with it: one area).
    pub data: Vec<u8>,
    /// The header's Reason Identifier: vendor-specific, 128 bytes.
    pub reason: [u8; 128],
}

impl Default for TelemetryData {
    fn default() -> Self {
        TelemetryData {
            data: Vec::new(),
            reason: [0; 128],
        }
    }
}

/// The Host-Initiated log as the host last created it: unchanged until the next create,
/// so a reader that re-reads the header at the end sees the same generation.
#[derive(Debug, Default)]
pub(crate) struct HostTelemetry {
    log: Vec<u8>,
    generation: u8,
}

impl HostTelemetry {
    /// A new snapshot: a higher generation number (modulo 256, as the spec's 8-bit field).
    pub(crate) fn create(&mut self, snapshot: TelemetryData, ieee: [u8; 3]) {
        self.generation = self.generation.wrapping_add(1);
        let mut data = snapshot.data;
        if data.len() > MAX_DATA_BYTES {
            // The newest data is at the end: keep it, as a ring would.
            data.drain(..data.len() - MAX_DATA_BYTES);
        }
        self.log = frame(&data, &snapshot.reason, ieee, self.generation);
    }

    /// The log as it stands (an empty header before the first create).
    pub(crate) fn log(&self, ieee: [u8; 3]) -> Vec<u8> {
        if self.log.is_empty() {
            return frame(&[], &[0; 128], ieee, self.generation);
        }
        self.log.clone()
    }
}

/// The header and the data, padded to whole blocks.
fn frame(data: &[u8], reason: &[u8; 128], ieee: [u8; 3], generation: u8) -> Vec<u8> {
    let blocks = data.len().div_ceil(BLOCK);
    let mut log = vec![0u8; BLOCK * (1 + blocks)];
    log[0] = LID_TELEMETRY_HOST;
    log[5..8].copy_from_slice(&ieee);
    // Last block of each data area, counted from the header (block 0). With no data,
    // every area is empty: last block 0.
    let last = blocks as u16;
    for at in [8, 10, 12] {
        log[at..at + 2].copy_from_slice(&last.to_le_bytes());
    }
    log[381] = generation; // Host-Initiated Data Generation Number
    log[382] = 0; // Controller-Initiated Data Available: none
    log[383] = 0; // Controller-Initiated Data Generation Number
    log[384..512].copy_from_slice(reason);
    log[BLOCK..BLOCK + data.len()].copy_from_slice(data);
    log
}

pub(crate) const LID_TELEMETRY_HOST: u8 = 0x07;
/// LSP bit 0 of log 07h: Create Telemetry Host-Initiated Data (CDW10 bit 8).
pub(crate) const LSP_CREATE: u32 = 1 << 8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_and_blocks() {
        let mut t = HostTelemetry::default();
        let mut reason = [0u8; 128];
        reason[0] = 0xAB;
        t.create(
            TelemetryData {
                data: vec![7u8; 1000],
                reason,
            },
            [1, 2, 3],
        );
        let log = t.log([1, 2, 3]);
        assert_eq!(log.len(), 512 * 3, "header + two blocks for 1000 bytes");
        assert_eq!(log[0], 0x07);
        assert_eq!(&log[5..8], &[1, 2, 3]);
        for at in [8, 10, 12] {
            assert_eq!(u16::from_le_bytes([log[at], log[at + 1]]), 2);
        }
        assert_eq!(log[381], 1);
        assert_eq!(log[384], 0xAB);
        assert!(log[512..1512].iter().all(|&b| b == 7));
        assert!(log[1512..].iter().all(|&b| b == 0), "padding is zero");
    }

    #[test]
    fn before_any_create_the_areas_are_empty() {
        let t = HostTelemetry::default();
        let log = t.log([0; 3]);
        assert_eq!(log.len(), 512);
        assert_eq!(&log[8..14], &[0; 6]);
        assert_eq!(log[381], 0);
    }

    #[test]
    fn generation_wraps_and_oversize_keeps_the_newest() {
        let mut t = HostTelemetry::default();
        for _ in 0..256 {
            t.create(TelemetryData::default(), [0; 3]);
        }
        assert_eq!(t.log([0; 3])[381], 0, "8-bit generation wraps");
        let mut data = vec![1u8; MAX_DATA_BYTES + 10];
        data[MAX_DATA_BYTES + 9] = 9;
        t.create(TelemetryData { data, reason: [0; 128] }, [0; 3]);
        let log = t.log([0; 3]);
        assert_eq!(log.len(), 512 + MAX_DATA_BYTES);
        assert_eq!(*log.last().unwrap(), 9);
        assert_eq!(u16::from_le_bytes([log[12], log[13]]), u16::MAX);
    }
}
