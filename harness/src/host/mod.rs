//! The host side every other part of the harness stands on: apt packages
//! (`apt`, `apt_env`), build chroots (`chroot`), the cache folder and its
//! lock (`cache`), and input stamps (`stamp`). Nothing here knows about
//! guest images, QEMU or emu-device: this is the leaf.

pub mod apt;
pub mod apt_env;
pub mod cache;
pub mod chroot;
pub mod stamp;

pub use cache::{cache_dir, lock_cache, target_dir, workspace_root, CacheLock};
