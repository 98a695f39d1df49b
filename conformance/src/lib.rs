//! The conformance suite: scenarios that run the real module and daemon in
//! a real guest kernel against emu-device, and reduce what happened to a
//! normalised outcome (no timestamps, no addresses) that `tests/` compares
//! with reviewed insta snapshots. The same snapshot holds for every kernel.
//!
//! Environment: `HMB_TRACE_KERNEL` (a name from images/KERNELS; default its first
//! line), `HMB_TRACE_DEVICE` (ivshmem, the default, or nvme), `HMB_TRACE_QEMU`
//! (7.2 or 10.0 on ivshmem; nvme always runs 11.1), `HMB_TRACE_INJECT=reset`
//! (add a controller reset to the streaming scenario).

pub mod env;
pub mod outcome;
pub mod scenarios;

pub use env::Env;
