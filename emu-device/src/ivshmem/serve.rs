//! `emu-device serve`: wire the HMB, the ivshmem transport, the device
//! thread and the control socket together, and take them apart in the
//! right order on every exit path.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

use hmb_firmware_model::NotifyPolicy;

use crate::control::ControlServer;
use crate::error::EmuError;
use crate::ivshmem::device::{Device, DeviceConfig, DeviceHandle, Msg};
use crate::ivshmem::hmb::Hmb;
use crate::ivshmem::production::Plan;
use crate::ivshmem::transport::{IvshmemTransport, Transport, Vectors};
use crate::ivshmem::ServerConfig;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub ivshmem_socket: PathBuf,
    pub control_socket: PathBuf,
    pub hmb_size: u64,
    pub vectors: u16,
    pub policy: NotifyPolicy,
    pub exit_on_disconnect: bool,
    pub initial_plan: Option<Plan>,
    pub irq_vectors: Vectors,
}

/// A device being set up: `sender` lets the caller inject `Msg::Shutdown`
/// (signals) before `run` blocks.
pub struct Serving {
    transport: Arc<IvshmemTransport>,
    control: ControlServer,
    device: Device,
    rx: std::sync::mpsc::Receiver<Msg>,
    tx: Sender<Msg>,
}

impl Serving {
    pub fn start(opts: &ServeOptions) -> Result<Self, EmuError> {
        for v in [opts.irq_vectors.data, opts.irq_vectors.state] {
            if v >= opts.vectors {
                return Err(EmuError::BadVector {
                    vector: v,
                    vectors: opts.vectors,
                });
            }
        }
        let hmb = Arc::new(Hmb::create(opts.hmb_size)?);
        // Power-on: the opt-in signature the module looks for before it
        // writes anything to the HMB.
        crate::ivshmem::advert::announce(&hmb)?;
        let (tx, rx) = channel();
        let cfg = ServerConfig {
            socket_path: opts.ivshmem_socket.clone(),
            vectors: opts.vectors,
        };
        let transport = Arc::new(IvshmemTransport::start(&cfg, hmb, tx.clone(), Msg::transport)?);
        let dyn_transport: Arc<dyn Transport> = transport.clone();
        let device = Device::new(
            dyn_transport,
            DeviceConfig {
                policy: opts.policy,
                exit_on_disconnect: opts.exit_on_disconnect,
                initial_plan: opts.initial_plan.clone(),
                vectors: opts.irq_vectors,
            },
        );
        let control = match ControlServer::start(&opts.control_socket, Arc::new(DeviceHandle::new(tx.clone()))) {
            Ok(c) => c,
            Err(e) => {
                transport.shutdown();
                return Err(e.into());
            }
        };
        log::info!(
            "emu-device serving: ivshmem {} control {} HMB {} bytes, {} vectors",
            opts.ivshmem_socket.display(),
            opts.control_socket.display(),
            opts.hmb_size,
            opts.vectors
        );
        Ok(Self {
            transport,
            control,
            device,
            rx,
            tx,
        })
    }

    pub fn sender(&self) -> Sender<Msg> {
        self.tx.clone()
    }

    /// Serve until shutdown, then close everything: producer stopped,
    /// control socket removed, QEMU connections closed, ivshmem socket
    /// removed, HMB unmapped and its memfd closed.
    pub fn run(self) -> Result<String, EmuError> {
        let Self {
            transport,
            control,
            device,
            rx,
            tx,
        } = self;
        drop(tx);
        let result = device.run(rx);
        drop(control);
        transport.shutdown();
        result
    }
}
