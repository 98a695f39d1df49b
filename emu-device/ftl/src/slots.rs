//! Moving the map cache between slot stores: into the HMB when the host lends one, back
//! to the internal SRAM slots when it takes it away, and taking the HMB's slots over as they
//! are when the host gives the same buffer back with memory return (MR=1).

use crate::events::{CorruptionFound, FtlEvent};
use crate::ftl::Ftl;
use crate::map_cache::{MapCache, SlotStore, VecSlots};
use crate::FtlError;

/// What the cache left in a slot store it let go of: (slot, map page, checksum, the PPN of
/// the map page's NAND copy then). A slot is taken over only if that copy is still the
/// newest (the map page did not change while the cache was elsewhere) and its checksum
/// still matches (the host did not write it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheSnapshot {
    slots: Vec<(u32, u32, u64, u32)>,
}

impl CacheSnapshot {
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

impl Ftl {
    /// Put the map cache in `store` (the HMB's cache part). With a snapshot of the same
    /// store (memory return), the slots it lists are taken over without reading NAND if
    /// they are unchanged; a changed one is reported (`CorruptionFound::AtReturn`) and
    /// left empty. Returns the slots taken over.
    pub fn attach_cache(
        &mut self,
        store: Box<dyn SlotStore>,
        snapshot: Option<&CacheSnapshot>,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u32, FtlError> {
        self.write_back_map(now, ev)?;
        self.replace_cache(MapCache::new(store), true);
        let mut reused = 0;
        let mut page = vec![0u8; self.geo.page_bytes as usize];
        for &(slot, idx, checksum, ppn) in snapshot.map(|s| &s.slots[..]).unwrap_or_default() {
            if slot >= self.cache.slots() || self.gtd.get(idx as usize) != Some(&ppn) {
                continue;
            }
            match self.cache.adopt(slot, idx, checksum, &mut page)? {
                Ok(()) => reused += 1,
                Err(found) => self.corrupt(slot, idx, found, CorruptionFound::AtReturn, ev),
            }
        }
        self.stats.cache_slots_reused += u64::from(reused);
        Ok(reused)
    }

    /// Let go of the current slot store (the HMB is going away; call while it is still
    /// readable): every dirty page is checked and written back, every clean one checked,
    /// and the cache goes on in the internal slots. Returns what a memory return may
    /// take over.
    pub fn detach_cache(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<CacheSnapshot, FtlError> {
        match self.write_back_map(now, ev) {
            Ok(_) => {}
            // The store cannot be read any more (guest memory unmapped under the HMB):
            // what it held that NAND lacks is rebuilt from NAND.
            Err(FtlError::Io(_)) => self.rebuild_dirty(now, ev)?,
            Err(e) => return Err(e),
        }
        let mut snap = CacheSnapshot::default();
        let mut page = vec![0u8; self.geo.page_bytes as usize];
        for (slot, idx) in self.cache.occupied() {
            match self.cache.read_checked(slot, &mut page) {
                Ok(Ok(())) => snap
                    .slots
                    .push((slot, idx, self.cache.checksum(slot), self.gtd[idx as usize])),
                Ok(Err(found)) => self.corrupt(slot, idx, found, CorruptionFound::InUse, ev),
                Err(_) => {} // unreadable: nothing to take over later
            }
        }
        let internal = MapCache::new(Box::new(VecSlots::new(
            self.cfg.map_cache_pages,
            self.geo.page_bytes as usize,
        )));
        self.replace_cache(internal, false);
        Ok(snap)
    }

    /// Program every dirty cached map page rebuilt from NAND, without reading its slot.
    fn rebuild_dirty(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<(), FtlError> {
        let mut page = vec![0u8; self.geo.page_bytes as usize];
        for (slot, idx) in self.cache.occupied() {
            if self.cache.is_dirty(slot) {
                self.rebuild_map_page(idx, &mut page)?;
                self.program_map_page(idx, &page, now, ev)?;
                self.cache.forget(slot);
            }
        }
        Ok(())
    }

    /// (slot store offset, checksum) of every page the cache wrote into an external store
    /// (attach_cache) since the last call, also those written just before it let go of
    /// that store: the controller's HMB audit keeps its baseline of those pages from these.
    pub fn drain_cache_updates(&mut self) -> Vec<(u64, u64)> {
        let mut out = std::mem::take(&mut self.pending_updates);
        let now = self.cache.drain_updates();
        if self.cache_external {
            out.extend(now);
        }
        out
    }

    fn replace_cache(&mut self, cache: MapCache, external: bool) {
        let old = std::mem::replace(&mut self.cache, cache).drain_updates_owned();
        if self.cache_external {
            self.pending_updates.extend(old);
        }
        self.cache_external = external;
    }
}
