//! Bounds-checked guest memory access (every access of the model goes through here).
//! An address that is not mapped, or a range that wraps or leaves the mapped regions,
//! is an `Err(())` the caller turns into an NVMe status: never a panic.

use std::sync::atomic::Ordering;

use vm_memory::{Bytes, GuestAddress, GuestAddressSpace, GuestMemoryBackend};

use crate::GuestMem;

pub(crate) fn read(mem: &GuestMem, addr: u64, buf: &mut [u8]) -> Result<(), ()> {
    if buf.is_empty() {
        return Ok(());
    }
    addr.checked_add(buf.len() as u64).ok_or(())?;
    mem.memory().read_slice(buf, GuestAddress(addr)).map_err(|_| ())
}

pub(crate) fn write(mem: &GuestMem, addr: u64, buf: &[u8]) -> Result<(), ()> {
    if buf.is_empty() {
        return Ok(());
    }
    addr.checked_add(buf.len() as u64).ok_or(())?;
    mem.memory().write_slice(buf, GuestAddress(addr)).map_err(|_| ())
}

pub(crate) fn read_u64(mem: &GuestMem, addr: u64) -> Result<u64, ()> {
    let mut b = [0u8; 8];
    read(mem, addr, &mut b)?;
    Ok(u64::from_le_bytes(b))
}

/// A 32-bit little-endian store with release ordering: used for the CQE dword that holds
/// the phase tag, so a polling host never sees the new phase before the rest of the entry.
pub(crate) fn store_u32_release(mem: &GuestMem, addr: u64, v: u32) -> Result<(), ()> {
    if !addr.is_multiple_of(4) {
        return write(mem, addr, &v.to_le_bytes());
    }
    mem.memory()
        .store(v.to_le(), GuestAddress(addr), Ordering::Release)
        .map_err(|_| ())
}

/// Is [addr, addr + len) wholly inside mapped guest memory?
pub(crate) fn mapped(mem: &GuestMem, addr: u64, len: u64) -> bool {
    if len == 0 {
        return true;
    }
    let Some(_) = addr.checked_add(len) else { return false };
    let Ok(len) = usize::try_from(len) else { return false };
    GuestMemoryBackend::check_range(&*mem.memory(), GuestAddress(addr), len)
}
