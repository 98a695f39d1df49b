//! One ivshmem server message on the wire: an 8-byte little-endian signed
//! number, optionally with one file descriptor passed by SCM_RIGHTS
//! (QEMU docs/specs/ivshmem-spec.rst, "The ivshmem Client-Server Protocol").

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::cmsg_space;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::error::EmuError;

/// The only protocol version defined (QEMU 2.5 and later).
pub(crate) const IVSHMEM_PROTOCOL_VERSION: i64 = 0;
/// The number that accompanies the shared-memory fd.
pub(crate) const SHM_FD_MESSAGE: i64 = -1;
/// Peer ids fit the 16 high bits of the Doorbell register.
pub(crate) const MAX_PEER_ID: i64 = 65535;

/// Send one message on a connected unix stream socket.
pub(crate) fn send_msg(sock: BorrowedFd<'_>, value: i64, fd: Option<BorrowedFd<'_>>) -> Result<(), EmuError> {
    let bytes = value.to_le_bytes();
    let iov = [IoSlice::new(&bytes)];
    let raw: [RawFd; 1];
    let cmsgs: Vec<ControlMessage<'_>> = match fd {
        Some(fd) => {
            raw = [fd.as_raw_fd()];
            vec![ControlMessage::ScmRights(&raw)]
        }
        None => Vec::new(),
    };
    loop {
        match sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsgs, MsgFlags::MSG_NOSIGNAL, None) {
            Ok(8) => return Ok(()),
            Ok(n) => return Err(EmuError::Protocol(format!("short send of {n} bytes"))),
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(EmuError::sys("sendmsg", e)),
        }
    }
}

/// What `recv_msg` read.
#[derive(Debug)]
pub(crate) enum Received {
    Msg {
        value: i64,
        fd: Option<OwnedFd>,
    },
    /// The other side closed the connection cleanly.
    Closed,
}

/// Receive one message. Reads exactly 8 bytes per `recvmsg` so that a file
/// descriptor is never attached to the wrong number.
pub(crate) fn recv_msg(sock: BorrowedFd<'_>) -> Result<Received, EmuError> {
    let mut buf = [0u8; 8];
    let mut got = 0usize;
    let mut fd: Option<OwnedFd> = None;
    while got < 8 {
        let mut iov = [IoSliceMut::new(&mut buf[got..])];
        let mut space = cmsg_space!([RawFd; 4]);
        let msg = match recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => m,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(EmuError::sys("recvmsg", e)),
        };
        let n = msg.bytes;
        let mut extra = Vec::new();
        for c in msg.cmsgs().map_err(|e| EmuError::sys("cmsgs", e))? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for raw in fds {
                    // SAFETY: the kernel just installed these fds for us.
                    let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                    if fd.is_none() {
                        fd = Some(owned);
                    } else {
                        extra.push(owned);
                    }
                }
            }
        }
        if !extra.is_empty() {
            return Err(EmuError::Protocol(format!(
                "{} unexpected extra file descriptors",
                extra.len()
            )));
        }
        if n == 0 {
            if got == 0 && fd.is_none() {
                return Ok(Received::Closed);
            }
            return Err(EmuError::Protocol(format!(
                "connection closed inside a message after {got} bytes"
            )));
        }
        got += n;
    }
    Ok(Received::Msg {
        value: i64::from_le_bytes(buf),
        fd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn numbers_and_fds_round_trip() {
        let (a, b) = UnixStream::pair().unwrap();
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC).unwrap();
        send_msg(a.as_fd(), 7, None).unwrap();
        send_msg(a.as_fd(), -1, Some(efd.as_fd())).unwrap();
        match recv_msg(b.as_fd()).unwrap() {
            Received::Msg { value: 7, fd: None } => {}
            other => panic!("unexpected {other:?}"),
        }
        match recv_msg(b.as_fd()).unwrap() {
            Received::Msg {
                value: -1,
                fd: Some(fd),
            } => {
                // The received fd is the same eventfd: writing it is seen on ours.
                nix::unistd::write(&fd, &1u64.to_ne_bytes()).unwrap();
                assert_eq!(efd.read().unwrap(), 1);
            }
            other => panic!("unexpected {other:?}"),
        }
        drop(a);
        assert!(matches!(recv_msg(b.as_fd()).unwrap(), Received::Closed));
    }

    #[test]
    fn a_truncated_message_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        use std::io::Write;
        (&a).write_all(&[1, 2, 3]).unwrap();
        drop(a);
        assert!(matches!(recv_msg(b.as_fd()), Err(EmuError::Protocol(_))));
    }
}
