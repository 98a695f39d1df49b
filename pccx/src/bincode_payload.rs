//! The `bincode` payload: pccx-lab's `NpuTrace` in bincode 1.x's default
//! encoding (fixed-width little-endian integers, u64 length prefixes, strings
//! as length + UTF-8, `Option` as a 0/1 tag byte).
//!
//! Hand-written on purpose: decoding untrusted bytes bounds every length
//! against the bytes left before allocating, and the tests check these bytes
//! against the real `bincode` 1.3 crate.
//!
//! Two layouts exist in the wild. The seed's `NpuEvent` has four fields
//! (`BincodeLayout::Seed`); current pccx-lab adds `api_name:
//! Option<String>` as a fifth field (`BincodeLayout::ApiName`, what
//! pccx-lab's `NpuTrace::from_payload` decodes today). bincode is not
//! self-describing, so the reader tries the seed layout first and accepts a
//! layout only if it consumes the payload exactly.

use crate::error::PccxError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpuEvent {
    pub core_id: u32,
    pub start_cycle: u64,
    pub duration: u64,
    pub event_type: String,
    /// Only in the `ApiName` layout.
    pub api_name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NpuTrace {
    pub total_cycles: u64,
    pub events: Vec<NpuEvent>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BincodeLayout {
    /// `NpuEvent { core_id, start_cycle, duration, event_type }`.
    Seed,
    /// The same plus `api_name: Option<String>` (later pccx-lab).
    ApiName,
}

impl BincodeLayout {
    /// Fewest bytes one event can take: bounds the event count up front.
    fn min_event_size(self) -> usize {
        match self {
            BincodeLayout::Seed => 4 + 8 + 8 + 8,
            BincodeLayout::ApiName => 4 + 8 + 8 + 8 + 1,
        }
    }
}

impl NpuTrace {
    /// Encode in `layout`. The seed layout cannot carry `api_name`.
    pub fn encode(&self, layout: BincodeLayout) -> Result<Vec<u8>, PccxError> {
        let mut out = Vec::with_capacity(16 + self.events.len() * 40);
        out.extend_from_slice(&encode_prefix(self.total_cycles, self.events.len() as u64));
        for e in &self.events {
            encode_event(
                &mut out,
                e.core_id,
                e.start_cycle,
                e.duration,
                &e.event_type,
                e.api_name.as_deref(),
                layout,
            )?;
        }
        Ok(out)
    }

    /// Decode, detecting the layout. The payload must be consumed exactly.
    pub fn decode(bytes: &[u8]) -> Result<(Self, BincodeLayout), PccxError> {
        let layout = detect_layout(bytes)?;
        let events = BincodeEvents::new(bytes, layout)?;
        let total_cycles = events.total_cycles();
        let events = events.collect::<Result<Vec<_>, _>>()?;
        Ok((Self { total_cycles, events }, layout))
    }
}

/// The bytes before the first event: `total_cycles`, then the event count
/// (bincode's u64 `Vec` length). Lets a writer stream events it has not
/// collected, once it knows how many there are.
pub fn encode_prefix(total_cycles: u64, events: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&total_cycles.to_le_bytes());
    b[8..].copy_from_slice(&events.to_le_bytes());
    b
}

/// Append one `NpuEvent` in `layout`. The seed layout cannot carry `api_name`.
pub fn encode_event(
    out: &mut Vec<u8>,
    core_id: u32,
    start_cycle: u64,
    duration: u64,
    event_type: &str,
    api_name: Option<&str>,
    layout: BincodeLayout,
) -> Result<(), PccxError> {
    out.extend_from_slice(&core_id.to_le_bytes());
    out.extend_from_slice(&start_cycle.to_le_bytes());
    out.extend_from_slice(&duration.to_le_bytes());
    put_str(out, event_type);
    match (layout, api_name) {
        (BincodeLayout::Seed, None) => {}
        (BincodeLayout::Seed, Some(_)) => {
            return Err(PccxError::Write("the seed bincode layout has no api_name field".into()))
        }
        (BincodeLayout::ApiName, None) => out.push(0),
        (BincodeLayout::ApiName, Some(name)) => {
            out.push(1);
            put_str(out, name);
        }
    }
    Ok(())
}

/// Encoded size of one event without `api_name`.
pub fn encoded_event_len(event_type: &str, layout: BincodeLayout) -> u64 {
    let tag = match layout {
        BincodeLayout::Seed => 0,
        BincodeLayout::ApiName => 1,
    };
    (4 + 8 + 8 + 8 + event_type.len() + tag) as u64
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// Find the layout that decodes `bytes` exactly, without storing events.
pub fn detect_layout(bytes: &[u8]) -> Result<BincodeLayout, PccxError> {
    let seed_err = match check_exact(bytes, BincodeLayout::Seed) {
        Ok(()) => return Ok(BincodeLayout::Seed),
        Err(e) => e,
    };
    match check_exact(bytes, BincodeLayout::ApiName) {
        Ok(()) => Ok(BincodeLayout::ApiName),
        Err(_) => Err(seed_err),
    }
}

fn check_exact(bytes: &[u8], layout: BincodeLayout) -> Result<(), PccxError> {
    let mut it = BincodeEvents::new(bytes, layout)?;
    for e in it.by_ref() {
        e?;
    }
    it.finish()
}

/// Streaming decoder of the events, for payloads too large to collect.
pub struct BincodeEvents<'a> {
    bytes: &'a [u8],
    pos: usize,
    total_cycles: u64,
    remaining: u64,
    layout: BincodeLayout,
    failed: bool,
}

impl<'a> BincodeEvents<'a> {
    pub fn new(bytes: &'a [u8], layout: BincodeLayout) -> Result<Self, PccxError> {
        let mut me = Self {
            bytes,
            pos: 0,
            total_cycles: 0,
            remaining: 0,
            layout,
            failed: false,
        };
        me.total_cycles = me.u64("total_cycles")?;
        let count = me.u64("events length")?;
        let room = (bytes.len() - me.pos) as u64 / layout.min_event_size() as u64;
        if count > room {
            return Err(me.err(format!("{count} events cannot fit in {} bytes", bytes.len() - me.pos)));
        }
        me.remaining = count;
        Ok(me)
    }

    pub fn total_cycles(&self) -> u64 {
        self.total_cycles
    }

    pub fn layout(&self) -> BincodeLayout {
        self.layout
    }

    /// Events not yet decoded.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// After the last event: error if bytes are left over.
    pub fn finish(&self) -> Result<(), PccxError> {
        if self.remaining == 0 && self.pos != self.bytes.len() {
            return Err(self.err(format!("{} bytes after the last event", self.bytes.len() - self.pos)));
        }
        Ok(())
    }

    fn err(&self, reason: String) -> PccxError {
        PccxError::Bincode {
            offset: self.pos as u64,
            reason,
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], PccxError> {
        let bytes = self.bytes;
        match bytes.get(self.pos..self.pos.saturating_add(n)) {
            Some(s) if self.pos.checked_add(n).is_some() => {
                self.pos += n;
                Ok(s)
            }
            _ => Err(self.err(format!("{what} needs {n} bytes, {} left", bytes.len() - self.pos))),
        }
    }

    fn u64(&mut self, what: &str) -> Result<u64, PccxError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }

    fn u32(&mut self, what: &str) -> Result<u32, PccxError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
    }

    fn string(&mut self, what: &str) -> Result<String, PccxError> {
        let len = self.u64(what)?;
        let left = (self.bytes.len() - self.pos) as u64;
        if len > left {
            return Err(self.err(format!("{what} length {len} exceeds the {left} bytes left")));
        }
        let start = self.pos;
        let raw = self.take(len as usize, what)?;
        std::str::from_utf8(raw)
            .map(str::to_owned)
            .map_err(|e| PccxError::Bincode {
                offset: (start + e.valid_up_to()) as u64,
                reason: format!("{what} is not UTF-8"),
            })
    }

    fn event(&mut self) -> Result<NpuEvent, PccxError> {
        let core_id = self.u32("core_id")?;
        let start_cycle = self.u64("start_cycle")?;
        let duration = self.u64("duration")?;
        let event_type = self.string("event_type")?;
        let api_name = match self.layout {
            BincodeLayout::Seed => None,
            BincodeLayout::ApiName => match self.take(1, "api_name tag")?[0] {
                0 => None,
                1 => Some(self.string("api_name")?),
                t => return Err(self.err(format!("api_name option tag {t} is not 0 or 1"))),
            },
        };
        Ok(NpuEvent {
            core_id,
            start_cycle,
            duration,
            event_type,
            api_name,
        })
    }
}

impl Iterator for BincodeEvents<'_> {
    type Item = Result<NpuEvent, PccxError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let r = self.event();
        if r.is_err() {
            self.failed = true;
        } else if self.remaining == 0 {
            if let Err(e) = self.finish() {
                self.failed = true;
                return Some(Err(e));
            }
        }
        Some(r)
    }
}
