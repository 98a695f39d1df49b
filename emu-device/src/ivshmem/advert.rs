//! The handshake with the kernel module: the advert at HMB offset 0 says
//! where the trace slice is and which ring epoch it carries.
//!
//! The module writes the ring header, then the advert fields, then the
//! advert `state` = READY last with a release store, then rings the doorbell.
//! The device loads `state` with acquire, so everything before it is visible.

use std::sync::atomic::Ordering;

use hmb_trace_abi::{
    check_compat, hmb_advert, hmb_device_block, hmb_ring_hdr, HMB_ADVERT_MAGIC, HMB_ADVERT_OFFSET,
    HMB_ADVERT_STATE_READY, HMB_DEVICE_MAGIC, HMB_DEVICE_OFFSET, HMB_RING_FLAG_FROZEN, HMB_RING_HDR_SIZE,
    HMB_TRACE_SLICE_ALIGN,
};
use zerocopy::FromBytes;

use crate::error::EmuError;
use crate::ivshmem::hmb::MemRegion;

/// Byte offset of `state` inside the advert.
const ADVERT_STATE_OFF: usize = HMB_ADVERT_OFFSET as usize + core::mem::offset_of!(hmb_advert, state);

/// Byte offset of the device block's `ack_generation`.
const ACK_OFF: usize = HMB_DEVICE_OFFSET as usize + core::mem::offset_of!(hmb_device_block, ack_generation);
/// Byte offset of the advert's `generation`.
const GENERATION_OFF: usize = HMB_ADVERT_OFFSET as usize + core::mem::offset_of!(hmb_advert, generation);

/// Power-on: store the device's opt-in signature in its block. The module
/// binds only to an HMB that carries it.
pub(crate) fn announce(mem: &MemRegion) -> Result<(), EmuError> {
    mem.store_u32(HMB_DEVICE_OFFSET as usize, HMB_DEVICE_MAGIC)
}

/// The advert's generation, if it has the advert magic at all.
pub(crate) fn advert_generation(mem: &MemRegion) -> Option<u64> {
    let magic = mem.load_u32(HMB_ADVERT_OFFSET as usize).ok()?;
    (magic == HMB_ADVERT_MAGIC)
        .then(|| mem.load_u64(GENERATION_OFF).ok())
        .flatten()
}

/// The device has stopped writing the slice of `generation`: tell the
/// module (release, so every store to the old slice is visible first).
pub(crate) fn acknowledge(mem: &MemRegion, generation: u64) -> Result<(), EmuError> {
    mem.atomic_u64(ACK_OFF)?.store(generation, Ordering::Release);
    Ok(())
}

/// The generation last acknowledged.
pub(crate) fn acknowledged(mem: &MemRegion) -> u64 {
    mem.atomic_u64(ACK_OFF).map(|a| a.load(Ordering::Acquire)).unwrap_or(0)
}

/// A trace slice the device may produce into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slice {
    pub offset: u64,
    pub len: u64,
    pub epoch: u64,
    pub ring_size: u64,
}

/// Why an advert is not (yet) usable. `NotReady` is normal while the
/// module loads; the others are the module's or memory's fault.
fn reject(msg: String) -> EmuError {
    EmuError::Handshake(msg)
}

/// Whether the advert no longer offers a ring: the module withdrew it
/// (state not READY) before unloading or re-initialising, or it is gone.
pub(crate) fn withdrawn(mem: &MemRegion) -> bool {
    let magic = mem.load_u32(HMB_ADVERT_OFFSET as usize).unwrap_or(0);
    let state = mem
        .atomic_u32(ADVERT_STATE_OFF)
        .map(|a| a.load(Ordering::Acquire))
        .unwrap_or(0);
    magic != HMB_ADVERT_MAGIC || state != HMB_ADVERT_STATE_READY
}

/// Read and check the advert and the ring header it points at.
///
/// `min_generation`: after a reset the device needs a strictly newer ring,
/// so it passes the last generation + 1; at start it passes 0.
pub(crate) fn read_advert(mem: &MemRegion, min_generation: u64) -> Result<Slice, EmuError> {
    let state = mem.atomic_u32(ADVERT_STATE_OFF)?.load(Ordering::Acquire);
    let mut raw = [0u8; core::mem::size_of::<hmb_advert>()];
    mem.read(HMB_ADVERT_OFFSET as usize, &mut raw)?;
    let adv = hmb_advert::read_from_bytes(&raw).map_err(|_| reject("advert does not fit".into()))?;
    if adv.magic.get() != HMB_ADVERT_MAGIC {
        return Err(reject(format!(
            "advert magic {:#010x}, expected {HMB_ADVERT_MAGIC:#010x}",
            adv.magic.get()
        )));
    }
    if state != HMB_ADVERT_STATE_READY {
        return Err(reject(format!("advert state {state} is not READY")));
    }
    let generation = adv.generation.get();
    if generation < min_generation {
        return Err(reject(format!(
            "advert generation {generation} is older than {min_generation}"
        )));
    }
    let (offset, len) = (adv.slice_offset.get(), adv.slice_len.get());
    if !offset.is_multiple_of(HMB_TRACE_SLICE_ALIGN) || offset < HMB_TRACE_SLICE_ALIGN {
        return Err(reject(format!(
            "slice offset {offset} is not a non-zero multiple of {HMB_TRACE_SLICE_ALIGN}"
        )));
    }
    match offset.checked_add(len) {
        Some(end) if end <= mem.len() as u64 => {}
        _ => {
            return Err(reject(format!(
                "slice [{offset}, +{len}) is outside the {}-byte HMB",
                mem.len()
            )))
        }
    }
    let mut hdr_raw = [0u8; core::mem::size_of::<hmb_ring_hdr>()];
    mem.read(offset as usize, &mut hdr_raw)?;
    let hdr = hmb_ring_hdr::read_from_bytes(&hdr_raw).map_err(|_| reject("ring header does not fit".into()))?;
    check_compat(&hdr).map_err(|e| reject(format!("ring header: {e}")))?;
    let ring_size = hdr.ring_size.get();
    if len != HMB_RING_HDR_SIZE as u64 + ring_size {
        return Err(reject(format!(
            "slice length {len} is not {HMB_RING_HDR_SIZE} + ring size {ring_size}"
        )));
    }
    if hdr.epoch.get() != generation {
        return Err(reject(format!(
            "advert generation {generation} but ring epoch {}",
            hdr.epoch.get()
        )));
    }
    if hdr.flags.get() & HMB_RING_FLAG_FROZEN != 0 {
        return Err(reject(
            "ring is FROZEN: waiting for the module to re-initialise it".into(),
        ));
    }
    Ok(Slice {
        offset,
        len,
        epoch: generation,
        ring_size,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ivshmem::hmb::Hmb;
    use hmb_trace_abi::{HMB_ADVERT_STATE_NONE, HMB_RING_MIN_SIZE};
    use zerocopy::IntoBytes;

    /// Do what the module does: ring header, advert fields, then READY.
    pub(crate) fn module_advertise(hmb: &MemRegion, offset: u64, ring_size: u64, epoch: u64) {
        let hdr = hmb_ring_hdr::initialised(ring_size, epoch);
        hmb.write(offset as usize, hdr.as_bytes()).unwrap();
        let adv = hmb_advert {
            magic: HMB_ADVERT_MAGIC.into(),
            state: HMB_ADVERT_STATE_NONE.into(),
            generation: epoch.into(),
            slice_offset: offset.into(),
            slice_len: (HMB_RING_HDR_SIZE as u64 + ring_size).into(),
            ..Default::default()
        };
        hmb.write(0, adv.as_bytes()).unwrap();
        hmb.store_u32(ADVERT_STATE_OFF, HMB_ADVERT_STATE_READY).unwrap();
    }

    fn hmb() -> Hmb {
        Hmb::create(1 << 20).unwrap()
    }

    #[test]
    fn a_proper_advert_gives_the_slice() {
        let h = hmb();
        module_advertise(&h, 4096, HMB_RING_MIN_SIZE as u64, 3);
        let s = read_advert(&h, 0).unwrap();
        assert_eq!(
            s,
            Slice {
                offset: 4096,
                len: 4096 + 8192,
                epoch: 3,
                ring_size: 8192
            }
        );
        assert!(read_advert(&h, 4).is_err(), "generation must be newer after a reset");
    }

    #[test]
    fn announce_and_acknowledge_use_the_device_block() {
        let h = hmb();
        announce(&h).unwrap();
        assert_eq!(h.load_u32(64).unwrap(), HMB_DEVICE_MAGIC);
        assert_eq!(advert_generation(&h), None, "no advert magic yet");
        module_advertise(&h, 4096, HMB_RING_MIN_SIZE as u64, 7);
        assert_eq!(advert_generation(&h), Some(7));
        acknowledge(&h, 7).unwrap();
        assert_eq!((acknowledged(&h), h.load_u64(72).unwrap()), (7, 7));
        // The advert itself is untouched.
        assert_eq!(read_advert(&h, 0).unwrap().epoch, 7);
    }

    #[test]
    fn zeroed_memory_is_not_ready() {
        let h = hmb();
        let e = read_advert(&h, 0).unwrap_err().to_string();
        assert!(e.contains("magic"), "{e}");
    }

    #[test]
    fn each_inconsistency_is_rejected() {
        type Spoil = Box<dyn Fn(&Hmb)>;
        let cases: Vec<(&str, Spoil)> = vec![
            (
                "not READY",
                Box::new(|h: &Hmb| h.store_u32(ADVERT_STATE_OFF, HMB_ADVERT_STATE_NONE).unwrap()),
            ),
            ("outside", Box::new(|h: &Hmb| h.store_u64(16, 1 << 20).unwrap())),
            ("multiple", Box::new(|h: &Hmb| h.store_u64(16, 100).unwrap())),
            ("multiple", Box::new(|h: &Hmb| h.store_u64(16, 0).unwrap())),
            (
                "slice length",
                Box::new(|h: &Hmb| h.store_u64(24, 4096 + 16384).unwrap()),
            ),
            ("epoch", Box::new(|h: &Hmb| h.store_u64(8, 9).unwrap())),
            ("magic", Box::new(|h: &Hmb| h.store_u32(4096, 0xdead).unwrap())),
            ("major", Box::new(|h: &Hmb| h.store_u16(4096 + 4, 2).unwrap())),
            (
                "FROZEN",
                Box::new(|h: &Hmb| h.store_u32(4096 + 64 + 8, HMB_RING_FLAG_FROZEN).unwrap()),
            ),
            ("outside", Box::new(|h: &Hmb| h.store_u64(24, u64::MAX - 10).unwrap())),
        ];
        for (want, spoil) in cases {
            let h = hmb();
            module_advertise(&h, 4096, 8192, 1);
            spoil(&h);
            let e = read_advert(&h, 0).unwrap_err().to_string();
            assert!(e.contains(want), "expected {want:?} in {e:?}");
        }
    }
}
