//! The two producers the controller can write its ring with: the Rust
//! firmware model (`hmb_firmware_model::Producer`, the default) or the
//! freestanding C library of firmware-sdk/ through FFI (`--producer c`).
//! Both write the same bytes for the same records (tests/controller.rs
//! compares the slices); the journal does not know which one ran.

use std::str::FromStr;

use hmb_firmware_model::{Produced, Producer, SharedRing};
use hmb_firmware_sdk::{CProducer, Emitted};

/// Which producer a [`crate::NvmeTrace`] attaches to an adopted slice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ProducerKind {
    /// The Rust firmware model.
    #[default]
    Rust,
    /// The C library of firmware-sdk/ (hmb_trace_fw.c).
    C,
}

/// A producer name that is neither `rust` nor `c`.
#[derive(Debug, thiserror::Error)]
#[error("unknown producer {0:?} (rust or c)")]
pub struct UnknownProducer(String);

impl FromStr for ProducerKind {
    type Err = UnknownProducer;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "rust" => Ok(Self::Rust),
            "c" => Ok(Self::C),
            other => Err(UnknownProducer(other.to_owned())),
        }
    }
}

impl std::fmt::Display for ProducerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Rust => "rust",
            Self::C => "c",
        })
    }
}

/// An attached producer of either kind.
pub(crate) enum RingProducer {
    Rust(Producer),
    C(Box<CProducer>),
}

impl RingProducer {
    /// Attach `kind` to the ring at `base..base + len` (header first),
    /// checking the epoch against `generation`.
    ///
    /// # Safety
    /// The memory must stay mapped as long as the producer lives.
    pub(crate) unsafe fn attach(
        kind: ProducerKind,
        base: *mut u8,
        len: usize,
        generation: u64,
    ) -> Result<RingProducer, String> {
        match kind {
            ProducerKind::Rust => {
                // SAFETY: the caller keeps the mapping alive.
                let ring = unsafe { SharedRing::from_raw(base, len) }.map_err(|e| e.to_string())?;
                Producer::attach(ring)
                    .map(RingProducer::Rust)
                    .map_err(|e| e.to_string())
            }
            ProducerKind::C => {
                // SAFETY: as above; the hooks write only inside base..base + len.
                let mut p = Box::new(unsafe { CProducer::new(base, len, false) });
                p.attach(generation).map_err(|e| e.to_string())?;
                Ok(RingProducer::C(p))
            }
        }
    }

    pub(crate) fn produce(&mut self, opcode: u16, source: u32, timestamp_ns: u64, payload: &[u8]) -> Produced {
        match self {
            Self::Rust(p) => p.produce(opcode, source, timestamp_ns, payload),
            Self::C(p) => {
                // The C API does not return the sequence number: it is the
                // one the producer would give next, used by a write or a drop.
                let seq = p.next_seq();
                let r = match p.emit_ts(opcode, source, timestamp_ns, payload) {
                    Emitted::Written => Produced::Written { seq },
                    Emitted::Dropped => Produced::Dropped { seq },
                    Emitted::Frozen => Produced::Frozen,
                };
                if p.violations() != 0 {
                    log::error!(
                        "C producer: {} hook accesses outside its part of the slice",
                        p.violations()
                    );
                }
                r
            }
        }
    }

    pub(crate) fn freeze(&mut self) {
        match self {
            Self::Rust(p) => p.freeze(),
            Self::C(p) => p.freeze(),
        }
    }

    pub(crate) fn ring_size(&self) -> u64 {
        match self {
            Self::Rust(p) => p.ring_size(),
            Self::C(p) => p.ring_size(),
        }
    }

    pub(crate) fn head(&self) -> u64 {
        match self {
            Self::Rust(p) => p.head(),
            Self::C(p) => p.head(),
        }
    }

    pub(crate) fn next_seq(&self) -> u64 {
        match self {
            Self::Rust(p) => p.next_seq(),
            Self::C(p) => p.next_seq(),
        }
    }

    pub(crate) fn dropped_records(&self) -> u64 {
        match self {
            Self::Rust(p) => p.dropped_records(),
            Self::C(p) => p.dropped_records(),
        }
    }

    pub(crate) fn epoch(&self) -> u64 {
        match self {
            Self::Rust(p) => p.epoch(),
            Self::C(p) => p.epoch(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_names_round_trip_and_unknown_ones_are_refused() {
        for k in [ProducerKind::Rust, ProducerKind::C] {
            assert_eq!(k.to_string().parse::<ProducerKind>().unwrap(), k);
        }
        assert_eq!(ProducerKind::default(), ProducerKind::Rust);
        let e = "C++".parse::<ProducerKind>().unwrap_err();
        assert_eq!(e.to_string(), "unknown producer \"C++\" (rust or c)");
    }
}
