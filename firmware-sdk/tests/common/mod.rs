//! A trace slice in an 8-aligned buffer, with the module's operations done
//! by the Rust reference (abi::reference::RefRing) on its bytes.
#![allow(dead_code)]

use hmb_firmware_sdk::CProducer;
use hmb_trace_abi::reference::RefRing;
use hmb_trace_abi::{hmb_ring_hdr, offsets, HMB_RING_HDR_SIZE};

pub struct Slice {
    buf: Vec<u64>,
}

impl Slice {
    /// A freshly initialised ring (the module's init) of `ring_size` bytes.
    pub fn new(ring_size: u64, epoch: u64) -> Self {
        let mut s = Self {
            buf: vec![0u64; (HMB_RING_HDR_SIZE as usize + ring_size as usize) / 8],
        };
        s.bytes_mut().copy_from_slice(&RefRing::new(ring_size, epoch).image);
        s
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a u64 buffer viewed as bytes.
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr() as *const u8, self.buf.len() * 8) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in bytes().
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr() as *mut u8, self.buf.len() * 8) }
    }

    /// A C producer over this slice (not attached yet).
    pub fn producer(&mut self, log: bool) -> CProducer {
        let len = self.buf.len() * 8;
        // SAFETY: the buffer is never reallocated and outlives the producer
        // in every test (declared before it).
        unsafe { CProducer::new(self.buf.as_mut_ptr() as *mut u8, len, log) }
    }

    fn with_ref(&mut self, f: impl FnOnce(&mut RefRing)) {
        let mut r = RefRing {
            image: self.bytes().to_vec(),
        };
        f(&mut r);
        self.bytes_mut().copy_from_slice(&r.image);
    }

    pub fn hdr(&self) -> hmb_ring_hdr {
        RefRing {
            image: self.bytes()[..HMB_RING_HDR_SIZE as usize].to_vec(),
        }
        .hdr()
    }

    pub fn set_hdr(&mut self, hdr: &hmb_ring_hdr) {
        self.with_ref(|r| r.set_hdr(hdr));
    }

    pub fn publish_tail(&mut self, tail: u64) {
        self.bytes_mut()[offsets::TAIL..offsets::TAIL + 8].copy_from_slice(&tail.to_le_bytes());
    }

    pub fn reinit(&mut self) {
        self.with_ref(|r| r.reinit());
    }
}
