//! What every guest run on an emu-device prepares before it boots: the
//! image (kernel, our module, static daemon, initramfs), QEMU and
//! emu-device (release), with any other host tool the run needs built
//! beside it. All cached. The ivshmem session (`ivshmem_session::Tools`) and the
//! NVMe runs (`nvme_guest::NvmeTools`) add their own parts on top.

use std::path::{Path, PathBuf};

use anyhow::Result;
use xshell::Shell;

use crate::host_build;
use crate::images::{self, Image, ImageOptions};
use crate::phases::Phases;
use crate::qemu::binary::{self, QemuBinary, QemuVersion};
use crate::qemu::{Accel, VmConfig};

/// The image, QEMU and emu-device of a guest run.
pub struct GuestTools {
    pub image: Image,
    pub qemu: QemuBinary,
    pub emu_bin: PathBuf,
}

impl GuestTools {
    /// A guest of the image on this QEMU, with its files in `run_dir` and
    /// `share` as its share (the caller adds what is its own).
    pub(crate) fn vm_config(&self, run_dir: &Path, share: &Path, accel: Accel) -> VmConfig {
        let mut vm = vm_config(self.qemu.clone(), &self.image, run_dir, share);
        vm.accel = accel;
        vm
    }
}

/// A guest of `image` on `qemu` with its files in `run_dir` and `share` as
/// its share (TCG, the defaults of `VmConfig::new`).
pub fn vm_config(qemu: QemuBinary, image: &Image, run_dir: &Path, share: &Path) -> VmConfig {
    let mut vm = VmConfig::new(
        qemu,
        image.boot_kernel.clone(),
        image.initramfs.clone(),
        run_dir.to_path_buf(),
    );
    vm.share_dir = Some(share.to_path_buf());
    vm
}

/// Prepare them for `kernel` (a name from images/KERNELS, default its first
/// line) and `qemu`; `more` are further workspace packages built (release)
/// after emu-device, each with a binary of the package's name, which the
/// caller finds in `target/release`.
pub(crate) fn prepare(
    sh: &Shell,
    kernel: Option<&str>,
    qemu: QemuVersion,
    more: &[&str],
    phases: &mut Phases,
) -> Result<GuestTools> {
    // emu-device and the daemon's library in one cargo build, so that the
    // image's static daemon is only its link (host_build).
    let emu_bin = phases.run("host binaries", || host_build::build_host_binaries(sh, more))?;
    let image_args = ImageOptions {
        kernel: kernel.map(str::to_string),
        kmod_dir: None,
        with_daemon: true,
    };
    let image = images::prepare(sh, &image_args, phases)?;
    let qemu = phases.run(&format!("qemu {}", qemu.name()), || binary::ensure(sh, qemu))?;
    Ok(GuestTools { image, qemu, emu_bin })
}
