//! Serving a PCI function on a vfio-user socket, one client at a time.
//!
//! `vfio_user::Server::run` accepts one client and returns when it
//! disconnects, so the serving thread loops: after each client the
//! function is reset, its guest memory and eventfds are dropped, and (when
//! asked to keep serving) the next client is accepted on the same socket.
//! A QEMU that reboots its guest stays connected and sends DEVICE_RESET;
//! a QEMU that exits disconnects.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use ::vfio_user::{Server, ServerBackend};

use super::backend::{Backend, PciFunction, Shared};
use super::config_space::Identity;
use super::error::VfioUserError;

/// What the serving thread tells its owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeEvent {
    /// A client sent its first message.
    ClientJoined,
    /// The client disconnected (`None`) or the connection failed.
    ClientLeft(Option<String>),
    /// The serving thread ended for good.
    Stopped(Option<String>),
}

/// A backend wrapper that notices the first message of each client.
struct Watch<'a, F: PciFunction> {
    inner: &'a mut Backend<F>,
    joined: bool,
    events: &'a dyn Fn(ServeEvent),
}

impl<F: PciFunction> Watch<'_, F> {
    fn seen(&mut self) {
        if !self.joined {
            self.joined = true;
            self.inner.client_joined();
            (self.events)(ServeEvent::ClientJoined);
        }
    }
}

impl<F: PciFunction> ServerBackend for Watch<'_, F> {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        self.seen();
        self.inner.region_read(region, offset, data)
    }
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        self.seen();
        self.inner.region_write(region, offset, data)
    }
    fn dma_map(
        &mut self,
        flags: ::vfio_user::DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<std::fs::File>,
    ) -> std::io::Result<()> {
        self.seen();
        self.inner.dma_map(flags, offset, address, size, fd)
    }
    fn dma_unmap(&mut self, flags: ::vfio_user::DmaUnmapFlags, address: u64, size: u64) -> std::io::Result<()> {
        self.seen();
        self.inner.dma_unmap(flags, address, size)
    }
    fn reset(&mut self) -> std::io::Result<()> {
        self.seen();
        self.inner.reset()
    }
    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<std::fs::File>,
    ) -> std::io::Result<()> {
        self.seen();
        self.inner.set_irqs(index, flags, start, count, fds)
    }
}

/// The vfio-user socket and its serving thread.
pub struct VfioUserServer {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl VfioUserServer {
    /// Bind `socket` (a stale socket file is replaced, a live one refused)
    /// and serve `shared`'s function on it. With `keep_serving`, a new
    /// client is accepted after each disconnect; without, the thread ends
    /// after the first client. `events` hears of clients coming and going.
    pub fn start<F: PciFunction>(
        socket: &Path,
        shared: Arc<Shared<F>>,
        identity: &Identity,
        bar0_size: u64,
        msix_vectors: u16,
        keep_serving: bool,
        events: impl Fn(ServeEvent) + Send + 'static,
    ) -> Result<VfioUserServer, VfioUserError> {
        let listener = crate::sockpath::bind_listener(socket, "vfio-user socket")?;
        let mut backend = Backend::new(shared, identity, bar0_size, msix_vectors);
        let server = Server::from_owned_fd(OwnedFd::from(listener), true, backend.irqs(), backend.regions());
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("vfio-user".into())
            .spawn(move || {
                let why = serve_clients(&server, &mut backend, &stop2, keep_serving, &events);
                events(ServeEvent::Stopped(why));
            })
            .map_err(|source| VfioUserError::Io {
                what: "spawning the vfio-user thread",
                source,
            })?;
        Ok(VfioUserServer {
            socket: socket.to_path_buf(),
            stop,
            thread: Some(thread),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Stop serving and remove the socket file. A thread blocked in accept
    /// is woken by a connection of our own; one serving a live client (QEMU
    /// still attached) is left to end with the process.
    pub fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = UnixStream::connect(&self.socket);
            let deadline = std::time::Instant::now() + Duration::from_secs(1);
            while !t.is_finished() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() && t.join().is_err() {
                log::error!("the vfio-user thread panicked");
            }
        }
        if let Err(e) = std::fs::remove_file(&self.socket) {
            if e.kind() != std::io::ErrorKind::NotFound {
                log::warn!("removing {}: {e}", self.socket.display());
            }
        }
    }
}

impl Drop for VfioUserServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn serve_clients<F: PciFunction>(
    server: &Server,
    backend: &mut Backend<F>,
    stop: &AtomicBool,
    keep_serving: bool,
    events: &dyn Fn(ServeEvent),
) -> Option<String> {
    loop {
        let mut watch = Watch {
            inner: backend,
            joined: false,
            events,
        };
        // The crate trusts its client (unwraps on malformed version
        // messages): a panic ends this client, not the device.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.run(&mut watch)));
        let joined = watch.joined;
        let failure = match result {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(format!("vfio-user connection failed: {e}")),
            Err(_) => Some("vfio-user connection ended in a panic of the protocol code".to_string()),
        };
        if stop.load(Ordering::Acquire) {
            return None;
        }
        backend.disconnected();
        if joined {
            if let Some(f) = &failure {
                log::warn!("{f}");
            } else {
                log::info!("vfio-user client disconnected");
            }
            events(ServeEvent::ClientLeft(failure.clone()));
            if !keep_serving {
                return failure;
            }
        } else if let Some(f) = failure {
            // Accept itself failed (not a client that said nothing): give up.
            if f.contains("accepting") {
                return Some(f);
            }
        }
    }
}
