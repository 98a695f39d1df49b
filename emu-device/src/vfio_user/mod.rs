//! The NVMe controller served to QEMU's `vfio-user-pci` over a unix socket
//! with rust-vmm's `vfio_user` crate: the guest sees a PCI function and
//! its stock nvme driver drives it; guest RAM reaches the controller as
//! DMA-mapped memfd ranges. docs/nvme-controller.md ("Transport") has the
//! decisions.
//!
//! - [`config_space`]: PCI header and capabilities (PM, MSI-X, PCIe).
//! - [`dma`]: DMA_MAP/UNMAP into vm-memory guest memory.
//! - [`irqs`]: MSI-X eventfds from SET_IRQS.
//! - [`backend`]: the `ServerBackend` tying them to the function.
//! - [`serve`]: the socket, one client at a time, again after a disconnect.
//! - [`control`]: the JSON control socket's answers for this device.
//! - [`qemu`]: the QEMU arguments that attach it.
//! - [`nvme`]: the `hmb-nvme` controller wired to all of the above.
//! - [`completion_timer`]: posts the completions `--timing model` defers.

pub mod backend;
pub mod completion_timer;
pub mod config_space;
pub mod control;
pub mod dma;
pub mod error;
pub mod irqs;
pub mod nvme;
pub mod qemu;
pub mod serve;

pub use backend::{Backend, PciFunction, Shared, TransportCounters};
pub use config_space::{Identity, MAX_MSIX_VECTORS};
pub use dma::{DmaMap, GuestMem};
pub use error::VfioUserError;
pub use irqs::IrqTable;
pub use qemu::qemu_vfio_user_args;
pub use serve::{ServeEvent, VfioUserServer};

use std::sync::Arc;

impl<F: PciFunction> Shared<F> {
    /// Shared state for `function`, whose guest memory is `dma`'s and
    /// whose interrupts go to `irqs`.
    pub fn new(function: F, dma: DmaMap, irqs: Arc<IrqTable>) -> Arc<Shared<F>> {
        Arc::new(Shared {
            function: std::sync::Mutex::new(function),
            dma,
            irqs,
            counters: TransportCounters::default(),
        })
    }

    /// The transport's half of `status`: mappings, vectors, counters.
    pub fn transport_report(&self) -> serde_json::Value {
        serde_json::json!({
            "dma": self.dma.mappings(),
            "msix": self.irqs.report(),
            "counters": self.counters.report(),
        })
    }
}
