//! Ring ABI v1 of hmb-trace.
//!
//! `docs/abi.md` is the specification. This crate mirrors it for Rust code
//! (firmware model, daemon, analyzer) and `kmod/include/uapi/linux/nvme_hmb_trace.h`
//! mirrors it for C; `tests/layout.rs` checks the two (and docs/abi.md) against each other.
//!
//! Everything that parses bytes here treats them as untrusted: every length
//! is bounded and no input makes it panic.

pub mod error;
pub mod ioctl;
pub mod layout;
pub mod module_sim;
pub mod parse;
pub mod reference;
pub mod shared;
pub mod sync;
pub mod vectors;
pub mod wrap;

pub use error::{AbiError, OwnerError};
pub use layout::*;
pub use parse::{check_compat, parse_record_at, RecordAt, RingSnapshot};
pub use shared::SharedRing;
pub use wrap::{align_record, placement, Placement};
