//! Firmware model of hmb-trace: the SSD side of the ring.
//!
//! It writes ABI v1 records (see `docs/abi.md` and crate `hmb-trace-abi`)
//! into a trace slice that lives in shared memory it does not own — a
//! memfd, a mapped file, or the emulated device's HMB — exactly as a device
//! does, and is checked bit-for-bit against `hmb_trace_abi::reference::RefRing`.
//!
//! # Public API in four steps
//!
//! ```no_run
//! use std::sync::{atomic::AtomicBool, Arc};
//! use hmb_firmware_model::{Engine, NotifyPolicy, Notifier, NotifyReason, Producer, Rate, SharedRing, Workload};
//!
//! struct Irq;
//! impl Notifier for Irq {
//!     fn notify(&mut self, _why: NotifyReason) { /* ring the doorbell / raise the interrupt */ }
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let file = std::fs::File::open("/dev/null")?;
//! // 1. The trace slice: 4096-byte header page + data area, already
//! //    initialised by its owner (the kernel module, or `module_sim` in tests).
//! let ring = SharedRing::map_file(&file, 0, 4096 + (1 << 24))?;
//! // 2. The producer checks the header and caches its cursors.
//! let producer = Producer::attach(ring)?;
//! // 3. The engine: workload from a seed, a rate, and the interrupt hook.
//! let mut engine = Engine::new(producer, Workload::parse("ssd")?, 42, Rate::Unlimited, Irq)
//!     .with_policy(NotifyPolicy::default());
//! // 4. Run until `stop` is set (or a reset is requested through `engine.control()`).
//! let stop = Arc::new(AtomicBool::new(false));
//! let outcome = engine.run_until(&stop);
//! println!("{outcome:?} {:?}", engine.stats());
//! # Ok(()) }
//! ```
//!
//! After `RunOutcome::Frozen` (a controller reset), the ring owner
//! re-initialises the header; [`Engine::resume`] (or
//! [`Producer::reattach`]) picks up the new epoch and production goes on.
//!
//! Ground truth: every record is a pure function of `(seed, workload, seq)`,
//! see [`expected_record`], so a test can check every byte a consumer got.

pub mod catalog;
pub mod engine;
pub mod error;
pub mod producer;
pub mod rng;
pub mod ssd_sim;
pub mod workload;

pub use catalog::{catalog_json, OpcodeInfo, OPCODES};
pub use engine::{Engine, EngineControl, EngineStats, Notifier, NotifyPolicy, NotifyReason, Rate, RunOutcome};
pub use error::ModelError;
pub use hmb_trace_abi::reference::Produced;
pub use producer::Producer;
// The ring owner's stand-in and the shared slice view live in the ABI
// crate (the daemon uses them without the firmware model); re-exported
// for the model's users.
pub use hmb_trace_abi::module_sim;
pub use hmb_trace_abi::shared as shm;
pub use hmb_trace_abi::SharedRing;
pub use workload::{expected_record, fill_record, ExpectedRecord, SizeDist, Workload};
