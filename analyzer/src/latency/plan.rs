//! What the latency work does with each opcode, resolved from the catalog
//! once: field offsets and widths instead of a search by field name per
//! record, and pair names as small numbers instead of strings to hash.

use rustc_hash::FxHashMap;

use crate::catalog::{field_width, Catalog, OpcodeEntry, PccxMap, MAX_PAIR_KEY};

/// A payload field: where it is and how wide (1, 2, 4 or 8 bytes).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FieldAt {
    offset: u16,
    width: u8,
}

impl FieldAt {
    fn of(op: &OpcodeEntry, name: &str) -> Option<Self> {
        // The first field of that name, as `OpcodeEntry::field` finds it.
        let f = op.fields.iter().find(|f| f.name == name)?;
        Some(Self {
            offset: f.offset,
            width: field_width(&f.ty)? as u8,
        })
    }

    /// The field's value; None when the payload is too short, as
    /// `catalog::read_field`.
    #[inline(always)]
    pub(crate) fn read(self, payload: &[u8]) -> Option<u64> {
        // A load of the field's own width (no copy of a variable length).
        let at = self.offset as usize;
        Some(match self.width {
            1 => *payload.get(at)? as u64,
            2 => u16::from_le_bytes(payload.get(at..at + 2)?.try_into().ok()?) as u64,
            4 => u32::from_le_bytes(payload.get(at..at + 4)?.try_into().ok()?) as u64,
            _ => u64::from_le_bytes(payload.get(at..at + 8)?.try_into().ok()?),
        })
    }
}

/// The key fields of a begin/end pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyAt {
    fields: [FieldAt; MAX_PAIR_KEY],
    len: u8,
    /// Where each field goes in the pair's one-word key (`read_word`); set
    /// by `Plans::new` from every begin and end of the pair.
    shifts: [u8; MAX_PAIR_KEY],
    /// The pair's key fits in one word.
    pub(crate) narrow: bool,
    /// Where a narrow key's fields lie side by side in the payload, in key
    /// order, each as wide as its place in the word (every key of the
    /// builtin catalog): its offset and the word's mask, so the key is one
    /// masked load instead of a loop over fields (cachegrind: ~10
    /// instructions per begin or end record).
    contig: Option<(u16, u64)>,
}

impl KeyAt {
    fn of(op: &OpcodeEntry, names: &[String]) -> Option<Self> {
        let mut fields = [FieldAt { offset: 0, width: 1 }; MAX_PAIR_KEY];
        if names.len() > MAX_PAIR_KEY {
            return None;
        }
        for (slot, name) in fields.iter_mut().zip(names) {
            *slot = FieldAt::of(op, name)?;
        }
        Some(Self {
            fields,
            len: names.len() as u8,
            shifts: [0; MAX_PAIR_KEY],
            narrow: false,
            contig: None,
        })
    }

    /// `contig` for these fields and shifts, if they lie side by side.
    fn contiguous(&self) -> Option<(u16, u64)> {
        let fields = &self.fields[..self.len as usize];
        let first = fields.first()?.offset;
        let mut bits = 0u32;
        for (f, &shift) in fields.iter().zip(&self.shifts) {
            // Each field starts where the previous one's bits end, in the
            // word and in the payload.
            if shift as u32 != bits || f.offset as u32 != first as u32 + bits / 8 {
                return None;
            }
            bits += f.width as u32 * 8;
        }
        Some(match bits {
            64 => (first, u64::MAX),
            1..=63 => (first, (1u64 << bits) - 1),
            _ => return None,
        })
    }

    /// The key as the pair's one word: each slot at its shift, which leaves
    /// room for the widest field any begin or end of the pair has in that
    /// slot, so a begin and an end with the same values (unused slots 0)
    /// give the same word, and different values different words. Only for
    /// a `narrow` key.
    #[inline(always)]
    pub(crate) fn read_word(&self, payload: &[u8]) -> Option<u64> {
        if let Some((at, mask)) = self.contig {
            let at = at as usize;
            if let Some(b) = payload.get(at..at + 8) {
                return Some(u64::from_le_bytes(b.try_into().ok()?) & mask);
            }
        }
        self.read_word_fields(payload)
    }

    /// `read_word` field by field (and where the key's 8 bytes run past
    /// the payload).
    #[inline]
    fn read_word_fields(&self, payload: &[u8]) -> Option<u64> {
        let mut v = 0u64;
        for (f, &shift) in self.fields[..self.len as usize].iter().zip(&self.shifts) {
            v |= f.read(payload)? << shift;
        }
        Some(v)
    }

    /// The key's values (unused slots 0); None when the payload is too
    /// short for one of them.
    #[inline(always)]
    pub(crate) fn read(&self, payload: &[u8]) -> Option<[u64; MAX_PAIR_KEY]> {
        let mut k = [0u64; MAX_PAIR_KEY];
        for (slot, f) in k.iter_mut().zip(&self.fields[..self.len as usize]) {
            *slot = f.read(payload)?;
        }
        Some(k)
    }
}

/// What one opcode contributes to the latencies.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Action {
    /// A record whose own field is its latency.
    Span { duration: FieldAt },
    /// Opens pair `pair`.
    Begin { pair: u16, key: KeyAt },
    /// Closes pair `pair`; its own latency field too when it has one.
    End {
        pair: u16,
        key: KeyAt,
        duration: Option<FieldAt>,
    },
}

/// The catalog's latency actions by opcode.
pub(crate) struct Plans {
    /// Index into `actions` + 1 by opcode; 0: nothing to do.
    /// Sized for every opcode: a `u16` index needs no bounds check.
    by_opcode: Box<[u16; 1 << 16]>,
    /// (opcode, action).
    actions: Vec<(u16, Action)>,
    /// Every pair's key fits in one word (the later part of a split logs
    /// its begin and end records with that word).
    pub(crate) keys_pack: bool,
    /// Pairs (their numbers are below this).
    pub(crate) pairs: usize,
}

impl Plans {
    pub(crate) fn new(catalog: &Catalog) -> Self {
        let mut by_opcode = Box::new([0u16; 1 << 16]);
        let mut actions = Vec::new();
        let mut pairs: FxHashMap<String, u16> = FxHashMap::default();
        let mut pair_id = |name: &str| -> u16 {
            let next = pairs.len() as u16;
            *pairs.entry(name.to_string()).or_insert(next)
        };
        for op in &catalog.file.opcodes {
            // A field the mapping names but the catalog lacks is refused
            // when the catalog is loaded; here it means no action, as the
            // per-record search found no value.
            let action = match &op.pccx {
                Some(PccxMap::Span { duration_field, .. }) => {
                    FieldAt::of(op, duration_field).map(|duration| Action::Span { duration })
                }
                Some(PccxMap::Begin { pair, key, .. }) => KeyAt::of(op, key).map(|key| Action::Begin {
                    pair: pair_id(pair),
                    key,
                }),
                Some(PccxMap::End {
                    pair,
                    key,
                    duration_field,
                    ..
                }) => KeyAt::of(op, key).map(|key| Action::End {
                    pair: pair_id(pair),
                    key,
                    duration: duration_field.as_ref().and_then(|f| FieldAt::of(op, f)),
                }),
                _ => None,
            };
            if let Some(a) = action {
                if actions.len() < u16::MAX as usize {
                    actions.push((op.opcode, a));
                    by_opcode[op.opcode as usize] = actions.len() as u16;
                }
            }
        }
        let pairs = pairs.len();
        // Each key slot of a pair as wide as the widest field any of its
        // begins and ends has there.
        let mut widths = vec![[0u32; MAX_PAIR_KEY]; pairs];
        for (_, a) in &actions {
            if let Action::Begin { pair, key } | Action::End { pair, key, .. } = a {
                for (w, f) in widths[*pair as usize].iter_mut().zip(&key.fields[..key.len as usize]) {
                    *w = (*w).max(f.width as u32 * 8);
                }
            }
        }
        for (_, a) in &mut actions {
            if let Action::Begin { pair, key } | Action::End { pair, key, .. } = a {
                let w = &widths[*pair as usize];
                key.narrow = w.iter().sum::<u32>() <= 64;
                let mut shift = 0u32;
                for (slot, &width) in key.shifts.iter_mut().zip(w) {
                    // Below 64 for every used slot of a narrow key.
                    *slot = shift.min(63) as u8;
                    shift += width;
                }
                key.contig = if key.narrow { key.contiguous() } else { None };
            }
        }
        let keys_pack = actions.iter().all(|(_, a)| match a {
            Action::Begin { key, .. } | Action::End { key, .. } => key.narrow,
            Action::Span { .. } => true,
        });
        Self {
            by_opcode,
            actions,
            keys_pack,
            pairs,
        }
    }

    /// The action of `opcode` and its index (for per-action caches).
    #[inline(always)]
    pub(crate) fn get(&self, opcode: u16) -> Option<(usize, u16, &Action)> {
        let i = self.by_opcode[opcode as usize];
        if i == 0 {
            return None;
        }
        let (op, a) = &self.actions[i as usize - 1];
        Some((i as usize - 1, *op, a))
    }

    /// The index of `opcode`'s action, if it has one.
    #[inline(always)]
    pub(crate) fn index(&self, opcode: u16) -> Option<usize> {
        (self.by_opcode[opcode as usize] as usize).checked_sub(1)
    }

    #[inline(always)]
    pub(crate) fn action(&self, index: usize) -> (u16, &Action) {
        let (op, a) = &self.actions[index];
        (*op, a)
    }

    pub(crate) fn len(&self) -> usize {
        self.actions.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A key of `widths`-byte fields at `offsets`, shifts as `Plans::new`
    /// sets them for a pair whose widest fields are `pair_widths` bytes.
    fn key(offsets: &[u16], widths: &[u8], pair_widths: &[u8]) -> KeyAt {
        let mut k = KeyAt {
            fields: [FieldAt { offset: 0, width: 1 }; MAX_PAIR_KEY],
            len: offsets.len() as u8,
            shifts: [0; MAX_PAIR_KEY],
            narrow: pair_widths.iter().map(|&w| w as u32 * 8).sum::<u32>() <= 64,
            contig: None,
        };
        let mut shift = 0u32;
        for (i, (&offset, &width)) in offsets.iter().zip(widths).enumerate() {
            k.fields[i] = FieldAt { offset, width };
            k.shifts[i] = shift.min(63) as u8;
            shift += pair_widths[i] as u32 * 8;
        }
        k.contig = if k.narrow { k.contiguous() } else { None };
        k
    }

    /// The one-load key is the field-by-field key, for fields side by side
    /// or not, narrower than their place in the word, at the payload's end
    /// and past it.
    #[test]
    fn one_load_key_is_the_field_by_field_key() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let (mut loads, mut fields) = (0, 0);
        for _ in 0..20_000 {
            let n = 1 + (next() % MAX_PAIR_KEY as u64) as usize;
            let widths: Vec<u8> = (0..n).map(|_| [1u8, 2, 4, 8][(next() % 4) as usize]).collect();
            // Mostly the pair's own widths; sometimes a wider field of the
            // other end of the pair leaves a hole in the word.
            let pair_widths: Vec<u8> = widths
                .iter()
                .map(|&w| if next() % 4 == 0 { (w * 2).min(8) } else { w })
                .collect();
            let first = (next() % 8) as u16;
            let mut offsets = Vec::new();
            let mut at = first;
            for &w in &widths {
                offsets.push(at);
                // Mostly side by side; sometimes a gap.
                at += w as u16 + if next() % 5 == 0 { 1 + (next() % 3) as u16 } else { 0 };
            }
            let k = key(&offsets, &widths, &pair_widths);
            let payload: Vec<u8> = (0..(next() % 40)).map(|_| next() as u8).collect();
            let want = k.read_word_fields(&payload);
            assert_eq!(
                k.read_word(&payload),
                want,
                "{offsets:?} {widths:?} {pair_widths:?} {}",
                payload.len()
            );
            if k.contig.is_some() && payload.len() >= offsets[0] as usize + 8 {
                loads += 1;
            } else {
                fields += 1;
            }
        }
        // Both paths were taken many times.
        assert!(loads > 1000 && fields > 1000, "{loads} {fields}");
    }

    /// Every pair key of the builtin catalog is read with one load.
    #[test]
    fn builtin_keys_are_one_load() {
        let plans = Plans::new(&Catalog::builtin());
        let mut keys = 0;
        for (_, a) in &plans.actions {
            if let Action::Begin { key, .. } | Action::End { key, .. } = a {
                assert!(key.contig.is_some(), "{key:?}");
                keys += 1;
            }
        }
        assert!(keys >= 6);
    }
}
