//! emu-device's NVMe controller (`serve-nvme`) as a child process of a
//! run, and the guest device it is: QEMU 11.1's `vfio-user-pci` on its
//! socket. `nvme_guest` boots guests on it; `nvme_personalities` and the
//! full guest start it too.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};
use hmb_emu_device::control::Request;
use hmb_nvme_trace::{Personality, ProducerKind};
use serde_json::Value;

use super::EmuProcess;
use crate::guest::devices::RootPort;
use crate::guest_script::{self, ScriptFile};
use crate::qemu::args::{self, MemoryBackend, PciPlace};
use crate::qemu::VmConfig;

/// QMP id of the NVMe controller.
pub const DEVICE_ID: &str = "nvme0";
/// QMP id of a trace run's second controller (`NvmeDevice::with_peer`).
pub(crate) const PEER_ID: &str = "nvme1";
/// Namespace size: room for the pattern and the read loop, small enough
/// that the sparse backing file costs nothing.
pub const NAMESPACE_BYTES: u64 = 64 << 20;
/// The guest's KEY=VALUE results file in the share (nvme-lib.sh's `note`).
pub const RESULTS: &str = "nvme-results.txt";

impl crate::guest::GuestDevice for NvmeDevice {
    const MORE_FILES: &'static [&'static str] = &[RESULTS];
    const PRELUDE: &'static [ScriptFile] = &[guest_script::NVME_LIB];

    /// QEMU 11.1's `vfio-user-pci` on serve-nvme's socket, behind its root
    /// port; guest RAM a shared memfd (the server maps it for DMA).
    fn configure(&self, vm: &mut VmConfig) {
        vm.memory_backend = MemoryBackend::Memfd;
        vm.devices.extend(self.port.args());
        vm.devices.extend(args::vfio_user_pci(
            &self.socket,
            DEVICE_ID,
            PciPlace::Bus(self.port.id),
        ));
        if let Some(peer) = &self.peer {
            vm.devices.extend(peer.port.args());
            vm.devices
                .extend(args::vfio_user_pci(&peer.socket, PEER_ID, PciPlace::Bus(peer.port.id)));
        }
    }

    fn check_alive(&mut self) -> Result<()> {
        NvmeDevice::check_alive(self)
    }

    fn shutdown(&mut self) {
        NvmeDevice::shutdown(self);
    }
}

/// emu-device's NVMe controller (`serve-nvme`).
pub struct NvmeDevice {
    process: EmuProcess,
    pub socket: PathBuf,
    /// The root port it sits behind (`RootPort::FIRST` unless `behind`).
    port: RootPort,
    /// A second controller in the same guest (trace runs' pair phase,
    /// issue 26), behind `RootPort::PEER`, watched and stopped with this one.
    peer: Option<Box<NvmeDevice>>,
}

impl NvmeDevice {
    /// The namespace is the sparse file `backing`, so the host can check
    /// where the guest's data landed.
    pub(crate) fn start(
        binary: &Path,
        run_dir: &Path,
        backing: &Path,
        controller: &ControllerOptions,
    ) -> Result<NvmeDevice> {
        Self::start_with(binary, run_dir, backing, NAMESPACE_BYTES, "", controller)
    }

    /// `start` with the namespace size and a prefix for the sockets' and
    /// log's names, for a run folder another emu-device shares (the full
    /// guest's `serve` has `control.sock` and `emu-device.log`).
    pub(crate) fn start_with(
        binary: &Path,
        run_dir: &Path,
        backing: &Path,
        namespace_bytes: u64,
        prefix: &str,
        controller: &ControllerOptions,
    ) -> Result<NvmeDevice> {
        let sockets = super::socket_dir(run_dir)?;
        let socket = sockets.join(format!("{prefix}vfio-user.sock"));
        let control_socket = sockets.join(format!("{prefix}control.sock"));
        for stale in [&socket, &control_socket] {
            let _ = std::fs::remove_file(stale);
        }
        let mut command = Command::new(binary);
        command
            .arg("serve-nvme")
            .arg("--socket")
            .arg(&socket)
            .arg("--control")
            .arg(&control_socket)
            .arg("--namespace-size")
            .arg(namespace_bytes.to_string())
            .arg("--backing")
            .arg(backing)
            .arg("--personality")
            .arg(controller.personality.name())
            .arg("--producer")
            .arg(controller.producer.to_string())
            .args(controller.serial.map(|s| ["--serial", s]).into_iter().flatten())
            .args(
                controller
                    .hmb_preferred
                    .map(|b| ["--hmb-preferred".to_string(), b.to_string()])
                    .into_iter()
                    .flatten(),
            )
            .args(
                controller
                    .hmb_max_descriptors
                    .map(|n| ["--hmb-max-descriptors".to_string(), n.to_string()])
                    .into_iter()
                    .flatten(),
            )
            // serve-nvme reads these too: flags, not an inherited variable,
            // decide which controller a run gets.
            .env_remove("HMB_EMU_NVME_PERSONALITY")
            .env_remove("HMB_EMU_NVME_PRODUCER")
            .env("RUST_LOG", "info");
        let process = EmuProcess::spawn(
            "emu-device serve-nvme",
            command,
            run_dir,
            &format!("{prefix}emu-device.log"),
            control_socket,
            &[&socket],
        )?;
        Ok(NvmeDevice {
            process,
            socket,
            port: RootPort::FIRST,
            peer: None,
        })
    }

    /// This controller with `peer` as the guest's second one (the pair
    /// phase), behind `RootPort::PEER`.
    pub(crate) fn with_peer(self, peer: NvmeDevice) -> NvmeDevice {
        NvmeDevice {
            peer: Some(Box::new(peer.behind(RootPort::PEER))),
            ..self
        }
    }

    /// The second controller of the pair phase.
    pub(crate) fn peer_mut(&mut self) -> Result<&mut NvmeDevice> {
        self.peer.as_deref_mut().context("this run has no second controller")
    }

    /// The same controller behind `port` (a guest with two controllers).
    pub(crate) fn behind(self, port: RootPort) -> NvmeDevice {
        NvmeDevice { port, ..self }
    }

    pub fn control_socket(&self) -> &Path {
        &self.process.control_socket
    }

    pub fn check_alive(&mut self) -> Result<()> {
        self.process.check_alive()?;
        match &mut self.peer {
            Some(peer) => peer.check_alive().context("the second controller"),
            None => Ok(()),
        }
    }

    /// `status` over the control socket: transport, controller report, trace.
    pub(crate) fn status(&mut self) -> Result<Value> {
        self.request(&Request::Status)
    }

    pub(crate) fn request(&mut self, req: &Request) -> Result<Value> {
        self.process.request(req)
    }

    /// SIGKILL, as a crashed controller: no clean shutdown, QEMU loses its
    /// vfio-user server mid-flight. Later `check_alive` calls pass (the death
    /// was asked for).
    pub fn kill(&mut self) {
        self.process.kill();
    }

    /// Ask for a clean shutdown, then make sure the process is gone.
    pub(crate) fn shutdown(&mut self) {
        self.process.shutdown();
        if let Some(peer) = &mut self.peer {
            peer.shutdown();
        }
    }
}

/// Which controller serve-nvme is: its personality (does it declare the
/// trace contract, how big an HMB it asks for) and which producer writes
/// its trace ring (the Rust model or firmware-sdk's C library).
#[derive(Debug, Clone, Copy, Default)]
pub struct ControllerOptions {
    pub personality: Personality,
    pub producer: ProducerKind,
    /// Identify's serial number (serve-nvme's default when `None`): two
    /// controllers of one guest must differ, or Linux rejects the second
    /// as a duplicate controller of the same subsystem.
    pub serial: Option<&'static str>,
    /// Identify HMPRE in bytes (serve-nvme's default, 32 MiB, when `None`).
    /// The guest gets RAM for it on top of its default (nvme_guest).
    pub hmb_preferred: Option<u64>,
    /// Identify HMMAXD (serve-nvme's default, 256, when `None`).
    pub hmb_max_descriptors: Option<u16>,
}
