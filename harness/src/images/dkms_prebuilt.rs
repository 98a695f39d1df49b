//! The module built by DKMS in the full guest's own tree (as a chroot on the
//! host), for the guest to install with `dkms install`.
//!
//! Why not build in the guest: under TCG `dkms build` of the module takes
//! about 200 s (measured, 2 CPUs, load 6), too slow for CI. Here the same
//! `dkms add` + `dkms build -k <abi>` runs natively in the same Debian tree
//! with the same headers and compiler, and the result is DKMS's own build
//! folder (`/var/lib/dkms/<name>/<version>/<abi>/<arch>`), packed as a tar.
//! The guest adds the source with `dkms add`, unpacks the tar where DKMS
//! would have built it (what `dkms ldtarball` did before DKMS 3 dropped it),
//! and `dkms install` finds the module built. Debian's dkms 3 has no
//! `mkdeb` any more.

use super::debian_root::DebianRoot;
use super::kmod_build::{copy_tree, is_build_product};
use crate::host::chroot::{Chroot, ProcMount};
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::Shell;

/// Bump when the way the module is built changes.
const RECIPE_VERSION: &str = "1";

/// `PACKAGE_NAME` and `PACKAGE_VERSION` of a dkms.conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DkmsPackage {
    pub name: String,
    pub version: String,
}

impl DkmsPackage {
    pub(crate) fn read(kmod: &Path) -> Result<DkmsPackage> {
        let path = kmod.join("dkms.conf");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        parse_conf(&text).with_context(|| format!("in {}", path.display()))
    }

    /// `name/version`, as dkms commands take it.
    pub(crate) fn id(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }

    /// Where DKMS wants the source: /usr/src/<name>-<version>.
    pub(crate) fn source_dir(&self) -> String {
        format!("/usr/src/{}-{}", self.name, self.version)
    }
}

fn parse_conf(text: &str) -> Result<DkmsPackage> {
    let value = |key: &str| -> Result<String> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix('='))
            .map(|v| v.trim().trim_matches('"').to_string())
            .filter(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c)))
            .with_context(|| format!("no usable {key}="))
    };
    Ok(DkmsPackage {
        name: value("PACKAGE_NAME")?,
        version: value("PACKAGE_VERSION")?,
    })
}

/// DKMS's build of one module for one kernel, as a tar of
/// `<abi>/<arch>/...` relative to /var/lib/dkms/<name>/<version>.
pub(crate) struct Prebuilt {
    pub package: DkmsPackage,
    pub tar: PathBuf,
    pub rebuilt: bool,
}

pub(crate) fn build(sh: &Shell, image: &DebianRoot, abi: &str, kmod: &Path, cache: &Path) -> Result<Prebuilt> {
    let package = DkmsPackage::read(kmod)?;
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", RECIPE_VERSION)
        .add_str("image", &image.key)
        .add_str("abi", abi)
        .add_tree("src", kmod, &is_build_product)?;
    let dir = cache.join("full-guest").join("dkms");
    let tar = dir.join(format!("{}-{}-{abi}-{}.tar", package.name, package.version, fp.hex()));
    let stamp = Stamp::new(tar.with_extension("stamp"), &fp);
    if stamp.is_fresh() && tar.is_file() {
        return Ok(Prebuilt {
            package,
            tar,
            rebuilt: false,
        });
    }
    stamp.invalidate()?;
    std::fs::create_dir_all(&dir)?;
    let chroot = Chroot {
        codename: "full-guest".into(),
        root: image.root.clone(),
    };
    let _proc = ProcMount::new(sh, &chroot)?;
    let id = package.id();
    let src = package.source_dir();
    // The tree is the image's source: leave it as it was, also after a
    // build killed half way (the first line).
    let clean = format!(
        "dkms remove {id} --all >/dev/null 2>&1 || true; rm -rf {src} /var/lib/dkms/{} /tmp/hmbt-dkms.tar",
        package.name
    );
    chroot.run(sh, &clean, 120)?;
    let inside = chroot.host_path(&src);
    std::fs::create_dir_all(&inside)?;
    copy_tree(kmod, &inside)?;
    let built = chroot.run(
        sh,
        &format!(
            "dkms add {id} >/dev/null && dkms build {id} -k {abi} >/dev/null && \
             dkms status {id} -k {abi} | grep -q ': built' && \
             tar -C /var/lib/dkms/{id} -cf /tmp/hmbt-dkms.tar {abi}"
        ),
        900,
    );
    if let Err(e) = built {
        let log = chroot.host_path(&format!("/var/lib/dkms/{id}/build/make.log"));
        let tail = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = tail.lines().rev().take(30).collect();
        let _ = chroot.run(sh, &clean, 120);
        bail!(
            "{e:#}\nDKMS build of {id} for {abi} failed; make.log ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    std::fs::copy(chroot.host_path("/tmp/hmbt-dkms.tar"), &tar)?;
    chroot.run(sh, &clean, 120)?;
    stamp.record()?;
    Ok(Prebuilt {
        package,
        tar,
        rebuilt: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_dkms_conf_names_the_package() {
        let p = DkmsPackage::read(&crate::workspace_root().join("kmod")).unwrap();
        assert_eq!(p.name, "nvme-hmb-trace");
        assert_eq!(p.source_dir(), format!("/usr/src/nvme-hmb-trace-{}", p.version));
    }

    #[test]
    fn bad_dkms_conf_values_are_refused() {
        assert!(parse_conf("PACKAGE_NAME=\"x\"\n").is_err());
        assert!(parse_conf("PACKAGE_NAME=\"x; rm -rf /\"\nPACKAGE_VERSION=1\n").is_err());
        let ok = parse_conf("PACKAGE_NAME=\"a-b\"\nPACKAGE_VERSION=\"0.1.0\"\n").unwrap();
        assert_eq!(ok.id(), "a-b/0.1.0");
    }
}
