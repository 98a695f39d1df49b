//! Telemetry Host-Initiated log (07h) through the admin queue, as nvme-cli reads it:
//! the header with create, then the data in 512-byte multiples at increasing offsets.

mod common;

use common::ready_host;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{ControllerConfig, HostMemoryBuffer, Status, TelemetryData, VendorFeatures};

/// Vendor telemetry whose snapshot is `n` bytes of a counter, n growing per create.
struct Counting {
    creates: u8,
}

impl VendorFeatures for Counting {
    fn set(&mut self, _: u8, _: u32, _: &[u8], _: Option<&HostMemoryBuffer>) -> Result<u32, Status> {
        Err(Status::INVALID_FIELD)
    }
    fn get(&mut self, _: u8, _: u32) -> Result<(u32, Vec<u8>), Status> {
        Err(Status::INVALID_FIELD)
    }
    fn has_telemetry(&self) -> bool {
        true
    }
    fn telemetry(&mut self) -> TelemetryData {
        self.creates += 1;
        let mut reason = [0u8; 128];
        reason[0] = self.creates;
        TelemetryData {
            data: (0..1500 * usize::from(self.creates))
                .map(|i| (i % 251) as u8 + self.creates)
                .collect(),
            reason,
        }
    }
}

/// Get Log Page 07h: `bytes` from `offset`, with or without create.
fn telemetry(h: &mut FakeHost, buf: u64, offset: u64, bytes: u32, create: bool) -> (Status, Vec<u8>) {
    let numd = bytes / 4 - 1;
    let cdw10 = 0x07 | u32::from(create) << 8 | (numd & 0xffff) << 16;
    let c = h.admin(
        Command::new(0x02)
            .prp1(buf)
            .cdw(10, cdw10)
            .cdw(11, numd >> 16)
            .cdw(12, offset as u32)
            .cdw(13, (offset >> 32) as u32),
    );
    (c.status, h.guest_read(buf, bytes as usize))
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn telemetry_host() -> (FakeHost, u64) {
    let mut h = ready_host(ControllerConfig::default());
    h.ctrl.set_vendor_features(Box::new(Counting { creates: 0 }));
    let buf = h.alloc(4096);
    (h, buf)
}

#[test]
fn lpa_bit_3_follows_the_vendor() {
    let mut h = ready_host(ControllerConfig::default());
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    assert_eq!(
        h.guest_read(buf, 4096)[261] & 1 << 3,
        0,
        "no telemetry without vendor data"
    );
    let (status, _) = telemetry(&mut h, buf, 0, 512, true);
    assert_eq!(status, Status::INVALID_LOG_PAGE);

    let (mut h, buf) = telemetry_host();
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    assert_ne!(h.guest_read(buf, 4096)[261] & 1 << 3, 0, "LPA bit 3");
}

#[test]
fn create_snapshots_and_reads_stay_on_that_snapshot() {
    let (mut h, buf) = telemetry_host();
    let (status, hdr) = telemetry(&mut h, buf, 0, 512, true);
    assert_eq!(status, Status::SUCCESS);
    assert_eq!(hdr[0], 0x07);
    assert_eq!(hdr[381], 1, "first generation");
    assert_eq!(hdr[384], 1, "the vendor's reason identifier");
    let last = le16(&hdr, 12);
    assert_eq!(last, 3, "1500 bytes: blocks 1..=3");
    assert_eq!((le16(&hdr, 8), le16(&hdr, 10)), (3, 3));

    // The data, then the header again without create: same generation, same bytes.
    let (status, data) = telemetry(&mut h, buf, 512, 1536, false);
    assert_eq!(status, Status::SUCCESS);
    let want: Vec<u8> = (0..1500).map(|i| (i % 251) as u8 + 1).collect();
    assert_eq!(&data[..1500], &want[..]);
    assert!(data[1500..].iter().all(|&b| b == 0));
    let (_, again) = telemetry(&mut h, buf, 0, 512, false);
    assert_eq!(again, hdr, "the snapshot does not change without create");

    // A second create: a higher generation and the newer, larger snapshot.
    let (_, hdr2) = telemetry(&mut h, buf, 0, 512, true);
    assert_eq!(hdr2[381], 2);
    assert_eq!(le16(&hdr2, 12), 6);
}

#[test]
fn offsets_and_lengths_in_512_byte_units_only() {
    let (mut h, buf) = telemetry_host();
    assert_eq!(telemetry(&mut h, buf, 0, 512, true).0, Status::SUCCESS);
    assert_eq!(telemetry(&mut h, buf, 256, 512, false).0, Status::INVALID_FIELD);
    assert_eq!(telemetry(&mut h, buf, 0, 256, false).0, Status::INVALID_FIELD);
    // Past the last block of data area 3.
    assert_eq!(telemetry(&mut h, buf, 4 * 512, 512, false).0, Status::INVALID_FIELD);
}

#[test]
fn the_snapshot_outlives_a_controller_reset() {
    let (mut h, buf) = telemetry_host();
    let (_, hdr) = telemetry(&mut h, buf, 0, 512, true);
    h.disable();
    assert_eq!(h.enable(32) & 0b11, 1);
    let (status, again) = telemetry(&mut h, buf, 0, 512, false);
    assert_eq!(status, Status::SUCCESS);
    assert_eq!(again, hdr);
}
