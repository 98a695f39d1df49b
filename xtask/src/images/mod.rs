//! Guest images: for one kernel of images/KERNELS, fetch the kernel, build
//! our module against its headers and pack an initramfs. Everything lands
//! in target/hmb-trace/cache/ and is rebuilt only when an input changes.
//! See docs/images.md.

pub mod apt_env;
pub mod chroot;
pub mod fetch;
pub mod guest_modules;
pub mod initramfs;
pub mod kernels;
pub mod kmod_build;
pub mod linux_source;
pub mod stamp;
pub mod vmlinux;

use crate::deps::{self, Need};
use crate::phases::Phases;
use anyhow::{Context, Result};
use apt_env::AptEnv;
use clap::Args;
use kernels::KernelSpec;
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Package lists older than this are refreshed before resolving a kernel.
const APT_LISTS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(7 * 86400);

/// The cargo target directory (CARGO_TARGET_DIR or <root>/target).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::workspace_root().join("target"))
}

/// target/hmb-trace/cache, or $HMB_TRACE_CACHE (e.g. to share one cache
/// between clones, as CI's fresh clone on a reused machine could).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os("HMB_TRACE_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => target_dir().join("hmb-trace").join("cache"),
    }
}

/// Holds an exclusive lock on the cache: two runs never build the same entry at once.
pub struct CacheLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

pub fn lock_cache(cache: &Path) -> Result<CacheLock> {
    std::fs::create_dir_all(cache)?;
    let path = cache.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let lock = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((file, _)) => {
            println!("    waiting for another run holding {}", path.display());
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
                .map_err(|(_, e)| e)
                .context("locking the image cache")?
        }
    };
    Ok(CacheLock { _lock: lock })
}

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
}

#[derive(Args, Clone)]
pub struct ImageArgs {
    /// Guest kernel, a name from images/KERNELS (default: its first line).
    #[arg(long)]
    pub kernel: Option<String>,
    /// Module source directory (default: kmod/). Built when it has a Makefile.
    #[arg(long)]
    pub kmod_dir: Option<PathBuf>,
    /// Build the static hmb-trace-daemon first (cargo, incremental) so the image has it.
    #[arg(long)]
    pub with_daemon: bool,
}

/// Where the static daemon is built (and where images/initramfs-files looks for it).
pub const DAEMON_TARGET: &str = "x86_64-unknown-linux-gnu";

/// `cargo build --release` of hmb-trace-daemon, statically linked (glibc
/// crt-static: the initramfs has no libc). A separate --target keeps these
/// RUSTFLAGS from invalidating the host build.
pub fn build_static_daemon(sh: &Shell) -> Result<PathBuf> {
    let root = crate::workspace_root();
    let _dir = sh.push_dir(&root);
    cmd!(sh, "cargo build --release --target {DAEMON_TARGET} -p hmb-trace-daemon")
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .run()
        .context("building the static daemon")?;
    let path = target_dir().join(DAEMON_TARGET).join("release/hmb-trace-daemon");
    anyhow::ensure!(path.is_file(), "cargo built no {}", path.display());
    Ok(path)
}

/// A kernel's toolchain: backports source and headers on the host, or the
/// chroot with the headers inside. Returns where apt runs
/// for this kernel and the concrete packages. Used by `deps` and `image`.
pub fn ensure_toolchain(sh: &Shell, spec: &KernelSpec) -> Result<(AptEnv, fetch::ResolvedKernel)> {
    let cache = cache_dir();
    let env = AptEnv::for_kernel(spec, &cache);
    match &env {
        AptEnv::Host => {
            if spec.apt_target_release().is_some() {
                deps::ensure_backports_source(sh, spec.codename())?;
            }
        }
        AptEnv::Chroot(c) => {
            if c.ensure(sh)? {
                println!("    built {}", c.root.display());
            }
        }
    }
    env.refresh_if_stale(sh, APT_LISTS_MAX_AGE)?;
    let resolved = fetch::resolve_cached(sh, &env, spec, &cache)?;
    let headers = resolved.headers_package();
    let release = spec.apt_target_release();
    match &env {
        AptEnv::Host => {
            let mut need = Need::new(
                &headers,
                &format!("headers of guest kernel {} to build the module", spec.name),
            );
            need.release = release.map(str::to_string);
            deps::ensure(sh, &[need])?;
        }
        AptEnv::Chroot(c) => c.apt_install(sh, release, &[headers.as_str()])?,
    }
    Ok((env, resolved))
}

pub fn prepare(sh: &Shell, args: &ImageArgs, phases: &mut Phases) -> Result<Image> {
    let root = crate::workspace_root();
    let cache = cache_dir();
    let specs = kernels::load(&root.join("images/KERNELS"))?;
    let spec = kernels::select(&specs, args.kernel.as_deref())?;
    phases.run("host packages", || deps::ensure(sh, &deps::base_needs()))?;
    if args.with_daemon {
        phases.run("static daemon", || build_static_daemon(sh))?;
    }
    let _lock = lock_cache(&cache)?;
    let (env, resolved) = phases.run(&format!("toolchain ({})", spec.name), || ensure_toolchain(sh, &spec))?;
    let kernel = phases.run(&format!("kernel fetch ({})", spec.name), || {
        fetch::fetch(sh, &env, &spec, &resolved, &cache)
    })?;
    let how = if kernel.downloaded { "downloaded" } else { "cached" };
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
    Ok(Image {
        kernel_name: spec.name.clone(),
        abi: kernel.resolved.abi.clone(),
        boot_kernel: kernel.vmlinux.clone().unwrap_or_else(|| kernel.vmlinuz.clone()),
        vmlinuz: kernel.vmlinuz.clone(),
        initramfs: initramfs.path.clone(),
        our_modules: initramfs.our_module_paths.clone(),
    })
}

/// `cargo xtask image`: prepare and print where the image is.
pub fn run(args: ImageArgs) -> Result<()> {
    crate::interrupt::install();
    let sh = Shell::new()?;
    let mut phases = Phases::new();
    let image = prepare(&sh, &args, &mut phases)?;
    phases.summary();
    println!("kernel     {} ({})", image.vmlinuz.display(), image.abi);
    println!("boots      {}", image.boot_kernel.display());
    println!("initramfs  {}", image.initramfs.display());
    for m in &image.our_modules {
        println!("module     {m} (guest path)");
    }
    Ok(())
}
