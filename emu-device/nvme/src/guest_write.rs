//! A Write command's source: its guest pages (the PRP segments), read by the FTL
//! ([`hmb_ftl::WriteSource`]). Whole pages are staged as the guest memory that holds them
//! and go to the backing file in one `pwritev` from there, as a DMA to the media would:
//! no gather into a transfer buffer and no copy into the staged run (those two copies were
//! a fifth of a 512 KiB write's time: docs/nvme-controller.md, "Where a large transfer's
//! time goes"). Partial pages are copied out and merged by the FTL as before.
//!
//! Every segment is resolved to guest memory before the FTL runs, so a segment the
//! transfer cannot reach is Data Transfer Error with nothing written, no NAND operation
//! and no map change, as when the gather into the transfer buffer failed.

use hmb_ftl::{HostSlice, WriteSource};
use vm_memory::{GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileSlice};

use crate::Status;

/// The command's guest pages as a write source. Borrows the guest memory mapping (the
/// caller's `GuestMemoryLoadGuard`), which keeps every slice mapped while it lives.
pub(crate) struct GuestWrite<'a> {
    /// (position in the transfer, guest memory), in transfer order.
    pieces: Vec<(usize, VolatileSlice<'a, ()>)>,
    len: usize,
}

impl<'a> GuestWrite<'a> {
    /// The transfer's guest (address, length) segments in `mem`; Data Transfer Error if
    /// any byte of them is not guest memory.
    pub(crate) fn new(mem: &'a GuestMemoryMmap<()>, segs: &[(u64, u64)]) -> Result<Self, Status> {
        let mut pieces = Vec::with_capacity(segs.len());
        let mut at = 0usize;
        for &(addr, len) in segs {
            let len = usize::try_from(len).map_err(|_| Status::DATA_TRANSFER_ERROR)?;
            addr.checked_add(len as u64).ok_or(Status::DATA_TRANSFER_ERROR)?;
            for slice in mem.get_slices(GuestAddress(addr), len) {
                let slice = slice.map_err(|_| Status::DATA_TRANSFER_ERROR)?;
                let n = slice.len();
                pieces.push((at, slice));
                at += n;
            }
        }
        Ok(GuestWrite { pieces, len: at })
    }

    /// The parts of transfer bytes [at, at + n): (piece, offset in it, length), in order.
    fn parts(&self, at: usize, n: usize) -> impl Iterator<Item = (&VolatileSlice<'a, ()>, usize, usize)> + '_ {
        // The last piece that starts at or before `at`, then on while they overlap.
        let first = self.pieces.partition_point(|(start, _)| *start <= at).saturating_sub(1);
        self.pieces[first..]
            .iter()
            .take_while(move |(start, _)| *start < at + n)
            .filter_map(move |(start, slice)| {
                let from = at.max(*start);
                let to = (at + n).min(start + slice.len());
                (from < to).then(|| (slice, from - start, to - from))
            })
    }
}

impl WriteSource for GuestWrite<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn copy_to(&self, at: usize, dst: &mut [u8]) {
        let mut done = 0;
        for (slice, off, n) in self.parts(at, dst.len()) {
            // In range by construction (`parts` clips to the slice), so this cannot fail.
            if let Ok(sub) = slice.subslice(off, n) {
                sub.copy_to(&mut dst[done..done + n]);
            }
            done += n;
        }
    }

    fn slices(&self, at: usize, n: usize, out: &mut Vec<HostSlice>) {
        for (slice, off, len) in self.parts(at, n) {
            let ptr = slice.ptr_guard().as_ptr();
            // SAFETY: [ptr + off, + len) is inside this guest memory slice (`parts` clips
            // to it), mapped for as long as the caller's `GuestMemoryLoadGuard` that
            // `self` borrows lives, which is past the `Ftl::write_from` call this source
            // is passed to (io.rs).
            out.push(unsafe { HostSlice::new(ptr.add(off), len) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{dma, GuestMem};
    use hmb_ftl::{FileMedium, Ftl, FtlConfig, Medium};
    use vm_memory::{GuestAddressSpace, GuestMemoryAtomic};

    const MB: usize = 1 << 20;

    fn mem() -> GuestMem {
        GuestMemoryAtomic::new(GuestMemoryMmap::from_ranges(&[(GuestAddress(0), MB)]).unwrap())
    }

    /// Pages out of order in guest memory, a partial last one: the source hands out the
    /// transfer in segment order, whole (slices) or copied, from any position.
    #[test]
    fn the_source_reads_the_segments_in_transfer_order() {
        let m = mem();
        let segs = [(0x8000u64, 4096u64), (0x2000, 4096), (0x5000, 4096), (0x9000, 200)];
        let data: Vec<u8> = (0..3 * 4096 + 200).map(|i| (i * 7 % 251) as u8).collect();
        let mut at = 0;
        for &(addr, len) in &segs {
            dma::write(&m, addr, &data[at..at + len as usize]).unwrap();
            at += len as usize;
        }
        let guard = m.memory();
        let src = GuestWrite::new(&guard, &segs).unwrap();
        assert_eq!(src.len(), data.len());
        for (from, n) in [(0, data.len()), (1000, 5000), (4096, 4096), (3 * 4096 + 10, 190)] {
            let mut copied = vec![0u8; n];
            src.copy_to(from, &mut copied);
            assert_eq!(copied, data[from..from + n], "copy of [{from}, +{n})");
            let mut slices = Vec::new();
            src.slices(from, n, &mut slices);
            let mut gathered = Vec::new();
            for s in &slices {
                let mut b = vec![0u8; s.len()];
                s.copy_to(&mut b);
                gathered.extend_from_slice(&b);
            }
            assert_eq!(gathered, data[from..from + n], "slices of [{from}, +{n})");
        }
    }

    /// A segment outside guest memory is Data Transfer Error before anything is read.
    #[test]
    fn a_segment_out_of_reach_is_a_data_transfer_error() {
        let m = mem();
        let guard = m.memory();
        for segs in [
            vec![(0x3000u64, 4096u64), (4 * MB as u64, 4096)],
            vec![(MB as u64 - 2048, 4096)],
            vec![(u64::MAX - 100, 4096)],
        ] {
            assert_eq!(
                GuestWrite::new(&guard, &segs).err(),
                Some(Status::DATA_TRANSFER_ERROR),
                "{segs:x?}"
            );
        }
    }

    /// Through the FTL onto a file: whole pages go out with `pwritev` from guest memory,
    /// a partial page is merged; the namespace reads back what the guest held.
    #[test]
    fn a_write_from_guest_pages_reads_back_through_the_ftl() {
        let m = mem();
        let data: Vec<u8> = (0..5 * 4096).map(|i| (i * 31 % 253) as u8).collect();
        let segs = [(0x20000u64, 3 * 4096u64), (0x4000, 4096), (0x60000, 4096)];
        let mut at = 0;
        for &(addr, len) in &segs {
            dma::write(&m, addr, &data[at..at + len as usize]).unwrap();
            at += len as usize;
        }
        let cfg = FtlConfig::default();
        let logical = 1 << 22;
        let bytes = Ftl::region_bytes(&cfg, logical).unwrap();
        let f = tempfile::tempfile().unwrap();
        f.set_len(bytes).unwrap();
        let medium: Box<dyn Medium> = Box::new(FileMedium::new(f, 0));
        let (mut ftl, _) = Ftl::open(&cfg, logical, medium).unwrap();
        let guard = m.memory();
        // At 512: every page of the transfer is partial or split over two logical pages.
        for off in [0u64, 512] {
            let src = GuestWrite::new(&guard, &segs).unwrap();
            ftl.write_from(off, &src, 0, &mut Vec::new()).unwrap();
            let mut back = vec![0u8; data.len()];
            ftl.read(off, &mut back, 0, &mut Vec::new()).unwrap();
            assert_eq!(back, data, "at {off}");
        }
    }

    // ---- The Write command's statuses, through the controller -------------------------

    use crate::fake_host::{Command, FakeHost};
    use crate::{Backing, ControllerConfig};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    fn ready_host(cfg: ControllerConfig) -> FakeHost {
        let mut h = FakeHost::new(cfg, 64 << 20);
        assert_eq!(h.enable(64) & 1, 1, "controller ready");
        h.create_io_queue(1, 64).unwrap();
        h
    }

    /// A 64 KiB Write (a PRP list) of `data` at LBA `slba`; one list entry may be replaced.
    fn write_cmd(h: &mut FakeHost, slba: u64, data: &[u8], bad_entry: Option<(usize, u64)>) -> Command {
        let (prp1, prp2, segs) = h.build_prps(data.len(), 0, 512);
        let mut at = 0;
        for (a, n) in &segs {
            h.guest_write(*a, &data[at..at + n]);
            at += n;
        }
        if let Some((i, addr)) = bad_entry {
            h.guest_write(prp2 + 8 * i as u64, &addr.to_le_bytes());
        }
        Command::new(0x01)
            .nsid(1)
            .prp1(prp1)
            .prp2(prp2)
            .cdw(10, slba as u32)
            .cdw(12, (data.len() / 512) as u32 - 1)
    }

    /// A page of the transfer outside guest memory (the sixth, behind reachable ones):
    /// Data Transfer Error, and nothing happened: no NAND operation, no counter, the
    /// namespace's old data in place.
    #[test]
    fn a_write_with_an_unreachable_page_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for backing in [Backing::Memory, Backing::SparseFile(dir.path().join("ns.img"))] {
            let mut h = ready_host(ControllerConfig {
                backing,
                ..ControllerConfig::default()
            });
            let old = vec![0x3Cu8; 64 << 10];
            assert!(h.write_lbas(1, 256, &old, 9).ok());
            let (stats, writes, ops) = (h.ctrl.ns.ftl.stats(), h.ctrl.counters.writes, h.ctrl.media.ops);
            let cmd = write_cmd(&mut h, 256, &vec![0xC3u8; 64 << 10], Some((5, 0x7000_0000)));
            assert_eq!(h.submit(1, cmd).unwrap().status, Status::DATA_TRANSFER_ERROR);
            assert_eq!(h.ctrl.ns.ftl.stats(), stats, "no FTL work");
            assert_eq!((h.ctrl.counters.writes, h.ctrl.media.ops), (writes, ops));
            assert_eq!(h.read_lbas(1, 256, 128, 9).1, old);
        }
    }

    /// A medium whose writes fail while `fail` is set (the backing file's region under it).
    struct FailingWrites {
        inner: FileMedium,
        fail: Arc<AtomicBool>,
    }

    impl FailingWrites {
        fn check(&self) -> std::io::Result<()> {
            if self.fail.load(Ordering::Relaxed) {
                Err(std::io::Error::other("injected write failure"))
            } else {
                Ok(())
            }
        }
    }

    impl Medium for FailingWrites {
        fn read_at(&self, off: u64, buf: &mut [u8]) -> std::io::Result<()> {
            self.inner.read_at(off, buf)
        }
        fn write_at(&mut self, off: u64, buf: &[u8]) -> std::io::Result<()> {
            self.check()?;
            self.inner.write_at(off, buf)
        }
        fn write_slices_at(&mut self, off: u64, slices: &[HostSlice]) -> std::io::Result<()> {
            self.check()?;
            self.inner.write_slices_at(off, slices)
        }
        fn sync(&mut self) -> std::io::Result<()> {
            self.inner.sync()
        }
        fn file_region(&self) -> Option<(&std::fs::File, u64)> {
            self.inner.file_region()
        }
    }

    /// The backing store refuses the write: Internal Error (the command's LBAs are
    /// indeterminate, as a failed Write may leave them), the write not counted; once the
    /// store works again, writes and reads are whole.
    #[test]
    fn a_failed_backing_write_is_an_internal_error() {
        let cfg = ControllerConfig::default();
        let mut h = ready_host(cfg.clone());
        let fail = Arc::new(AtomicBool::new(false));
        let bytes = Ftl::region_bytes(&cfg.media, cfg.namespace_bytes).unwrap();
        let f = tempfile::tempfile().unwrap();
        f.set_len(bytes).unwrap();
        let medium = FailingWrites {
            inner: FileMedium::new(f, 0),
            fail: fail.clone(),
        };
        h.ctrl.ns.ftl = Ftl::open(&cfg.media, cfg.namespace_bytes, Box::new(medium)).unwrap().0;
        let writes = h.ctrl.counters.writes;
        fail.store(true, Ordering::Relaxed);
        let cmd = write_cmd(&mut h, 0, &vec![0x77u8; 64 << 10], None);
        assert_eq!(h.submit(1, cmd).unwrap().status, Status::INTERNAL_ERROR);
        assert_eq!(h.ctrl.counters.writes, writes, "a failed write is not counted");
        fail.store(false, Ordering::Relaxed);
        let data: Vec<u8> = (0..64 << 10).map(|i| (i % 241) as u8).collect();
        let cmd = write_cmd(&mut h, 0, &data, None);
        assert_eq!(h.submit(1, cmd).unwrap().status, Status::SUCCESS);
        assert_eq!(h.ctrl.counters.writes, writes + 1);
        assert_eq!(h.read_lbas(1, 0, 128, 9).1, data);
    }
}
