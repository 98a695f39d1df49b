//! Host packages: install what is missing with apt, one line per package
//! saying why. Fast when all is present (one dpkg-query). Never adds a newer
//! distribution's sources to the host: kernels of another distribution are
//! handled in a chroot (see `host::chroot`), so the host libc is never replaced.

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

/// A host package and why the project needs it.
#[derive(Debug, Clone)]
pub struct Need {
    pub package: String,
    pub why: String,
    /// apt target release (`bookworm-backports`) when the package comes from backports.
    pub release: Option<String>,
}

impl Need {
    pub fn new(package: &str, why: &str) -> Need {
        Need {
            package: package.to_string(),
            why: why.to_string(),
            release: None,
        }
    }
}

/// What every guest run needs on the host.
pub fn base_needs() -> Vec<Need> {
    [
        ("qemu-system-x86", "QEMU 7.2: runs the guest kernels"),
        ("busybox-static", "static busybox: the guest's whole userland"),
        ("cpio", "packs the guest initramfs"),
        ("gzip", "compresses the guest initramfs"),
        ("xz-utils", "decompresses the guest kernel modules (.ko.xz)"),
        ("zstd", "decompresses .ko.zst guest modules"),
        ("kmod", "depmod/modinfo: guest module dependencies"),
        (
            "debootstrap",
            "builds the chroot used for kernels of another Debian release (7.x)",
        ),
        ("debian-archive-keyring", "verifies Debian archives in debootstrap"),
        ("make", "builds the kernel module"),
        ("binutils", "strips debug info from binaries put in the initramfs"),
        ("gcc", "builds the kernel module for bookworm kernels"),
        ("libc6-dev", "headers for the module's static test programs"),
    ]
    .iter()
    .map(|(p, w)| Need::new(p, w))
    .collect()
}

/// Packages of `needs` that dpkg does not report as installed.
pub fn missing(sh: &Shell, needs: &[Need]) -> Result<Vec<Need>> {
    if needs.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<&str> = needs.iter().map(|n| n.package.as_str()).collect();
    let format = "-f=${Package} ${db:Status-Status}\\n";
    // dpkg-query exits 1 when some package is unknown; its stdout still lists the known ones.
    let out = cmd!(sh, "dpkg-query -W {format} {names...}")
        .quiet()
        .ignore_stderr()
        .ignore_status()
        .read()?;
    Ok(needs
        .iter()
        .filter(|n| !out.lines().any(|l| l == format!("{} installed", n.package)))
        .cloned()
        .collect())
}

/// Install the missing ones, saying what and why for each.
pub fn ensure(sh: &Shell, needs: &[Need]) -> Result<()> {
    let todo = missing(sh, needs)?;
    if todo.is_empty() {
        return Ok(());
    }
    for n in &todo {
        let from = n.release.as_deref().map(|r| format!(" (from {r})")).unwrap_or_default();
        println!("    installing {}{from}: {}", n.package, n.why);
    }
    if !is_root() {
        let names: Vec<&str> = todo.iter().map(|n| n.package.as_str()).collect();
        bail!(
            "missing host packages; run as root or: sudo apt-get install {}",
            names.join(" ")
        );
    }
    cmd!(sh, "timeout --foreground 600 apt-get -q update")
        .quiet()
        .run()
        .context("apt-get update")?;
    let mut releases: Vec<Option<String>> = todo.iter().map(|n| n.release.clone()).collect();
    releases.dedup();
    for release in releases {
        let names: Vec<&str> = todo
            .iter()
            .filter(|n| n.release == release)
            .map(|n| n.package.as_str())
            .collect();
        let target: Vec<String> = release.iter().flat_map(|r| ["-t".to_string(), r.clone()]).collect();
        cmd!(
            sh,
            "timeout --foreground 1800 apt-get -q -y --no-install-recommends install {target...} {names...}"
        )
        .env("DEBIAN_FRONTEND", "noninteractive")
        .run()
        .context("apt-get install")?;
    }
    let still = missing(sh, needs)?;
    if !still.is_empty() {
        let names: Vec<&str> = still.iter().map(|n| n.package.as_str()).collect();
        bail!("still missing after apt-get install: {}", names.join(" "));
    }
    Ok(())
}

pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user.
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

/// Add `<codename>-backports` to the host's apt sources if it is not there
/// (backports are pinned at 100 by Debian: nothing is upgraded from them
/// unless asked for by name). Returns true when it was added.
pub fn ensure_backports_source(sh: &Shell, codename: &str) -> Result<bool> {
    let suite = format!("{codename}-backports");
    let mut texts = vec![std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default()];
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".list") || name.ends_with(".sources") {
                texts.push(std::fs::read_to_string(e.path()).unwrap_or_default());
            }
        }
    }
    let present = texts.iter().flat_map(|t| t.lines()).any(|l| {
        let l = l.trim();
        !l.starts_with('#') && l.split_whitespace().any(|w| w == suite)
    });
    if present {
        return Ok(false);
    }
    if !is_root() {
        bail!("apt has no {suite} source; as root: echo 'deb http://deb.debian.org/debian {suite} main' > /etc/apt/sources.list.d/{suite}.list");
    }
    println!("    adding apt source {suite}: 6.12 kernel headers and QEMU 10.0 come from it");
    std::fs::write(
        format!("/etc/apt/sources.list.d/hmb-trace-{suite}.list"),
        format!("deb http://deb.debian.org/debian {suite} main\n"),
    )?;
    cmd!(sh, "timeout --foreground 600 apt-get -q update")
        .quiet()
        .run()
        .context("apt-get update")?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn installed_and_unknown_packages_are_told_apart() {
        let sh = Shell::new().unwrap();
        let needs = vec![
            Need::new("dpkg", "present on every Debian"),
            Need::new("hmbt-no-such-package", "absent"),
        ];
        let todo = missing(&sh, &needs).unwrap();
        let names: Vec<&str> = todo.iter().map(|n| n.package.as_str()).collect();
        assert_eq!(names, ["hmbt-no-such-package"]);
    }
}
