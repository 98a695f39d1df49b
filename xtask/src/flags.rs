//! The arguments several commands share, declared once: a command flattens
//! [`GuestArgs`] (a guest run: kernel, device, run folder, accelerator,
//! keep) or the parts of it it has ([`KernelArg`], [`RunDirArg`],
//! [`AccelArg`]).

use std::path::PathBuf;

use clap::{Args, FromArgMatches};
pub use hmb_harness::matrix::Device;
use hmb_harness::qemu::Accel;

/// `--kernel`.
#[derive(Args, Clone, Debug, Default)]
pub struct KernelArg {
    /// Guest kernel, a name from images/KERNELS (default: its first line).
    #[arg(long)]
    pub kernel: Option<String>,
}

impl KernelArg {
    pub fn name(&self) -> Option<&str> {
        self.kernel.as_deref()
    }
}

/// `--run-dir`.
#[derive(Args, Clone, Debug, Default)]
pub struct RunDirArg {
    /// Run folder (default: a new one under target/hmb-trace/, named by the
    /// command).
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
}

impl RunDirArg {
    /// The folder asked for, else `default()`.
    pub fn or_else(&self, default: impl FnOnce() -> PathBuf) -> PathBuf {
        self.run_dir.clone().unwrap_or_else(default)
    }
}

/// `--accel`.
#[derive(Args, Clone, Debug)]
pub struct AccelArg {
    /// Accelerator: tcg (default: KVM guests hang on some hosts), kvm, or
    /// auto (probe KVM with a short boot, else TCG, saying why).
    #[arg(long, value_enum, default_value = "tcg")]
    pub accel: Accel,
}

/// A guest run's arguments.
#[derive(Args, Clone, Debug)]
pub struct GuestArgs {
    #[command(flatten)]
    pub kernel: KernelArg,
    /// The emulated SSD: nvme (emu-device's NVMe controller over
    /// vfio-user, QEMU 11.1) or ivshmem (the firmware model's workload over
    /// ivshmem-doorbell, any QEMU). The default is the command's (see its
    /// help).
    #[arg(long, value_enum)]
    pub device: Option<Device>,
    #[command(flatten)]
    pub accel: AccelArg,
    /// Leave the VM running with a shell on the console after the job.
    #[arg(long)]
    pub keep: bool,
    #[command(flatten)]
    pub run_dir: RunDirArg,
}

/// A command's arguments from an argument list (`argv[0]` its name), as a
/// step of another command runs it.
pub fn parse<T: Args + FromArgMatches>(argv: &[&str]) -> anyhow::Result<T> {
    let command = T::augment_args(clap::Command::new("step"));
    Ok(T::from_arg_matches(&command.try_get_matches_from(argv)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_run_parses_every_shared_argument() {
        let g: GuestArgs = parse(&[
            "boot",
            "--kernel",
            "6.12",
            "--device",
            "ivshmem",
            "--accel",
            "kvm",
            "--keep",
            "--run-dir",
            "/r",
        ])
        .unwrap();
        assert_eq!(g.kernel.name(), Some("6.12"));
        assert_eq!(g.device, Some(Device::Ivshmem));
        assert_eq!(g.accel.accel, Accel::Kvm);
        assert!(g.keep);
        assert_eq!(g.run_dir.or_else(|| "/d".into()), PathBuf::from("/r"));
        let plain: GuestArgs = parse(&["boot"]).unwrap();
        assert_eq!((plain.kernel.name(), plain.device, plain.keep), (None, None, false));
        assert_eq!(plain.run_dir.or_else(|| "/d".into()), PathBuf::from("/d"));
        assert!(parse::<GuestArgs>(&["boot", "--device", "sata"]).is_err());
    }
}
