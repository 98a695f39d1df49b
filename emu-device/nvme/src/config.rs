//! Controller configuration and PCI identity.

use std::path::PathBuf;

use crate::media::MediaConfig;
use crate::Error;

/// Where the namespace's data lives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backing {
    /// Anonymous zeroed memory (pages are only allocated when written).
    Memory,
    /// A sparse file, created or resized to the namespace size.
    SparseFile(PathBuf),
}

/// What the controller reports and how big it is. `Default` gives a small sane controller.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Namespace size in bytes (a multiple of the LBA size).
    pub namespace_bytes: u64,
    pub backing: Backing,
    /// log2 of the LBA size: 9 (512 B) to 12 (4 KiB).
    pub lba_shift: u8,
    /// HMB preferred size in bytes (Identify HMPRE, reported in 4 KiB units; 0 = no HMB).
    pub hmpre_bytes: u64,
    /// HMB minimum size in bytes (Identify HMMIN, 4 KiB units).
    pub hmmin_bytes: u64,
    /// Minimum descriptor entry size in bytes (Identify HMMINDS, 4 KiB units; 0 = no minimum).
    pub hmminds_bytes: u64,
    /// Maximum number of HMB descriptor entries (Identify HMMAXD; 0 = no limit reported,
    /// the model still caps a list at 4096 entries).
    pub hmmaxd: u16,
    /// Maximum data transfer size, 2^MDTS pages of 4 KiB (0 = no limit reported; the model
    /// then still caps one transfer at 2 MiB).
    pub mdts: u8,
    /// Number of I/O queue pairs the controller can allocate (Set Features 07h caps at this).
    pub max_io_queues: u16,
    /// CAP.MQES: maximum entries of an I/O queue, 0-based (1023 = 1024 entries).
    pub mqes: u16,
    /// MSI-X vectors the transport exposes (a CQ's IV must be below this).
    pub interrupt_vectors: u16,
    pub serial: String,
    pub model: String,
    pub firmware: String,
    pub media: MediaConfig,
    /// When I/O completions are posted: at once, or when the timing model says (timing.rs).
    pub timing: crate::Timing,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            namespace_bytes: 64 << 20,
            backing: Backing::Memory,
            lba_shift: 9,
            hmpre_bytes: 32 << 20,
            hmmin_bytes: 4 << 20,
            hmminds_bytes: 4096,
            hmmaxd: 256,
            mdts: 7,
            max_io_queues: 8,
            mqes: 1023,
            interrupt_vectors: 9,
            serial: "HMBTRACE0001".into(),
            model: "hmb-trace NVMe HMB controller".into(),
            firmware: "0.1.0".into(),
            media: MediaConfig::default(),
            timing: crate::Timing::None,
        }
    }
}

/// Queue pairs BAR0 has doorbells for: (BAR0_SIZE - 0x1000) / 8 with DSTRD = 0.
pub(crate) const MAX_QUEUE_PAIRS: u32 = ((crate::Controller::BAR0_SIZE - 0x1000) / 8) as u32;
/// Hard caps when Identify reports "no limit" (0).
pub(crate) const HMB_MAX_ENTRIES: u32 = 4096;
pub(crate) const NO_MDTS_MAX_BYTES: usize = 2 << 20;

impl ControllerConfig {
    pub(crate) fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Config(m));
        if !(9..=12).contains(&self.lba_shift) {
            return bad(format!("lba_shift {} not in 9..=12", self.lba_shift));
        }
        let lba = 1u64 << self.lba_shift;
        if self.namespace_bytes == 0 || !self.namespace_bytes.is_multiple_of(lba) {
            return bad(format!(
                "namespace size {} is not a non-zero multiple of {lba}",
                self.namespace_bytes
            ));
        }
        for (name, v) in [
            ("hmpre", self.hmpre_bytes),
            ("hmmin", self.hmmin_bytes),
            ("hmminds", self.hmminds_bytes),
        ] {
            if v % 4096 != 0 || v / 4096 > u64::from(u32::MAX) {
                return bad(format!("{name} {v} is not a multiple of 4096 below 16 TiB"));
            }
        }
        if self.hmmin_bytes > self.hmpre_bytes {
            return bad("hmmin above hmpre".into());
        }
        if self.mdts > 20 {
            return bad(format!("mdts {} too large", self.mdts));
        }
        if self.max_io_queues == 0 || u32::from(self.max_io_queues) >= MAX_QUEUE_PAIRS {
            return bad(format!(
                "max_io_queues {} not in 1..{MAX_QUEUE_PAIRS}",
                self.max_io_queues
            ));
        }
        if self.mqes == 0 {
            return bad("mqes must allow at least 2 entries (0-based value >= 1)".into());
        }
        if self.interrupt_vectors == 0 || self.interrupt_vectors > 2048 {
            return bad(format!("interrupt_vectors {} not in 1..=2048", self.interrupt_vectors));
        }
        for (name, s, max) in [
            ("serial", &self.serial, 20),
            ("model", &self.model, 40),
            ("firmware", &self.firmware, 8),
        ] {
            if s.is_empty() || s.len() > max || !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
                return bad(format!("{name} {s:?} must be 1..={max} printable ASCII bytes"));
            }
        }
        self.media.validate()?;
        Ok(())
    }

    /// Largest data transfer of one command in bytes.
    pub(crate) fn max_transfer(&self) -> usize {
        if self.mdts == 0 {
            NO_MDTS_MAX_BYTES
        } else {
            4096usize << self.mdts
        }
    }
}

/// PCI identity the transport builds config space from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciIdentity {
    pub vendor: u16,
    pub device: u16,
    pub subsystem_vendor: u16,
    pub subsystem: u16,
    /// 0x010802: mass storage, non-volatile memory, NVMe I/O controller.
    pub class_code: u32,
    pub revision: u8,
}
