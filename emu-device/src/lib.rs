//! emu-device: the emulated NVMe controller of hmb-trace.
//!
//! It owns the emulated HMB, serves it to QEMU's `ivshmem-doorbell` device
//! over the ivshmem server protocol (being a peer itself), waits for the
//! kernel module's advert, runs the firmware model on the advertised trace
//! slice, turns the model's notifications into guest interrupts, and takes
//! orders from a control socket. docs/emu-device.md describes it.

pub mod control;
pub mod error;
pub mod ivshmem;
pub mod sockpath;
pub mod vfio_user;

pub use error::EmuError;
