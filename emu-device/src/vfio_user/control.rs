//! The control socket of the NVMe device: the same line-delimited JSON as
//! the ivshmem device's (control.rs), answering what this device has.
//! `status` and `stats` report the transport (DMA mappings, MSI-X vectors,
//! message counters), the controller's own report (registers, queues and
//! their counters, the HMB state) and the trace producer's (hmb-nvme-trace:
//! adopted generation, records, epochs). `ground-truth` returns the
//! producer's journal: every record the controller produced or dropped.
//! `inject reset` sets the controller's fatal status (CSTS.CFS); `inject
//! firmware-assert` makes it capture Controller-Initiated Telemetry and send
//! the Telemetry Log Changed notice, and carry on. The ring
//! faults of a hostile controller (`corrupt-magic`, `bump-version`,
//! `unknown-flag`, `rewind-header`, `hostile`) are written into the adopted
//! trace slice by the same functions as on the ivshmem device (faults.rs),
//! so a conformance scenario means the same on both. Workload production,
//! `stall`, `late-stop` and `vanish` are refused: on this device the records
//! come from the commands the guest really runs, and removal is QEMU's
//! `device_del` or the process's death.

use std::sync::Arc;

use serde_json::json;

use hmb_nvme_trace::{AdoptedRing, NvmeTrace};
use hmb_trace_abi::{offsets, HMB_RING_HDR_SIZE};

use super::backend::{PciFunction, Shared};
use super::error::VfioUserError;
use crate::control::{Fault, Handler, Request, Response};
use crate::ivshmem::advert::Slice;
use crate::ivshmem::faults::{self, FaultEffect};
use crate::ivshmem::hmb::MemRegion;

type ShutdownFn = Box<dyn Fn(String) -> bool + Send + Sync>;

pub(crate) struct NvmeControl<F> {
    shared: Arc<Shared<F>>,
    socket: String,
    shutdown: ShutdownFn,
    trace: Option<NvmeTrace>,
    /// The served configuration before any personality, for `personality`.
    base: Option<hmb_nvme::ControllerConfig>,
}

impl<F: PciFunction> NvmeControl<F> {
    /// `shutdown` asks the device to stop (false: it is already stopping).
    pub(crate) fn new(
        shared: Arc<Shared<F>>,
        socket: &std::path::Path,
        shutdown: impl Fn(String) -> bool + Send + Sync + 'static,
    ) -> Self {
        let shutdown = Box::new(shutdown);
        NvmeControl {
            shared,
            socket: socket.display().to_string(),
            shutdown,
            trace: None,
            base: None,
        }
    }

    /// Answer `ground-truth` (and report in `status`) from the controller's
    /// trace producer: its journal of every record produced or dropped.
    pub(crate) fn with_trace(mut self, trace: NvmeTrace) -> Self {
        self.trace = Some(trace);
        self
    }

    /// Answer `personality`: the function may become another personality of `base`.
    pub(crate) fn with_personalities(mut self, base: hmb_nvme::ControllerConfig) -> Self {
        self.base = Some(base);
        self
    }

    fn switch_personality(&self, personality: hmb_nvme_trace::Personality) -> Response {
        let (Some(trace), Some(base)) = (&self.trace, &self.base) else {
            return Response::err("this nvme device has no personalities to switch between");
        };
        match self.shared.function().switch_personality(personality, base, trace) {
            Ok(()) => Response::ok(json!({ "personality": personality.name() })),
            Err(e) => Response::err(format!("cannot become {personality}: {e}")),
        }
    }

    fn trace_status(&self) -> serde_json::Value {
        match &self.trace {
            None => serde_json::Value::Null,
            Some(t) => {
                // Counted, not copied: `status` comes every few seconds in a
                // soak, and the journal may hold a million records.
                let j = t.journal_counts();
                json!({
                    "adopted_generation": t.adopted_generation(),
                    "records": j.written,
                    "dropped": j.dropped,
                    "journal_evicted": j.evicted,
                    "epochs": j.epochs,
                    "frozen": j.frozen,
                    "withdrawn": j.withdrawn,
                })
            }
        }
    }

    /// A hostile controller's write into the adopted slice.
    fn ring_fault(&self, fault: Fault) -> Response {
        let Some(trace) = &self.trace else {
            return Response::err("this nvme device runs no trace producer");
        };
        let stop = matches!(fault, Fault::Hostile);
        match trace.with_adopted_ring(stop, |ring| write_fault(ring, &fault)) {
            None => Response::err("no trace slice is adopted (the driver has not advertised one)"),
            Some(Err(e)) => Response::err(format!("{fault:?}: {e}")),
            Some(Ok(effect)) => Response::ok(json!({ "fault": effect })),
        }
    }

    fn status(&self) -> serde_json::Value {
        json!({
            "device": "nvme",
            "transport": "vfio-user",
            "socket": self.socket,
            "vfio_user": self.shared.transport_report(),
            "controller": self.shared.function().report(),
            "trace": self.trace_status(),
        })
    }
}

impl<F: PciFunction> Handler for NvmeControl<F>
where
    Shared<F>: Send + Sync,
{
    fn handle(&self, req: Request) -> Response {
        match req {
            Request::Status | Request::Stats => Response::ok(self.status()),
            Request::Interrupt { vector } => {
                self.shared.irqs.raise(vector);
                Response::ok(json!({ "raised": vector }))
            }
            Request::GroundTruth => match &self.trace {
                Some(t) => Response::ok(json!({ "device": "nvme", "journal": t.journal() })),
                None => Response::err("this nvme device runs no trace producer"),
            },
            // A real controller reset from the device's side: Controller
            // Fatal Status (the producer writes FROZEN as its last HMB write);
            // the driver notices on its next command timeout and resets.
            Request::Inject(Fault::Reset) => match self.shared.function().inject_fatal("control request") {
                true => Response::ok(json!({ "fatal_status": true })),
                false => Response::err("the controller is not running (disabled, shut down or already failed)"),
            },
            // A recovered firmware assert: Controller-Initiated Telemetry and its notice.
            Request::Inject(Fault::FirmwareAssert) => match self.shared.function().firmware_assert("control request") {
                Ok(generation) => Response::ok(json!({ "controller_telemetry_generation": generation })),
                Err(why) => Response::err(format!("firmware assert: nothing captured: {why}")),
            },
            Request::Inject(
                fault @ (Fault::CorruptMagic
                | Fault::BumpVersion { .. }
                | Fault::UnknownFlag
                | Fault::RewindHeader
                | Fault::Hostile),
            ) => self.ring_fault(fault),
            Request::Personality { personality } => self.switch_personality(personality),
            Request::Timing { timing } => match timing.parse::<hmb_nvme::Timing>() {
                Ok(t) => match self.shared.function().set_timing(t) {
                    Ok(()) => Response::ok(json!({ "timing": t.to_string() })),
                    Err(why) => Response::err(why),
                },
                Err(why) => Response::err(why),
            },
            Request::HmbAudit => match self.shared.function().hmb_audit() {
                Some(a) => Response::ok(a),
                None => Response::err("this function keeps no HMB audit"),
            },
            Request::Shutdown => match (self.shutdown)("control request".into()) {
                true => Response::ok(json!({ "shutting_down": true })),
                false => Response::err("the device is already stopping"),
            },
            other => Response::err(format!(
                "{other:?} is not available on the nvme device: its trace records are the commands \
                 the guest runs (no synthetic workload), and removal is QEMU's device_del"
            )),
        }
    }
}

/// The slice seen as the ivshmem device sees its HMB: a region whose
/// header is at offset 0.
fn write_fault(ring: AdoptedRing, fault: &Fault) -> Result<FaultEffect, VfioUserError> {
    // SAFETY: `with_adopted_ring` keeps the slice mapped while this runs.
    let mem = unsafe { MemRegion::from_raw(ring.base, ring.len) };
    let slice = Slice {
        offset: 0,
        len: ring.len as u64,
        epoch: ring.generation,
        ring_size: (ring.len as u64).saturating_sub(u64::from(HMB_RING_HDR_SIZE)),
    };
    match fault {
        Fault::CorruptMagic => Ok(faults::corrupt_magic(&mem, &slice)?),
        Fault::BumpVersion { part } => Ok(faults::bump_version(&mem, &slice, *part)?),
        Fault::UnknownFlag => Ok(faults::unknown_flag(&mem, &slice)?),
        Fault::RewindHeader => Ok(faults::rewind_header(&mem, &slice)?),
        Fault::Hostile => {
            let head = mem.load_u64(offsets::HEAD)?;
            let seq = mem.load_u64(offsets::NEXT_SEQ)?;
            Ok(faults::hostile_record(&mem, &slice, head, seq)?)
        }
        other => Err(VfioUserError::NotARingFault(other.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfio_user::{DmaMap, IrqTable};

    /// A function that fails once when asked, like a running controller.
    struct Failing {
        running: bool,
    }

    impl PciFunction for Failing {
        fn bar0_read(&mut self, _offset: u64, _data: &mut [u8]) {}
        fn bar0_write(&mut self, _offset: u64, _data: &[u8]) {}
        fn reset(&mut self) {}
        fn report(&self) -> serde_json::Value {
            json!({ "running": self.running })
        }
        fn inject_fatal(&mut self, _why: &str) -> bool {
            std::mem::replace(&mut self.running, false)
        }
    }

    #[test]
    fn inject_reset_fails_the_function_once_and_other_faults_are_refused() {
        let shared = Shared::new(Failing { running: true }, DmaMap::new(), Arc::new(IrqTable::new(1)));
        let control = NvmeControl::new(shared.clone(), std::path::Path::new("/s"), |_| true);
        let first = control.handle(Request::Inject(Fault::Reset));
        assert!(first.ok, "{first:?}");
        assert_eq!(shared.function().report()["running"], false);
        let again = control.handle(Request::Inject(Fault::Reset));
        assert!(!again.ok && again.error.unwrap().contains("not running"));
        assert!(!control.handle(Request::Inject(Fault::CorruptMagic)).ok);
    }
}
