//! The QEMU versions the project runs and what it takes to start one of
//! them (`QemuBinary`): the types `binary` (which picks and installs) and
//! `chroot_qemu` (the 11.1 of the trixie chroot) both hand out. A leaf, so
//! that neither of those imports the other for them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum QemuVersion {
    #[value(name = "7.2")]
    V7_2,
    #[value(name = "10.0")]
    V10_0,
    /// trixie-backports' 11.1 in the trixie chroot: the one with vfio-user-pci.
    #[value(name = "11.1")]
    V11_1,
}

impl QemuVersion {
    /// The version as `--qemu` and HMBT_QEMU spell it.
    pub fn name(self) -> &'static str {
        match self {
            QemuVersion::V7_2 => "7.2",
            QemuVersion::V10_0 => "10.0",
            QemuVersion::V11_1 => "11.1",
        }
    }
}

#[derive(Debug, Clone)]
pub struct QemuBinary {
    pub path: PathBuf,
    /// What runs the binary, before its path (empty: run it directly). A
    /// binary of another distribution's chroot runs under that chroot's
    /// dynamic loader, e.g. `[<root>/lib64/ld-linux-x86-64.so.2,
    /// --library-path, <root>/usr/lib/x86_64-linux-gnu]`, so that host paths
    /// (sockets, kernel, share) stay valid for it.
    pub launcher: Vec<OsString>,
    /// `-L` firmware directories, searched before the built-in ones.
    pub firmware_dirs: Vec<PathBuf>,
    pub env: Vec<(String, String)>,
    /// First line of `-version`.
    pub version: String,
}

impl QemuBinary {
    /// A binary run directly, with no firmware directories or environment.
    pub fn at(path: PathBuf) -> QemuBinary {
        QemuBinary {
            path,
            launcher: Vec::new(),
            firmware_dirs: Vec::new(),
            env: Vec::new(),
            version: String::new(),
        }
    }

    /// The program and the arguments before QEMU's own: the launcher, then the path.
    pub(crate) fn argv_prefix(&self) -> Vec<OsString> {
        let mut argv = self.launcher.clone();
        argv.push(self.path.clone().into());
        argv
    }

    /// A command that runs this QEMU (launcher, environment); add the arguments.
    pub fn command(&self) -> Command {
        let argv = self.argv_prefix();
        let mut command = Command::new(&argv[0]);
        command.args(&argv[1..]);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }
}
