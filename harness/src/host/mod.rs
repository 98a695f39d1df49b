//! The host side every other part of the harness stands on: apt packages
//! (`apt`, `apt_env`), build chroots (`chroot`), the cache folder and its
//! lock (`cache`), input stamps (`stamp`) and outputs in folders named by
//! their inputs (`keyed_dir`). Nothing here knows about
//! guest images, QEMU or emu-device: this is the leaf.

pub mod apt;
pub mod apt_env;
pub mod cache;
pub mod chroot;
pub(crate) mod keyed_dir;
pub mod stamp;

pub use cache::{cache_dir, lock_cache, target_dir, workspace_root, CacheLock};

/// The host's 1, 5 and 15 minute load averages (`/proc/loadavg`), for
/// the figures of a long run.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
