//! Where the project keeps what it builds and fetches: the workspace, the
//! cargo target directory, and the cache of guest kernels, sources, chroots
//! and QEMU builds (with its lock).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The environment variable naming a shared cache folder.
pub(crate) const CACHE_ENV: &str = "HMB_TRACE_CACHE";

/// The workspace root, whichever directory cargo was started from.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("harness lives one level below the root")
        .to_path_buf()
}

/// The cargo target directory (CARGO_TARGET_DIR or <root>/target).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// target/hmb-trace/cache, or $HMB_TRACE_CACHE (e.g. to share one cache
/// between clones, as CI's fresh clone on a reused machine could).
pub fn cache_dir() -> PathBuf {
    match std::env::var_os(CACHE_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => target_dir().join("hmb-trace").join("cache"),
    }
}

/// Holds an exclusive lock on the cache: two runs never build the same entry at once.
pub struct CacheLock {
    _lock: nix::fcntl::Flock<std::fs::File>,
}

pub fn lock_cache(cache: &Path) -> Result<CacheLock> {
    std::fs::create_dir_all(cache)?;
    let path = cache.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    let lock = match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((file, _)) => {
            println!("    waiting for another run holding {}", path.display());
            nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
                .map_err(|(_, e)| e)
                .context("locking the image cache")?
        }
    };
    Ok(CacheLock { _lock: lock })
}
