//! The ivshmem server, with emu-device as one of its peers.
//!
//! Debian ships no ivshmem-server, so emu-device serves the protocol itself
//! (QEMU docs/specs/ivshmem-spec.rst; contrib/ivshmem-server is the reference
//! implementation). The device does not connect to itself over the socket: it
//! is an in-process peer with a fixed id (`DEVICE_PEER_ID`, 0) whose
//! eventfds the server hands to every QEMU that connects. QEMU peers get ids
//! from 1 up, the lowest free one first.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::wire::{send_msg, IVSHMEM_PROTOCOL_VERSION, MAX_PEER_ID, SHM_FD_MESSAGE};
use crate::error::EmuError;
use crate::ivshmem::hmb::Hmb;

/// The device's own peer id: the kernel module's `device_peer` parameter
/// defaults to it.
pub const DEVICE_PEER_ID: u16 = 0;
/// Vectors per peer unless configured: 0 = data, 1 = state change.
pub const DEFAULT_VECTORS: u16 = 2;
/// QEMU's ivshmem accepts at most this many vectors per peer.
pub(crate) const MAX_VECTORS: u16 = 64;

/// What the server reports to the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerEvent {
    /// A QEMU (or any client) connected and got this id.
    Joined(u16),
    /// That client disconnected or its socket failed.
    Left(u16),
    /// A peer wrote the device's eventfd for `vector` (`count` times since
    /// the last read: eventfds accumulate).
    Doorbell { vector: u16, count: u64 },
}

struct Peer {
    sock: UnixStream,
    /// Written to interrupt this peer on vector i.
    vectors: Vec<EventFd>,
}

fn new_eventfd() -> Result<EventFd, EmuError> {
    EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
        .map_err(|e| EmuError::sys("eventfd", e))
}

/// Connected client peers, shared between the server thread (joins and
/// leaves) and the device (interrupts).
#[derive(Clone, Default)]
pub struct PeerTable {
    inner: Arc<Mutex<BTreeMap<u16, Peer>>>,
}

impl PeerTable {
    fn lock(&self) -> MutexGuard<'_, BTreeMap<u16, Peer>> {
        // A panic elsewhere must not take interrupts down with it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn ids(&self) -> Vec<u16> {
        self.lock().keys().copied().collect()
    }

    /// Interrupt every connected client peer on `vector` (normally there is
    /// exactly one: the QEMU running the guest). Returns how many were hit.
    pub fn interrupt_all(&self, vector: u16) -> Result<usize, EmuError> {
        let peers = self.lock();
        let mut hit = 0;
        for (id, peer) in peers.iter() {
            let Some(efd) = peer.vectors.get(vector as usize) else {
                return Err(EmuError::BadVector {
                    vector,
                    vectors: peer.vectors.len() as u16,
                });
            };
            match efd.write(1) {
                Ok(_) => hit += 1,
                // The counter is saturated: the peer has an interrupt pending anyway.
                Err(nix::Error::EAGAIN) => hit += 1,
                Err(e) => log::warn!("interrupting peer {id} on vector {vector}: {e}"),
            }
        }
        if hit == 0 {
            return Err(EmuError::NoGuest);
        }
        Ok(hit)
    }
}

/// Server configuration.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub socket_path: PathBuf,
    pub vectors: u16,
}

/// A bound ivshmem server. `run` serves until `StopHandle::stop`.
pub struct IvshmemServer {
    listener: UnixListener,
    path: PathBuf,
    hmb: Arc<Hmb>,
    /// The device's own eventfds: read to receive doorbells on vector i.
    device_vectors: Vec<EventFd>,
    peers: PeerTable,
    stop: Arc<EventFd>,
}

/// Wakes the server thread and makes `run` return.
#[derive(Clone)]
pub struct StopHandle(Arc<EventFd>);

impl StopHandle {
    pub fn stop(&self) {
        if let Err(e) = self.0.write(1) {
            log::warn!("stopping the ivshmem server: {e}");
        }
    }
}

impl IvshmemServer {
    pub fn bind(config: &ServerConfig, hmb: Arc<Hmb>) -> Result<Self, EmuError> {
        if config.vectors == 0 || config.vectors > MAX_VECTORS {
            return Err(EmuError::Protocol(format!(
                "vectors must be 1..={MAX_VECTORS}, got {}",
                config.vectors
            )));
        }
        let device_vectors = (0..config.vectors)
            .map(|_| new_eventfd())
            .collect::<Result<Vec<_>, _>>()?;
        let listener = crate::sockpath::bind_listener(&config.socket_path, "ivshmem socket")?;
        Ok(Self {
            listener,
            path: config.socket_path.clone(),
            hmb,
            device_vectors,
            peers: PeerTable::default(),
            stop: Arc::new(new_eventfd()?),
        })
    }

    pub fn peers(&self) -> PeerTable {
        self.peers.clone()
    }

    pub fn stop_handle(&self) -> StopHandle {
        StopHandle(self.stop.clone())
    }

    pub fn socket_path(&self) -> &Path {
        &self.path
    }

    fn lowest_free_id(&self, peers: &BTreeMap<u16, Peer>) -> Option<u16> {
        (0..=MAX_PEER_ID as u16).find(|id| *id != DEVICE_PEER_ID && !peers.contains_key(id))
    }

    /// The connect sequence of the spec, steps 1 to 5, then the new peer is
    /// announced to the others.
    fn admit(&self, sock: UnixStream) -> Result<u16, EmuError> {
        let mut peers = self.peers.lock();
        let id = self
            .lowest_free_id(&peers)
            .ok_or_else(|| EmuError::Protocol("no free peer id".into()))?;
        let vectors = (0..self.device_vectors.len())
            .map(|_| new_eventfd())
            .collect::<Result<Vec<_>, _>>()?;
        let s = sock.as_fd();
        send_msg(s, IVSHMEM_PROTOCOL_VERSION, None)?;
        send_msg(s, id as i64, None)?;
        send_msg(s, SHM_FD_MESSAGE, Some(self.hmb.fd()))?;
        // Existing peers, the device first: their fds let the new peer
        // interrupt them.
        for efd in &self.device_vectors {
            send_msg(s, DEVICE_PEER_ID as i64, Some(efd.as_fd()))?;
        }
        for (other_id, other) in peers.iter() {
            for efd in &other.vectors {
                send_msg(s, *other_id as i64, Some(efd.as_fd()))?;
            }
        }
        // Interrupt setup: the new peer's own fds, to receive interrupts.
        for efd in &vectors {
            send_msg(s, id as i64, Some(efd.as_fd()))?;
        }
        for (other_id, other) in peers.iter() {
            for efd in &vectors {
                if let Err(e) = send_msg(other.sock.as_fd(), id as i64, Some(efd.as_fd())) {
                    log::warn!("announcing peer {id} to peer {other_id}: {e}");
                }
            }
        }
        peers.insert(id, Peer { sock, vectors });
        Ok(id)
    }

    fn evict(&self, id: u16) {
        let mut peers = self.peers.lock();
        if peers.remove(&id).is_none() {
            return;
        }
        for (other_id, other) in peers.iter() {
            if let Err(e) = send_msg(other.sock.as_fd(), id as i64, None) {
                log::warn!("announcing departure of peer {id} to peer {other_id}: {e}");
            }
        }
    }

    /// Serve until stopped. Every event goes to `on_event`.
    pub fn run(&self, mut on_event: impl FnMut(PeerEvent)) -> Result<(), EmuError> {
        log::info!(
            "ivshmem server on {} ({} vectors, HMB {} bytes, device peer id {DEVICE_PEER_ID})",
            self.path.display(),
            self.device_vectors.len(),
            self.hmb.len()
        );
        loop {
            let peer_ids: Vec<u16> = self.peers.ids();
            // Clone sockets out of the table so the lock is not held in poll.
            let peer_socks: Vec<UnixStream> = {
                let peers = self.peers.lock();
                peer_ids
                    .iter()
                    .filter_map(|id| peers.get(id).and_then(|p| p.sock.try_clone().ok()))
                    .collect()
            };
            let mut fds: Vec<PollFd<'_>> = Vec::new();
            fds.push(PollFd::new(self.stop.as_fd(), PollFlags::POLLIN));
            fds.push(PollFd::new(self.listener.as_fd(), PollFlags::POLLIN));
            for efd in &self.device_vectors {
                fds.push(PollFd::new(efd.as_fd(), PollFlags::POLLIN));
            }
            for sock in &peer_socks {
                fds.push(PollFd::new(sock.as_fd(), PollFlags::POLLIN));
            }
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(EmuError::sys("poll", e)),
            }
            let ready = |i: usize| fds[i].revents().is_some_and(|r| !r.is_empty());
            if ready(0) {
                log::debug!("ivshmem server stopping");
                // Close client connections now, so peers see the server go.
                self.peers.lock().clear();
                return Ok(());
            }
            let nvec = self.device_vectors.len();
            for v in 0..nvec {
                if ready(2 + v) {
                    match self.device_vectors[v].read() {
                        Ok(count) => on_event(PeerEvent::Doorbell {
                            vector: v as u16,
                            count,
                        }),
                        Err(nix::Error::EAGAIN) => {}
                        Err(e) => return Err(EmuError::sys("reading doorbell eventfd", e)),
                    }
                }
            }
            let mut gone = Vec::new();
            for (i, id) in peer_ids.iter().enumerate() {
                // QEMU never sends anything: data, hangup or error all mean
                // the peer is going away (as in contrib/ivshmem-server).
                if ready(2 + nvec + i) {
                    gone.push(*id);
                }
            }
            let accept = ready(1);
            drop(fds);
            for id in gone {
                log::info!("ivshmem peer {id} disconnected");
                self.evict(id);
                on_event(PeerEvent::Left(id));
            }
            if accept {
                match self.listener.accept() {
                    Ok((sock, _)) => match self.admit(sock) {
                        Ok(id) => {
                            log::info!("ivshmem peer {id} connected");
                            on_event(PeerEvent::Joined(id));
                        }
                        Err(e) => log::warn!("admitting a new ivshmem peer failed: {e}"),
                    },
                    Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(EmuError::io("accept", e)),
                }
            }
        }
    }

    /// The device's receive eventfd for `vector` (tests and diagnostics).
    pub fn device_vector_fd(&self, vector: u16) -> Option<BorrowedFd<'_>> {
        self.device_vectors.get(vector as usize).map(|e| e.as_fd())
    }
}

impl Drop for IvshmemServer {
    fn drop(&mut self) {
        // Close client sockets first so QEMU sees the server go away, then
        // remove the socket file: nothing is left on disk.
        self.peers.lock().clear();
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != ErrorKind::NotFound {
                log::warn!("removing {}: {e}", self.path.display());
            }
        }
        log::debug!("ivshmem server closed (listener fd {})", self.listener.as_raw_fd());
    }
}
