//! The open pairs of one pair number keyed by one word: an open-addressing
//! table with linear probing, a multiplicative hash and deletion by
//! backward shift (no tombstones), each entry's key and value in one
//! 24-byte slot. It does what the `FxHashMap<u64, Open>` it replaces did
//! (insert over an existing key, remove, look up) with one probe sequence
//! over one array instead of the SwissTable's control-byte groups: the
//! pair matching was 15 % of `stats`' samples, most of it in the map.

use super::Open;

/// One slot: `used` tells a free slot from any key (every `u64` is a key).
#[derive(Clone, Copy, Default)]
struct Slot {
    key: u64,
    ts: u64,
    source: u32,
    action: u16,
    used: bool,
}

/// At most half full: short probe sequences.
const MIN_SLOTS: usize = 16;

pub(super) struct PairTable {
    slots: Vec<Slot>,
    /// `slots.len() - 1` (a power of two minus one).
    mask: usize,
    /// 64 − log2(slots): the scattering hash's top bits pick the home slot.
    shift: u32,
    len: usize,
    /// Home slots by the scattering hash (`home`), once the near one made
    /// a probe sequence longer than `LONG_PROBE`.
    scatter: bool,
}

/// A probe sequence this long on insert switches the table to the
/// scattering hash: keys the near hash clusters cost time, never results.
const LONG_PROBE: usize = 32;

impl Default for PairTable {
    fn default() -> Self {
        Self::with_slots(MIN_SLOTS)
    }
}

impl PairTable {
    fn with_slots(n: usize) -> Self {
        Self {
            slots: vec![Slot::default(); n],
            mask: n - 1,
            shift: 64 - n.trailing_zeros(),
            len: 0,
            scatter: false,
        }
    }

    /// The key's home slot. Near: the key's 16-bit chunks summed with
    /// weights, so that keys which differ by one in their second chunk
    /// (the command id of a `(qid, cid)` key, which firmware and Linux
    /// allocate in order) get neighbouring slots, and each value of the
    /// first chunk (the queue) its own stretch of 1 031 slots: a command
    /// and its completion then touch cache lines their neighbours touched.
    /// Scatter (Fibonacci hashing), once keys cluster.
    #[inline(always)]
    fn home(&self, key: u64) -> usize {
        if self.scatter {
            return (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize;
        }
        let near = (key & 0xffff)
            .wrapping_mul(1031)
            .wrapping_add((key >> 16) & 0xffff)
            .wrapping_add(((key >> 32) & 0xffff).wrapping_mul(0x9e37))
            .wrapping_add((key >> 48).wrapping_mul(0x0007_f4b1));
        near as usize & self.mask
    }

    /// The slot holding `key`, or the free slot where it would go, and how
    /// far from its home that is.
    #[inline(always)]
    fn find(&self, key: u64) -> (usize, bool, usize) {
        let mut i = self.home(key);
        let mut probes = 0;
        loop {
            let s = &self.slots[i];
            if !s.used {
                return (i, false, probes);
            }
            if s.key == key {
                return (i, true, probes);
            }
            i = (i + 1) & self.mask;
            probes += 1;
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Put `v` under `key`; the value it replaces, if any. Inlined into
    /// its callers: as a call its value went in and out through memory
    /// (cachegrind: ~12 instructions per begin record).
    #[inline(always)]
    pub(super) fn insert(&mut self, key: u64, v: Open) -> Option<Open> {
        let (i, found, probes) = self.find(key);
        let s = &mut self.slots[i];
        if found {
            let was = (s.ts, s.source, s.action);
            (s.ts, s.source, s.action) = v;
            return Some(was);
        }
        *s = Slot {
            key,
            ts: v.0,
            source: v.1,
            action: v.2,
            used: true,
        };
        self.len += 1;
        if self.len * 2 > self.slots.len() {
            self.rebuild(self.slots.len() * 2, self.scatter);
        } else if probes > LONG_PROBE && !self.scatter {
            self.rebuild(self.slots.len(), true);
        }
        None
    }

    /// The value under `key`, to change in place.
    #[inline]
    pub(super) fn get_mut(&mut self, key: u64) -> Option<(&mut u64, &mut u32, &mut u16)> {
        match self.find(key) {
            (i, true, _) => {
                let s = &mut self.slots[i];
                Some((&mut s.ts, &mut s.source, &mut s.action))
            }
            _ => None,
        }
    }

    /// Take `key` out; its value, if it was there (inlined as `insert`).
    #[inline(always)]
    pub(super) fn remove(&mut self, key: u64) -> Option<Open> {
        let (mut hole, true, _) = self.find(key) else {
            return None;
        };
        let s = self.slots[hole];
        self.len -= 1;
        // Backward shift: move each later entry of the run whose home is
        // not between the hole and it into the hole, so every key stays
        // reachable from its home without tombstones.
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let next = self.slots[j];
            if !next.used {
                break;
            }
            let home = self.home(next.key);
            // `next` may move back to `hole` when its home is not in the
            // cyclic range (hole, j].
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                self.slots[hole] = next;
                hole = j;
            }
        }
        self.slots[hole].used = false;
        Some((s.ts, s.source, s.action))
    }

    pub(super) fn clear(&mut self) {
        if self.len > 0 {
            self.slots.iter_mut().for_each(|s| s.used = false);
            self.len = 0;
        }
    }

    /// Whether the table homes keys by the scattering hash (tests).
    #[cfg(test)]
    pub(super) fn scatters(&self) -> bool {
        self.scatter
    }

    /// Every (key, value), in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, Open)> + '_ {
        self.slots
            .iter()
            .filter(|s| s.used)
            .map(|s| (s.key, (s.ts, s.source, s.action)))
    }

    /// The same entries in `n` slots, homed by the scattering hash or not.
    #[cold]
    fn rebuild(&mut self, n: usize, scatter: bool) {
        let mut new = Self::with_slots(n);
        new.scatter = scatter;
        let old = std::mem::replace(self, new);
        for s in old.slots.iter().filter(|s| s.used) {
            let (i, _, _) = self.find(s.key);
            self.slots[i] = *s;
        }
        self.len = old.len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Keys whose near home is slot 0 in every table (up to 65 536 slots).
    fn colliding(lo: u64) -> u64 {
        let hi = (65_536 - (lo * 1031) % 65_536) % 65_536;
        lo | hi << 16
    }

    /// Keys the near hash piles on one slot switch the table to the
    /// scattering one, with every entry kept.
    #[test]
    fn clustered_keys_scatter() {
        let mut t = PairTable::default();
        for lo in 0..200 {
            assert_eq!(t.insert(colliding(lo), (lo, 0, 0)), None);
        }
        assert!(t.scatters());
        for lo in 0..200 {
            assert_eq!(t.remove(colliding(lo)), Some((lo, 0, 0)));
        }
        assert_eq!(t.len(), 0);
        // Command ids in order on a few queues stay near.
        let mut near = PairTable::default();
        for q in 0..8u64 {
            for cid in 0..1024u64 {
                near.insert(q | cid << 16, (cid, q as u32, 0));
            }
        }
        assert!(!near.scatters());
        assert_eq!(near.remove(3 | 1000 << 16), Some((1000, 3, 0)));
    }

    /// Random inserts, replacements, removals and lookups over keys that
    /// collide a lot (few distinct values, some at the top of the range)
    /// give what a `HashMap` gives, after every operation.
    #[test]
    fn same_as_a_hash_map() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..20 {
            let mut mine = PairTable::default();
            let mut theirs: HashMap<u64, Open> = HashMap::new();
            let spread = [8u64, 64, 1024, 1 << 20][round % 4];
            for step in 0..20_000u64 {
                let r = next();
                let key = match r % 7 {
                    0 => u64::MAX - (r >> 8) % 4,
                    2 if round % 2 == 1 => colliding((r >> 8) % 300),
                    1 => ((r >> 8) % spread) << 48,
                    _ => (r >> 8) % spread,
                };
                let v = (step, (r >> 32) as u32, (r >> 16) as u16);
                match (r >> 3) % 4 {
                    0 | 1 => assert_eq!(mine.insert(key, v), theirs.insert(key, v)),
                    2 => assert_eq!(mine.remove(key), theirs.remove(&key)),
                    _ => {
                        let got = mine.get_mut(key).map(|(t, s, a)| (*t, *s, *a));
                        assert_eq!(got, theirs.get(&key).copied());
                    }
                }
                assert_eq!(mine.len(), theirs.len());
                if step % 5_000 == 4_999 {
                    let mut all: Vec<(u64, Open)> = mine.iter().collect();
                    all.sort();
                    let mut want: Vec<(u64, Open)> = theirs.iter().map(|(&k, &v)| (k, v)).collect();
                    want.sort();
                    assert_eq!(all, want);
                }
            }
            mine.clear();
            assert_eq!(mine.len(), 0);
            assert_eq!(mine.iter().count(), 0);
            assert_eq!(mine.remove(3), None);
        }
    }
}
