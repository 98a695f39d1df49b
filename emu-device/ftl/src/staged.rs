//! The FTL's medium with host-page programs staged: a host write programs a run of
//! physically consecutive pages (the log's frontier), and each page was two writes to the
//! backing store (its 4 KiB of data, then its 24-byte OOB record), 512 `pwrite`s for a
//! 1 MiB write (docs/nvme-controller.md, "Where a large transfer's time goes"). Staged
//! programs of consecutive pages are collected and written as one write of their data,
//! then one write of their records, when the run breaks, before anything else touches the
//! medium (any read, any other write, a sync), and at the end of the FTL operation
//! (`Ftl::write`, `Ftl::deallocate` flush). So every read sees exactly the bytes it saw
//! with a write per page, and each record still reaches the medium after its page's data
//! (what makes a page count at recovery).
//!
//! A whole host page is staged as the memory that holds it (the command's guest pages,
//! [`HostSlice`]s), not copied: the run's data is one vectored write from there (one
//! `pwritev` on a file). Merged partial pages are copied into the run's own buffer.

use std::cell::RefCell;
use std::io;

use crate::medium::Medium;
use crate::write_source::HostSlice;

/// Bytes of page data one run collects at most before it is written (bounds the buffer;
/// a 1 MiB host write is one run).
const MAX_RUN_BYTES: usize = 2 << 20;

pub(crate) struct StagedMedium {
    // A RefCell: reads take `&self` (as `Medium::read_at` does) and must write a staged
    // run out first.
    inner: RefCell<Inner>,
}

struct Inner {
    medium: Box<dyn Medium>,
    run: Run,
    /// The run's data as slices, rebuilt at each run write (kept allocated).
    slices: Vec<HostSlice>,
}

/// A page's data as it is staged.
#[derive(Clone, Copy)]
pub(crate) enum PageData<'a> {
    /// Bytes of the FTL's own (a merged partial page, a GC move): copied into the run.
    Bytes(&'a [u8]),
    /// Host memory the FTL does not own (a whole page of a host write): staged as is.
    Host(&'a [HostSlice]),
}

impl PageData<'_> {
    pub(crate) fn len(&self) -> usize {
        match self {
            PageData::Bytes(b) => b.len(),
            PageData::Host(s) => s.iter().map(HostSlice::len).sum(),
        }
    }
}

/// One piece of a run's data, in order.
#[derive(Clone, Copy)]
enum Piece {
    /// [start, start + len) of the run's `owned` buffer.
    Owned {
        start: usize,
        len: usize,
    },
    Host(HostSlice),
}

/// Staged programs of consecutive pages: their data from `data_at`, records from `oob_at`.
#[derive(Default)]
struct Run {
    data_at: u64,
    data_len: usize,
    pieces: Vec<Piece>,
    owned: Vec<u8>,
    oob_at: u64,
    oob: Vec<u8>,
}

impl Run {
    fn is_empty(&self) -> bool {
        self.data_len == 0 && self.oob.is_empty()
    }

    fn push(&mut self, data: PageData<'_>) {
        match data {
            PageData::Bytes(b) => {
                let start = self.owned.len();
                self.owned.extend_from_slice(b);
                match self.pieces.last_mut() {
                    Some(Piece::Owned { start: s, len }) if *s + *len == start => *len += b.len(),
                    _ => self.pieces.push(Piece::Owned { start, len: b.len() }),
                }
            }
            PageData::Host(slices) => self.pieces.extend(slices.iter().map(|&s| Piece::Host(s))),
        }
        self.data_len += data.len();
    }

    fn clear(&mut self) {
        self.data_len = 0;
        self.pieces.clear();
        self.owned.clear();
        self.oob.clear();
    }
}

impl Inner {
    fn write_run(&mut self) -> io::Result<()> {
        if self.run.is_empty() {
            return Ok(());
        }
        let run = &self.run;
        self.slices.clear();
        self.slices.extend(run.pieces.iter().map(|p| match *p {
            // SAFETY: inside `owned`, which nothing changes until the run is cleared
            // below, after the write.
            Piece::Owned { start, len } => unsafe { HostSlice::new(run.owned.as_ptr().add(start), len) },
            Piece::Host(s) => s,
        }));
        // Data first, then the records: a record on the medium names data already there.
        let r = self
            .medium
            .write_slices_at(run.data_at, &self.slices)
            .and_then(|()| self.medium.write_at(run.oob_at, &run.oob));
        self.slices.clear();
        self.run.clear();
        r
    }
}

impl StagedMedium {
    pub(crate) fn new(medium: Box<dyn Medium>) -> Self {
        StagedMedium {
            inner: RefCell::new(Inner {
                medium,
                run: Run::default(),
                slices: Vec::new(),
            }),
        }
    }

    /// Program a page: `data` at `data_at`, then its record `oob` at `oob_at`, staged with
    /// the run before it if it continues it (both right after the run's ends), else after
    /// that run is written.
    pub(crate) fn stage_program(
        &mut self,
        data_at: u64,
        data: PageData<'_>,
        oob_at: u64,
        oob: &[u8],
    ) -> io::Result<()> {
        let inner = self.inner.get_mut();
        let run = &inner.run;
        let continues = run.data_len != 0
            && run.data_at + run.data_len as u64 == data_at
            && run.oob_at + run.oob.len() as u64 == oob_at
            && run.data_len + data.len() <= MAX_RUN_BYTES;
        if !continues {
            inner.write_run()?;
            inner.run.data_at = data_at;
            inner.run.oob_at = oob_at;
        }
        inner.run.push(data);
        inner.run.oob.extend_from_slice(oob);
        Ok(())
    }

    /// Write the staged run out (the end of an FTL operation: its errors are the
    /// operation's).
    pub(crate) fn flush_staged(&mut self) -> io::Result<()> {
        self.inner.get_mut().write_run()
    }

    pub(crate) fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut inner = self.inner.borrow_mut();
        inner.write_run()?;
        inner.medium.read_at(off, buf)
    }

    /// `f` with the medium itself, the staged run written out first (a read that goes
    /// straight to its destination, `Ftl::read_into`).
    pub(crate) fn with_medium<T>(&self, f: impl FnOnce(&dyn Medium) -> io::Result<T>) -> io::Result<T> {
        let mut inner = self.inner.borrow_mut();
        inner.write_run()?;
        f(&*inner.medium)
    }

    pub(crate) fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
        let inner = self.inner.get_mut();
        inner.write_run()?;
        inner.medium.write_at(off, buf)
    }

    /// A page's data written at once (not staged), after the staged run.
    pub(crate) fn write_page_at(&mut self, off: u64, data: PageData<'_>) -> io::Result<()> {
        let inner = self.inner.get_mut();
        inner.write_run()?;
        match data {
            PageData::Bytes(b) => inner.medium.write_at(off, b),
            PageData::Host(s) => inner.medium.write_slices_at(off, s),
        }
    }

    pub(crate) fn zero(&mut self, off: u64, len: u64) -> io::Result<()> {
        let inner = self.inner.get_mut();
        inner.write_run()?;
        inner.medium.zero(off, len)
    }

    pub(crate) fn sync(&mut self) -> io::Result<()> {
        let inner = self.inner.get_mut();
        inner.write_run()?;
        inner.medium.sync()
    }

    /// The medium as it is now (staged run written out first), for comparing its bytes.
    #[cfg(test)]
    pub(crate) fn inner_for_test(&self) -> std::cell::RefMut<'_, Box<dyn Medium>> {
        let mut inner = self.inner.borrow_mut();
        inner.write_run().expect("staged run");
        std::cell::RefMut::map(inner, |i| &mut i.medium)
    }

    /// The medium, with nothing staged (every FTL operation flushes before it returns).
    pub(crate) fn into_inner(self) -> Box<dyn Medium> {
        let inner = self.inner.into_inner();
        debug_assert!(inner.run.is_empty(), "a staged run outlived its FTL operation");
        inner.medium
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::MemMedium;

    /// Every write (offset, length) a `Recording` medium got.
    type Writes = std::sync::Arc<std::sync::Mutex<Vec<(u64, usize)>>>;

    /// A medium that records every write it gets.
    struct Recording {
        mem: MemMedium,
        writes: Writes,
    }

    impl Medium for Recording {
        fn read_at(&self, off: u64, buf: &mut [u8]) -> io::Result<()> {
            self.mem.read_at(off, buf)
        }
        fn write_at(&mut self, off: u64, buf: &[u8]) -> io::Result<()> {
            self.writes.lock().unwrap().push((off, buf.len()));
            self.mem.write_at(off, buf)
        }
        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn staged() -> (StagedMedium, Writes) {
        let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let m = Recording {
            mem: MemMedium::new(1 << 16).unwrap(),
            writes: writes.clone(),
        };
        (StagedMedium::new(Box::new(m)), writes)
    }

    #[test]
    fn consecutive_programs_are_one_data_write_then_one_record_write() {
        let (mut m, writes) = staged();
        for p in 0..4u64 {
            m.stage_program(
                0x1000 + p * 16,
                PageData::Bytes(&[p as u8 + 1; 16]),
                0x100 + p * 4,
                &[0xA0 + p as u8; 4],
            )
            .unwrap();
        }
        assert!(
            writes.lock().unwrap().is_empty(),
            "nothing written while the run goes on"
        );
        // A page elsewhere breaks the run: the run is written, data first.
        m.stage_program(0x2000, PageData::Bytes(&[9; 16]), 0x200, &[0xB0; 4])
            .unwrap();
        assert_eq!(*writes.lock().unwrap(), vec![(0x1000, 64), (0x100, 16)]);
        // A read writes the staged run out first and sees it.
        let mut b = [0u8; 20];
        m.read_at(0x1ff8, &mut b).unwrap();
        assert_eq!(b[..8], [0; 8]);
        assert_eq!(b[8..], [9; 12]);
        assert_eq!(writes.lock().unwrap().len(), 4);
        let mut r = [0u8; 16];
        m.read_at(0x100, &mut r).unwrap();
        assert_eq!(
            r,
            [0xA0, 0xA0, 0xA0, 0xA0, 0xA1, 0xA1, 0xA1, 0xA1, 0xA2, 0xA2, 0xA2, 0xA2, 0xA3, 0xA3, 0xA3, 0xA3]
        );
        // Other writes and syncs go after the run, in order.
        m.stage_program(0x3000, PageData::Bytes(&[7; 16]), 0x300, &[1; 4])
            .unwrap();
        m.write_at(0x10, &[5; 2]).unwrap();
        let w = writes.lock().unwrap().clone();
        assert_eq!(w[w.len() - 3..], [(0x3000, 16), (0x300, 4), (0x10, 2)]);
        m.flush_staged().unwrap();
        assert_eq!(writes.lock().unwrap().len(), w.len(), "nothing left staged");
    }

    #[test]
    fn a_run_is_bounded() {
        let writes = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mem = MemMedium::new(MAX_RUN_BYTES as u64 + (1 << 20)).unwrap();
        let mut m = StagedMedium::new(Box::new(Recording {
            mem,
            writes: writes.clone(),
        }));
        let pages = (MAX_RUN_BYTES / 4096) as u64 + 1;
        let oob_base = MAX_RUN_BYTES as u64 + 4096;
        for p in 0..pages {
            m.stage_program(p * 4096, PageData::Bytes(&[p as u8; 4096]), oob_base + p, &[p as u8])
                .unwrap();
        }
        m.flush_staged().unwrap();
        let full = pages - 1;
        assert_eq!(
            *writes.lock().unwrap(),
            vec![
                (0, MAX_RUN_BYTES),
                (oob_base, full as usize),
                (full * 4096, 4096),
                (oob_base + full, 1)
            ]
        );
        let mut b = [0u8; 1];
        m.read_at(full * 4096 + 7, &mut b).unwrap();
        assert_eq!(b[0], full as u8);
    }

    /// Host pages (staged as the memory holding them, split over several slices) and
    /// pages of the FTL's own bytes in one run: one data write, in staging order, then
    /// one record write; the host memory is read only when the run is written.
    #[test]
    fn host_slices_and_own_bytes_are_one_write_in_order() {
        let (mut m, writes) = staged();
        let host = [0x11u8; 24];
        let own = [0x22u8; 16];
        let slices = host_slices(&host, &[8, 16]);
        m.stage_program(0x1000, PageData::Host(&slices), 0x100, &[1; 4])
            .unwrap();
        m.stage_program(0x1018, PageData::Bytes(&own), 0x104, &[2; 4]).unwrap();
        m.stage_program(0x1028, PageData::Host(&slices), 0x108, &[3; 4])
            .unwrap();
        assert!(writes.lock().unwrap().is_empty());
        m.flush_staged().unwrap();
        assert_eq!(*writes.lock().unwrap(), vec![(0x1000, 64), (0x100, 12)]);
        let mut b = [0u8; 64];
        m.read_at(0x1000, &mut b).unwrap();
        assert_eq!(b, [&host[..], &own[..], &host[..]].concat()[..]);
    }

    /// `HostSlice`s over `buf`, cut at the given lengths.
    fn host_slices(buf: &[u8], cuts: &[usize]) -> Vec<HostSlice> {
        use crate::write_source::{BufferSource, WriteSource};
        let mut out = Vec::new();
        let mut at = 0;
        for &n in cuts {
            BufferSource(buf).slices(at, n, &mut out);
            at += n;
        }
        out
    }
}
