//! Die occupancy: an operation starts when both the request and its die are ready, so
//! operations on one die never overlap and different dies work in parallel.

use crate::events::{NandOp, NandOpKind, Purpose};
use crate::geometry::Place;
use crate::FtlConfig;

pub(crate) struct DieClock {
    busy_until: Vec<u64>,
    read_ns: u32,
    program_ns: u32,
    erase_ns: u32,
}

impl DieClock {
    pub fn new(cfg: &FtlConfig, dies: u32) -> Self {
        DieClock {
            busy_until: vec![0; dies as usize],
            read_ns: cfg.read_ns,
            program_ns: cfg.program_ns,
            erase_ns: cfg.erase_ns,
        }
    }

    pub fn run(&mut self, kind: NandOpKind, purpose: Purpose, at: Place, now: u64, erase_count: u32) -> NandOp {
        let latency = match kind {
            NandOpKind::Read => self.read_ns,
            NandOpKind::Program => self.program_ns,
            NandOpKind::Erase => self.erase_ns,
        };
        let busy = &mut self.busy_until[at.die_index as usize];
        let start = now.max(*busy);
        *busy = start + u64::from(latency);
        NandOp {
            kind,
            purpose,
            channel: at.channel,
            die: at.die,
            block: at.block,
            page: at.page,
            start_ns: start,
            latency_ns: latency,
            wait_ns: start - now,
            erase_count,
        }
    }
}
