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
        let at = self.offset as usize;
        let w = self.width as usize;
        let b = payload.get(at..at + w)?;
        let mut v = [0u8; 8];
        v[..w].copy_from_slice(b);
        Some(u64::from_le_bytes(v))
    }
}

/// The key fields of a begin/end pair.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyAt {
    fields: [FieldAt; MAX_PAIR_KEY],
    len: u8,
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
        })
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

    /// Whether every key of this layout fits in 64 bits (the later part of
    /// a split logs pair records with the key packed so).
    pub(crate) fn packs(&self) -> bool {
        self.fields[..self.len as usize]
            .iter()
            .map(|f| f.width as u32 * 8)
            .sum::<u32>()
            <= 64
    }

    pub(crate) fn pack(&self, k: &[u64; MAX_PAIR_KEY]) -> u64 {
        let (mut v, mut shift) = (0u64, 0u32);
        for (f, x) in self.fields[..self.len as usize].iter().zip(k) {
            v |= x.checked_shl(shift).unwrap_or(0);
            shift += f.width as u32 * 8;
        }
        v
    }

    pub(crate) fn unpack(&self, mut v: u64) -> [u64; MAX_PAIR_KEY] {
        let mut k = [0u64; MAX_PAIR_KEY];
        for (slot, f) in k.iter_mut().zip(&self.fields[..self.len as usize]) {
            let bits = f.width as u32 * 8;
            *slot = if bits == 64 { v } else { v & ((1u64 << bits) - 1) };
            v = v.checked_shr(bits).unwrap_or(0);
        }
        k
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
    by_opcode: Vec<u16>,
    /// (opcode, action).
    actions: Vec<(u16, Action)>,
    /// Every pair key packs into 64 bits.
    pub(crate) keys_pack: bool,
}

impl Plans {
    pub(crate) fn new(catalog: &Catalog) -> Self {
        let mut by_opcode = vec![0u16; 1 << 16];
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
        let keys_pack = actions.iter().all(|(_, a)| match a {
            Action::Begin { key, .. } | Action::End { key, .. } => key.packs(),
            Action::Span { .. } => true,
        });
        Self {
            by_opcode,
            actions,
            keys_pack,
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

    pub(crate) fn action(&self, index: usize) -> (u16, &Action) {
        let (op, a) = &self.actions[index];
        (*op, a)
    }

    pub(crate) fn len(&self) -> usize {
        self.actions.len()
    }
}
