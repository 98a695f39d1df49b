//! ioctl request numbers, computed the way Linux's asm-generic `_IOC` does
//! (x86, arm64 and riscv share it).

use crate::layout::{hmb_trace_chunk, hmb_trace_info, hmb_trace_stats};

/// Unassigned in the kernel's ioctl-number.rst (0xB7 belongs to remoteproc and nsfs).
pub const HMB_TRACE_IOC_MAGIC: u8 = 0xBC;

const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

const fn ioc(dir: u32, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((HMB_TRACE_IOC_MAGIC as u32) << 8) | nr as u32
}

pub const HMB_TRACE_IOC_GET_INFO: u32 = ioc(IOC_READ, 0x01, core::mem::size_of::<hmb_trace_info>());
pub const HMB_TRACE_IOC_PUBLISH_TAIL: u32 = ioc(IOC_WRITE, 0x02, core::mem::size_of::<u64>());
/// `_IOWR`: the module reads the argument (a bad pointer fails before anything
/// changes) and writes the new epoch back.
pub const HMB_TRACE_IOC_REINIT: u32 = ioc(IOC_READ | IOC_WRITE, 0x03, core::mem::size_of::<u64>());
pub const HMB_TRACE_IOC_GET_STATS: u32 = ioc(IOC_READ, 0x04, core::mem::size_of::<hmb_trace_stats>());
/// `_IOWR`: the module reads `index` and fills `offset` and `len`.
pub const HMB_TRACE_IOC_GET_CHUNK: u32 = ioc(IOC_READ | IOC_WRITE, 0x05, core::mem::size_of::<hmb_trace_chunk>());
