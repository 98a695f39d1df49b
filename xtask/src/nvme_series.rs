//! `cargo xtask nvme-series`: the NVMe host driver patch series of
//! kmod/patches/<kernel>/ against Debian's own source of each guest kernel
//! (harness `images::nvme_series`; docs/kmod.md, "The real-device path").

use anyhow::Result;
use clap::Args;
use hmb_harness::images::kernels::{self, KernelSpec};
use hmb_harness::images::nvme_series::{prepare, prepare_recorded};
use hmb_harness::images::nvme_series_gen;
use hmb_harness::{interrupt, workspace_root};
use xshell::Shell;

#[derive(Args, Clone)]
pub struct NvmeSeries {
    /// A kernel of images/KERNELS, or `all` (default).
    #[arg(long, default_value = "all")]
    pub kernel: String,
    /// Apply and checkpatch only; do not build nvme.ko.
    #[arg(long)]
    pub no_build: bool,
    /// Generate kmod/patches/<kernel>/ from the one source (kmod/nvme/,
    /// the shared headers) and stop; docs/kmod.md, "One source".
    #[arg(long)]
    pub write: bool,
}

impl NvmeSeries {
    pub fn run(self, sh: &Shell) -> Result<()> {
        interrupt::install();
        let specs = kernels::load(&workspace_root().join("images/KERNELS"))?;
        let selected: Vec<KernelSpec> = if self.kernel == "all" {
            specs
        } else {
            vec![kernels::select(&specs, Some(&self.kernel))?]
        };
        if self.write {
            for spec in &selected {
                for p in nvme_series_gen::write(&spec.name)? {
                    println!("wrote {}", p.display());
                }
            }
            return Ok(());
        }
        let mut done = Vec::new();
        for spec in &selected {
            println!("==> nvme series for kernel {}", spec.name);
            // A full run leaves the record the guests' `prepare_cached`
            // reads, so that they do not repeat its copy and checkpatch.
            done.push(match self.no_build {
                true => prepare(sh, spec, false)?,
                false => prepare_recorded(sh, spec)?,
            });
        }
        for o in &done {
            println!(
                "kernel {}: {} series applies, checkpatch --strict clean{}",
                o.kernel,
                o.source,
                o.nvme_ko
                    .as_ref()
                    .map(|p| format!(", built {}", p.display()))
                    .unwrap_or_default()
            );
        }
        Ok(())
    }
}
