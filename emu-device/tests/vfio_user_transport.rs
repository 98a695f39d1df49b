//! The vfio-user transport against the `vfio_user` crate's own client
//! playing QEMU, with a small register-file function behind it (the NVMe
//! controller's own protocol tests are in vfio_user_nvme.rs): handshake,
//! region table, config space, DMA through a memfd, MSI-X eventfds,
//! reset, and a second client after a disconnect.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hmb_emu_device::vfio_user::{
    DmaMap, GuestMem, Identity, IrqTable, PciFunction, ServeEvent, Shared, VfioUserServer,
};
use nix::sys::eventfd::{EfdFlags, EventFd};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR4_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
};
use vm_memory::{Bytes, GuestAddress, GuestAddressSpace};

/// A stand-in function: 16 KiB of registers; writing a guest address to
/// 0x1000 makes it add one to the u64 there (a DMA read and write) and
/// raise vector 1; reset clears the registers and is counted.
struct Doubler {
    regs: Vec<u8>,
    mem: GuestMem,
    irqs: Arc<IrqTable>,
    resets: Arc<Mutex<u32>>,
}

impl PciFunction for Doubler {
    fn bar0_read(&mut self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = self.regs.get(offset as usize + i).copied().unwrap_or(0);
        }
    }
    fn bar0_write(&mut self, offset: u64, data: &[u8]) {
        if offset == 0x1000 && data.len() == 8 {
            let addr = u64::from_le_bytes(data.try_into().unwrap());
            let mem = self.mem.memory();
            // Unmapped: the function records a failure, as a device sets an error status.
            match mem.read_obj::<u64>(GuestAddress(addr)) {
                Ok(v) => {
                    mem.write_obj(v + 1, GuestAddress(addr)).unwrap();
                    self.regs[0] = 1;
                }
                Err(_) => self.regs[0] = 0xee,
            }
            self.irqs.raise(1);
            return;
        }
        for (i, b) in data.iter().enumerate() {
            if let Some(r) = self.regs.get_mut(offset as usize + i) {
                *r = *b;
            }
        }
    }
    fn reset(&mut self) {
        self.regs.fill(0);
        *self.resets.lock().unwrap() += 1;
    }
    fn report(&self) -> serde_json::Value {
        serde_json::json!({ "reg0": self.regs[0] })
    }
}

const ID: Identity = Identity {
    vendor: 0x1d1d,
    device: 0x2001,
    subsystem_vendor: 0x1d1d,
    subsystem: 1,
    class_code: 0x010802,
    revision: 0,
};

struct Rig {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    server: VfioUserServer,
    shared: Arc<Shared<Doubler>>,
    events: Receiver<ServeEvent>,
    resets: Arc<Mutex<u32>>,
}

fn rig(keep_serving: bool) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("vfio-user.sock");
    let dma = DmaMap::new();
    let irqs = Arc::new(IrqTable::new(16));
    let resets = Arc::new(Mutex::new(0));
    let f = Doubler {
        regs: vec![0; 0x4000],
        mem: dma.guest_mem(),
        irqs: irqs.clone(),
        resets: resets.clone(),
    };
    let shared = Shared::new(f, dma, irqs);
    let (tx, events) = channel();
    let server = VfioUserServer::start(&path, shared.clone(), &ID, 0x4000, 16, keep_serving, move |e| {
        let _ = tx.send(e);
    })
    .unwrap();
    Rig {
        _dir: dir,
        path,
        server,
        shared,
        events,
        resets,
    }
}

fn memfd(size: u64) -> File {
    let fd = nix::sys::memfd::memfd_create(c"guest-ram", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
    let f = File::from(fd);
    f.set_len(size).unwrap();
    f
}

fn event(rx: &Receiver<ServeEvent>) -> ServeEvent {
    rx.recv_timeout(Duration::from_secs(10)).expect("a serve event")
}

fn cfg_read32(c: &mut vfio_user::Client, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(VFIO_PCI_CONFIG_REGION_INDEX, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

#[test]
fn handshake_regions_and_config_space_look_like_an_nvme_function() {
    let r = rig(false);
    let mut c = vfio_user::Client::new(&r.path).unwrap();
    assert_eq!(c.region(VFIO_PCI_BAR0_REGION_INDEX).unwrap().size, 0x4000);
    assert_eq!(c.region(VFIO_PCI_BAR4_REGION_INDEX).unwrap().size, 0x4000);
    assert_eq!(c.region(VFIO_PCI_CONFIG_REGION_INDEX).unwrap().size, 4096);
    assert!(
        c.region(VFIO_PCI_BAR0_REGION_INDEX).unwrap().file_offset.is_none(),
        "no mmap: doorbells are messages"
    );
    assert_eq!(c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX).unwrap().count, 16);
    assert_eq!(c.get_irq_info(0).unwrap().count, 0, "no INTx");
    assert_eq!(c.get_irq_info(1).unwrap().count, 0, "no MSI");
    // The crate answers the handshake itself; the first backend call is the join.
    assert_eq!(cfg_read32(&mut c, 0), 0x2001_1d1d);
    assert_eq!(event(&r.events), ServeEvent::ClientJoined);
    assert_eq!(cfg_read32(&mut c, 8) >> 8, 0x010802);
    // BAR0 sizing through the socket.
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 0x10, &[0xff; 4]).unwrap();
    assert_eq!(cfg_read32(&mut c, 0x10), 0xffff_c004);
    c.region_write(VFIO_PCI_CONFIG_REGION_INDEX, 0x10, &0xfe00_0000u32.to_le_bytes())
        .unwrap();
    assert_eq!(cfg_read32(&mut c, 0x10), 0xfe00_0004);
    // A read past every region's end answers zeros, not an error.
    let mut b = [0xaau8; 16];
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, 0x1_0000_0000, &mut b)
        .unwrap();
    assert_eq!(b, [0; 16]);
    c.region_read(VFIO_PCI_BAR4_REGION_INDEX, 0x3000, &mut b).unwrap();
    assert_eq!(b, [0; 16]);
    c.shutdown().unwrap();
    assert_eq!(event(&r.events), ServeEvent::ClientLeft(None));
    assert_eq!(
        event(&r.events),
        ServeEvent::Stopped(None),
        "one client without keep_serving"
    );
    drop(r.server);
    assert!(!r.path.exists(), "socket removed");
}

#[test]
fn dma_through_a_memfd_and_an_msix_eventfd() {
    let r = rig(false);
    let mut c = vfio_user::Client::new(&r.path).unwrap();
    let ram = memfd(0x20_0000);
    // Two ranges of one memfd, as QEMU maps RAM below and above a hole.
    c.dma_map(0, 0, 0x10_0000, ram.as_raw_fd()).unwrap();
    c.dma_map(0x10_0000, 0x1_0000_0000, 0x10_0000, ram.as_raw_fd()).unwrap();
    let efd = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
    c.set_irqs(
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        1,
        1,
        &[efd.as_fd().as_raw_fd()],
    )
    .unwrap();
    std::os::unix::fs::FileExt::write_all_at(&ram, &41u64.to_le_bytes(), 0x10_0008).unwrap();
    c.region_write(VFIO_PCI_BAR0_REGION_INDEX, 0x1000, &0x1_0000_0008u64.to_le_bytes())
        .unwrap();
    let mut b = [0u8; 8];
    std::os::unix::fs::FileExt::read_exact_at(&ram, &mut b, 0x10_0008).unwrap();
    assert_eq!(u64::from_le_bytes(b), 42, "the function read and wrote guest RAM");
    assert_eq!(efd.read().unwrap(), 1, "vector 1 signalled");
    let mut s = [0u8; 1];
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, 0, &mut s).unwrap();
    assert_eq!(s[0], 1);
    // After DMA_UNMAP the same address is a device-level failure, not a crash.
    c.dma_unmap(0x1_0000_0000, 0x10_0000).unwrap();
    c.region_write(VFIO_PCI_BAR0_REGION_INDEX, 0x1000, &0x1_0000_0008u64.to_le_bytes())
        .unwrap();
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, 0, &mut s).unwrap();
    assert_eq!(s[0], 0xee);
    assert_eq!(efd.read().unwrap(), 1, "the failure is signalled too");
    // A count with no fds unsets the vector (the crate's gpio example would panic here).
    c.set_irqs(
        VFIO_PCI_MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        4,
        &[],
    )
    .unwrap();
    c.region_write(VFIO_PCI_BAR0_REGION_INDEX, 0x1000, &0x8u64.to_le_bytes())
        .unwrap();
    assert!(efd.read().is_err(), "no signal after unset");
    let status = r.shared.transport_report();
    assert_eq!(status["dma"].as_array().unwrap().len(), 1);
    assert_eq!(status["msix"]["raised"], 2);
    assert_eq!(status["msix"]["raised_without_eventfd"], 1);
    c.shutdown().unwrap();
}

#[test]
fn reset_reaches_the_function_and_a_new_client_is_served_after_a_disconnect() {
    let r = rig(true);
    let mut c = vfio_user::Client::new(&r.path).unwrap();
    c.region_write(VFIO_PCI_BAR0_REGION_INDEX, 0x20, &[7]).unwrap();
    c.reset().unwrap();
    let mut b = [0u8; 1];
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, 0x20, &mut b).unwrap();
    assert_eq!(b[0], 0, "registers cleared by DEVICE_RESET");
    assert_eq!(*r.resets.lock().unwrap(), 1);
    let ram = memfd(0x1_0000);
    c.dma_map(0, 0, 0x1_0000, ram.as_raw_fd()).unwrap();
    c.shutdown().unwrap();
    drop(c);
    assert_eq!(event(&r.events), ServeEvent::ClientJoined);
    assert_eq!(event(&r.events), ServeEvent::ClientLeft(None));
    assert_eq!(*r.resets.lock().unwrap(), 2, "a disconnect resets the function");
    assert!(r.shared.dma.mappings().is_empty(), "and drops its guest memory");
    // The next QEMU connects to the same socket.
    let mut c2 = vfio_user::Client::new(&r.path).unwrap();
    assert_eq!(cfg_read32(&mut c2, 0), 0x2001_1d1d);
    assert_eq!(event(&r.events), ServeEvent::ClientJoined);
    c2.shutdown().unwrap();
    assert_eq!(event(&r.events), ServeEvent::ClientLeft(None));
    let mut server = r.server;
    server.shutdown();
    assert_eq!(event(&r.events), ServeEvent::Stopped(None));
}
