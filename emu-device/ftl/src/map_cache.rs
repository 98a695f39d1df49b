//! The map cache: map pages held in slots of a [`SlotStore`] (controller SRAM by default,
//! the HMB's cache part when the host lends one), least recently used first out, dirty
//! slots written back to NAND by the FTL when evicted or flushed. The bookkeeping (which
//! map page is in which slot, dirty bits, use order) stays in the controller.

use std::collections::HashMap;
use std::io;

/// Where cached map pages live: `slots()` slots of `page_bytes` each.
pub trait SlotStore: Send {
    fn slots(&self) -> u32;
    /// Bytes `buf.len()` at byte `at` of slot `slot`.
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> io::Result<()>;
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> io::Result<()>;
    /// The slot's byte offset in the store (its HMB offset for the HMB's store): for events.
    fn offset(&self, slot: u32) -> u64;
}

/// Slots in controller memory: the small internal cache of a DRAM-less controller.
pub struct VecSlots {
    data: Vec<u8>,
    page_bytes: usize,
}

impl VecSlots {
    pub fn new(slots: u32, page_bytes: usize) -> Self {
        VecSlots {
            data: vec![0; slots as usize * page_bytes],
            page_bytes,
        }
    }

    fn range(&self, slot: u32, at: usize, len: usize) -> io::Result<std::ops::Range<usize>> {
        let start = slot as usize * self.page_bytes + at;
        if at + len > self.page_bytes || start + len > self.data.len() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "outside the slot"));
        }
        Ok(start..start + len)
    }
}

impl SlotStore for VecSlots {
    fn slots(&self) -> u32 {
        (self.data.len() / self.page_bytes) as u32
    }
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> io::Result<()> {
        let r = self.range(slot, at, buf.len())?;
        buf.copy_from_slice(&self.data[r]);
        Ok(())
    }
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> io::Result<()> {
        let r = self.range(slot, at, buf.len())?;
        self.data[r].copy_from_slice(buf);
        Ok(())
    }
    fn offset(&self, slot: u32) -> u64 {
        slot as u64 * self.page_bytes as u64
    }
}

#[derive(Clone, Copy, Default)]
struct SlotMeta {
    map_page: Option<u32>,
    dirty: bool,
    last_use: u64,
}

pub(crate) struct MapCache {
    store: Box<dyn SlotStore>,
    meta: Vec<SlotMeta>,
    slot_of: HashMap<u32, u32>,
    clock: u64,
}

impl MapCache {
    pub fn new(store: Box<dyn SlotStore>) -> Self {
        let n = store.slots() as usize;
        MapCache {
            store,
            meta: vec![SlotMeta::default(); n],
            slot_of: HashMap::new(),
            clock: 0,
        }
    }

    pub fn slots(&self) -> u32 {
        self.meta.len() as u32
    }

    pub fn offset(&self, slot: u32) -> u64 {
        self.store.offset(slot)
    }

    /// The slot holding `map_page`, marked most recently used.
    pub fn find(&mut self, map_page: u32) -> Option<u32> {
        let s = *self.slot_of.get(&map_page)?;
        self.clock += 1;
        self.meta[s as usize].last_use = self.clock;
        Some(s)
    }

    pub fn peek(&self, map_page: u32) -> Option<u32> {
        self.slot_of.get(&map_page).copied()
    }

    /// An empty slot, else the least recently used one.
    pub fn victim(&self) -> u32 {
        let mut best = 0usize;
        for (i, m) in self.meta.iter().enumerate() {
            if m.map_page.is_none() {
                return i as u32;
            }
            if m.last_use < self.meta[best].last_use {
                best = i;
            }
        }
        best as u32
    }

    /// (map page, dirty) in `slot`.
    pub fn occupant(&self, slot: u32) -> Option<(u32, bool)> {
        let m = self.meta[slot as usize];
        m.map_page.map(|p| (p, m.dirty))
    }

    pub fn forget(&mut self, slot: u32) {
        if let Some(p) = self.meta[slot as usize].map_page.take() {
            self.slot_of.remove(&p);
        }
        self.meta[slot as usize].dirty = false;
    }

    pub fn install(&mut self, slot: u32, map_page: u32, bytes: &[u8]) -> io::Result<()> {
        self.forget(slot);
        self.store.write(slot, 0, bytes)?;
        self.clock += 1;
        self.meta[slot as usize] = SlotMeta {
            map_page: Some(map_page),
            dirty: false,
            last_use: self.clock,
        };
        self.slot_of.insert(map_page, slot);
        Ok(())
    }

    pub fn read_page(&self, slot: u32, buf: &mut [u8]) -> io::Result<()> {
        self.store.read(slot, 0, buf)
    }

    pub fn entry(&self, slot: u32, i: u32) -> io::Result<u32> {
        let mut b = [0u8; 4];
        self.store.read(slot, i as usize * 4, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    pub fn set_entry(&mut self, slot: u32, i: u32, v: u32) -> io::Result<()> {
        self.store.write(slot, i as usize * 4, &v.to_le_bytes())?;
        self.meta[slot as usize].dirty = true;
        Ok(())
    }

    pub fn mark_clean(&mut self, slot: u32) {
        self.meta[slot as usize].dirty = false;
    }

    pub fn dirty_slots(&self) -> Vec<u32> {
        (0..self.meta.len() as u32)
            .filter(|&s| self.meta[s as usize].dirty)
            .collect()
    }
}
