//! emu-device's vfio-user backend (`emu-device/src/vfio_user/backend.rs`)
//! under a hostile client: the messages the `vfio_user` crate has decoded
//! (region reads and writes to config space, BAR0, BAR4 and absent
//! regions; DMA_MAP of a memfd at hostile addresses, offsets and sizes, or
//! without a file; DMA_UNMAP of any range or all; SET_IRQS of any index and
//! range; DEVICE_RESET), in any order, against the NVMe controller set up as
//! `emu-device serve-nvme` does (with the trace producer). The crate's own
//! decoding of socket bytes is not ours and is not fuzzed here. Never panic;
//! a read always fills its buffer; reads of absent regions are zero.
#![no_main]

#[path = "shared/guest_ram.rs"]
mod guest_ram;

use hmb_emu_device::vfio_user::nvme::traced_controller;
use hmb_emu_device::vfio_user::Backend;
use hmb_nvme::{Backing, Controller, ControllerConfig};
use libfuzzer_sys::fuzz_target;

#[path = "shared/input.rs"]
mod input;
use input::Input;
use vfio_user::{DmaMapFlags, DmaUnmapFlags, ServerBackend};

/// Guest RAM behind the mappings: small, so every input gets a fresh one.
const RAM: u64 = 256 << 10;

impl Input<'_> {
    /// Mostly small values (offsets into BARs, pages of RAM), sometimes
    /// any 64-bit value.
    fn offset(&mut self, small: u64) -> Option<u64> {
        let v = self.u64()?;
        Some(if v & 1 == 0 { (v >> 1) % small } else { v })
    }
}

fn run(mut input: Input<'_>) -> Option<()> {
    let cfg = ControllerConfig {
        // Allocated and zeroed for every input: at 1 MiB its page faults
        // were a quarter of the target's time. 256 LBAs are as many
        // boundaries to get wrong.
        namespace_bytes: 128 << 10,
        backing: Backing::Memory,
        ..ControllerConfig::default()
    };
    let vectors = cfg.interrupt_vectors;
    // As serve-nvme builds it; the trace producer lives as long as the input.
    let (shared, _trace) = traced_controller(cfg).expect("default controller");
    let mut backend = Backend::new(
        shared,
        &Controller::pci_identity().into(),
        Controller::BAR0_SIZE,
        vectors,
    );
    let ram = guest_ram::memfd(RAM);
    for _ in 0..64 {
        match input.u8()? % 8 {
            0 | 1 => {
                let region = u32::from(input.u8()? % 10);
                let offset = input.offset(0x4000)?;
                let mut data = vec![0xa5u8; input.u8()? as usize % 65];
                backend
                    .region_read(region, offset, &mut data)
                    .expect("reads are answered");
                if region != 0 && region != 7 {
                    assert!(data.iter().all(|&b| b == 0), "absent region {region} reads 0");
                }
            }
            2 | 3 => {
                let region = u32::from(input.u8()? % 10);
                let offset = input.offset(0x4000)?;
                let data = input.sized(64)?.to_vec();
                backend
                    .region_write(region, offset, &data)
                    .expect("writes are answered");
            }
            4 => {
                let flags = DmaMapFlags::from_bits_truncate(input.u8()?.into());
                let file_offset = input.offset(RAM)? & !0xfff;
                let address = input.offset(1 << 32)? & !0xfff;
                let size = input.offset(RAM + 0x2000)?;
                let fd = if input.u8()? & 3 != 0 {
                    Some(ram.try_clone().expect("dup"))
                } else {
                    None
                };
                backend
                    .dma_map(flags, file_offset, address, size, fd)
                    .expect("maps are answered");
            }
            5 => {
                let flags = DmaUnmapFlags::from_bits_truncate(input.u8()?.into());
                let address = input.offset(1 << 32)?;
                let size = input.offset(RAM)?;
                backend.dma_unmap(flags, address, size).expect("unmaps are answered");
            }
            6 => backend.reset().expect("resets are answered"),
            _ => {
                let index = u32::from(input.u8()? % 6);
                let flags = u32::from(input.u8()?);
                let start = u32::from(input.u8()?);
                let count = u32::from(input.u8()?);
                backend
                    .set_irqs(index, flags, start, count, Vec::new())
                    .expect("set_irqs is answered");
            }
        }
    }
    Some(())
}

fuzz_target!(|bytes: &[u8]| {
    let _ = run(Input(bytes));
});
