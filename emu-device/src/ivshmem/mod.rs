//! The ivshmem server protocol: wire format, server (with the device as an
//! in-process peer), and a client that speaks QEMU's side.

pub mod client;
pub mod server;
pub mod wire;

pub use client::{IvshmemClient, Notification};
pub use server::{IvshmemServer, PeerEvent, PeerTable, ServerConfig, StopHandle, DEFAULT_VECTORS, DEVICE_PEER_ID};
