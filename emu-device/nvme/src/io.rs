//! NVM command set I/O: Read (02h), Write (01h), Flush (00h) here; Compare (05h), Write
//! Zeroes (08h), Dataset Management (09h) and Verify (0Ch) in `nvm_ops`. Other opcodes:
//! Invalid Opcode (whatever PSDT says). Data moves through PRP1/PRP2/PRP lists; a transfer
//! above MDTS is Invalid Field.

use crate::admin::identify_nsid;
use crate::command::{Outcome, Sqe, PAGE};
use crate::guest_read::GuestRead;
use crate::guest_write::GuestWrite;
use hmb_ftl::FtlEvent;

use crate::namespace::DataError;
use crate::{prp, Controller, Status};
use vm_memory::GuestAddressSpace;

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
        self.sync_map_cache((qid, sqe.cid()), t0);
        if op == OPC_FLUSH {
            if nsid != identify_nsid() && nsid != 0xFFFF_FFFF {
                return Outcome::status(Status::INVALID_NAMESPACE);
            }
            self.counters.flushes += 1;
            let mut ev = self.media.take_events();
            let r = data_status(self.ns.flush_at(t0, &mut ev), "flush of");
            let end = self.report_media(qid, sqe.cid(), ev, t0);
            return match r {
                Ok(_) => Outcome::Complete(Status::SUCCESS, 0, end),
                Err(s) => Outcome::status(s),
            };
        }
        if nsid != identify_nsid() {
            return Outcome::status(Status::INVALID_NAMESPACE);
        }
        match op {
            OPC_COMPARE => return self.compare(qid, sqe, t0),
            OPC_WRITE_ZEROES => return self.write_zeroes(qid, sqe, t0),
            OPC_DSM => return self.dataset_management(qid, sqe, t0),
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
        let write = op == OPC_WRITE;
        let mut ev = self.media.take_events();
        let result = if write {
            // Straight from the command's guest pages (guest_write.rs); `guard` keeps
            // them mapped until the FTL has written them.
            let guard = self.mem.memory();
            GuestWrite::new(&guard, &segs)
                .and_then(|source| data_status(self.ns.write_from(off, &source, t0, &mut ev), "write to"))
        } else {
            // Straight into the command's guest pages (guest_read.rs).
            let mut target = GuestRead::new(&self.mem, &segs, &mut self.scratch);
            data_status(self.ns.read_into(off, len, &mut target, t0, &mut ev), "read from")
                .and_then(|end| target.finish().map(|()| end))
        };
        let end = self.report_media(qid, sqe.cid(), ev, t0);
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
        Outcome::Complete(Status::SUCCESS, 0, end)
    }

    /// Tell the observer, in order, the NAND operations of a command's FTL events (taken
    /// with `self.media.take_events()`); returns when the last one ends (`t0` if none).
    pub(crate) fn report_media(&mut self, qid: u16, cid: u16, ev: Vec<FtlEvent>, t0: u64) -> u64 {
        let end = self.report_ftl(Some((qid, cid)), &ev, t0);
        self.media.events = ev;
        end
    }

    /// Tell the observer every FTL event of `command` (None: background) and keep the HMB
    /// audit in step; returns when the last NAND operation ends (`t0` if none).
    pub(crate) fn report_ftl(&mut self, command: Option<(u16, u16)>, ev: &[FtlEvent], t0: u64) -> u64 {
        let mut end = t0;
        for e in ev {
            if let FtlEvent::Nand(op) = e {
                end = end.max(op.start_ns + u64::from(op.latency_ns));
                self.media.ops += 1;
            }
        }
        let cache_in_hmb = self.ns.cache_home.in_hmb();
        self.note_ftl(command, t0, cache_in_hmb, ev);
        self.note_cache_events(ev);
        end
    }
}

/// A data path result as an NVMe status (the error logged).
pub(crate) fn data_status<T>(r: Result<T, DataError>, what: &str) -> Result<T, Status> {
    r.map_err(|e| {
        log::warn!("nvme: {what} the namespace: {e}");
        Status::INTERNAL_ERROR
    })
}
