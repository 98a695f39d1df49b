//! The scenarios, a file per device (`ivshmem`, `nvme`), and what both
//! share (`header_faults`). `run` picks the device's file; neither file
//! imports the other.

mod header_faults;
pub mod ivshmem;
pub mod nvme;

use anyhow::Result;
use serde_json::Value;

use crate::env::{Device, Env};

/// Run one scenario on the environment's device.
pub fn run(env: &Env, name: &str) -> Result<Value> {
    match env.device {
        Device::Ivshmem => ivshmem::run(env, name),
        Device::Nvme => nvme::run(env, name),
    }
}
