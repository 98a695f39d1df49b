//! QEMU 11.1 from trixie-backports, for `vfio-user-pci` (QEMU 10.0 has
//! none): installed with apt INTO the cached trixie chroot that the 7.x
//! kernels already use (the host's apt never sees trixie), and run from
//! the host with the chroot's own dynamic loader and libraries, so every
//! host path (kernel, initramfs, sockets, 9p share, console log) works
//! as it is, without bind mounts.
//!
//! The run goes through a small wrapper script in the cache:
//! `<chroot>/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --inhibit-cache
//! --library-path <chroot libs> <chroot>/usr/bin/qemu-system-x86_64 "$@"`,
//! with `-L` pointing at the chroot's firmware and QEMU_MODULE_DIR at its
//! modules (TCG is a module in Debian's build). The install is stamped with
//! the candidate version, like the kernels: a warm run costs one stat.

use super::version::QemuBinary;
use crate::host::apt_env::AptEnv;
use crate::host::chroot::Chroot;
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use xshell::Shell;

pub(crate) const SUITE: &str = "trixie-backports";
const CODENAME: &str = "trixie";
/// What apt installs in the chroot (seabios and the data package carry
/// the firmware; the rest comes as their dependencies).
const PACKAGES: &[&str] = &["qemu-system-x86", "qemu-system-data", "seabios"];
/// Bump when the way QEMU is installed or wrapped changes.
const RECIPE: &str = "1";
const LIB_DIR: &str = "usr/lib/x86_64-linux-gnu";

/// Where the wrapper and the stamps live.
fn dir(cache: &Path) -> PathBuf {
    cache.join("qemu-11.1")
}

/// QEMU 11.1 ready to run (installing it the first time; takes the cache lock).
pub(crate) fn ensure(sh: &Shell) -> Result<QemuBinary> {
    let cache = crate::host::cache_dir();
    let _lock = crate::host::lock_cache(&cache)?;
    ensure_locked(sh, &cache)
}

/// Like `ensure`, for callers that already hold the cache lock.
pub fn ensure_locked(sh: &Shell, cache: &Path) -> Result<QemuBinary> {
    let chroot = Chroot::at(cache, CODENAME);
    let dir = dir(cache);
    std::fs::create_dir_all(&dir)?;
    let wrapper = dir.join("qemu-system-x86_64");
    if chroot.ensure(sh)? {
        println!("    built {}", chroot.root.display());
    }
    let env = AptEnv::Chroot(Chroot::at(cache, CODENAME));
    // Warm path: the chroot's apt state is unchanged since the install.
    let mut state = env.apt_state()?;
    state.add_str("recipe", RECIPE);
    let quick = Stamp::new(dir.join("apt-state.stamp"), &state);
    if quick.is_fresh() && wrapper.exists() && chroot.host_path("usr/bin/qemu-system-x86_64").exists() {
        return Ok(binary(&chroot, &wrapper));
    }
    env.refresh_if_stale(sh, std::time::Duration::from_secs(7 * 86400))?;
    let candidate = env.candidate(sh, Some(SUITE), "qemu-system-x86")?;
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", RECIPE).add_str("qemu-system-x86", &candidate);
    let stamp = Stamp::new(dir.join("installed.stamp"), &fp);
    if !(stamp.is_fresh() && chroot.host_path("usr/bin/qemu-system-x86_64").exists()) {
        stamp.invalidate()?;
        println!(
            "    trixie chroot: apt-get install -t {SUITE} {} ({candidate}: vfio-user-pci for the NVMe controller)",
            PACKAGES.join(" ")
        );
        chroot.run(
            sh,
            &format!(
                "apt-get -q -y --no-install-recommends install -t {SUITE} {}",
                PACKAGES.join(" ")
            ),
            1800,
        )?;
        let installed = chroot.read(sh, "dpkg-query -W -f='${Version}' qemu-system-x86", 60)?;
        anyhow::ensure!(
            installed.trim() == candidate,
            "the chroot has qemu-system-x86 {installed}, wanted {candidate}"
        );
        stamp.record()?;
    }
    std::fs::write(&wrapper, wrapper_script(&chroot.root)).with_context(|| format!("writing {}", wrapper.display()))?;
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    quick.record()?;
    Ok(binary(&chroot, &wrapper))
}

/// The script that runs the chroot's QEMU with the chroot's loader.
pub(crate) fn wrapper_script(root: &Path) -> String {
    let r = root.display();
    format!(
        "#!/bin/sh\n# Written by xtask (qemu/chroot_qemu.rs): QEMU 11.1 of the trixie chroot, run with\n# the chroot's loader and libraries so that host paths work unchanged.\nexec {r}/{LIB_DIR}/ld-linux-x86-64.so.2 --inhibit-cache --library-path {r}/{LIB_DIR}:{r}/{LIB_DIR}/qemu --argv0 qemu-system-x86_64 {r}/usr/bin/qemu-system-x86_64 \"$@\"\n"
    )
}

fn binary(chroot: &Chroot, wrapper: &Path) -> QemuBinary {
    QemuBinary {
        path: wrapper.to_path_buf(),
        // The wrapper script is the launcher (one file to rerun by hand).
        launcher: Vec::new(),
        firmware_dirs: vec![
            chroot.host_path("usr/share/qemu"),
            chroot.host_path("usr/share/seabios"),
        ],
        env: vec![(
            "QEMU_MODULE_DIR".to_string(),
            chroot
                .host_path(&format!("{LIB_DIR}/qemu"))
                .to_string_lossy()
                .into_owned(),
        )],
        version: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrapper_runs_the_chroot_binary_with_its_own_loader() {
        let s = wrapper_script(Path::new("/c/trixie-chroot"));
        assert!(s.starts_with("#!/bin/sh\n"));
        let exec = s.lines().last().unwrap();
        assert!(exec.starts_with("exec /c/trixie-chroot/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --inhibit-cache"));
        assert!(exec.contains("--library-path /c/trixie-chroot/usr/lib/x86_64-linux-gnu:"));
        assert!(exec.ends_with("/c/trixie-chroot/usr/bin/qemu-system-x86_64 \"$@\""));
    }
}
