//! Where apt runs for one kernel: on the host (when the host runs the
//! kernel's distribution) or in that distribution's cached chroot.

use super::chroot::Chroot;
use super::stamp::Fingerprint;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;
use xshell::{cmd, Shell};

pub enum AptEnv {
    Host,
    Chroot(Chroot),
}

/// The host's Debian/Ubuntu codename, from /etc/os-release.
pub(crate) fn host_codename() -> Option<String> {
    let text = std::fs::read_to_string("/etc/os-release").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("VERSION_CODENAME="))
        .map(|v| v.trim_matches('"').to_string())
}

impl AptEnv {
    /// `apt-get update` when the package lists are older than `max_age` (or
    /// missing): a mirror drops superseded kernels, so week-old lists may name
    /// packages that can no longer be downloaded. Returns true when it updated.
    pub(crate) fn refresh_if_stale(&self, sh: &Shell, max_age: Duration) -> Result<bool> {
        let lists = match self {
            AptEnv::Host => PathBuf::from("/var/lib/apt/lists"),
            AptEnv::Chroot(c) => c.host_path("var/lib/apt/lists"),
        };
        let newest = std::fs::read_dir(&lists)
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_name().to_string_lossy().ends_with("Release"))
                    .filter_map(|e| e.metadata().ok()?.modified().ok())
                    .max()
            })
            .unwrap_or(None);
        let fresh = newest.and_then(|t| t.elapsed().ok()).is_some_and(|age| age < max_age);
        if fresh {
            return Ok(false);
        }
        println!(
            "    apt-get update ({}): package lists older than {} days",
            self.describe(),
            max_age.as_secs() / 86400
        );
        match self {
            AptEnv::Host => {
                if !is_root() {
                    return Ok(false);
                }
                cmd!(sh, "timeout --foreground 600 apt-get -q update")
                    .quiet()
                    .run()
                    .context("apt-get update")?;
            }
            AptEnv::Chroot(c) => c.run(sh, "apt-get -q update", 600)?,
        }
        Ok(true)
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            AptEnv::Host => "host".to_string(),
            AptEnv::Chroot(c) => format!("{}-chroot", c.codename),
        }
    }

    /// Fingerprint of what apt answers from: its package lists (names,
    /// sizes, mtimes) and its configuration (sources, pins).
    pub(crate) fn apt_state(&self) -> Result<Fingerprint> {
        let base = match self {
            AptEnv::Host => PathBuf::from("/"),
            AptEnv::Chroot(c) => c.root.clone(),
        };
        let mut fp = Fingerprint::new();
        let lists = base.join("var/lib/apt/lists");
        let mut entries: Vec<_> = std::fs::read_dir(&lists)
            .with_context(|| format!("listing {}", lists.display()))?
            .filter_map(|e| e.ok())
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let meta = e.metadata()?;
            if meta.is_file() {
                let mtime = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                fp.add_str(&e.file_name().to_string_lossy(), &format!("{} {:?}", meta.len(), mtime));
            }
        }
        let etc = base.join("etc/apt");
        fp.add_file("sources.list", &etc.join("sources.list"))?;
        for dir in ["sources.list.d", "preferences.d"] {
            fp.add_tree(dir, &etc.join(dir), &|_| false)?;
        }
        fp.add_file("preferences", &etc.join("preferences"))?;
        Ok(fp)
    }

    /// Run a read-only apt query (apt-cache ...) and capture its output.
    pub(crate) fn query(&self, sh: &Shell, args: &str) -> Result<String> {
        match self {
            AptEnv::Host => {
                let argv: Vec<&str> = args.split_whitespace().collect();
                cmd!(sh, "timeout --foreground 120 {argv...}")
                    .quiet()
                    .read()
                    .with_context(|| format!("host: {args}"))
            }
            AptEnv::Chroot(c) => c.read(sh, args, 120),
        }
    }

    /// `apt-cache policy` candidate version of a package, honouring the target release.
    pub(crate) fn candidate(&self, sh: &Shell, target_release: Option<&str>, package: &str) -> Result<String> {
        let release = target_release.map(|r| format!("-t {r} ")).unwrap_or_default();
        let out = self.query(sh, &format!("apt-cache {release}policy {package}"))?;
        match out.lines().find_map(|l| l.trim().strip_prefix("Candidate:")).map(str::trim) {
            Some(v) if v != "(none)" => Ok(v.to_string()),
            _ => bail!(
                "apt ({}) has no candidate for {package}{}; is the suite in the apt sources and `apt-get update` done? (`cargo xtask deps` does both)",
                self.describe(),
                target_release.map(|r| format!(" from {r}")).unwrap_or_default()
            ),
        }
    }

    /// The newest version of `package` that `release` itself offers
    /// (`apt-cache madison`): for `bookworm` its point releases, security
    /// and updates, never backports. Unlike the policy's candidate it does
    /// not depend on what is installed: apt never picks a downgrade, so on a
    /// host with backports' qemu-system-common 10.0 (pulled in by
    /// qemu-system-arm) the candidate of qemu-system-common "from bookworm"
    /// is 10.0, and a QEMU 7.2 unpacked with it cannot load its TCG module.
    pub(crate) fn version_in_release(&self, sh: &Shell, release: &str, package: &str) -> Result<String> {
        let out = self.query(sh, &format!("apt-cache madison {package}"))?;
        newest_in_release(&out, release).with_context(|| {
            format!(
                "apt ({}) offers no {package} from {release}; is the suite in the apt sources and `apt-get update` done? (`cargo xtask deps` does both)",
                self.describe()
            )
        })
    }

    /// Direct `Depends:` of a package (alternatives and virtual packages left out).
    pub(crate) fn depends(&self, sh: &Shell, target_release: Option<&str>, package: &str) -> Result<Vec<String>> {
        let release = target_release.map(|r| format!("-t {r} ")).unwrap_or_default();
        let out = self.query(sh, &format!("apt-cache {release}depends {package}"))?;
        Ok(parse_depends(&out))
    }

    /// `apt-get download pkg=version ...` into `dest` (a host directory).
    pub(crate) fn download(&self, sh: &Shell, packages: &[(String, String)], dest: &Path) -> Result<()> {
        let pins: Vec<String> = packages.iter().map(|(p, v)| format!("{p}={v}")).collect();
        std::fs::create_dir_all(dest)?;
        match self {
            AptEnv::Host => {
                let _dir = sh.push_dir(dest);
                cmd!(
                    sh,
                    "timeout --foreground 900 apt-get -q -o APT::Sandbox::User=root download {pins...}"
                )
                .quiet()
                .run()
                .context("apt-get download")?;
            }
            AptEnv::Chroot(c) => {
                let inside = "/var/tmp/hmbt-download";
                let staging = c.host_path(inside);
                if staging.exists() {
                    std::fs::remove_dir_all(&staging)?;
                }
                std::fs::create_dir_all(&staging)?;
                c.run(
                    sh,
                    &format!(
                        "cd {inside} && apt-get -q -o APT::Sandbox::User=root download {}",
                        pins.join(" ")
                    ),
                    900,
                )?;
                for entry in std::fs::read_dir(&staging)? {
                    let entry = entry?;
                    std::fs::rename(entry.path(), dest.join(entry.file_name()))?;
                }
                std::fs::remove_dir_all(&staging)?;
            }
        }
        Ok(())
    }
}

/// The first (madison lists the newest first) version whose suite is
/// `release` or one of its own updates (`release-security`,
/// `release-updates`, `release-proposed-updates`), not `release-backports`.
fn newest_in_release(madison: &str, release: &str) -> Option<String> {
    let same_release = |suite: &str| {
        suite == release
            || suite
                .strip_prefix(release)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|kind| matches!(kind, "security" | "updates" | "proposed-updates"))
    };
    madison.lines().find_map(|line| {
        let mut fields = line.split('|').map(str::trim);
        let (_, version, source) = (fields.next()?, fields.next()?, fields.next()?);
        let suite = source.split_whitespace().nth(1)?.split('/').next()?;
        same_release(suite).then(|| version.to_string())
    })
}

fn parse_depends(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|l| l.trim_start().strip_prefix("Depends: "))
        .filter(|name| !name.starts_with('<'))
        .map(|name| name.trim().to_string())
        .collect()
}

/// The process runs as root (apt needs no sudo).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective user.
    std::fs::metadata("/proc/self").map(|m| m.uid() == 0).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_version_is_taken_not_backports_or_the_installed_one() {
        let madison = "qemu-system-common | 1:10.0.2+ds-2+deb13u1~bpo12+1 | http://deb.debian.org/debian bookworm-backports/main amd64 Packages\n\
qemu-system-common | 1:7.2+dfsg-7+deb12u18+b3 | http://deb.debian.org/debian bookworm/main amd64 Packages\n\
qemu-system-common | 1:7.2+dfsg-7+deb12u15 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages\n";
        assert_eq!(
            newest_in_release(madison, "bookworm").as_deref(),
            Some("1:7.2+dfsg-7+deb12u18+b3")
        );
        assert_eq!(
            newest_in_release(madison, "bookworm-backports").as_deref(),
            Some("1:10.0.2+ds-2+deb13u1~bpo12+1")
        );
        let security_newer = "   qemu-system-x86 | 1:7.2+dfsg-7+deb12u19 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages\n\
   qemu-system-x86 | 1:7.2+dfsg-7+deb12u18 | http://deb.debian.org/debian bookworm/main amd64 Packages\n";
        assert_eq!(
            newest_in_release(security_newer, "bookworm").as_deref(),
            Some("1:7.2+dfsg-7+deb12u19")
        );
        assert_eq!(newest_in_release(madison, "trixie"), None);
        assert_eq!(newest_in_release("", "bookworm"), None);
    }

    #[test]
    fn depends_skip_alternatives_and_virtuals() {
        let out = "linux-image-7.3.4+deb13-amd64\n  PreDepends: linux-base\n |Depends: dracut\n  Depends: <linux-initramfs-tool>\n    dracut\n  Depends: linux-binary-7.3.4+deb13-amd64\n  Recommends: apparmor\n";
        assert_eq!(parse_depends(out), vec!["linux-binary-7.3.4+deb13-amd64".to_string()]);
    }
}
