//! The PCI configuration space of the NVMe function, as QEMU's
//! `vfio-user-pci` reads and writes it over the socket.
//!
//! QEMU emulates MSI-X (table, PBA, the enable bits) and most of the BAR
//! handling itself, but it reads the header and every capability from the
//! device and passes config writes through, so this space behaves like a
//! real function's: read-only identity, writable bits only where the PCI
//! specification has them (a byte-wise write mask), BARs that answer the
//! sizing protocol (all ones written, size mask read back).
//!
//! Layout (docs/nvme-controller.md, "Transport"):
//!
//! | offset | what |
//! |---|---|
//! | 0x00 | header type 0: ids, command/status, class 010802 |
//! | 0x10 | BAR0/1: 64-bit memory, the controller's registers |
//! | 0x20 | BAR4: 32-bit memory, MSI-X table at 0, PBA at [`PBA_OFFSET`] |
//! | 0x40 | Power Management (version 3, D0 only, No_Soft_Reset) |
//! | 0x50 | MSI-X (the controller's vector count, table and PBA in BAR4) |
//! | 0x60 | PCI Express v2, endpoint |
//!
//! No INTx (interrupt pin 0): the Linux nvme driver and SeaBIOS do without
//! (MSI-X, or polled completion queues).

/// Size of the config region: PCIe extended config space (no extended
/// capabilities: offset 0x100 reads 0, which ends the list).
pub(crate) const CONFIG_SIZE: usize = 4096;

/// Most MSI-X vectors the table in BAR4 has room for (16 bytes each
/// below the PBA); the controller says how many it uses.
pub const MAX_MSIX_VECTORS: u16 = (PBA_OFFSET / 16) as u16;

/// BAR4 holds the MSI-X table at 0 and the PBA at this offset.
pub(crate) const PBA_OFFSET: u32 = 0x2000;
/// BAR4 size: table (16 bytes a vector) and PBA, each in its own 8 KiB half.
pub(crate) const BAR4_SIZE: u64 = 0x4000;

pub(crate) const CAP_PM: u8 = 0x40;
pub(crate) const CAP_MSIX: u8 = 0x50;
pub(crate) const CAP_PCIE: u8 = 0x60;
/// Length of a PCIe capability structure of version 2 (through Slot Status 2).
const PCIE_CAP_LEN: usize = 0x3c;

const PCI_COMMAND: usize = 0x04;
const PCI_COMMAND_MASTER: u16 = 1 << 2;
const PCI_STATUS: usize = 0x06;
const PCI_STATUS_CAP_LIST: u16 = 1 << 4;
const PCI_BAR0: usize = 0x10;
const PCI_BAR4: usize = 0x20;
const BAR_MEM_64: u32 = 0x4;

/// The identity the function shows in its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub vendor: u16,
    pub device: u16,
    pub subsystem_vendor: u16,
    pub subsystem: u16,
    /// Base class, subclass, programming interface: 0x010802 for NVMe.
    pub class_code: u32,
    pub revision: u8,
}

/// Config space contents and the write mask of every byte.
pub(crate) struct ConfigSpace {
    bytes: [u8; CONFIG_SIZE],
    writable: [u8; CONFIG_SIZE],
    /// What a power-on (or a vfio-user reset) restores.
    initial: [u8; CONFIG_SIZE],
    bar0_size: u64,
    msix_vectors: u16,
}

impl ConfigSpace {
    /// The config space of an NVMe function whose BAR0 is `bar0_size`
    /// bytes (a power of two, at least 16 KiB) with `msix_vectors` MSI-X
    /// vectors (1..=[`MAX_MSIX_VECTORS`]).
    pub(crate) fn new(id: &Identity, bar0_size: u64, msix_vectors: u16) -> ConfigSpace {
        assert!(
            bar0_size.is_power_of_two() && bar0_size >= 0x4000,
            "BAR0 size {bar0_size:#x} is not a power of two >= 16 KiB"
        );
        assert!(
            (1..=MAX_MSIX_VECTORS).contains(&msix_vectors),
            "{msix_vectors} MSI-X vectors do not fit BAR4"
        );
        let mut c = ConfigSpace {
            bytes: [0; CONFIG_SIZE],
            writable: [0; CONFIG_SIZE],
            initial: [0; CONFIG_SIZE],
            bar0_size,
            msix_vectors,
        };
        c.put16(0x00, id.vendor);
        c.put16(0x02, id.device);
        c.put16(PCI_STATUS, PCI_STATUS_CAP_LIST);
        c.put32(0x08, (id.class_code << 8) | u32::from(id.revision));
        c.put16(0x2c, id.subsystem_vendor);
        c.put16(0x2e, id.subsystem);
        c.bytes[0x34] = CAP_PM;
        // Command: I/O space, memory space, bus master, parity, SERR#, INTx disable.
        c.mask16(PCI_COMMAND, 0x0547);
        c.mask8(0x0c, 0xff); // cache line size
        c.mask8(0x0d, 0xff); // latency timer
        c.mask8(0x3c, 0xff); // interrupt line (pin 0: no INTx)
                             // BAR0/1: 64-bit memory; the low bits below the size stay 0.
        c.put32(PCI_BAR0, BAR_MEM_64);
        c.mask32(PCI_BAR0, !((bar0_size - 1) as u32) & !0xf);
        c.mask32(PCI_BAR0 + 4, 0xffff_ffff);
        // BAR4: 32-bit memory.
        c.mask32(PCI_BAR4, !((BAR4_SIZE - 1) as u32) & !0xf);

        // Power Management: PMC version 3, no PME; PMCSR No_Soft_Reset, D0.
        let pm = CAP_PM as usize;
        c.bytes[pm] = 0x01;
        c.bytes[pm + 1] = CAP_MSIX;
        c.put16(pm + 2, 0x0003);
        c.put16(pm + 4, 1 << 3);
        c.mask16(pm + 4, 0x0003);

        // MSI-X: table size N-1, table in BAR4 at 0, PBA in BAR4 at PBA_OFFSET.
        let msix = CAP_MSIX as usize;
        c.bytes[msix] = 0x11;
        c.bytes[msix + 1] = CAP_PCIE;
        c.put16(msix + 2, msix_vectors - 1);
        c.mask16(msix + 2, 0xc000); // enable, function mask
        c.put32(msix + 4, 4);
        c.put32(msix + 8, PBA_OFFSET | 4);

        // PCI Express v2 endpoint: 128-byte payloads, x1 link at 2.5 GT/s.
        let e = CAP_PCIE as usize;
        c.bytes[e] = 0x10;
        c.bytes[e + 1] = 0;
        c.put16(e + 2, 0x0002);
        c.put32(e + 4, 0); // device capabilities: no FLR (reset is vfio-user's DEVICE_RESET)
        c.put16(e + 8, 0x2810); // device control: relaxed ordering, 512-byte read requests, no snoop
        c.mask16(e + 8, 0x7fff);
        c.put32(e + 0x0c, 0x0000_0411); // link capabilities: x1, 2.5 GT/s
        c.mask16(e + 0x10, 0x01c3); // link control
        c.put16(e + 0x12, 0x0011); // link status: x1, 2.5 GT/s
        c.mask16(e + 0x28, 0x04ff); // device control 2
        debug_assert!(e + PCIE_CAP_LEN <= 0x100);
        c.initial = c.bytes;
        c
    }

    pub(crate) fn bar0_size(&self) -> u64 {
        self.bar0_size
    }

    pub(crate) fn msix_vectors(&self) -> u16 {
        self.msix_vectors
    }

    /// Read `data.len()` bytes at `offset`; bytes past the end read 0.
    pub(crate) fn read(&self, offset: u64, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            *b = offset
                .checked_add(i as u64)
                .and_then(|o| self.bytes.get(usize::try_from(o).ok()?))
                .copied()
                .unwrap_or(0);
        }
    }

    /// Write `data` at `offset`: only the writable bits change; writes past
    /// the end are dropped, as a device drops them.
    pub(crate) fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, v) in data.iter().enumerate() {
            let Some(o) = offset
                .checked_add(i as u64)
                .and_then(|o| usize::try_from(o).ok())
                .filter(|&o| o < CONFIG_SIZE)
            else {
                return;
            };
            let m = self.writable[o];
            self.bytes[o] = (self.bytes[o] & !m) | (v & m);
        }
    }

    /// Back to the power-on contents (vfio-user DEVICE_RESET).
    pub(crate) fn reset(&mut self) {
        self.bytes = self.initial;
    }

    /// Command register bit 2, Bus Master Enable.
    pub(crate) fn bus_master(&self) -> bool {
        self.read16(PCI_COMMAND) & PCI_COMMAND_MASTER != 0
    }

    /// Whether a write of `len` bytes at `offset` covers the command register's low byte
    /// (where Bus Master Enable is).
    pub(crate) fn writes_command(offset: u64, len: usize) -> bool {
        offset <= PCI_COMMAND as u64 && offset.saturating_add(len as u64) > PCI_COMMAND as u64
    }

    /// The 16-bit register at `offset`.
    pub(crate) fn read16(&self, offset: usize) -> u16 {
        u16::from_le_bytes([self.bytes[offset], self.bytes[offset + 1]])
    }

    /// The 32-bit register at `offset` (the tests read registers whole).
    #[cfg(test)]
    pub fn read32(&self, offset: usize) -> u32 {
        u32::from_le_bytes(self.bytes[offset..offset + 4].try_into().expect("4 bytes"))
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn put32(&mut self, off: usize, v: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn mask8(&mut self, off: usize, m: u8) {
        self.writable[off] = m;
    }
    fn mask16(&mut self, off: usize, m: u16) {
        self.writable[off..off + 2].copy_from_slice(&m.to_le_bytes());
    }
    fn mask32(&mut self, off: usize, m: u32) {
        self.writable[off..off + 4].copy_from_slice(&m.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvme() -> ConfigSpace {
        ConfigSpace::new(
            &Identity {
                vendor: 0x1d1d,
                device: 0x2001,
                subsystem_vendor: 0x1d1d,
                subsystem: 0x0001,
                class_code: 0x010802,
                revision: 2,
            },
            0x4000,
            9,
        )
    }

    /// Walk the capability list as a driver does: (id, offset) pairs.
    fn caps(c: &ConfigSpace) -> Vec<(u8, u8)> {
        let mut out = Vec::new();
        let mut at = c.bytes[0x34];
        while at != 0 && out.len() < 48 {
            out.push((c.bytes[at as usize], at));
            at = c.bytes[at as usize + 1];
        }
        out
    }

    #[test]
    fn header_names_an_nvme_function() {
        let c = nvme();
        assert_eq!(c.read16(0), 0x1d1d);
        assert_eq!(c.read16(2), 0x2001);
        assert_eq!(c.read32(8), 0x0108_0202, "class 010802, revision 2");
        assert_eq!(c.bytes[0x0e], 0, "header type 0, single function");
        assert_eq!(c.bytes[0x3d], 0, "no INTx pin");
        assert_ne!(c.read16(PCI_STATUS) & PCI_STATUS_CAP_LIST, 0);
        assert_eq!(caps(&c), [(0x01, CAP_PM), (0x11, CAP_MSIX), (0x10, CAP_PCIE)]);
    }

    #[test]
    fn msix_table_and_pba_are_in_bar4() {
        let c = nvme();
        let m = CAP_MSIX as usize;
        assert_eq!(c.read16(m + 2) & 0x7ff, 8, "9 vectors");
        assert_eq!(c.read32(m + 4), 4, "table at BAR4 + 0");
        assert_eq!(c.read32(m + 8), PBA_OFFSET | 4);
        assert!(u64::from(MAX_MSIX_VECTORS) * 16 <= u64::from(PBA_OFFSET));
        assert!(u64::from(PBA_OFFSET) + u64::from(MAX_MSIX_VECTORS).div_ceil(64) * 8 <= BAR4_SIZE);
        assert!(u64::from(PBA_OFFSET) + 8 <= BAR4_SIZE);
    }

    #[test]
    fn bars_answer_the_sizing_protocol() {
        let mut c = nvme();
        assert_eq!(c.read32(PCI_BAR0) & 0xf, BAR_MEM_64);
        c.write(PCI_BAR0 as u64, &[0xff; 4]);
        c.write(PCI_BAR0 as u64 + 4, &[0xff; 4]);
        let lo = c.read32(PCI_BAR0);
        let hi = c.read32(PCI_BAR0 + 4);
        let size = !((u64::from(hi) << 32) | u64::from(lo & !0xf)) + 1;
        assert_eq!(size, 0x4000);
        c.write(PCI_BAR4 as u64, &[0xff; 4]);
        assert_eq!(!(c.read32(PCI_BAR4) & !0xf) + 1, BAR4_SIZE as u32);
        // An address sticks; the type bits do not move.
        c.write(PCI_BAR0 as u64, &0xfebf_0000u32.to_le_bytes());
        assert_eq!(c.read32(PCI_BAR0), 0xfebf_0000 | BAR_MEM_64);
        // Unused BARs stay 0.
        for bar in [0x18u64, 0x1c, 0x24, 0x30] {
            c.write(bar, &[0xff; 4]);
            let mut v = [0u8; 4];
            c.read(bar, &mut v);
            assert_eq!(v, [0; 4], "BAR at {bar:#x}");
        }
    }

    #[test]
    fn read_only_bytes_ignore_writes_and_reset_restores() {
        let mut c = nvme();
        let before = c.bytes;
        c.write(0, &[0u8; 0x40]); // ids, class, header
        assert_eq!(c.read16(0), 0x1d1d);
        assert_eq!(c.read32(8), 0x0108_0202);
        c.write(PCI_COMMAND as u64, &0x0006u16.to_le_bytes());
        assert_eq!(c.read16(PCI_COMMAND), 0x0006, "memory space + bus master");
        c.write(PCI_COMMAND as u64, &0xffffu16.to_le_bytes());
        assert_eq!(c.read16(PCI_COMMAND), 0x0547);
        c.reset();
        assert_eq!(c.bytes, before);
    }

    #[test]
    fn accesses_past_the_end_read_zero_and_are_dropped() {
        let mut c = nvme();
        let mut v = [0xaau8; 8];
        c.read(CONFIG_SIZE as u64 - 4, &mut v);
        assert_eq!(v, [0; 8]);
        c.read(u64::MAX - 2, &mut v);
        assert_eq!(v, [0; 8]);
        c.write(u64::MAX - 1, &[1, 2, 3]);
        c.write(CONFIG_SIZE as u64, &[1]);
        c.read(0x100, &mut v[..4]);
        assert_eq!(&v[..4], &[0; 4], "no extended capabilities");
    }
}
