//! Telemetry through the admin queue, as nvme-cli reads it: the Host-Initiated log (07h),
//! the header with create, then the data in 512-byte multiples at increasing offsets; the
//! Controller-Initiated log (08h), its capture on Controller Fatal Status, the Telemetry
//! Log Changed notice (AEC bit 10), RAE, the fields both headers share, and the capture an
//! injected firmware assert makes while the controller carries on.

mod common;

use common::ready_host;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{CaptureRefused, ControllerConfig, HostMemoryBuffer, Status, TelemetryData, VendorFeatures};

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
    get_log(h, 0x07, buf, offset, bytes, u32::from(create), true)
}

/// Get Log Page `lid`: `bytes` from `offset`, LSP `lsp`, RAE `rae`.
fn get_log(h: &mut FakeHost, lid: u32, buf: u64, offset: u64, bytes: u32, lsp: u32, rae: bool) -> (Status, Vec<u8>) {
    let numd = bytes / 4 - 1;
    let cdw10 = lid | lsp << 8 | u32::from(rae) << 15 | (numd & 0xffff) << 16;
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
    let lpa = h.guest_read(buf, 4096)[261];
    assert_ne!(lpa & 1 << 3, 0, "LPA bit 3");
    // No Data Area 4 (the vendor's data fits areas 1-3, docs/nvme-controller.md):
    // LPA bit 6 clear, and Host Behavior Support (16h), whose ETDAS would turn
    // area 4 on, is not a feature of this controller.
    assert_eq!(lpa & 1 << 6, 0, "LPA bit 6");
    assert_eq!(
        h.admin(Command::new(0x0A).cdw(10, 0x16).prp1(buf)).status,
        Status::INVALID_FIELD
    );
    let (_, hdr) = telemetry(&mut h, buf, 0, 512, true);
    assert_eq!(&hdr[14..20], &[0; 6], "Data Area 4 Last Block (bytes 16..20) is 0");
}

#[test]
fn create_snapshots_and_reads_stay_on_that_snapshot() {
    let (mut h, buf) = telemetry_host();
    // The control socket's report (the host's view of what a reader must find).
    let reported = |h: &FakeHost| {
        let t = h.ctrl.report().telemetry;
        (t.host_generation, t.host_last_block)
    };
    assert_eq!(reported(&h), (0, 0), "no create yet");
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
    assert_eq!(reported(&h), (1, 3));

    // A second create: a higher generation and the newer, larger snapshot.
    let (_, hdr2) = telemetry(&mut h, buf, 0, 512, true);
    assert_eq!(hdr2[381], 2);
    assert_eq!(le16(&hdr2, 12), 6);
    assert_eq!(reported(&h), (2, 6));
}

#[test]
fn offsets_and_lengths_in_512_byte_units_only() {
    let (mut h, buf) = telemetry_host();
    assert_eq!(telemetry(&mut h, buf, 0, 512, true).0, Status::SUCCESS);
    assert_eq!(telemetry(&mut h, buf, 256, 512, false).0, Status::INVALID_FIELD);
    assert_eq!(telemetry(&mut h, buf, 0, 256, false).0, Status::INVALID_FIELD);
    // Past the last block of data area 3.
    assert_eq!(telemetry(&mut h, buf, 4 * 512, 512, false).0, Status::INVALID_FIELD);
    // Over MDTS (512 KiB here): refused before any create.
    assert_eq!(telemetry(&mut h, buf, 0, 1 << 20, true).0, Status::INVALID_FIELD);
    assert_eq!(telemetry(&mut h, buf, 0, 512, false).1[381], 1, "no second snapshot");
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

/// Get Log Page 08h: `bytes` from `offset`.
fn controller_log(h: &mut FakeHost, buf: u64, offset: u64, bytes: u32, rae: bool) -> (Status, Vec<u8>) {
    get_log(h, 0x08, buf, offset, bytes, 0, rae)
}

/// AER completion DW0 of Telemetry Log Changed: Notice, information 02h, log 08h.
const TELEMETRY_CHANGED: u32 = 0x08_02_02;

/// Reset after a fatal status and come back ready, AEC as `aec`, one AER outstanding.
fn recover(h: &mut FakeHost, aec: u32) -> u16 {
    h.disable();
    assert_eq!(h.enable(32) & 0b11, 1, "RDY without CFS");
    assert!(h.admin(Command::set_features(0x0B, aec)).ok());
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    aer
}

#[test]
fn controller_initiated_log_is_an_empty_header_until_an_event() {
    let (mut h, buf) = telemetry_host();
    let (status, hdr) = controller_log(&mut h, buf, 0, 512, false);
    assert_eq!(status, Status::SUCCESS);
    assert_eq!(hdr[0], 0x08, "log identifier");
    assert_eq!(&hdr[8..14], &[0; 6], "no data");
    assert_eq!(
        (hdr[381], hdr[382], hdr[383]),
        (0, 0, 0),
        "reserved, not available, generation 0"
    );
    // LSP bit 0 means create for 07h only: on 08h the host cannot make the controller capture.
    let (status, hdr) = get_log(&mut h, 0x08, buf, 0, 512, 1, true);
    assert_eq!(status, Status::SUCCESS);
    assert_eq!((hdr[382], hdr[383]), (0, 0));
    // Units of 512 bytes, as 07h.
    assert_eq!(controller_log(&mut h, buf, 4, 512, true).0, Status::INVALID_FIELD);
    assert_eq!(controller_log(&mut h, buf, 0, 260, true).0, Status::INVALID_FIELD);
    assert_eq!(
        controller_log(&mut h, buf, 512, 512, true).0,
        Status::INVALID_FIELD,
        "past the header"
    );
    // No vendor telemetry: no 08h either.
    let mut plain = ready_host(ControllerConfig::default());
    let b = plain.alloc(4096);
    assert_eq!(controller_log(&mut plain, b, 0, 512, true).0, Status::INVALID_LOG_PAGE);
}

#[test]
fn a_fatal_status_captures_announces_and_a_read_with_rae_0_releases() {
    let (mut h, buf) = telemetry_host();
    // A host-initiated snapshot first (the vendor's first telemetry call).
    assert_eq!(telemetry(&mut h, buf, 0, 512, true).0, Status::SUCCESS);
    assert!(h.ctrl.inject_fatal("test"));
    let aer = recover(&mut h, 1 << 10);
    // The capture made at the failure is announced once the host asks for the notices.
    let c = h.reap(0).expect("Telemetry Log Changed");
    assert_eq!((c.cid, c.status, c.dw0), (aer, Status::SUCCESS, TELEMETRY_CHANGED));

    let (status, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!(status, Status::SUCCESS);
    assert_eq!((hdr[0], hdr[381], hdr[382], hdr[383]), (0x08, 0, 1, 1));
    assert_eq!(hdr[384], 2, "the vendor's second snapshot, taken at the failure");
    assert_eq!(le16(&hdr, 12), 6, "3000 bytes: blocks 1..=6");
    let (_, data) = controller_log(&mut h, buf, 512, 3072, true);
    let want: Vec<u8> = (0..3000).map(|i| (i % 251) as u8 + 2).collect();
    assert_eq!(&data[..3000], &want[..]);
    // The host-initiated header carries the same two fields, whatever its own snapshot.
    let (_, host) = telemetry(&mut h, buf, 0, 512, false);
    assert_eq!((host[381], host[382], host[383]), (1, 1, 1));

    // A new failure keeps the unreleased capture, and it is not announced twice.
    assert!(h.ctrl.inject_fatal("again"));
    recover(&mut h, 1 << 10);
    assert!(
        h.reap(0).is_none(),
        "the capture was announced already: no second notice"
    );
    let (_, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!(
        (hdr[382], hdr[383], hdr[384]),
        (1, 1, 2),
        "the first capture, unchanged"
    );

    // RAE = 0 releases it: Data Available 0 in both headers, the data still readable.
    let (status, _) = controller_log(&mut h, buf, 0, 512, false);
    assert_eq!(status, Status::SUCCESS);
    let (_, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!((hdr[382], hdr[383], le16(&hdr, 12)), (0, 1, 6));
    let t = h.ctrl.report().telemetry;
    assert_eq!(
        (t.controller_available, t.controller_generation, t.controller_last_block),
        (false, 1, 6),
        "the control socket's report says what the header says"
    );
    let (_, host) = telemetry(&mut h, buf, 0, 512, false);
    assert_eq!((host[382], host[383]), (0, 1));

    // The next failure captures anew, with the next generation, and notices are unmasked.
    assert!(h.ctrl.inject_fatal("third"));
    let aer = recover(&mut h, 1 << 10);
    let c = h.reap(0).expect("the second capture's notice");
    assert_eq!((c.cid, c.dw0), (aer, TELEMETRY_CHANGED));
    let (_, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!((hdr[382], hdr[383], hdr[384]), (1, 2, 3));
    let t = h.ctrl.report().telemetry;
    assert_eq!((t.controller_available, t.controller_generation), (true, 2));
}

#[test]
fn no_notice_without_aec_bit_10_and_a_queued_notice_survives_a_reset() {
    let (mut h, buf) = telemetry_host();
    assert!(h.ctrl.inject_fatal("test"));
    // Every other notice on, Telemetry Log Notices off: the capture is silent.
    let _aer = recover(&mut h, !(1 << 10));
    assert!(h.reap(0).is_none(), "no notice with AEC bit 10 clear");
    let (_, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!((hdr[382], hdr[383]), (1, 1), "captured all the same");
    // Turned on with no AER outstanding: queued; a reset drops the queue before an AER
    // takes it, so the notice is still owed and goes out when the host asks again.
    h.disable();
    assert_eq!(h.enable(32) & 0b11, 1);
    assert!(h.admin(Command::set_features(0x0B, 1 << 10)).ok());
    h.disable();
    assert_eq!(h.enable(32) & 0b11, 1);
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    assert!(h.reap(0).is_none(), "AEC is 0 after the reset");
    assert!(h.admin(Command::set_features(0x0B, 1 << 10)).ok());
    let c = h.reap(0).expect("the owed notice, after the Set Features CQE");
    assert_eq!((c.cid, c.dw0), (aer, TELEMETRY_CHANGED));
}

#[test]
fn a_firmware_assert_captures_announces_at_once_and_the_controller_carries_on() {
    let mut plain = ready_host(ControllerConfig::default());
    assert_eq!(
        plain.ctrl.firmware_assert("no telemetry"),
        Err(CaptureRefused::NoTelemetry)
    );

    let (mut h, buf) = telemetry_host();
    assert!(h.admin(Command::set_features(0x0B, 1 << 10)).ok());
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    assert!(h.reap(0).is_none(), "no event yet");
    assert_eq!(h.ctrl.firmware_assert("test"), Ok(1));
    // The outstanding AER completes with the notice without any host command.
    let c = h.reap(0).expect("Telemetry Log Changed at the assert");
    assert_eq!((c.cid, c.status, c.dw0), (aer, Status::SUCCESS, TELEMETRY_CHANGED));
    assert_eq!(h.csts() & 0b11, 1, "still ready, no fatal status");
    let (status, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!(status, Status::SUCCESS);
    assert_eq!(
        (hdr[0], hdr[382], hdr[383], hdr[384]),
        (0x08, 1, 1, 1),
        "available, generation 1, the vendor's snapshot taken at the assert"
    );
    assert_eq!(le16(&hdr, 12), 3, "1500 bytes: blocks 1..=3");

    // Unreleased: a second assert keeps the first capture and sends nothing.
    assert_eq!(
        h.ctrl.firmware_assert("again"),
        Err(CaptureRefused::NotReleased { generation: 1 })
    );
    assert!(h.reap(0).is_none());
    let (_, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!((hdr[383], hdr[384]), (1, 1), "the first capture, unchanged");

    // The controller serves commands as before; a read with RAE = 0 releases the capture
    // (and unmasks notices), and the next assert captures and announces anew.
    let (status, _) = controller_log(&mut h, buf, 0, 512, false);
    assert_eq!(status, Status::SUCCESS);
    let aer = h.push(0, Command::new(0x0C));
    h.ring(0);
    assert_eq!(h.ctrl.firmware_assert("third"), Ok(2));
    let c = h.reap(0).expect("the second capture's notice");
    assert_eq!((c.cid, c.dw0), (aer, TELEMETRY_CHANGED));
    let (_, hdr) = controller_log(&mut h, buf, 0, 512, true);
    assert_eq!((hdr[382], hdr[383], hdr[384]), (1, 2, 2));

    // Asserted while disabled: captured, and announced once the host asks for notices.
    controller_log(&mut h, buf, 0, 512, false);
    h.disable();
    assert_eq!(h.ctrl.firmware_assert("while disabled"), Ok(3));
    let aer = recover(&mut h, 1 << 10);
    let c = h.reap(0).expect("the owed notice");
    assert_eq!((c.cid, c.dw0), (aer, TELEMETRY_CHANGED));
}
