//! A guest kernel's toolchain: the apt environment (host or chroot), its
//! package lists fresh enough, the kernel resolved to concrete packages,
//! and the headers installed. Used by `images::prepare`, `nvme_series` and
//! `cargo xtask deps`.

use super::fetch;
use super::kernels::KernelSpec;
use crate::host::apt::{self, Need};
use crate::host::apt_env::AptEnv;
use crate::host::cache_dir;
use anyhow::Result;
use xshell::Shell;

/// Package lists older than this are refreshed before resolving a kernel.
const APT_LISTS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(7 * 86400);

/// A kernel's toolchain: backports source and headers on the host, or the
/// chroot with the headers inside. Returns where apt runs
/// for this kernel and the concrete packages. Used by `deps` and `image`.
pub fn ensure_toolchain(sh: &Shell, spec: &KernelSpec) -> Result<(AptEnv, fetch::ResolvedKernel)> {
    let cache = cache_dir();
    let env = spec.apt_env(&cache);
    match &env {
        AptEnv::Host => {
            if spec.apt_target_release().is_some() {
                apt::ensure_backports_source(sh, spec.codename())?;
            }
        }
        AptEnv::Chroot(c) => {
            if c.ensure(sh)? {
                println!("    built {}", c.root.display());
            }
        }
    }
    env.refresh_if_stale(sh, APT_LISTS_MAX_AGE)?;
    let resolved = fetch::resolve_cached(sh, &env, spec, &cache)?;
    let headers = resolved.headers_package();
    let release = spec.apt_target_release();
    match &env {
        AptEnv::Host => {
            let mut need = Need::new(
                &headers,
                &format!("headers of guest kernel {} to build the module", spec.name),
            );
            need.release = release.map(str::to_string);
            apt::ensure(sh, &[need])?;
        }
        AptEnv::Chroot(c) => c.apt_install(sh, release, &[headers.as_str()])?,
    }
    Ok((env, resolved))
}
