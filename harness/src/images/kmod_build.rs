//! Build the out-of-tree module against one guest kernel's headers:
//! `make -C <copy of kmod/> KDIR=/usr/src/linux-headers-<abi> OUT=<copy>/out`
//! (and `make test` for the static guest test program), on the host or in
//! the kernel's chroot. The source is copied first so that builds for
//! different kernels never share object files and the work tree stays clean.

use super::fetch::ResolvedKernel;
use super::kernels::KernelSpec;
use crate::host::apt_env::AptEnv;
use crate::host::chroot::ProcMount;
use crate::host::stamp::{Fingerprint, Stamp};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

pub(crate) struct BuiltModule {
    /// Where make ran (host path): other build products (test programs) are found here.
    pub build_dir: PathBuf,
    /// The `.ko` files it produced.
    pub modules: Vec<PathBuf>,
    pub rebuilt: bool,
}

/// Build products and editor litter that must not change the source fingerprint.
pub(crate) fn is_build_product(name: &str) -> bool {
    const SUFFIXES: &[&str] = &[".o", ".ko", ".mod", ".mod.c", ".cmd", ".a", ".swp", "~"];
    const NAMES: &[&str] = &["modules.order", "Module.symvers", ".tmp_versions", ".git"];
    NAMES.contains(&name) || SUFFIXES.iter().any(|s| name.ends_with(s)) || name.starts_with(".#")
}

pub(crate) fn build(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    kernel: &ResolvedKernel,
    source: &Path,
    cache: &Path,
) -> Result<BuiltModule> {
    if !source.join("Makefile").exists() && !source.join("Kbuild").exists() {
        bail!("{} has no Makefile: no module to build", source.display());
    }
    let (kdir, headers) = kernel_dir(sh, env, spec, kernel, cache)?;
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", "1")
        .add_str("headers", &headers)
        .add_str("env", &env.describe())
        .add_tree("src", source, &is_build_product)?;
    // One build folder per input fingerprint: clones with different module
    // sources sharing one cache (HMB_TRACE_CACHE) never rebuild each other's
    // module under a guest that is about to boot it.
    let key = format!("{}-{}", spec.name, fp.hex());
    let (build_dir, inside_dir) = match env {
        AptEnv::Host => (cache.join("kmod").join(&key).join("build"), None),
        AptEnv::Chroot(c) => {
            let inside = format!("/build/kmod-{key}");
            (c.host_path(&inside), Some(inside))
        }
    };
    let stamp = Stamp::new(cache.join("kmod").join(format!("{key}.stamp")), &fp);
    let rebuilt = !stamp.is_fresh() || find_modules(&build_dir)?.is_empty();
    if rebuilt {
        stamp.invalidate()?;
        if build_dir.exists() {
            std::fs::remove_dir_all(&build_dir)?;
        }
        std::fs::create_dir_all(&build_dir)?;
        copy_tree(source, &build_dir)?;
        match env {
            AptEnv::Host => {
                if !Path::new(&kdir).join("Makefile").exists() {
                    bail!("{kdir} is missing: run `cargo xtask deps --kernel {}`", spec.name);
                }
                let out = build_dir.join("out");
                cmd!(
                    sh,
                    "timeout --foreground 600 make -C {build_dir} KDIR={kdir} OUT={out} -j2"
                )
                .run()
                .context("module build failed")?;
                if has_test_target(&build_dir) {
                    let test_bin = out.join(TEST_PROGRAM);
                    cmd!(
                        sh,
                        "timeout --foreground 300 make -C {build_dir} test TEST_BIN={test_bin}"
                    )
                    .run()
                    .context("test program build failed")?;
                }
            }
            AptEnv::Chroot(c) => {
                let _proc = ProcMount::new(sh, c)?;
                let inside = inside_dir.as_deref().expect("chroot build has an inside path");
                c.run(sh, &format!("make -C {inside} KDIR={kdir} OUT={inside}/out -j2"), 600)
                    .context("module build failed")?;
                if has_test_target(&build_dir) {
                    c.run(
                        sh,
                        &format!("make -C {inside} test TEST_BIN={inside}/out/{TEST_PROGRAM}"),
                        300,
                    )
                    .context("test program build failed")?;
                }
            }
        }
        if find_modules(&build_dir)?.is_empty() {
            bail!("make succeeded but produced no .ko in {}", build_dir.display());
        }
        stamp.record()?;
    }
    let modules = find_modules(&build_dir)?;
    Ok(BuiltModule {
        build_dir,
        modules,
        rebuilt,
    })
}

/// What the module is built against (make's KDIR) and what identifies it
/// in a stamp: Debian's headers package, or the debug kernel's own tree.
pub(crate) fn kernel_dir(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    kernel: &ResolvedKernel,
    cache: &Path,
) -> Result<(String, String)> {
    if spec.debug {
        let tree = super::debug_kernel::tree_dir(cache, spec);
        let id = super::debug_kernel::built_id(cache, spec)?;
        return Ok((tree.display().to_string(), format!("{} debug build {id}", spec.name)));
    }
    let headers = kernel.headers_package();
    let version = installed_headers_version(sh, env, spec, &headers)?;
    Ok((format!("/usr/src/{headers}"), format!("{headers}={version}")))
}

/// Version of the installed headers package; installs it first when missing.
fn installed_headers_version(sh: &Shell, env: &AptEnv, spec: &KernelSpec, headers: &str) -> Result<String> {
    match env {
        AptEnv::Host => {
            let format = "-f=${db:Status-Status} ${Version}";
            let v = cmd!(sh, "dpkg-query -W {format} {headers}")
                .quiet()
                .ignore_stderr()
                .read()
                .unwrap_or_default();
            match v.strip_prefix("installed ") {
                Some(version) => Ok(version.to_string()),
                None => bail!(
                    "{headers} is not installed on the host: run `cargo xtask deps --kernel {}`",
                    spec.name
                ),
            }
        }
        AptEnv::Chroot(c) => {
            c.apt_install(sh, spec.apt_target_release(), &[headers])?;
            c.read(sh, &format!("dpkg-query -W -f='${{Version}}' {headers}"), 60)
        }
    }
}

/// The static guest test program kmod/Makefile builds with `make test TEST_BIN=...`.
pub(crate) const TEST_PROGRAM: &str = "hmbtrace-test";

fn has_test_target(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Makefile")).is_ok_and(|m| m.lines().any(|l| l.starts_with("test:")))
}

fn find_modules(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "ko") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("listing {}", from.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if is_build_product(&name.to_string_lossy()) {
            continue;
        }
        let (src, dst) = (entry.path(), to.join(&name));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            std::fs::create_dir_all(&dst)?;
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            std::fs::copy(&src, &dst).with_context(|| format!("copying {}", src.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_products_are_recognised() {
        for n in ["a.o", "a.ko", "a.mod.c", ".a.o.cmd", "modules.order", "Module.symvers"] {
            assert!(is_build_product(n), "{n}");
        }
        for n in ["a.c", "Makefile", "Kbuild", "a.h"] {
            assert!(!is_build_product(n), "{n}");
        }
    }
}
