//! Kernel fetch: resolve the matrix entry to concrete Debian packages,
//! `apt-get download` them into the cache and unpack them with `dpkg-deb -x`.
//! Nothing is installed: the host's own kernel packages are untouched.

use super::kernels::KernelSpec;
use crate::host::apt_env::AptEnv;
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// The concrete packages behind one matrix entry.
#[derive(Debug, Clone)]
pub struct ResolvedKernel {
    /// `uname -r` of the guest and the suffix of its packages, e.g. `6.1.0-57-amd64`.
    pub abi: String,
    /// Debian version of the image package, e.g. `6.1.192-3`.
    pub version: String,
    /// (package, version) pairs to download: the image and its same-ABI parts.
    pub packages: Vec<(String, String)>,
}

impl ResolvedKernel {
    pub(crate) fn headers_package(&self) -> String {
        format!("linux-headers-{}", self.abi)
    }
}

/// A fetched, unpacked kernel.
pub struct FetchedKernel {
    pub resolved: ResolvedKernel,
    /// Where the packages are unpacked (boot/, lib/modules/, the config).
    pub root: PathBuf,
    pub vmlinuz: PathBuf,
    /// The same kernel uncompressed, when it has a PVH entry (faster boot).
    pub vmlinux: Option<PathBuf>,
    /// `lib/modules/<abi>` inside the unpacked tree.
    pub modules_dir: PathBuf,
    /// True when it was downloaded during this call.
    pub downloaded: bool,
}

pub(crate) fn resolve(sh: &Shell, env: &AptEnv, spec: &KernelSpec) -> Result<ResolvedKernel> {
    let release = spec.apt_target_release();
    // A meta package (linux-image-amd64) depends on exactly one concrete image.
    let concrete = match env
        .depends(sh, release, &spec.image_package)?
        .into_iter()
        .find(|d| d.starts_with("linux-image-"))
    {
        Some(image) => image,
        None => spec.image_package.clone(),
    };
    let abi = abi_of(&concrete)?;
    let version = env.candidate(sh, release, &concrete)?;
    let mut packages = vec![(concrete.clone(), version.clone())];
    if spec.image_package.is_empty() {
        bail!("empty image package");
    }
    // 7.x splits the image into linux-binary-, linux-modules- and linux-base-<abi>.
    for dep in env.depends(sh, release, &concrete)? {
        if is_same_abi_part(&dep, &abi) {
            let v = env.candidate(sh, release, &dep)?;
            packages.push((dep, v));
        }
    }
    Ok(ResolvedKernel { abi, version, packages })
}

fn abi_of(image_package: &str) -> Result<String> {
    let abi = image_package
        .strip_prefix("linux-image-")
        .map(|s| s.strip_suffix("-unsigned").unwrap_or(s))
        .filter(|s| s.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .with_context(|| format!("{image_package:?} is not a concrete linux-image-<version> package"))?;
    Ok(abi.to_string())
}

fn is_same_abi_part(dep: &str, abi: &str) -> bool {
    // 7.x: linux-base-<abi> carries modules.builtin, modules.order and the config.
    ["linux-binary-", "linux-modules-", "linux-image-", "linux-base-"]
        .iter()
        .any(|prefix| {
            dep.strip_prefix(prefix)
                .map(|rest| rest.strip_prefix("unsigned-").unwrap_or(rest) == abi)
                .unwrap_or(false)
        })
}

/// `resolve`, remembered in the cache until apt's package lists or
/// configuration change (apt-cache takes seconds; this is the warm path).
pub(crate) fn resolve_cached(sh: &Shell, env: &AptEnv, spec: &KernelSpec, cache: &Path) -> Result<ResolvedKernel> {
    let mut fp = env.apt_state()?;
    fp.add_str("recipe", "1")
        .add_str("suite", &spec.suite)
        .add_str("image", &spec.image_package)
        .add_str("env", &env.describe());
    let path = cache.join("kernels").join(format!("{}.resolved", spec.name));
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Some(r) = parse_resolved(&text, &fp.hex()) {
            return Ok(r);
        }
    }
    let r = resolve(sh, env, spec)?;
    std::fs::create_dir_all(cache.join("kernels"))?;
    std::fs::write(&path, format_resolved(&r, &fp.hex()))?;
    Ok(r)
}

fn format_resolved(r: &ResolvedKernel, key: &str) -> String {
    let mut out = format!("key {key}\nabi {}\nversion {}\n", r.abi, r.version);
    for (p, v) in &r.packages {
        out.push_str(&format!("package {p} {v}\n"));
    }
    out
}

fn parse_resolved(text: &str, key: &str) -> Option<ResolvedKernel> {
    let mut lines = text.lines();
    if lines.next()? != format!("key {key}") {
        return None;
    }
    let abi = lines.next()?.strip_prefix("abi ")?.to_string();
    let version = lines.next()?.strip_prefix("version ")?.to_string();
    let mut packages = Vec::new();
    for l in lines {
        let (p, v) = l.strip_prefix("package ")?.split_once(' ')?;
        packages.push((p.to_string(), v.to_string()));
    }
    (!packages.is_empty()).then_some(ResolvedKernel { abi, version, packages })
}

pub(crate) fn fetch(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    resolved: &ResolvedKernel,
    cache: &Path,
) -> Result<FetchedKernel> {
    ensure!(
        !spec.debug,
        "kernel {} is built (images::debug_kernel), not fetched: it has no Debian image",
        spec.name
    );
    let resolved = resolved.clone();
    let dir = cache.join("kernels").join(&spec.name);
    let root = dir.join("root");
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", "1");
    for (p, v) in &resolved.packages {
        fp.add_str(p, v);
    }
    let stamp = Stamp::new(dir.join("fetched.stamp"), &fp);
    let downloaded = !(stamp.is_fresh() && root.is_dir());
    if downloaded {
        stamp.invalidate()?;
        let debs = dir.join("debs");
        for d in [&debs, &root] {
            if d.exists() {
                std::fs::remove_dir_all(d)?;
            }
        }
        let names: Vec<&str> = resolved.packages.iter().map(|(p, _)| p.as_str()).collect();
        println!("    apt-get download ({}): {}", env.describe(), names.join(" "));
        env.download(sh, &resolved.packages, &debs)?;
        std::fs::create_dir_all(&root)?;
        for entry in std::fs::read_dir(&debs)? {
            let deb = entry?.path();
            if deb.extension().is_some_and(|e| e == "deb") {
                cmd!(sh, "timeout --foreground 300 dpkg-deb -x {deb} {root}")
                    .quiet()
                    .run()?;
            }
        }
        // The .debs are not needed once unpacked; they are most of the cache size.
        std::fs::remove_dir_all(&debs)?;
        // Debian generates modules.dep in postinst; do it here. Host depmod only
        // looks in <base>/lib/modules, so give usr-merged (7.x) trees a lib link.
        if !root.join("lib").exists() && root.join("usr/lib/modules").exists() {
            std::os::unix::fs::symlink("usr/lib", root.join("lib"))?;
        }
        let abi = &resolved.abi;
        cmd!(sh, "timeout --foreground 300 depmod -b {root} {abi}")
            .quiet()
            .run()
            .context("depmod of the fetched kernel")?;
    }
    let abi = &resolved.abi;
    let vmlinuz = [format!("boot/vmlinuz-{abi}"), format!("usr/lib/modules/{abi}/vmlinuz")]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.exists())
        .with_context(|| format!("no vmlinuz-{abi} in {}", root.display()))?;
    let modules_dir = ["lib/modules", "usr/lib/modules"]
        .iter()
        .map(|d| root.join(d).join(abi))
        .find(|p| p.join("modules.dep").exists())
        .with_context(|| format!("no lib/modules/{abi}/modules.dep in {}", root.display()))?;
    let vmlinux = uncompressed_kernel(sh, &dir, &vmlinuz, downloaded)?;
    if downloaded {
        stamp.record()?;
    }
    Ok(FetchedKernel {
        resolved,
        root,
        vmlinuz,
        vmlinux,
        modules_dir,
        downloaded,
    })
}

/// The cached vmlinux for PVH boot (see vmlinux.rs), extracted once per
/// download; None (remembered) when the kernel has none to offer.
fn uncompressed_kernel(sh: &Shell, dir: &Path, vmlinuz: &Path, downloaded: bool) -> Result<Option<PathBuf>> {
    let path = dir.join("vmlinux");
    let unavailable = dir.join("vmlinux.unavailable");
    if downloaded {
        for p in [&path, &unavailable] {
            if p.exists() {
                std::fs::remove_file(p)?;
            }
        }
    }
    if path.exists() {
        return Ok(Some(path));
    }
    if unavailable.exists() {
        return Ok(None);
    }
    match super::vmlinux::extract(sh, vmlinuz, &path) {
        Ok(()) => Ok(Some(path)),
        Err(e) => {
            println!("    note: {e:#}; the guest boots the compressed bzImage");
            std::fs::write(&unavailable, format!("{e:#}\n"))?;
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_comes_from_the_concrete_image_name() {
        assert_eq!(abi_of("linux-image-6.1.0-57-amd64").unwrap(), "6.1.0-57-amd64");
        assert_eq!(
            abi_of("linux-image-6.12.95+deb12-amd64-unsigned").unwrap(),
            "6.12.95+deb12-amd64"
        );
        assert!(abi_of("linux-image-amd64").is_err());
        assert!(abi_of("nginx").is_err());
    }

    #[test]
    fn resolution_round_trips_and_a_new_key_invalidates_it() {
        let r = ResolvedKernel {
            abi: "6.1.0-57-amd64".into(),
            version: "6.1.192-3".into(),
            packages: vec![("linux-image-6.1.0-57-amd64".into(), "6.1.192-3".into())],
        };
        let text = format_resolved(&r, "k1");
        let back = parse_resolved(&text, "k1").unwrap();
        assert_eq!((back.abi, back.version, back.packages), (r.abi, r.version, r.packages));
        assert!(parse_resolved(&text, "k2").is_none());
        assert!(parse_resolved("key k1\nabi x\n", "k1").is_none());
    }

    #[test]
    fn parts_must_carry_the_same_abi() {
        let abi = "7.3.4+deb13-amd64";
        assert!(is_same_abi_part("linux-binary-7.3.4+deb13-amd64", abi));
        assert!(is_same_abi_part("linux-modules-7.3.4+deb13-amd64", abi));
        assert!(is_same_abi_part("linux-base-7.3.4+deb13-amd64", abi));
        assert!(!is_same_abi_part("linux-base", abi));
        assert!(!is_same_abi_part("linux-modules-7.3.4+deb13-cloud-amd64", abi));
        assert!(!is_same_abi_part("linux-binary-7.3.3+deb13-amd64", abi));
    }
}
