//! The scenarios whose fault is a damaged or newer ring header written
//! before the daemon starts: the same on either device.

use hmb_emu_device::control::{Fault, VersionPart};

/// The fault of a header scenario, None for the others.
pub(crate) fn header_fault_of(name: &str) -> Option<Fault> {
    match name {
        "bad_magic" => Some(Fault::CorruptMagic),
        "too_new_major" => Some(Fault::BumpVersion {
            part: VersionPart::Major,
        }),
        "newer_minor" => Some(Fault::BumpVersion {
            part: VersionPart::Minor,
        }),
        _ => None,
    }
}
