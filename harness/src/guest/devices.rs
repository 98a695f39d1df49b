//! The guests' devices that are not an emu-device child, and where a
//! device sits on the PCI bus.

use std::path::PathBuf;

use anyhow::Result;

use super::GuestDevice;
use crate::guest_script::{self, ScriptFile};
use crate::qemu::args::{self, Args};
use crate::qemu::VmConfig;

/// A PCIe root port a device sits behind: QMP `device_del` on the device is
/// then a real surprise removal (q35's root bus is not hot-pluggable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RootPort {
    pub id: &'static str,
    /// Its chassis and slot number (the same).
    pub chassis: u8,
    /// Its own slot on the root bus, when the guest must find it by its
    /// PCI address (`None`: wherever QEMU puts it).
    pub addr: Option<u8>,
}

impl RootPort {
    /// The port of a guest's (first) emu-device controller.
    pub(crate) const FIRST: RootPort = RootPort {
        id: "hmbrp",
        chassis: 1,
        addr: None,
    };
    /// The second controller's, when a guest has both (the full guest).
    pub(crate) const SECOND: RootPort = RootPort {
        id: "nvmerp",
        chassis: 2,
        addr: None,
    };
    /// A trace run's second (stock) controller (issue 26's pair phase), at
    /// 00:10.0, where the guest script looks for it (`nvme_guest::PEER_PORT`).
    pub(crate) const PEER: RootPort = RootPort {
        id: "hmbrp2",
        chassis: 2,
        addr: Some(0x10),
    };

    pub(crate) fn args(self) -> Args {
        match self.addr {
            Some(addr) => args::pcie_root_port_at(self.id, self.chassis, self.chassis, addr),
            None => args::pcie_root_port(self.id, self.chassis, self.chassis),
        }
    }
}

/// No device of ours (`cargo xtask guest-smoke`): the image, the share and
/// a script.
pub struct NoDevice;

impl GuestDevice for NoDevice {
    const MORE_FILES: &'static [&'static str] = &[];
    const PRELUDE: &'static [ScriptFile] = &[];

    fn configure(&self, _vm: &mut VmConfig) {}

    fn check_alive(&mut self) -> Result<()> {
        Ok(())
    }

    fn shutdown(&mut self) {}
}

/// QEMU's own NVMe controller on a scratch image (`cargo xtask
/// nvme-smoke`): the series' nvme.ko against a controller not ours.
pub struct QemuNvme {
    pub image: PathBuf,
}

impl GuestDevice for QemuNvme {
    const MORE_FILES: &'static [&'static str] = &[];
    const PRELUDE: &'static [ScriptFile] = &[guest_script::NVME_LIB];

    fn configure(&self, vm: &mut VmConfig) {
        vm.devices.extend(args::qemu_nvme(&self.image, "hmbt0"));
    }

    fn check_alive(&mut self) -> Result<()> {
        Ok(())
    }

    fn shutdown(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::binary::QemuBinary;

    fn config() -> VmConfig {
        VmConfig::new(QemuBinary::at("/q".into()), "/k".into(), "/i".into(), "/r".into())
    }

    #[test]
    fn qemu_nvme_puts_its_drive_and_controller_in_the_devices() {
        let mut vm = config();
        QemuNvme {
            image: "/r/nvme.img".into(),
        }
        .configure(&mut vm);
        let text: Vec<String> = vm.devices.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(
            text,
            [
                "-drive",
                "file=/r/nvme.img,if=none,id=nvm,format=raw",
                "-device",
                "nvme,serial=hmbt0,drive=nvm"
            ]
        );
        let mut none = config();
        NoDevice.configure(&mut none);
        assert!(none.devices.is_empty());
        assert_eq!(RootPort::SECOND.args()[1], "pcie-root-port,id=nvmerp,chassis=2,slot=2");
    }
}
