//! Which QEMU runs the guest: bookworm's 7.2 (/usr/bin, installed by `deps`)
//! or bookworm-backports' 10.0, unpacked into the cache next to it (never
//! installed: the system binary stays 7.2) and run with `-L` for its firmware
//! and QEMU_MODULE_DIR for its modules; or trixie-backports' 11.1 (the one
//! with vfio-user-pci), installed in the trixie chroot (chroot_qemu.rs).

use crate::host::apt::{self, Need};
use crate::host::apt_env::{host_codename, AptEnv};
use crate::host::cache_dir;
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;
use xshell::{cmd, Shell};

pub use super::version::{QemuBinary, QemuVersion};

const BACKPORTS: &str = "bookworm-backports";
/// The 10.0 packages unpacked into the cache; their other Depends are host libraries.
const UNPACKED: &[&str] = &["qemu-system-x86", "qemu-system-common", "qemu-system-data", "seabios"];

pub fn ensure(sh: &Shell, which: QemuVersion) -> Result<QemuBinary> {
    let binary = match which {
        QemuVersion::V7_2 => match installed_7_2() {
            Some(binary) => binary,
            None => ensure_unpacked(sh, QemuVersion::V7_2)?,
        },
        QemuVersion::V10_0 => ensure_unpacked(sh, QemuVersion::V10_0)?,
        QemuVersion::V11_1 => super::chroot_qemu::ensure(sh)?,
    };
    let path = &binary.path;
    let output = binary
        .command()
        .arg("-version")
        .output()
        .with_context(|| format!("{} does not run", path.display()))?;
    if !output.status.success() {
        bail!(
            "{} -version failed ({}): {}",
            path.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let version = String::from_utf8_lossy(&output.stdout);
    let first = version.lines().next().unwrap_or_default().to_string();
    let want = match which {
        QemuVersion::V7_2 => "version 7.2",
        QemuVersion::V10_0 => "version 10.0",
        QemuVersion::V11_1 => "version 11.1",
    };
    if !first.contains(want) {
        bail!("{} reports {first:?}, expected {want}", path.display());
    }
    Ok(QemuBinary {
        version: first,
        ..binary
    })
}

/// The host's own QEMU when it is bookworm's 7.2: what the user installed
/// is used as it is.
fn installed_7_2() -> Option<QemuBinary> {
    let path = PathBuf::from("/usr/bin/qemu-system-x86_64");
    let out = Command::new(&path).arg("-version").output().ok()?;
    let first = String::from_utf8_lossy(&out.stdout).lines().next()?.to_string();
    (out.status.success() && first.contains("version 7.2")).then(|| QemuBinary::at(path))
}

/// QEMU's packages unpacked into the cache (`dpkg-deb -x`), never
/// installed: installing bookworm's qemu-system-x86 7.2 on a host that has
/// bookworm-backports' qemu-utils 10.0 makes apt remove qemu-utils, and a
/// set-up must not remove what the user has. Only the runtime libraries are
/// installed (through `apt::ensure`, which refuses removals and downgrades).
/// 7.2 comes from the host's own suite, 10.0 from bookworm-backports.
fn ensure_unpacked(sh: &Shell, which: QemuVersion) -> Result<QemuBinary> {
    if host_codename().as_deref() != Some("bookworm") {
        bail!(
            "QEMU {} is taken from Debian bookworm{} and needs a bookworm host; install QEMU 7.2 as /usr/bin/qemu-system-x86_64 yourself",
            which.name(),
            if which == QemuVersion::V10_0 { "-backports" } else { "" }
        );
    }
    let release = match which {
        QemuVersion::V10_0 => {
            apt::ensure_backports_source(sh, "bookworm")?;
            BACKPORTS
        }
        _ => "bookworm",
    };
    let env = AptEnv::Host;
    let dir = cache_dir().join(format!("qemu-{}", which.name()));
    let root = dir.join("root");
    // Warm path: apt's state is unchanged since the last unpack, so are the candidates.
    let mut state = env.apt_state()?;
    state.add_str("recipe", "2");
    let quick = Stamp::new(dir.join("apt-state.stamp"), &state);
    if quick.is_fresh() && root.join("usr/bin/qemu-system-x86_64").exists() {
        return Ok(unpacked_binary(&root));
    }
    let suite = release;
    let release = Some(release);
    let mut packages = Vec::new();
    let mut libraries = Vec::new();
    // Each package at the version its release offers, not apt's
    // candidate (which is whatever newer version the host has installed).
    for p in UNPACKED {
        packages.push((p.to_string(), env.version_in_release(sh, suite, p)?));
    }
    for (p, version) in &packages[..2] {
        for dep in env.depends(sh, release, &format!("{p}={version}"))? {
            if !UNPACKED.contains(&dep.as_str()) && !dep.starts_with("qemu-") && !dep.starts_with("ipxe") {
                libraries.push(Need::new(
                    &dep,
                    &format!("runtime library of the cached QEMU {}", which.name()),
                ));
            }
        }
    }
    libraries.sort_by(|a, b| a.package.cmp(&b.package));
    libraries.dedup_by(|a, b| a.package == b.package);
    apt::ensure(sh, &libraries)?;

    let mut fp = Fingerprint::new();
    fp.add_str("recipe", "2");
    for (p, v) in &packages {
        fp.add_str(p, v);
    }
    let stamp = Stamp::new(dir.join("unpacked.stamp"), &fp);
    if !(stamp.is_fresh() && root.join("usr/bin/qemu-system-x86_64").exists()) {
        stamp.invalidate()?;
        let debs = dir.join("debs");
        for d in [&debs, &root] {
            if d.exists() {
                std::fs::remove_dir_all(d)?;
            }
        }
        println!(
            "    apt-get download (host, {}): {} (unpacked into {}, not installed)",
            suite,
            UNPACKED.join(" "),
            root.display()
        );
        env.download(sh, &packages, &debs)?;
        for entry in std::fs::read_dir(&debs)? {
            let deb = entry?.path();
            cmd!(sh, "timeout --foreground 300 dpkg-deb -x {deb} {root}")
                .quiet()
                .run()?;
        }
        std::fs::remove_dir_all(&debs)?;
        stamp.record()?;
    }
    quick.record()?;
    Ok(unpacked_binary(&root))
}

fn unpacked_binary(root: &std::path::Path) -> QemuBinary {
    QemuBinary {
        path: root.join("usr/bin/qemu-system-x86_64"),
        launcher: Vec::new(),
        firmware_dirs: vec![root.join("usr/share/qemu"), root.join("usr/share/seabios")],
        env: vec![(
            "QEMU_MODULE_DIR".to_string(),
            root.join("usr/lib/x86_64-linux-gnu/qemu")
                .to_string_lossy()
                .into_owned(),
        )],
        version: String::new(),
    }
}
