//! Create / Delete I/O Submission and Completion Queues (01h, 00h, 05h, 04h).
//! Queues must be physically contiguous (CAP.CQR = 1: PC = 0 is Invalid Field).

use crate::command::{Outcome, Sqe, PAGE};
use crate::queue::{CompQueue, SubQueue, CQE_BYTES, SQE_BYTES};
use crate::regs::{cc_iocqes, cc_iosqes};
use crate::{dma, Controller, Status};

impl Controller {
    /// Check QID, QSIZE and the queue memory common to both creations.
    fn check_new_queue(&self, sqe: &Sqe, allocated: u16, exists: bool, entry: u64) -> Result<(u16, u32), Status> {
        let qid = sqe.cdw(10) as u16;
        let entries = (sqe.cdw(10) >> 16) + 1;
        if qid == 0 || qid > allocated || usize::from(qid) >= self.sqs.len() || exists {
            return Err(Status::INVALID_QUEUE_IDENTIFIER);
        }
        if entries < 2 || entries > u32::from(self.cfg.mqes) + 1 {
            return Err(Status::INVALID_QUEUE_SIZE);
        }
        if sqe.cdw(11) & 1 == 0 {
            return Err(Status::INVALID_FIELD); // PC = 0: lists of pages are not supported
        }
        let base = sqe.prp1();
        if !base.is_multiple_of(PAGE) {
            return Err(Status::INVALID_PRP_OFFSET);
        }
        if !dma::mapped(&self.mem, base, u64::from(entries) * entry) {
            return Err(Status::INVALID_FIELD);
        }
        Ok((qid, entries))
    }

    pub(crate) fn create_cq(&mut self, sqe: &Sqe) -> Outcome {
        if cc_iocqes(self.cc()) != 4 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let (_, ncq) = self.queue_allocation();
        let qid = sqe.cdw(10) as u16;
        let exists = self.cqs.get(usize::from(qid)).is_some_and(Option::is_some);
        let (qid, entries) = match self.check_new_queue(sqe, ncq + 1, exists, CQE_BYTES) {
            Ok(v) => v,
            Err(s) => return Outcome::status(s),
        };
        let ien = sqe.cdw(11) & 2 != 0;
        let iv = (sqe.cdw(11) >> 16) as u16;
        if ien && iv >= self.cfg.interrupt_vectors {
            return Outcome::status(Status::INVALID_INTERRUPT_VECTOR);
        }
        self.cqs[usize::from(qid)] = Some(CompQueue::new(sqe.prp1(), entries, iv, ien));
        self.init_shadow_cq(qid);
        Outcome::status(Status::SUCCESS)
    }

    pub(crate) fn create_sq(&mut self, sqe: &Sqe) -> Outcome {
        if cc_iosqes(self.cc()) != 6 {
            return Outcome::status(Status::INVALID_FIELD);
        }
        let cqid = (sqe.cdw(11) >> 16) as u16;
        if cqid == 0 || !self.cqs.get(usize::from(cqid)).is_some_and(Option::is_some) {
            return Outcome::status(Status::COMPLETION_QUEUE_INVALID);
        }
        let (nsq, _) = self.queue_allocation();
        let qid = sqe.cdw(10) as u16;
        let exists = self.sqs.get(usize::from(qid)).is_some_and(Option::is_some);
        let (qid, entries) = match self.check_new_queue(sqe, nsq + 1, exists, SQE_BYTES) {
            Ok(v) => v,
            Err(s) => return Outcome::status(s),
        };
        self.sqs[usize::from(qid)] = Some(SubQueue::new(sqe.prp1(), entries, cqid));
        self.init_shadow_sq(qid);
        Outcome::status(Status::SUCCESS)
    }

    /// Every command runs inline, so a deleted SQ has nothing left to abort; completions
    /// the timing model still holds are posted first.
    pub(crate) fn delete_sq(&mut self, sqe: &Sqe) -> Outcome {
        let qid = usize::from(sqe.cdw(10) as u16);
        if qid == 0 || !self.sqs.get(qid).is_some_and(Option::is_some) {
            return Outcome::status(Status::INVALID_QUEUE_IDENTIFIER);
        }
        self.post_deferred_of_sq(qid as u16);
        self.sqs[qid] = None;
        Outcome::status(Status::SUCCESS)
    }

    pub(crate) fn delete_cq(&mut self, sqe: &Sqe) -> Outcome {
        let qid = sqe.cdw(10) as u16;
        if qid == 0 || !self.cqs.get(usize::from(qid)).is_some_and(Option::is_some) {
            return Outcome::status(Status::INVALID_QUEUE_IDENTIFIER);
        }
        if self.sqs.iter().flatten().any(|s| s.cqid == qid) {
            return Outcome::status(Status::INVALID_QUEUE_DELETION);
        }
        self.cqs[usize::from(qid)] = None;
        Outcome::status(Status::SUCCESS)
    }
}
