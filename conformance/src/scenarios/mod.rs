//! The scenarios: those both devices run with the same steps, written once
//! over a device's `shared::Side` (`shared`, with `header_faults`), and a
//! file per device (`ivshmem`, `nvme`) with its `Side` and its own
//! scenarios. `run` picks the device; neither device file imports the other.

mod header_faults;
pub mod ivshmem;
mod ivshmem_lock_paths;
pub mod nvme;
mod nvme_big_ring;
mod nvme_io;
mod nvme_lock_paths;
mod shared;

use anyhow::Result;
use serde_json::Value;

use hmb_harness::emu::EmuDevice;
use hmb_harness::nvme_guest::NvmeDevice;

use crate::env::{Device, Env};

/// Run one scenario on the environment's device.
pub fn run(env: &Env, name: &str) -> Result<Value> {
    match env.device {
        Device::Ivshmem => shared::run::<EmuDevice>(env, name).unwrap_or_else(|| ivshmem::run(env, name)),
        Device::Nvme => shared::run::<NvmeDevice>(env, name).unwrap_or_else(|| nvme::run(env, name)),
    }
}
