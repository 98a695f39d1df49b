//! Get Log Page (02h): 01h error information (error_log.rs), 02h SMART / health
//! information (controller-wide: NSID 0 or FFFFFFFFh; LPA bit 0 = 0, so NSID 1 is Invalid
//! Field), 03h firmware slot information, 04h Changed Namespace List (always empty), 07h
//! Telemetry Host-Initiated and 08h Telemetry Controller-Initiated (when the vendor has
//! telemetry, telemetry.rs). Others: Invalid Log Page. Reading a log with RAE = 0 unmasks
//! the async event type that reports it (and releases a controller-initiated capture).

use super::done;
use super::identify::{IEEE_OUI, TEMPERATURE};
use super::telemetry::{
    CaptureRefused, AEC_TELEMETRY_NOTICES, BLOCK, LID_TELEMETRY_CONTROLLER, LID_TELEMETRY_HOST, LSP_CREATE,
    NOTICE_TELEMETRY_CHANGED,
};
use crate::command::{Outcome, Sqe};
use crate::{Controller, Status};

const LID_ERROR: u8 = 0x01;
const LID_SMART: u8 = 0x02;
const LID_FW_SLOT: u8 = 0x03;
const LID_CHANGED_NS: u8 = 0x04;

/// Async event types: 0 error, 1 SMART/health.
const EVENT_ERROR: u8 = 0;
const EVENT_SMART: u8 = 1;
/// Notice (namespace attribute changed is reported through log 04h).
const EVENT_NOTICE: u8 = 2;

impl Controller {
    pub(crate) fn get_log_page(&mut self, sqe: &Sqe) -> Outcome {
        let lid = sqe.cdw(10) as u8;
        let rae = sqe.cdw(10) & (1 << 15) != 0;
        let numd = (u64::from(sqe.cdw(10) >> 16) | u64::from(sqe.cdw(11) & 0xffff) << 16) + 1;
        let offset = u64::from(sqe.cdw(12)) | u64::from(sqe.cdw(13)) << 32;
        let nsid = sqe.nsid();
        let (log, event) = match lid {
            LID_ERROR => (self.error_log.page(), Some(EVENT_ERROR)),
            // The namespace never changes, so the list is always empty (4096 zero bytes).
            LID_CHANGED_NS => (vec![0u8; 4096], Some(EVENT_NOTICE)),
            LID_SMART => {
                // LPA bit 0 = 0: no per-namespace SMART, so any other NSID is Invalid
                // Field (NVMe 1.4 5.14.1.2).
                if !matches!(nsid, 0 | 0xFFFF_FFFF) {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                (self.smart_log(), Some(EVENT_SMART))
            }
            LID_FW_SLOT => {
                let mut l = vec![0u8; 512];
                l[0] = 1; // AFI: slot 1 active
                let fw = self.cfg.firmware.as_bytes();
                l[8..16].fill(b' ');
                l[8..8 + fw.len()].copy_from_slice(fw);
                (l, None)
            }
            LID_TELEMETRY_HOST | LID_TELEMETRY_CONTROLLER if self.vendor.has_telemetry() => {
                // Read in 512-byte units (offset and length), NVMe 2.0 5.16.1.8/9.
                if offset % BLOCK as u64 != 0 || (numd * 4) % BLOCK as u64 != 0 {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                // A read the transfer limit refuses takes no snapshot (no side effect of
                // a failed command).
                if numd * 4 > self.cfg.max_transfer() as u64 {
                    return Outcome::status(Status::INVALID_FIELD);
                }
                if lid == LID_TELEMETRY_HOST {
                    if sqe.cdw(10) & LSP_CREATE != 0 {
                        let snapshot = self.vendor.telemetry();
                        self.host_telemetry.create(snapshot, IEEE_OUI);
                    }
                    (self.host_telemetry.log(IEEE_OUI, &self.controller_telemetry), None)
                } else {
                    // No LSP is defined for 08h (reserved, ignored as on every other log):
                    // the host cannot make the controller capture.
                    (self.controller_telemetry.log(IEEE_OUI), Some(EVENT_NOTICE))
                }
            }
            _ => return Outcome::status(Status::INVALID_LOG_PAGE),
        };
        let len = numd * 4;
        if offset % 4 != 0 || offset >= log.len() as u64 || len > self.cfg.max_transfer() as u64 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        // Bytes past the end of the log read as zero.
        let mut out = vec![0u8; len as usize];
        let avail = &log[offset as usize..];
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        let r = self.host_data_out(sqe, &out);
        if r.is_ok() && !rae {
            if lid == LID_TELEMETRY_CONTROLLER {
                self.controller_telemetry.release();
            }
            if let Some(t) = event {
                // Pending events of this type go out after this command's CQE (process_sq).
                self.masked_event_types &= !(1 << t);
            }
        }
        done(r)
    }

    /// A controller-initiated telemetry capture (log 08h), when the vendor has telemetry
    /// and the last capture was released; announced as docs/nvme-controller.md says.
    /// Returns the capture's generation number.
    pub(crate) fn capture_controller_telemetry(&mut self, why: &str) -> Result<u8, CaptureRefused> {
        // The snapshot holds every record of what went before (held.rs).
        self.release_notes();
        if !self.vendor.has_telemetry() {
            return Err(CaptureRefused::NoTelemetry);
        }
        if self.controller_telemetry.available() {
            log::info!("nvme: controller-initiated telemetry not captured ({why}): the last capture is not released");
            return Err(CaptureRefused::NotReleased {
                generation: self.controller_telemetry.generation(),
            });
        }
        let snapshot = self.vendor.telemetry();
        self.controller_telemetry.capture(snapshot, IEEE_OUI);
        log::info!("nvme: controller-initiated telemetry captured ({why})");
        self.announce_controller_telemetry();
        Ok(self.controller_telemetry.generation())
    }

    /// An injected firmware assert (the control socket's `inject firmware-assert`):
    /// what an SSD's firmware does when one of its internal checks fails and it
    /// recovers: it captures its state as Controller-Initiated Telemetry and tells the
    /// host (Telemetry Log Changed, at once if an AER is outstanding), then carries on.
    /// Nothing else changes: no fatal status, the HMB and the trace ring stay as they
    /// are (a fatal assert is `inject reset`). Returns the capture's generation; an
    /// unreleased capture is kept, as for every other event.
    pub fn firmware_assert(&mut self, why: &str) -> Result<u8, CaptureRefused> {
        log::warn!("nvme: firmware assert: {why}");
        let generation = self.capture_controller_telemetry(&format!("firmware assert: {why}"))?;
        if self.running() {
            self.deliver_events();
        }
        Ok(generation)
    }

    /// Queue the Telemetry Log Changed notice of an unannounced capture if the host asked
    /// for Telemetry Log Notices (AEC bit 10). Called at the capture and when the host
    /// sets AEC, so a capture made while notices were off (or during a reset, which
    /// resets AEC) is announced once the host turns them on.
    pub(crate) fn announce_controller_telemetry(&mut self) {
        if self.controller_telemetry.owes_notice() && self.feat.async_event_config & AEC_TELEMETRY_NOTICES != 0 {
            self.controller_telemetry.set_announced(true);
            self.pend_event(NOTICE_TELEMETRY_CHANGED);
        }
    }

    /// A reset drops queued events: a notice still queued (not sent) is owed again.
    pub(crate) fn forget_queued_telemetry_notice(&mut self) {
        if self.events.contains(&NOTICE_TELEMETRY_CHANGED) {
            self.controller_telemetry.set_announced(false);
        }
    }

    fn smart_log(&self) -> Vec<u8> {
        let c = &self.counters;
        let mut l = vec![0u8; 512];
        l[0] = u8::from(self.temperature_exceeded()) << 1; // critical warning: temperature
        l[1..3].copy_from_slice(&TEMPERATURE.to_le_bytes());
        l[3] = 100; // available spare
        l[4] = 10; // available spare threshold
        l[5] = 0; // percentage used
                  // Data units are thousands of 512-byte units, rounded up.
        let units = |bytes: u64| (bytes / 512).div_ceil(1000) as u128;
        let put = |l: &mut Vec<u8>, at: usize, v: u128| l[at..at + 16].copy_from_slice(&v.to_le_bytes());
        put(&mut l, 32, units(c.bytes_read));
        put(&mut l, 48, units(c.bytes_written));
        put(&mut l, 64, u128::from(c.reads));
        put(&mut l, 80, u128::from(c.writes));
        put(&mut l, 112, 1); // power cycles
        put(&mut l, 176, u128::from(self.error_log.count)); // error information log entries
        put(&mut l, 128, u128::from(self.now_ns() / 3_600_000_000_000)); // power-on hours
        l
    }
}
