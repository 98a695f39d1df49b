//! Guest images: for one kernel of images/KERNELS, fetch the kernel, build
//! our module against its headers and pack an initramfs. Everything lands
//! in target/hmb-trace/cache/ and is rebuilt only when an input changes.
//! See docs/images.md.

pub(crate) mod debian_root;
pub mod debug_kernel;
pub(crate) mod dkms_prebuilt;
pub(crate) mod fetch;
pub mod guest_modules;
pub mod initramfs;
pub mod kernels;
pub(crate) mod kmod_build;
pub(crate) mod linux_source;
pub mod nvme_series;
pub mod nvme_series_gen;
pub mod toolchain;
pub(crate) mod vmlinux;

use crate::host::apt;
use crate::host::{cache_dir, lock_cache, target_dir, workspace_root};
use crate::phases::Phases;
use anyhow::{Context, Result};
use std::path::PathBuf;
use toolchain::ensure_toolchain;
use xshell::Shell;

/// A prepared guest image.
pub struct Image {
    pub kernel_name: String,
    /// `uname -r` of the guest.
    pub abi: String,
    pub vmlinuz: PathBuf,
    /// What QEMU's -kernel gets: the uncompressed vmlinux (PVH boot) when
    /// there is one, else the vmlinuz.
    pub boot_kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Guest paths of our module(s), empty when kmod/ has nothing to build.
    pub our_modules: Vec<String>,
    /// The kernel has KFENCE built in (its config), so a guest with the
    /// kernel checks on must say "kfence: initialized" (qemu::kernel_checks).
    pub has_kfence: bool,
}

impl Image {
    /// Guest path of nvme-hmb-trace.ko.
    pub fn trace_module(&self) -> Result<String> {
        self.our_modules
            .iter()
            .find(|m| m.contains("nvme-hmb-trace") || m.contains("nvme_hmb_trace"))
            .cloned()
            .context("the image has no nvme-hmb-trace.ko")
    }
}

/// Which image to prepare.
#[derive(Debug, Clone, Default)]
pub struct ImageOptions {
    /// Guest kernel, a name from images/KERNELS (default: its first line).
    pub kernel: Option<String>,
    /// Module source directory (default: kmod/). Built when it has a Makefile.
    pub kmod_dir: Option<PathBuf>,
    /// Link the static hmb-trace-daemon first (cargo, incremental) so the
    /// image has it; fastest after a host release build of the daemon's
    /// library (`host_build`).
    pub with_daemon: bool,
}

/// The statically linked daemon for the initramfs, linked from the host
/// release build's dependencies (`host_build`).
pub(crate) use crate::host_build::build_static_daemon;

pub fn prepare(sh: &Shell, args: &ImageOptions, phases: &mut Phases) -> Result<Image> {
    let root = workspace_root();
    let cache = cache_dir();
    let specs = kernels::load(&root.join("images/KERNELS"))?;
    let spec = kernels::select(&specs, args.kernel.as_deref())?;
    phases.run("host packages", || apt::ensure(sh, &apt::base_needs()))?;
    if args.with_daemon {
        phases.run("static daemon", || build_static_daemon(sh))?;
    }
    let (env, resolved) = {
        let _lock = lock_cache(&cache)?;
        phases.run(&format!("toolchain ({})", spec.debian_name()), || {
            ensure_toolchain(sh, &spec.debian())
        })?
    };
    // Outside the cache lock: a cold debug build would hold every other
    // run sharing the cache for its whole length (it has its own lock).
    let debug = match spec.debug {
        true => Some(phases.run(&format!("debug kernel ({})", spec.name), || {
            debug_kernel::ensure(sh, &env, &spec, &resolved, &cache)
        })?),
        false => None,
    };
    let _lock = lock_cache(&cache)?;
    let kernel = match debug {
        Some((kernel, _)) => kernel,
        None => phases.run(&format!("kernel fetch ({})", spec.name), || {
            fetch::fetch(sh, &env, &spec, &resolved, &cache)
        })?,
    };
    let how = match (spec.debug, kernel.downloaded) {
        (true, true) => "built",
        (false, true) => "downloaded",
        (_, false) => "cached",
    };
    println!(
        "    kernel {} = {} {} ({how})",
        spec.name, kernel.resolved.abi, kernel.resolved.version
    );

    let kmod_dir = args.kmod_dir.clone().unwrap_or_else(|| root.join("kmod"));
    let built = if kmod_dir.join("Makefile").exists() {
        let b = phases.run("module build", || {
            kmod_build::build(sh, &env, &spec, &kernel.resolved, &kmod_dir, &cache)
        })?;
        println!("    module {}", if b.rebuilt { "rebuilt" } else { "cached" });
        Some(b)
    } else {
        println!(
            "    note: {} has no Makefile yet; the image has no hmb-trace module",
            kmod_dir.display()
        );
        None
    };
    let target = target_dir();
    let our_modules: Vec<PathBuf> = built.as_ref().map(|b| b.modules.clone()).unwrap_or_default();
    let initramfs = phases.run("initramfs", || {
        initramfs::build(
            sh,
            &initramfs::InitramfsInputs {
                name: &spec.name,
                root: &root,
                cache: &cache,
                kernel: &kernel,
                our_modules: &our_modules,
                placeholders: initramfs::Placeholders {
                    root: &root,
                    target: &target,
                    kmod_build: built.as_ref().map(|b| b.build_dir.as_path()),
                },
            },
        )
    })?;
    println!("    initramfs {}", if initramfs.rebuilt { "rebuilt" } else { "cached" });
    for m in &initramfs.missing_optional {
        println!("    note: not in the image (optional, not built yet): {m}");
    }
    let config = linux_source::find_config(&kernel.root, &kernel.resolved.abi)?;
    let has_kfence = crate::qemu::kernel_checks::kernel_has_kfence(
        &std::fs::read_to_string(&config).with_context(|| format!("reading {}", config.display()))?,
    );
    Ok(Image {
        has_kfence,
        kernel_name: spec.name.clone(),
        abi: kernel.resolved.abi.clone(),
        boot_kernel: kernel.vmlinux.clone().unwrap_or_else(|| kernel.vmlinuz.clone()),
        vmlinuz: kernel.vmlinuz.clone(),
        initramfs: initramfs.path.clone(),
        our_modules: initramfs.our_module_paths.clone(),
    })
}
