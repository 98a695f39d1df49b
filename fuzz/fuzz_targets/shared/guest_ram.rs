//! Guest RAM for the vfio-user targets: a memfd, as QEMU's
//! `memory-backend-memfd` hands emu-device in DMA_MAP.

use std::fs::File;

pub fn memfd(bytes: u64) -> File {
    let fd =
        nix::sys::memfd::memfd_create(c"fuzz-guest-ram", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).expect("memfd");
    let file = File::from(fd);
    file.set_len(bytes).expect("ftruncate");
    file
}
