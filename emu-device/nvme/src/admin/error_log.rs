//! Error Information log (01h): the newest `ENTRIES` errors, newest first, each 64 bytes
//! (NVMe 1.4 figure 194). Entries are kept across controller resets: the Error Count is
//! a lifetime count, and SMART's "Number of Error Information Log Entries" is the same
//! count (docs/nvme-controller.md, "Error information log").

use std::collections::VecDeque;

use crate::Status;

/// Entries kept (Identify ELPE = ENTRIES - 1).
pub(crate) const ENTRIES: usize = 16;
pub(crate) const ENTRY_BYTES: usize = 64;
/// SQID/CID of an error that belongs to no command (an invalid doorbell write).
pub(crate) const NOT_A_COMMAND: u16 = 0xFFFF;

/// What one entry records.
pub(crate) struct ErrorRecord {
    pub sqid: u16,
    pub cid: u16,
    pub status: Status,
    pub lba: u64,
    pub nsid: u32,
}

#[derive(Default)]
pub(crate) struct ErrorLog {
    /// Errors recorded over the controller's life (the newest entry's Error Count).
    pub count: u64,
    entries: VecDeque<[u8; ENTRY_BYTES]>,
}

impl ErrorLog {
    pub fn record(&mut self, r: &ErrorRecord) {
        self.count += 1;
        let mut e = [0u8; ENTRY_BYTES];
        e[0..8].copy_from_slice(&self.count.to_le_bytes());
        e[8..10].copy_from_slice(&r.sqid.to_le_bytes());
        e[10..12].copy_from_slice(&r.cid.to_le_bytes());
        // Status Field: bits 15:1 the CQE's status, bit 0 the phase tag (recorded as 0).
        e[12..14].copy_from_slice(&(r.status.field() << 1).to_le_bytes());
        // Parameter Error Location: not reported.
        e[14..16].copy_from_slice(&0xFFFFu16.to_le_bytes());
        e[16..24].copy_from_slice(&r.lba.to_le_bytes());
        e[24..28].copy_from_slice(&r.nsid.to_le_bytes());
        // Transport Type (byte 29): 0, PCIe.
        if self.entries.len() == ENTRIES {
            self.entries.pop_back();
        }
        self.entries.push_front(e);
    }

    /// The log page: `ENTRIES` entries, newest first, unused ones zero.
    pub fn page(&self) -> Vec<u8> {
        let mut out = vec![0u8; ENTRIES * ENTRY_BYTES];
        for (slot, e) in out.chunks_exact_mut(ENTRY_BYTES).zip(&self.entries) {
            slot.copy_from_slice(e);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_and_bounded() {
        let mut l = ErrorLog::default();
        for cid in 0..20u16 {
            l.record(&ErrorRecord {
                sqid: 1,
                cid,
                status: Status::LBA_OUT_OF_RANGE,
                lba: u64::from(cid) << 32,
                nsid: 1,
            });
        }
        let p = l.page();
        assert_eq!(p.len(), ENTRIES * ENTRY_BYTES);
        assert_eq!(u64::from_le_bytes(p[0..8].try_into().unwrap()), 20);
        assert_eq!(u16::from_le_bytes(p[10..12].try_into().unwrap()), 19);
        assert_eq!(u64::from_le_bytes(p[16..24].try_into().unwrap()), 19 << 32);
        let last = &p[(ENTRIES - 1) * ENTRY_BYTES..];
        assert_eq!(u64::from_le_bytes(last[0..8].try_into().unwrap()), 5);
        assert_eq!(
            u16::from_le_bytes(p[12..14].try_into().unwrap()) >> 1,
            Status::LBA_OUT_OF_RANGE.field()
        );
    }
}
