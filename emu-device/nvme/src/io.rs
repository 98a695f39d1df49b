//! NVM command set I/O: Read (02h), Write (01h), Flush (00h) here; Compare (05h), Write
//! Zeroes (08h), Dataset Management (09h) and Verify (0Ch) in `nvm_ops`. Other opcodes:
//! Invalid Opcode (whatever PSDT says). Data moves through PRP1/PRP2/PRP lists; a transfer
//! above MDTS is Invalid Field.

use crate::admin::identify_nsid;
use crate::command::{Outcome, Sqe, PAGE};
use crate::{prp, Controller, MediaEvent, Status};

pub(crate) const OPC_FLUSH: u8 = 0x00;
pub(crate) const OPC_WRITE: u8 = 0x01;
pub(crate) const OPC_READ: u8 = 0x02;
pub(crate) const OPC_COMPARE: u8 = 0x05;
pub(crate) const OPC_WRITE_ZEROES: u8 = 0x08;
pub(crate) const OPC_DSM: u8 = 0x09;
pub(crate) const OPC_VERIFY: u8 = 0x0C;

impl Controller {
    pub(crate) fn io(&mut self, qid: u16, sqe: &Sqe, t0: u64) -> Outcome {
        let op = sqe.opcode();
        if !matches!(
            op,
            OPC_FLUSH | OPC_WRITE | OPC_READ | OPC_COMPARE | OPC_WRITE_ZEROES | OPC_DSM | OPC_VERIFY
        ) {
            return Outcome::status(Status::INVALID_OPCODE);
        }
        if sqe.fuse() != 0 || sqe.psdt() != 0 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let nsid = sqe.nsid();
        if op == OPC_FLUSH {
            if nsid != identify_nsid() && nsid != 0xFFFF_FFFF {
                return Outcome::status(Status::INVALID_NAMESPACE);
            }
            self.counters.flushes += 1;
            return match self.ns.flush() {
                Ok(()) => Outcome::status(Status::SUCCESS),
                Err(e) => {
                    log::warn!("nvme: flush of the backing store: {e}");
                    Outcome::status(Status::INTERNAL_ERROR)
                }
            };
        }
        if nsid != identify_nsid() {
            return Outcome::status(Status::INVALID_NAMESPACE);
        }
        match op {
            OPC_COMPARE => return self.compare(qid, sqe, t0),
            OPC_WRITE_ZEROES => return self.write_zeroes(sqe),
            OPC_DSM => return self.dataset_management(sqe),
            OPC_VERIFY => return self.verify(qid, sqe, t0),
            _ => {}
        }
        let slba = u64::from(sqe.cdw(10)) | u64::from(sqe.cdw(11)) << 32;
        let nlb = u64::from(sqe.cdw(12) & 0xffff) + 1;
        if slba.checked_add(nlb).is_none_or(|end| end > self.ns.lbas()) {
            return Outcome::status(Status::LBA_OUT_OF_RANGE);
        }
        let shift = self.ns.lba_shift;
        let len = (nlb << shift) as usize;
        if len > self.cfg.max_transfer() {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let segs = match prp::segments(&self.mem, sqe.prp1(), sqe.prp2(), len, PAGE) {
            Ok(s) => s,
            Err(s) => return Outcome::status(s),
        };
        let off = slba << shift;
        let mut buf = std::mem::take(&mut self.scratch);
        buf.resize(len, 0);
        let write = op == OPC_WRITE;
        let result = if write {
            prp::gather(&self.mem, &segs, &mut buf).and_then(|()| {
                self.ns.write(off, &buf).map_err(|e| {
                    log::warn!("nvme: write to the backing store: {e}");
                    Status::INTERNAL_ERROR
                })
            })
        } else {
            self.ns
                .read(off, &mut buf)
                .map_err(|e| {
                    log::warn!("nvme: read from the backing store: {e}");
                    Status::INTERNAL_ERROR
                })
                .and_then(|()| prp::scatter(&self.mem, &segs, &buf))
        };
        self.scratch = buf;
        if let Err(s) = result {
            return Outcome::status(s);
        }
        if write {
            self.counters.writes += 1;
            self.counters.bytes_written += len as u64;
        } else {
            self.counters.reads += 1;
            self.counters.bytes_read += len as u64;
        }
        let end = self.model_media(qid, sqe, write, off, len as u64, t0);
        Outcome::Complete(Status::SUCCESS, 0, end)
    }

    /// Media model: the NAND work a command causes, told to the observer in order; returns
    /// the time the last operation ends.
    pub(crate) fn model_media(&mut self, qid: u16, sqe: &Sqe, write: bool, off: u64, len: u64, t0: u64) -> u64 {
        let mut ops = std::mem::take(&mut self.media_ops);
        ops.clear();
        let end = self.media.service(write, off, len, t0, &mut ops);
        for op in &ops {
            self.observer.on_media(&MediaEvent {
                qid,
                cid: sqe.cid(),
                op: *op,
            });
        }
        self.media_ops = ops;
        end
    }
}
