//! The `flatbuf` payload: packed 24-byte little-endian events, read in
//! place (no copy) from a slice or a memory map.
//!
//! Later pccx-lab versions may append a name table ("PCC2" trailer) after the
//! events; it is recognised so such files read correctly (see docs/pccx.md).

use crate::error::PccxError;

pub const FLAT_EVENT_SIZE: usize = 24;
/// "PCC2" as a little-endian u32, the name-table trailer magic.
pub const NAME_TABLE_MAGIC: [u8; 4] = *b"PCC2";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlatEvent {
    pub core_id: u32,
    pub start_cycle: u64,
    pub duration: u64,
    pub event_type_id: u32,
}

impl FlatEvent {
    pub fn encode(&self) -> [u8; FLAT_EVENT_SIZE] {
        let mut b = [0u8; FLAT_EVENT_SIZE];
        b[0..4].copy_from_slice(&self.core_id.to_le_bytes());
        b[4..12].copy_from_slice(&self.start_cycle.to_le_bytes());
        b[12..20].copy_from_slice(&self.duration.to_le_bytes());
        b[20..24].copy_from_slice(&self.event_type_id.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; FLAT_EVENT_SIZE]) -> Self {
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Self {
            core_id: u32_at(0),
            start_cycle: u64_at(4),
            duration: u64_at(12),
            event_type_id: u32_at(20),
        }
    }

    pub fn type_name(&self) -> Option<&'static str> {
        event_type_name(self.event_type_id)
    }
}

/// Names of the event type ids. 0..=5 are the seed's; 6 (`API_CALL`) was
/// added by later pccx-lab versions. Other ids are kept as numbers.
pub fn event_type_name(id: u32) -> Option<&'static str> {
    Some(match id {
        0 => "UNKNOWN",
        1 => "MAC_COMPUTE",
        2 => "DMA_READ",
        3 => "DMA_WRITE",
        4 => "SYSTOLIC_STALL",
        5 => "BARRIER_SYNC",
        6 => "API_CALL",
        _ => return None,
    })
}

/// The id for a name, the inverse of [`event_type_name`]; unknown names map
/// to 0 as pccx-lab does.
pub fn event_type_id(name: &str) -> u32 {
    (0..=6).find(|&id| event_type_name(id) == Some(name)).unwrap_or(0)
}

/// The events of a flatbuf payload, borrowed, plus the optional name table.
#[derive(Debug, Clone, Copy)]
pub struct FlatEvents<'a> {
    events: &'a [u8],
    trailer: Option<&'a [u8]>,
}

impl<'a> FlatEvents<'a> {
    /// Split a payload into events and trailer. A trailer is recognised only
    /// at the first 24-byte-aligned "PCC2" and only if it parses exactly to
    /// the end; otherwise the payload must be a whole number of events.
    pub fn new(payload: &'a [u8]) -> Result<Self, PccxError> {
        let mut k = 0;
        while k + 8 <= payload.len() {
            if payload[k..k + 4] == NAME_TABLE_MAGIC {
                let trailer = &payload[k..];
                if parse_name_table(trailer, (k / FLAT_EVENT_SIZE) as u32).is_ok() {
                    return Ok(Self {
                        events: &payload[..k],
                        trailer: Some(trailer),
                    });
                }
                break;
            }
            k += FLAT_EVENT_SIZE;
        }
        if !payload.len().is_multiple_of(FLAT_EVENT_SIZE) {
            return Err(PccxError::FlatbufLength {
                len: payload.len() as u64,
            });
        }
        Ok(Self {
            events: payload,
            trailer: None,
        })
    }

    pub fn len(&self) -> usize {
        self.events.len() / FLAT_EVENT_SIZE
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<FlatEvent> {
        let at = i.checked_mul(FLAT_EVENT_SIZE)?;
        let chunk = self.events.get(at..at + FLAT_EVENT_SIZE)?;
        chunk.try_into().ok().map(FlatEvent::decode)
    }

    pub fn iter(&self) -> impl Iterator<Item = FlatEvent> + 'a {
        self.events
            .chunks_exact(FLAT_EVENT_SIZE)
            .filter_map(|c| c.try_into().ok().map(FlatEvent::decode))
    }

    /// The (event index, name) pairs of a name-table trailer, if any.
    pub fn names(&self) -> Vec<(u32, String)> {
        match self.trailer {
            Some(t) => parse_name_table(t, self.len() as u32).unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

/// Trailer: magic, u32 count, then count × (u32 event index, u16 len, bytes).
fn parse_name_table(t: &[u8], events: u32) -> Result<Vec<(u32, String)>, ()> {
    let count = u32::from_le_bytes(t.get(4..8).ok_or(())?.try_into().map_err(|_| ())?);
    // Each entry takes at least 6 bytes: bound the count before allocating.
    if count as usize > t.len().saturating_sub(8) / 6 {
        return Err(());
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut at = 8usize;
    for _ in 0..count {
        let idx = u32::from_le_bytes(t.get(at..at + 4).ok_or(())?.try_into().map_err(|_| ())?);
        let len = u16::from_le_bytes(t.get(at + 4..at + 6).ok_or(())?.try_into().map_err(|_| ())?) as usize;
        let name = t.get(at + 6..at + 6 + len).ok_or(())?;
        if idx >= events {
            return Err(());
        }
        out.push((idx, String::from_utf8_lossy(name).into_owned()));
        at += 6 + len;
    }
    if at != t.len() {
        return Err(());
    }
    Ok(out)
}

/// Encode events as a flatbuf payload (no trailer).
pub fn encode_events(events: &[FlatEvent]) -> Vec<u8> {
    let mut out = Vec::with_capacity(events.len() * FLAT_EVENT_SIZE);
    for e in events {
        out.extend_from_slice(&e.encode());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_the_seeds() {
        let e = FlatEvent {
            core_id: 0x01020304,
            start_cycle: 5,
            duration: 6,
            event_type_id: 2,
        };
        let b = e.encode();
        assert_eq!(&b[0..4], &[4, 3, 2, 1]);
        assert_eq!(b[4], 5);
        assert_eq!(b[12], 6);
        assert_eq!(b[20], 2);
        assert_eq!(FlatEvent::decode(&b), e);
        assert_eq!(e.type_name(), Some("DMA_READ"));
        assert_eq!(event_type_id("BARRIER_SYNC"), 5);
        assert_eq!(event_type_id("nonsense"), 0);
    }

    #[test]
    fn trailer_is_recognised_only_when_exact() {
        let e = FlatEvent {
            core_id: 1,
            start_cycle: 2,
            duration: 3,
            event_type_id: 6,
        };
        let mut p = encode_events(&[e, e]);
        p.extend_from_slice(b"PCC2");
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&1u32.to_le_bytes());
        p.extend_from_slice(&3u16.to_le_bytes());
        p.extend_from_slice(b"abc");
        let f = FlatEvents::new(&p).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.names(), vec![(1, "abc".to_string())]);
        p.push(0);
        assert!(matches!(FlatEvents::new(&p), Err(PccxError::FlatbufLength { .. })));
        assert!(matches!(
            FlatEvents::new(&[0u8; 25]),
            Err(PccxError::FlatbufLength { len: 25 })
        ));
        // A core id spelling "PCC2" in a well-formed payload is just an event.
        let odd = FlatEvent {
            core_id: u32::from_le_bytes(*b"PCC2"),
            ..e
        };
        let p = encode_events(&[odd]);
        assert_eq!(FlatEvents::new(&p).unwrap().iter().collect::<Vec<_>>(), vec![odd]);
    }
}
