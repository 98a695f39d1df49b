//! The guest's initramfs: busybox-static, images/guest/init, the guest
//! modules it needs (decompressed), our module and the files listed in
//! images/initramfs-files. Packed as a gzip'd newc cpio.

use super::fetch::FetchedKernel;
use super::guest_modules::{self, ModuleIndex};
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use xshell::{cmd, Shell};

pub(crate) const BUSYBOX: &str = "/bin/busybox";

/// One line of images/initramfs-files.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ExtraFile {
    pub host: String,
    pub guest: String,
    pub required: bool,
}

/// Values substituted into host paths of images/initramfs-files.
pub(crate) struct Placeholders<'a> {
    pub root: &'a Path,
    pub target: &'a Path,
    pub kmod_build: Option<&'a Path>,
}

pub(crate) fn parse_extra_files(text: &str) -> Result<Vec<ExtraFile>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [host, guest, need] = fields[..] else {
            bail!(
                "initramfs-files line {}: expected HOST-PATH GUEST-PATH required|optional",
                i + 1
            );
        };
        if !guest.starts_with('/') || guest.contains("..") {
            bail!(
                "initramfs-files line {}: guest path must be absolute and plain: {guest}",
                i + 1
            );
        }
        let required = match need {
            "required" => true,
            "optional" => false,
            other => bail!(
                "initramfs-files line {}: {other:?} is neither required nor optional",
                i + 1
            ),
        };
        out.push(ExtraFile {
            host: host.to_string(),
            guest: guest.to_string(),
            required,
        });
    }
    Ok(out)
}

/// `{root}`, `{target}` and `{kmod_build}` substituted; None when the value is unknown.
pub(crate) fn substitute(host: &str, p: &Placeholders) -> Option<PathBuf> {
    let mut s = host.replace("{root}", &p.root.to_string_lossy());
    s = s.replace("{target}", &p.target.to_string_lossy());
    if s.contains("{kmod_build}") {
        s = s.replace("{kmod_build}", &p.kmod_build?.to_string_lossy());
    }
    let path = PathBuf::from(s);
    Some(if path.is_absolute() { path } else { p.root.join(path) })
}

pub(crate) struct InitramfsInputs<'a> {
    pub name: &'a str,
    pub root: &'a Path,
    pub cache: &'a Path,
    pub kernel: &'a FetchedKernel,
    pub our_modules: &'a [PathBuf],
    pub placeholders: Placeholders<'a>,
}

pub(crate) struct Initramfs {
    pub path: PathBuf,
    pub rebuilt: bool,
    /// Listed optional files that were not there (reported, not fatal).
    pub missing_optional: Vec<String>,
    /// Guest paths of our modules inside the image.
    pub our_module_paths: Vec<String>,
}

pub(crate) fn build(sh: &Shell, inp: &InitramfsInputs) -> Result<Initramfs> {
    let images = inp.root.join("images");
    let init = images.join("guest/init");
    let list_path = images.join("initramfs-files");
    let extra = parse_extra_files(&std::fs::read_to_string(&list_path).context("reading images/initramfs-files")?)?;
    let wanted = guest_modules::read_list(&images.join("guest/modules"))?;

    // Our module's own dependencies are loaded at boot as well.
    let mut wanted_all = wanted.clone();
    for ko in inp.our_modules {
        let ko_path = ko.as_path();
        let deps = cmd!(sh, "modinfo -F depends {ko_path}").quiet().read()?;
        wanted_all.extend(
            deps.split(',')
                .map(str::trim)
                .filter(|d| !d.is_empty())
                .map(str::to_string),
        );
    }
    let index = ModuleIndex::load(&inp.kernel.modules_dir)?;
    let order = index.load_order(&wanted_all)?;
    // Modules only some runs load (the soak's output disk): in the image,
    // not loaded at boot, so every other guest boots as before.
    let on_demand: Vec<String> = index
        .load_order(&guest_modules::read_list(&images.join("guest/modules-on-demand"))?)?
        .into_iter()
        .filter(|rel| !order.contains(rel))
        .collect();

    let mut present = Vec::new();
    let mut missing_optional = Vec::new();
    for f in &extra {
        match substitute(&f.host, &inp.placeholders).filter(|p| p.is_file()) {
            Some(p) => present.push((p, f.guest.clone())),
            None if f.required => bail!("initramfs-files: required {} is missing", f.host),
            None => missing_optional.push(format!("{} -> {}", f.host, f.guest)),
        }
    }

    let mut fp = Fingerprint::new();
    fp.add_str("recipe", "3")
        .add_file("init", &init)?
        .add_file("busybox", Path::new(BUSYBOX))?;
    fp.add_str("modules", &order.join(" "));
    fp.add_str("on-demand", &on_demand.join(" "));
    for (p, v) in &inp.kernel.resolved.packages {
        fp.add_str(p, v);
    }
    for ko in inp.our_modules {
        fp.add_file("ours", ko)?;
    }
    for (host, guest) in &present {
        fp.add_str("guest", guest).add_file("extra", host)?;
    }
    // Named by its inputs: a run sharing the cache with another clone never
    // has its image replaced between building and booting it.
    let key = format!("{}-{}", inp.name, fp.hex());
    let dir = inp.cache.join("initramfs");
    let out = dir.join(format!("{key}.cpio.gz"));
    let stamp = Stamp::new(dir.join(format!("{key}.stamp")), &fp);
    let our_module_paths: Vec<String> = inp
        .our_modules
        .iter()
        .map(|k| format!("/lib/hmbt/{}", k.file_name().unwrap_or_default().to_string_lossy()))
        .collect();
    let rebuilt = !(stamp.is_fresh() && out.exists());
    if rebuilt {
        stamp.invalidate()?;
        let staging = dir.join(format!("{key}.staging"));
        if staging.exists() {
            std::fs::remove_dir_all(&staging)?;
        }
        for d in [
            "bin",
            "sbin",
            "usr/bin",
            "usr/sbin",
            "etc/hmbt",
            "lib/hmbt",
            "lib/modules/boot",
            "lib/modules/on-demand",
            "proc",
            "sys",
            "dev",
            "tmp",
            "run",
            "mnt/host",
        ] {
            std::fs::create_dir_all(staging.join(d))?;
        }
        install(&init, &staging.join("init"), 0o755)?;
        install(Path::new(BUSYBOX), &staging.join("bin/busybox"), 0o755)?;
        stage_modules(&inp.kernel.modules_dir, &order, &staging, "boot", "boot-modules")?;
        stage_modules(
            &inp.kernel.modules_dir,
            &on_demand,
            &staging,
            "on-demand",
            "on-demand-modules",
        )?;
        std::fs::write(
            staging.join("etc/hmbt/kernel"),
            format!("{}\n", inp.kernel.resolved.abi),
        )?;
        for (ko, guest) in inp.our_modules.iter().zip(&our_module_paths) {
            install(ko, &staging.join(guest.trim_start_matches('/')), 0o644)?;
        }
        for (host, guest) in &present {
            let dest = staging.join(guest.trim_start_matches('/'));
            install(host, &dest, 0o755)?;
            strip_debug_info(sh, &dest)?;
        }
        let tmp = out.with_extension("tmp");
        let script = "find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet | gzip -1 -n > \"$1\"";
        let _dir = sh.push_dir(&staging);
        cmd!(sh, "timeout --foreground 300 sh -ec {script} pack {tmp}")
            .quiet()
            .run()
            .context("packing the initramfs")?;
        std::fs::rename(&tmp, &out)?;
        std::fs::remove_dir_all(&staging)?;
        stamp.record()?;
    }
    Ok(Initramfs {
        path: out,
        rebuilt,
        missing_optional,
        our_module_paths,
    })
}

/// Put `order`'s modules (decompressed) in `lib/modules/<dir>` of the
/// image, and their guest paths, in that order, in `etc/hmbt/<list>`.
fn stage_modules(modules_dir: &Path, order: &[String], staging: &Path, dir: &str, list: &str) -> Result<()> {
    let mut paths = String::new();
    for rel in order {
        let name = guest_modules::guest_file_name(rel);
        decompress_module(
            &modules_dir.join(rel),
            &staging.join("lib/modules").join(dir).join(&name),
        )?;
        paths.push_str(&format!("/lib/modules/{dir}/{name}\n"));
    }
    std::fs::write(staging.join("etc/hmbt").join(list), paths)?;
    Ok(())
}

fn install(from: &Path, to: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::copy(from, to).with_context(|| format!("copying {} into the initramfs", from.display()))?;
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Release binaries carry debug info (profile.release debug=1): useless in
/// the guest and most of the initramfs size, which TCG pays for at boot.
fn strip_debug_info(sh: &Shell, path: &Path) -> Result<()> {
    let mut magic = [0u8; 4];
    let is_elf = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
        .is_ok()
        && magic == *b"\x7fELF";
    if is_elf {
        cmd!(sh, "strip --strip-debug {path}").quiet().run().context("strip")?;
    }
    Ok(())
}

/// busybox insmod only reads plain ELF reliably, so modules go in decompressed.
pub fn decompress_module(from: &Path, to: &Path) -> Result<()> {
    let name = from.to_string_lossy();
    let tool = if name.ends_with(".xz") {
        Some("xz")
    } else if name.ends_with(".zst") {
        Some("zstd")
    } else if name.ends_with(".gz") {
        Some("gzip")
    } else {
        None
    };
    match tool {
        None => install(from, to, 0o644),
        Some(tool) => {
            let out = std::fs::File::create(to)?;
            let status = Command::new(tool)
                .args(["-d", "-c"])
                .arg(from)
                .stdout(out)
                .stderr(Stdio::inherit())
                .status()
                .with_context(|| format!("running {tool}"))?;
            if !status.success() {
                bail!("{tool} -d {} failed: {status}", from.display());
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_file_list_parses() {
        let text = std::fs::read_to_string(crate::workspace_root().join("images/initramfs-files")).unwrap();
        parse_extra_files(&text).unwrap();
    }

    #[test]
    fn bad_lines_are_rejected() {
        assert!(parse_extra_files("a /b maybe").is_err());
        assert!(parse_extra_files("a b optional").is_err());
        assert!(parse_extra_files("a /x/../etc optional").is_err());
        assert!(parse_extra_files("a /b").is_err());
        let ok = parse_extra_files("# c\n{target}/x /bin/x optional # why\n").unwrap();
        assert_eq!(
            ok,
            vec![ExtraFile {
                host: "{target}/x".into(),
                guest: "/bin/x".into(),
                required: false
            }]
        );
    }

    #[test]
    fn placeholders_are_substituted() {
        let p = Placeholders {
            root: Path::new("/r"),
            target: Path::new("/t"),
            kmod_build: None,
        };
        assert_eq!(substitute("{target}/d", &p), Some(PathBuf::from("/t/d")));
        assert_eq!(substitute("images/x", &p), Some(PathBuf::from("/r/images/x")));
        assert_eq!(substitute("{kmod_build}/t", &p), None);
        let p = Placeholders {
            kmod_build: Some(Path::new("/k")),
            ..p
        };
        assert_eq!(substitute("{kmod_build}/t", &p), Some(PathBuf::from("/k/t")));
    }
}
