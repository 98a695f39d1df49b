//! The device's state machine, on one thread: transport events (doorbells,
//! guests coming and going) and control requests arrive on one channel and
//! are handled in order, so no state is shared between threads except the
//! producer thread's engine, which is handed back on stop.
//!
//! Life of a ring: a doorbell makes the device read the advert; a valid
//! READY advert gives a slice; with a plan (from `start`) the firmware model
//! produces into it. A `reset` freezes the ring through the model, the
//! model's notifier raises the state vector, and the device waits for a
//! doorbell with a newer advert generation, then resumes the same plan.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmb_firmware_model::{EngineStats, NotifyPolicy, RunOutcome};
use hmb_trace_abi::offsets;
use serde::Serialize;
use serde_json::{json, Value};

use crate::control::{Fault, Handler, Request, Response};
use crate::error::EmuError;
use crate::ivshmem::advert::{acknowledge, acknowledged, advert_generation, read_advert, withdrawn, Slice};
use crate::ivshmem::faults::{self, FaultEffect};
use crate::ivshmem::production::{build_engine, DeviceEngine, IrqCounters, Plan, Running};
use crate::ivshmem::report::{AdvertView, GroundTruth, HeaderView, InterruptCounts, SliceView, Stats, Status};
pub use crate::ivshmem::report::{Phase, Segment};
use crate::ivshmem::transport::{Transport, TransportEvent, Vectors, DOORBELL_ADVERT};

/// How often a live advert is re-read to notice a withdrawal.
const ADVERT_WATCH: Duration = Duration::from_millis(20);

/// Everything the device thread reacts to.
pub enum Msg {
    Transport(TransportEvent),
    Control(Request, Sender<Response>),
    /// SIGTERM and friends.
    Shutdown(String),
}

impl Msg {
    pub(crate) fn transport(ev: TransportEvent) -> Self {
        Msg::Transport(ev)
    }
}

#[derive(Debug, Clone)]
pub(crate) struct DeviceConfig {
    pub policy: NotifyPolicy,
    /// Exit when the last guest disconnects (after at least one came).
    pub exit_on_disconnect: bool,
    /// Production to start as soon as a ring is ready (same as `ctl start`).
    pub initial_plan: Option<Plan>,
    pub vectors: Vectors,
}

pub(crate) struct Device {
    transport: Arc<dyn Transport>,
    config: DeviceConfig,
    counters: Arc<IrqCounters>,
    slice: Option<Slice>,
    /// Newest advert generation adopted: a ring is only ever replaced by a
    /// newer one.
    last_generation: Option<u64>,
    frozen: bool,
    halted: Option<String>,
    idle: Option<DeviceEngine>,
    running: Option<Running>,
    plan: Option<Plan>,
    stalled_until: Option<Instant>,
    doorbells: u64,
    last_advert_error: Option<String>,
    guests_seen: bool,
    segments: Vec<Segment>,
    faults: Vec<FaultEffect>,
    retired: EngineStats,
    /// Armed by the `late-stop` fault: how long to go on producing after
    /// the next withdrawal.
    late_stop: Option<Duration>,
    /// While set, the device is still writing the withdrawn slice (in-flight
    /// DMA) and ignores adverts until then.
    late_until: Option<Instant>,
}

fn add_stats(a: &mut EngineStats, b: EngineStats) {
    a.attempts += b.attempts;
    a.written += b.written;
    a.dropped += b.dropped;
    a.bytes_written += b.bytes_written;
    a.notifications += b.notifications;
    a.freezes += b.freezes;
}

impl Device {
    pub(crate) fn new(transport: Arc<dyn Transport>, config: DeviceConfig) -> Self {
        let plan = config.initial_plan.clone();
        Self {
            transport,
            config,
            counters: Arc::new(IrqCounters::default()),
            slice: None,
            last_generation: None,
            frozen: false,
            halted: None,
            idle: None,
            running: None,
            plan,
            stalled_until: None,
            doorbells: 0,
            last_advert_error: None,
            guests_seen: false,
            segments: Vec::new(),
            faults: Vec::new(),
            retired: EngineStats::default(),
            late_stop: None,
            late_until: None,
        }
    }

    pub(crate) fn phase(&self) -> Phase {
        if self.halted.is_some() {
            Phase::Halted
        } else if self.frozen {
            Phase::Frozen
        } else if self.running.is_some() {
            Phase::Producing
        } else if self.stalled_until.is_some() {
            Phase::Stalled
        } else if self.slice.is_some() {
            Phase::Ready
        } else if self.transport.guests().is_empty() {
            Phase::WaitingForGuest
        } else {
            Phase::WaitingForAdvert
        }
    }

    /// Serve until shutdown; returns why.
    pub(crate) fn run(mut self, rx: Receiver<Msg>) -> Result<String, EmuError> {
        let reason = loop {
            // While a ring is live, look at the advert often: a module that
            // withdraws it (unload, re-init) must not find us still writing.
            let idle_wait = if self.slice.is_some() {
                ADVERT_WATCH
            } else {
                Duration::from_secs(1)
            };
            let wait = self
                .stalled_until
                .or(self.late_until)
                .map(|t| t.saturating_duration_since(Instant::now()))
                .unwrap_or(idle_wait);
            match rx.recv_timeout(wait) {
                Ok(Msg::Shutdown(why)) => break Ok(why),
                Ok(Msg::Transport(ev)) => {
                    if let Some(why) = self.on_transport(ev) {
                        break why;
                    }
                }
                Ok(Msg::Control(req, reply)) => {
                    let shutdown = matches!(req, Request::Shutdown);
                    let resp = match self.on_request(req) {
                        Ok(v) => Response::ok(v),
                        Err(e) => Response::err(e.to_string()),
                    };
                    let _ = reply.send(resp);
                    if shutdown {
                        break Ok("shutdown requested over the control socket".into());
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break Ok("all event sources closed".into()),
            }
            self.watch_advert();
            if self.late_until.is_some_and(|t| Instant::now() >= t) {
                self.late_until = None;
                log::info!("late stores done: production stops");
                self.stop_withdrawn();
                self.check_advert();
            }
            if self.stalled_until.is_some_and(|t| Instant::now() >= t) {
                self.stalled_until = None;
                log::info!("stall over, production resumes");
                if let Err(e) = self.start_production() {
                    log::warn!("resuming after stall: {e}");
                }
            }
        };
        self.stop_production("shutdown");
        reason
    }

    fn on_transport(&mut self, ev: TransportEvent) -> Option<Result<String, EmuError>> {
        match ev {
            TransportEvent::GuestJoined(id) => {
                self.guests_seen = true;
                log::info!("guest peer {id} connected");
            }
            TransportEvent::GuestLeft(id) => {
                log::info!("guest peer {id} left");
                if self.config.exit_on_disconnect && self.guests_seen && self.transport.guests().is_empty() {
                    return Some(Ok(format!("QEMU (peer {id}) disconnected")));
                }
            }
            TransportEvent::Doorbell { vector } => {
                self.doorbells += 1;
                if vector == DOORBELL_ADVERT {
                    self.check_advert();
                } else {
                    log::info!("doorbell on vector {vector} (no meaning yet, counted)");
                }
            }
            TransportEvent::Failed(e) => return Some(Err(EmuError::Protocol(e))),
        }
        None
    }

    /// The module withdrew the advert: stop touching the slice at once (or,
    /// with `late-stop` armed, after a while), wait for a new one, and
    /// acknowledge the withdrawal once nothing more is written.
    fn watch_advert(&mut self) {
        if self.late_until.is_some() || !withdrawn(self.transport.memory()) {
            return;
        }
        if self.running.is_some() {
            if let Some(late) = self.late_stop.take() {
                log::info!(
                    "advert withdrawn: late-stop armed, producing {} ms more",
                    late.as_millis()
                );
                self.late_until = Some(Instant::now() + late);
                return;
            }
        }
        self.stop_withdrawn();
    }

    /// Stop writing the slice (if live) and acknowledge the withdrawal.
    fn stop_withdrawn(&mut self) {
        let mut stopped_for = None;
        if self.slice.is_some() && !self.frozen {
            log::info!("advert withdrawn by the guest: production stops, waiting for a new advert");
            self.stop_production("advert withdrawn");
            self.retire_idle();
            self.stalled_until = None;
            stopped_for = self.slice.take().map(|s| s.epoch);
            self.halted = None;
        }
        // What the device stopped writing for; when it was not writing at
        // all, the withdrawn advert's generation.
        let mem = self.transport.memory();
        let generation = if withdrawn(mem) {
            advert_generation(mem).or(stopped_for)
        } else {
            stopped_for
        };
        if let Some(g) = generation {
            if acknowledged(mem) != g {
                log::info!("acknowledging the withdrawal of generation {g}");
                if let Err(e) = acknowledge(mem, g) {
                    log::warn!("acknowledging generation {g}: {e}");
                }
            }
        }
    }

    /// A doorbell: is there a newer READY advert?
    fn check_advert(&mut self) {
        self.watch_advert();
        if self.late_until.is_some() {
            log::debug!("doorbell while late stores are in flight: the advert is read afterwards");
            return;
        }
        let min_generation = self.last_generation.map(|g| g + 1).unwrap_or(0);
        match read_advert(self.transport.memory(), min_generation) {
            Ok(slice) => {
                self.last_advert_error = None;
                self.adopt(slice);
            }
            Err(e) => {
                if self.slice.is_some() && !self.frozen {
                    log::debug!("doorbell without a newer advert: {e}");
                } else {
                    log::warn!("doorbell, but the advert is not usable: {e}");
                }
                self.last_advert_error = Some(e.to_string());
            }
        }
    }

    fn adopt(&mut self, slice: Slice) {
        log::info!(
            "ring ready: epoch {} at HMB offset {:#x}, {} bytes (ring {} bytes)",
            slice.epoch,
            slice.offset,
            slice.len,
            slice.ring_size
        );
        // A newer ring replaces whatever ran before (after a reset, or a
        // module reload without one).
        self.stop_production("superseded by a new advert");
        self.retire_idle();
        self.stalled_until = None;
        self.slice = Some(slice);
        self.last_generation = Some(slice.epoch);
        self.frozen = false;
        self.halted = None;
        if self.plan.is_some() {
            if let Err(e) = self.start_production() {
                log::error!("starting production on epoch {}: {e}", slice.epoch);
            }
        }
    }

    fn retire_idle(&mut self) {
        if let Some(engine) = self.idle.take() {
            add_stats(&mut self.retired, engine.stats());
        }
    }

    fn live_slice(&self) -> Result<Slice, EmuError> {
        let slice = self
            .slice
            .ok_or_else(|| EmuError::Control("no ring advertised yet".into()))?;
        if self.frozen {
            return Err(EmuError::Control(
                "the ring is FROZEN: waiting for the module to re-initialise it".into(),
            ));
        }
        Ok(slice)
    }

    /// Start producing with the current plan, if the ring allows it.
    fn start_production(&mut self) -> Result<(), EmuError> {
        if self.running.is_some() {
            return Ok(());
        }
        let plan = self
            .plan
            .clone()
            .ok_or_else(|| EmuError::Control("no production plan".into()))?;
        let slice = self.live_slice()?;
        if let Some(why) = &self.halted {
            return Err(EmuError::Control(format!("production halted: {why}")));
        }
        // A fresh engine each time: it picks up head and next_seq from the
        // header, and the plan (workload, seed, rate) may have changed.
        self.retire_idle();
        let engine = build_engine(
            &self.transport,
            &slice,
            &plan,
            self.config.policy,
            &self.counters,
            self.config.vectors,
        )?;
        self.segments.push(Segment {
            epoch: slice.epoch,
            workload: plan.workload.clone(),
            seed: plan.seed,
            first_seq: engine.producer().next_seq(),
            end_seq: None,
            ended_by: None,
        });
        log::info!(
            "producing: workload {} seed {} rate {}/s",
            plan.workload,
            plan.seed,
            plan.rate
        );
        self.running = Some(Running::spawn(engine)?);
        Ok(())
    }

    fn close_segment(&mut self, engine: &DeviceEngine, why: &str) {
        if let Some(seg) = self.segments.last_mut() {
            if seg.end_seq.is_none() {
                seg.end_seq = Some(engine.producer().next_seq());
                seg.ended_by = Some(why.to_string());
            }
        }
    }

    /// Stop the producer thread, keep the engine idle.
    fn stop_production(&mut self, why: &str) -> Option<RunOutcome> {
        let running = self.running.take()?;
        match running.stop() {
            Ok((engine, outcome)) => {
                self.close_segment(&engine, why);
                self.idle = Some(engine);
                Some(outcome)
            }
            Err(e) => {
                log::error!("{e}");
                self.halted = Some(e.to_string());
                None
            }
        }
    }

    fn engine_for_fault(&mut self, slice: &Slice) -> Result<DeviceEngine, EmuError> {
        if let Some(e) = self.idle.take() {
            return Ok(e);
        }
        let plan = self.plan.clone().unwrap_or(Plan {
            workload: "ssd".into(),
            seed: 0,
            rate: 0,
            burst: 1,
        });
        build_engine(
            &self.transport,
            slice,
            &plan,
            self.config.policy,
            &self.counters,
            self.config.vectors,
        )
    }

    fn reset(&mut self) -> Result<Value, EmuError> {
        let slice = self.live_slice()?;
        self.stalled_until = None;
        let mut engine = match self.running.take() {
            Some(r) => {
                let (engine, outcome) = r.freeze()?;
                if outcome != RunOutcome::Frozen {
                    log::warn!("producer ended with {outcome:?} instead of Frozen");
                }
                engine
            }
            None => self.engine_for_fault(&slice)?,
        };
        // Idempotent if the run above already froze: the model notifies
        // (state vector) exactly once per freeze.
        engine.freeze();
        self.close_segment(&engine, "reset");
        let next_seq = engine.producer().next_seq();
        let head = engine.producer().head();
        self.idle = Some(engine);
        self.frozen = true;
        let eff = FaultEffect {
            fault: "reset".into(),
            epoch: slice.epoch,
            before: head,
            after: next_seq,
        };
        self.faults.push(eff);
        log::info!(
            "controller reset: epoch {} FROZEN at head {head}, next_seq {next_seq}",
            slice.epoch
        );
        Ok(json!({"epoch": slice.epoch, "head": head, "next_seq": next_seq}))
    }

    fn inject(&mut self, fault: Fault) -> Result<Value, EmuError> {
        let transport = self.transport.clone();
        let mem = transport.memory();
        let eff = match fault {
            Fault::Reset => return self.reset(),
            Fault::CorruptMagic => faults::corrupt_magic(mem, &self.live_slice()?)?,
            Fault::BumpVersion { part } => faults::bump_version(mem, &self.live_slice()?, part)?,
            Fault::UnknownFlag => faults::unknown_flag(mem, &self.live_slice()?)?,
            Fault::RewindHeader => faults::rewind_header(mem, &self.live_slice()?)?,
            Fault::Vanish => {
                let slice = self.live_slice()?;
                self.stop_production("vanished");
                self.retire_idle();
                self.stalled_until = None;
                self.plan = None;
                // No slice: the all-ones advert reads as withdrawn, and a
                // device without a slice has nothing to acknowledge.
                self.slice = None;
                self.halted = Some("vanished".into());
                faults::vanish(mem, &slice)?
            }
            Fault::LateStop { ms } => {
                self.late_stop = Some(Duration::from_millis(ms));
                let eff = FaultEffect {
                    fault: "late-stop".into(),
                    epoch: self.slice.map(|s| s.epoch).unwrap_or(0),
                    before: 0,
                    after: ms,
                };
                self.faults.push(eff.clone());
                return Ok(serde_json::to_value(eff).unwrap_or(Value::Null));
            }
            Fault::Stall { ms } => {
                if self.running.is_none() {
                    return Err(EmuError::Control("not producing: nothing to stall".into()));
                }
                self.stop_production("stall");
                self.stalled_until = Some(Instant::now() + Duration::from_millis(ms));
                let epoch = self.slice.map(|s| s.epoch).unwrap_or(0);
                let eff = FaultEffect {
                    fault: "stall".into(),
                    epoch,
                    before: 0,
                    after: ms,
                };
                self.faults.push(eff.clone());
                return Ok(serde_json::to_value(eff).unwrap_or(Value::Null));
            }
            Fault::FirmwareAssert => {
                return Err(EmuError::Control(
                    "firmware-assert is a fault of the NVMe controller (Controller-Initiated Telemetry); \
                     the ivshmem device serves no telemetry"
                        .into(),
                ))
            }
            Fault::Hostile => {
                let slice = self.live_slice()?;
                self.stop_production("hostile");
                self.stalled_until = None;
                // The producer's cursors go stale: drop it, halt until the
                // next epoch.
                self.retire_idle();
                let head = mem.load_u64(slice.offset as usize + offsets::HEAD)?;
                let seq = mem.load_u64(slice.offset as usize + offsets::NEXT_SEQ)?;
                let eff = faults::hostile_record(mem, &slice, head, seq)?;
                self.halted = Some(format!(
                    "hostile record published at {head}; a reset starts a new epoch"
                ));
                self.raise_data();
                eff
            }
        };
        if !matches!(eff.fault.as_str(), "hostile") {
            // Header faults: tell the guest to look at the ring.
            self.raise_state();
        }
        log::info!("fault injected: {eff:?}");
        self.faults.push(eff.clone());
        Ok(serde_json::to_value(eff).unwrap_or(Value::Null))
    }

    fn raise_data(&self) {
        self.raise(self.config.vectors.data, &self.counters.data);
    }

    fn raise_state(&self) {
        self.raise(self.config.vectors.state, &self.counters.state);
    }

    fn raise(&self, vector: u16, counter: &std::sync::atomic::AtomicU64) {
        match self.transport.interrupt(vector) {
            Ok(()) => {
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                self.counters.failed.fetch_add(1, Ordering::Relaxed);
                log::warn!("interrupt on vector {vector}: {e}");
            }
        }
    }

    fn header_view(&self) -> Option<HeaderView> {
        self.slice
            .map(|slice| HeaderView::read(self.transport.memory(), &slice))
    }

    fn status(&self) -> Status {
        let mem = self.transport.memory();
        Status {
            phase: self.phase(),
            transport: self.transport.name().to_string(),
            guests: self.transport.guests(),
            hmb_size: mem.len(),
            slice: self.slice.map(SliceView::from),
            plan: self.plan.clone(),
            halted: self.halted.clone(),
            last_advert_error: self.last_advert_error.clone(),
            doorbells: self.doorbells,
            advert: AdvertView {
                withdrawn: withdrawn(mem),
                generation: advert_generation(mem),
                ack_generation: acknowledged(mem),
            },
        }
    }

    fn stats(&self) -> Stats {
        let mut engines = self.retired;
        if let Some(e) = &self.idle {
            add_stats(&mut engines, e.stats());
        }
        Stats {
            phase: self.phase(),
            header: self.header_view(),
            interrupts: InterruptCounts {
                data: self.counters.data.load(Ordering::Relaxed),
                state: self.counters.state.load(Ordering::Relaxed),
                failed: self.counters.failed.load(Ordering::Relaxed),
            },
            doorbells: self.doorbells,
            engine_totals: engines,
            producing: self.running.is_some(),
        }
    }

    fn ground_truth(&self) -> GroundTruth {
        let mut segments = self.segments.clone();
        if let (Some(last), Some(slice)) = (segments.last_mut(), self.slice) {
            if last.end_seq.is_none() {
                // Live segment: the header's next_seq is where it stands now.
                let mem = self.transport.memory();
                last.end_seq = mem.load_u64(slice.offset as usize + offsets::NEXT_SEQ).ok();
                last.ended_by = Some("still producing".into());
            }
        }
        GroundTruth {
            segments,
            faults: self.faults.clone(),
            header: self.header_view(),
        }
    }

    fn on_request(&mut self, req: Request) -> Result<Value, EmuError> {
        match req {
            Request::Status => Ok(answer(self.status())),
            Request::Start {
                workload,
                seed,
                rate,
                burst,
            } => {
                let plan = Plan {
                    workload,
                    seed,
                    rate,
                    burst: burst.unwrap_or_else(|| Plan::default_burst(rate)),
                };
                plan.workload()?; // validate before changing anything
                if let Some(why) = &self.halted {
                    return Err(EmuError::Control(format!("production halted: {why}")));
                }
                self.stop_production("re-planned");
                self.plan = Some(plan);
                self.stalled_until = None;
                if self.slice.is_some() && !self.frozen && self.halted.is_none() {
                    self.start_production()?;
                    Ok(json!({"producing": true}))
                } else {
                    Ok(json!({"producing": false, "pending": self.phase()}))
                }
            }
            Request::Stop => {
                self.plan = None;
                self.stalled_until = None;
                let outcome = self.stop_production("stopped");
                Ok(json!({"was_producing": outcome.is_some()}))
            }
            Request::Inject(fault) => self.inject(fault),
            Request::Stats => Ok(answer(self.stats())),
            Request::GroundTruth => Ok(answer(self.ground_truth())),
            Request::Interrupt { vector } => {
                self.transport.interrupt(vector)?;
                Ok(json!({"vector": vector}))
            }
            Request::Shutdown => Ok(json!({"shutting_down": true})),
            Request::Personality { .. } => Err(EmuError::Control(
                "personality is the NVMe device's (serve-nvme): the ivshmem device has no controller".into(),
            )),
            Request::HmbAudit => Err(EmuError::Control(
                "hmb-audit is the NVMe device's (serve-nvme): the ivshmem HMB has no controller-private data".into(),
            )),
            Request::Timing { .. } => Err(EmuError::Control(
                "timing is the NVMe device's (serve-nvme): the ivshmem device completes no commands".into(),
            )),
        }
    }
}

/// A typed answer as the control socket's JSON (serialising these plain
/// structs cannot fail).
fn answer<T: Serialize>(value: T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The control socket's view of the device: requests are forwarded to the
/// device thread and answered from there.
pub(crate) struct DeviceHandle {
    tx: Sender<Msg>,
    timeout: Duration,
}

impl DeviceHandle {
    pub(crate) fn new(tx: Sender<Msg>) -> Self {
        Self {
            tx,
            timeout: Duration::from_secs(30),
        }
    }
}

impl Handler for DeviceHandle {
    fn handle(&self, req: Request) -> Response {
        let (reply_tx, reply_rx) = channel();
        if self.tx.send(Msg::Control(req, reply_tx)).is_err() {
            return Response::err("emu-device is shutting down");
        }
        reply_rx
            .recv_timeout(self.timeout)
            .unwrap_or_else(|_| Response::err("emu-device did not answer in time"))
    }
}
