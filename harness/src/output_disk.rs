//! A scratch ext4 disk for the daemon's output, for runs whose trace.bin
//! outgrows the guest's tmpfs: ten minutes at 400 k rec/s are ~10.5 GB.
//! The host makes a sparse image with `mkfs.ext4`, the guest mounts it over
//! /tmp (so the daemon's `--output /tmp/trace.bin` lands on it), and after
//! QEMU exits the host copies the file out of the image with `debugfs`:
//! no mount on the host, no copy through 9p (~6 MB/s under TCG).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use crate::host::apt::{self, Need};
use crate::qemu::args::{self, Args};

/// The disk's device node in the guest: the session's only virtio-blk disk.
pub(crate) const GUEST_DEVICE: &str = "/dev/vda";

pub(crate) struct OutputDisk {
    pub image: PathBuf,
}

/// Image size for `payload` bytes of output: room for the file system's
/// own blocks and a margin, rounded up to a GiB. Sparse, so only what the
/// guest writes takes host disk space.
pub(crate) fn image_bytes(payload: u64) -> u64 {
    let with_margin = payload + payload / 8 + (1 << 30);
    with_margin.div_ceil(1 << 30) << 30
}

impl OutputDisk {
    /// A fresh ext4 image at `image` holding at least `payload` bytes.
    pub(crate) fn create(sh: &Shell, image: &Path, payload: u64) -> Result<OutputDisk> {
        apt::ensure(sh, &[Need::new("e2fsprogs", "mkfs.ext4 and debugfs: the output disk")])?;
        let dir = image.parent().unwrap_or(Path::new("."));
        check_room(free_bytes(dir)?, payload)
            .with_context(|| format!("the output disk would be in {}", dir.display()))?;
        let _ = std::fs::remove_file(image);
        let file = std::fs::File::create(image).with_context(|| format!("creating {}", image.display()))?;
        file.set_len(image_bytes(payload))?;
        drop(file);
        // No journal (scratch data, and less work for the TCG guest), a few
        // inodes, no reserved blocks, inode tables written now rather than
        // by the guest kernel's lazy-init thread during the run.
        cmd!(
            sh,
            "mkfs.ext4 -q -F -O ^has_journal -N 64 -m 0 -E lazy_itable_init=0,lazy_journal_init=0 -L hmbt-out {image}"
        )
        .run()
        .context("mkfs.ext4 of the output disk")?;
        Ok(OutputDisk {
            image: image.to_path_buf(),
        })
    }

    pub(crate) fn qemu_args(&self) -> Args {
        args::virtio_blk_scratch(&self.image, "hmbtout")
    }

    /// Copy `name` (a path from the file system's root) out of the image
    /// to `to`. The guest must have unmounted the disk, and QEMU exited.
    pub(crate) fn extract(&self, sh: &Shell, name: &str, to: &Path) -> Result<u64> {
        let _ = std::fs::remove_file(to);
        let image = &self.image;
        let request = format!("dump /{name} {}", to.display());
        // debugfs reports a missing file on stderr and still exits 0.
        let out = cmd!(sh, "debugfs -R {request} {image}")
            .quiet()
            .ignore_status()
            .output()
            .context("running debugfs")?;
        let len = std::fs::metadata(to).map(|m| m.len()).ok();
        match len {
            Some(len) if out.status.success() => Ok(len),
            _ => bail!(
                "{name} could not be copied out of {}: {}",
                image.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }
}

/// Bytes an unprivileged writer may still use in the file system of `dir`
/// (also the test command's disk column, xtask/src/test/times.rs).
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let st = nix::sys::statvfs::statvfs(dir).with_context(|| format!("statvfs {}", dir.display()))?;
    Ok(st.blocks_available() * st.fragment_size())
}

/// The image fills up as the guest writes, and the copy out of it is as
/// large: both must fit, or the run would end in ENOSPC on the host after
/// minutes of streaming.
fn check_room(free: u64, payload: u64) -> Result<()> {
    let needed = 2 * payload + (1 << 30);
    if free < needed {
        bail!(
            "{:.1} GB free on the host, {:.1} GB needed for ~{:.1} GB of trace.bin (the disk image and the \
             copy out of it): use a smaller --rate or --minutes, or --run-dir elsewhere",
            free as f64 / 1e9,
            needed as f64 / 1e9,
            payload as f64 / 1e9
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_does_not_fit_on_the_host_is_refused_before_it_starts() {
        let ten_minutes_at_400k = 600 * 400_000 * 50;
        assert!(check_room(20 << 30, ten_minutes_at_400k).is_err());
        assert!(check_room(40 << 30, ten_minutes_at_400k).is_ok());
        let e = check_room(1 << 30, 1 << 30).unwrap_err().to_string();
        assert!(e.contains("--rate"), "{e}");
    }

    #[test]
    fn the_image_has_room_for_the_payload_and_a_margin() {
        assert_eq!(image_bytes(0), 1 << 30);
        assert_eq!(image_bytes(3 << 30), 5 << 30);
        let ten_minutes_at_400k = 600 * 400_000 * 50;
        assert!(image_bytes(ten_minutes_at_400k) >= ten_minutes_at_400k + (1 << 30));
        assert_eq!(image_bytes(ten_minutes_at_400k) % (1 << 30), 0);
    }
}
