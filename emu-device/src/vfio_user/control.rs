//! The control socket of the NVMe device: the same line-delimited JSON as
//! the ivshmem device's (control.rs), answering what this device has.
//! `status` and `stats` report the transport (DMA mappings, MSI-X vectors,
//! message counters) and the controller's own report (registers, queues
//! and their counters, the HMB state). Production and fault requests need
//! the firmware model on a trace ring in the HMB (issue 14) and are
//! refused with a clear error until then.

use std::sync::Arc;

use serde_json::json;

use super::backend::{PciFunction, Shared};
use crate::control::{Handler, Request, Response};

type ShutdownFn = Box<dyn Fn(String) -> bool + Send + Sync>;

pub struct NvmeControl<F> {
    shared: Arc<Shared<F>>,
    socket: String,
    shutdown: ShutdownFn,
}

impl<F: PciFunction> NvmeControl<F> {
    /// `shutdown` asks the device to stop (false: it is already stopping).
    pub fn new(
        shared: Arc<Shared<F>>,
        socket: &std::path::Path,
        shutdown: impl Fn(String) -> bool + Send + Sync + 'static,
    ) -> Self {
        let shutdown = Box::new(shutdown);
        NvmeControl {
            shared,
            socket: socket.display().to_string(),
            shutdown,
        }
    }

    fn status(&self) -> serde_json::Value {
        json!({
            "device": "nvme",
            "transport": "vfio-user",
            "socket": self.socket,
            "vfio_user": self.shared.transport_report(),
            "controller": self.shared.function().report(),
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
            Request::Shutdown => match (self.shutdown)("control request".into()) {
                true => Response::ok(json!({ "shutting_down": true })),
                false => Response::err("the device is already stopping"),
            },
            other => Response::err(format!(
                "{other:?} is not available on the nvme device: production, faults and ground truth \
                 need the firmware model's trace ring in the HMB (issue 14)"
            )),
        }
    }
}
