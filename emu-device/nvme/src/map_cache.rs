//! The FTL's map cache in the HMB's cache part (docs/nvme-controller.md, "The L2P cache in
//! the HMB").
//!
//! Layout: the cache part is every HMB page the controller owns (the descriptor list in
//! list order, minus the trace slice the host shares, audit.rs). Slot i is the i-th owned
//! 4 KiB page, one map page per slot (1024 little-endian 32-bit PPNs), as many slots as the
//! namespace has map pages (all of the map fits: a DRAM-less SSD sizes HMPRE for that) or
//! as the cache part has pages. The slot bookkeeping (map page, dirty, checksum) stays in
//! the controller.
//!
//! Life cycle: the cache moves into the HMB at the first data command once the controller
//! knows which pages are its own (the trace advert adopted or given up), and back to the
//! internal SRAM slots before the HMB goes (EHM=0, CC.EN 1->0, shutdown, CFS, transport
//! reset), after writing its dirty pages to NAND. When the same buffer comes back with
//! MR=1, the slots it left are taken over unread if their checksums still match.
//! The HMB audit's baseline of every slot page follows the cache's writes; a host write
//! the cache finds at a use is an audit violation (while enabled) and the page is reloaded
//! from NAND; one made while the buffer was released is the audit's to report at the
//! return (and the cache does not take that slot over).

use std::io;

use hmb_ftl::{CacheSnapshot, CorruptionFound, FtlEvent, SlotStore};

use crate::{dma, Controller, GuestMem, HmbDescriptor, HostMemoryBuffer};

const SLOT_BYTES: u64 = 4096;

/// Slots in the HMB: each a 4 KiB page of the HMB view, read and written by DMA.
pub(crate) struct HmbSlots {
    mem: GuestMem,
    /// Per slot: its HMB offset and the guest (address, length) pieces of its page.
    slots: Vec<(u64, Vec<(u64, u64)>)>,
}

impl HmbSlots {
    fn new(hmb: &HostMemoryBuffer, offsets: &[u64], mem: GuestMem) -> Option<Self> {
        let mut slots = Vec::with_capacity(offsets.len());
        for &off in offsets {
            slots.push((off, hmb.pieces(off, SLOT_BYTES).ok()?));
        }
        Some(HmbSlots { mem, slots })
    }

    /// Guest memory accesses for [at, at+len) of `slot`: (address, position in the buffer,
    /// length). An iterator, not a list: every map lookup reads its slot, and an update
    /// writes an entry (no allocation per access).
    fn walk(&self, slot: u32, at: usize, len: usize) -> io::Result<impl Iterator<Item = (u64, usize, usize)> + '_> {
        let (_, pieces) = self
            .slots
            .get(slot as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no such cache slot"))?;
        if at + len > SLOT_BYTES as usize {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "outside the cache slot"));
        }
        Ok(pieces
            .iter()
            .scan(0usize, |base, &(addr, n)| {
                let start = *base;
                *base += n as usize;
                Some((addr, start, n as usize))
            })
            .filter_map(move |(addr, base, n)| {
                let from = at.max(base);
                let to = (at + len).min(base + n);
                (from < to).then(|| (addr + (from - base) as u64, from - at, to - from))
            }))
    }
}

fn dma_err(addr: u64) -> io::Error {
    io::Error::other(format!("HMB map cache: guest memory at {addr:#x} not accessible"))
}

impl SlotStore for HmbSlots {
    fn slots(&self) -> u32 {
        self.slots.len() as u32
    }
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> io::Result<()> {
        for (addr, pos, n) in self.walk(slot, at, buf.len())? {
            dma::read(&self.mem, addr, &mut buf[pos..pos + n]).map_err(|()| dma_err(addr))?;
        }
        Ok(())
    }
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> io::Result<()> {
        for (addr, pos, n) in self.walk(slot, at, buf.len())? {
            dma::write(&self.mem, addr, &buf[pos..pos + n]).map_err(|()| dma_err(addr))?;
        }
        Ok(())
    }
    fn offset(&self, slot: u32) -> u64 {
        self.slots.get(slot as usize).map_or(0, |s| s.0)
    }
}

/// The trace slice the host shares, (HMB offset, length), if any.
type Slice = Option<(u64, u64)>;

/// Where the map cache is, and what it left in the last HMB.
#[derive(Default)]
pub(crate) struct CacheHome {
    /// In the HMB now: the shared slice it was placed around.
    in_hmb: Option<Slice>,
    /// Left in an HMB that went away: its list, the slice, and the slots.
    left: Option<(Vec<HmbDescriptor>, Slice, CacheSnapshot)>,
}

impl CacheHome {
    pub(crate) fn in_hmb(&self) -> bool {
        self.in_hmb.is_some()
    }
}

impl Controller {
    /// Before a data command: put the map cache in the HMB if one is enabled, the
    /// controller's pages are known, and it is not there yet (or the shared slice moved).
    pub(crate) fn sync_map_cache(&mut self, command: (u16, u16), now: u64) {
        if self.hmb.is_none() || self.audit.pending() {
            return;
        }
        let slice = self.vendor.shared_slice();
        match self.ns.cache_home.in_hmb {
            Some(s) if s == slice => return,
            Some(_) => {
                let descs = self.hmb.as_ref().map(|h| h.descriptors().to_vec()).unwrap_or_default();
                self.leave_hmb(descs, Some(command), now);
            }
            None => {}
        }
        let wanted = self.ns.ftl.stats().geometry.map_pages as usize;
        let offsets = self.audit.owned_pages(wanted);
        let Some(h) = self.hmb.as_ref() else { return };
        if offsets.is_empty() {
            return;
        }
        let Some(store) = HmbSlots::new(h, &offsets, self.mem.clone()) else {
            return;
        };
        let (returned, descs) = (h.returned(), h.descriptors().to_vec());
        let left = self.ns.cache_home.left.take();
        let snapshot = left
            .as_ref()
            .filter(|(d, s, _)| returned && *d == descs && *s == slice)
            .map(|(_, _, snap)| snap);
        let mut ev = self.media.take_events();
        // The internal cache's dirty pages first, told as not in the HMB.
        if let Err(e) = self.ns.ftl.flush(now, &mut ev) {
            log::warn!("nvme: map cache write-back: {e}");
        }
        self.report_ftl(Some(command), &ev, now);
        ev.clear();
        match self.ns.ftl.attach_cache(Box::new(store), snapshot, now, &mut ev) {
            Ok(reused) => {
                self.ns.cache_home.in_hmb = Some(slice);
                log::info!(
                    "nvme: map cache in the HMB: {} slots, {reused} taken over",
                    offsets.len()
                );
            }
            Err(e) => log::warn!("nvme: map cache into the HMB: {e}"),
        }
        self.report_ftl(Some(command), &ev, now);
        self.media.events = ev;
    }

    /// The HMB `h` is going (already out of `self.hmb`, still readable; lifecycle.rs): the
    /// map cache writes back and moves to its internal slots, remembering what it left for
    /// a memory return.
    /// Its events are background work: a Set Features EHM=0 is not the data command
    /// that would own them, and a reset, shutdown or CFS is no command at all.
    pub(crate) fn detach_map_cache(&mut self, h: &HostMemoryBuffer) {
        let now = self.now_ns();
        self.leave_hmb(h.descriptors().to_vec(), None, now);
    }

    fn leave_hmb(&mut self, descs: Vec<HmbDescriptor>, command: Option<(u16, u16)>, now: u64) {
        let Some(slice) = self.ns.cache_home.in_hmb else {
            return;
        };
        let mut ev = self.media.take_events();
        match self.ns.ftl.detach_cache(now, &mut ev) {
            Ok(snap) => self.ns.cache_home.left = Some((descs, slice, snap)),
            Err(e) => log::warn!("nvme: map cache out of the HMB: {e}"),
        }
        // Still "in the HMB" while its last events are told: their offsets are HMB offsets.
        self.report_ftl(command, &ev, now);
        self.ns.cache_home.in_hmb = None;
        self.media.events = ev;
    }

    /// Keep the HMB audit in step with the map cache: its writes move the baseline, the
    /// host writes it found at a use are violations.
    pub(crate) fn note_cache_events(&mut self, ev: &[FtlEvent]) {
        for e in ev {
            if let FtlEvent::MapCacheCorrupt {
                offset,
                found,
                when: CorruptionFound::InUse,
                ..
            } = *e
            {
                self.audit.cache_violation(offset, found);
            }
        }
        for (offset, hash) in self.ns.ftl.drain_cache_updates() {
            self.audit.rebaseline(offset, hash);
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_cache_checksum_is_the_audit_hash() {
        let mut page = [0u8; 4096];
        for n in 0..4u64 {
            crate::audit::fill_page(n, &mut page);
            assert_eq!(hmb_ftl::page_checksum(&page), crate::audit::hash_page(&page));
        }
    }
}
