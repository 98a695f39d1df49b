//! A full Debian guest for one kernel of images/KERNELS: a debootstrap of
//! the kernel's distribution with systemd, udev, DKMS and a compiler, the
//! kernel's own linux-image and linux-headers packages installed by apt
//! (the same version the harness boots), made into a raw ext4 disk image
//! with `mkfs.ext4 -d`. Cached by the hash of everything it is made from;
//! each run boots it with `snapshot=on`, so the cached image is never written.
//! See docs/host-integration.md.

use super::fetch::ResolvedKernel;
use super::kernels::KernelSpec;
use crate::host::chroot::{unmount_everything_under, Chroot, MIRROR};
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Bump when the way the image is made changes, so old ones are rebuilt.
const RECIPE_VERSION: &str = "1";

/// What debootstrap installs besides minbase: what a user's host has for
/// DKMS and the shipped units (systemd as PID 1, udev, gcc/make/dkms), and
/// the everyday NVMe tools.
const PACKAGES: &[&str] = &[
    "systemd-sysv",
    "udev",
    "dkms",
    "make",
    "gcc",
    "libc6-dev",
    "kmod",
    "zstd",
    // The tools NVMe engineers use, run against emu-device's NVMe
    // controller (full_guest/nvme_tools.rs); util-linux (blkdiscard) is in minbase.
    "nvme-cli",
    "fio",
    "e2fsprogs",
];

/// Module trees a QEMU guest has no hardware for. dpkg leaves them out
/// (`path-exclude`, Debian's documented way to slim an image) because
/// `depmod -a`, which `dkms install` and `dkms remove` each run, reads every
/// module: under TCG that is about a minute for the full 4000 modules. The
/// kernel binary and every module the guest uses are Debian's, untouched.
const EXCLUDED_MODULE_TREES: &[&str] = &[
    "drivers/gpu",
    "drivers/net/wireless",
    "drivers/net/ethernet",
    "drivers/media",
    "drivers/infiniband",
    "drivers/staging",
    "drivers/scsi",
    "drivers/iio",
    "drivers/hid",
    "drivers/usb",
    "drivers/input",
    "drivers/bluetooth",
    "drivers/isdn",
    "drivers/mtd",
    "drivers/platform",
    "drivers/hwmon",
    "drivers/edac",
    "sound",
    "net/wireless",
    "net/mac80211",
    "net/bluetooth",
];

/// Only these go into the initramfs (MODULES=list): the root disk. A
/// smaller initramfs unpacks and boots faster under TCG.
const INITRAMFS_MODULES: &[&str] = &["virtio_pci", "virtio_blk", "ext4"];

/// Units that would only slow the boot or write the (snapshot) disk: timers,
/// getty on the console the harness reads, scrub jobs.
const MASKED_UNITS: &[&str] = &[
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "getty.target",
    "getty-static.service",
    "serial-getty@ttyS0.service",
    "systemd-pstore.service",
];

/// The guest's file systems: the root disk and the host share (9p, tag
/// `qemu::SHARE_TAG`), where the check's script and its inputs are.
const FSTAB: &str = "/dev/vda / ext4 rw,noatime 0 0\n\
hmbt /mnt/host 9p trans=virtio,version=9p2000.L,msize=262144,nofail 0 0\n";

/// The unit that runs the check once the system is up, then powers off.
/// Its output goes to the console (the harness reads the markers there).
const CHECK_UNIT: &str = "[Unit]
Description=hmb-trace full-guest check (script from the host share)
RequiresMountsFor=/mnt/host
After=multi-user.target

[Service]
Type=oneshot
ExecStart=/bin/sh /mnt/host/run.sh
StandardOutput=journal+console
StandardError=journal+console
ExecStopPost=/bin/systemctl --no-block poweroff

[Install]
WantedBy=multi-user.target
";

/// A prepared full guest.
pub(crate) struct DebianRoot {
    /// The installed tree (also a chroot: the module's DKMS build runs in it).
    pub root: PathBuf,
    /// Raw ext4 image of `root`, booted as /dev/vda with `snapshot=on`.
    pub disk: PathBuf,
    /// Debian's initramfs for the kernel (initramfs-tools), copied out of /boot.
    pub initrd: PathBuf,
    /// Fingerprint of the image: what is built from it (the DKMS module) keys on it.
    pub key: String,
    pub rebuilt: bool,
}

/// Debian's apt sources for the kernel's suite: the release, its updates
/// and security (bookworm's kernels come from bookworm-security), and the
/// backports when the kernel is one.
fn sources(spec: &KernelSpec) -> String {
    let c = spec.codename();
    let mut s = format!(
        "deb {MIRROR} {c} main\ndeb {MIRROR} {c}-updates main\ndeb http://deb.debian.org/debian-security {c}-security main\n"
    );
    if spec.apt_target_release().is_some() {
        s += &format!("deb {MIRROR} {} main\n", spec.suite);
    }
    s
}

fn dpkg_excludes() -> String {
    let mut s = String::from("# hmb-trace full guest: module trees a QEMU guest has no hardware for\n");
    // usr-merged kernel packages (trixie's 7.x) ship /usr/lib/modules.
    for tree in EXCLUDED_MODULE_TREES {
        s += &format!("path-exclude=/lib/modules/*/kernel/{tree}/*\n");
        s += &format!("path-exclude=/usr/lib/modules/*/kernel/{tree}/*\n");
    }
    s
}

fn fingerprint(spec: &KernelSpec, kernel: &ResolvedKernel) -> Fingerprint {
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", RECIPE_VERSION)
        .add_str("suite", &spec.suite)
        .add_str("mirror", MIRROR)
        .add_str("sources", &sources(spec))
        .add_str("packages", &PACKAGES.join(" "))
        .add_str("excludes", &dpkg_excludes())
        .add_str("initramfs", &INITRAMFS_MODULES.join(" "))
        .add_str("masked", &MASKED_UNITS.join(" "))
        .add_str("fstab", FSTAB)
        .add_str("unit", CHECK_UNIT)
        .add_str("abi", &kernel.abi)
        .add_str("version", &kernel.version);
    fp
}

/// The image for `spec`, built unless an up-to-date one is cached.
pub(crate) fn ensure(sh: &Shell, cache: &Path, spec: &KernelSpec, kernel: &ResolvedKernel) -> Result<DebianRoot> {
    let dir = cache.join("full-guest").join(&spec.name);
    let fp = fingerprint(spec, kernel);
    let out = DebianRoot {
        root: dir.join("root"),
        disk: dir.join("root.img"),
        initrd: dir.join("initrd.img"),
        key: fp.hex(),
        rebuilt: false,
    };
    let stamp = Stamp::new(dir.join("image.stamp"), &fp);
    if stamp.is_fresh() && out.disk.is_file() && out.initrd.is_file() && out.root.join("usr/sbin/dkms").exists() {
        return Ok(out);
    }
    if !crate::host::apt::is_root() {
        bail!(
            "building the full guest's image needs root (debootstrap, chroot, file owners in mkfs.ext4 -d); \
             run as root, as `cargo xtask test` and the README do"
        );
    }
    stamp.invalidate()?;
    std::fs::create_dir_all(&dir)?;
    let building = dir.join("root.tmp");
    for d in [&building, &out.root] {
        unmount_everything_under(sh, d)?;
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
    }
    install(sh, spec, kernel, &building)?;
    std::fs::rename(&building, &out.root)?;
    let initrd_in = out.root.join(format!("boot/initrd.img-{}", kernel.abi));
    std::fs::copy(&initrd_in, &out.initrd).with_context(|| format!("copying {}", initrd_in.display()))?;
    make_disk(sh, &out.root, &out.disk)?;
    stamp.record()?;
    Ok(DebianRoot { rebuilt: true, ..out })
}

/// debootstrap, the kernel and its headers through apt, then the guest's
/// configuration. Everything inside runs in the tree as a chroot.
fn install(sh: &Shell, spec: &KernelSpec, kernel: &ResolvedKernel, root: &Path) -> Result<()> {
    let codename = spec.codename();
    let include = format!("--include={}", PACKAGES.join(","));
    println!("    debootstrap --variant=minbase {include} {codename} (the full guest's system)");
    cmd!(
        sh,
        "timeout --foreground 1800 debootstrap --variant=minbase {include} {codename} {root} {MIRROR}"
    )
    .quiet()
    .ignore_stdout()
    .run()
    .with_context(|| format!("debootstrap of {codename} failed (network? debian-archive-keyring too old?)"))?;
    let chroot = Chroot {
        codename: codename.to_string(),
        root: root.to_path_buf(),
    };
    std::fs::write(root.join("etc/apt/sources.list"), sources(spec))?;
    std::fs::write(root.join("etc/dpkg/dpkg.cfg.d/hmbt-excludes"), dpkg_excludes())?;
    // Before the kernel's postinst generates the initramfs.
    std::fs::create_dir_all(root.join("etc/initramfs-tools/conf.d"))?;
    std::fs::write(
        root.join("etc/initramfs-tools/conf.d/hmbt-modules.conf"),
        "MODULES=list\n",
    )?;
    chroot.run(sh, "apt-get -q update >/dev/null", 900)?;
    // The kernel the harness boots, pinned to its version: modules and
    // headers must match it exactly. The image's initramfs-tools makes the initrd.
    let release = spec
        .apt_target_release()
        .map(|r| format!("-t {r} "))
        .unwrap_or_default();
    let abi = &kernel.abi;
    let version = &kernel.version;
    let mut wanted: Vec<String> = kernel.packages.iter().map(|(p, v)| format!("{p}={v}")).collect();
    wanted.push(format!("linux-headers-{abi}={version}"));
    wanted.push("initramfs-tools".into());
    std::fs::write(
        root.join("etc/initramfs-tools/modules"),
        INITRAMFS_MODULES.join("\n") + "\n",
    )?;
    println!("    apt-get install {}", wanted.join(" "));
    chroot.run(
        sh,
        &format!(
            "apt-get -q -y --no-install-recommends -o Dpkg::Options::=--force-confold install {release}{} >/dev/null",
            wanted.join(" ")
        ),
        1800,
    )?;
    anyhow::ensure!(
        root.join(format!("boot/initrd.img-{abi}")).is_file(),
        "installing the kernel made no /boot/initrd.img-{abi}"
    );
    std::fs::write(root.join("etc/fstab"), FSTAB)?;
    std::fs::write(root.join("etc/hostname"), "hmbt-guest\n")?;
    std::fs::create_dir_all(root.join("mnt/host"))?;
    configure_units(root)?;
    chroot.run(sh, "apt-get clean", 120)?;
    Ok(())
}

/// Mask, enable and set the default target the way `systemctl` does it
/// offline (symlinks under /etc/systemd/system), without its exit codes.
fn configure_units(root: &Path) -> Result<()> {
    use std::os::unix::fs::symlink;
    let etc = root.join("etc/systemd/system");
    let link = |target: &str, at: PathBuf| -> Result<()> {
        let _ = std::fs::remove_file(&at);
        symlink(target, &at).with_context(|| format!("linking {}", at.display()))
    };
    for unit in MASKED_UNITS {
        link("/dev/null", etc.join(unit))?;
    }
    std::fs::write(etc.join("hmbt-check.service"), CHECK_UNIT)?;
    std::fs::create_dir_all(etc.join("multi-user.target.wants"))?;
    link(
        "/etc/systemd/system/hmbt-check.service",
        etc.join("multi-user.target.wants/hmbt-check.service"),
    )?;
    link("/lib/systemd/system/multi-user.target", etc.join("default.target"))
}

/// A raw ext4 image of `root` with room to spare for the run (DKMS, the
/// trace): `mkfs.ext4 -d` copies the tree with its owners and modes.
fn make_disk(sh: &Shell, root: &Path, disk: &Path) -> Result<()> {
    let tmp = disk.with_extension("img.tmp");
    let _ = std::fs::remove_file(&tmp);
    cmd!(
        sh,
        "timeout --foreground 600 mkfs.ext4 -q -F -L hmbt-root -d {root} {tmp} 3G"
    )
    .quiet()
    .run()
    .context("mkfs.ext4 -d of the full guest's root")?;
    std::fs::rename(&tmp, disk)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bookworm_kernels_come_with_security_and_backports_only_when_asked() {
        let specs = super::super::kernels::parse(
            "6.1 bookworm linux-image-amd64 host\n6.12 bookworm-backports linux-image-amd64 host\n",
        )
        .unwrap();
        let base = sources(&specs[0]);
        assert!(base.contains("bookworm-security main"), "{base}");
        assert!(!base.contains("backports"), "{base}");
        assert!(sources(&specs[1]).contains("bookworm-backports main"));
    }

    #[test]
    fn the_image_changes_with_the_kernel_version() {
        let spec = super::super::kernels::parse("6.1 bookworm linux-image-amd64 host\n").unwrap()[0].clone();
        let k = |v: &str| ResolvedKernel {
            abi: "6.1.0-57-amd64".into(),
            version: v.into(),
            packages: vec![("linux-image-6.1.0-57-amd64".into(), v.into())],
        };
        assert_ne!(
            fingerprint(&spec, &k("6.1.192-3")).hex(),
            fingerprint(&spec, &k("6.1.192-4")).hex()
        );
        assert!(dpkg_excludes().lines().all(|l| l.starts_with('#') || l.ends_with("/*")));
    }
}
