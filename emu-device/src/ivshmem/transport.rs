//! How the ivshmem device reaches the guest, kept apart from the device's
//! state machine (`device`) and the producer (`production`), which see only
//! the [`Transport`] trait.
//!
//! A transport gives three things: the memory shared with the guest, a way
//! to raise an interrupt vector in the guest, and a stream of events
//! (doorbells from the guest, guest arriving or leaving). ivshmem-doorbell
//! is its one implementation. The NVMe controller over vfio-user
//! (`crate::vfio_user`) does not go through it: its ring lives in the HMB
//! the host driver lends from guest RAM, reached by DMA, and its
//! interrupts are the NVMe queues' MSI-X (docs/nvme-controller.md).

use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crate::error::EmuError;
use crate::ivshmem::hmb::{Hmb, MemRegion};
use crate::ivshmem::{IvshmemServer, PeerEvent, PeerTable, ServerConfig, StopHandle};

/// Default vector raised when new records are published.
pub const VECTOR_DATA: u16 = 0;
/// Default vector raised when the ring state changes (FROZEN set, header
/// faults). The kernel module allocates a single MSI-X vector and reads
/// the whole ring state on it, so state changes share vector 0 unless
/// `--state-vector` says otherwise.
pub const VECTOR_STATE: u16 = 0;

/// Which vector each kind of notification raises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Vectors {
    pub data: u16,
    pub state: u16,
}

impl Default for Vectors {
    fn default() -> Self {
        Self {
            data: VECTOR_DATA,
            state: VECTOR_STATE,
        }
    }
}
/// Doorbell vector the module rings after writing a READY advert.
pub(crate) const DOORBELL_ADVERT: u16 = 0;

/// Something that happened on the transport.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportEvent {
    /// The guest rang the device's doorbell on `vector`.
    Doorbell {
        vector: u16,
    },
    GuestJoined(u16),
    GuestLeft(u16),
    /// The transport stopped working; the device shuts down.
    Failed(String),
}

pub(crate) trait Transport: Send + Sync {
    /// Memory shared with the guest that holds the advert and the slice.
    fn memory(&self) -> &MemRegion;
    /// Raise interrupt `vector` in the guest.
    fn interrupt(&self, vector: u16) -> Result<(), EmuError>;
    /// Connected guests, for status reports.
    fn guests(&self) -> Vec<u16>;
    /// Short name for logs and status.
    fn name(&self) -> &'static str;
}

/// ivshmem-doorbell: the HMB is a memfd served over the ivshmem protocol.
pub(crate) struct IvshmemTransport {
    hmb: Arc<Hmb>,
    peers: PeerTable,
    stop: StopHandle,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl IvshmemTransport {
    /// Bind the server socket and start serving; events go to `events`,
    /// mapped by `wrap` into the caller's message type.
    pub(crate) fn start<M: Send + 'static>(
        config: &ServerConfig,
        hmb: Arc<Hmb>,
        events: Sender<M>,
        wrap: fn(TransportEvent) -> M,
    ) -> Result<Self, EmuError> {
        let server = IvshmemServer::bind(config, hmb.clone())?;
        let peers = server.peers();
        let stop = server.stop_handle();
        let thread = std::thread::Builder::new()
            .name("ivshmem".into())
            .spawn(move || {
                let send = |ev: TransportEvent| {
                    let _ = events.send(wrap(ev));
                };
                let result = server.run(|ev| match ev {
                    PeerEvent::Joined(id) => send(TransportEvent::GuestJoined(id)),
                    PeerEvent::Left(id) => send(TransportEvent::GuestLeft(id)),
                    PeerEvent::Doorbell { vector, count } => {
                        log::debug!("doorbell on vector {vector} (x{count})");
                        send(TransportEvent::Doorbell { vector });
                    }
                });
                if let Err(e) = result {
                    log::error!("ivshmem server failed: {e}");
                    send(TransportEvent::Failed(e.to_string()));
                }
                // `server` drops here: client sockets closed, socket file removed.
            })
            .map_err(|e| EmuError::io("spawning ivshmem thread", e))?;
        Ok(Self {
            hmb,
            peers,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Stop serving: client connections closed, socket file removed. Safe
    /// to call more than once; also done on drop.
    pub(crate) fn shutdown(&self) {
        self.stop.stop();
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            if t.join().is_err() {
                log::error!("ivshmem thread panicked");
            }
        }
    }
}

impl Transport for IvshmemTransport {
    fn memory(&self) -> &MemRegion {
        &self.hmb
    }

    fn interrupt(&self, vector: u16) -> Result<(), EmuError> {
        self.peers.interrupt_all(vector).map(|_| ())
    }

    fn guests(&self) -> Vec<u16> {
        self.peers.ids()
    }

    fn name(&self) -> &'static str {
        "ivshmem"
    }
}

impl Drop for IvshmemTransport {
    fn drop(&mut self) {
        self.shutdown();
    }
}
