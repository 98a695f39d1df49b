//! A Python venv under the target directory with pinned packages, for the
//! tests that check an export with an independent reader (DuckDB for
//! Parquet, Perfetto's own bindings for its protobuf). Built once per
//! package list: a stamp file holds the list it was built with.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The venv `name` under the target directory with exactly `packages`
/// installed (pip pins), and its interpreter's path. One installer at a
/// time: tests and crates may run in parallel, so a lock file serialises
/// them.
pub fn venv_python(name: &str, packages: &[&str]) -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(name);
    let python = dir.join("bin/python");
    let stamp = dir.join("installed.txt");
    let want = packages.join(" ");
    std::fs::create_dir_all(tmp).unwrap();
    let lock = std::fs::File::create(tmp.join(format!("{name}.lock"))).unwrap();
    // SAFETY: flock on a descriptor we own; released when `lock` drops.
    assert_eq!(
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) },
        0
    );
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(want.as_str()) {
        return python;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mk = || Command::new("python3").args(["-m", "venv"]).arg(&dir).status();
    if !mk().is_ok_and(|s| s.success()) {
        // Debian splits venv/ensurepip out of python3.
        let _ = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "python3-venv"])
            .status();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(mk().unwrap().success(), "python3 -m venv failed");
    }
    let st = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .status()
        .unwrap();
    assert!(st.success(), "pip install {want} failed");
    std::fs::write(&stamp, &want).unwrap();
    python
}
