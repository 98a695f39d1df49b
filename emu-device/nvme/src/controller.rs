//! The controller's state, construction, accessors and report. Its behaviour lives in
//! `bar0` (register accesses), `lifecycle` (enable/reset/shutdown/CFS), `doorbell` (queue
//! processing), `admin` and `io` (commands). The caller serialises calls.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crate::admin::Features;
use crate::audit::HmbAudit;
use crate::config::MAX_QUEUE_PAIRS;
use crate::hmb::HmbAttributes;
use crate::media::MediaModel;
use crate::namespace::Namespace;
use crate::observer::{NoVendorFeatures, NullObserver};
use crate::queue::{CompQueue, SubQueue};
use crate::regs::*;
use crate::report::{Counters, HmbReport, NamespaceReport, QueueReport, TelemetryReport};
use crate::{
    CommandObserver, ControllerConfig, ControllerReport, Error, GuestMem, HmbDescriptor, HostMemoryBuffer,
    InterruptSink, PciIdentity, VendorFeatures,
};

pub struct Controller {
    pub(crate) cfg: ControllerConfig,
    pub(crate) mem: GuestMem,
    pub(crate) irq: Arc<dyn InterruptSink>,
    pub(crate) observer: Box<dyn CommandObserver>,
    pub(crate) vendor: Box<dyn VendorFeatures>,
    pub(crate) ns: Namespace,
    pub(crate) media: MediaModel,
    pub(crate) epoch: Instant,
    pub(crate) cc: u32,
    pub(crate) csts: u32,
    pub(crate) aqa: u32,
    pub(crate) asq: u64,
    pub(crate) acq: u64,
    pub(crate) intms: u32,
    pub(crate) sqs: Vec<Option<SubQueue>>,
    pub(crate) cqs: Vec<Option<CompQueue>>,
    /// CIDs of outstanding Asynchronous Event Requests.
    pub(crate) aers: Vec<u16>,
    /// Async events not yet reported (CQE DW0 values), and the event types reported but
    /// not yet cleared by reading their log page (masked until then).
    pub(crate) events: VecDeque<u32>,
    pub(crate) masked_event_types: u8,
    pub(crate) feat: Features,
    pub(crate) hmb: Option<HostMemoryBuffer>,
    pub(crate) hmb_attrs: HmbAttributes,
    /// Set Features 0Dh DW11 bits EHM and MR of the enabled buffer (Get Features DW0).
    pub(crate) hmb_bits: u32,
    /// PCI Bus Master Enable: while false the controller makes no memory access (no SQE
    /// fetch, no data, no CQE, no MSI-X). Starts true: a model without a transport (the
    /// FakeHost) has no config space; the transport reports every command-register write.
    pub(crate) bus_master: bool,
    /// Controller clock at the last controller reset (Timestamp origin 000b counts from it).
    pub(crate) reset_ns: u64,
    /// The descriptor list of the last enabled HMB, for MR=1 (memory return).
    pub(crate) retained_hmb: Option<Vec<HmbDescriptor>>,
    pub(crate) hmb_report: HmbReport,
    /// The controller's private data in the HMB and the host-write detector.
    pub(crate) audit: HmbAudit,
    pub(crate) counters: Counters,
    pub(crate) fatal_reason: Option<String>,
    /// Telemetry Host-Initiated log (07h): kept across resets, replaced only by a create.
    pub(crate) host_telemetry: crate::admin::HostTelemetry,
    /// Telemetry Controller-Initiated log (08h): kept across resets, replaced only by a
    /// capture after a read with RAE = 0 released the last one.
    pub(crate) controller_telemetry: crate::admin::ControllerTelemetry,
    /// Error Information log (01h), kept across resets.
    pub(crate) error_log: crate::admin::ErrorLog,
    /// Bounce buffer of the data path (reused: no allocation per command).
    pub(crate) scratch: Vec<u8>,
    /// Completions the timing model holds back (timing.rs).
    pub(crate) deferred: crate::timing::Deferred,
    /// Doorbell Buffer Config's shadow doorbell and EventIdx buffers (shadow.rs); a
    /// controller reset forgets them.
    pub(crate) dbbuf: Option<crate::shadow::DoorbellBuffers>,
    /// The observer's calls of an I/O queue's pass, made after its interrupt (held.rs).
    pub(crate) held: crate::held::Held,
}

impl Controller {
    /// BAR0: registers at 0, doorbells from 0x1000 (DSTRD = 0: 4 bytes each).
    pub const BAR0_SIZE: u64 = 0x4000;

    /// Not QEMU's 1b36:0010 (the Linux driver quirks it): 1234 is the experimental vendor id
    /// QEMU's own test devices use, absent from the driver's id table, so no quirk applies.
    pub fn pci_identity() -> PciIdentity {
        PciIdentity {
            vendor: 0x1234,
            device: 0x4e56,
            subsystem_vendor: 0x1234,
            subsystem: 0x4e56,
            class_code: 0x010802,
            revision: 1,
        }
    }

    pub fn new(cfg: ControllerConfig, mem: GuestMem, irq: Arc<dyn InterruptSink>) -> Result<Self, Error> {
        cfg.validate()?;
        let ns = Namespace::new(&cfg.backing, cfg.namespace_bytes, cfg.lba_shift, &cfg.media)?;
        let media = MediaModel::default();
        let pairs = usize::from(cfg.max_io_queues) + 1;
        debug_assert!(pairs as u32 <= MAX_QUEUE_PAIRS);
        let hmb_report = HmbReport {
            preferred_bytes: cfg.hmpre_bytes,
            minimum_bytes: cfg.hmmin_bytes,
            ..Default::default()
        };
        Ok(Controller {
            irq,
            mem,
            observer: Box::new(NullObserver),
            vendor: Box::new(NoVendorFeatures),
            ns,
            media,
            epoch: Instant::now(),
            cc: 0,
            csts: 0,
            aqa: 0,
            asq: 0,
            acq: 0,
            intms: 0,
            sqs: vec![None; pairs],
            cqs: vec![None; pairs],
            aers: Vec::new(),
            events: VecDeque::new(),
            masked_event_types: 0,
            feat: Features::default(),
            hmb: None,
            hmb_attrs: HmbAttributes::default(),
            hmb_bits: 0,
            bus_master: true,
            reset_ns: 0,
            retained_hmb: None,
            hmb_report,
            audit: HmbAudit::default(),
            counters: Counters::default(),
            fatal_reason: None,
            host_telemetry: Default::default(),
            controller_telemetry: Default::default(),
            error_log: Default::default(),
            scratch: Vec::new(),
            deferred: Default::default(),
            dbbuf: None,
            held: Default::default(),
            cfg,
        })
    }

    pub fn set_observer(&mut self, o: Box<dyn CommandObserver>) {
        self.observer = o;
    }

    pub fn set_vendor_features(&mut self, v: Box<dyn VendorFeatures>) {
        self.vendor = v;
    }

    pub fn config(&self) -> &ControllerConfig {
        &self.cfg
    }

    /// MSI-X vectors the transport should expose (a CQ's IV must be below this).
    pub fn interrupt_vectors(&self) -> u16 {
        self.cfg.interrupt_vectors
    }

    pub(crate) fn cc(&self) -> u32 {
        self.cc
    }

    /// The HMB while it is enabled.
    pub fn hmb(&self) -> Option<&HostMemoryBuffer> {
        self.hmb.as_ref()
    }

    /// The host-write detector's findings and the HMB commands it saw (audit.rs).
    pub fn hmb_audit(&self) -> crate::HmbAuditReport {
        self.audit.report()
    }

    /// Nanoseconds since the controller was created: the clock of every observer event.
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    // ---- Report ----------------------------------------------------------------------

    pub fn report(&self) -> ControllerReport {
        let mut queues = Vec::new();
        for (qid, sq) in self.sqs.iter().enumerate() {
            if let Some(s) = sq {
                queues.push(QueueReport {
                    kind: "sq",
                    qid: qid as u16,
                    entries: s.entries,
                    head: s.head,
                    tail: s.tail,
                    cqid: Some(s.cqid),
                    iv: None,
                    ien: None,
                    commands: s.fetched,
                });
            }
        }
        for (qid, cq) in self.cqs.iter().enumerate() {
            if let Some(c) = cq {
                queues.push(QueueReport {
                    kind: "cq",
                    qid: qid as u16,
                    entries: c.entries,
                    head: c.head,
                    tail: c.tail,
                    cqid: None,
                    iv: Some(c.iv),
                    ien: Some(c.ien),
                    commands: c.posted,
                });
            }
        }
        let mut hmb = self.hmb_report.clone();
        hmb.enabled = self.hmb.is_some();
        hmb.returned = self.hmb.as_ref().is_some_and(|h| h.returned());
        hmb.descriptors = self.hmb.as_ref().map(|h| h.descriptors().to_vec()).unwrap_or_default();
        hmb.bytes = self.hmb.as_ref().map_or(0, |h| h.len());
        let mut counters = self.counters.clone();
        counters.media_ops = self.media.ops;
        ControllerReport {
            cc: self.cc,
            csts: self.csts,
            ready: self.csts & CSTS_RDY != 0,
            fatal: self.csts & CSTS_CFS != 0,
            shutdown_status: ((self.csts >> 2) & 3) as u8,
            fatal_reason: self.fatal_reason.clone(),
            bus_master: self.bus_master,
            timing: self.cfg.timing,
            completions_deferred_now: self.deferred.len(),
            io_queues_allocated: self.io_queues_allocated(),
            queues,
            aer_outstanding: self.aers.len(),
            counters,
            hmb,
            namespace: NamespaceReport {
                nsid: 1,
                bytes: self.ns.bytes,
                lba_bytes: 1 << self.ns.lba_shift,
                backing: self.ns.backing_name(),
                ftl: self.ns.ftl.stats(),
            },
            telemetry: TelemetryReport {
                host_generation: self.host_telemetry.generation(),
                host_last_block: self.host_telemetry.last_block(),
                controller_available: self.controller_telemetry.available(),
                controller_generation: self.controller_telemetry.generation(),
                controller_last_block: self.controller_telemetry.last_block(),
            },
        }
    }

    /// I/O queue pairs the host may create: Set Features 07h's allocation, or all.
    pub(crate) fn io_queues_allocated(&self) -> u16 {
        self.feat
            .queues
            .map_or(self.cfg.max_io_queues, |(nsq, ncq)| nsq.min(ncq) + 1)
    }
}
