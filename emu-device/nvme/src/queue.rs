//! Submission and completion queue state (physically contiguous, CAP.CQR = 1).

pub(crate) const SQE_BYTES: u64 = 64;
pub(crate) const CQE_BYTES: u64 = 16;

#[derive(Clone, Debug)]
pub(crate) struct SubQueue {
    pub base: u64,
    /// Entries (1-based).
    pub entries: u32,
    pub head: u32,
    pub tail: u32,
    pub cqid: u16,
    pub fetched: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct CompQueue {
    pub base: u64,
    pub entries: u32,
    pub head: u32,
    pub tail: u32,
    pub phase: bool,
    pub iv: u16,
    pub ien: bool,
    pub posted: u64,
    /// Slots held for completions the timing model defers (timing.rs).
    pub reserved: u32,
}

impl SubQueue {
    pub fn new(base: u64, entries: u32, cqid: u16) -> Self {
        SubQueue {
            base,
            entries,
            head: 0,
            tail: 0,
            cqid,
            fetched: 0,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.head == self.tail
    }
    pub fn entry_addr(&self) -> u64 {
        self.base + u64::from(self.head) * SQE_BYTES
    }
}

impl CompQueue {
    pub fn new(base: u64, entries: u32, iv: u16, ien: bool) -> Self {
        CompQueue {
            base,
            entries,
            head: 0,
            tail: 0,
            phase: true,
            iv,
            ien,
            posted: 0,
            reserved: 0,
        }
    }
    /// Full when one more entry would make tail catch up with head.
    pub fn is_full(&self) -> bool {
        (self.tail + 1) % self.entries == self.head
    }
    /// Room for one more command's completion: a free slot not held for a deferred one.
    pub fn has_room(&self) -> bool {
        (self.head + self.entries - self.tail - 1) % self.entries > self.reserved
    }
    /// A new head (doorbell or shadow) may move over posted entries only, never past
    /// the tail.
    pub fn head_move_is_valid(&self, head: u32) -> bool {
        let posted = (self.tail + self.entries - self.head) % self.entries;
        let moved = (head.wrapping_add(self.entries).wrapping_sub(self.head)) % self.entries;
        head < self.entries && moved <= posted
    }
    pub fn slot_addr(&self) -> u64 {
        self.base + u64::from(self.tail) * CQE_BYTES
    }
    pub fn advance(&mut self) {
        self.tail += 1;
        if self.tail == self.entries {
            self.tail = 0;
            self.phase = !self.phase;
        }
        self.posted += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_queue_wraps_and_flips_phase() {
        let mut cq = CompQueue::new(0, 2, 0, false);
        assert!(!cq.is_full());
        cq.advance();
        assert!(cq.is_full(), "2 entries hold one completion until the host frees it");
        cq.head = 1;
        cq.advance();
        assert_eq!((cq.tail, cq.phase), (0, false));
    }

    #[test]
    fn a_head_moves_over_posted_entries_only() {
        let mut cq = CompQueue::new(0, 4, 0, false);
        cq.head = 3;
        cq.tail = 1; // entries 3 and 0 posted
        assert!(cq.head_move_is_valid(3) && cq.head_move_is_valid(0) && cq.head_move_is_valid(1));
        assert!(!cq.head_move_is_valid(2), "past the tail");
        assert!(!cq.head_move_is_valid(4), "not a slot");
    }
}
