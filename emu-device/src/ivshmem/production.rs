//! Glue between the device and the firmware model (crate
//! hmb-firmware-model): building an engine on the advertised slice, running
//! it on its own thread, and turning its notifications into interrupts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use hmb_firmware_model::{
    Engine, EngineControl, Notifier, NotifyPolicy, NotifyReason, Producer, Rate, RunOutcome, SharedRing, Workload,
};
use serde::{Deserialize, Serialize};

use crate::error::EmuError;
use crate::ivshmem::advert::Slice;
use crate::ivshmem::transport::{Transport, Vectors};

/// Interrupts raised, shared between the engine thread and status reports.
#[derive(Debug, Default)]
pub(crate) struct IrqCounters {
    pub data: AtomicU64,
    pub state: AtomicU64,
    pub failed: AtomicU64,
}

/// The firmware model's hook: data notifications (already moderated by
/// the model's watermark + timer policy) raise the data vector, a freeze
/// raises the state vector.
pub(crate) struct IrqNotifier {
    transport: Arc<dyn Transport>,
    counters: Arc<IrqCounters>,
    vectors: Vectors,
}

impl IrqNotifier {
    pub(crate) fn new(transport: Arc<dyn Transport>, counters: Arc<IrqCounters>, vectors: Vectors) -> Self {
        Self {
            transport,
            counters,
            vectors,
        }
    }
}

impl Notifier for IrqNotifier {
    fn notify(&mut self, reason: NotifyReason) {
        let (vector, counter) = match reason {
            NotifyReason::Watermark | NotifyReason::Timeout => (self.vectors.data, &self.counters.data),
            NotifyReason::Frozen => (self.vectors.state, &self.counters.state),
        };
        match self.transport.interrupt(vector) {
            Ok(()) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                log::debug!("interrupt on vector {vector} ({reason:?}) not delivered: {e}");
            }
        }
    }
}

pub(crate) type DeviceEngine = Engine<IrqNotifier>;

/// What production should do, as the control interface set it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub workload: String,
    pub seed: u64,
    /// Records per second, 0 = unlimited.
    pub rate: u64,
    /// Records emitted back to back at most (rate limiting granularity).
    pub burst: u32,
}

impl Plan {
    pub fn workload(&self) -> Result<Workload, EmuError> {
        Workload::parse(&self.workload).map_err(|e| EmuError::Control(e.to_string()))
    }

    pub(crate) fn rate(&self) -> Rate {
        if self.rate == 0 {
            Rate::Unlimited
        } else {
            Rate::PerSecond {
                records: self.rate,
                burst: self.burst.max(1),
            }
        }
    }

    /// Default burst: about one millisecond worth of records, so that high
    /// rates do not turn into one sleep per record.
    pub fn default_burst(rate: u64) -> u32 {
        (rate / 1000).clamp(1, 4096) as u32
    }
}

/// Build an engine over `slice` of the transport's memory.
pub(crate) fn build_engine(
    transport: &Arc<dyn Transport>,
    slice: &Slice,
    plan: &Plan,
    policy: NotifyPolicy,
    counters: &Arc<IrqCounters>,
    vectors: Vectors,
) -> Result<DeviceEngine, EmuError> {
    let mem = transport.memory();
    let end = slice.offset.checked_add(slice.len).filter(|&e| e <= mem.len() as u64);
    if end.is_none() {
        return Err(EmuError::Handshake(format!("slice {slice:?} outside shared memory")));
    }
    // SAFETY: the slice is inside the transport's mapping (checked above),
    // and the engine's notifier holds an Arc of the transport, so the
    // mapping outlives the ring.
    let ring = unsafe { SharedRing::from_raw(mem.as_ptr().add(slice.offset as usize), slice.len as usize) }
        .map_err(|e| EmuError::Handshake(e.to_string()))?;
    let producer = Producer::attach(ring).map_err(|e| EmuError::Handshake(format!("producer: {e}")))?;
    let notifier = IrqNotifier::new(transport.clone(), counters.clone(), vectors);
    Ok(Engine::new(producer, plan.workload()?, plan.seed, plan.rate(), notifier).with_policy(policy))
}

/// An engine producing on its own thread.
pub(crate) struct Running {
    stop: Arc<AtomicBool>,
    control: Arc<EngineControl>,
    thread: JoinHandle<(DeviceEngine, RunOutcome)>,
}

impl Running {
    pub(crate) fn spawn(mut engine: DeviceEngine) -> Result<Self, EmuError> {
        let stop = Arc::new(AtomicBool::new(false));
        let control = engine.control();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("producer".into())
            .spawn(move || {
                let outcome = engine.run_until(&flag);
                (engine, outcome)
            })
            .map_err(|e| EmuError::io("spawning producer thread", e))?;
        Ok(Self { stop, control, thread })
    }

    /// Stop producing and get the engine back.
    pub(crate) fn stop(self) -> Result<(DeviceEngine, RunOutcome), EmuError> {
        self.stop.store(true, Ordering::Release);
        self.join()
    }

    /// Controller reset: the engine sets FROZEN, notifies, and returns.
    pub(crate) fn freeze(self) -> Result<(DeviceEngine, RunOutcome), EmuError> {
        self.control.request_freeze();
        self.join()
    }

    fn join(self) -> Result<(DeviceEngine, RunOutcome), EmuError> {
        self.thread
            .join()
            .map_err(|_| EmuError::Control("the producer thread panicked".into()))
    }
}
