//! The NVMe host driver patch series of kmod/patches/<kernel>/ against
//! Debian's own source of each guest kernel (`cargo xtask nvme-series` runs it).
//!
//! For each kernel of images/KERNELS: the kernel's config must build
//! NVME_CORE and BLK_DEV_NVME as modules; the series applies to the pristine
//! `linux-source-<X.Y>` of the guest kernel's exact version; `checkpatch.pl
//! --strict` of that same tree finds nothing; the headers the series adds are
//! the repository's own (one source of truth); and the patched pci.c builds
//! out of tree, W=1 -Werror, into a replacement nvme.ko against the kernel's
//! headers. See docs/kmod.md ("The real-device path").

use super::fetch::{self, ResolvedKernel};
use super::kernels::KernelSpec;
use super::linux_source;
use crate::host::apt::{self, Need};
use crate::host::apt_env::AptEnv;
use crate::host::chroot::ProcMount;
use crate::host::keyed_dir::KeyedDir;
use crate::host::stamp::Fingerprint;
use crate::host::{cache_dir, lock_cache, workspace_root};
use anyhow::{bail, ensure, Context, Result};
use std::path::{Path, PathBuf};
use xshell::{cmd, Shell};

/// Files of drivers/nvme/host/ the replacement nvme.ko is built from.
pub(crate) const DRIVER_FILES: &[&str] = &["pci.c", "pci-hmb-trace.c", "pci-hmb-trace.h", "nvme.h", "trace.h"];

/// Headers the series adds to the kernel tree, each the copy of a file of kmod/.
pub(crate) const SHARED_HEADERS: &[&str] = &["include/uapi/linux/nvme_hmb_trace.h", "include/linux/nvme-hmb-trace.h"];

/// Driver files the series adds, from kmod/nvme/ (pci-hmb-trace.c after
/// the kernel's compat lines, `nvme_series_gen::COMPAT`).
pub(crate) const DRIVER_SOURCES: &[&str] = &["pci-hmb-trace.c", "pci-hmb-trace.h"];

/// The series of one kernel line: kmod/patches/<name>/*.patch in order.
pub(crate) fn series_dir(kernel_name: &str) -> PathBuf {
    workspace_root().join("kmod/patches").join(kernel_name)
}

pub(crate) fn series_patches(kernel_name: &str) -> Result<Vec<PathBuf>> {
    let dir = series_dir(kernel_name);
    let mut patches: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("no patch series at {}", dir.display()))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "patch"))
        .collect();
    patches.sort();
    ensure!(!patches.is_empty(), "{} has no .patch files", dir.display());
    Ok(patches)
}

/// What one kernel's series produced.
pub struct SeriesOutcome {
    pub kernel: String,
    pub source: String,
    pub patched_tree: PathBuf,
    /// The replacement nvme.ko (None with --no-build).
    pub nvme_ko: Option<PathBuf>,
}

/// `prepare(.., build = true)`, skipped when a passing run was made from
/// the same series, kmod/ and kernel line (its record, keyed by them, names
/// its nvme.ko, itself in a folder keyed by its inputs): a guest run
/// needs the series' nvme.ko, not a fresh copy of the kernel tree and a
/// checkpatch pass in every test process (about 30 s each, serialised by the
/// cache lock). `cargo xtask nvme-series` always runs everything, and
/// leaves the record ([`prepare_recorded`]).
pub(crate) fn prepare_cached(sh: &Shell, spec: &KernelSpec) -> Result<SeriesOutcome> {
    let cache = cache_dir();
    let done = done_record(&cache, spec)?;
    if let Ok(text) = std::fs::read_to_string(&done) {
        let mut lines = text.lines();
        if let (Some(source), Some(ko)) = (lines.next(), lines.next()) {
            let ko = PathBuf::from(ko);
            // Its keyed folder still there, its build finished (`KeyedDir`).
            if ko.is_file() && ko.with_file_name("built").is_file() {
                return Ok(SeriesOutcome {
                    kernel: spec.name.clone(),
                    source: source.to_string(),
                    patched_tree: cache.join("nvme-series").join(spec.debian_name()).join("tree"),
                    nvme_ko: Some(ko),
                });
            }
        }
    }
    write_record(&done, prepare(sh, spec, true)?)
}

/// `prepare(.., build = true)`, always run, then recorded as
/// [`prepare_cached`] reads it: the test command's series step did every
/// check its guests' first `prepare_cached` then repeated (a copy of the
/// kernel tree, the series applied, both checkpatch passes: 7-8 s per
/// kernel; docs/performance.md, "Ninth session").
pub fn prepare_recorded(sh: &Shell, spec: &KernelSpec) -> Result<SeriesOutcome> {
    let done = done_record(&cache_dir(), spec)?;
    write_record(&done, prepare(sh, spec, true)?)
}

/// The record of a passing `prepare(.., build = true)`, keyed by the
/// series, kmod/ and the kernel line.
fn done_record(cache: &Path, spec: &KernelSpec) -> Result<PathBuf> {
    let mut fp = Fingerprint::new();
    fp.add_str(
        "kernel",
        &format!("{} {} {}", spec.name, spec.suite, spec.image_package),
    );
    if spec.debug {
        fp.add_str("debug build", &super::debug_kernel::built_id(cache, spec)?);
    }
    for p in series_patches(spec.debian_name())? {
        fp.add_file("patch", &p)?;
    }
    fp.add_tree("kmod", &workspace_root().join("kmod"), &|name| {
        super::kmod_build::is_build_product(name)
    })?;
    // Keyed by those inputs (not one file per kernel that the last run of
    // any worktree rewrote): a worktree with another series or kmod/ finds
    // its own record, never one that points at another series' nvme.ko.
    Ok(cache
        .join("nvme-series")
        .join(format!("{}-{}.done", spec.name, fp.hex())))
}

fn write_record(done: &Path, outcome: SeriesOutcome) -> Result<SeriesOutcome> {
    let ko = outcome.nvme_ko.as_ref().context("the series built no nvme.ko")?;
    // Whole or not at all: a reader never sees half a record.
    let partial = done.with_extension(format!("partial-{}", std::process::id()));
    std::fs::write(&partial, format!("{}\n{}\n", outcome.source, ko.display()))?;
    std::fs::rename(&partial, done)?;
    Ok(outcome)
}

/// Fetch, check, apply, checkpatch and (when `build`) build for one kernel.
/// A debug kernel (`6.12-debug`) takes its Debian kernel's series and
/// source; only nvme.ko is built against its own tree.
pub fn prepare(sh: &Shell, spec_to_build: &KernelSpec, build: bool) -> Result<SeriesOutcome> {
    let spec = &spec_to_build.debian();
    // The committed series is what kmod/nvme generates (one source).
    super::nvme_series_gen::check_committed(&spec.name)?;
    let cache = cache_dir();
    apt::ensure(sh, &[Need::new("perl", "runs the kernel's checkpatch.pl")])?;
    let _lock = lock_cache(&cache)?;
    let (env, resolved) = super::toolchain::ensure_toolchain(sh, spec)?;
    fetch::fetch(sh, &env, spec, &resolved, &cache)?;
    let kernel_root = cache.join("kernels").join(&spec.name).join("root");
    let config_path = linux_source::find_config(&kernel_root, &resolved.abi)?;
    let config = std::fs::read_to_string(&config_path)?;
    linux_source::check_nvme_modular(&config, &format!("kernel {} ({})", spec.name, resolved.abi))?;
    println!(
        "    {}: CONFIG_NVME_CORE=m, CONFIG_BLK_DEV_NVME=m",
        config_path.display()
    );
    let source = linux_source::fetch(sh, &env, spec, &resolved, &cache)?;
    let how = if source.downloaded { "downloaded" } else { "cached" };
    println!("    source {}={} ({how})", source.package, source.version);
    let patches = series_patches(&spec.name)?;
    let patched = apply_series(sh, &source.root, &patches, &cache.join("nvme-series").join(&spec.name))?;
    checkpatch(sh, &source.root, &patches)?;
    checkpatch_kmod(sh, &source.root)?;
    check_shared_headers(&spec.name, &patched)?;
    let nvme_ko = if build {
        Some(build_nvme_ko(sh, &env, spec_to_build, &resolved, &patched, &cache)?)
    } else {
        None
    };
    Ok(SeriesOutcome {
        kernel: spec_to_build.name.clone(),
        source: format!("{}={}", source.package, source.version),
        patched_tree: patched,
        nvme_ko,
    })
}

/// A fresh copy of the pristine tree with the series applied (`git apply`,
/// which refuses fuzz and partial hunks). Returns the patched tree.
pub(crate) fn apply_series(sh: &Shell, pristine: &Path, patches: &[PathBuf], work: &Path) -> Result<PathBuf> {
    if work.exists() {
        std::fs::remove_dir_all(work)?;
    }
    std::fs::create_dir_all(work)?;
    let tree = work.join("tree");
    cmd!(sh, "cp -a {pristine} {tree}").quiet().run()?;
    let _dir = sh.push_dir(&tree);
    // The cache usually sits inside a git work tree (target/ of a clone):
    // there `git apply` resolves the patch's paths from that repository's
    // top and silently skips every one outside the current directory, so
    // nothing would be applied. The ceiling at the work folder keeps git
    // from finding that repository: the tree is patched as a plain folder.
    let ceiling = work.canonicalize()?;
    for p in patches {
        cmd!(sh, "git apply --whitespace=error-all {p}")
            .env("GIT_CEILING_DIRECTORIES", &ceiling)
            .quiet()
            .run()
            .with_context(|| format!("{} does not apply to {}", p.display(), pristine.display()))?;
    }
    Ok(tree)
}

/// The trace module's own sources under this tree's checkpatch.pl --strict
/// (`make -C kmod checkpatch`; the Makefile says which types are ignored and why).
pub(crate) fn checkpatch_kmod(sh: &Shell, tree: &Path) -> Result<()> {
    let kmod = workspace_root().join("kmod");
    let checkpatch = tree.join("scripts/checkpatch.pl");
    cmd!(sh, "make -s -C {kmod} checkpatch CHECKPATCH={checkpatch}")
        .run()
        .with_context(|| format!("checkpatch.pl --strict ({}) on kmod/", tree.display()))?;
    Ok(())
}

/// `scripts/checkpatch.pl --strict` of the kernel's own tree over the series.
pub(crate) fn checkpatch(sh: &Shell, tree: &Path, patches: &[PathBuf]) -> Result<()> {
    let _dir = sh.push_dir(tree);
    let out = cmd!(sh, "perl scripts/checkpatch.pl --strict --color=never {patches...}")
        .quiet()
        .ignore_status()
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let verdicts = checkpatch_verdicts(&text);
    if !out.status.success() || verdicts.len() != patches.len() || verdicts.iter().any(|v| !v.is_clean()) {
        print!("{text}");
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        bail!("checkpatch.pl --strict ({}) is not clean on the series", tree.display());
    }
    println!(
        "    checkpatch --strict: {} patches, 0 errors, 0 warnings, 0 checks",
        patches.len()
    );
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub errors: u32,
    pub warnings: u32,
    pub checks: u32,
}

impl Verdict {
    pub(crate) fn is_clean(&self) -> bool {
        self.errors == 0 && self.warnings == 0 && self.checks == 0
    }
}

/// checkpatch's `total: N errors, N warnings, N checks, ...` line per patch.
pub(crate) fn checkpatch_verdicts(text: &str) -> Vec<Verdict> {
    text.lines()
        .filter_map(|l| l.strip_prefix("total: "))
        .filter_map(|rest| {
            let nums: Vec<u32> = rest
                .split(',')
                .take(3)
                .filter_map(|f| f.split_whitespace().next()?.parse().ok())
                .collect();
            match nums[..] {
                [errors, warnings, checks] => Some(Verdict {
                    errors,
                    warnings,
                    checks,
                }),
                // Without --strict checkpatch prints no checks count.
                [errors, warnings] => Some(Verdict {
                    errors,
                    warnings,
                    checks: 0,
                }),
                _ => None,
            }
        })
        .collect()
}

/// The headers the series adds are byte-identical to kmod's (the trace module
/// and the driver must agree on every layout).
pub(crate) fn check_shared_headers(kernel: &str, patched: &Path) -> Result<()> {
    let kmod = workspace_root().join("kmod");
    for h in SHARED_HEADERS {
        let ours = std::fs::read(kmod.join(h)).with_context(|| format!("kmod/{h}"))?;
        let theirs = std::fs::read(patched.join(h)).with_context(|| format!("the series adds no {h}"))?;
        ensure!(
            ours == theirs,
            "the series' {h} differs from kmod/{h}: regenerate the series (docs/kmod.md)"
        );
    }
    for f in DRIVER_SOURCES {
        let mut ours = std::fs::read_to_string(kmod.join("nvme").join(f)).with_context(|| format!("kmod/nvme/{f}"))?;
        if f.ends_with(".c") {
            ours = super::nvme_series_gen::apply_compat(kernel, &ours)?;
        }
        let at = patched.join("drivers/nvme/host").join(f);
        let theirs =
            std::fs::read_to_string(&at).with_context(|| format!("the series adds no drivers/nvme/host/{f}"))?;
        ensure!(
            ours == theirs,
            "the series' drivers/nvme/host/{f} differs from kmod/nvme/{f}: run `cargo xtask nvme-series --write`"
        );
    }
    Ok(())
}

const NVME_KBUILD: &str = "# SPDX-License-Identifier: GPL-2.0\n\
# Out-of-tree build of the patched NVMe PCI driver (generated by cargo xtask nvme-series).\n\
obj-m := nvme.o\n\
nvme-y := pci.o pci-hmb-trace.o\n\
ccflags-y := -I$(src)/include -Werror\n";

/// Build the replacement nvme.ko: pci.c, nvme.h and trace.h of the patched
/// tree plus the series' headers, against linux-headers-<abi>, W=1 -Werror.
pub(crate) fn build_nvme_ko(
    sh: &Shell,
    env: &AptEnv,
    spec: &KernelSpec,
    kernel: &ResolvedKernel,
    patched: &Path,
    cache: &Path,
) -> Result<PathBuf> {
    let (kdir, headers) = match spec.debug {
        true => super::kmod_build::kernel_dir(sh, env, spec, kernel, cache)?,
        false => {
            let headers = kernel.headers_package();
            (format!("/usr/src/{headers}"), headers)
        }
    };
    let key = nvme_ko_key(spec, kernel, &headers, &series_patches(spec.debian_name())?, patched)?;
    // One folder per key (`KeyedDir`): worktrees with other series build
    // beside this one, never over it, and a folder only ever holds its key's build.
    let (parent, inside_parent) = match env {
        AptEnv::Host => (cache.join("nvme-ko"), None),
        AptEnv::Chroot(c) => (c.host_path(CHROOT_BUILDS), Some(CHROOT_BUILDS)),
    };
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    let keyed = KeyedDir::new(&parent, &spec.name, &key);
    let build_dir = keyed.dir();
    let ko = build_dir.join("nvme.ko");
    if keyed.is_built() && ko.is_file() {
        return Ok(ko);
    }
    keyed.start()?;
    let inside = inside_parent.map(|p| {
        format!(
            "{p}/{}",
            build_dir
                .file_name()
                .expect("a keyed folder has a name")
                .to_string_lossy()
        )
    });
    for f in DRIVER_FILES {
        std::fs::copy(patched.join("drivers/nvme/host").join(f), build_dir.join(f))?;
    }
    for h in SHARED_HEADERS {
        let to = build_dir.join(h);
        std::fs::create_dir_all(to.parent().expect("header has a directory"))?;
        std::fs::copy(patched.join(h), to)?;
    }
    std::fs::write(build_dir.join("Kbuild"), NVME_KBUILD)?;
    let log = match env {
        AptEnv::Host => {
            ensure!(
                Path::new(&kdir).join("Makefile").exists(),
                "{kdir} is missing: run `cargo xtask deps --kernel {}`",
                spec.name
            );
            cmd!(sh, "timeout --foreground 600 make -C {kdir} M={build_dir} W=1 modules")
                .quiet()
                .ignore_status()
                .output()?
        }
        AptEnv::Chroot(c) => {
            let _proc = ProcMount::new(sh, c)?;
            let inside = inside.as_deref().expect("chroot build has an inside path");
            let root = &c.root;
            let script = format!("make -C {kdir} M={inside} W=1 modules");
            cmd!(sh, "timeout --foreground 600 chroot {root} /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 /bin/sh -ec {script}")
                .quiet()
                .ignore_status()
                .output()?
        }
    };
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&log.stdout),
        String::from_utf8_lossy(&log.stderr)
    );
    std::fs::write(build_dir.join("build.log"), &text)?;
    let warnings: Vec<&str> = text.lines().filter(|l| l.to_lowercase().contains("warning")).collect();
    if !log.status.success() || !warnings.is_empty() || !ko.is_file() {
        print!("{text}");
        bail!(
            "the patched nvme.ko does not build W=1 clean for kernel {} ({} warning lines)",
            spec.name,
            warnings.len()
        );
    }
    keyed.mark_built()?;
    for old in keyed.prune()? {
        println!(
            "    removed {} (an nvme.ko of other inputs, not used lately)",
            old.display()
        );
    }
    println!("    built {} (W=1 -Werror clean)", ko.display());
    Ok(ko)
}

/// Where a chroot's nvme.ko builds go, inside the chroot.
const CHROOT_BUILDS: &str = "/build/nvme-ko";

/// The key of one replacement nvme.ko: everything it is built from. The
/// kernel (its name, the resolved ABI and package version, and the headers
/// or debug tree built against), the series' patches as committed, the
/// patched driver files and headers the build compiles, and the recipe
/// (Kbuild). Another series, kernel or recipe gets another folder.
pub(crate) fn nvme_ko_key(
    spec: &KernelSpec,
    kernel: &ResolvedKernel,
    headers: &str,
    patches: &[PathBuf],
    patched: &Path,
) -> Result<Fingerprint> {
    let mut fp = Fingerprint::new();
    fp.add_str("recipe", "3")
        .add_str("kernel", &spec.name)
        .add_str("abi", &kernel.abi)
        .add_str("version", &kernel.version)
        .add_str("headers", headers)
        .add_str("kbuild", NVME_KBUILD);
    for p in patches {
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        fp.add_file(&format!("patch {name}"), p)?;
    }
    for f in DRIVER_FILES {
        fp.add_file(f, &patched.join("drivers/nvme/host").join(f))?;
    }
    for h in SHARED_HEADERS {
        fp.add_file(h, &patched.join(h))?;
    }
    Ok(fp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::images::kernels;

    /// Regression: with the cache inside a git work tree (the default,
    /// target/hmb-trace/cache of a clone) `git apply` skipped every path
    /// and "applied" nothing.
    #[test]
    fn the_series_applies_inside_a_git_work_tree() {
        let repo = tempfile::tempdir().unwrap();
        let sh = Shell::new().unwrap();
        let root = repo.path();
        cmd!(sh, "git init -q {root}").run().unwrap();
        let pristine = root.join("target/cache/source/tree");
        std::fs::create_dir_all(pristine.join("drivers")).unwrap();
        std::fs::write(pristine.join("drivers/a.c"), "int a;\n").unwrap();
        let patch = root.join("0001.patch");
        std::fs::write(
            &patch,
            "--- a/drivers/a.c\n+++ b/drivers/a.c\n@@ -1 +1 @@\n-int a;\n+int a = 1;\n\
             diff --git a/include/new.h b/include/new.h\nnew file mode 100644\n--- /dev/null\n\
             +++ b/include/new.h\n@@ -0,0 +1 @@\n+#define NEW 1\n",
        )
        .unwrap();
        let tree = apply_series(&sh, &pristine, &[patch], &root.join("target/cache/series")).unwrap();
        assert_eq!(
            std::fs::read_to_string(tree.join("drivers/a.c")).unwrap(),
            "int a = 1;\n"
        );
        assert_eq!(
            std::fs::read_to_string(tree.join("include/new.h")).unwrap(),
            "#define NEW 1\n"
        );
        // The pristine tree is untouched.
        assert_eq!(
            std::fs::read_to_string(pristine.join("drivers/a.c")).unwrap(),
            "int a;\n"
        );
    }

    /// The nvme.ko key follows every input of the build: a patch, a driver
    /// file or header of the patched tree, the kernel; the same inputs give
    /// the same key (a warm cache is found again).
    #[test]
    fn the_nvme_ko_key_changes_with_the_series_and_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let patched = dir.path().join("tree");
        for f in DRIVER_FILES {
            let p = patched.join("drivers/nvme/host").join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("/* {f} */\n")).unwrap();
        }
        for h in SHARED_HEADERS {
            let p = patched.join(h);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, format!("/* {h} */\n")).unwrap();
        }
        let patch = dir.path().join("0001-nvme-pci-hmb-trace.patch");
        std::fs::write(&patch, "--- a/x\n+++ b/x\n").unwrap();
        let spec = kernels::KernelSpec {
            name: "6.1".into(),
            suite: "bookworm".into(),
            image_package: "linux-image-amd64".into(),
            headers: kernels::Headers::Host,
            debug: false,
        };
        let kernel = ResolvedKernel {
            abi: "6.1.0-57-amd64".into(),
            version: "6.1.192-3".into(),
            packages: Vec::new(),
        };
        let headers = kernel.headers_package();
        let key = |spec: &KernelSpec, kernel: &ResolvedKernel| {
            nvme_ko_key(spec, kernel, &headers, std::slice::from_ref(&patch), &patched)
                .unwrap()
                .hex()
        };
        let base = key(&spec, &kernel);
        assert_eq!(base, key(&spec, &kernel), "same inputs, same key");
        let mut seen = vec![base.clone()];
        let mut differs = |what: &str, k: String| {
            assert!(!seen.contains(&k), "{what}: the key did not change");
            seen.push(k);
        };
        std::fs::write(&patch, "--- a/x\n+++ b/x\n@@ another series\n").unwrap();
        differs("a patch", key(&spec, &kernel));
        std::fs::write(patched.join("drivers/nvme/host/pci.c"), "/* patched otherwise */\n").unwrap();
        differs("pci.c", key(&spec, &kernel));
        std::fs::write(patched.join(SHARED_HEADERS[0]), "/* another layout */\n").unwrap();
        differs("a shared header", key(&spec, &kernel));
        let newer = ResolvedKernel {
            abi: "6.1.0-58-amd64".into(),
            ..kernel.clone()
        };
        differs("the kernel's ABI", key(&spec, &newer));
        let rebuilt = ResolvedKernel {
            version: "6.1.192-4".into(),
            ..kernel.clone()
        };
        differs("the kernel's package version", key(&spec, &rebuilt));
        let other = KernelSpec {
            name: "6.12".into(),
            ..spec.clone()
        };
        differs("the kernel line", key(&other, &kernel));
        // The folder follows the key, per kernel line.
        let cache = dir.path().join("nvme-ko");
        let mut fp = Fingerprint::new();
        fp.add_str("x", "y");
        let folder = KeyedDir::new(&cache, &spec.name, &fp).dir();
        assert_eq!(folder, cache.join(format!("6.1-{}", fp.hex())));
    }

    #[test]
    fn checkpatch_totals_are_read() {
        let text = "0001-x.patch\n---------\ntotal: 0 errors, 0 warnings, 0 checks, 120 lines checked\n\
                    0002-y.patch\ntotal: 1 errors, 2 warnings, 3 checks, 9 lines checked\n";
        let v = checkpatch_verdicts(text);
        assert_eq!(v.len(), 2);
        assert!(v[0].is_clean());
        assert_eq!(
            v[1],
            Verdict {
                errors: 1,
                warnings: 2,
                checks: 3
            }
        );
        assert!(!v[1].is_clean());
        assert!(checkpatch_verdicts("nothing here").is_empty());
    }

    #[test]
    fn every_kernel_line_has_a_series() {
        let specs = kernels::load(&workspace_root().join("images/KERNELS")).unwrap();
        for s in specs {
            let patches = series_patches(&s.name).unwrap();
            for p in &patches {
                let text = std::fs::read_to_string(p).unwrap();
                assert!(
                    text.starts_with("From "),
                    "{} is not git format-patch output",
                    p.display()
                );
                assert!(
                    text.contains("\nSigned-off-by: "),
                    "{} has no Signed-off-by",
                    p.display()
                );
            }
        }
    }
}
