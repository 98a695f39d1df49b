//! The guest-session library of hmb-trace, shared by `cargo xtask` (its
//! commands) and the conformance suite:
//!
//! - `host`: apt packages, build chroots, the cache folder and its lock,
//!   input stamps. The leaf: it uses nothing else here.
//! - `host_build`: the release binaries a guest run builds on the host
//!   (emu-device, the analyzer, the static daemon) in one cargo build.
//! - `images`: a guest image for one kernel of images/KERNELS (kernel,
//!   module, static daemon, initramfs), cached.
//! - `qemu`: which QEMU binary, one argument-builder function per device,
//!   the console and its fault-line scan, the accelerator probe, a running `Vm`.
//! - `emu`: emu-device as a child process, driven over its control socket.
//! - `guest_script`: the shell script the guest runs from the 9p share.
//! - `ivshmem_session`: emu-device + QEMU (ivshmem-doorbell) + share + script, and their handles.
//! - `full_guest`: a debootstrapped Debian guest booting systemd, where the
//!   module, udev rule and unit are installed as a user would (DKMS).
//! - `nvme_guest`: a guest whose stock nvme driver probes emu-device's NVMe
//!   controller over vfio-user (QEMU 11.1), checked from both sides.
//! - `nvme_session`: the same controller with the series' driver, the
//!   module and the daemon, driven step by step (the conformance scenarios).
//! - `matrix`: the conformance devices and which scenario applies to which.
//! - `output_disk`: a scratch ext4 disk for a trace.bin larger than the
//!   guest's RAM (the soak), read back with debugfs.
//! - `ivshmem_truth`: does a trace.bin hold exactly what the ivshmem firmware model produced?
//! - `journal_truth`: the same for the NVMe controller, against its journal.
//! - `phases`, `interrupt`: progress lines; Ctrl-C turned into an error.
//!
//! Dependencies point one way: host <- images, qemu <- ivshmem_session; emu,
//! guest_script, ivshmem_truth, phases and interrupt use no sibling but each other's leaves.

pub mod emu;
pub mod full_guest;
pub mod guest;
pub mod guest_script;
pub mod host;
pub mod host_build;
pub mod images;
pub mod interrupt;
pub mod ivshmem_session;
pub mod ivshmem_truth;
pub mod journal_truth;
pub mod matrix;
mod nvme_audit_paths;
pub mod nvme_checks;
pub mod nvme_cli;
pub mod nvme_guest;
pub mod nvme_personalities;
pub mod nvme_session;
pub mod nvme_telemetry;
pub mod output_disk;
pub mod phases;
pub mod qemu;
pub mod soak_ivshmem;
pub mod soak_nvme;
pub mod traced_telemetry;
mod truth_walk;

pub use host::{cache_dir, target_dir, workspace_root};
