//! The client side of the ivshmem server protocol, as QEMU speaks it.
//!
//! Used by the tests as a fake QEMU, and by `emu-device peer` to poke a
//! running server by hand. It follows the spec: version, own id, shared
//! memory fd, existing peers' fds, then its own fds (interrupt setup); later
//! messages announce peers joining (with fds) and leaving (without).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::wire::{recv_msg, Received, IVSHMEM_PROTOCOL_VERSION, MAX_PEER_ID, SHM_FD_MESSAGE};
use crate::error::EmuError;

/// A change announced after setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notification {
    /// A peer is fully known (all its vectors received).
    PeerJoined(u16),
    PeerLeft(u16),
}

pub struct IvshmemClient {
    sock: UnixStream,
    vectors: usize,
    pub id: u16,
    pub shm: OwnedFd,
    /// Own eventfds: readable when a peer interrupts us on vector i.
    pub own: Vec<OwnedFd>,
    /// Other peers' eventfds: written to interrupt them.
    pub peers: BTreeMap<u16, Vec<OwnedFd>>,
}

fn wait_readable(fd: std::os::fd::BorrowedFd<'_>, deadline: Instant) -> Result<bool, EmuError> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) if Instant::now() >= deadline => return Ok(false),
            Ok(0) => continue,
            Ok(_) => return Ok(true),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(EmuError::sys("poll", e)),
        }
    }
}

fn peer_id(value: i64) -> Result<u16, EmuError> {
    if (0..=MAX_PEER_ID).contains(&value) {
        Ok(value as u16)
    } else {
        Err(EmuError::Protocol(format!("peer id {value} out of range")))
    }
}

impl IvshmemClient {
    /// Connect and complete the setup sequence within `timeout`. `vectors`
    /// is how many vectors this client is configured for (like QEMU's
    /// `vectors=` property): it expects that many own fds.
    pub fn connect(path: &Path, vectors: usize, timeout: Duration) -> Result<Self, EmuError> {
        let deadline = Instant::now() + timeout;
        let sock = UnixStream::connect(path).map_err(|e| EmuError::io("connecting to ivshmem server", e))?;
        let next = |what: &str| -> Result<(i64, Option<OwnedFd>), EmuError> {
            if !wait_readable(sock.as_fd(), deadline)? {
                return Err(EmuError::Protocol(format!("timed out waiting for {what}")));
            }
            match recv_msg(sock.as_fd())? {
                Received::Msg { value, fd } => Ok((value, fd)),
                Received::Closed => Err(EmuError::Protocol(format!("server closed before {what}"))),
            }
        };
        let (version, fd) = next("the protocol version")?;
        if version != IVSHMEM_PROTOCOL_VERSION || fd.is_some() {
            return Err(EmuError::Protocol(format!("unsupported protocol version {version}")));
        }
        let (id, fd) = next("the peer id")?;
        let id = peer_id(id)?;
        if fd.is_some() {
            return Err(EmuError::Protocol("peer id came with a file descriptor".into()));
        }
        let (marker, shm) = next("the shared memory fd")?;
        let shm = match (marker, shm) {
            (SHM_FD_MESSAGE, Some(fd)) => fd,
            (v, _) => return Err(EmuError::Protocol(format!("expected -1 with the shm fd, got {v}"))),
        };
        let mut own = Vec::new();
        let mut peers: BTreeMap<u16, Vec<OwnedFd>> = BTreeMap::new();
        while own.len() < vectors {
            let (value, fd) = next("peer and vector fds")?;
            let who = peer_id(value)?;
            let fd = fd.ok_or_else(|| EmuError::Protocol(format!("peer {who} announced without fd during setup")))?;
            if who == id {
                own.push(fd);
            } else {
                peers.entry(who).or_default().push(fd);
            }
        }
        Ok(Self {
            sock,
            vectors,
            id,
            shm,
            own,
            peers,
        })
    }

    /// Interrupt `peer` on `vector`, as QEMU does for a Doorbell write.
    pub fn ring(&self, peer: u16, vector: u16) -> Result<(), EmuError> {
        let fds = self.peers.get(&peer).ok_or(EmuError::NoGuest)?;
        let fd = fds.get(vector as usize).ok_or(EmuError::BadVector {
            vector,
            vectors: fds.len() as u16,
        })?;
        nix::unistd::write(fd, &1u64.to_ne_bytes()).map_err(|e| EmuError::sys("eventfd write", e))?;
        Ok(())
    }

    /// Wait for an interrupt on own `vector`; returns the eventfd count, or
    /// `None` on timeout.
    pub fn wait_interrupt(&self, vector: u16, timeout: Duration) -> Result<Option<u64>, EmuError> {
        let fd = self.own.get(vector as usize).ok_or(EmuError::BadVector {
            vector,
            vectors: self.own.len() as u16,
        })?;
        if !wait_readable(fd.as_fd(), Instant::now() + timeout)? {
            return Ok(None);
        }
        let mut buf = [0u8; 8];
        nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(fd), &mut buf)
            .map_err(|e| EmuError::sys("eventfd read", e))?;
        Ok(Some(u64::from_ne_bytes(buf)))
    }

    /// Next join or leave announcement, or `None` on timeout. A join is
    /// reported once all of the peer's vectors arrived.
    pub fn next_notification(&mut self, timeout: Duration) -> Result<Option<Notification>, EmuError> {
        let deadline = Instant::now() + timeout;
        loop {
            if !wait_readable(self.sock.as_fd(), deadline)? {
                return Ok(None);
            }
            match recv_msg(self.sock.as_fd())? {
                Received::Closed => return Err(EmuError::Protocol("server closed the connection".into())),
                Received::Msg { value, fd: None } => {
                    let who = peer_id(value)?;
                    self.peers.remove(&who);
                    return Ok(Some(Notification::PeerLeft(who)));
                }
                Received::Msg { value, fd: Some(fd) } => {
                    let who = peer_id(value)?;
                    let fds = self.peers.entry(who).or_default();
                    fds.push(fd);
                    if fds.len() == self.vectors {
                        return Ok(Some(Notification::PeerJoined(who)));
                    }
                }
            }
        }
    }

    /// Whether the server closed the connection (reads nothing else).
    pub fn server_closed(&self, timeout: Duration) -> Result<bool, EmuError> {
        if !wait_readable(self.sock.as_fd(), Instant::now() + timeout)? {
            return Ok(false);
        }
        Ok(matches!(recv_msg(self.sock.as_fd())?, Received::Closed))
    }
}
