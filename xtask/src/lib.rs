//! The project's tasks as a library: guest images, QEMU, emu-device
//! sessions and the ground-truth check, shared by `cargo xtask` and the
//! conformance suite.

pub mod boot;
pub mod conformance_cmd;
pub mod deps;
pub mod emu;
pub mod guest_script;
pub mod guest_smoke;
pub mod images;
pub mod interrupt;
pub mod nvme_series;
pub mod nvme_smoke;
pub mod phases;
pub mod qemu;
pub mod session;
pub mod test_cmd;
pub mod truth;
pub mod vectors;

/// The workspace root, whichever directory cargo was started from.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}
