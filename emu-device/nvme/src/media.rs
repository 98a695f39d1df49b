//! The NAND media as the controller's observers see it: hmb-ftl's NAND operations (the
//! FTL in namespace.rs does the work) as [`MediaOp`]s, one per page read, page program or
//! block erase, with the die that ran it and its modelled times.
//!
//! Times are on the controller's clock; under `Timing::Model` (timing.rs) a command's
//! completion waits for the end of its last operation, under `Timing::None` nothing waits.

use serde::Serialize;

use hmb_ftl::{NandOp, NandOpKind};

/// The FTL's geometry, over-provisioning, thresholds and NAND timings.
pub type MediaConfig = hmb_ftl::FtlConfig;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaOpKind {
    Read,
    Program,
    Erase,
}

/// One NAND operation on one die.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MediaOp {
    pub kind: MediaOpKind,
    pub channel: u8,
    pub die: u8,
    pub plane: u8,
    pub block: u32,
    pub page: u32,
    /// When its own work starts (controller clock, ns): at or after the command's fetch;
    /// it ends at `start_ns + latency_ns` (array time plus channel transfer).
    pub start_ns: u64,
    pub latency_ns: u32,
    /// How long it waited for its die or channel (contention).
    pub wait_ns: u64,
    /// Erases of this block so far, this one included (0 for reads/programs).
    pub erase_count: u32,
}

impl From<&NandOp> for MediaOp {
    fn from(op: &NandOp) -> Self {
        MediaOp {
            kind: match op.kind {
                NandOpKind::Read => MediaOpKind::Read,
                NandOpKind::Program => MediaOpKind::Program,
                NandOpKind::Erase => MediaOpKind::Erase,
            },
            channel: op.channel,
            die: op.die,
            plane: 0,
            block: op.block,
            page: op.page,
            start_ns: op.start_ns,
            latency_ns: op.latency_ns,
            wait_ns: op.wait_ns,
            erase_count: op.erase_count,
        }
    }
}

/// The controller's scratch for one command's FTL events and its count of NAND operations.
#[derive(Default)]
pub(crate) struct MediaModel {
    pub(crate) events: Vec<hmb_ftl::FtlEvent>,
    pub(crate) ops: u64,
}

impl MediaModel {
    /// The event buffer, emptied (kept allocated between commands).
    pub(crate) fn take_events(&mut self) -> Vec<hmb_ftl::FtlEvent> {
        let mut ev = std::mem::take(&mut self.events);
        ev.clear();
        ev
    }
}
