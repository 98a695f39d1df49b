//! What every guest run of the project shares, whichever device it has:
//! the boot with its one early-boot retry (`boot`) and the end of a script
//! run through the share (`share`). emu-device's child is `emu::EmuProcess`.

pub mod boot;
pub mod share;
