//! The guest kernel matrix: parsing `images/KERNELS`.

use crate::host::apt_env::{host_codename, AptEnv};
use crate::host::chroot::Chroot;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where the module build finds `linux-headers-<ABI>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Headers {
    /// Installed on the host with apt (when the host runs the suite's distribution).
    Host,
    /// Installed inside a cached debootstrap chroot of the suite's distribution.
    Chroot,
}

/// One line of `images/KERNELS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSpec {
    /// What the user types after `--kernel`, e.g. `6.1`.
    pub name: String,
    /// Debian suite, e.g. `bookworm` or `trixie-backports`.
    pub suite: String,
    /// Image package, usually the meta package `linux-image-amd64`.
    pub image_package: String,
    pub headers: Headers,
    /// A debug kernel (`6.12-debug`): built by `images::debug_kernel` from
    /// the source of the Debian kernel named without the suffix, not fetched.
    pub debug: bool,
}

/// `6.12-debug` is the debug kernel built from the source of `6.12`
/// (docs/debug-checks.md); accepted for a kernel with an
/// images/debug-<name>.config.
pub(crate) const DEBUG_SUFFIX: &str = "-debug";

impl KernelSpec {
    /// The Debian kernel's name: `6.12` for both `6.12` and `6.12-debug`
    /// (the source, the patch series and the apt environment are its).
    pub(crate) fn debian_name(&self) -> &str {
        match self.debug {
            true => self.name.strip_suffix(DEBUG_SUFFIX).unwrap_or(&self.name),
            false => &self.name,
        }
    }

    /// The Debian kernel this spec is, or is built from.
    pub fn debian(&self) -> KernelSpec {
        KernelSpec {
            name: self.debian_name().to_string(),
            debug: false,
            ..self.clone()
        }
    }

    /// The distribution codename: `trixie` for `trixie-backports`.
    pub(crate) fn codename(&self) -> &str {
        self.suite.split('-').next().unwrap_or(&self.suite)
    }

    /// Backports are pinned at 100 by Debian, so apt must be told to target them.
    pub(crate) fn apt_target_release(&self) -> Option<&str> {
        if self.suite == self.codename() {
            None
        } else {
            Some(&self.suite)
        }
    }

    /// Where apt runs for this kernel: the host when the spec allows it and
    /// the host is of the same distribution, else that distribution's chroot.
    pub(crate) fn apt_env(&self, cache: &Path) -> AptEnv {
        if self.headers == Headers::Host && host_codename().as_deref() == Some(self.codename()) {
            AptEnv::Host
        } else {
            AptEnv::Chroot(Chroot::at(cache, self.codename()))
        }
    }
}

pub(crate) fn parse(text: &str) -> Result<Vec<KernelSpec>> {
    let mut specs: Vec<KernelSpec> = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let lineno = index + 1;
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [name, suite, image_package, headers] = fields[..] else {
            bail!(
                "KERNELS line {lineno}: expected 4 fields (name suite image-package headers), got {}: {raw:?}",
                fields.len()
            );
        };
        let headers = match headers {
            "host" => Headers::Host,
            "chroot" => Headers::Chroot,
            other => bail!("KERNELS line {lineno}: headers must be `host` or `chroot`, got {other:?}"),
        };
        if !image_package.starts_with("linux-image-") {
            bail!("KERNELS line {lineno}: {image_package:?} is not a linux-image-* package");
        }
        if !suite.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
            bail!("KERNELS line {lineno}: suspicious suite name {suite:?}");
        }
        if specs.iter().any(|s| s.name == name) {
            bail!("KERNELS line {lineno}: kernel name {name:?} listed twice");
        }
        specs.push(KernelSpec {
            name: name.to_string(),
            suite: suite.to_string(),
            image_package: image_package.to_string(),
            headers,
            debug: false,
        });
    }
    if specs.is_empty() {
        bail!("KERNELS lists no kernel");
    }
    Ok(specs)
}

pub fn load(path: &Path) -> Result<Vec<KernelSpec>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&text).with_context(|| format!("in {}", path.display()))
}

/// The spec named `name`, or the first (default) one when `name` is None.
/// `images/debug-<debian>.config`: the fragment for `<debian>-debug`
/// (`images::debug_kernel` builds with it).
pub fn fragment_path(debian: &str) -> PathBuf {
    crate::host::workspace_root()
        .join("images")
        .join(format!("debug-{debian}.config"))
}

/// `<name>-debug` is the debug kernel of a listed kernel that has a config
/// fragment (`images/debug-<name>.config`).
pub fn select(specs: &[KernelSpec], name: Option<&str>) -> Result<KernelSpec> {
    let Some(n) = name else {
        return Ok(specs[0].clone());
    };
    if let Some(spec) = specs.iter().find(|s| s.name == n) {
        return Ok(spec.clone());
    }
    let debug = n.strip_suffix(DEBUG_SUFFIX).and_then(|base| {
        let spec = specs.iter().find(|s| s.name == base)?;
        fragment_path(base).is_file().then(|| KernelSpec {
            name: n.to_string(),
            debug: true,
            ..spec.clone()
        })
    });
    debug.with_context(|| {
        let mut known: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        known.extend(
            specs
                .iter()
                .filter(|s| fragment_path(&s.name).is_file())
                .map(|s| format!("{}{DEBUG_SUFFIX}", s.name)),
        );
        format!(
            "unknown kernel {n:?}; images/KERNELS has: {} (a -debug kernel needs images/debug-<name>.config)",
            known.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_repository_matrix() {
        let specs = load(&crate::workspace_root().join("images/KERNELS")).unwrap();
        let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"6.1") && names.contains(&"6.12") && names.contains(&"7.x"));
        assert_eq!(select(&specs, None).unwrap().name, specs[0].name);
    }

    #[test]
    fn a_debug_kernel_is_its_debian_kernel_built_with_checks() {
        let specs = load(&crate::workspace_root().join("images/KERNELS")).unwrap();
        let debug = select(&specs, Some("6.12-debug")).unwrap();
        assert!(debug.debug);
        assert_eq!(debug.debian_name(), "6.12");
        assert_eq!(debug.debian(), select(&specs, Some("6.12")).unwrap());
        // No fragment, no debug kernel; the error names the ones there are.
        let err = select(&specs, Some("6.1-debug")).unwrap_err().to_string();
        assert!(err.contains("6.12-debug"), "{err}");
        assert!(select(&specs, Some("nosuch-debug")).is_err());
    }

    #[test]
    fn backports_need_a_target_release_and_the_base_suite_does_not() {
        let specs = parse("a bookworm linux-image-amd64 host\nb trixie-backports linux-image-amd64 chroot\n").unwrap();
        assert_eq!(specs[0].apt_target_release(), None);
        assert_eq!(specs[1].apt_target_release(), Some("trixie-backports"));
        assert_eq!(specs[1].codename(), "trixie");
        assert_eq!(specs[1].headers, Headers::Chroot);
    }

    #[test]
    fn rejects_bad_lines() {
        assert!(parse("").is_err());
        assert!(parse("6.1 bookworm linux-image-amd64").is_err());
        assert!(parse("6.1 bookworm linux-image-amd64 somewhere").is_err());
        assert!(parse("6.1 bookworm nginx host").is_err());
        assert!(parse("6.1 bookworm linux-image-amd64 host\n6.1 bookworm linux-image-amd64 host").is_err());
        let err = select(&parse("6.1 bookworm linux-image-amd64 host").unwrap(), Some("9.9")).unwrap_err();
        assert!(err.to_string().contains("6.1"), "{err}");
    }
}
