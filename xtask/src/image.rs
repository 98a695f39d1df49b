//! `cargo xtask image`: prepare a guest image and print where it is.

use anyhow::Result;
use clap::Args;

use crate::flags::KernelArg;
use hmb_harness::images::{self, ImageOptions};
use hmb_harness::phases::Phases;
use std::path::PathBuf;
use xshell::Shell;

#[derive(Args, Clone)]
pub struct Image {
    #[command(flatten)]
    pub kernel: KernelArg,
    /// Module source directory (default: kmod/). Built when it has a Makefile.
    #[arg(long)]
    pub kmod_dir: Option<PathBuf>,
    /// Build the static hmb-trace-daemon first (cargo, incremental) so the image has it.
    #[arg(long)]
    pub with_daemon: bool,
}

impl Image {
    pub fn options(&self) -> ImageOptions {
        ImageOptions {
            kernel: self.kernel.kernel.clone(),
            kmod_dir: self.kmod_dir.clone(),
            with_daemon: self.with_daemon,
        }
    }

    pub fn run(self, sh: &Shell) -> Result<()> {
        hmb_harness::interrupt::install();
        let mut phases = Phases::new();
        let image = images::prepare(sh, &self.options(), &mut phases)?;
        phases.summary();
        println!("kernel     {} ({})", image.vmlinuz.display(), image.abi);
        println!("boots      {}", image.boot_kernel.display());
        println!("initramfs  {}", image.initramfs.display());
        for m in &image.our_modules {
            println!("module     {m} (guest path)");
        }
        Ok(())
    }
}
