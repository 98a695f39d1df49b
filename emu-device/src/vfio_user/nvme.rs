//! `emu-device serve-nvme`: the `hmb-nvme` controller model served on a
//! vfio-user socket, with the JSON control socket next to it.
//!
//! One controller lives for the whole process; QEMU's disconnect resets it
//! (and drops guest memory), and with `keep_serving` the next QEMU finds it
//! on the same socket with the namespace's data intact, as a disk keeps its
//! data across a power cycle of the host.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

use hmb_nvme::{Backing, Controller, ControllerConfig, InterruptSink, PciIdentity, Timing};
use hmb_nvme_trace::{Personality, ProducerKind};

use super::backend::{PciFunction, Shared};
use super::completion_timer::CompletionTimer;
use super::config_space::{Identity, MAX_MSIX_VECTORS};
use super::control::NvmeControl;
use super::dma::DmaMap;
use super::error::VfioUserError;
use super::irqs::IrqTable;
use super::serve::{ServeEvent, VfioUserServer};
use crate::control::ControlServer;

impl InterruptSink for IrqTable {
    fn raise(&self, vector: u16) {
        IrqTable::raise(self, vector);
    }
}

impl PciFunction for Controller {
    fn bar0_read(&mut self, offset: u64, data: &mut [u8]) {
        Controller::bar0_read(self, offset, data);
    }
    fn bar0_write(&mut self, offset: u64, data: &[u8]) {
        Controller::bar0_write(self, offset, data);
    }
    fn reset(&mut self) {
        Controller::reset(self);
    }
    fn report(&self) -> serde_json::Value {
        serde_json::to_value(Controller::report(self))
            .unwrap_or_else(|e| serde_json::json!({ "error": format!("report not serialisable: {e}") }))
    }
    fn inject_fatal(&mut self, why: &str) -> bool {
        Controller::inject_fatal(self, why)
    }
    fn firmware_assert(&mut self, why: &str) -> Result<u8, String> {
        Controller::firmware_assert(self, why).map_err(|e| e.to_string())
    }
    fn set_bus_master(&mut self, on: bool) {
        Controller::set_bus_master(self, on);
    }
    fn set_timing(&mut self, timing: Timing) -> Result<(), String> {
        Controller::set_timing(self, timing);
        Ok(())
    }
    fn hmb_audit(&self) -> Option<serde_json::Value> {
        Some(
            serde_json::to_value(Controller::hmb_audit(self))
                .unwrap_or_else(|e| serde_json::json!({ "error": format!("audit not serialisable: {e}") })),
        )
    }
    fn switch_personality(
        &mut self,
        personality: Personality,
        base: &ControllerConfig,
        trace: &hmb_nvme_trace::NvmeTrace,
    ) -> Result<(), String> {
        let cfg = personality.apply(base.clone());
        self.set_hmb_limits(cfg.hmpre_bytes, cfg.hmmin_bytes, cfg.hmminds_bytes, cfg.hmmaxd)
            .map_err(|e| e.to_string())?;
        trace.install(self, personality);
        log::info!(
            "emu-device NVMe controller is now the {personality} personality (HMPRE {} HMMIN {} HMMINDS {} HMMAXD {})",
            cfg.hmpre_bytes,
            cfg.hmmin_bytes,
            cfg.hmminds_bytes,
            cfg.hmmaxd
        );
        Ok(())
    }
}

impl From<PciIdentity> for Identity {
    fn from(p: PciIdentity) -> Identity {
        Identity {
            vendor: p.vendor,
            device: p.device,
            subsystem_vendor: p.subsystem_vendor,
            subsystem: p.subsystem,
            class_code: p.class_code,
            revision: p.revision,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NvmeServeOptions {
    pub socket: PathBuf,
    pub control_socket: PathBuf,
    /// Namespace size in bytes.
    pub namespace_bytes: u64,
    /// Sparse file behind the namespace (memory when `None`).
    pub backing: Option<PathBuf>,
    /// Identify HMPRE / HMMIN in bytes.
    pub hmb_preferred: u64,
    pub hmb_minimum: u64,
    /// Identify HMMAXD (0 = no limit reported).
    pub hmb_max_descriptors: u16,
    /// Accept a new QEMU after one disconnects (default: exit then).
    pub keep_serving: bool,
    /// Which controller to be (hmb-nvme-trace's personality.rs): HMB limits and the
    /// trace contract. Default `tracing`.
    pub personality: Personality,
    /// Which producer writes the trace ring: the Rust firmware model
    /// (default) or firmware-sdk's C library (docs/firmware-sdk.md).
    pub producer: ProducerKind,
    /// Bound of the controller's own history of trace records, served as
    /// NVMe Telemetry (hmb-nvme-trace's telemetry.rs; 64 KiB ..= about 32 MiB).
    pub telemetry_history_bytes: usize,
    /// Bound of the journal of records produced into adopted trace slices
    /// (the `ground-truth` answer; hmb-nvme-trace's journal.rs, at least 4 KiB):
    /// the oldest go, counted, beyond it.
    pub trace_journal_bytes: usize,
    /// Identify Controller's serial number (and so the subsystem NQN);
    /// `None`: the default. Two controllers in one guest need two, or
    /// Linux takes them for one subsystem and rejects the second.
    pub serial: Option<String>,
    /// When I/O completions are posted (hmb-nvme's timing.rs): at once (default) or when
    /// the NAND timing model says.
    pub timing: Timing,
}

impl NvmeServeOptions {
    pub(crate) fn controller_config(&self) -> ControllerConfig {
        self.personality.apply(self.base_config())
    }

    /// The served configuration before the personality's limits.
    fn base_config(&self) -> ControllerConfig {
        ControllerConfig {
            namespace_bytes: self.namespace_bytes,
            backing: match &self.backing {
                Some(p) => Backing::SparseFile(p.clone()),
                None => Backing::Memory,
            },
            hmpre_bytes: self.hmb_preferred,
            hmmin_bytes: self.hmb_minimum,
            hmmaxd: self.hmb_max_descriptors,
            serial: self
                .serial
                .clone()
                .unwrap_or_else(|| ControllerConfig::default().serial),
            timing: self.timing,
            ..ControllerConfig::default()
        }
    }
}

enum Event {
    Serve(ServeEvent),
    Shutdown(String),
}

/// The controller as `serve-nvme` serves it, with the firmware's trace
/// producer (issue 14: the advert by Set Features C0h, records of the
/// commands the controller really runs), behind fresh DMA and interrupt
/// tables. The fuzz targets build theirs here too.
pub fn traced_controller(
    cfg: ControllerConfig,
) -> Result<(Arc<Shared<Controller>>, hmb_nvme_trace::NvmeTrace), VfioUserError> {
    controller_as(cfg, Personality::Tracing)
}

/// [`controller_with`] and the Rust producer.
pub(crate) fn controller_as(
    cfg: ControllerConfig,
    personality: Personality,
) -> Result<(Arc<Shared<Controller>>, hmb_nvme_trace::NvmeTrace), VfioUserError> {
    controller_with(cfg, personality, ProducerKind::Rust)
}

/// [`traced_controller`] with the trace contract of `personality` (`cfg` is already the
/// personality's: [`Personality::apply`]), producing with `producer`.
pub(crate) fn controller_with(
    cfg: ControllerConfig,
    personality: Personality,
    producer: ProducerKind,
) -> Result<(Arc<Shared<Controller>>, hmb_nvme_trace::NvmeTrace), VfioUserError> {
    let dma = DmaMap::new();
    let irqs = Arc::new(IrqTable::new(cfg.interrupt_vectors));
    let sink: Arc<dyn InterruptSink> = irqs.clone();
    let mut controller = Controller::new(cfg, dma.guest_mem(), sink)?;
    let trace = hmb_nvme_trace::NvmeTrace::with_producer(dma.guest_mem(), producer);
    trace.install(&mut controller, personality);
    // The slice view maps guest RAM on its own: it must stop when QEMU takes
    // part of it away (docs/nvme-controller.md, "Transport").
    let unmapped = trace.clone();
    dma.on_unmap(move |address, size| {
        unmapped.dma_unmapped(address, size);
    });
    Ok((Shared::new(controller, dma, irqs), trace))
}

/// A running NVMe device; `shutdown_sender` lets signal handlers stop it.
pub struct NvmeServing {
    server: VfioUserServer,
    shared: Arc<Shared<Controller>>,
    control: ControlServer,
    rx: std::sync::mpsc::Receiver<Event>,
    tx: Sender<Event>,
    keep_serving: bool,
    /// Posts the completions `--timing model` holds back.
    timer: CompletionTimer,
}

impl NvmeServing {
    pub fn start(opts: &NvmeServeOptions) -> Result<NvmeServing, VfioUserError> {
        let cfg = opts.controller_config();
        let vectors = cfg.interrupt_vectors;
        if vectors == 0 || vectors > MAX_MSIX_VECTORS {
            return Err(VfioUserError::Vectors {
                vectors,
                max: MAX_MSIX_VECTORS,
            });
        }
        let (shared, trace) = controller_with(cfg, opts.personality, opts.producer)?;
        trace.set_history_bytes(opts.telemetry_history_bytes)?;
        trace.set_journal_bytes(opts.trace_journal_bytes)?;
        // Always: the control socket's `timing` may switch the model on later (an idle
        // timer waits on its condvar and costs nothing).
        let timer = CompletionTimer::start(shared.clone())?;
        let (tx, rx) = channel();
        let serve_tx = tx.clone();
        let server = VfioUserServer::start(
            &opts.socket,
            shared.clone(),
            &Controller::pci_identity().into(),
            Controller::BAR0_SIZE,
            vectors,
            opts.keep_serving,
            move |e| {
                let _ = serve_tx.send(Event::Serve(e));
            },
        )?;
        let control_tx = tx.clone();
        let handler = NvmeControl::new(shared.clone(), &opts.socket, move |why| {
            control_tx.send(Event::Shutdown(why)).is_ok()
        })
        .with_trace(trace)
        .with_personalities(opts.base_config());
        let control = ControlServer::start(&opts.control_socket, Arc::new(handler))?;
        log::info!(
            "emu-device serving an NVMe controller ({}, {} producer, timing {}): vfio-user {} control {} namespace {} bytes, HMB preferred {} bytes",
            opts.personality,
            opts.producer,
            opts.timing,
            opts.socket.display(),
            opts.control_socket.display(),
            opts.namespace_bytes,
            opts.hmb_preferred
        );
        Ok(NvmeServing {
            server,
            shared,
            control,
            rx,
            tx,
            keep_serving: opts.keep_serving,
            timer,
        })
    }

    /// Call with a reason to stop the device (signal handlers).
    pub fn shutdown_sender(&self) -> impl Fn(String) + Send + 'static {
        let tx = self.tx.clone();
        move |why| {
            let _ = tx.send(Event::Shutdown(why));
        }
    }

    /// Serve until shutdown (or, without keep_serving, until QEMU leaves).
    /// Returns why it stopped.
    pub fn run(self) -> Result<String, VfioUserError> {
        let NvmeServing {
            mut server,
            shared,
            control,
            rx,
            tx,
            keep_serving,
            timer,
        } = self;
        drop(tx);
        let result = loop {
            match rx.recv() {
                Ok(Event::Serve(ServeEvent::ClientJoined)) => log::info!("QEMU connected"),
                Ok(Event::Serve(ServeEvent::ClientLeft(failure))) => {
                    if let Some(f) = &failure {
                        log::warn!("QEMU's connection failed: {f}");
                    }
                    if !keep_serving {
                        break Ok("QEMU disconnected".to_string());
                    }
                }
                Ok(Event::Serve(ServeEvent::Stopped(why))) => {
                    break match why {
                        Some(e) => Err(VfioUserError::Stopped(e)),
                        None => Ok("the vfio-user server stopped".to_string()),
                    };
                }
                Ok(Event::Shutdown(why)) => break Ok(why),
                Err(_) => break Ok("every sender is gone".to_string()),
            }
        };
        drop(control);
        drop(timer);
        // The audit's last word, for runs that read only the log.
        match serde_json::to_string(&shared.function().hmb_audit()) {
            Ok(audit) => log::info!("hmb-audit at exit: {audit}"),
            Err(e) => log::warn!("hmb-audit at exit not serialisable: {e}"),
        }
        server.shutdown();
        result
    }
}
