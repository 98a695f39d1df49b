//! Identify (06h): CNS 00h namespace, 01h controller, 02h active namespace list,
//! 03h namespace identification descriptors. Any other CNS: Invalid Field in Command.

use super::{done, AER_LIMIT};
use crate::command::{Outcome, Sqe};
use crate::{Controller, Status};

/// The only namespace.
pub(crate) const NSID: u32 = 1;
/// Warning / critical composite temperature thresholds (kelvin): 70 °C and 100 °C.
pub(crate) const WCTEMP: u16 = 343;
/// IEEE OUI (Identify bytes 73..76, the telemetry header's bytes 5..8): none assigned.
pub(crate) const IEEE_OUI: [u8; 3] = [0; 3];
pub(crate) const CCTEMP: u16 = 373;
/// Composite temperature the SMART log reports: 40 °C.
pub(crate) const TEMPERATURE: u16 = 313;

/// OAES bit 8: namespace attribute notices (the driver then configures AEN and keeps an
/// AER outstanding; the namespace never changes, so none is ever sent).
pub(crate) const OAES: u32 = 1 << 8;
/// OACS bit 8: Doorbell Buffer Config (shadow doorbells, shadow.rs); no other optional
/// admin command.
pub(crate) const OACS: u16 = 1 << 8;
/// ONCS: bit 0 Compare, bit 2 Dataset Management, bit 3 Write Zeroes, bit 6 Timestamp,
/// bit 7 Verify.
pub(crate) const ONCS: u16 = 1 | 1 << 2 | 1 << 3 | 1 << 6 | 1 << 7;
/// DLFEAT: bits 2:0 = 001b, deallocated blocks read as zeroes; bit 3, Write Zeroes may
/// deallocate (the DEAC bit is accepted: zeroes either way).
pub(crate) const DLFEAT: u8 = 1 | 1 << 3;

/// Identify Controller: start of the vendor-specific area (bytes 3072..4095).
pub(crate) const VS_OFFSET: usize = 3072;

struct Buf(Vec<u8>);

impl Buf {
    fn new() -> Self {
        Buf(vec![0; 4096])
    }
    fn u8(&mut self, at: usize, v: u8) -> &mut Self {
        self.0[at] = v;
        self
    }
    fn u16(&mut self, at: usize, v: u16) -> &mut Self {
        self.0[at..at + 2].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Self {
        self.0[at..at + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Self {
        self.0[at..at + 8].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, at: usize, v: &[u8]) -> &mut Self {
        self.0[at..at + v.len()].copy_from_slice(v);
        self
    }
    /// ASCII, space padded (Identify string fields).
    fn text(&mut self, at: usize, len: usize, s: &str) -> &mut Self {
        let field = &mut self.0[at..at + len];
        field.fill(b' ');
        field[..s.len().min(len)].copy_from_slice(&s.as_bytes()[..s.len().min(len)]);
        self
    }
}

impl Controller {
    pub(crate) fn identify(&mut self, sqe: &Sqe) -> Outcome {
        let cns = sqe.cdw(10) as u8;
        let nsid = sqe.nsid();
        let data = match cns {
            0x00 => {
                if nsid != NSID {
                    return Outcome::status(Status::INVALID_NAMESPACE);
                }
                self.identify_namespace()
            }
            0x01 => self.identify_controller(),
            0x02 => {
                if nsid >= 0xFFFF_FFFE {
                    return Outcome::status(Status::INVALID_NAMESPACE);
                }
                let mut b = Buf::new();
                if nsid < NSID {
                    b.u32(0, NSID);
                }
                b.0
            }
            0x03 => {
                if nsid != NSID {
                    return Outcome::status(Status::INVALID_NAMESPACE);
                }
                // One descriptor: the NGUID (type 2, 16 bytes), the same as Identify NS's.
                let mut b = Buf::new();
                b.u8(0, 2).u8(1, 16).bytes(4, &self.nguid());
                b.0
            }
            _ => return Outcome::status(Status::INVALID_FIELD),
        };
        done(self.host_data_out(sqe, &data))
    }

    /// NGUID: stable for a serial number (FNV-1a of it, two halves).
    pub(crate) fn nguid(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (half, seed) in [(0usize, 0xcbf2_9ce4_8422_2325u64), (8, 0x8422_2325_cbf2_9ce4)] {
            let mut h = seed;
            for b in self.cfg.serial.bytes().chain(*b"hmb-trace-ns1") {
                h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
            }
            out[half..half + 8].copy_from_slice(&h.to_be_bytes());
        }
        out
    }

    fn identify_controller(&self) -> Vec<u8> {
        let id = Controller::pci_identity();
        let c = &self.cfg;
        let mut b = Buf::new();
        b.u16(0, id.vendor)
            .u16(2, id.subsystem_vendor)
            .text(4, 20, &c.serial)
            .text(24, 40, &c.model)
            .text(64, 8, &c.firmware)
            .u8(72, 6) // RAB: 64 commands
            .u8(77, c.mdts)
            .u16(78, 1) // CNTLID
            .u32(80, crate::regs::VERSION)
            .u32(92, OAES)
            .u8(111, 1) // CNTRLTYPE: I/O controller
            .u16(256, OACS)
            .u8(258, 3) // ACL: 4 concurrent Abort commands
            .u8(259, (AER_LIMIT - 1) as u8)
            .u8(260, 1 << 1 | 1) // FRMW: one slot, read-only
            // LPA: extended data for Get Log Page (NUMDU, offsets); bit 3, when the vendor
            // has telemetry data: logs 07h and 08h and sending Telemetry Log Notices (OAES
            // has no bit for those: its bit 10 is reserved).
            .u8(261, 1 << 2 | u8::from(self.vendor.has_telemetry()) << 3)
            .u8(262, (crate::admin::error_log::ENTRIES - 1) as u8) // ELPE
            .u8(263, 0) // NPSS: one power state
            .u16(266, WCTEMP)
            .u16(268, CCTEMP)
            .u32(272, (c.hmpre_bytes / 4096) as u32)
            .u32(276, (c.hmmin_bytes / 4096) as u32)
            .u64(280, self.ns.bytes) // TNVMCAP (low 64 bits)
            .u32(332, (c.hmminds_bytes / 4096) as u32)
            .u16(336, c.hmmaxd)
            .u8(512, 0x66) // SQES: 64 bytes
            .u8(513, 0x44) // CQES: 16 bytes
            .u32(516, 1) // NN
            .u16(520, ONCS)
            .u8(525, 0) // VWC: no volatile write cache
            .u8(530, 1); // NVSCC
        let subnqn = format!("nqn.2026-01.org.hmb-trace:nvme:{}", c.serial);
        b.bytes(768, subnqn.as_bytes());
        // Power state 0: 9.00 W, operational, no entry/exit latency.
        b.u16(2048, 900);
        let area: &mut [u8; 1024] = (&mut b.0[VS_OFFSET..]).try_into().expect("1024-byte area");
        self.vendor.identify_vendor_specific(area);
        b.0
    }

    fn identify_namespace(&self) -> Vec<u8> {
        let lbas = self.ns.lbas();
        let mut b = Buf::new();
        b.u64(0, lbas) // NSZE
            .u64(8, lbas) // NCAP
            .u64(16, lbas) // NUSE (thin provisioning not reported)
            .u8(25, 0) // NLBAF: one format
            .u8(26, 0) // FLBAS: format 0
            .u8(33, DLFEAT)
            .u64(48, self.ns.bytes) // NVMCAP (low 64 bits)
            .bytes(104, &self.nguid())
            .u32(128, u32::from(self.ns.lba_shift) << 16); // LBAF0: MS 0, LBADS, RP 0
        b.0
    }
}
