//! A cached `debootstrap --variant=minbase` chroot of one Debian distribution
//! (trixie for the 7.x kernels). It keeps that distribution's libc, compiler
//! and kernel headers off the host.

use super::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

pub(crate) const MIRROR: &str = "http://deb.debian.org/debian";

/// Packages every chroot gets: enough to run kbuild for an external module.
const BUILD_PACKAGES: &[&str] = &["make", "gcc", "binutils", "libc6-dev", "xz-utils", "zstd", "kmod"];

/// Bump when the way the chroot is made changes, so old ones are rebuilt.
const RECIPE_VERSION: &str = "1";

pub struct Chroot {
    pub codename: String,
    pub root: PathBuf,
}

impl Chroot {
    pub(crate) fn at(cache: &Path, codename: &str) -> Chroot {
        Chroot {
            codename: codename.to_string(),
            root: cache.join(format!("{codename}-chroot")),
        }
    }

    fn stamp(&self) -> Stamp {
        let mut fp = Fingerprint::new();
        fp.add_str("recipe", RECIPE_VERSION)
            .add_str("codename", &self.codename)
            .add_str("mirror", MIRROR)
            .add_str("packages", &BUILD_PACKAGES.join(" "));
        Stamp::new(self.root.with_extension("stamp"), &fp)
    }

    /// Create the chroot unless an up-to-date one is cached. Returns true when it was built.
    pub(crate) fn ensure(&self, sh: &Shell) -> Result<bool> {
        let stamp = self.stamp();
        if stamp.is_fresh() && self.root.join("usr/bin/apt-get").exists() {
            return Ok(false);
        }
        stamp.invalidate()?;
        unmount_everything_under(sh, &self.root)?;
        let building = self.root.with_extension("tmp");
        unmount_everything_under(sh, &building)?;
        for dir in [&building, &self.root] {
            if dir.exists() {
                std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
            }
        }
        let codename = &self.codename;
        println!("    debootstrap --variant=minbase {codename} (a build chroot for kernels of {codename})");
        cmd!(
            sh,
            "timeout --foreground 900 debootstrap --variant=minbase {codename} {building} {MIRROR}"
        )
        .quiet()
        .run()
        .with_context(|| format!("debootstrap of {codename} failed (network? debian-archive-keyring too old?)"))?;
        let staged = Chroot {
            codename: codename.clone(),
            root: building.clone(),
        };
        std::fs::write(
            building.join("etc/apt/sources.list"),
            format!("deb {MIRROR} {codename} main\ndeb {MIRROR} {codename}-updates main\ndeb {MIRROR} {codename}-backports main\n"),
        )?;
        staged.run(sh, "apt-get -q update", 600)?;
        staged.apt_install(sh, None, BUILD_PACKAGES)?;
        std::fs::rename(&building, &self.root)?;
        stamp.record()?;
        Ok(true)
    }

    /// Run a shell script inside the chroot with a clean environment and a time limit.
    pub(crate) fn run(&self, sh: &Shell, script: &str, timeout_secs: u64) -> Result<()> {
        let root = &self.root;
        let secs = timeout_secs.to_string();
        cmd!(sh, "timeout --foreground {secs} chroot {root} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/sh -ec {script}")
            .quiet()
            .run()
            .with_context(|| format!("in the {} chroot: {script}", self.codename))
    }

    /// Like `run`, capturing stdout.
    pub(crate) fn read(&self, sh: &Shell, script: &str, timeout_secs: u64) -> Result<String> {
        let root = &self.root;
        let secs = timeout_secs.to_string();
        cmd!(sh, "timeout --foreground {secs} chroot {root} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 /bin/sh -ec {script}")
            .quiet()
            .read()
            .with_context(|| format!("in the {} chroot: {script}", self.codename))
    }

    pub(crate) fn apt_install(&self, sh: &Shell, target_release: Option<&str>, packages: &[&str]) -> Result<()> {
        let query = format!(
            "dpkg-query -W -f='${{Package}} ${{db:Status-Status}}\\n' {} 2>/dev/null || true",
            packages.join(" ")
        );
        let installed = self.read(sh, &query, 60)?;
        let missing: Vec<&str> = packages
            .iter()
            .copied()
            .filter(|p| !installed.lines().any(|l| l == format!("{p} installed")))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let release = target_release.map(|r| format!("-t {r} ")).unwrap_or_default();
        println!(
            "    {} chroot: apt-get install {release}{}",
            self.codename,
            missing.join(" ")
        );
        self.run(
            sh,
            &format!(
                "apt-get -q -y --no-install-recommends install {release}{}",
                missing.join(" ")
            ),
            1200,
        )
    }

    /// Host path of a path inside the chroot.
    pub(crate) fn host_path(&self, inside: &str) -> PathBuf {
        self.root.join(inside.trim_start_matches('/'))
    }
}

/// /proc mounted inside the chroot for as long as this guard lives (objtool needs it).
pub(crate) struct ProcMount {
    target: PathBuf,
}

impl ProcMount {
    pub(crate) fn new(sh: &Shell, chroot: &Chroot) -> Result<ProcMount> {
        let target = chroot.host_path("proc");
        if !is_mounted(&target)? {
            cmd!(sh, "mount -t proc proc {target}").quiet().run()?;
        }
        Ok(ProcMount { target })
    }
}

impl Drop for ProcMount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.target).status();
    }
}

fn mount_points() -> Result<Vec<PathBuf>> {
    let text = std::fs::read_to_string("/proc/self/mounts").context("reading /proc/self/mounts")?;
    // Field 2 is the mount point with spaces escaped as \040; our paths have none.
    Ok(text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(PathBuf::from)
        .collect())
}

fn is_mounted(path: &Path) -> Result<bool> {
    Ok(mount_points()?.iter().any(|m| m == path))
}

/// A killed run can leave /proc mounted inside; never `rm -rf` through a mount.
pub(crate) fn unmount_everything_under(sh: &Shell, root: &Path) -> Result<()> {
    let mut under: Vec<PathBuf> = mount_points()?.into_iter().filter(|m| m.starts_with(root)).collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for m in under {
        cmd!(sh, "umount {m}").quiet().run()?;
    }
    if mount_points()?.iter().any(|m| m.starts_with(root)) {
        bail!("{} still has mounts inside; refusing to delete it", root.display());
    }
    Ok(())
}
