//! Host side of the freestanding C producer in this directory
//! (`include/hmb_trace_fw.h`, `src/hmb_trace_fw.c`): build.rs compiles it
//! with the firmware's flags, this crate calls it through FFI with hooks
//! that write plain host memory, and the tests hold it to the Rust
//! reference producer (golden vectors) and the Rust consumer (two threads).
//!
//! The hooks here model a DMA engine: every `write` and `read` the library
//! issues is checked against the slice bounds and the producer's write
//! permissions (only the producer's header line and the data area) and can
//! be logged, so tests can assert how `head` reaches the host.

pub mod events;

use std::ffi::c_void;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use hmb_trace_abi::{offsets, HMB_RING_HDR_SIZE};

/// `hmbt_hooks` of the C header. Checked against the C `sizeof` in
/// [`CProducer::new`].
#[repr(C)]
struct Hooks {
    write: Option<unsafe extern "C" fn(*mut c_void, u64, *const c_void, u32)>,
    read: Option<unsafe extern "C" fn(*mut c_void, u64, *mut c_void, u32)>,
    fence: Option<unsafe extern "C" fn(*mut c_void)>,
    timestamp_ns: Option<unsafe extern "C" fn(*mut c_void) -> u64>,
    ctx: *mut c_void,
}

extern "C" {
    fn hmbt_attach(p: *mut c_void, hooks: *const Hooks, slice: u64, slice_len: u64, generation: u64) -> i32;
    fn hmbt_emit_ts(p: *mut c_void, opcode: u16, source: u32, ts: u64, payload: *const c_void, len: u32) -> i32;
    fn hmbt_emit(p: *mut c_void, opcode: u16, source: u32, payload: *const c_void, len: u32) -> i32;
    fn hmbt_freeze(p: *mut c_void);
    fn hmbt_detach(p: *mut c_void);
    fn hmbt_test_sizeof_producer() -> usize;
    fn hmbt_test_alignof_producer() -> usize;
    fn hmbt_test_sizeof_hooks() -> usize;
    fn hmbt_ffi_head(p: *const c_void) -> u64;
    fn hmbt_ffi_next_seq(p: *const c_void) -> u64;
    fn hmbt_ffi_dropped(p: *const c_void) -> u64;
    fn hmbt_ffi_epoch(p: *const c_void) -> u64;
    fn hmbt_ffi_ring_size(p: *const c_void) -> u64;
    fn hmbt_ffi_is_frozen(p: *const c_void) -> i32;
}

/// `hmbt_attach` refused the ring (the C `enum hmbt_attach_err`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    #[error("bad argument or missing hook")]
    Arg,
    #[error("ring magic is wrong")]
    Magic,
    #[error("ring major version is not 1")]
    Version,
    #[error("ring geometry (hdr_size, max_record, ring_size, slice_len) is wrong")]
    Geometry,
    #[error("ring epoch differs from the advert's generation")]
    Epoch,
    #[error("head/tail in the header are not a valid window")]
    Window,
    #[error("ring is FROZEN")]
    Frozen,
    #[error("unknown attach result {0}")]
    Unknown(i32),
}

impl AttachError {
    fn from_code(code: i32) -> Result<(), AttachError> {
        Err(match code {
            0 => return Ok(()),
            -1 => Self::Arg,
            -2 => Self::Magic,
            -3 => Self::Version,
            -4 => Self::Geometry,
            -5 => Self::Epoch,
            -6 => Self::Window,
            -7 => Self::Frozen,
            other => Self::Unknown(other),
        })
    }
}

/// Outcome of one `hmbt_emit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emitted {
    Written,
    Dropped,
    Frozen,
}

/// One host-memory access the library made through its hooks, as an offset
/// in the trace slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Write { off: u64, len: u32 },
    Read { off: u64, len: u32 },
    Fence,
}

/// The "DMA engine": bounds, write permissions, an optional access log and
/// a counter of refused accesses (a hook must not unwind into C).
struct HookCtx {
    base: u64,
    len: u64,
    log: Option<Mutex<Vec<Access>>>,
    violations: AtomicU64,
    clock: AtomicU64,
}

impl HookCtx {
    fn note(&self, a: Access) {
        if let Some(log) = &self.log {
            log.lock().unwrap_or_else(|e| e.into_inner()).push(a);
        }
    }

    /// Offset of `[addr, addr + len)` in the slice, if inside it.
    fn offset(&self, addr: u64, len: u32) -> Option<u64> {
        let off = addr.checked_sub(self.base)?;
        (off.checked_add(len as u64)? <= self.len).then_some(off)
    }
}

/// The producer may write its header line (offsets 64..128) and the data area.
fn producer_may_write(off: u64, len: u32) -> bool {
    let end = off + len as u64;
    let line = offsets::HEAD as u64..offsets::HEAD as u64 + 64;
    (off >= line.start && end <= line.end) || off >= HMB_RING_HDR_SIZE as u64
}

unsafe extern "C" fn hook_write(ctx: *mut c_void, addr: u64, src: *const c_void, len: u32) {
    // SAFETY: ctx is the HookCtx CProducer owns for as long as C holds it.
    let ctx = unsafe { &*(ctx as *const HookCtx) };
    let Some(off) = ctx.offset(addr, len).filter(|&o| producer_may_write(o, len)) else {
        ctx.violations.fetch_add(1, Ordering::Relaxed);
        return;
    };
    ctx.note(Access::Write { off, len });
    let dst = addr as *mut u8;
    // SAFETY: inside the slice (checked); aligned 8- and 4-byte writes are
    // single atomic stores, as decision 10 requires of the hook; the rest
    // is bytes no reader looks at before head covers them.
    unsafe {
        if len == 8 && addr.is_multiple_of(8) {
            let v = u64::from_le_bytes(*(src as *const [u8; 8]));
            AtomicU64::from_ptr(dst as *mut u64).store(v, Ordering::Relaxed);
        } else if len == 4 && addr.is_multiple_of(4) {
            let v = u32::from_le_bytes(*(src as *const [u8; 4]));
            AtomicU32::from_ptr(dst as *mut u32).store(v, Ordering::Relaxed);
        } else {
            std::ptr::copy_nonoverlapping(src as *const u8, dst, len as usize);
        }
    }
}

unsafe extern "C" fn hook_read(ctx: *mut c_void, addr: u64, dst: *mut c_void, len: u32) {
    // SAFETY: as in hook_write.
    let ctx = unsafe { &*(ctx as *const HookCtx) };
    let Some(off) = ctx.offset(addr, len) else {
        ctx.violations.fetch_add(1, Ordering::Relaxed);
        // SAFETY: dst holds len bytes (the library's own buffer).
        unsafe { std::ptr::write_bytes(dst as *mut u8, 0xff, len as usize) };
        return;
    };
    ctx.note(Access::Read { off, len });
    // SAFETY: inside the slice; an aligned 8-byte read (tail) is one
    // acquire load, the header read at attach is a plain copy of a header
    // nobody else writes while the producer attaches.
    unsafe {
        if len == 8 && addr.is_multiple_of(8) {
            let v = AtomicU64::from_ptr(addr as *mut u64).load(Ordering::Acquire);
            *(dst as *mut [u8; 8]) = v.to_le_bytes();
        } else {
            std::ptr::copy_nonoverlapping(addr as *const u8, dst as *mut u8, len as usize);
        }
    }
}

unsafe extern "C" fn hook_fence(ctx: *mut c_void) {
    // SAFETY: as in hook_write.
    let ctx = unsafe { &*(ctx as *const HookCtx) };
    ctx.note(Access::Fence);
    fence(Ordering::Release);
}

unsafe extern "C" fn hook_timestamp(ctx: *mut c_void) -> u64 {
    // SAFETY: as in hook_write.
    let ctx = unsafe { &*(ctx as *const HookCtx) };
    ctx.clock.fetch_add(1, Ordering::Relaxed)
}

/// The C producer over a trace slice in this process's memory.
pub struct CProducer {
    state: Vec<u64>,
    ctx: Box<HookCtx>,
    hooks: Box<Hooks>,
}

// SAFETY: the C state and hooks are owned; the slice they point at is
// shared memory accessed with atomics where another thread may look.
unsafe impl Send for CProducer {}

impl CProducer {
    /// # Safety
    /// `base..base + len` must stay valid, 8-aligned memory for the life of
    /// the producer; other threads touch it only as the ABI allows.
    pub unsafe fn new(base: *mut u8, len: usize, log: bool) -> Self {
        // SAFETY: plain size queries.
        let (size, align, hooks_size) = unsafe {
            (
                hmbt_test_sizeof_producer(),
                hmbt_test_alignof_producer(),
                hmbt_test_sizeof_hooks(),
            )
        };
        assert!(align <= 8, "hmbt_producer needs {align}-byte alignment");
        assert_eq!(hooks_size, std::mem::size_of::<Hooks>(), "Hooks mirrors hmbt_hooks");
        let mut ctx = Box::new(HookCtx {
            base: base as u64,
            len: len as u64,
            log: log.then(|| Mutex::new(Vec::new())),
            violations: AtomicU64::new(0),
            clock: AtomicU64::new(0),
        });
        let hooks = Box::new(Hooks {
            write: Some(hook_write),
            read: Some(hook_read),
            fence: Some(hook_fence),
            timestamp_ns: Some(hook_timestamp),
            ctx: &mut *ctx as *mut HookCtx as *mut c_void,
        });
        Self {
            state: vec![0u64; size.div_ceil(8)],
            ctx,
            hooks,
        }
    }

    fn p(&mut self) -> *mut c_void {
        self.state.as_mut_ptr() as *mut c_void
    }

    /// `hmbt_attach` with the slice at its own address and length;
    /// `generation` 0 skips the epoch check.
    pub fn attach(&mut self, generation: u64) -> Result<(), AttachError> {
        self.attach_len(self.ctx.len, generation)
    }

    /// `hmbt_attach` with an explicit advert `slice_len`.
    pub fn attach_len(&mut self, slice_len: u64, generation: u64) -> Result<(), AttachError> {
        let (base, hooks) = (self.ctx.base, &*self.hooks as *const Hooks);
        // SAFETY: state is sized for hmbt_producer; hooks and ctx outlive it.
        AttachError::from_code(unsafe { hmbt_attach(self.p(), hooks, base, slice_len, generation) })
    }

    pub fn emit_ts(&mut self, opcode: u16, source: u32, timestamp_ns: u64, payload: &[u8]) -> Emitted {
        self.emit_raw(
            opcode,
            source,
            Some(timestamp_ns),
            payload.as_ptr(),
            payload.len() as u32,
        )
    }

    /// `hmbt_emit`: stamped by the hooks' clock (0, 1, 2, ...).
    pub fn emit(&mut self, opcode: u16, source: u32, payload: &[u8]) -> Emitted {
        self.emit_raw(opcode, source, None, payload.as_ptr(), payload.len() as u32)
    }

    /// A length the slice does not back: only for lengths above
    /// HMB_RECORD_MAX_PAYLOAD, which the library must drop unread.
    pub fn emit_oversized(&mut self, opcode: u16, len: u32) -> Emitted {
        assert!(len > hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD);
        let dummy = [0u8; 1];
        self.emit_raw(opcode, 0, Some(0), dummy.as_ptr(), len)
    }

    fn emit_raw(&mut self, opcode: u16, source: u32, ts: Option<u64>, ptr: *const u8, len: u32) -> Emitted {
        let p = self.p();
        // SAFETY: the payload is `len` readable bytes (or len is above the
        // maximum, which the library drops before reading).
        let r = unsafe {
            match ts {
                Some(ts) => hmbt_emit_ts(p, opcode, source, ts, ptr as *const c_void, len),
                None => hmbt_emit(p, opcode, source, ptr as *const c_void, len),
            }
        };
        match r {
            0 => Emitted::Written,
            1 => Emitted::Dropped,
            _ => Emitted::Frozen,
        }
    }

    pub fn freeze(&mut self) {
        // SAFETY: state is a producer.
        unsafe { hmbt_freeze(self.p()) }
    }

    pub fn detach(&mut self) {
        // SAFETY: state is a producer.
        unsafe { hmbt_detach(self.p()) }
    }

    fn cp(&self) -> *const c_void {
        self.state.as_ptr() as *const c_void
    }

    /// Where the next record goes (`hmbt_head`).
    pub fn head(&self) -> u64 {
        // SAFETY: state is a producer; the call only reads it.
        unsafe { hmbt_ffi_head(self.cp()) }
    }

    /// The sequence number the next record gets (`hmbt_next_seq`).
    pub fn next_seq(&self) -> u64 {
        // SAFETY: as in head.
        unsafe { hmbt_ffi_next_seq(self.cp()) }
    }

    /// Records dropped in this epoch (`hmbt_dropped`).
    pub fn dropped_records(&self) -> u64 {
        // SAFETY: as in head.
        unsafe { hmbt_ffi_dropped(self.cp()) }
    }

    /// The attached ring's epoch (0 before attach).
    pub fn epoch(&self) -> u64 {
        // SAFETY: as in head.
        unsafe { hmbt_ffi_epoch(self.cp()) }
    }

    /// The attached ring's data area size (0 before attach).
    pub fn ring_size(&self) -> u64 {
        // SAFETY: as in head.
        unsafe { hmbt_ffi_ring_size(self.cp()) }
    }

    /// Detached, or FROZEN written (`hmbt_is_frozen`).
    pub fn is_frozen(&self) -> bool {
        // SAFETY: as in head.
        unsafe { hmbt_ffi_is_frozen(self.cp()) != 0 }
    }

    /// Accesses the hooks refused (out of the slice, or a write outside
    /// the producer's line and the data area). Always 0 for a correct library.
    pub fn violations(&self) -> u64 {
        self.ctx.violations.load(Ordering::Relaxed)
    }

    /// The access log (empty unless created with `log`), drained.
    pub fn take_accesses(&self) -> Vec<Access> {
        self.ctx
            .log
            .as_ref()
            .map(|l| std::mem::take(&mut *l.lock().unwrap_or_else(|e| e.into_inner())))
            .unwrap_or_default()
    }
}
