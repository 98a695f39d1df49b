//! The map cache: map pages held in slots of a [`SlotStore`] (controller SRAM by default,
//! the HMB's cache part when the host lends one), least recently used first out, dirty
//! slots written back to NAND by the FTL when evicted or flushed. The bookkeeping (which
//! map page is in which slot, dirty bits, use order, and a checksum of each slot's page)
//! stays in the controller: the slots may be host memory, which the host must not write
//! but can, so a command's first use of a slot reads its whole page and checks it; the
//! same command's later uses are served from the checked copy in controller memory, and
//! its updates go to the slot and to that copy (as a DRAM-less controller fetches a map
//! segment into SRAM once per command). A host write into a slot is found at the next
//! command's first use of it, or when the slot is refilled, emptied, snapshotted or its
//! updates drained for the HMB audit (docs/nvme-controller.md, "The map cache per
//! command").

use std::io;

/// `MapCache::slot_of`'s mark of a map page not in the cache.
const NO_SLOT: u32 = u32::MAX;

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

/// FNV-1a over the page's 8-byte words in four interleaved lanes (word i goes to lane
/// i % 4), then FNV-1a over the four lanes; the controller's HMB audit uses this function
/// too (so the audit's baseline of a slot page is this checksum). Each step is a bijection
/// of its running hash, so a change in one word always changes the result. Four lanes,
/// not one chain: every L2P lookup checks a 4 KiB page, and one chain of 512 dependent
/// multiplies was most of the lookup's time (docs/nvme-controller.md, "Where a large
/// transfer's time goes").
pub fn page_checksum(page: &[u8]) -> u64 {
    const BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x100_0000_01b3;
    let mut lanes = [BASIS; 4];
    let mut words = page.chunks_exact(32);
    for c in &mut words {
        for (k, lane) in lanes.iter_mut().enumerate() {
            let w = u64::from_le_bytes(c[8 * k..8 * k + 8].try_into().expect("8 bytes"));
            *lane = (*lane ^ w).wrapping_mul(PRIME);
        }
    }
    for (k, w) in words.remainder().chunks_exact(8).enumerate() {
        lanes[k] = (lanes[k] ^ u64::from_le_bytes(w.try_into().expect("8 bytes"))).wrapping_mul(PRIME);
    }
    lanes.iter().fold(BASIS, |h, &l| (h ^ l).wrapping_mul(PRIME))
}

#[derive(Clone, Copy, Default)]
struct SlotMeta {
    map_page: Option<u32>,
    dirty: bool,
    last_use: u64,
    checksum: u64,
    /// `checksum` is out of date: the page's checksum is that of the shadow (this slot is
    /// the shadow's), computed when it is needed (`settle`).
    checksum_stale: bool,
}

pub(crate) struct MapCache {
    store: Box<dyn SlotStore>,
    meta: Vec<SlotMeta>,
    /// The slot of each map page (`NO_SLOT`: not cached), indexed by map page, grown as
    /// pages are cached: every lookup asks (a `HashMap`'s SipHash was 5 % of a sequential
    /// Write's instructions).
    slot_of: Vec<u32>,
    clock: u64,
    /// (slot offset, checksum) of every page written into the store since the last drain.
    updates: Vec<(u64, u64)>,
    /// A copy, in controller memory, of the page the cache last checked or wrote in slot
    /// `shadow_slot`: the controller's own version of that slot (its SRAM segment). A
    /// check of that slot compares the slot's page with it (equal bytes: equal checksum,
    /// so the check's outcome is the checksum's) instead of checksumming it; an update
    /// writes the entry to the slot and to it, and leaves the checksum to be computed once
    /// when needed (`settle`), not per entry: a sequential write sets hundreds of entries
    /// of one map page (docs/nvme-controller.md, "Where a large transfer's time goes",
    /// "The map cache per command").
    shadow: Vec<u8>,
    shadow_slot: Option<u32>,
}

impl MapCache {
    pub fn new(store: Box<dyn SlotStore>) -> Self {
        let n = store.slots() as usize;
        MapCache {
            store,
            meta: vec![SlotMeta::default(); n],
            slot_of: Vec::new(),
            clock: 0,
            updates: Vec::new(),
            shadow: Vec::new(),
            shadow_slot: None,
        }
    }

    /// Compute the shadow slot's checksum if updates left it out of date (reporting it
    /// as an update, as each update did before).
    fn settle(&mut self) {
        if let Some(s) = self.shadow_slot {
            let m = &mut self.meta[s as usize];
            if m.checksum_stale {
                m.checksum = page_checksum(&self.shadow);
                m.checksum_stale = false;
                self.updates.push((self.store.offset(s), m.checksum));
            }
        }
    }

    /// The checksum the page of `slot` must have.
    fn expected_checksum(&self, slot: u32) -> u64 {
        let m = &self.meta[slot as usize];
        if m.checksum_stale {
            page_checksum(&self.shadow)
        } else {
            m.checksum
        }
    }

    /// `slot`'s page no longer is the shadow (refilled, emptied, taken over).
    fn unshadow(&mut self, slot: u32) {
        if self.shadow_slot == Some(slot) {
            self.settle();
            self.shadow_slot = None;
        }
    }

    /// `page`, the checked content of `slot`, becomes the shadow.
    fn shadow_page(&mut self, slot: u32, page: &[u8]) {
        self.settle();
        self.shadow.clear();
        self.shadow.extend_from_slice(page);
        self.shadow_slot = Some(slot);
    }

    pub fn slots(&self) -> u32 {
        self.meta.len() as u32
    }

    pub fn offset(&self, slot: u32) -> u64 {
        self.store.offset(slot)
    }

    /// The slot holding `map_page`, marked most recently used.
    pub fn find(&mut self, map_page: u32) -> Option<u32> {
        let s = self.peek(map_page)?;
        self.clock += 1;
        self.meta[s as usize].last_use = self.clock;
        Some(s)
    }

    pub fn peek(&self, map_page: u32) -> Option<u32> {
        self.slot_of.get(map_page as usize).copied().filter(|&s| s != NO_SLOT)
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
        self.unshadow(slot);
        if let Some(p) = self.meta[slot as usize].map_page.take() {
            self.slot_of[p as usize] = NO_SLOT;
        }
        self.meta[slot as usize].dirty = false;
    }

    pub fn install(&mut self, slot: u32, map_page: u32, bytes: &[u8]) -> io::Result<()> {
        self.forget(slot);
        self.store.write(slot, 0, bytes)?;
        let checksum = page_checksum(bytes);
        self.updates.push((self.store.offset(slot), checksum));
        self.occupy(slot, map_page, checksum);
        self.shadow_page(slot, bytes);
        Ok(())
    }

    /// `slot` holds `map_page` (clean, just used, with `checksum`).
    fn occupy(&mut self, slot: u32, map_page: u32, checksum: u64) {
        self.clock += 1;
        self.meta[slot as usize] = SlotMeta {
            map_page: Some(map_page),
            dirty: false,
            last_use: self.clock,
            checksum,
            checksum_stale: false,
        };
        let i = map_page as usize;
        if i >= self.slot_of.len() {
            self.slot_of.resize(i + 1, NO_SLOT);
        }
        self.slot_of[i] = slot;
    }

    /// Take over a free slot as it is in the store (memory return: the host gave back
    /// the buffer the controller left), if its page still has `checksum`; else
    /// Err(the checksum found).
    pub fn adopt(&mut self, slot: u32, map_page: u32, checksum: u64, buf: &mut [u8]) -> io::Result<Result<(), u64>> {
        self.unshadow(slot);
        self.store.read(slot, 0, buf)?;
        let found = page_checksum(buf);
        if found != checksum {
            return Ok(Err(found));
        }
        self.occupy(slot, map_page, checksum);
        Ok(Ok(()))
    }

    /// Read the slot's page into `buf`; Err(found checksum) when it is not what the
    /// controller left there. A page that checks out becomes the shadow: `buf` and the
    /// shadow are then the same bytes, which `set_entry` keeps so.
    pub fn read_checked(&mut self, slot: u32, buf: &mut [u8]) -> io::Result<Result<(), u64>> {
        self.store.read(slot, 0, buf)?;
        if self.shadow_slot == Some(slot) && self.shadow[..] == buf[..] {
            return Ok(Ok(()));
        }
        let found = page_checksum(buf);
        if found != self.expected_checksum(slot) {
            return Ok(Err(found));
        }
        // Also when the slot is the shadow's but its bytes differ with the same checksum:
        // the checked bytes are what the command uses, as a checksum per use had it.
        self.shadow_page(slot, buf);
        Ok(Ok(()))
    }

    /// `read_checked` without making the page the shadow.
    pub fn peek_checked(&self, slot: u32, buf: &mut [u8]) -> io::Result<Result<(), u64>> {
        self.store.read(slot, 0, buf)?;
        if self.shadow_slot == Some(slot) && self.shadow[..] == buf[..] {
            return Ok(Ok(()));
        }
        let found = page_checksum(buf);
        Ok(if found == self.expected_checksum(slot) {
            Ok(())
        } else {
            Err(found)
        })
    }

    /// Set entry `i` of `slot`, whose checked page `page` is (what `read_checked` or
    /// `install` of the slot left, with every update since made through here): in `page`,
    /// in the slot and in the shadow. Its checksum is the page's, computed when needed.
    /// The slot's page is not read again: a host write into it since its check is found at
    /// its next check (the next command's first use, a refill, a drain), not here, and the
    /// shadow is not compared with `page` (they are the same while the slot is the
    /// shadow's: a compare of 4 KiB per entry was 14-20 % of a sequential Write's
    /// instructions).
    pub fn set_entry(&mut self, slot: u32, page: &mut [u8], i: u32, v: u32) -> io::Result<()> {
        let at = i as usize * 4;
        if self.shadow_slot != Some(slot) {
            self.shadow_page(slot, page);
        }
        debug_assert!(
            self.shadow[..] == page[..],
            "slot {slot}: its checked page is not the shadow"
        );
        page[at..at + 4].copy_from_slice(&v.to_le_bytes());
        self.store.write(slot, at, &v.to_le_bytes())?;
        self.shadow[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let m = &mut self.meta[slot as usize];
        m.dirty = true;
        m.checksum_stale = true;
        Ok(())
    }

    pub fn is_dirty(&self, slot: u32) -> bool {
        self.meta[slot as usize].dirty
    }

    pub fn checksum(&self, slot: u32) -> u64 {
        self.expected_checksum(slot)
    }

    pub fn drain_updates(&mut self) -> Vec<(u64, u64)> {
        self.settle();
        std::mem::take(&mut self.updates)
    }

    pub fn drain_updates_owned(mut self) -> Vec<(u64, u64)> {
        self.drain_updates()
    }

    /// Occupied slots: (slot, map page).
    pub fn occupied(&self) -> Vec<(u32, u32)> {
        (0..self.meta.len() as u32)
            .filter_map(|s| self.meta[s as usize].map_page.map(|p| (s, p)))
            .collect()
    }

    pub fn mark_dirty(&mut self, slot: u32) {
        self.meta[slot as usize].dirty = true;
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

#[cfg(test)]
mod tests {
    use super::page_checksum;

    #[test]
    fn a_change_in_any_one_word_changes_the_checksum() {
        let page: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let h = page_checksum(&page);
        assert_eq!(h, page_checksum(&page.clone()));
        for word in 0..512 {
            for bit in [0, 13, 63] {
                let mut p = page.clone();
                p[word * 8 + bit / 8] ^= 1 << (bit % 8);
                assert_ne!(page_checksum(&p), h, "word {word} bit {bit}");
            }
        }
        // Swapping two words of different lanes changes it too (one chain per lane).
        let mut p = page.clone();
        p.copy_within(0..8, 8);
        p[0..8].copy_from_slice(&page[8..16]);
        assert_ne!(page_checksum(&p), h);
        // Not a multiple of 32 bytes: the remainder's words count.
        assert_ne!(
            page_checksum(&page[..40]),
            page_checksum(&[&page[..32], &[0u8; 8][..]].concat())
        );
    }

    use super::{MapCache, SlotStore, VecSlots};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const PB: usize = 256;
    const SLOTS: u32 = 3;

    /// A store the test can write behind the cache's back (a host write into the HMB).
    struct Shared(std::sync::Arc<std::sync::Mutex<VecSlots>>);

    impl SlotStore for Shared {
        fn slots(&self) -> u32 {
            self.0.lock().unwrap().slots()
        }
        fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> std::io::Result<()> {
            self.0.lock().unwrap().read(slot, at, buf)
        }
        fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> std::io::Result<()> {
            self.0.lock().unwrap().write(slot, at, buf)
        }
        fn offset(&self, slot: u32) -> u64 {
            self.0.lock().unwrap().offset(slot)
        }
    }

    /// The bytes of `slot` in the store, read behind the cache's back.
    fn stored(store: &std::sync::Mutex<VecSlots>, slot: u32) -> Vec<u8> {
        let mut page = vec![0u8; PB];
        store.lock().unwrap().read(slot, 0, &mut page).unwrap();
        page
    }

    /// The checks as they were before the shadow: every use checksums the page, every
    /// update computes the new checksum and reports it.
    #[derive(Default)]
    struct Eager {
        checksum: HashMap<u32, u64>,
        baseline: HashMap<u64, u64>,
    }

    #[derive(Clone, Debug)]
    enum Op {
        Install { slot: u32, seed: u8 },
        Use { slot: u32, entry: u32, value: Option<u32> },
        Poke { slot: u32, at: usize, xor: u8 },
        Forget { slot: u32 },
        Drain,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0..SLOTS, any::<u8>()).prop_map(|(slot, seed)| Op::Install { slot, seed }),
            8 => (0..SLOTS, 0..(PB / 4) as u32, prop::option::of(any::<u32>()))
                .prop_map(|(slot, entry, value)| Op::Use { slot, entry, value }),
            1 => (0..SLOTS, 0..PB, 1u8..=255).prop_map(|(slot, at, xor)| Op::Poke { slot, at, xor }),
            1 => (0..SLOTS).prop_map(|slot| Op::Forget { slot }),
            1 => Just(Op::Drain),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// The shadow changes no outcome: the same uses check out or fail with the same
        /// checksum found, and the audit's baselines after each drain are the same, as
        /// with a checksum per use and per update.
        #[test]
        fn the_shadow_decides_every_check_as_a_checksum_per_use_did(ops in prop::collection::vec(op(), 1..80)) {
            let store = std::sync::Arc::new(std::sync::Mutex::new(VecSlots::new(SLOTS, PB)));
            let mut cache = MapCache::new(Box::new(Shared(store.clone())));
            let mut eager = Eager::default();
            let mut baseline: HashMap<u64, u64> = HashMap::new();
            let mut page = vec![0u8; PB];
            for op in ops {
                match op {
                    Op::Install { slot, seed } => {
                        let bytes: Vec<u8> = (0..PB).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
                        cache.install(slot, slot + 10, &bytes).unwrap();
                        let c = page_checksum(&bytes);
                        eager.checksum.insert(slot, c);
                        eager.baseline.insert(cache.offset(slot), c);
                    }
                    Op::Use { slot, entry, value } => {
                        let Some(&want) = eager.checksum.get(&slot) else { continue };
                        let r = cache.read_checked(slot, &mut page).unwrap();
                        // The store's page as the host left it (not the buffer the cache
                        // filled: a cache that served its own copy would agree with itself).
                        let found = page_checksum(&stored(&store, slot));
                        prop_assert_eq!(r, if found == want { Ok(()) } else { Err(found) });
                        prop_assert_eq!(cache.checksum(slot), want);
                        match (r, value) {
                            (Ok(()), Some(v)) => {
                                cache.set_entry(slot, &mut page, entry, v).unwrap();
                                let c = page_checksum(&page);
                                eager.checksum.insert(slot, c);
                                eager.baseline.insert(cache.offset(slot), c);
                            }
                            (Err(_), _) => {
                                // As the FTL does: a changed page is refilled.
                                cache.forget(slot);
                                eager.checksum.remove(&slot);
                            }
                            _ => {}
                        }
                    }
                    Op::Poke { slot, at, xor } => {
                        let mut b = [0u8];
                        let mut s = store.lock().unwrap();
                        s.read(slot, at, &mut b).unwrap();
                        s.write(slot, at, &[b[0] ^ xor]).unwrap();
                    }
                    Op::Forget { slot } => {
                        cache.forget(slot);
                        eager.checksum.remove(&slot);
                    }
                    Op::Drain => {
                        for (off, c) in cache.drain_updates() {
                            baseline.insert(off, c);
                        }
                        prop_assert_eq!(&baseline, &eager.baseline);
                    }
                }
            }
            for (off, c) in cache.drain_updates() {
                baseline.insert(off, c);
            }
            prop_assert_eq!(&baseline, &eager.baseline);
        }

        /// Per command, as the FTL uses the cache: a command's first use of a slot reads
        /// and checks it, its later uses read entries from that checked copy and update
        /// the slot through it; the host writes into the store between commands and
        /// during them. Every check decides as a checksum of the store's page against the
        /// checksum of the controller's own version of the page did, every entry read is
        /// the controller's, and the audit's baselines after each drain are the eager
        /// ones: a host write is found at the next command's first use of its slot.
        #[test]
        fn a_command_checks_each_slot_at_its_first_use_as_eager_checks_did(ops in prop::collection::vec(cmd_op(), 1..40)) {
            let store = std::sync::Arc::new(std::sync::Mutex::new(VecSlots::new(SLOTS, PB)));
            let mut cache = MapCache::new(Box::new(Shared(store.clone())));
            // The controller's own version of each occupied slot, and the audit's baselines.
            let mut truth: HashMap<u32, Vec<u8>> = HashMap::new();
            let mut eager_baseline: HashMap<u64, u64> = HashMap::new();
            let mut baseline: HashMap<u64, u64> = HashMap::new();
            let poke = |slot: u32, at: usize, xor: u8| {
                let mut b = [0u8];
                let mut s = store.lock().unwrap();
                s.read(slot, at, &mut b).unwrap();
                s.write(slot, at, &[b[0] ^ xor]).unwrap();
            };
            for op in ops {
                match op {
                    CmdOp::Install { slot, seed } => {
                        let bytes: Vec<u8> = (0..PB).map(|i| (i as u8).wrapping_mul(seed | 1)).collect();
                        cache.install(slot, slot + 10, &bytes).unwrap();
                        eager_baseline.insert(cache.offset(slot), page_checksum(&bytes));
                        truth.insert(slot, bytes);
                    }
                    CmdOp::Poke { slot, at, xor } => poke(slot, at, xor),
                    CmdOp::Forget { slot } => {
                        cache.forget(slot);
                        truth.remove(&slot);
                    }
                    CmdOp::Drain => {
                        for (off, c) in cache.drain_updates() {
                            baseline.insert(off, c);
                        }
                        prop_assert_eq!(&baseline, &eager_baseline);
                    }
                    CmdOp::Command(uses) => {
                        // The checked copies of this command (the FTL keeps one at a time;
                        // more here, so that updates alternate between slots).
                        let mut checked: HashMap<u32, Vec<u8>> = HashMap::new();
                        for u in uses {
                            let (slot, entry, value) = match u {
                                Use::Entry { slot, entry, value } => (slot, entry, value),
                                Use::Poke { slot, at, xor } => {
                                    poke(slot, at, xor);
                                    continue;
                                }
                            };
                            let Some(want) = truth.get(&slot).cloned() else { continue };
                            let page = match checked.entry(slot) {
                                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                                std::collections::hash_map::Entry::Vacant(first_use) => {
                                    let mut page = vec![0u8; PB];
                                    let r = cache.read_checked(slot, &mut page).unwrap();
                                    let found = page_checksum(&stored(&store, slot));
                                    let eager = if found == page_checksum(&want) { Ok(()) } else { Err(found) };
                                    prop_assert_eq!(r, eager);
                                    prop_assert_eq!(cache.checksum(slot), page_checksum(&want));
                                    if r.is_err() {
                                        // As the FTL does: a changed page is refilled (here: emptied).
                                        cache.forget(slot);
                                        truth.remove(&slot);
                                        continue;
                                    }
                                    first_use.insert(page)
                                }
                            };
                            let at = entry as usize * 4;
                            prop_assert_eq!(&page[at..at + 4], &want[at..at + 4], "entry read from the checked copy");
                            if let Some(v) = value {
                                cache.set_entry(slot, page, entry, v).unwrap();
                                let t = truth.get_mut(&slot).expect("occupied");
                                t[at..at + 4].copy_from_slice(&v.to_le_bytes());
                                eager_baseline.insert(cache.offset(slot), page_checksum(t));
                            }
                        }
                    }
                }
            }
            for (off, c) in cache.drain_updates() {
                baseline.insert(off, c);
            }
            prop_assert_eq!(&baseline, &eager_baseline);
        }
    }

    #[derive(Clone, Debug)]
    enum Use {
        Entry {
            slot: u32,
            entry: u32,
            value: Option<u32>,
        },
        /// A host write while the command runs.
        Poke {
            slot: u32,
            at: usize,
            xor: u8,
        },
    }

    #[derive(Clone, Debug)]
    enum CmdOp {
        Install {
            slot: u32,
            seed: u8,
        },
        Command(Vec<Use>),
        /// A host write between commands.
        Poke {
            slot: u32,
            at: usize,
            xor: u8,
        },
        Forget {
            slot: u32,
        },
        Drain,
    }

    fn cmd_op() -> impl Strategy<Value = CmdOp> {
        let poke = || (0..SLOTS, 0..PB, 1u8..=255);
        let entry = (0..SLOTS, 0..(PB / 4) as u32, prop::option::of(any::<u32>()))
            .prop_map(|(slot, entry, value)| Use::Entry { slot, entry, value });
        let a_use = prop_oneof![
            12 => entry,
            1 => poke().prop_map(|(slot, at, xor)| Use::Poke { slot, at, xor }),
        ];
        prop_oneof![
            2 => (0..SLOTS, any::<u8>()).prop_map(|(slot, seed)| CmdOp::Install { slot, seed }),
            8 => prop::collection::vec(a_use, 1..24).prop_map(CmdOp::Command),
            2 => poke().prop_map(|(slot, at, xor)| CmdOp::Poke { slot, at, xor }),
            1 => (0..SLOTS).prop_map(|slot| CmdOp::Forget { slot }),
            1 => Just(CmdOp::Drain),
        ]
    }
}
