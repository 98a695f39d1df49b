//! Telemetry Host-Initiated log page (07h, NVMe 2.0 section 5.16.1.8): the standard
//! channel for device-internal data that an unmodified host reads
//! (`nvme telemetry-log`). The controller frames the log (the 512-byte header, data
//! areas 1-3, the generation number); what the data areas hold comes from the vendor
//! ([`VendorFeatures::telemetry`](crate::VendorFeatures::telemetry): the firmware trace).
//! docs/nvme-controller.md, "Telemetry".

/// Telemetry data is framed in blocks of 512 bytes; block 0 is the header.
pub(crate) const BLOCK: usize = 512;
/// Data Area 3 Last Block is 16 bits: the most blocks data areas 1-3 can hold after the
/// header (no Data Area 4: LPA bit 6 stays 0). The vendor keeps its data within it
/// (hmb-nvme-trace bounds its history so that its stream fits).
pub const MAX_DATA_BYTES: usize = (u16::MAX as usize) * BLOCK;

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

/// Why the controller took no Controller-Initiated capture (log 08h).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CaptureRefused {
    #[error("the controller has no telemetry (its vendor features declare none)")]
    NoTelemetry,
    #[error(
        "controller-initiated capture {generation} is not released yet (a Get Log Page 08h with RAE = 0 \
         releases it): it is kept unchanged"
    )]
    NotReleased { generation: u8 },
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
        self.log = frame(LID_TELEMETRY_HOST, snapshot, ieee, self.generation);
    }

    /// The log as it stands (an empty header before the first create), with the
    /// Controller-Initiated fields (bytes 382, 383) of `ci` as they are now: the base
    /// specification makes them equal to those of log 08h at every read.
    pub(crate) fn log(&self, ieee: [u8; 3], ci: &ControllerTelemetry) -> Vec<u8> {
        let mut log = if self.log.is_empty() {
            frame(LID_TELEMETRY_HOST, TelemetryData::default(), ieee, self.generation)
        } else {
            self.log.clone()
        };
        ci.stamp(&mut log);
        log
    }

    /// Host-Initiated Data Generation Number of the last create (0: none yet).
    pub(crate) fn generation(&self) -> u8 {
        self.generation
    }

    /// Data Area 3 Last Block of the last create (0 before the first: no data).
    pub(crate) fn last_block(&self) -> u16 {
        last_block(&self.log)
    }
}

/// The Controller-Initiated log (08h): a snapshot the controller took on its own
/// (docs/nvme-controller.md, "Telemetry": on a trace ring going FROZEN and on Controller
/// Fatal Status). One capture at a time: while it is available (not yet released by a
/// read with RAE = 0) a new event does not replace it, so the host reads the capture it
/// was told about, unchanged, however many reads it takes.
#[derive(Debug, Default)]
pub(crate) struct ControllerTelemetry {
    log: Vec<u8>,
    /// Controller-Initiated Data Generation Number: one per capture, 8 bits, wrapping.
    generation: u8,
    /// Controller-Initiated Data Available.
    available: bool,
    /// The Telemetry Log Changed notice of this capture is queued or was sent.
    announced: bool,
}

impl ControllerTelemetry {
    /// Controller-Initiated Data Available: a capture not yet released.
    pub(crate) fn available(&self) -> bool {
        self.available
    }

    /// Controller-Initiated Data Generation Number of the last capture (0: none yet).
    pub(crate) fn generation(&self) -> u8 {
        self.generation
    }

    /// Take `snapshot` as a new capture; false (nothing changes) while the last one is
    /// still available (the caller asks [`available`](Self::available) first, so as not
    /// to take a snapshot for nothing).
    pub(crate) fn capture(&mut self, snapshot: TelemetryData, ieee: [u8; 3]) -> bool {
        if self.available {
            return false;
        }
        self.generation = self.generation.wrapping_add(1);
        self.available = true;
        self.announced = false;
        // Byte 381 (Host-Initiated Data Generation Number) is reserved in log 08h: 0.
        self.log = frame(LID_TELEMETRY_CONTROLLER, snapshot, ieee, 0);
        true
    }

    /// A read with RAE = 0: the capture is released (Data Available 0, a new event may
    /// replace it); its data stays readable until then.
    pub(crate) fn release(&mut self) {
        self.available = false;
    }

    /// A capture whose notice is still owed to the host.
    pub(crate) fn owes_notice(&self) -> bool {
        self.available && !self.announced
    }

    pub(crate) fn set_announced(&mut self, announced: bool) {
        self.announced = announced;
    }

    /// The log as it stands: an empty header (generation 0) before the first capture.
    pub(crate) fn log(&self, ieee: [u8; 3]) -> Vec<u8> {
        let mut log = if self.log.is_empty() {
            frame(LID_TELEMETRY_CONTROLLER, TelemetryData::default(), ieee, 0)
        } else {
            self.log.clone()
        };
        self.stamp(&mut log);
        log
    }

    /// Data Area 3 Last Block of the capture (0 before the first: no data).
    pub(crate) fn last_block(&self) -> u16 {
        last_block(&self.log)
    }

    /// Bytes 382 (Data Available) and 383 (Generation Number) of either log's header.
    fn stamp(&self, log: &mut [u8]) {
        log[382] = u8::from(self.available);
        log[383] = self.generation;
    }
}

/// Data Area 3 Last Block of a framed log (bytes 12-13); 0 for none yet.
fn last_block(log: &[u8]) -> u16 {
    log.get(12..14).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]))
}

/// The header and the data, padded to whole blocks. Data over the data areas 1-3 limit
/// loses its oldest bytes (the newest data is at the end, as in a ring).
fn frame(lid: u8, snapshot: TelemetryData, ieee: [u8; 3], host_generation: u8) -> Vec<u8> {
    let mut data = snapshot.data;
    if data.len() > MAX_DATA_BYTES {
        data.drain(..data.len() - MAX_DATA_BYTES);
    }
    let blocks = data.len().div_ceil(BLOCK);
    let mut log = vec![0u8; BLOCK * (1 + blocks)];
    log[0] = lid;
    log[5..8].copy_from_slice(&ieee);
    // Last block of each data area, counted from the header (block 0). With no data,
    // every area is empty: last block 0.
    let last = blocks as u16;
    for at in [8, 10, 12] {
        log[at..at + 2].copy_from_slice(&last.to_le_bytes());
    }
    log[381] = host_generation;
    // 382 and 383 (Controller-Initiated Data Available and Generation Number) are
    // stamped at each read: ControllerTelemetry::stamp.
    log[384..512].copy_from_slice(&snapshot.reason);
    log[BLOCK..BLOCK + data.len()].copy_from_slice(&data);
    log
}

pub(crate) const LID_TELEMETRY_HOST: u8 = 0x07;
pub(crate) const LID_TELEMETRY_CONTROLLER: u8 = 0x08;
/// LSP bit 0 of log 07h: Create Telemetry Host-Initiated Data (CDW10 bit 8).
pub(crate) const LSP_CREATE: u32 = 1 << 8;
/// Asynchronous Event Configuration (Set Features 0Bh) bit 10: Telemetry Log Notices.
pub(crate) const AEC_TELEMETRY_NOTICES: u32 = 1 << 10;
/// The AER completion's DW0 for Telemetry Log Changed: type 2 (Notice), information 02h,
/// log page 08h.
pub(crate) const NOTICE_TELEMETRY_CHANGED: u32 = 2 | 0x02 << 8 | (LID_TELEMETRY_CONTROLLER as u32) << 16;

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
        let log = t.log([1, 2, 3], &ControllerTelemetry::default());
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
    fn a_controller_capture_is_kept_until_released_and_stamps_both_headers() {
        let mut c = ControllerTelemetry::default();
        let host = HostTelemetry::default();
        assert_eq!(&c.log([0; 3])[380..384], &[0, 0, 0, 0]);
        let data = |b: u8| TelemetryData {
            data: vec![b; 600],
            reason: [b; 128],
        };
        assert!(c.capture(data(5), [0; 3]));
        assert!(c.owes_notice());
        assert!(!c.capture(data(6), [0; 3]), "unreleased: kept");
        let log = c.log([0; 3]);
        assert_eq!((log[0], log[381], log[382], log[383], log[384]), (0x08, 0, 1, 1, 5));
        assert_eq!(log.len(), 3 * 512);
        assert_eq!(&host.log([0; 3], &c)[382..384], &[1, 1]);
        c.release();
        assert!(!c.owes_notice());
        assert_eq!(
            &c.log([0; 3])[382..385],
            &[0, 1, 5],
            "released: data kept, not available"
        );
        assert!(c.capture(data(6), [0; 3]));
        assert_eq!(&c.log([0; 3])[382..385], &[1, 2, 6]);
    }

    #[test]
    fn before_any_create_the_areas_are_empty() {
        let t = HostTelemetry::default();
        let log = t.log([0; 3], &ControllerTelemetry::default());
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
        assert_eq!(
            t.log([0; 3], &ControllerTelemetry::default())[381],
            0,
            "8-bit generation wraps"
        );
        let mut data = vec![1u8; MAX_DATA_BYTES + 10];
        data[MAX_DATA_BYTES + 9] = 9;
        t.create(TelemetryData { data, reason: [0; 128] }, [0; 3]);
        let log = t.log([0; 3], &ControllerTelemetry::default());
        assert_eq!(log.len(), 512 + MAX_DATA_BYTES);
        assert_eq!(*log.last().unwrap(), 9);
        assert_eq!(u16::from_le_bytes([log[12], log[13]]), u16::MAX);
    }
}
