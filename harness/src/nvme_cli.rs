//! Debian's own nvme-cli in the busybox guests: the host's `/usr/sbin/nvme`
//! (package nvme-cli, a host package) and the shared libraries it needs,
//! copied into the guest's share and started through the dynamic loader,
//! so the guest runs the unmodified tool users run without a Debian root.
//! The guest kernel does not matter to a user-space binary (glibc needs
//! 3.2 or later).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};

/// The binary Debian's nvme-cli installs.
pub(crate) const NVME_BINARY: &str = "/usr/sbin/nvme";
/// Folder of the share the tool is staged into.
pub(crate) const SHARE_DIR: &str = "nvme-cli";
/// The loader's name in that folder.
pub(crate) const LOADER: &str = "ld-linux-x86-64.so.2";

/// Copy nvme and its libraries into `share/nvme-cli`. The guest runs it as
/// `$share/nvme-cli/ld-linux-x86-64.so.2 --library-path $share/nvme-cli
/// $share/nvme-cli/nvme ...` (the `nvmecli` function of harness/guest-scripts/nvme-boot.sh).
pub(crate) fn stage(share: &Path) -> Result<()> {
    let binary = Path::new(NVME_BINARY);
    ensure!(
        binary.is_file(),
        "{NVME_BINARY} is missing: the host package nvme-cli is not installed (cargo xtask deps)"
    );
    let dir = share.join(SHARE_DIR);
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(binary, dir.join("nvme")).with_context(|| format!("copying {NVME_BINARY}"))?;
    let (libs, loader) = needed_libraries(binary)?;
    for lib in libs {
        let name = lib.file_name().context("a library path without a name")?;
        std::fs::copy(&lib, dir.join(name)).with_context(|| format!("copying {}", lib.display()))?;
    }
    std::fs::copy(&loader, dir.join(LOADER)).with_context(|| format!("copying {}", loader.display()))?;
    Ok(())
}

/// The libraries `ldd` resolves for `binary`, and the loader.
fn needed_libraries(binary: &Path) -> Result<(Vec<PathBuf>, PathBuf)> {
    let out = Command::new("ldd").arg(binary).output().context("running ldd")?;
    ensure!(out.status.success(), "ldd {} failed", binary.display());
    parse_ldd(&String::from_utf8_lossy(&out.stdout))
}

/// `name => /path (addr)` lines are libraries; the `/lib64/ld-linux...`
/// line is the loader; `linux-vdso` has no file.
fn parse_ldd(text: &str) -> Result<(Vec<PathBuf>, PathBuf)> {
    let mut libs = Vec::new();
    let mut loader = None;
    for line in text.lines().map(str::trim) {
        if let Some((name, rest)) = line.split_once(" => ") {
            let path = rest.split_whitespace().next().unwrap_or("");
            if path == "not" {
                bail!("ldd: {name} not found");
            }
            if path.starts_with('/') {
                libs.push(PathBuf::from(path));
            }
        } else if line.starts_with('/') && line.contains("ld-linux") {
            loader = line.split_whitespace().next().map(PathBuf::from);
        }
    }
    Ok((libs, loader.context("ldd named no dynamic loader")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ldd_output_gives_libraries_and_loader() {
        let text = "\tlinux-vdso.so.1 (0x00007f)\n\tlibnvme.so.1 => /lib/x86_64-linux-gnu/libnvme.so.1 (0x7f)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x7f)\n\t/lib64/ld-linux-x86-64.so.2 (0x7f)\n";
        let (libs, loader) = parse_ldd(text).unwrap();
        assert_eq!(
            libs,
            vec![
                PathBuf::from("/lib/x86_64-linux-gnu/libnvme.so.1"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
            ]
        );
        assert_eq!(loader, PathBuf::from("/lib64/ld-linux-x86-64.so.2"));
        assert!(parse_ldd("\tlibx.so => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n").is_err());
        assert!(parse_ldd("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n").is_err(), "no loader");
    }
}
