//! The rate-controlled production loop with its interrupt hook.
//!
//! Notification follows perf's `wakeup_watermark` idea: the [`Notifier`]
//! is called when head has moved at least `watermark_bytes` since the last
//! notification, or when `timeout` has passed with unnotified data, and
//! once when the ring freezes. The emulated device turns these calls into
//! an interrupt.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmb_trace_abi::reference::Produced;
use hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD;

use crate::error::ModelError;
use crate::producer::Producer;
use crate::workload::{fill_record, Workload};

/// Why the notifier is called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyReason {
    /// Head moved at least `watermark_bytes` since the last notification.
    Watermark,
    /// Unnotified data has waited `timeout`.
    Timeout,
    /// The ring has just been FROZEN (controller reset).
    Frozen,
}

/// The hook the device turns into an interrupt. Called on the engine's
/// thread; keep it short.
pub trait Notifier {
    fn notify(&mut self, reason: NotifyReason);
}

/// A notifier that does nothing (a polling consumer, benchmarks).
impl Notifier for () {
    fn notify(&mut self, _reason: NotifyReason) {}
}

/// When to notify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotifyPolicy {
    pub watermark_bytes: u64,
    pub timeout: Duration,
}

impl Default for NotifyPolicy {
    /// 64 KiB or 1 ms, whichever comes first.
    fn default() -> Self {
        Self {
            watermark_bytes: 64 * 1024,
            timeout: Duration::from_millis(1),
        }
    }
}

/// Production rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rate {
    /// As fast as possible.
    Unlimited,
    /// `records` per second on average, emitted in bursts of up to `burst`
    /// records back to back (burst 1 = evenly spaced).
    PerSecond { records: u64, burst: u32 },
}

/// Counters of one engine, cumulative across epochs (emu-device reports
/// them as they are in its `stats` answer).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EngineStats {
    pub attempts: u64,
    pub written: u64,
    pub dropped: u64,
    pub bytes_written: u64,
    pub notifications: u64,
    pub freezes: u64,
}

/// Why [`Engine::run_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// The stop flag was set.
    Stopped,
    /// A reset was requested: the ring is FROZEN; call [`Engine::resume`]
    /// once the owner has re-initialised it.
    Frozen,
    /// The record limit set with [`Engine::with_limit`] was reached.
    LimitReached,
}

/// Requests from other threads (the device's reset path).
#[derive(Debug, Default)]
pub struct EngineControl {
    freeze: AtomicBool,
    /// Head value the engine last published, readable from any thread.
    head: AtomicU64,
}

impl EngineControl {
    /// Ask the engine to freeze the ring at its next step (controller reset).
    pub fn request_freeze(&self) {
        self.freeze.store(true, Relaxed);
    }
    pub fn published_head(&self) -> u64 {
        self.head.load(Relaxed)
    }
}

pub struct Engine<N: Notifier> {
    producer: Producer,
    workload: Workload,
    seed: u64,
    rate: Rate,
    notifier: N,
    policy: NotifyPolicy,
    control: Arc<EngineControl>,
    stats: EngineStats,
    limit: Option<u64>,
    clock: Instant,
    last_notify_head: u64,
    last_notify_at: Instant,
    /// Wall-clock ns at which a simulated-time workload's run began (its
    /// seq 0), so simulated timestamps of a later epoch follow the earlier ones.
    sim_base_ns: u64,
    buf: Box<[u8; HMB_RECORD_MAX_PAYLOAD as usize]>,
}

impl<N: Notifier> Engine<N> {
    pub fn new(producer: Producer, workload: Workload, seed: u64, rate: Rate, notifier: N) -> Self {
        let now = Instant::now();
        Self {
            last_notify_head: producer.head(),
            producer,
            workload,
            seed,
            rate,
            notifier,
            policy: NotifyPolicy::default(),
            control: Arc::new(EngineControl::default()),
            stats: EngineStats::default(),
            limit: None,
            clock: now,
            last_notify_at: now,
            sim_base_ns: 0,
            buf: Box::new([0u8; HMB_RECORD_MAX_PAYLOAD as usize]),
        }
    }

    pub fn with_policy(mut self, policy: NotifyPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Stop after `attempts` production attempts in total (written or dropped).
    pub fn with_limit(mut self, attempts: u64) -> Self {
        self.limit = Some(attempts);
        self
    }

    pub fn control(&self) -> Arc<EngineControl> {
        self.control.clone()
    }
    pub fn stats(&self) -> EngineStats {
        self.stats
    }
    pub fn producer(&self) -> &Producer {
        &self.producer
    }
    pub fn producer_mut(&mut self) -> &mut Producer {
        &mut self.producer
    }
    pub fn workload(&self) -> Workload {
        self.workload
    }
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// One production attempt: the record for the producer's next sequence
    /// number, timestamped with nanoseconds since the engine started.
    pub fn step(&mut self) -> Produced {
        let seq = self.producer.next_seq();
        let shape = fill_record(self.seed, self.workload, seq, &mut self.buf);
        let ts = match shape.sim_ns {
            // Simulated time: completion - fetch is the latency the records say.
            Some(sim) => {
                if seq == 0 {
                    self.sim_base_ns = self.clock.elapsed().as_nanos() as u64;
                }
                self.sim_base_ns + sim
            }
            None => self.clock.elapsed().as_nanos() as u64,
        };
        let out = self
            .producer
            .produce(shape.opcode, shape.source, ts, &self.buf[..shape.len]);
        match out {
            Produced::Written { .. } => {
                self.stats.attempts += 1;
                self.stats.written += 1;
                self.stats.bytes_written += hmb_trace_abi::align_record(shape.len as u32) as u64;
            }
            Produced::Dropped { .. } => {
                self.stats.attempts += 1;
                self.stats.dropped += 1;
            }
            Produced::Frozen => {}
        }
        out
    }

    fn notify(&mut self, reason: NotifyReason) {
        self.stats.notifications += 1;
        self.last_notify_head = self.producer.head();
        self.last_notify_at = Instant::now();
        self.control.head.store(self.last_notify_head, Relaxed);
        self.notifier.notify(reason);
    }

    fn maybe_notify(&mut self) {
        let head = self.producer.head();
        if head.wrapping_sub(self.last_notify_head) >= self.policy.watermark_bytes {
            self.notify(NotifyReason::Watermark);
        } else if head != self.last_notify_head && self.last_notify_at.elapsed() >= self.policy.timeout {
            self.notify(NotifyReason::Timeout);
        }
    }

    /// Freeze the ring now (controller reset) and tell the notifier.
    pub fn freeze(&mut self) {
        if !self.producer.is_frozen() {
            self.producer.freeze();
            self.stats.freezes += 1;
            self.notify(NotifyReason::Frozen);
        }
    }

    /// After a freeze: pick up the re-initialised ring. `Ok(false)` while
    /// the owner has not re-initialised it yet.
    pub fn resume(&mut self) -> Result<bool, ModelError> {
        let resumed = self.producer.reattach()?;
        if resumed {
            self.last_notify_head = self.producer.head();
            self.control.freeze.store(false, Relaxed);
        }
        Ok(resumed)
    }

    /// Produce at the configured rate until `stop` is set, a freeze is
    /// requested through [`EngineControl`], or the limit is reached.
    pub fn run_until(&mut self, stop: &AtomicBool) -> RunOutcome {
        let start = Instant::now();
        let start_attempts = self.stats.attempts;
        loop {
            if stop.load(Relaxed) {
                self.flush_notify();
                return RunOutcome::Stopped;
            }
            if self.control.freeze.load(Relaxed) || self.producer.is_frozen() {
                self.freeze();
                return RunOutcome::Frozen;
            }
            let mut quota = match self.rate {
                Rate::Unlimited => 256,
                Rate::PerSecond { records, burst } => {
                    let due = (start.elapsed().as_secs_f64() * records as f64) as u64;
                    let done = self.stats.attempts - start_attempts;
                    let owed = due.saturating_sub(done).min(burst.max(1) as u64);
                    if owed == 0 {
                        self.maybe_notify();
                        let gap = Duration::from_secs_f64(1.0 / records.max(1) as f64);
                        std::thread::sleep(gap.min(Duration::from_millis(1)));
                        continue;
                    }
                    owed
                }
            };
            if let Some(limit) = self.limit {
                let left = limit.saturating_sub(self.stats.attempts);
                if left == 0 {
                    self.flush_notify();
                    return RunOutcome::LimitReached;
                }
                quota = quota.min(left);
            }
            for _ in 0..quota {
                if self.step() == Produced::Frozen {
                    break;
                }
            }
            self.maybe_notify();
        }
    }

    /// Notify about anything not yet notified (on stop).
    fn flush_notify(&mut self) {
        if self.producer.head() != self.last_notify_head {
            self.notify(NotifyReason::Timeout);
        }
    }
}
