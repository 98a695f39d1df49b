//! The NVM commands besides Read/Write/Flush that everyday tools use: Compare (05h),
//! Write Zeroes (08h), Dataset Management (09h, deallocate) and Verify (0Ch).
//!
//! Decisions (docs/nvme-controller.md): deallocated blocks read back as zeroes (DLFEAT
//! 001b), so deallocate and Write Zeroes both deallocate in the FTL (whole pages unmapped,
//! partial pages rewritten with zeroes, the changed map pages written back); neither
//! moves host data. Compare and Verify read the media through the FTL.
//! Write Zeroes and Verify are not bounded by MDTS (no data transfer; WZSL/VSL are 0 =
//! no limit); Compare is, like Read.

use hmb_ftl::FtlEvent;

use crate::command::{Outcome, Sqe};
use crate::io::data_status;
use crate::{Controller, Status};

/// One Dataset Management range: context attributes, length in LBAs, starting LBA.
const DSM_RANGE_BYTES: usize = 16;
/// Dataset Management CDW11 bit 2: Attribute - Deallocate.
const DSM_AD: u32 = 1 << 2;
/// Verify reads in pieces of this size so a large range needs little memory.
const VERIFY_CHUNK: u64 = 1 << 20;

impl Controller {
    /// SLBA (CDW10/11) and NLB (CDW12 bits 15:0, 0-based) as a checked byte range.
    fn lba_range(&self, sqe: &Sqe) -> Result<(u64, u64), Status> {
        let slba = u64::from(sqe.cdw(10)) | u64::from(sqe.cdw(11)) << 32;
        let nlb = u64::from(sqe.cdw(12) & 0xffff) + 1;
        self.byte_range(slba, nlb)
    }

    fn byte_range(&self, slba: u64, nlb: u64) -> Result<(u64, u64), Status> {
        if slba.checked_add(nlb).is_none_or(|end| end > self.ns.lbas()) {
            return Err(Status::LBA_OUT_OF_RANGE);
        }
        let shift = self.ns.lba_shift;
        Ok((slba << shift, nlb << shift))
    }

    /// Deallocate [off, off+len): reads back zeroes.
    fn zero_range(&mut self, off: u64, len: u64, ev: &mut Vec<FtlEvent>, t0: u64) -> Result<u64, Status> {
        data_status(self.ns.zero(off, len, t0, ev), "zeroing")
    }

    pub(crate) fn write_zeroes(&mut self, qid: u16, sqe: &Sqe, t0: u64) -> Outcome {
        let mut ev = self.media.take_events();
        let r = self
            .lba_range(sqe)
            .and_then(|(off, len)| self.zero_range(off, len, &mut ev, t0));
        let end = self.report_media(qid, sqe.cid(), ev, t0);
        match r {
            Ok(_) => {
                self.counters.writes += 1;
                Outcome::Complete(Status::SUCCESS, 0, end)
            }
            Err(s) => Outcome::status(s),
        }
    }

    pub(crate) fn dataset_management(&mut self, qid: u16, sqe: &Sqe, t0: u64) -> Outcome {
        let nr = (sqe.cdw(10) & 0xff) as usize + 1;
        let raw = match self.host_data_in(sqe, nr * DSM_RANGE_BYTES) {
            Ok(b) => b,
            Err(s) => return Outcome::status(s),
        };
        if sqe.cdw(11) & DSM_AD == 0 {
            // Integral read/write hints only: advisory, nothing to do.
            return Outcome::status(Status::SUCCESS);
        }
        // Check every range before changing any, so a bad range leaves the namespace as it was.
        let mut ranges = Vec::with_capacity(nr);
        for r in raw.chunks_exact(DSM_RANGE_BYTES) {
            let nlb = u64::from(u32::from_le_bytes(r[4..8].try_into().expect("4 bytes")));
            let slba = u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"));
            if nlb == 0 {
                continue; // an empty range deallocates nothing
            }
            match self.byte_range(slba, nlb) {
                Ok(br) => ranges.push(br),
                Err(s) => return Outcome::status(s),
            }
        }
        let mut ev = self.media.take_events();
        let mut r = Ok(t0);
        for (off, len) in ranges {
            r = self.zero_range(off, len, &mut ev, t0);
            if r.is_err() {
                break;
            }
        }
        let end = self.report_media(qid, sqe.cid(), ev, t0);
        if let Err(s) = r {
            return Outcome::status(s);
        }
        self.counters.deallocations += 1;
        Outcome::Complete(Status::SUCCESS, 0, end)
    }

    pub(crate) fn compare(&mut self, qid: u16, sqe: &Sqe, t0: u64) -> Outcome {
        let (off, len) = match self.lba_range(sqe) {
            Ok(r) => r,
            Err(s) => return Outcome::status(s),
        };
        let host = match self.host_data_in(sqe, len as usize) {
            Ok(b) => b,
            Err(s) => return Outcome::status(s),
        };
        let mut media = std::mem::take(&mut self.scratch);
        media.resize(len as usize, 0);
        let mut ev = self.media.take_events();
        let r = data_status(self.ns.read(off, &mut media, t0, &mut ev), "read from");
        let same = media == host;
        self.scratch = media;
        let end = self.report_media(qid, sqe.cid(), ev, t0);
        if let Err(s) = r {
            return Outcome::status(s);
        }
        self.counters.reads += 1;
        if same {
            Outcome::Complete(Status::SUCCESS, 0, end)
        } else {
            Outcome::Complete(Status::COMPARE_FAILURE, 0, end)
        }
    }

    /// Verify: read the blocks and check them; without protection information every
    /// readable block verifies, so only a backing-store failure is an error.
    pub(crate) fn verify(&mut self, qid: u16, sqe: &Sqe, t0: u64) -> Outcome {
        let (off, len) = match self.lba_range(sqe) {
            Ok(r) => r,
            Err(s) => return Outcome::status(s),
        };
        let mut buf = std::mem::take(&mut self.scratch);
        let mut ev = self.media.take_events();
        let mut at = 0;
        let mut r = Ok(t0);
        while at < len && r.is_ok() {
            let n = (len - at).min(VERIFY_CHUNK);
            buf.resize(n as usize, 0);
            r = self.ns.read(off + at, &mut buf, t0, &mut ev);
            at += n;
        }
        self.scratch = buf;
        let end = self.report_media(qid, sqe.cid(), ev, t0);
        if let Err(e) = r {
            log::warn!("nvme: verify read of the namespace: {e}");
            return Outcome::status(Status::UNRECOVERED_READ_ERROR);
        }
        Outcome::Complete(Status::SUCCESS, 0, end)
    }
}
