//! The out-of-band record of a physical page (24 bytes in the OOB table): what the page
//! holds and when it was written. Recovery rebuilds everything from these; an erased
//! page's record is all zeroes.
//!
//! `kind u8 | 3 reserved | index u32 (LPN or map page index) | seq u64 | covers u64`.
//! `seq` orders every program; `covers` (map pages only) is the sequence number up to
//! which the map page's content includes every mapping update (a GC move of a map page
//! keeps it).

pub(crate) const OOB_BYTES: usize = 24;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Oob {
    Erased,
    Data { lpn: u32, seq: u64 },
    Map { index: u32, seq: u64, covers: u64 },
}

impl Oob {
    pub fn encode(&self) -> [u8; OOB_BYTES] {
        let mut b = [0u8; OOB_BYTES];
        let (kind, index, seq, covers) = match *self {
            Oob::Erased => (0u8, 0, 0, 0),
            Oob::Data { lpn, seq } => (1, lpn, seq, 0),
            Oob::Map { index, seq, covers } => (2, index, seq, covers),
        };
        b[0] = kind;
        b[4..8].copy_from_slice(&index.to_le_bytes());
        b[8..16].copy_from_slice(&seq.to_le_bytes());
        b[16..24].copy_from_slice(&covers.to_le_bytes());
        b
    }

    /// None: a record no FTL writes (bad kind, a written page with seq 0).
    pub fn decode(b: &[u8]) -> Option<Oob> {
        let index = u32::from_le_bytes(b[4..8].try_into().ok()?);
        let seq = u64::from_le_bytes(b[8..16].try_into().ok()?);
        let covers = u64::from_le_bytes(b[16..24].try_into().ok()?);
        match b[0] {
            0 if b.iter().all(|&x| x == 0) => Some(Oob::Erased),
            1 if seq != 0 => Some(Oob::Data { lpn: index, seq }),
            2 if seq != 0 => Some(Oob::Map { index, seq, covers }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        for o in [
            Oob::Erased,
            Oob::Data { lpn: 7, seq: 9 },
            Oob::Map {
                index: 3,
                seq: 11,
                covers: 10,
            },
        ] {
            assert_eq!(Oob::decode(&o.encode()), Some(o));
        }
        let mut b = [0u8; OOB_BYTES];
        b[0] = 3;
        assert_eq!(Oob::decode(&b), None);
        b[0] = 1;
        assert_eq!(Oob::decode(&b), None, "a data page with seq 0");
    }
}
