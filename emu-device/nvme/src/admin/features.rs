//! Set Features (09h) / Get Features (0Ah). Supported: 01h arbitration, 02h power
//! management, 04h temperature threshold, 05h error recovery, 07h number of queues,
//! 08h interrupt coalescing, 09h interrupt vector configuration, 0Ah write atomicity,
//! 0Bh asynchronous event configuration, 0Dh host memory buffer, 0Eh timestamp,
//! C0h..FFh vendor specific (through `VendorFeatures`). Others: Invalid Field.
//! No saveable features (SV = 1: Feature Identifier Not Saveable); Get Features SEL
//! other than "current" is Invalid Field (ONCS bit 4 = 0).

use std::time::Instant;

use super::done;
use crate::command::{Outcome, Sqe, PAGE};
use crate::hmb::{self, HmbAttributes, HmbLimits};
use crate::{Controller, HostMemoryBuffer, Status};

pub(crate) const FID_ARBITRATION: u8 = 0x01;
pub(crate) const FID_POWER: u8 = 0x02;
pub(crate) const FID_TEMPERATURE: u8 = 0x04;
pub(crate) const FID_ERROR_RECOVERY: u8 = 0x05;
pub(crate) const FID_QUEUES: u8 = 0x07;
pub(crate) const FID_IRQ_COALESCING: u8 = 0x08;
pub(crate) const FID_IRQ_CONFIG: u8 = 0x09;
pub(crate) const FID_WRITE_ATOMICITY: u8 = 0x0A;
pub(crate) const FID_ASYNC_EVENT: u8 = 0x0B;
pub(crate) const FID_HMB: u8 = 0x0D;
pub(crate) const FID_TIMESTAMP: u8 = 0x0E;

const HMB_EHM: u32 = 1;
const HMB_MR: u32 = 1 << 1;

impl Controller {
    /// NSID rules of Set/Get Features (NVMe 1.4 5.21): 0 and FFFFFFFFh mean "the
    /// controller"; an NSID that names no namespace is Invalid Namespace; the namespace's
    /// own NSID with a feature that is not namespace specific (all but 05h Error
    /// Recovery here) is Feature Not Namespace Specific, as QEMU answers. Unknown FIDs
    /// and vendor FIDs (the vendor's business) are left to the FID match.
    fn feature_nsid_check(fid: u8, nsid: u32) -> Result<(), Status> {
        let known = matches!(
            fid,
            FID_ARBITRATION
                | FID_POWER
                | FID_TEMPERATURE
                | FID_ERROR_RECOVERY
                | FID_QUEUES
                | FID_IRQ_COALESCING
                | FID_IRQ_CONFIG
                | FID_WRITE_ATOMICITY
                | FID_ASYNC_EVENT
                | FID_HMB
                | FID_TIMESTAMP
        );
        if !known || matches!(nsid, 0 | 0xFFFF_FFFF) {
            return Ok(());
        }
        if nsid != super::identify_nsid() {
            return Err(Status::INVALID_NAMESPACE);
        }
        if fid != FID_ERROR_RECOVERY {
            return Err(Status::FEATURE_NOT_NAMESPACE_SPECIFIC);
        }
        Ok(())
    }

    /// The composite temperature is at or above the over threshold, or at or below a
    /// non-zero under threshold (NVMe 1.4 SMART critical warning bit 1).
    pub(crate) fn temperature_exceeded(&self) -> bool {
        use super::identify::TEMPERATURE;
        TEMPERATURE >= self.feat.temp_over || (self.feat.temp_under != 0 && TEMPERATURE <= self.feat.temp_under)
    }

    pub(crate) fn set_features(&mut self, sqe: &Sqe) -> Outcome {
        let fid = sqe.cdw(10) as u8;
        let save = sqe.cdw(10) & (1 << 31) != 0;
        let v = sqe.cdw(11);
        if save {
            return Outcome::status(Status::FEATURE_NOT_SAVEABLE);
        }
        if let Err(s) = Self::feature_nsid_check(fid, sqe.nsid()) {
            return Outcome::status(s);
        }
        let ok = |dw0: u32| Outcome::Complete(Status::SUCCESS, dw0, 0);
        match fid {
            FID_ARBITRATION => {
                self.feat.arbitration = v;
                ok(0)
            }
            FID_POWER => {
                // NPSS = 0: power state 0 only; workload hint bits 7:5 kept.
                if v & 0x1f != 0 {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                self.feat.power_state = v & 0xff;
                ok(0)
            }
            FID_TEMPERATURE => {
                // TMPSEL (19:16) 0 = composite only; THSEL (21:20) 0 over, 1 under.
                let (tmpsel, thsel) = ((v >> 16) & 0xf, (v >> 20) & 3);
                match (tmpsel, thsel) {
                    (0, 0) => self.feat.temp_over = v as u16,
                    (0, 1) => self.feat.temp_under = v as u16,
                    _ => return Outcome::status(Status::INVALID_FIELD),
                }
                // A threshold the composite temperature now crosses: SMART critical warning
                // bit 1 (smart_log) and, if AEC bit 1 asks for it, a SMART/health event
                // "temperature threshold" (info 01h, log 02h), as QEMU raises it.
                if self.temperature_exceeded() && self.feat.async_event_config & (1 << 1) != 0 {
                    self.pend_event(1 | 0x01 << 8 | 0x02 << 16);
                }
                ok(0)
            }
            FID_ERROR_RECOVERY => {
                // DULBE (bit 16) needs NSFEAT bit 2 (deallocated blocks), which is 0.
                if v & (1 << 16) != 0 {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                self.feat.error_recovery = v & 0xffff;
                ok(0)
            }
            FID_QUEUES => self.set_queue_count(v),
            FID_IRQ_COALESCING => {
                self.feat.irq_coalescing = v & 0xffff;
                ok(0)
            }
            FID_IRQ_CONFIG => {
                let iv = v as u16;
                if iv >= self.cfg.interrupt_vectors {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                self.feat.irq_config.insert(iv, v & 0x1_ffff);
                ok(0)
            }
            FID_WRITE_ATOMICITY => {
                self.feat.write_atomicity = v & 1;
                ok(0)
            }
            FID_ASYNC_EVENT => {
                self.feat.async_event_config = v;
                // A capture not yet announced goes out now (after this command's CQE).
                self.announce_controller_telemetry();
                ok(0)
            }
            FID_HMB => self.set_hmb(sqe),
            FID_TIMESTAMP => match self.host_data_in(sqe, 8) {
                Ok(d) => {
                    let ms = u64::from_le_bytes(d[0..8].try_into().expect("8 bytes")) & 0xffff_ffff_ffff;
                    self.feat.timestamp = Some((ms, Instant::now()));
                    ok(0)
                }
                Err(s) => Outcome::status(s),
            },
            0xC0..=0xFF => {
                let len = self.vendor.set_data_len(fid, v);
                let data = if len == 0 {
                    Vec::new()
                } else {
                    match self.host_data_in(sqe, len) {
                        Ok(d) => d,
                        Err(s) => return Outcome::status(s),
                    }
                };
                let result = self.vendor.set(fid, v, &data, self.hmb.as_ref());
                self.audit
                    .note_vendor_feature(fid, true, *result.as_ref().err().unwrap_or(&Status::SUCCESS));
                if let (Some(h), true) = (self.hmb.as_ref(), self.vendor.advert_fid() == Some(fid)) {
                    self.audit.advert(h, result.is_err(), self.vendor.shared_slice());
                }
                match result {
                    Ok(dw0) => ok(dw0),
                    Err(s) => Outcome::status(s),
                }
            }
            _ => Outcome::status(Status::INVALID_FIELD),
        }
    }

    pub(crate) fn get_features(&mut self, sqe: &Sqe) -> Outcome {
        let fid = sqe.cdw(10) as u8;
        let sel = (sqe.cdw(10) >> 8) & 7;
        if sel != 0 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        if let Err(s) = Self::feature_nsid_check(fid, sqe.nsid()) {
            return Outcome::status(s);
        }
        let ok = |dw0: u32| Outcome::Complete(Status::SUCCESS, dw0, 0);
        match fid {
            FID_ARBITRATION => ok(self.feat.arbitration),
            FID_POWER => ok(self.feat.power_state),
            FID_TEMPERATURE => {
                let v = sqe.cdw(11);
                match ((v >> 16) & 0xf, (v >> 20) & 3) {
                    (0, 0) => ok(u32::from(self.feat.temp_over)),
                    (0, 1) => ok(u32::from(self.feat.temp_under)),
                    _ => Outcome::status(Status::INVALID_FIELD),
                }
            }
            FID_ERROR_RECOVERY => ok(self.feat.error_recovery),
            FID_QUEUES => {
                let (nsq, ncq) = self.queue_allocation();
                ok(u32::from(nsq) | u32::from(ncq) << 16)
            }
            FID_IRQ_COALESCING => ok(self.feat.irq_coalescing),
            FID_IRQ_CONFIG => {
                let iv = sqe.cdw(11) as u16;
                if iv >= self.cfg.interrupt_vectors {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                ok(self.feat.irq_config.get(&iv).copied().unwrap_or(u32::from(iv)))
            }
            FID_WRITE_ATOMICITY => ok(self.feat.write_atomicity),
            FID_ASYNC_EVENT => ok(self.feat.async_event_config),
            FID_HMB => {
                if self.cfg.hmpre_bytes == 0 {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                // Host Memory Buffer Attributes: HSIZE, HMDLAL, HMDLAU, HMDLEC of the
                // enabled buffer (all zero while disabled: release_hmb clears them).
                let a = self.hmb_attrs;
                let mut d = vec![0u8; 4096];
                d[0..4].copy_from_slice(&a.hsize.to_le_bytes());
                d[4..8].copy_from_slice(&(a.list_addr as u32).to_le_bytes());
                d[8..12].copy_from_slice(&((a.list_addr >> 32) as u32).to_le_bytes());
                d[12..16].copy_from_slice(&a.entries.to_le_bytes());
                match self.host_data_out(sqe, &d) {
                    // DW0: EHM and MR as the host set them for the enabled buffer.
                    Ok(()) => ok(if self.hmb.is_some() { self.hmb_bits } else { 0 }),
                    Err(s) => Outcome::status(s),
                }
            }
            FID_TIMESTAMP => {
                let mut d = [0u8; 8];
                if let Some((ms, at)) = self.feat.timestamp {
                    let now = (ms + at.elapsed().as_millis() as u64) & 0xffff_ffff_ffff;
                    d[0..6].copy_from_slice(&now.to_le_bytes()[0..6]);
                    d[6] = 1 << 1; // Timestamp Origin 001b: set by the host; Synch 0
                } else {
                    // Origin 000b: time since the last controller reset.
                    let ms = self.now_ns().saturating_sub(self.reset_ns) / 1_000_000;
                    d[0..6].copy_from_slice(&ms.to_le_bytes()[0..6]);
                }
                done(self.host_data_out(sqe, &d))
            }
            0xC0..=0xFF => {
                let out = match self.vendor.get(fid, sqe.cdw(11)) {
                    Ok((dw0, data)) => match self.host_data_out(sqe, &data) {
                        Ok(()) => ok(dw0),
                        Err(s) => Outcome::status(s),
                    },
                    Err(s) => Outcome::status(s),
                };
                let status = match &out {
                    Outcome::Complete(s, _, _) => *s,
                    Outcome::Held => Status::SUCCESS,
                };
                self.audit.note_vendor_feature(fid, false, status);
                out
            }
            _ => Outcome::status(Status::INVALID_FIELD),
        }
    }

    /// (NSQA, NCQA), 0-based.
    pub(crate) fn queue_allocation(&self) -> (u16, u16) {
        let max = self.cfg.max_io_queues - 1;
        self.feat.queues.unwrap_or((max, max))
    }

    fn set_queue_count(&mut self, v: u32) -> Outcome {
        let (nsqr, ncqr) = (v as u16, (v >> 16) as u16);
        if nsqr == 0xffff || ncqr == 0xffff {
            return Outcome::status(Status::INVALID_FIELD);
        }
        // Only before any I/O queue exists (the allocation must not change under them).
        if self.sqs.iter().skip(1).any(Option::is_some) || self.cqs.iter().skip(1).any(Option::is_some) {
            return Outcome::status(Status::COMMAND_SEQUENCE_ERROR);
        }
        let max = self.cfg.max_io_queues - 1;
        let alloc = (nsqr.min(max), ncqr.min(max));
        self.feat.queues = Some(alloc);
        Outcome::Complete(Status::SUCCESS, u32::from(alloc.0) | u32::from(alloc.1) << 16, 0)
    }

    /// Set Features 0Dh: EHM enables (reading and checking the descriptor list) or disables;
    /// MR=1 with the same list as before marks the buffer as returned.
    fn set_hmb(&mut self, sqe: &Sqe) -> Outcome {
        let bits = sqe.cdw(11);
        let attrs = HmbAttributes {
            hsize: sqe.cdw(12),
            list_addr: u64::from(sqe.cdw(13)) | u64::from(sqe.cdw(14)) << 32,
            entries: sqe.cdw(15),
        };
        let out = self.enable_or_release_hmb(bits, attrs);
        let status = match &out {
            Outcome::Complete(s, _, _) => *s,
            Outcome::Held => Status::SUCCESS,
        };
        let enabled = status.is_success() && bits & HMB_EHM != 0;
        let h = self.hmb.as_ref().filter(|_| enabled);
        self.audit.note_set_hmb(
            bits,
            &attrs,
            h.map(|h| h.descriptors()),
            status,
            h.is_some_and(|h| h.returned()),
        );
        out
    }

    fn enable_or_release_hmb(&mut self, bits: u32, attrs: HmbAttributes) -> Outcome {
        if self.cfg.hmpre_bytes == 0 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        if bits & HMB_EHM == 0 {
            self.release_hmb();
            return Outcome::status(Status::SUCCESS);
        }
        if self.hmb.is_some() {
            return self.reject_hmb(Status::COMMAND_SEQUENCE_ERROR);
        }
        let limits = HmbLimits {
            page_size: PAGE,
            hmmin_bytes: self.cfg.hmmin_bytes,
            hmminds_bytes: self.cfg.hmminds_bytes,
            hmmaxd: self.cfg.hmmaxd,
        };
        let descs = match hmb::read_descriptors(&self.mem, &attrs, &limits) {
            Ok(d) => d,
            Err(s) => return self.reject_hmb(s),
        };
        let returned = bits & HMB_MR != 0 && self.retained_hmb.as_deref() == Some(&descs[..]);
        let h = HostMemoryBuffer::new(descs, returned, self.mem.clone());
        self.hmb_attrs = attrs;
        self.hmb_bits = bits & (HMB_EHM | HMB_MR);
        self.hmb_report.enables += 1;
        self.hmb_report.last_rejection = None;
        self.release_notes();
        self.observer.on_hmb_enabled(&h);
        // The controller's own data goes in (or is checked, on a return) before any other
        // command can run.
        self.audit.enabled(&h, self.vendor.advert_fid().is_some());
        self.hmb = Some(h);
        Outcome::status(Status::SUCCESS)
    }

    fn reject_hmb(&mut self, s: Status) -> Outcome {
        self.hmb_report.last_rejection = Some(s.to_string());
        Outcome::status(s)
    }
}
