//! The script the full guest runs as root (from the share, started by the
//! image's hmbt-check.service once systemd has reached multi-user): a user's
//! installation on a host, step by step, checked as it goes. The same steps
//! are the README's "On a host with a real SSD".
//!
//! It talks to the host through files in the share: it creates `STARTED`
//! when the service runs, waits for `KILL` (the host has had the device
//! produce), SIGKILLs the daemon through systemd and creates `RESTARTED`
//! once systemd has restarted it, then waits for `STOP` (the host has
//! stopped the producer and seen the ring drained).

use crate::guest_script::{self, Script};
use crate::images::dkms_prebuilt::DkmsPackage;

/// Files in the share.
pub(crate) mod files {
    pub(crate) const SCRIPT: &str = "run.sh";
    /// The module's source tree (kmod/), copied as DKMS wants it in /usr/src.
    pub(crate) const KMOD: &str = "kmod";
    /// DKMS's build of the module (see `images::dkms_prebuilt`).
    pub(crate) const DKMS_TAR: &str = "dkms-built.tar";
    pub(crate) const DAEMON: &str = "hmb-trace-daemon";
    pub(crate) const UNIT: &str = "hmb-trace-daemon.service";
    pub(crate) const UDEV_RULE: &str = "60-nvme-hmb-trace.rules";
    pub(crate) const STARTED: &str = "daemon.started";
    pub(crate) const KILL: &str = "kill";
    pub(crate) const RESTARTED: &str = "daemon.restarted";
    pub(crate) const STOP: &str = "stop";
    pub(crate) const TRACE: &str = "trace.bin";
    /// Every command's output (the console gets only the markers).
    pub(crate) const LOG: &str = "guest.log";
    pub(crate) const JOURNAL: &str = "journal.txt";
    pub(crate) const DMESG: &str = "dmesg.txt";
}

/// The check for the module package `pkg`: harness/guest-scripts/
/// full-guest-check.sh, which calls the NVMe tools' function.
pub(crate) fn check_script(pkg: &DkmsPackage) -> String {
    let script = Script::new()
        .set("LOG", files::LOG)
        .set("JOURNAL", files::JOURNAL)
        .set("DMESG", files::DMESG)
        .set("TRACE", files::TRACE)
        .set("UDEV_RULE", files::UDEV_RULE)
        .set("DAEMON", files::DAEMON)
        .set("UNIT_FILE", files::UNIT)
        .set("KMOD", files::KMOD)
        .set("DKMS_TAR", files::DKMS_TAR)
        .set("STARTED", files::STARTED)
        .set("KILL", files::KILL)
        .set("RESTARTED", files::RESTARTED)
        .set("STOP", files::STOP)
        .set("PKG_ID", pkg.id())
        .set("PKG_NAME", &pkg.name)
        .set("PKG_SRC", pkg.source_dir());
    let script = super::nvme_tools::guest_section(script);
    super::nvme_traced::guest_section(script, super::nvme_tools::NAMESPACE_BYTES >> 20)
        .file(&guest_script::FULL_GUEST_CHECK)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_gets_the_package_and_the_shipped_names() {
        let s = check_script(&DkmsPackage {
            name: "nvme-hmb-trace".into(),
            version: "0.1.0".into(),
        });
        for want in [
            "PKG_ID='nvme-hmb-trace/0.1.0'\n",
            "PKG_NAME='nvme-hmb-trace'\n",
            "PKG_SRC='/usr/src/nvme-hmb-trace-0.1.0'\n",
            "UDEV_RULE='60-nvme-hmb-trace.rules'\n",
            "dkms install \"$PKG_ID\" -k \"$abi\"",
            "\"root hmbtrace 440\"",
            "--kill-who=main",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        assert!(s.find("nvme_tools() {").unwrap() < s.rfind("\nnvme_tools\n").unwrap());
        // The traced run needs the module installed and the ivshmem steps'
        // modprobe -r done, and comes before dkms remove.
        let traced = s.rfind("\nnvme_traced\n").unwrap();
        assert!(s.find("nvme_traced() {").unwrap() < traced);
        assert!(s.rfind("run modprobe -r \"$PKG_NAME\"\nwait_for").unwrap() < traced);
        assert!(traced < s.rfind("run dkms remove").unwrap());
        assert!(s.ends_with("HMBT-RESULT rc=0\"\n"));
    }
}
