//! The release binaries a guest run builds on the host: emu-device, the
//! other host tools the run asks for (the analyzer), and the statically
//! linked daemon that goes into the guest's initramfs.
//!
//! Issue #34 (a newcomer's first `cargo xtask boot`): these used to be
//! three cargo invocations one after another, and the static daemon a
//! build of its own for `--target x86_64-unknown-linux-gnu` (so its
//! RUSTFLAGS would not invalidate the host build), which compiled all 57
//! of its crates again. Now:
//!
//! * one `cargo build --release` builds emu-device and the daemon's
//!   library with every dependency, so cargo's jobs overlap them and a
//!   dependency they share is compiled once; a tool (the analyzer) is
//!   built on its own, the same selection on every boot, with the same
//!   dependency features (host-features/Cargo.toml; `build_host_binaries`
//!   says why);
//! * the static daemon is then `cargo rustc` of the daemon's binary alone
//!   with `-C target-feature=+crt-static`: the flag reaches only the
//!   binary's own crate (std comes prebuilt for both), so the library and
//!   dependencies the host build just made are reused and what is left is
//!   `main.rs` and the link. The binary lands in `target/release`, where a
//!   later host build of the daemon relinks it dynamically, so it is
//!   checked to be static (no ELF interpreter) and kept under
//!   `target/hmb-trace/static-daemon/` (copied only when it changed: the
//!   initramfs's stamp takes large files by size and mtime), where
//!   images/initramfs-files takes it;
//! * a tool needed only after the guest (the nvme boot's analyzer) can be
//!   built beside the guest instead of before it (`BackgroundBuild`).
//!
//! See docs/performance.md, "A newcomer's first boot".

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{bail, ensure, Context, Result};
use xshell::{cmd, Shell};

use crate::host::{target_dir, workspace_root};

/// The guest's daemon: package and binary name.
const DAEMON: &str = "hmb-trace-daemon";
/// emu-device's package and binary name.
const EMU_DEVICE_PACKAGE: &str = "hmb-emu-device";
const EMU_DEVICE_BIN: &str = "emu-device";

/// Where the static daemon is kept for the initramfs (images/initramfs-files).
pub fn static_daemon_path() -> PathBuf {
    target_dir().join("hmb-trace/static-daemon").join(DAEMON)
}

/// The arguments of the host build: emu-device and the daemon's library.
/// `--lib` builds the libraries of both packages (emu-device's binary
/// needs its own anyway); the daemon's binary is left to
/// `build_static_daemon` (built here it would be linked dynamically, and
/// the two links would undo each other on every run).
fn host_build_args() -> Vec<String> {
    [
        "build",
        "--release",
        "--quiet",
        "-p",
        EMU_DEVICE_PACKAGE,
        "--bin",
        EMU_DEVICE_BIN,
        "-p",
        DAEMON,
        "--lib",
    ]
    .map(String::from)
    .to_vec()
}

/// The arguments of a build of `tools` (workspace packages whose binary
/// has the package's name) on their own.
fn tools_build_args(tools: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["build", "--release", "--quiet"].map(String::from).to_vec();
    for tool in tools {
        args.extend(["-p", tool, "--bin", tool].map(String::from));
    }
    args
}

/// `cargo build --release` of emu-device and the daemon's library (with
/// all their dependencies) in one invocation, then of `tools` in
/// another. Returns emu-device's path; the tools are
/// `target/release/<name>`.
///
/// Cargo resolves features over the packages one invocation names, so
/// the two invocations (and the static daemon's `cargo rustc`) would
/// build shared crates with different features (zerocopy's "simd",
/// serde's "rc", syn's "extra-traits", ...), each crate above them
/// twice: emu-device, the daemon and the analyzer depend on
/// `hmb-host-features`, whose manifest enables the union, so every
/// invocation reuses the first one's dependencies (a test below checks
/// that `cargo tree` resolves the same features for each). The tools
/// stay in an invocation of their own, the same selection as the nvme
/// boot's background build of the analyzer (`spawn_release_build`).
pub fn build_host_binaries(sh: &Shell, tools: &[&str]) -> Result<PathBuf> {
    let _dir = sh.push_dir(workspace_root());
    let args = host_build_args();
    cmd!(sh, "cargo {args...}")
        .run()
        .context("building emu-device and the daemon's library")?;
    if !tools.is_empty() {
        let args = tools_build_args(tools);
        cmd!(sh, "cargo {args...}")
            .run()
            .with_context(|| format!("building {}", tools.join(", ")))?;
    }
    Ok(target_dir().join("release").join(EMU_DEVICE_BIN))
}

/// The statically linked daemon for the initramfs (glibc crt-static: the
/// initramfs has no libc), from the host release build's dependencies;
/// returns where it is kept (`static_daemon_path`).
pub fn build_static_daemon(sh: &Shell) -> Result<PathBuf> {
    let _dir = sh.push_dir(workspace_root());
    cmd!(
        sh,
        "cargo rustc --release --quiet -p {DAEMON} --bin {DAEMON} -- -C target-feature=+crt-static"
    )
    .run()
    .context("building the static daemon")?;
    let built = target_dir().join("release").join(DAEMON);
    let bytes = std::fs::read(&built).with_context(|| format!("cargo built no {}", built.display()))?;
    if let Some(interpreter) = elf_interpreter(&bytes).with_context(|| format!("reading {}", built.display()))? {
        bail!(
            "{} asks for the program interpreter {interpreter}: it is not statically linked, and the initramfs has no libc",
            built.display()
        );
    }
    let kept = static_daemon_path();
    if std::fs::read(&kept).ok().as_deref() != Some(bytes.as_slice()) {
        let dir = kept.parent().context("static daemon path has no parent")?;
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        // Through a temporary name: a run reading the old file never sees half of the new one.
        let tmp = dir.join(format!(".{DAEMON}.tmp"));
        std::fs::write(&tmp, &bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::metadata(&built)?.permissions())?;
        std::fs::rename(&tmp, &kept).with_context(|| format!("renaming to {}", kept.display()))?;
    }
    Ok(kept)
}

/// The program interpreter (PT_INTERP) a 64-bit little-endian ELF file
/// asks for, `None` when it has none (statically linked, static-pie
/// included). Not an ELF64 LE file, or cut short: an error.
fn elf_interpreter(elf: &[u8]) -> Result<Option<String>> {
    const PT_INTERP: u32 = 3;
    ensure!(elf.get(..4) == Some(b"\x7fELF".as_slice()), "not an ELF file");
    ensure!(
        elf.get(4..6) == Some([2u8, 1].as_slice()),
        "not a 64-bit little-endian ELF file"
    );
    let field = |at: usize, len: usize| -> Result<&[u8]> {
        at.checked_add(len)
            .and_then(|end| elf.get(at..end))
            .context("ELF file cut short")
    };
    let u16_at = |at: usize| -> Result<u64> {
        let b = field(at, 2)?;
        Ok(u64::from(u16::from_le_bytes([b[0], b[1]])))
    };
    let u64_at = |at: usize| -> Result<u64> { Ok(u64::from_le_bytes(field(at, 8)?.try_into().expect("8 bytes"))) };
    let (phoff, phentsize, phnum) = (u64_at(0x20)?, u16_at(0x36)?, u16_at(0x38)?);
    for i in 0..phnum {
        let header = i
            .checked_mul(phentsize)
            .and_then(|o| o.checked_add(phoff))
            .and_then(|o| usize::try_from(o).ok())
            .context("program header beyond the file")?;
        let p_type = u32::from_le_bytes(field(header, 4)?.try_into().expect("4 bytes"));
        if p_type == PT_INTERP {
            let (offset, size) = (u64_at(header.saturating_add(8))?, u64_at(header.saturating_add(32))?);
            let start = usize::try_from(offset).context("interpreter beyond the file")?;
            let len = usize::try_from(size).context("interpreter beyond the file")?;
            let path = field(start, len).context("interpreter path cut short")?;
            let path = path.split(|&b| b == 0).next().unwrap_or_default();
            return Ok(Some(String::from_utf8_lossy(path).into_owned()));
        }
    }
    Ok(None)
}

/// A release build of one workspace tool running beside the guest, at a
/// lower priority than the guest (`nice -n 10`), its output in a log file
/// shown if it fails. Dropped without `wait` (the run failed first), it is
/// stopped: SIGTERM to its process group, cargo and its rustc children.
pub struct BackgroundBuild {
    child: Option<Child>,
    package: String,
    log: PathBuf,
}

/// Start `cargo build --release -p <package> --bin <package>` in the
/// background, its output into `log`.
pub fn spawn_release_build(package: &str, log: &Path) -> Result<BackgroundBuild> {
    use std::os::unix::process::CommandExt;
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let child = Command::new("nice")
        .args(["-n", "10", "cargo"])
        .args(tools_build_args(&[package]))
        .current_dir(workspace_root())
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out)
        // Its own process group: a Ctrl-C meant for the run reaches it
        // through Drop, and Drop stops rustc with cargo.
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting the build of {package}"))?;
    Ok(BackgroundBuild {
        child: Some(child),
        package: package.to_string(),
        log: log.to_path_buf(),
    })
}

impl BackgroundBuild {
    /// Wait for the build; returns the binary's path.
    pub fn wait(mut self) -> Result<PathBuf> {
        let mut child = self.child.take().expect("waited once");
        let status = child
            .wait()
            .with_context(|| format!("waiting for the build of {}", self.package))?;
        if !status.success() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            bail!(
                "building {} failed ({status}); the last lines of {}:\n{}",
                self.package,
                self.log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        Ok(target_dir().join("release").join(&self.package))
    }
}

impl Drop for BackgroundBuild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Ok(pid) = i32::try_from(child.id()) {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGTERM);
            }
            let _ = child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 LE file with the given program header types; a PT_INTERP
    /// one points at "/lib/ld.so\0" after the headers.
    fn elf(types: &[u32]) -> Vec<u8> {
        let (phoff, phentsize) = (64usize, 56usize);
        let interp_at = phoff + types.len() * phentsize;
        let mut f = vec![0u8; interp_at];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        f[0x20..0x28].copy_from_slice(&(phoff as u64).to_le_bytes());
        f[0x36..0x38].copy_from_slice(&(phentsize as u16).to_le_bytes());
        f[0x38..0x3a].copy_from_slice(&(types.len() as u16).to_le_bytes());
        for (i, t) in types.iter().enumerate() {
            let h = phoff + i * phentsize;
            f[h..h + 4].copy_from_slice(&t.to_le_bytes());
            f[h + 8..h + 16].copy_from_slice(&(interp_at as u64).to_le_bytes());
            f[h + 32..h + 40].copy_from_slice(&11u64.to_le_bytes());
        }
        f.extend_from_slice(b"/lib/ld.so\0");
        f
    }

    #[test]
    fn an_elf_interpreter_is_found_only_where_one_is_asked_for() {
        // PT_LOAD, PT_DYNAMIC (a static-pie has one too), PT_INTERP.
        assert_eq!(
            elf_interpreter(&elf(&[1, 2, 3])).unwrap().as_deref(),
            Some("/lib/ld.so")
        );
        assert_eq!(elf_interpreter(&elf(&[1, 2])).unwrap(), None);
        assert_eq!(elf_interpreter(&elf(&[])).unwrap(), None);
    }

    #[test]
    fn this_test_binary_is_dynamically_linked() {
        // A real file from the linker: test binaries are linked against glibc dynamically.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let interpreter = elf_interpreter(&me)
            .unwrap()
            .expect("a dynamic test binary has PT_INTERP");
        assert!(interpreter.contains("ld-linux"), "{interpreter}");
    }

    #[test]
    fn a_cut_or_foreign_file_is_an_error_not_a_panic() {
        let whole = elf(&[1, 3]);
        for len in [0, 3, 5, 0x37, 64 + 20, whole.len() - 4] {
            assert!(elf_interpreter(&whole[..len]).is_err(), "cut at {len}");
        }
        assert!(elf_interpreter(b"#!/bin/sh\n").is_err());
        let mut big_endian = whole.clone();
        big_endian[5] = 2;
        assert!(elf_interpreter(&big_endian).is_err());
        // Program headers said to lie beyond the file.
        let mut far = whole;
        far[0x20..0x28].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(elf_interpreter(&far).is_err());
    }

    #[test]
    fn the_initramfs_takes_the_daemon_from_where_it_is_kept() {
        use crate::images::initramfs::{parse_extra_files, substitute, Placeholders};
        let root = workspace_root();
        let text = std::fs::read_to_string(root.join("images/initramfs-files")).unwrap();
        let files = parse_extra_files(&text).unwrap();
        let daemon = files
            .iter()
            .find(|f| f.guest == "/bin/hmb-trace-daemon")
            .expect("images/initramfs-files puts the daemon in /bin");
        let target = target_dir();
        let placeholders = Placeholders {
            root: &root,
            target: &target,
            kmod_build: None,
        };
        assert_eq!(substitute(&daemon.host, &placeholders), Some(static_daemon_path()));
    }

    /// Each package `cargo tree` lists for `packages` (normal and build
    /// dependencies, proc macros included), with the feature sets it is
    /// built with: "name vX.Y.Z" -> {"[f1,f2]", ...}.
    fn resolved_features(packages: &[&str]) -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace_root()).args([
            "tree",
            "--locked",
            "-e",
            "normal,build",
            "--prefix",
            "none",
            "-f",
            "{p} [{f}]",
        ]);
        for p in packages {
            cmd.args(["-p", p]);
        }
        let out = cmd.output().expect("running cargo tree");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut map = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            // A blank line parts the trees of two `-p` packages.
            let line = line.trim_end_matches(" (*)");
            if line.is_empty() {
                continue;
            }
            let (package, features) = line.rsplit_once(" [").expect("a {p} [{f}] line");
            // The package's name and version, without a path package's path.
            let package: String = package.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            map.entry(package)
                .or_default()
                .insert(features.trim_end_matches(']').to_string());
        }
        map
    }

    /// The three invocations of this module (emu-device and the daemon's
    /// library, the analyzer, the static daemon) resolve features each over
    /// the packages it names; a shared crate with other features in one of
    /// them is compiled again there, and every crate above it
    /// (host-features/Cargo.toml holds the union that keeps them equal).
    #[test]
    fn host_builds_resolve_the_same_features() {
        let selections: [&[&str]; 3] = [&[EMU_DEVICE_PACKAGE, DAEMON], &["hmb-trace-analyze"], &[DAEMON]];
        let resolved: Vec<_> = selections.iter().map(|s| resolved_features(s)).collect();
        let mut differ = Vec::new();
        for (i, a) in resolved.iter().enumerate() {
            for (j, b) in resolved.iter().enumerate().skip(i + 1) {
                for (package, features) in a {
                    if let Some(other) = b.get(package).filter(|other| *other != features) {
                        differ.push(format!(
                            "{package}: {features:?} for {:?}, {other:?} for {:?}",
                            selections[i], selections[j]
                        ));
                    }
                }
            }
        }
        assert!(
            differ.is_empty(),
            "add the missing features to host-features/Cargo.toml:\n{}",
            differ.join("\n")
        );
    }

    #[test]
    fn the_host_build_names_each_binary_and_only_the_daemons_library() {
        assert_eq!(
            host_build_args().join(" "),
            "build --release --quiet -p hmb-emu-device --bin emu-device -p hmb-trace-daemon --lib"
        );
        // The same selection as the nvme boot's background build of the
        // analyzer, so both boots resolve the same features.
        assert_eq!(
            tools_build_args(&["hmb-trace-analyze"]).join(" "),
            "build --release --quiet -p hmb-trace-analyze --bin hmb-trace-analyze"
        );
    }
}
