//! The debug guest kernel (`6.12-debug`, docs/debug-checks.md): the whole
//! of Debian's `linux-source-<X.Y>` of a guest kernel (the source the NVMe
//! series is applied to), configured by `make allnoconfig` with
//! images/debug-<name>.config (what the guests need, then lockdep, KASAN,
//! UBSAN, DEBUG_OBJECTS, KFENCE), built with the host's gcc, installed like
//! a fetched kernel (cache/kernels/<name>/root, so the image and the stock
//! nvme modules are found where every other kernel's are) and cached by a
//! stamp of its inputs. The tree stays: our module and the series' nvme.ko
//! are built against it (`make -C <tree> M=...`).

use super::fetch::{FetchedKernel, ResolvedKernel};
use super::kernels::KernelSpec;
use super::linux_source;
use crate::host::apt::{self, Need};
use crate::host::apt_env::AptEnv;
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Instant;
use xshell::{cmd, Shell};

/// Bump when the steps below change what they produce.
const RECIPE: &str = "1";

/// Parallel jobs of the kernel build. Two: the machine has two cores, and
/// the build runs under `nice` so the guests and builds beside it keep
/// their share.
pub const JOBS_ENV: &str = "HMB_TRACE_DEBUG_KERNEL_JOBS";
const DEFAULT_JOBS: &str = "2";

/// A cold build takes tens of minutes on two loaded cores (the figures are
/// in docs/debug-checks.md); this only catches a hung build.
const BUILD_TIMEOUT_S: &str = "14400";

pub use super::kernels::fragment_path;

/// Where the build happens and its stamps live.
fn work_dir(cache: &Path, spec: &KernelSpec) -> PathBuf {
    cache.join("debug-kernel").join(&spec.name)
}

/// The built source tree: KDIR of the module builds for this kernel.
pub fn tree_dir(cache: &Path, spec: &KernelSpec) -> PathBuf {
    work_dir(cache, spec).join("tree")
}

fn built_stamp_path(cache: &Path, spec: &KernelSpec) -> PathBuf {
    work_dir(cache, spec).join("built.stamp")
}

/// The fingerprint of the finished build, for the stamps of what is built
/// against it (a rebuilt kernel rebuilds the modules).
pub fn built_id(cache: &Path, spec: &KernelSpec) -> Result<String> {
    let path = built_stamp_path(cache, spec);
    let id = std::fs::read_to_string(&path)
        .with_context(|| format!("kernel {} is not built yet (no {})", spec.name, path.display()))?;
    Ok(id.trim().to_string())
}

/// The host's tools for a kernel build (beside make and gcc, which the
/// guests' builds need anyway). Public so that `cargo xtask deps` and the
/// test command's host-packages step install them up front: a stock CI
/// machine has none of them, and the test command builds this kernel in
/// the background, where an apt run beside the foreground's could meet
/// dpkg's lock.
pub fn build_needs() -> Vec<Need> {
    [
        ("flex", "Kconfig's lexer, generated at build time (the debug kernel)"),
        ("bison", "Kconfig's parser, generated at build time (the debug kernel)"),
        ("bc", "computes the kernel's timeconst.h (the debug kernel)"),
        (
            "libelf-dev",
            "objtool, which every x86_64 kernel build runs (the debug kernel)",
        ),
        ("xz-utils", "unpacks linux-source-<X.Y>.tar.xz (the debug kernel)"),
        (
            "patch",
            "applies images/debug-<X.Y>.patch, the stock fixes (the debug kernel)",
        ),
    ]
    .iter()
    .map(|(p, w)| Need::new(p, w))
    .collect()
}

/// Only the kernel `name` (a debug kernel, e.g. `6.12-debug`): its
/// toolchain (under the cache's lock, briefly), then the source, the
/// configuration and the build (under the build's own lock). No module, no
/// initramfs, no cargo build: what the test command runs in a background
/// process while its other steps run (`cargo xtask debug-kernel
/// --kernel-only`). True when this call built it.
pub fn prepare_kernel_only(sh: &Shell, name: &str) -> Result<bool> {
    let specs = super::kernels::load(&crate::host::workspace_root().join("images/KERNELS"))?;
    let spec = super::kernels::select(&specs, Some(name))?;
    ensure!(
        spec.debug,
        "kernel {name} is not a debug kernel (images/debug-<name>.config)"
    );
    let cache = crate::host::cache_dir();
    let (env, resolved) = {
        let _lock = crate::host::lock_cache(&cache)?;
        super::toolchain::ensure_toolchain(sh, &spec.debian())?
    };
    let (_, built) = ensure(sh, &env, &spec, &resolved, &cache)?;
    Ok(built)
}

/// Configured, built and installed; `built` is true when this call built it.
pub fn ensure(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    resolved: &ResolvedKernel,
    cache: &Path,
) -> Result<(FetchedKernel, bool)> {
    ensure!(spec.debug, "kernel {} is not a debug kernel", spec.name);
    ensure!(
        matches!(env, AptEnv::Host),
        "the debug kernel {} is built on the host, which must run {} (it runs the apt of {})",
        spec.name,
        spec.codename(),
        env.describe()
    );
    let package = linux_source::source_package(resolved)?;
    let version = resolved.version.clone();
    let fragment_file = fragment_path(spec.debian_name());
    let fragment =
        std::fs::read_to_string(&fragment_file).with_context(|| format!("reading {}", fragment_file.display()))?;
    // Stock fixes the build carries (images/debug-<name>.patch, optional).
    let patch_file = fragment_file.with_extension("patch");
    let patch = match patch_file.is_file() {
        true => std::fs::read_to_string(&patch_file).with_context(|| format!("reading {}", patch_file.display()))?,
        false => String::new(),
    };
    let compiler = cmd!(sh, "gcc --version").quiet().read().context("gcc --version")?;
    let compiler = compiler.lines().next().unwrap_or_default().to_string();
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", RECIPE)
        .add_str("package", &package)
        .add_str("version", &version)
        .add_str("fragment", &fragment)
        .add_str("compiler", &compiler);
    if !patch.is_empty() {
        fp.add_str("patch", &patch);
    }
    let dir = work_dir(cache, spec);
    std::fs::create_dir_all(&dir)?;
    // Its own lock, not the cache's: a cold build takes long enough that
    // every other run sharing the cache would wait for it.
    let _lock = lock_file(&dir.join(".lock"))?;
    let stamp = Stamp::new(built_stamp_path(cache, spec), &fp);
    let kernels_dir = cache.join("kernels").join(&spec.name);
    let root = kernels_dir.join("root");
    let vmlinux = kernels_dir.join("vmlinux");
    let release_file = dir.join("kernelrelease");
    let built = !(stamp.is_fresh() && vmlinux.is_file() && release_file.is_file());
    if built {
        stamp.invalidate()?;
        apt::ensure(sh, &build_needs())?;
        let tree = unpacked_source(sh, env, spec, &package, &version, &dir)?;
        apply_patch(sh, &tree, &dir, &patch)?;
        configure(sh, &tree, &fragment_file, &fragment)?;
        build(sh, &tree, &dir)?;
        let release = cmd!(sh, "make -s -C {tree} kernelrelease").quiet().read()?;
        install(sh, &tree, &release, &kernels_dir)?;
        std::fs::write(&release_file, format!("{release}\n"))?;
        stamp.record()?;
    }
    let abi = std::fs::read_to_string(&release_file)?.trim().to_string();
    let modules_dir = root.join("lib/modules").join(&abi);
    Ok((
        FetchedKernel {
            resolved: ResolvedKernel {
                abi: abi.clone(),
                version: format!("{version} (debug build {})", fp.hex()),
                // What the image's stamp takes as "the kernel's packages".
                packages: vec![(package, version), ("debug-build".to_string(), fp.hex())],
            },
            vmlinuz: root.join("boot").join(format!("vmlinuz-{abi}")),
            vmlinux: Some(vmlinux),
            modules_dir,
            root,
            downloaded: built,
        },
        built,
    ))
}

/// The whole source tree, unpacked once per source version (a rebuild for a
/// new fragment or compiler reuses it: make rebuilds what changed).
fn unpacked_source(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    package: &str,
    version: &str,
    dir: &Path,
) -> Result<PathBuf> {
    let tree = dir.join("tree");
    // A marker, not a fingerprint: it says which source the tree is, in words.
    let marker = dir.join("source.version");
    let want = format!("{package}={version} recipe {RECIPE}\n");
    if tree.join("Makefile").is_file() && std::fs::read_to_string(&marker).is_ok_and(|m| m == want) {
        return Ok(tree);
    }
    for stale in [&marker, &dir.join(APPLIED_PATCH)] {
        if stale.exists() {
            std::fs::remove_file(stale)?;
        }
    }
    linux_source::download_and_unpack(sh, env, package, version, dir, &tree, None)
        .with_context(|| format!("kernel {}'s source", spec.name))?;
    std::fs::write(&marker, want)?;
    Ok(tree)
}

/// The patch the tree holds now (beside the tree, so a re-unpacked tree
/// starts without it).
const APPLIED_PATCH: &str = "applied.patch";

/// Make the tree hold `patch` (empty: none): the one applied before, if
/// different, is reversed first; make then rebuilds only what changed.
fn apply_patch(sh: &Shell, tree: &Path, dir: &Path, patch: &str) -> Result<()> {
    let applied_file = dir.join(APPLIED_PATCH);
    let applied = std::fs::read_to_string(&applied_file).unwrap_or_default();
    if applied == patch {
        return Ok(());
    }
    if !applied.is_empty() {
        cmd!(sh, "patch -s -R -p1 -d {tree} -i {applied_file}")
            .quiet()
            .run()
            .context("reversing the debug kernel's previous patch")?;
        std::fs::remove_file(&applied_file)?;
    }
    if !patch.is_empty() {
        let file = dir.join("patch.tmp");
        std::fs::write(&file, patch)?;
        cmd!(sh, "patch -s -N -p1 -d {tree} -i {file}")
            .quiet()
            .run()
            .context("applying images/debug-<name>.patch to the debug kernel's source")?;
        std::fs::rename(&file, &applied_file)?;
        println!("    debug kernel source patched ({APPLIED_PATCH} in {})", dir.display());
    }
    Ok(())
}

/// `make allnoconfig` with the fragment, then a check that Kconfig kept
/// every line of it.
fn configure(sh: &Shell, tree: &Path, fragment_file: &Path, fragment: &str) -> Result<()> {
    let allconfig = format!("KCONFIG_ALLCONFIG={}", fragment_file.display());
    cmd!(
        sh,
        "timeout --foreground 600 make -s -C {tree} ARCH=x86_64 {allconfig} allnoconfig"
    )
    .quiet()
    .run()
    .context("make allnoconfig")?;
    let config = std::fs::read_to_string(tree.join(".config"))?;
    let dropped = dropped_lines(fragment, &config);
    ensure!(
        dropped.is_empty(),
        "{} asks for what Kconfig did not keep (a dependency is missing or the option is gone): {}",
        fragment_file.display(),
        dropped.join(", ")
    );
    Ok(())
}

/// Lines of the fragment (`CONFIG_X=...`, `# CONFIG_X is not set`) that are
/// not in the resulting .config.
pub fn dropped_lines(fragment: &str, config: &str) -> Vec<String> {
    let have: std::collections::BTreeSet<&str> = config.lines().map(str::trim).collect();
    fragment
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("CONFIG_") || (l.starts_with("# CONFIG_") && l.ends_with(" is not set")))
        .filter(|l| !have.contains(l))
        .map(str::to_string)
        .collect()
}

/// `nice make -j2 all` (vmlinux, bzImage, modules), timed; the log is
/// kept in `dir`.
fn build(sh: &Shell, tree: &Path, dir: &Path) -> Result<()> {
    let jobs = std::env::var(JOBS_ENV).unwrap_or_else(|_| DEFAULT_JOBS.to_string());
    ensure!(
        jobs.parse::<u32>().is_ok_and(|j| j > 0),
        "{JOBS_ENV}={jobs:?} is not a job count"
    );
    let log = dir.join("build.log");
    println!(
        "    building the debug kernel in {} (make -j{jobs} under nice; log {}; load {})",
        tree.display(),
        log.display(),
        load_average()
    );
    let started = Instant::now();
    let script = "nice -n 10 make -C \"$0\" ARCH=x86_64 -j\"$1\" all > \"$2\" 2>&1";
    let status = cmd!(
        sh,
        "timeout --foreground {BUILD_TIMEOUT_S} sh -c {script} {tree} {jobs} {log}"
    )
    .quiet()
    .ignore_status()
    .output()?
    .status;
    let took = started.elapsed().as_secs_f64();
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for l in tail.iter().rev() {
            println!("    | {l}");
        }
        bail!(
            "the debug kernel build failed after {took:.0} s ({status}); log: {}",
            log.display()
        );
    }
    println!("    debug kernel built in {took:.0} s (load {})", load_average());
    Ok(())
}

/// Where a fetched kernel would be: boot/vmlinuz-<abi> and config-<abi>,
/// lib/modules/<abi> (depmod'ed, stripped), and the vmlinux QEMU boots
/// through its PVH entry.
fn install(sh: &Shell, tree: &Path, release: &str, kernels_dir: &Path) -> Result<()> {
    let root = kernels_dir.join("root");
    if root.exists() {
        std::fs::remove_dir_all(&root)?;
    }
    let boot = root.join("boot");
    std::fs::create_dir_all(&boot)?;
    let mod_path = format!("INSTALL_MOD_PATH={}", root.display());
    cmd!(
        sh,
        "timeout --foreground 600 make -s -C {tree} ARCH=x86_64 {mod_path} INSTALL_MOD_STRIP=1 modules_install"
    )
    .quiet()
    .run()
    .context("make modules_install")?;
    std::fs::copy(tree.join(".config"), boot.join(format!("config-{release}")))?;
    std::fs::copy(
        tree.join("arch/x86/boot/bzImage"),
        boot.join(format!("vmlinuz-{release}")),
    )?;
    let vmlinux = kernels_dir.join("vmlinux");
    let tmp = vmlinux.with_extension("tmp");
    std::fs::copy(tree.join("vmlinux"), &tmp)?;
    ensure!(
        super::vmlinux::has_pvh_entry(sh, &tmp),
        "the debug kernel's vmlinux has no PVH entry (CONFIG_PVH): QEMU cannot boot it directly"
    );
    std::fs::rename(&tmp, &vmlinux)?;
    ensure!(
        root.join("lib/modules").join(release).join("modules.dep").is_file(),
        "modules_install left no modules.dep for {release}"
    );
    Ok(())
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

fn lock_file(path: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)?;
    match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(l),
        Err((file, _)) => {
            println!("    waiting for another build of the debug kernel ({})", path.display());
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
                .map_err(|(_, e)| e)
                .with_context(|| format!("locking {}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kconfig_must_keep_every_line_of_the_fragment() {
        let fragment = "# what the guests need\nCONFIG_PCI=y\nCONFIG_BLK_DEV_NVME=m\n\
                        CONFIG_LOCALVERSION=\"-x\"\n# CONFIG_FOO is not set\n\n";
        let kept = "CONFIG_PCI=y\nCONFIG_BLK_DEV_NVME=m\nCONFIG_LOCALVERSION=\"-x\"\n# CONFIG_FOO is not set\n";
        assert!(dropped_lines(fragment, kept).is_empty());
        let dropped = "CONFIG_PCI=y\n# CONFIG_BLK_DEV_NVME is not set\nCONFIG_LOCALVERSION=\"-x\"\nCONFIG_FOO=y\n";
        assert_eq!(
            dropped_lines(fragment, dropped),
            ["CONFIG_BLK_DEV_NVME=m", "# CONFIG_FOO is not set"]
        );
    }

    /// The repository's fragment asks for every check issue 32 names, and
    /// for NVMe as modules (the series' nvme.ko replaces this tree's).
    #[test]
    fn the_fragment_has_the_checks_and_a_modular_nvme() {
        let text = std::fs::read_to_string(fragment_path("6.12")).unwrap();
        for line in [
            "CONFIG_PROVE_LOCKING=y",
            "CONFIG_DEBUG_ATOMIC_SLEEP=y",
            "CONFIG_KASAN=y",
            "CONFIG_KASAN_GENERIC=y",
            "CONFIG_KASAN_INLINE=y",
            "CONFIG_DEBUG_LIST=y",
            "CONFIG_UBSAN_BOUNDS=y",
            "CONFIG_DEBUG_OBJECTS=y",
            "CONFIG_KFENCE=y",
            "CONFIG_PVH=y",
            "CONFIG_MODULE_UNLOAD=y",
        ] {
            assert!(text.lines().any(|l| l.trim() == line), "no {line}");
        }
        linux_source::check_nvme_modular(&text, "images/debug-6.12.config").unwrap();
    }
}
