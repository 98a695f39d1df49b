//! What every guest run of the project shares, whichever device it has:
//! for now the boot with its one retry (`boot`); the share protocol and
//! the emu-device child are to follow (issue 31).

pub mod boot;
