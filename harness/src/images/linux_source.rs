//! Debian's `linux-source-<X.Y>` of a guest kernel: `apt-get download` of the
//! exact source version behind the image package (where apt runs for that
//! kernel: host or chroot), cached, and unpacked only as far as the NVMe
//! patch series needs it: `drivers/nvme/host/`, the headers it includes,
//! `scripts/checkpatch.pl` with its data files, and enough of the top level
//! for checkpatch to recognise a kernel tree. See docs/kmod.md.

use super::fetch::ResolvedKernel;
use super::kernels::KernelSpec;
use crate::host::apt_env::AptEnv;
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Bump when the set of unpacked paths changes.
const RECIPE: &str = "1";

/// Paths unpacked from the source tarball (relative to its top directory).
/// checkpatch's `top_of_kernel_tree` needs the top-level entries to exist;
/// each is a real file of the tree, never a placeholder.
const MEMBERS: &[&str] = &[
    "COPYING",
    "CREDITS",
    "Kbuild",
    "MAINTAINERS",
    "Makefile",
    "README",
    "Documentation/process/coding-style.rst",
    "arch/x86/Kconfig",
    "include/linux/nvme.h",
    "include/uapi/linux",
    "drivers/nvme/host",
    "fs/Kconfig",
    "init/Kconfig",
    "ipc/Makefile",
    "kernel/Makefile",
    "lib/Kconfig",
    "scripts/checkpatch.pl",
    "scripts/spelling.txt",
    "scripts/const_structs.checkpatch",
];

/// A kernel's pristine (unpatched) source subset.
pub(crate) struct SourceTree {
    /// `linux-source-6.1`
    pub package: String,
    /// Debian version, equal to the guest image's.
    pub version: String,
    /// The tree's top directory (has MAINTAINERS, scripts/, drivers/).
    pub root: PathBuf,
    pub downloaded: bool,
}

/// `6.1.0-57-amd64` -> `6.1`, `6.12.95+deb12-amd64` -> `6.12`, `7.3.4+deb13-amd64` -> `7.3`.
pub(crate) fn series_of_abi(abi: &str) -> Result<String> {
    let mut parts = abi.split(['.', '-', '+']);
    let major = parts
        .next()
        .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    let minor = parts
        .next()
        .filter(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()));
    match (major, minor) {
        (Some(a), Some(b)) => Ok(format!("{a}.{b}")),
        _ => bail!("cannot tell the kernel series (X.Y) of ABI {abi:?}"),
    }
}

pub(crate) fn source_package(kernel: &ResolvedKernel) -> Result<String> {
    Ok(format!("linux-source-{}", series_of_abi(&kernel.abi)?))
}

/// Download (once per version) and unpack the source subset of `kernel`.
pub(crate) fn fetch(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    kernel: &ResolvedKernel,
    cache: &Path,
) -> Result<SourceTree> {
    let package = source_package(kernel)?;
    // The image and linux-source-X.Y come from one source package, so they
    // share the Debian version: that is what "the same kernel" means here.
    let version = kernel.version.clone();
    let dir = cache.join("linux-source").join(&spec.name);
    let root = dir.join("tree");
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", RECIPE)
        .add_str("package", &package)
        .add_str("version", &version)
        .add_str("members", &MEMBERS.join(" "));
    let stamp = Stamp::new(dir.join("fetched.stamp"), &fp);
    let downloaded = !(stamp.is_fresh() && root.join("drivers/nvme/host/pci.c").is_file());
    if downloaded {
        stamp.invalidate()?;
        let candidate = env.candidate(sh, spec.apt_target_release(), &package)?;
        if candidate != version {
            println!(
                "    note: apt's candidate for {package} is {candidate}; downloading {version}, the guest kernel's"
            );
        }
        download_and_unpack(sh, env, &package, &version, &dir, &root, Some(MEMBERS))
            .with_context(|| format!("kernel {}'s source (the guest kernel's version)", spec.name))?;
        stamp.record()?;
    }
    Ok(SourceTree {
        package,
        version,
        root,
        downloaded,
    })
}

/// `apt-get download` of `package=version` (a `linux-source-X.Y`) into
/// `dir/debs`, then its inner `usr/src/<package>.tar.xz` unpacked to `root`:
/// only `members` (paths below the tarball's top directory), or the whole
/// tree. Whatever `root` held goes first; the staging folder
/// `dir/unpack.tmp` and the .deb go after. Shared by this subset and the
/// debug kernel's whole tree (images::debug_kernel).
pub(crate) fn download_and_unpack(
    sh: &Shell,
    env: &AptEnv,
    package: &str,
    version: &str,
    dir: &Path,
    root: &Path,
    members: Option<&[&str]>,
) -> Result<()> {
    let debs = dir.join("debs");
    let staging = dir.join("unpack.tmp");
    for d in [&debs, &staging, root] {
        if d.exists() {
            std::fs::remove_dir_all(d)?;
        }
    }
    println!("    apt-get download ({}): {package}={version}", env.describe());
    env.download(sh, &[(package.to_string(), version.to_string())], &debs)
        .with_context(|| format!("{package}={version} cannot be downloaded"))?;
    let deb = std::fs::read_dir(&debs)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", debs.display()))?;
    std::fs::create_dir_all(&staging)?;
    let inner = format!("./usr/src/{package}.tar.xz");
    cmd!(sh, "timeout --foreground 300 sh -c 'dpkg-deb --fsys-tarfile \"$0\" | tar -x -C \"$1\" \"$2\"' {deb} {staging} {inner}")
        .quiet()
        .run()
        .with_context(|| format!("no {inner} in {}", deb.display()))?;
    let tarball = staging.join(&inner);
    // xz is read whole either way: a subset costs the same decompression.
    let members: Vec<String> = members
        .unwrap_or_default()
        .iter()
        .map(|m| format!("{package}/{m}"))
        .collect();
    cmd!(
        sh,
        "timeout --foreground 1200 nice -n 10 tar -xJf {tarball} -C {staging} {members...}"
    )
    .quiet()
    .run()
    .with_context(|| format!("unpacking {}", tarball.display()))?;
    std::fs::rename(staging.join(package), root)?;
    std::fs::remove_dir_all(&staging)?;
    std::fs::remove_dir_all(&debs)?;
    Ok(())
}

/// How Debian configured a driver in a kernel's config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tristate {
    Module,
    BuiltIn,
    Off,
}

pub(crate) fn config_value(config: &str, symbol: &str) -> Tristate {
    let set = format!("CONFIG_{symbol}=");
    match config.lines().find_map(|l| l.strip_prefix(&set)) {
        Some("m") => Tristate::Module,
        Some("y") => Tristate::BuiltIn,
        _ => Tristate::Off,
    }
}

/// The replacement nvme.ko only works when Debian ships both halves as
/// modules: nvme.ko is replaced, the stock nvme-core.ko is loaded under it.
pub(crate) fn check_nvme_modular(config: &str, what: &str) -> Result<()> {
    for symbol in ["NVME_CORE", "BLK_DEV_NVME"] {
        match config_value(config, symbol) {
            Tristate::Module => {}
            other => bail!(
                "{what}: CONFIG_{symbol} is {other:?}, not a module: a replacement nvme.ko cannot be loaded on this kernel"
            ),
        }
    }
    Ok(())
}

/// The kernel's config in the unpacked image (boot/config-<abi>, or next to
/// the modules on usr-merged 7.x).
pub(crate) fn find_config(kernel_root: &Path, abi: &str) -> Result<PathBuf> {
    let candidates = [
        format!("boot/config-{abi}"),
        format!("usr/lib/modules/{abi}/config"),
        format!("lib/modules/{abi}/config"),
        format!("usr/lib/linux/config-{abi}"),
    ];
    if let Some(p) = candidates.iter().map(|c| kernel_root.join(c)).find(|p| p.is_file()) {
        return Ok(p);
    }
    // Fall back to a search: where linux-base-<abi> puts it has moved before.
    let mut stack = vec![kernel_root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.filter_map(|e| e.ok()) {
            let p = e.path();
            if p.is_symlink() {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name().to_string_lossy() == format!("config-{abi}") {
                return Ok(p);
            }
        }
    }
    bail!("no config of kernel {abi} under {}", kernel_root.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_comes_from_the_abi() {
        assert_eq!(series_of_abi("6.1.0-57-amd64").unwrap(), "6.1");
        assert_eq!(series_of_abi("6.12.95+deb12-amd64").unwrap(), "6.12");
        assert_eq!(series_of_abi("7.3.4+deb13-amd64").unwrap(), "7.3");
        assert!(series_of_abi("amd64").is_err());
        assert!(series_of_abi("6").is_err());
    }

    #[test]
    fn nvme_must_be_modular() {
        let ok = "CONFIG_NVME_CORE=m\nCONFIG_BLK_DEV_NVME=m\n";
        assert!(check_nvme_modular(ok, "k").is_ok());
        let builtin = "CONFIG_NVME_CORE=y\nCONFIG_BLK_DEV_NVME=y\n";
        let err = check_nvme_modular(builtin, "k").unwrap_err().to_string();
        assert!(err.contains("NVME_CORE is BuiltIn"), "{err}");
        let off = "CONFIG_NVME_CORE=m\n# CONFIG_BLK_DEV_NVME is not set\n";
        assert!(check_nvme_modular(off, "k")
            .unwrap_err()
            .to_string()
            .contains("BLK_DEV_NVME is Off"));
        assert_eq!(config_value("CONFIG_NVME_CORE_X=m\n", "NVME_CORE"), Tristate::Off);
    }
}
