//! Register handshake: CAP/VS values, CC.EN -> CSTS.RDY, shutdown -> SHST, CFS on a bad
//! enable, reads/writes of any width.

mod common;

use hmb_nvme::fake_host::FakeHost;
use hmb_nvme::{Controller, ControllerConfig};

#[test]
fn cap_and_version_are_what_the_driver_expects() {
    let mut h = FakeHost::new(ControllerConfig::default(), 1 << 20);
    let cap = h.read64(0);
    assert_eq!(cap & 0xffff, 1023, "MQES");
    assert_eq!((cap >> 16) & 1, 1, "CQR");
    assert_eq!((cap >> 17) & 3, 0, "AMS: round robin only");
    assert_eq!((cap >> 24) & 0xff, 20, "TO");
    assert_eq!((cap >> 32) & 0xf, 0, "DSTRD");
    assert_eq!((cap >> 36) & 1, 0, "NSSRS");
    assert_eq!((cap >> 37) & 0xff, 1, "CSS: NVM only");
    assert_eq!((cap >> 48) & 0xf, 0, "MPSMIN");
    assert_eq!((cap >> 52) & 0xf, 0, "MPSMAX");
    assert_eq!(h.read32(8), 0x0001_0400, "VS 1.4");
    // Two 32-bit halves (lo_hi_readq) give the same value.
    assert_eq!(u64::from(h.read32(0)) | u64::from(h.read32(4)) << 32, cap);
    const { assert!(Controller::BAR0_SIZE >= 16 << 10) };
    assert_ne!(
        (Controller::pci_identity().vendor, Controller::pci_identity().device),
        (0x1b36, 0x0010)
    );
    assert_eq!(Controller::pci_identity().class_code, 0x010802);
}

#[test]
fn enable_sets_ready_and_disable_clears_it() {
    let mut h = FakeHost::new(ControllerConfig::default(), 1 << 20);
    assert_eq!(h.csts() & 1, 0);
    assert_eq!(h.enable(16), 1, "RDY, no CFS, SHST normal");
    assert_eq!(h.read32(0x14) & 1, 1, "CC reads back EN");
    assert_eq!(h.read32(0x14) >> 16 & 0xff, 0x46, "CC keeps IOSQES/IOCQES");
    assert_eq!(h.disable() & 1, 0);
    // Re-enable after a reset works again.
    assert_eq!(h.enable(16), 1);
    assert_eq!(h.ctrl.report().counters.resets, 1, "one CC.EN 1 -> 0");
}

#[test]
fn shutdown_notification_completes_and_stops_processing() {
    let mut h = common::ready_host(ControllerConfig::default());
    let csts = h.shutdown();
    assert_eq!((csts >> 2) & 3, 2, "SHST = shutdown complete");
    assert_eq!(csts & 1, 1, "RDY stays set until CC.EN is cleared");
    // A command after shutdown is not processed.
    let buf = h.alloc(4096);
    assert!(h.submit(0, hmb_nvme::fake_host::Command::identify(1, 0, buf)).is_none());
    // Reset and enable bring it back with SHST normal.
    assert_eq!(h.disable(), 0);
    assert_eq!(h.enable(16), 1);
    let buf = h.alloc(4096);
    assert!(h.admin(hmb_nvme::fake_host::Command::identify(1, 0, buf)).ok());
}

#[test]
fn enable_with_unsupported_values_sets_cfs() {
    // MPS = 1 (8 KiB) is outside MPSMIN..=MPSMAX.
    let mut h = FakeHost::new(ControllerConfig::default(), 1 << 20);
    h.enable(16);
    h.disable();
    h.write32(0x14, 6 << 16 | 4 << 20 | 1 << 7 | 1);
    let csts = h.csts();
    assert_eq!(csts & 0b11, 0b10, "CFS set, RDY clear");
    assert!(h.ctrl.report().fatal_reason.unwrap().contains("MPS"));
    // Admin queue outside guest memory.
    let mut h = FakeHost::new(ControllerConfig::default(), 1 << 20);
    h.write32(0x24, 0x000f_000f);
    h.write64(0x28, 0x4000_0000);
    h.write64(0x30, 0x8000);
    h.write32(0x14, 1);
    assert_eq!(h.csts() & 0b11, 0b10);
    // CC.EN 1 -> 0 clears CFS; a good enable then works.
    h.write32(0x14, 0);
    assert_eq!(h.csts(), 0);
    assert_eq!(h.enable(16), 1);
}

#[test]
fn narrow_and_odd_accesses_are_merged_or_ignored() {
    let mut h = FakeHost::new(ControllerConfig::default(), 1 << 20);
    // Byte reads of CAP assemble the same value.
    let mut b = [0u8; 8];
    for (i, byte) in b.iter_mut().enumerate() {
        let mut one = [0u8; 1];
        h.ctrl.bar0_read(i as u64, &mut one);
        *byte = one[0];
    }
    assert_eq!(u64::from_le_bytes(b), h.read64(0));
    // A 2-byte write into AQA's upper half keeps its lower half.
    h.write32(0x24, 0x0003_0007);
    h.ctrl.bar0_write(0x26, &[0x05, 0x00]);
    assert_eq!(h.read32(0x24), 0x0005_0007);
    // INTMS/INTMC: write 1 to set / clear; a narrow write does not touch other bits.
    h.write32(0x0C, 0b1010);
    h.ctrl.bar0_write(0x10, &[0b0010]);
    assert_eq!(h.read32(0x0C), 0b1000);
    assert_eq!(h.read32(0x10), 0b1000);
    // Read-only registers ignore writes; out-of-range accesses read 0.
    h.write32(0x08, 0xdead_beef);
    assert_eq!(h.read32(0x08), 0x0001_0400);
    let mut far = [0xffu8; 4];
    h.ctrl.bar0_read(Controller::BAR0_SIZE, &mut far);
    assert_eq!(far, [0; 4]);
    h.ctrl.bar0_read(u64::MAX - 1, &mut far);
    assert_eq!(far, [0; 4]);
    h.ctrl.bar0_write(u64::MAX - 1, &[1, 2, 3, 4]);
    // Doorbells are write-only.
    assert_eq!(h.read32(0x1000), 0);
}

#[test]
fn transport_reset_clears_registers() {
    let mut h = common::ready_host(ControllerConfig::default());
    h.ctrl.reset();
    assert_eq!(h.csts(), 0);
    assert_eq!(h.read32(0x14), 0);
    assert_eq!(h.read32(0x24), 0);
    assert_eq!(h.read64(0x28), 0);
    assert!(h.ctrl.report().queues.is_empty());
}

#[test]
fn controller_is_send_for_the_transport_thread() {
    fn send<T: Send>() {}
    send::<Controller>();
    send::<hmb_nvme::HostMemoryBuffer>();
}
