//! The uncompressed kernel (vmlinux) out of Debian's bzImage, for PVH boot.
//!
//! Under TCG the guest spends about as long decompressing vmlinuz as
//! booting: measured 20-22 s with the bzImage against 11-14 s with the
//! vmlinux (6.1, QEMU 7.2, q35). QEMU boots an ELF kernel through its PVH
//! entry point, which Debian kernels have (CONFIG_PVH, Xen note 0x12).

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use xshell::{cmd, Shell};

/// Compressed payload signatures in a bzImage and the tool that undoes each.
const FORMATS: &[(&[u8], &str, &[&str])] = &[
    (b"\xfd7zXZ\x00", "xz", &["-dc", "--single-stream"]),
    (b"\x28\xb5\x2f\xfd", "zstd", &["-dc"]),
    (b"\x1f\x8b\x08", "gzip", &["-dc"]),
];

/// Candidate payload offsets, in file order, for each format.
pub(crate) fn payload_offsets(image: &[u8]) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    for (index, (magic, _, _)) in FORMATS.iter().enumerate() {
        let mut start = 0;
        // A signature can occur by chance; try the first few.
        for _ in 0..4 {
            match image[start..].windows(magic.len()).position(|w| w == *magic) {
                Some(at) => {
                    found.push((start + at, index));
                    start += at + 1;
                }
                None => break,
            }
        }
    }
    found.sort();
    found
}

/// Write the vmlinux of `vmlinuz` to `out`; Err when none with a PVH entry is found.
pub(crate) fn extract(sh: &Shell, vmlinuz: &Path, out: &Path) -> Result<()> {
    let image = std::fs::read(vmlinuz).with_context(|| format!("reading {}", vmlinuz.display()))?;
    let tmp = out.with_extension("tmp");
    for (offset, index) in payload_offsets(&image) {
        let (_, tool, args) = FORMATS[index];
        let file = std::fs::File::create(&tmp)?;
        let mut child = Command::new(tool)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(file)
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("running {tool}"))?;
        let mut stdin = child.stdin.take().expect("piped");
        // The tool may stop reading at the end of its stream: a broken pipe is fine.
        let _ = stdin.write_all(&image[offset..]);
        drop(stdin);
        // Trailing bytes after the stream make some tools exit non-zero; the
        // output is judged by its content instead.
        let _ = child.wait()?;
        if has_pvh_entry(sh, &tmp) {
            std::fs::rename(&tmp, out)?;
            return Ok(());
        }
    }
    let _ = std::fs::remove_file(&tmp);
    bail!("no vmlinux with a PVH entry point inside {}", vmlinuz.display())
}

/// An ELF whose notes include Xen's PHYS32_ENTRY (type 0x12): QEMU's PVH boot needs it.
pub(crate) fn has_pvh_entry(sh: &Shell, path: &Path) -> bool {
    let mut magic = [0u8; 4];
    let is_elf = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && magic == *b"\x7fELF";
    if !is_elf {
        return false;
    }
    let notes = cmd!(sh, "readelf -n {path}")
        .quiet()
        .ignore_stderr()
        .read()
        .unwrap_or_default();
    notes
        .lines()
        .any(|l| l.trim_start().starts_with("Xen") && l.contains("(0x00000012)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_found_in_file_order() {
        let mut image = vec![0u8; 64];
        image[40..43].copy_from_slice(b"\x1f\x8b\x08");
        image[10..16].copy_from_slice(b"\xfd7zXZ\x00");
        assert_eq!(payload_offsets(&image), vec![(10, 0), (40, 2)]);
        assert!(payload_offsets(&[0u8; 16]).is_empty());
    }

    #[test]
    fn a_non_elf_payload_is_rejected() {
        let dir = std::env::temp_dir().join(format!("hmbt-vmlinux-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A real xz stream whose content is not an ELF kernel.
        let sh = Shell::new().unwrap();
        let plain = dir.join("payload");
        std::fs::write(&plain, b"not a kernel").unwrap();
        cmd!(sh, "xz -kf {plain}").quiet().run().unwrap();
        let mut image = b"bzImage header ".to_vec();
        image.extend(std::fs::read(dir.join("payload.xz")).unwrap());
        std::fs::write(dir.join("vmlinuz"), &image).unwrap();
        let err = extract(&sh, &dir.join("vmlinuz"), &dir.join("vmlinux")).unwrap_err();
        assert!(err.to_string().contains("PVH"), "{err}");
        assert!(!dir.join("vmlinux").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
