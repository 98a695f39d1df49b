//! `cargo xtask deps`: install the host packages, guest kernel toolchains
//! and QEMU builds ahead of time (every other command does it when needed).

use anyhow::Result;
use clap::Args;
use hmb_harness::host::{apt, cache_dir, lock_cache, workspace_root};
use hmb_harness::images::{kernels, toolchain};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::{self, QemuVersion};
use xshell::Shell;

#[derive(Args)]
pub struct Deps {
    /// Also the headers of this guest kernel (from images/KERNELS); repeatable.
    #[arg(long)]
    pub kernel: Vec<String>,
    /// Every kernel of images/KERNELS.
    #[arg(long)]
    pub all: bool,
    /// Also QEMU 10.0 (cached, next to the system's 7.2).
    #[arg(long)]
    pub qemu10: bool,
    /// Also QEMU 11.1 (vfio-user-pci, for `--device nvme`), in the trixie chroot.
    #[arg(long)]
    pub qemu11: bool,
}

impl Deps {
    pub fn run(self, sh: &Shell) -> Result<()> {
        let mut phases = Phases::new();
        phases.run("host packages", || {
            apt::ensure(sh, &apt::base_needs())?;
            apt::ensure(sh, &apt::test_needs())?;
            // The debug kernel's build (flex, bison, libelf-dev...), which
            // the test command runs.
            apt::ensure(sh, &hmb_harness::images::debug_kernel::build_needs())
        })?;
        let specs = kernels::load(&workspace_root().join("images/KERNELS"))?;
        let chosen: Vec<_> = if self.all {
            specs.clone()
        } else {
            self.kernel
                .iter()
                .map(|k| kernels::select(&specs, Some(k)))
                .collect::<Result<_>>()?
        };
        let _lock = lock_cache(&cache_dir())?;
        for spec in chosen {
            phases.run(&format!("kernel {} toolchain", spec.name), || {
                toolchain::ensure_toolchain(sh, &spec).map(|_| ())
            })?;
        }
        if self.qemu10 {
            phases.run("QEMU 10.0", || binary::ensure(sh, QemuVersion::V10_0).map(|_| ()))?;
        }
        if self.qemu11 {
            phases.run("QEMU 11.1", || {
                hmb_harness::qemu::chroot_qemu::ensure_locked(sh, &cache_dir()).map(|_| ())
            })?;
        }
        phases.summary();
        Ok(())
    }
}
