//! emu-device's ivshmem device (`emu-device serve`): the firmware model
//! behind QEMU's `ivshmem-doorbell`.
//!
//! - the ivshmem server protocol: `wire` (the format), `server` (with the
//!   device as an in-process peer), `client` (QEMU's side, for tests);
//! - `transport`: the `Transport` trait the device loop runs over, and
//!   `IvshmemTransport`;
//! - `hmb`: the emulated HMB (a memfd the guest maps as BAR2);
//! - `device`: the handshake and production state machine, with `advert`
//!   (reading the module's advert), `production` (the producer thread) and
//!   `faults` (the injections);
//! - `serve`: the whole device put together with its control socket;
//! - `report`: its typed answers to control requests (status, statistics,
//!   ground truth).

pub(crate) mod advert;
pub mod client;
pub mod device;
pub mod faults;
pub mod hmb;
pub mod production;
pub mod report;
pub mod serve;
pub mod server;
pub mod transport;
pub(crate) mod wire;

pub use client::{IvshmemClient, Notification};
pub use server::{IvshmemServer, PeerEvent, PeerTable, ServerConfig, StopHandle, DEFAULT_VECTORS, DEVICE_PEER_ID};
