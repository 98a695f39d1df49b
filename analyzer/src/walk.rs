//! Turns items into events with epoch and sequence bookkeeping: which epoch
//! a record belongs to, daemon LOST markers, and sequence gaps no marker
//! explains (derived from the records themselves, as the ABI asks consumers
//! to do).

use hmb_trace_file::{FileHeader, Item, ItemKind, Marker};

#[derive(Debug, Clone, Copy)]
pub enum Event<'a, 'b> {
    Record {
        epoch: u64,
        item: &'b Item<'a>,
    },
    /// A daemon LOST marker.
    Lost {
        offset: u64,
        epoch: u64,
        first_seq: u64,
        count: u64,
    },
    /// Sequence numbers missing with no LOST marker for them, found at the
    /// record at `offset` (whose timestamp is `timestamp_ns`).
    Gap {
        offset: u64,
        epoch: u64,
        first_seq: u64,
        count: u64,
        timestamp_ns: u64,
    },
    Frozen {
        offset: u64,
        epoch: u64,
        last_seq: Option<u64>,
        next_seq: u64,
    },
    EpochStart {
        offset: u64,
        epoch: u64,
        ring_size: u64,
    },
    UnknownMarker {
        offset: u64,
        opcode: u16,
    },
    /// A record whose seq is not above the previous one in its epoch.
    SeqBackwards {
        offset: u64,
        epoch: u64,
        seq: u64,
        expected: u64,
    },
}

/// Epoch and sequence state across a walk.
pub struct Walker {
    epoch: u64,
    /// Next seq expected in this epoch; None until the file's first record
    /// (a file may start in the middle of an epoch).
    expected: Option<u64>,
    /// Records were removed on purpose (a filtered file): gaps are not losses.
    filtered: bool,
}

impl Walker {
    pub fn new(header: &FileHeader) -> Self {
        Self {
            epoch: header.first_epoch,
            expected: None,
            filtered: header.is_filtered(),
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn feed<'a, 'b>(&mut self, item: &'b Item<'a>, out: &mut impl FnMut(Event<'a, 'b>)) {
        let offset = item.offset;
        let kind = match item.kind() {
            Ok(k) => k,
            // Readers validate markers before handing items out.
            Err(_) => ItemKind::Marker(Marker::Unknown { opcode: item.opcode() }),
        };
        match kind {
            ItemKind::Record => {
                let seq = item.seq();
                match self.expected {
                    Some(want) if seq > want && !self.filtered => out(Event::Gap {
                        offset,
                        epoch: self.epoch,
                        first_seq: want,
                        count: seq - want,
                        timestamp_ns: item.timestamp_ns(),
                    }),
                    Some(want) if seq < want => out(Event::SeqBackwards {
                        offset,
                        epoch: self.epoch,
                        seq,
                        expected: want,
                    }),
                    _ => {}
                }
                self.expected = Some(self.expected.map_or(seq + 1, |w| w.max(seq.saturating_add(1))));
                out(Event::Record {
                    epoch: self.epoch,
                    item,
                });
            }
            ItemKind::Marker(Marker::Lost {
                first_seq,
                count,
                epoch,
            }) => {
                if epoch == self.epoch {
                    let end = first_seq.saturating_add(count);
                    self.expected = Some(self.expected.map_or(end, |w| w.max(end)));
                }
                out(Event::Lost {
                    offset,
                    epoch,
                    first_seq,
                    count,
                });
            }
            ItemKind::Marker(Marker::Frozen {
                epoch,
                last_seq,
                next_seq,
            }) => {
                // next_seq is final once frozen: drops after the last record
                // that no LOST marker covered are losses too.
                if epoch == self.epoch && !self.filtered {
                    if let Some(want) = self.expected.filter(|&w| next_seq > w) {
                        out(Event::Gap {
                            offset,
                            epoch,
                            first_seq: want,
                            count: next_seq - want,
                            timestamp_ns: 0,
                        });
                        self.expected = Some(next_seq);
                    }
                }
                out(Event::Frozen {
                    offset,
                    epoch,
                    last_seq,
                    next_seq,
                });
            }
            ItemKind::Marker(Marker::Epoch { epoch, ring_size }) => {
                self.epoch = epoch;
                // A new epoch's ring starts at seq 0.
                self.expected = Some(0);
                out(Event::EpochStart {
                    offset,
                    epoch,
                    ring_size,
                });
            }
            ItemKind::Marker(Marker::Unknown { opcode }) => out(Event::UnknownMarker { offset, opcode }),
        }
    }
}
