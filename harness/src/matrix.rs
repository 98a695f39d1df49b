//! The conformance matrix's two dimensions besides the kernel: the emulated
//! device, and which scenario applies to which device (and why not). One
//! list for the suite (conformance/, which runs them) and `cargo xtask
//! conformance` (which picks, tabulates and says "n/a" with the reason).

/// The emulated SSD a scenario runs against (and `cargo xtask`'s `--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Device {
    /// emu-device's firmware model behind QEMU's ivshmem-doorbell (any QEMU).
    Ivshmem,
    /// emu-device's NVMe controller over vfio-user (QEMU 11.1), with the
    /// patch series' nvme.ko lending it the HMB that holds the ring.
    Nvme,
}

impl Device {
    pub const ALL: [Device; 2] = [Device::Ivshmem, Device::Nvme];

    pub fn name(self) -> &'static str {
        match self {
            Device::Ivshmem => "ivshmem",
            Device::Nvme => "nvme",
        }
    }

    pub fn parse(name: &str) -> anyhow::Result<Device> {
        match name {
            "ivshmem" => Ok(Device::Ivshmem),
            "nvme" => Ok(Device::Nvme),
            other => anyhow::bail!("unknown device {other:?}: use ivshmem or nvme"),
        }
    }
}

/// Whether a scenario runs on a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applies {
    Yes,
    /// Not on this device, and why (printed in the table's notes).
    No(&'static str),
}

#[derive(Debug, Clone, Copy)]
pub struct Scenario {
    pub name: &'static str,
    pub ivshmem: Applies,
    pub nvme: Applies,
    /// Kernels (images/KERNELS names) the scenario needs, and why; None: all.
    pub kernels: Option<(&'static [&'static str], &'static str)>,
}

impl Scenario {
    pub fn on(&self, device: Device) -> Applies {
        match device {
            Device::Ivshmem => self.ivshmem,
            Device::Nvme => self.nvme,
        }
    }

    /// On a device and a kernel.
    pub fn on_kernel(&self, device: Device, kernel: &str) -> Applies {
        match (self.on(device), self.kernels) {
            (Applies::Yes, Some((kernels, why))) if !kernels.contains(&kernel) => Applies::No(why),
            (other, _) => other,
        }
    }
}

const fn both(name: &'static str) -> Scenario {
    Scenario {
        name,
        ivshmem: Applies::Yes,
        nvme: Applies::Yes,
        kernels: None,
    }
}

const fn ivshmem_only(name: &'static str, why_not_nvme: &'static str) -> Scenario {
    Scenario {
        name,
        ivshmem: Applies::Yes,
        nvme: Applies::No(why_not_nvme),
        kernels: None,
    }
}

const fn nvme_only(name: &'static str, why_not_ivshmem: &'static str) -> Scenario {
    Scenario {
        name,
        ivshmem: Applies::No(why_not_ivshmem),
        nvme: Applies::Yes,
        kernels: None,
    }
}

/// Why the NVMe-only scenarios do not run on ivshmem: there is no NVMe
/// controller there, no driver, no HMB lent by one.
const NO_CONTROLLER: &str = "needs the NVMe controller and the series' driver (no NVMe commands on ivshmem)";

/// Every scenario, in table order. A scenario on both devices has one
/// snapshot: the rule it checks is the same.
pub const SCENARIOS: &[Scenario] = &[
    both("streaming"),
    ivshmem_only(
        "overflow",
        "fills the ring while QEMU is stopped; on nvme the records are the guest's own commands, and a stopped guest issues none",
    ),
    both("frozen_exit"),
    both("frozen_follow"),
    both("bad_magic"),
    both("too_new_major"),
    both("newer_minor"),
    both("unknown_flag"),
    ivshmem_only(
        "access_rules",
        "its host requests (late-stop, surprise unplug of ivshmem) are ivshmem device faults; the node's rules are the module's and the same on nvme",
    ),
    ivshmem_only(
        "binding",
        "the module's binding rule for ivshmem functions; on nvme the series' driver hands the slice to the module",
    ),
    ivshmem_only(
        "no_msix",
        "ivshmem's interrupt fallback; the nvme trace raises no interrupt (the module samples the ring, docs/abi.md decision 9)",
    ),
    ivshmem_only(
        "big_ring",
        "the module's ring_size on ivshmem; on nvme the ring is the series' slice of the HMB: nvme_big_ring",
    ),
    both("crash_safety"),
    ivshmem_only(
        "removal",
        "ivshmem's sysfs unbind; on nvme removal is nvme_surprise_removal (QMP device_del, the controller killed)",
    ),
    both("hostile_firmware"),
    ivshmem_only(
        "format_rules",
        "the analyzer's rules on a trace file, not a device's; checked on the ivshmem trace",
    ),
    ivshmem_only(
        "pci_error",
        "AER through ivshmem's module callbacks; on nvme the error handlers are the stock driver's",
    ),
    ivshmem_only(
        "aer_unrecovered",
        "a PCI error recovery that fails (a driverless function beside ours) through ivshmem's module callbacks; on nvme the error handlers are the stock driver's",
    ),
    ivshmem_only(
        "suspend",
        "ivshmem's suspend callbacks; on nvme the HMB going and coming back is nvme_hmb_toggle",
    ),
    nvme_only("nvme_traced_io", NO_CONTROLLER),
    nvme_only("nvme_resets", NO_CONTROLLER),
    Scenario {
        kernels: Some((
            &["7.x"],
            "the driver's sysfs `hmb` switch is hidden before 7.x on a controller without a CMB \
             (its visibility is computed before identify and refreshed only by nvme_map_cmb)",
        )),
        ..nvme_only("nvme_hmb_toggle", NO_CONTROLLER)
    },
    nvme_only("nvme_surprise_removal", NO_CONTROLLER),
    nvme_only("nvme_controller_killed", NO_CONTROLLER),
    nvme_only("nvme_hostile_controller", NO_CONTROLLER),
    nvme_only("nvme_rmmod_in_reset", NO_CONTROLLER),
    nvme_only("nvme_reinit_in_reset", NO_CONTROLLER),
    nvme_only("nvme_big_ring", NO_CONTROLLER),
];

pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// The scenarios that run on `device` and `kernel`, in table order.
pub fn on(device: Device, kernel: &str) -> Vec<&'static str> {
    SCENARIOS
        .iter()
        .filter(|s| s.on_kernel(device, kernel) == Applies::Yes)
        .map(|s| s.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_every_scenario_runs_somewhere() {
        for (i, s) in SCENARIOS.iter().enumerate() {
            assert!(SCENARIOS[i + 1..].iter().all(|t| t.name != s.name), "{} twice", s.name);
            assert!(
                Device::ALL.iter().any(|d| s.on(*d) == Applies::Yes),
                "{} runs nowhere",
                s.name
            );
        }
        assert!(on(Device::Nvme, "6.1").contains(&"streaming"));
        assert!(!on(Device::Ivshmem, "7.x").contains(&"nvme_hmb_toggle"));
        assert!(on(Device::Nvme, "7.x").contains(&"nvme_hmb_toggle"));
        assert!(!on(Device::Nvme, "6.12").contains(&"nvme_hmb_toggle"));
    }
}
