//! The one seam between ring code and the memory it shares.
//!
//! The producer (`hmb-firmware-model`), the consumer (`hmb-trace-consumer`)
//! and the host stand-ins for the module reach a trace slice through raw
//! pointers into a mapping. Every access another party may race with goes
//! through this module:
//!
//! * [`atomic_u64`] / [`atomic_u32`]: a header field as an atomic;
//! * [`read_header`] / [`write_header`]: the whole header as plain bytes
//!   (identity fields, and the owner's (re)initialisation);
//! * [`note_read`] / [`note_write`]: record bytes about to be (or just)
//!   read or written with plain copies.
//!
//! In normal builds these are the pointer casts and volatile copies the code
//! always did, and the notes compile to nothing. Under `--cfg loom` they are
//! backed by a [`model::LoomSlice`]: header fields become `loom` atomics
//! (so the model checker explores every value each load may return under
//! the orderings used) and every 8-byte granule of the slice gets a
//! `loom::cell::UnsafeCell`, so a plain read or write of record bytes that
//! is not ordered by happens-before against the other side's access is
//! reported as a causality violation. The producer and consumer code being
//! checked is therefore the product's own, not a copy (docs/memory-model.md).

use crate::layout::hmb_ring_hdr;

#[cfg(loom)]
pub use loom::sync::atomic::{AtomicU32, AtomicU64};
#[cfg(not(loom))]
pub use std::sync::atomic::{AtomicU32, AtomicU64};

/// The u64 header field at `p` as an atomic.
///
/// # Safety
/// `p` must be 8-aligned and stay mapped for `'a`; every concurrent access
/// to those 8 bytes must be atomic.
#[inline]
pub unsafe fn atomic_u64<'a>(p: *const u8) -> &'a AtomicU64 {
    #[cfg(not(loom))]
    {
        &*(p as *const AtomicU64)
    }
    #[cfg(loom)]
    {
        model::atomic_u64(p)
    }
}

/// The u32 header field at `p` (flags) as an atomic.
///
/// # Safety
/// As [`atomic_u64`], 4-aligned.
#[inline]
pub unsafe fn atomic_u32<'a>(p: *const u8) -> &'a AtomicU32 {
    #[cfg(not(loom))]
    {
        &*(p as *const AtomicU32)
    }
    #[cfg(loom)]
    {
        model::atomic_u32(p)
    }
}

/// `len` bytes at `p` are read with plain loads (record bytes handed out).
#[inline]
pub fn note_read(p: *const u8, len: usize) {
    #[cfg(loom)]
    model::note(p, len, false);
    let _ = (p, len);
}

/// `len` bytes at `p` are written with plain stores (record bytes, zeroing).
#[inline]
pub fn note_write(p: *const u8, len: usize) {
    #[cfg(loom)]
    model::note(p, len, true);
    let _ = (p, len);
}

/// A copy of the ring header at `p`. The fields other parties store
/// concurrently are only a snapshot; callers trust the identity fields.
///
/// # Safety
/// `p` must point at a mapped ring header.
#[inline]
pub unsafe fn read_header(p: *const u8) -> hmb_ring_hdr {
    note_read(p, core::mem::size_of::<hmb_ring_hdr>());
    #[allow(unused_mut)] // patched under loom
    let mut hdr = core::ptr::read_volatile(p as *const hmb_ring_hdr);
    #[cfg(loom)]
    model::patch_snapshot(p, &mut hdr);
    hdr
}

/// Overwrite the ring header at `p` (the ring owner, at (re)initialisation).
///
/// # Safety
/// `p` must point at a mapped, writable ring header.
#[inline]
pub unsafe fn write_header(p: *mut u8, hdr: &hmb_ring_hdr) {
    note_write(p, core::mem::size_of::<hmb_ring_hdr>());
    core::ptr::write_volatile(p as *mut hmb_ring_hdr, *hdr);
    #[cfg(loom)]
    model::store_fields(p, hdr);
}

/// The model checker's backing of a trace slice (`--cfg loom` only).
#[cfg(loom)]
pub mod model {
    use std::alloc::{alloc_zeroed, dealloc, Layout};
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::{Arc, Mutex, Weak};

    use loom::cell::UnsafeCell;
    use zerocopy::little_endian::{U32, U64};

    use super::{AtomicU32, AtomicU64};
    use crate::layout::{hmb_ring_hdr, offsets};

    /// The header fields accessed atomically (docs/abi.md): each lives in a
    /// loom atomic, not in the slice's bytes.
    const U64_FIELDS: [usize; 6] = [
        offsets::EPOCH,
        offsets::HEAD,
        offsets::NEXT_SEQ,
        offsets::DROPPED_RECORDS,
        offsets::OVERFLOW_EVENTS,
        offsets::TAIL,
    ];

    /// A trace slice for one loom execution: real bytes (what the code under
    /// test reads and writes through its raw pointers), loom atomics for the
    /// header fields and one loom cell per 8-byte granule to check that
    /// plain accesses are ordered.
    pub struct LoomSlice {
        base: *mut u8,
        len: usize,
        u64s: Vec<(usize, AtomicU64)>,
        flags: AtomicU32,
        granules: Vec<UnsafeCell<()>>,
    }

    // SAFETY: the raw bytes are only reached through the code under test,
    // whose accesses this type exists to check; the loom objects are Sync.
    unsafe impl Send for LoomSlice {}
    unsafe impl Sync for LoomSlice {}

    static SLICES: Mutex<Vec<(usize, usize, Weak<LoomSlice>)>> = Mutex::new(Vec::new());

    impl LoomSlice {
        /// A zeroed slice of `len` bytes (header page + data area), made
        /// inside `loom::model` and registered so that [`super::atomic_u64`]
        /// and the notes find it from its address.
        pub fn new(len: usize) -> Arc<Self> {
            let layout = Layout::from_size_align(len.max(8), 8).expect("slice layout");
            // SAFETY: non-zero size.
            let base = unsafe { alloc_zeroed(layout) };
            assert!(!base.is_null(), "out of memory");
            let slice = Arc::new(Self {
                base,
                len,
                u64s: U64_FIELDS.iter().map(|&o| (o, AtomicU64::new(0))).collect(),
                flags: AtomicU32::new(0),
                granules: (0..len.div_ceil(8)).map(|_| UnsafeCell::new(())).collect(),
            });
            let mut reg = SLICES.lock().unwrap_or_else(|e| e.into_inner());
            // Slices of finished executions (or of a panicked one) go.
            reg.retain(|(_, _, w)| w.strong_count() > 0);
            reg.push((base as usize, len, Arc::downgrade(&slice)));
            slice
        }

        pub fn base(&self) -> *mut u8 {
            self.base
        }

        pub fn len(&self) -> usize {
            self.len
        }

        pub fn is_empty(&self) -> bool {
            self.len == 0
        }
    }

    impl Drop for LoomSlice {
        fn drop(&mut self) {
            let layout = Layout::from_size_align(self.len.max(8), 8).expect("slice layout");
            // SAFETY: allocated in `new` with this layout.
            unsafe { dealloc(self.base, layout) };
        }
    }

    /// The registered slice holding `p`, and `p`'s offset in it.
    fn find(p: *const u8) -> (&'static LoomSlice, usize) {
        let addr = p as usize;
        let reg = SLICES.lock().unwrap_or_else(|e| e.into_inner());
        for (base, len, w) in reg.iter() {
            if addr >= *base && addr < base + len {
                if let Some(s) = w.upgrade() {
                    // SAFETY: the caller's contract (the mapping outlives the
                    // access) is the test keeping its Arc alive; the Arc's
                    // contents do not move.
                    let s: &'static LoomSlice = unsafe { &*Arc::as_ptr(&s) };
                    return (s, addr - base);
                }
            }
        }
        panic!("{addr:#x} is in no LoomSlice: under cfg(loom) rings must be built on one");
    }

    fn is_atomic_field(off: usize) -> bool {
        off == offsets::FLAGS || U64_FIELDS.contains(&off)
    }

    pub(super) fn atomic_u64(p: *const u8) -> &'static AtomicU64 {
        let (s, off) = find(p);
        match s.u64s.iter().find(|(o, _)| *o == off) {
            Some((_, a)) => a,
            None => panic!("offset {off} is not an atomic u64 header field"),
        }
    }

    pub(super) fn atomic_u32(p: *const u8) -> &'static AtomicU32 {
        let (s, off) = find(p);
        assert_eq!(off, offsets::FLAGS, "offset {off} is not an atomic u32 header field");
        &s.flags
    }

    /// Register a plain access to every granule `[p, p + len)` touches,
    /// except those of atomic header fields (`flags` shares its granule
    /// with `reserved1`, which nobody writes during operation).
    pub(super) fn note(p: *const u8, len: usize, write: bool) {
        if len == 0 {
            return;
        }
        let (s, off) = find(p);
        let end = off.saturating_add(len).min(s.len);
        for g in off / 8..end.div_ceil(8) {
            if is_atomic_field(g * 8) {
                continue;
            }
            if write {
                s.granules[g].with_mut(|_| ());
            } else {
                s.granules[g].with(|_| ());
            }
        }
    }

    /// A plain copy of the header races with the atomic fields' stores; as
    /// the model, each of them reads what a relaxed load may return.
    pub(super) fn patch_snapshot(p: *const u8, hdr: &mut hmb_ring_hdr) {
        let (s, off) = find(p);
        assert_eq!(off, 0, "a header snapshot starts at the slice");
        for (o, a) in &s.u64s {
            let v: U64 = a.load(Relaxed).into();
            match *o {
                offsets::EPOCH => hdr.epoch = v,
                offsets::HEAD => hdr.head = v,
                offsets::NEXT_SEQ => hdr.next_seq = v,
                offsets::DROPPED_RECORDS => hdr.dropped_records = v,
                offsets::OVERFLOW_EVENTS => hdr.overflow_events = v,
                offsets::TAIL => hdr.tail = v,
                _ => unreachable!("field list"),
            }
        }
        hdr.flags = U32::new(s.flags.load(Relaxed));
    }

    /// The owner's header write, field by field, for the atomic fields.
    pub(super) fn store_fields(p: *const u8, hdr: &hmb_ring_hdr) {
        let (s, off) = find(p);
        assert_eq!(off, 0, "a header write starts at the slice");
        for (o, a) in &s.u64s {
            let v = match *o {
                offsets::EPOCH => hdr.epoch,
                offsets::HEAD => hdr.head,
                offsets::NEXT_SEQ => hdr.next_seq,
                offsets::DROPPED_RECORDS => hdr.dropped_records,
                offsets::OVERFLOW_EVENTS => hdr.overflow_events,
                offsets::TAIL => hdr.tail,
                _ => unreachable!("field list"),
            };
            a.store(v.get(), Relaxed);
        }
        s.flags.store(hdr.flags.get(), Relaxed);
    }
}
