//! A submission queue entry, what executing one leads to, and the memory page size: the
//! vocabulary `controller`, `doorbell`, `admin` and the NVM command files share. A leaf
//! module so that the command files need not import the controller that calls them.

use crate::Status;

/// What executing a command leads to.
pub(crate) enum Outcome {
    /// Post a CQE now: status, DW0, end of the command's modelled media work (ns).
    Complete(Status, u32, u64),
    /// Held without a CQE (Asynchronous Event Request).
    Held,
}

impl Outcome {
    pub(crate) fn status(s: Status) -> Outcome {
        Outcome::Complete(s, 0, 0)
    }
}

/// A completion queue entry to post, and what the observer is told with it: one value
/// that `doorbell.rs` posts and `timing.rs` holds until its modelled end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Completion {
    pub(crate) cqid: u16,
    pub(crate) sqid: u16,
    pub(crate) cid: u16,
    pub(crate) opcode: u8,
    pub(crate) status: Status,
    pub(crate) dw0: u32,
    /// When the command was fetched (controller clock, ns).
    pub(crate) t0: u64,
    /// End of the command's modelled media work (ns; 0: none). Under the timing model the
    /// completion is due then.
    pub(crate) media_end: u64,
}

impl Completion {
    /// An admin completion made outside its command's own run (an AER completed by an
    /// event or aborted), at `t`, with no media work.
    pub(crate) fn admin(cid: u16, opcode: u8, status: Status, dw0: u32, t: u64) -> Completion {
        Completion {
            cqid: 0,
            sqid: 0,
            cid,
            opcode,
            status,
            dw0,
            t0: t,
            media_end: 0,
        }
    }
}

/// A 64-byte submission queue entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sqe(pub [u32; 16]);

impl Sqe {
    pub fn opcode(&self) -> u8 {
        self.0[0] as u8
    }
    pub fn fuse(&self) -> u32 {
        (self.0[0] >> 8) & 3
    }
    pub fn psdt(&self) -> u32 {
        (self.0[0] >> 14) & 3
    }
    pub fn cid(&self) -> u16 {
        (self.0[0] >> 16) as u16
    }
    pub fn nsid(&self) -> u32 {
        self.0[1]
    }
    pub fn prp1(&self) -> u64 {
        u64::from(self.0[6]) | u64::from(self.0[7]) << 32
    }
    pub fn prp2(&self) -> u64 {
        u64::from(self.0[8]) | u64::from(self.0[9]) << 32
    }
    /// Command dword 10..15.
    pub fn cdw(&self, n: usize) -> u32 {
        self.0[n]
    }
}

/// Memory page size: CC.MPS = 0 is the only one CAP allows.
pub(crate) const PAGE: u64 = 4096;
