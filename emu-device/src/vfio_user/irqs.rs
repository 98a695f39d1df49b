//! MSI-X vectors as vfio-user delivers them: QEMU hands one eventfd per
//! vector with SET_IRQS, and the device raises a vector by writing to its
//! eventfd. QEMU emulates the MSI-X table, masking and the PBA itself, so a
//! masked vector is QEMU's business: the device always signals.
//!
//! SET_IRQS semantics (VFIO's `VFIO_DEVICE_SET_IRQS`, as QEMU 11.1 sends
//! them over vfio-user):
//! - `DATA_EVENTFD | ACTION_TRIGGER`, `count` vectors from `start`: with
//!   fds, vector `start + i` gets fd `i`; with no fds (QEMU's way of saying
//!   "fd -1" for a run of vectors, which SCM_RIGHTS cannot carry) they are
//!   unset. The crate advertises `max_msg_fds = 1`, so QEMU sends one
//!   vector per message.
//! - `DATA_NONE | ACTION_TRIGGER` with `count = 0`: every vector unset (how
//!   QEMU disables MSI-X); with `count > 0`: those vectors fire (loopback).
//! - `ACTION_MASK` / `ACTION_UNMASK`: accepted, nothing to do.
//!
//! Out-of-range vectors are logged and ignored: never an error reply, which
//! this crate sends with errno 0.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_MSIX_IRQ_INDEX,
};

/// The eventfd of every MSI-X vector, and what happened to them.
pub struct IrqTable {
    vectors: Mutex<Vec<Option<File>>>,
    raised: AtomicU64,
    /// Raised while no eventfd was set (the guest had MSI-X disabled, or
    /// polls): the interrupt is lost, as on a device whose MSI-X is off.
    unset: AtomicU64,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct IrqReport {
    /// Vectors that have an eventfd now.
    pub set: Vec<u16>,
    pub raised: u64,
    pub raised_without_eventfd: u64,
}

impl IrqTable {
    pub fn new(vectors: u16) -> IrqTable {
        IrqTable {
            vectors: Mutex::new((0..vectors).map(|_| None).collect()),
            raised: AtomicU64::new(0),
            unset: AtomicU64::new(0),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Vec<Option<File>>> {
        self.vectors.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Signal vector `vector`'s eventfd, if it has one.
    pub fn raise(&self, vector: u16) {
        let mut table = self.table();
        match table.get_mut(usize::from(vector)).and_then(Option::as_mut) {
            Some(fd) => {
                self.raised.fetch_add(1, Ordering::Relaxed);
                // EAGAIN only when the counter is at its maximum: the
                // interrupt is pending anyway.
                if let Err(e) = fd.write_all(&1u64.to_ne_bytes()) {
                    if e.kind() != std::io::ErrorKind::WouldBlock {
                        log::warn!("signalling MSI-X vector {vector}: {e}");
                    }
                }
            }
            None => {
                self.unset.fetch_add(1, Ordering::Relaxed);
                log::trace!("MSI-X vector {vector} raised with no eventfd set");
            }
        }
    }

    /// Apply one SET_IRQS message (see the module docs).
    pub(crate) fn set_irqs(&self, index: u32, flags: u32, start: u32, count: u32, fds: Vec<File>) {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            // INTx, MSI and REQ have count 0; ERR's eventfd is never signalled.
            log::debug!("SET_IRQS for irq index {index} (not MSI-X) ignored");
            return;
        }
        if flags & VFIO_IRQ_SET_ACTION_TRIGGER == 0 {
            log::debug!("SET_IRQS mask/unmask (flags {flags:#x}) ignored: QEMU masks MSI-X itself");
            return;
        }
        let len = self.table().len() as u32;
        if flags & VFIO_IRQ_SET_DATA_NONE != 0 && count == 0 {
            log::debug!("MSI-X disabled: every vector unset");
            self.clear();
            return;
        }
        if u64::from(start) + u64::from(count) > u64::from(len) {
            log::warn!(
                "SET_IRQS for vectors {start}..{} of {len}: the excess is ignored",
                u64::from(start) + u64::from(count)
            );
        }
        let vectors = start..start.saturating_add(count).min(len);
        if flags & VFIO_IRQ_SET_DATA_EVENTFD != 0 {
            let mut fds = fds.into_iter();
            let mut table = self.table();
            for v in vectors {
                // No fds: the run is unset; fewer fds than vectors: the rest too.
                table[v as usize] = fds.next();
            }
            log::debug!(
                "MSI-X eventfds: {:?}",
                table
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.is_some())
                    .map(|(i, _)| i)
                    .collect::<Vec<_>>()
            );
        } else if flags & VFIO_IRQ_SET_DATA_NONE != 0 {
            for v in vectors {
                self.raise(v as u16);
            }
        } else {
            log::debug!("SET_IRQS with data flags {flags:#x} ignored");
        }
    }

    /// Unset every vector (disconnect, MSI-X disabled).
    pub(crate) fn clear(&self) {
        for v in self.table().iter_mut() {
            *v = None;
        }
    }

    pub(crate) fn report(&self) -> IrqReport {
        IrqReport {
            set: self
                .table()
                .iter()
                .enumerate()
                .filter(|(_, f)| f.is_some())
                .map(|(i, _)| i as u16)
                .collect(),
            raised: self.raised.load(Ordering::Relaxed),
            raised_without_eventfd: self.unset.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::eventfd::{EfdFlags, EventFd};
    use std::os::fd::{AsFd, OwnedFd};

    const TRIGGER_FD: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;

    fn eventfd() -> (EventFd, File) {
        let e = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
        let dup: OwnedFd = e.as_fd().try_clone_to_owned().unwrap();
        (e, File::from(dup))
    }

    fn pending(e: &EventFd) -> u64 {
        e.read().unwrap_or(0)
    }

    #[test]
    fn vectors_signal_their_own_eventfd() {
        let t = IrqTable::new(4);
        let (e0, f0) = eventfd();
        let (e2, f2) = eventfd();
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 0, 1, vec![f0]);
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 2, 1, vec![f2]);
        t.raise(2);
        t.raise(2);
        t.raise(0);
        t.raise(1); // no eventfd: counted, nothing signalled
        t.raise(9); // out of range: same
        assert_eq!(pending(&e2), 2);
        assert_eq!(pending(&e0), 1);
        let r = t.report();
        assert_eq!(r.set, [0, 2]);
        assert_eq!((r.raised, r.raised_without_eventfd), (3, 2));
    }

    #[test]
    fn a_count_without_fds_unsets_and_count_zero_disables_all() {
        let t = IrqTable::new(4);
        let (_e0, f0) = eventfd();
        let (_e1, f1) = eventfd();
        let (e3, f3) = eventfd();
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 0, 1, vec![f0]);
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 1, 1, vec![f1]);
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 3, 1, vec![f3]);
        // What the gpio example would index out of bounds on: count 2, no fds.
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 0, 2, vec![]);
        assert_eq!(t.report().set, [3]);
        // Loopback trigger.
        t.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            3,
            1,
            vec![],
        );
        assert_eq!(pending(&e3), 1);
        t.set_irqs(
            VFIO_PCI_MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            0,
            vec![],
        );
        assert!(t.report().set.is_empty());
    }

    #[test]
    fn out_of_range_and_other_indexes_are_ignored_not_fatal() {
        let t = IrqTable::new(2);
        let (_e, f) = eventfd();
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, 7, 1, vec![f]);
        t.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, TRIGGER_FD, u32::MAX, u32::MAX, vec![]);
        let (_e, f) = eventfd();
        t.set_irqs(0, TRIGGER_FD, 0, 1, vec![f]); // INTx
        assert!(t.report().set.is_empty());
    }
}
