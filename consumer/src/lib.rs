//! Consumer core of hmb-trace: reads the published window `[tail, head)`
//! of an ABI v1 ring straight from a read-only mapping.
//!
//! * No allocation and no system call per record: a batch is a list of
//!   [`std::io::IoSlice`]s pointing into the mapping (adjacent records are
//!   coalesced into one slice, PAD records and skipped bytes are left out),
//!   ready for `writev`.
//! * Every record header is validated with
//!   `hmb_trace_abi::parse_record_at`; sequence gaps become exact [`Lost`]
//!   reports; FROZEN is reported once everything published before it has
//!   been handed out.
//! * The tail is published once per batch through a [`TailPublisher`]
//!   (the PUBLISH_TAIL ioctl in the guest, an atomic store in host tests).
//!
//! ```no_run
//! # use hmb_trace_consumer::*;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let file = std::fs::File::open("/dev/null")?; let publisher = NoPublish;
//! let view = RingView::map_file(&file, 0, 4096 + (1 << 24))?;
//! let mut consumer = Consumer::attach(view, publisher, ConsumerConfig::default())?;
//! loop {
//!     match consumer.next_batch()? {
//!         Step::Batch(batch) => { /* writev(fd, batch.iov) */ }
//!         Step::Empty => { /* poll() */ }
//!         Step::Frozen(info) => { println!("{info:?}"); break; }
//!     }
//!     consumer.commit()?; // publishes the tail of the batch just handled
//! }
//! # Ok(()) }
//! ```

mod consumer;
mod error;
mod publish;
mod view;

pub use consumer::{Batch, Consumer, ConsumerConfig, ConsumerStats, FrozenInfo, Lost, Step};
pub use error::ConsumerError;
pub use publish::{AtomicTailPublisher, NoPublish, TailPublisher};
pub use view::{Chunk, RingView};
