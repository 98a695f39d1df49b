//! Admin command set (NVMe 1.4 section 5). Unknown or unsupported opcodes: Invalid Opcode
//! with DNR. docs/nvme-controller.md lists every command and its statuses.

mod doorbell_buffer;
mod error_log;
mod features;
mod identify;
mod log;
mod queues;
mod telemetry;

pub(crate) use error_log::{ErrorLog, ErrorRecord, NOT_A_COMMAND};
pub use telemetry::{CaptureRefused, TelemetryData, MAX_DATA_BYTES as TELEMETRY_MAX_DATA_BYTES};
pub(crate) use telemetry::{ControllerTelemetry, HostTelemetry};

pub(crate) use identify::WCTEMP;

/// The namespace id of the only namespace.
pub(crate) fn identify_nsid() -> u32 {
    identify::NSID
}

use std::collections::HashMap;
use std::time::Instant;

use crate::command::{Completion, Outcome, Sqe, PAGE};
use crate::{prp, Controller, Status};

pub(crate) const OPC_DELETE_SQ: u8 = 0x00;
pub(crate) const OPC_CREATE_SQ: u8 = 0x01;
pub(crate) const OPC_GET_LOG_PAGE: u8 = 0x02;
pub(crate) const OPC_DELETE_CQ: u8 = 0x04;
pub(crate) const OPC_CREATE_CQ: u8 = 0x05;
pub(crate) const OPC_IDENTIFY: u8 = 0x06;
pub(crate) const OPC_ABORT: u8 = 0x08;
pub(crate) const OPC_SET_FEATURES: u8 = 0x09;
pub(crate) const OPC_GET_FEATURES: u8 = 0x0A;
pub(crate) const OPC_ASYNC_EVENT: u8 = 0x0C;
pub(crate) const OPC_DOORBELL_BUFFER_CONFIG: u8 = 0x7C;

/// Concurrent AERs allowed: Identify AERL + 1.
pub(crate) const AER_LIMIT: usize = 4;

/// Feature values (Set/Get Features). A controller level reset restores the defaults.
#[derive(Clone, Debug)]
pub(crate) struct Features {
    pub arbitration: u32,
    pub power_state: u32,
    /// Composite temperature thresholds in kelvin: over, under.
    pub temp_over: u16,
    pub temp_under: u16,
    pub error_recovery: u32,
    pub irq_coalescing: u32,
    pub irq_config: HashMap<u16, u32>,
    pub write_atomicity: u32,
    pub async_event_config: u32,
    /// Host-set timestamp (ms) and when it was set.
    pub timestamp: Option<(u64, Instant)>,
    /// Set Features 07h allocation: (NSQA, NCQA), 0-based.
    pub queues: Option<(u16, u16)>,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            arbitration: 0,
            power_state: 0,
            temp_over: WCTEMP,
            temp_under: 0,
            error_recovery: 0,
            irq_coalescing: 0,
            irq_config: HashMap::new(),
            write_atomicity: 0,
            async_event_config: 0,
            timestamp: None,
            queues: None,
        }
    }
}

impl Controller {
    pub(crate) fn admin(&mut self, sqe: &Sqe) -> Outcome {
        // The opcode first: an unknown one is Invalid Opcode whatever PSDT/FUSE say (as QEMU).
        if !matches!(
            sqe.opcode(),
            OPC_DELETE_SQ
                | OPC_CREATE_SQ
                | OPC_GET_LOG_PAGE
                | OPC_DELETE_CQ
                | OPC_CREATE_CQ
                | OPC_IDENTIFY
                | OPC_ABORT
                | OPC_SET_FEATURES
                | OPC_GET_FEATURES
                | OPC_ASYNC_EVENT
                | OPC_DOORBELL_BUFFER_CONFIG
        ) {
            return Outcome::status(Status::INVALID_OPCODE);
        }
        // No fused operations (FUSES = 0), no SGLs (SGLS = 0).
        if sqe.fuse() != 0 || sqe.psdt() != 0 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        match sqe.opcode() {
            OPC_DELETE_SQ => self.delete_sq(sqe),
            OPC_CREATE_SQ => self.create_sq(sqe),
            OPC_GET_LOG_PAGE => self.get_log_page(sqe),
            OPC_DELETE_CQ => self.delete_cq(sqe),
            OPC_CREATE_CQ => self.create_cq(sqe),
            OPC_IDENTIFY => self.identify(sqe),
            OPC_ABORT => self.abort(sqe),
            OPC_SET_FEATURES => self.set_features(sqe),
            OPC_GET_FEATURES => self.get_features(sqe),
            OPC_ASYNC_EVENT => self.async_event_request(sqe),
            OPC_DOORBELL_BUFFER_CONFIG => self.doorbell_buffer_config(sqe),
            _ => Outcome::status(Status::INVALID_OPCODE),
        }
    }

    fn async_event_request(&mut self, sqe: &Sqe) -> Outcome {
        if self.aers.len() >= AER_LIMIT {
            return Outcome::status(Status::ASYNC_EVENT_LIMIT_EXCEEDED);
        }
        // A pending event completes it right after this fetch (see process_sq).
        self.aers.push(sqe.cid());
        Outcome::Held
    }

    /// Abort: only a held AER can still be aborted (every other command completes inline,
    /// before the host could name it). DW0 bit 0 = 1: not aborted.
    fn abort(&mut self, sqe: &Sqe) -> Outcome {
        let sqid = sqe.cdw(10) as u16;
        let cid = (sqe.cdw(10) >> 16) as u16;
        // Room for the aborted AER's CQE and the Abort's own.
        if sqid == 0 && self.cq_room(0) >= 2 {
            if let Some(i) = self.aers.iter().position(|&c| c == cid) {
                self.aers.remove(i);
                let t = self.now_ns();
                self.post(Completion::admin(cid, OPC_ASYNC_EVENT, Status::ABORT_REQUESTED, 0, t));
                return Outcome::Complete(Status::SUCCESS, 0, 0);
            }
        }
        Outcome::Complete(Status::SUCCESS, 1, 0)
    }

    /// Copy `data` to the host buffer of the command (PRP1/PRP2).
    pub(crate) fn host_data_out(&self, sqe: &Sqe, data: &[u8]) -> Result<(), Status> {
        if data.len() > self.cfg.max_transfer() {
            return Err(Status::INVALID_FIELD);
        }
        let segs = prp::segments(&self.mem, sqe.prp1(), sqe.prp2(), data.len(), PAGE)?;
        prp::scatter(&self.mem, &segs, data)
    }

    /// Read `len` bytes from the host buffer of the command (PRP1/PRP2).
    pub(crate) fn host_data_in(&self, sqe: &Sqe, len: usize) -> Result<Vec<u8>, Status> {
        if len > self.cfg.max_transfer() {
            return Err(Status::INVALID_FIELD);
        }
        let segs = prp::segments(&self.mem, sqe.prp1(), sqe.prp2(), len, PAGE)?;
        let mut buf = vec![0u8; len];
        prp::gather(&self.mem, &segs, &mut buf)?;
        Ok(buf)
    }
}

/// Turn a data transfer result into an outcome with DW0 = 0.
pub(crate) fn done(r: Result<(), Status>) -> Outcome {
    match r {
        Ok(()) => Outcome::status(Status::SUCCESS),
        Err(s) => Outcome::status(s),
    }
}
