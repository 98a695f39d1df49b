//! The `vfio_user::ServerBackend` of the NVMe function: config space here,
//! BAR0 to the controller, DMA_MAP/UNMAP into the guest memory the
//! controller reads, SET_IRQS into the MSI-X eventfd table, DEVICE_RESET to
//! the controller's function-level reset.
//!
//! Every guest mistake is answered as a device answers it (reads of 0,
//! dropped writes, an NVMe status from the controller), never with an
//! error reply: the crate sends those with errno 0, which QEMU cannot
//! tell from success.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ::vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion};
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR4_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_ERR_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS,
    VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};

use super::config_space::{ConfigSpace, Identity, BAR4_SIZE, CONFIG_SIZE};
use super::dma::{DmaMap, MapRefused};
use super::irqs::IrqTable;

/// What the transport serves: a PCI function's BAR0 registers and its
/// reset. Implemented by `hmb_nvme::Controller`; tests use small stand-ins.
pub trait PciFunction: Send + 'static {
    fn bar0_read(&mut self, offset: u64, data: &mut [u8]);
    fn bar0_write(&mut self, offset: u64, data: &[u8]);
    /// Function-level reset (vfio-user DEVICE_RESET, QEMU disconnecting).
    fn reset(&mut self);
    /// The function's own report for the control socket.
    fn report(&self) -> serde_json::Value;
    /// Fail as the device itself would (an NVMe controller: CSTS.CFS), on
    /// the control socket's `inject reset`; false if it cannot now.
    fn inject_fatal(&mut self, _why: &str) -> bool {
        false
    }
    /// A recovered firmware assert (the control socket's `inject firmware-assert`): an
    /// NVMe controller captures Controller-Initiated Telemetry and announces it. Returns
    /// the capture's generation number, or why nothing was captured.
    fn firmware_assert(&mut self, _why: &str) -> Result<u8, String> {
        Err("this function has no firmware to assert".into())
    }
    /// The function's host-write audit of its HMB (an NVMe controller: hmb-nvme's
    /// `HmbAuditReport`), for the control socket's `hmb-audit`; None if it keeps none.
    fn hmb_audit(&self) -> Option<serde_json::Value> {
        None
    }
    /// When I/O completions are posted from now on (an NVMe controller: hmb-nvme's
    /// `Timing`, the control socket's `timing`); Err says why not.
    fn set_timing(&mut self, _timing: hmb_nvme::Timing) -> Result<(), String> {
        Err("this function has no completion timing".into())
    }
    /// The command register's Bus Master Enable as the client just wrote it (an NVMe
    /// controller stops all its memory accesses while it is 0).
    fn set_bus_master(&mut self, _on: bool) {}
    /// Become `personality` (its limits applied to `base`, the served configuration
    /// before any personality) with `trace`'s contract, on the control socket's
    /// `personality`; Err says why not (a driver runs the function, or it has none).
    fn switch_personality(
        &mut self,
        _personality: hmb_nvme_trace::Personality,
        _base: &hmb_nvme::ControllerConfig,
        _trace: &hmb_nvme_trace::NvmeTrace,
    ) -> Result<(), String> {
        Err("this function has no personalities".into())
    }
}

/// Counters of the transport, for `status`/`stats`.
#[derive(Default)]
pub struct TransportCounters {
    pub config_reads: AtomicU64,
    pub config_writes: AtomicU64,
    pub bar0_reads: AtomicU64,
    pub bar0_writes: AtomicU64,
    pub other_region_accesses: AtomicU64,
    pub dma_maps: AtomicU64,
    pub dma_maps_refused: AtomicU64,
    pub dma_unmaps: AtomicU64,
    pub set_irqs: AtomicU64,
    pub resets: AtomicU64,
    pub clients: AtomicU64,
}

impl TransportCounters {
    pub(crate) fn report(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "config_reads": g(&self.config_reads),
            "config_writes": g(&self.config_writes),
            "bar0_reads": g(&self.bar0_reads),
            "bar0_writes": g(&self.bar0_writes),
            "other_region_accesses": g(&self.other_region_accesses),
            "dma_maps": g(&self.dma_maps),
            "dma_maps_refused": g(&self.dma_maps_refused),
            "dma_unmaps": g(&self.dma_unmaps),
            "set_irqs": g(&self.set_irqs),
            "resets": g(&self.resets),
            "clients": g(&self.clients),
        })
    }
}

/// State shared between the serving thread and the control socket.
pub struct Shared<F> {
    pub function: Mutex<F>,
    pub dma: DmaMap,
    pub irqs: Arc<IrqTable>,
    pub counters: TransportCounters,
}

impl<F: PciFunction> Shared<F> {
    pub fn function(&self) -> std::sync::MutexGuard<'_, F> {
        self.function.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Backend<F> {
    shared: Arc<Shared<F>>,
    config: ConfigSpace,
}

impl<F: PciFunction> Backend<F> {
    /// `msix_vectors` must match the function's (and `shared.irqs`).
    pub fn new(shared: Arc<Shared<F>>, identity: &Identity, bar0_size: u64, msix_vectors: u16) -> Backend<F> {
        Backend {
            shared,
            config: ConfigSpace::new(identity, bar0_size, msix_vectors),
        }
    }

    /// The region table for `vfio_user::Server`: config space, BAR0, BAR4;
    /// the other BARs, the ROM and VGA have size 0 (absent). No region is
    /// mmap-able: every access is a message, so every doorbell reaches the
    /// controller.
    pub fn regions(&self) -> Vec<ServerRegion> {
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = match index {
                    VFIO_PCI_CONFIG_REGION_INDEX => CONFIG_SIZE as u64,
                    VFIO_PCI_BAR0_REGION_INDEX => self.config.bar0_size(),
                    VFIO_PCI_BAR4_REGION_INDEX => BAR4_SIZE,
                    _ => 0,
                };
                let flags = if size > 0 {
                    VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
                } else {
                    0
                };
                ServerRegion {
                    region_info: vfio_region_info {
                        argsz: std::mem::size_of::<vfio_region_info>() as u32,
                        flags,
                        index,
                        cap_offset: 0,
                        size,
                        offset: 0,
                    },
                    sparse_areas: Vec::new(),
                    mmap_fd: None,
                }
            })
            .collect()
    }

    /// The irq table: MSI-X, plus one ERR vector that is never raised
    /// (without it QEMU warns that it "could not enable error recovery");
    /// no INTx pin, no MSI, no REQ.
    pub fn irqs(&self) -> Vec<IrqInfo> {
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                let count = match index {
                    VFIO_PCI_MSIX_IRQ_INDEX => u32::from(self.config.msix_vectors()),
                    VFIO_PCI_ERR_IRQ_INDEX => 1,
                    _ => 0,
                };
                IrqInfo {
                    index,
                    flags: if count > 0 { VFIO_IRQ_INFO_EVENTFD } else { 0 },
                    count,
                }
            })
            .collect()
    }

    /// The client went away: the function resets, guest memory and
    /// eventfds are dropped, and config space is as at power-on, ready for
    /// the next client.
    pub fn disconnected(&mut self) {
        self.shared.function().reset();
        self.shared.dma.unmap_all();
        self.shared.irqs.clear();
        self.config.reset();
        // Back to "no command-register write seen": the function may master again, so
        // a client that never forwards BME still works (docs/nvme-controller.md).
        self.shared.function().set_bus_master(true);
    }

    /// A new client sent its first message.
    pub(crate) fn client_joined(&mut self) {
        self.count(&self.shared.counters.clients);
    }

    fn count(&self, c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl<F: PciFunction> ServerBackend for Backend<F> {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> std::io::Result<()> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                self.count(&self.shared.counters.config_reads);
                self.config.read(offset, data);
            }
            VFIO_PCI_BAR0_REGION_INDEX => {
                self.count(&self.shared.counters.bar0_reads);
                self.shared.function().bar0_read(offset, data);
            }
            _ => {
                // BAR4 outside the MSI-X table and PBA (which QEMU
                // emulates) and absent regions: reads of 0.
                self.count(&self.shared.counters.other_region_accesses);
                data.fill(0);
            }
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        match region {
            VFIO_PCI_CONFIG_REGION_INDEX => {
                self.count(&self.shared.counters.config_writes);
                self.config.write(offset, data);
                if ConfigSpace::writes_command(offset, data.len()) {
                    let on = self.config.bus_master();
                    log::debug!("PCI command register write: bus master {on}");
                    self.shared.function().set_bus_master(on);
                }
            }
            VFIO_PCI_BAR0_REGION_INDEX => {
                self.count(&self.shared.counters.bar0_writes);
                self.shared.function().bar0_write(offset, data);
            }
            _ => self.count(&self.shared.counters.other_region_accesses),
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> std::io::Result<()> {
        match self.shared.dma.map(address, size, offset, fd) {
            Ok(()) => {
                self.count(&self.shared.counters.dma_maps);
                log::debug!("DMA_MAP {address:#x}+{size:#x} (file offset {offset:#x}, {flags:?})");
            }
            Err(why) => {
                self.count(&self.shared.counters.dma_maps_refused);
                // QEMU maps its ROMs and BIOS shadows without a file
                // descriptor: expected, and no NVMe queue lives there.
                let level = if why == MapRefused::NoFd {
                    log::Level::Info
                } else {
                    log::Level::Warn
                };
                log::log!(
                    level,
                    "DMA_MAP {address:#x}+{size:#x} not applied: {why}; the device cannot reach it"
                );
            }
        }
        Ok(())
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> std::io::Result<()> {
        self.count(&self.shared.counters.dma_unmaps);
        if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            log::debug!("DMA_UNMAP all");
            self.shared.dma.unmap_all();
        } else {
            let n = self.shared.dma.unmap(address, size);
            log::debug!("DMA_UNMAP {address:#x}+{size:#x}: {n:#x} bytes were mapped");
        }
        Ok(())
    }

    fn reset(&mut self) -> std::io::Result<()> {
        self.count(&self.shared.counters.resets);
        log::info!("vfio-user DEVICE_RESET: function-level reset of the controller");
        // Config space stays as it is, as Linux's vfio-pci restores it
        // around a function reset: QEMU keeps the BARs where it put them.
        self.shared.function().reset();
        Ok(())
    }

    fn set_irqs(&mut self, index: u32, flags: u32, start: u32, count: u32, fds: Vec<File>) -> std::io::Result<()> {
        self.count(&self.shared.counters.set_irqs);
        log::debug!(
            "SET_IRQS index {index} flags {flags:#x} start {start} count {count} fds {}",
            fds.len()
        );
        self.shared.irqs.set_irqs(index, flags, start, count, fds);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfio_user::{DmaMap, IrqTable};

    /// Records what the transport tells the function about Bus Master Enable.
    #[derive(Default)]
    struct Recorder {
        bme: Vec<bool>,
    }

    impl PciFunction for Recorder {
        fn bar0_read(&mut self, _offset: u64, _data: &mut [u8]) {}
        fn bar0_write(&mut self, _offset: u64, _data: &[u8]) {}
        fn reset(&mut self) {}
        fn report(&self) -> serde_json::Value {
            serde_json::Value::Null
        }
        fn set_bus_master(&mut self, on: bool) {
            self.bme.push(on);
        }
    }

    #[test]
    fn command_register_writes_reach_the_function_as_bus_master_enable() {
        let shared = Shared::new(Recorder::default(), DmaMap::new(), Arc::new(IrqTable::new(1)));
        let identity = Identity {
            vendor: 0x1d1d,
            device: 0x2001,
            subsystem_vendor: 0x1d1d,
            subsystem: 1,
            class_code: 0x010802,
            revision: 2,
        };
        let mut b = Backend::new(shared.clone(), &identity, 0x4000, 1);
        let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
        b.region_write(cfg, 4, &0x0006u16.to_le_bytes()).unwrap(); // memory + master
        b.region_write(cfg, 4, &0x0002u16.to_le_bytes()).unwrap(); // memory only
        b.region_write(cfg, 0, &0x0000_0006u32.to_le_bytes()).unwrap(); // ids, not the command
        b.region_write(cfg, 2, &[0x00, 0x00, 0x06]).unwrap(); // a write spanning the register
        b.region_write(cfg, 0x10, &0u32.to_le_bytes()).unwrap(); // a BAR: not the command
        assert_eq!(shared.function().bme, vec![true, false, true]);
        b.disconnected();
        assert_eq!(shared.function().bme.last(), Some(&true));
    }
}
