//! The NAND timing model: dies and channels as resources that are busy until a time.
//!
//! A read senses the page on its die (tR), then moves it over the die's channel (the
//! transfer time of one page); the die holds the page in its register until the transfer
//! is done, so it is busy for both. A program first moves the data over the channel into
//! the die's register (channel and die both needed), then programs it (tPROG, die only).
//! An erase needs the die only. An operation starts when the request, its die and (for
//! the transfer) its channel are ready, so operations on one die never overlap, dies on
//! one channel share its transfers, and different channels work in parallel. The times
//! are on the caller's clock (the controller's: ns since it started); `NandOp::wait_ns`
//! is the time spent waiting for the die or the channel, `latency_ns` the op's own work.

use crate::events::{NandOp, NandOpKind, Purpose};
use crate::geometry::Place;
use crate::FtlConfig;

pub(crate) struct DieClock {
    die_busy_until: Vec<u64>,
    channel_busy_until: Vec<u64>,
    read_ns: u64,
    program_ns: u64,
    erase_ns: u64,
    transfer_ns: u64,
}

impl DieClock {
    pub fn new(cfg: &FtlConfig, dies: u32) -> Self {
        DieClock {
            die_busy_until: vec![0; dies as usize],
            channel_busy_until: vec![0; usize::from(cfg.channels)],
            read_ns: u64::from(cfg.read_ns),
            program_ns: u64::from(cfg.program_ns),
            erase_ns: u64::from(cfg.erase_ns),
            transfer_ns: u64::from(cfg.transfer_ns),
        }
    }

    pub fn run(&mut self, kind: NandOpKind, purpose: Purpose, at: Place, now: u64, erase_count: u32) -> NandOp {
        let die = &mut self.die_busy_until[at.die_index as usize];
        let channel = &mut self.channel_busy_until[usize::from(at.channel)];
        let ready = now.max(*die);
        // `end`: when the op's work is done; `work`: its own durations (sense/program/erase
        // and transfer).
        let (end, work) = match kind {
            NandOpKind::Read => {
                let sensed = ready + self.read_ns;
                let xfer = sensed.max(*channel);
                let end = xfer + self.transfer_ns;
                *channel = end;
                (end, self.read_ns + self.transfer_ns)
            }
            NandOpKind::Program => {
                let xfer = ready.max(*channel);
                *channel = xfer + self.transfer_ns;
                (
                    xfer + self.transfer_ns + self.program_ns,
                    self.transfer_ns + self.program_ns,
                )
            }
            NandOpKind::Erase => (ready + self.erase_ns, self.erase_ns),
        };
        *die = end;
        // Drawn as one stretch [start, end): the op's work ends at `end` and starts its
        // `work` before (a read that waited for the channel between sense and transfer
        // sensed earlier, but its die was busy all along), so one die's stretches never
        // overlap. The rest of end - now is waiting.
        let start = end - work;
        NandOp {
            kind,
            purpose,
            channel: at.channel,
            die: at.die,
            block: at.block,
            page: at.page,
            start_ns: start,
            latency_ns: u32::try_from(work).unwrap_or(u32::MAX),
            wait_ns: start - now,
            erase_count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> FtlConfig {
        FtlConfig {
            channels: 2,
            dies_per_channel: 2,
            read_ns: 50,
            program_ns: 600,
            erase_ns: 3000,
            transfer_ns: 5,
            ..Default::default()
        }
    }

    /// Die index d is channel d % 2, die d / 2 (geometry.rs's striping).
    fn place(die_index: u32) -> Place {
        Place {
            die_index,
            channel: (die_index % 2) as u8,
            die: (die_index / 2) as u8,
            block: 0,
            page: 0,
        }
    }

    /// When the op is done: the request time plus its waiting and its work.
    fn end(now: u64, op: &NandOp) -> u64 {
        now + op.wait_ns + u64::from(op.latency_ns)
    }

    #[test]
    fn operations_on_one_die_queue_behind_each_other() {
        let mut c = DieClock::new(&cfg(), 4);
        let a = c.run(NandOpKind::Read, Purpose::Host, place(0), 100, 0);
        let b = c.run(NandOpKind::Read, Purpose::Host, place(0), 100, 0);
        assert_eq!((a.start_ns, a.latency_ns, a.wait_ns), (100, 55, 0));
        // The second waits for the whole first read (sense and transfer).
        assert_eq!((b.start_ns, b.wait_ns), (155, 55));
        let e = c.run(NandOpKind::Erase, Purpose::Gc, place(0), 100, 1);
        assert_eq!((e.start_ns, e.latency_ns, e.wait_ns), (210, 3000, 110));
        assert_eq!(end(100, &e), 3210);
        assert_eq!(end(100, &b), 210);
    }

    #[test]
    fn different_channels_work_in_parallel() {
        let mut c = DieClock::new(&cfg(), 4);
        let a = c.run(NandOpKind::Program, Purpose::Host, place(0), 0, 0);
        let b = c.run(NandOpKind::Program, Purpose::Host, place(1), 0, 0);
        assert_eq!((a.wait_ns, b.wait_ns), (0, 0), "two channels, two dies: no waiting");
        assert_eq!(a.start_ns + u64::from(a.latency_ns), 605);
        assert_eq!(b.start_ns + u64::from(b.latency_ns), 605);
    }

    #[test]
    fn dies_on_one_channel_share_its_transfers_only() {
        let mut c = DieClock::new(&cfg(), 4);
        // Dies 0 and 2 are both on channel 0: the second program's transfer waits for the
        // first's (5 ns), not for its 600 ns of programming.
        let a = c.run(NandOpKind::Program, Purpose::Host, place(0), 0, 0);
        let b = c.run(NandOpKind::Program, Purpose::Host, place(2), 0, 0);
        assert_eq!((a.wait_ns, b.wait_ns), (0, 5));
        // Reads on them sense in parallel and transfer one after the other: the second
        // ends 5 ns later, drawn as its 55 ns ending then.
        let mut c = DieClock::new(&cfg(), 4);
        let a = c.run(NandOpKind::Read, Purpose::Host, place(0), 0, 0);
        let b = c.run(NandOpKind::Read, Purpose::Host, place(2), 0, 0);
        assert_eq!((a.wait_ns, b.wait_ns), (0, 5));
        assert_eq!((a.start_ns, b.start_ns), (0, 5));
    }
}
