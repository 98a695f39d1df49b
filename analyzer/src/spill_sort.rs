//! External sort of pccx events by start cycle in bounded memory: events are
//! collected in fixed-size chunks, each chunk is sorted and written to a
//! spill file as a run, and the runs are merged at the end. pccx-lab's
//! memory-mapped viewport binary-searches `start_cycle`, so its files must
//! be sorted; a trace is in record (end-time) order, not start order.
//!
//! The sort is stable: events with the same start cycle keep trace order
//! (earlier runs hold earlier events, and ties in the merge go to the
//! earlier run).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;

use pccx::{FlatEvent, FLAT_EVENT_SIZE};

/// Events held in memory at once (24 bytes each: 6 MiB).
pub const DEFAULT_CHUNK: usize = 1 << 18;
/// Read buffer of all runs together during the merge.
const MERGE_BUFFER_BYTES: usize = 8 << 20;

pub struct SpillSorter {
    chunk: Vec<FlatEvent>,
    capacity: usize,
    spill: BufWriter<File>,
    /// (first event index, event count) of each run in the spill file.
    runs: Vec<(u64, u64)>,
    written: u64,
}

impl SpillSorter {
    /// `spill` is an empty temporary file; `capacity` events per chunk.
    pub fn new(spill: File, capacity: usize) -> Self {
        Self {
            chunk: Vec::with_capacity(capacity.min(DEFAULT_CHUNK)),
            capacity: capacity.max(1),
            spill: BufWriter::new(spill),
            runs: Vec::new(),
            written: 0,
        }
    }

    pub fn push(&mut self, e: FlatEvent) -> std::io::Result<()> {
        self.chunk.push(e);
        if self.chunk.len() >= self.capacity {
            self.flush_run()?;
        }
        Ok(())
    }

    fn flush_run(&mut self) -> std::io::Result<()> {
        if self.chunk.is_empty() {
            return Ok(());
        }
        self.chunk.sort_by_key(|e| e.start_cycle);
        for e in &self.chunk {
            self.spill.write_all(&e.encode())?;
        }
        self.runs.push((self.written, self.chunk.len() as u64));
        self.written += self.chunk.len() as u64;
        self.chunk.clear();
        Ok(())
    }

    /// Every event in start-cycle order, passed to `f`.
    pub fn finish(mut self, mut f: impl FnMut(&FlatEvent) -> std::io::Result<()>) -> std::io::Result<()> {
        // A single chunk never touches the disk.
        if self.runs.is_empty() {
            self.chunk.sort_by_key(|e| e.start_cycle);
            return self.chunk.iter().try_for_each(f);
        }
        self.flush_run()?;
        let file = self.spill.into_inner().map_err(|e| e.into_error())?;
        let per_run = (MERGE_BUFFER_BYTES / self.runs.len() / FLAT_EVENT_SIZE).max(256);
        let mut readers: Vec<RunReader> = self
            .runs
            .iter()
            .map(|&(first, count)| RunReader {
                pos: first * FLAT_EVENT_SIZE as u64,
                left: count,
                buf: Vec::new(),
                at: 0,
                per_read: per_run,
            })
            .collect();
        let mut heap = BinaryHeap::with_capacity(readers.len());
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(e) = r.next(&file)? {
                heap.push(Reverse((e.start_cycle, i, Key(e))));
            }
        }
        while let Some(Reverse((_, i, Key(e)))) = heap.pop() {
            f(&e)?;
            if let Some(n) = readers[i].next(&file)? {
                heap.push(Reverse((n.start_cycle, i, Key(n))));
            }
        }
        Ok(())
    }
}

/// Carries the event through the heap; ordering is by (start, run) only.
struct Key(FlatEvent);
impl PartialEq for Key {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    fn cmp(&self, _: &Self) -> std::cmp::Ordering {
        std::cmp::Ordering::Equal
    }
}

/// One run read with positioned reads (runs share one file descriptor,
/// and a cloned descriptor would share its offset too).
struct RunReader {
    pos: u64,
    left: u64,
    buf: Vec<u8>,
    at: usize,
    per_read: usize,
}

impl RunReader {
    fn next(&mut self, file: &File) -> std::io::Result<Option<FlatEvent>> {
        if self.at == self.buf.len() {
            let n = (self.per_read as u64).min(self.left) as usize;
            if n == 0 {
                return Ok(None);
            }
            self.buf.resize(n * FLAT_EVENT_SIZE, 0);
            file.read_exact_at(&mut self.buf, self.pos)?;
            self.pos += self.buf.len() as u64;
            self.left -= n as u64;
            self.at = 0;
        }
        let mut b = [0u8; FLAT_EVENT_SIZE];
        b.copy_from_slice(&self.buf[self.at..self.at + FLAT_EVENT_SIZE]);
        self.at += FLAT_EVENT_SIZE;
        Ok(Some(FlatEvent::decode(&b)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ev(start: u64, tag: u32) -> FlatEvent {
        FlatEvent {
            core_id: tag,
            start_cycle: start,
            duration: 1,
            event_type_id: 0,
        }
    }

    proptest! {
        /// Any input, any chunk size: the output is the stable sort of the input.
        #[test]
        fn equals_a_stable_sort(starts in proptest::collection::vec(0u64..50, 0..400), cap in 1usize..70) {
            let mut s = SpillSorter::new(tempfile::tempfile().unwrap(), cap);
            let input: Vec<FlatEvent> = starts.iter().enumerate().map(|(i, &t)| ev(t, i as u32)).collect();
            for e in &input {
                s.push(*e).unwrap();
            }
            let mut out = Vec::new();
            s.finish(|e| { out.push(*e); Ok(()) }).unwrap();
            let mut want = input.clone();
            want.sort_by_key(|e| e.start_cycle);
            prop_assert_eq!(out, want);
        }
    }
}
