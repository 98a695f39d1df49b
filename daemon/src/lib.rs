//! hmb-trace-daemon: drains the HMB trace ring into trace.bin.
//!
//! See docs/daemon.md. The binary is `src/main.rs`; the pieces live here so
//! host tests can drive them.

pub mod device;
mod direct;
pub mod drain;
pub mod exit;
pub mod output;
pub mod signals;
