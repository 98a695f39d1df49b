//! Doorbell Buffer Config (7Ch, OACS bit 8): PRP1 the shadow doorbell buffer, PRP2 the
//! EventIdx buffer, each memory page aligned and wholly in guest memory for every queue
//! pair the controller supports; else Invalid Field in Command. A later config replaces
//! the buffers; a controller reset (CC.EN 1 -> 0, transport reset) forgets them. Used for
//! I/O queues only (shadow.rs).

use crate::command::{Outcome, Sqe, PAGE};
use crate::shadow::{DoorbellBuffers, PAIR_BYTES};
use crate::{dma, Controller, Status};

impl Controller {
    pub(crate) fn doorbell_buffer_config(&mut self, sqe: &Sqe) -> Outcome {
        let (dbs, eis) = (sqe.prp1(), sqe.prp2());
        let len = self.sqs.len() as u64 * PAIR_BYTES;
        let usable = |a: u64| a.is_multiple_of(PAGE) && dma::mapped(&self.mem, a, len);
        // The two must not overlap: the controller writes one and reads the other.
        if !usable(dbs) || !usable(eis) || dbs.abs_diff(eis) < len {
            return Outcome::status(Status::INVALID_FIELD);
        }
        self.dbbuf = Some(DoorbellBuffers { dbs, eis });
        for q in 1..self.sqs.len() as u16 {
            self.init_shadow_cq(q);
            self.init_shadow_sq(q);
        }
        Outcome::status(Status::SUCCESS)
    }
}
