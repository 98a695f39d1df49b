//! The FTL proper: the data path (read, write, deallocate, flush), page allocation on the
//! log's frontier, and the map accessed through the cache. GC and wear levelling are in
//! gc.rs, format and recovery in recovery.rs.

use serde::Serialize;

use crate::events::{CacheEventKind, CorruptionFound, FtlEvent, NandOpKind, Purpose};
use crate::geometry::{page_spans, Geometry, GeometryReport, PageSpan, NO_PPN};
use crate::map_cache::{MapCache, VecSlots};
use crate::medium::Medium;
use crate::oob::Oob;
use crate::read_target::{BufferTarget, ReadTarget};
use crate::staged::{PageData, StagedMedium};
use crate::timing::DieClock;
use crate::write_source::{BufferSource, HostSlice, WriteSource};
use crate::{FtlConfig, FtlError};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LineState {
    Free,
    Open,
    Full,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Line {
    pub state: LineState,
    pub erase_count: u32,
    pub valid: u32,
}

/// One page of a host read: its physical page, and where its bytes go in the buffer.
struct PageRead {
    ppn: u32,
    at: usize,
    in_page: usize,
    n: usize,
}

/// Counters of the FTL's work (the report, the write-amplification figure).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct FtlStats {
    /// Logical pages the host wrote (each partial page counts once).
    pub host_pages_written: u64,
    /// Every page programmed: host data, GC and wear-levelling moves, map pages.
    pub nand_programs: u64,
    pub nand_reads: u64,
    pub nand_erases: u64,
    pub map_page_reads: u64,
    pub map_page_writes: u64,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub gc_runs: u64,
    pub gc_pages_moved: u64,
    pub wear_level_moves: u64,
    pub wear_level_pages_moved: u64,
    /// Cached map pages found changed behind the controller's back (a host write into
    /// the HMB), dropped and reloaded.
    pub cache_corruptions: u64,
    /// Of those, pages that held updates not yet on NAND, rebuilt from NAND.
    pub map_page_rebuilds: u64,
    /// Slots taken over as they were when the HMB came back with memory return.
    pub cache_slots_reused: u64,
    /// Map cache slots now, and whether they are in the HMB.
    pub cache_slots: u32,
    pub cache_in_hmb: bool,
    pub min_erase_count: u32,
    pub max_erase_count: u32,
    pub free_lines: u32,
    pub geometry: GeometryReport,
}

pub struct Ftl {
    pub(crate) geo: Geometry,
    pub(crate) cfg: FtlConfig,
    /// The region, host-page programs staged per run (staged.rs).
    pub(crate) medium: StagedMedium,
    /// Sequence number of the last program (every program takes the next).
    pub(crate) seq: u64,
    pub(crate) lines: Vec<Line>,
    /// What GC and wear levelling ask of `lines` before every host page (gc.rs
    /// `line_census`), until a line changes.
    pub(crate) census: Option<crate::gc::LineCensus>,
    /// One bit per physical page: holds the current copy of a logical page or map page.
    pub(crate) valid: Vec<u64>,
    /// Global translation directory: map page index -> PPN of its newest copy on NAND.
    pub(crate) gtd: Vec<u32>,
    pub(crate) cache: MapCache,
    /// The cache's slots are not controller memory (attach_cache).
    pub(crate) cache_external: bool,
    /// Updates of an external store the cache let go of, not yet drained.
    pub(crate) pending_updates: Vec<(u64, u64)>,
    /// The log's frontier: (line, next page offset in it).
    pub(crate) open: Option<(u32, u32)>,
    pub(crate) clock: DieClock,
    pub(crate) stats: FtlStats,
    /// The checked content of the map page the last lookup used (`map_page`), kept
    /// between lookups so that a lookup allocates nothing; its map page index.
    map_buf: Vec<u8>,
    map_buf_holds: Option<u32>,
    /// During one host operation (`read`, `write`, `deallocate`): the map page whose slot
    /// this operation has already read and checked, and the slot. A later lookup of the
    /// same page in the same operation uses `map_buf` as it is, as a controller fetches a
    /// map page once per command, not once per 4 KiB it maps (`map_page`).
    op_checked: Option<(u32, u32)>,
    /// A host operation is running (`host_op`).
    in_host_op: bool,
    /// Host pages' programs staged per run (always, but for the test that compares the
    /// medium with and without).
    pub(crate) stage_host_pages: bool,
    /// The memory holding one whole host page (`rewrite_page`; kept allocated).
    page_slices: Vec<HostSlice>,
}

impl Ftl {
    /// Bytes of the FTL's region of the backing store for this configuration.
    pub fn region_bytes(cfg: &FtlConfig, logical_bytes: u64) -> Result<u64, FtlError> {
        Ok(Geometry::new(cfg, logical_bytes)?.region_bytes)
    }

    /// Open the FTL on `medium` (its region): recover what is there, or format a blank
    /// region. Returns the FTL and whether it formatted.
    pub fn open(cfg: &FtlConfig, logical_bytes: u64, medium: Box<dyn Medium>) -> Result<(Ftl, bool), FtlError> {
        Self::open_with(cfg, logical_bytes, medium, true)
    }

    /// Open the FTL a region already holds (recovered as at a power-on); a region without
    /// one is `FtlError::NotFormatted`, never formatted. With an [`crate::OverlayMedium`]
    /// nothing reaches the region: how a host tool reads a namespace (`export_image`).
    pub fn open_existing(cfg: &FtlConfig, logical_bytes: u64, medium: Box<dyn Medium>) -> Result<Ftl, FtlError> {
        Ok(Self::open_with(cfg, logical_bytes, medium, false)?.0)
    }

    fn open_with(
        cfg: &FtlConfig,
        logical_bytes: u64,
        medium: Box<dyn Medium>,
        may_format: bool,
    ) -> Result<(Ftl, bool), FtlError> {
        let geo = Geometry::new(cfg, logical_bytes)?;
        let cache = MapCache::new(Box::new(VecSlots::new(cfg.map_cache_pages, geo.page_bytes as usize)));
        let mut ftl = Ftl {
            clock: DieClock::new(cfg, geo.dies),
            lines: vec![
                Line {
                    state: LineState::Free,
                    erase_count: 0,
                    valid: 0
                };
                geo.lines as usize
            ],
            census: None,
            valid: vec![0; geo.physical_pages().div_ceil(64) as usize],
            gtd: vec![NO_PPN; geo.map_pages as usize],
            cache,
            cache_external: false,
            pending_updates: Vec::new(),
            open: None,
            seq: 0,
            stats: FtlStats::default(),
            map_buf: Vec::new(),
            map_buf_holds: None,
            op_checked: None,
            in_host_op: false,
            stage_host_pages: true,
            page_slices: Vec::new(),
            medium: StagedMedium::new(medium),
            cfg: cfg.clone(),
            geo,
        };
        let formatted = ftl.mount(may_format)?;
        Ok((ftl, formatted))
    }

    pub fn logical_bytes(&self) -> u64 {
        self.geo.logical_pages * self.geo.page_bytes
    }

    pub fn page_bytes(&self) -> u64 {
        self.geo.page_bytes
    }

    pub fn stats(&self) -> FtlStats {
        let mut s = self.stats.clone();
        let census = self.count_lines();
        s.min_erase_count = census.coldest.map_or(0, |l| self.lines[l as usize].erase_count);
        s.max_erase_count = census.max_erase_count;
        s.free_lines = census.free;
        s.cache_slots = self.cache.slots();
        s.cache_in_hmb = self.cache_external;
        s.geometry = self.geo.report();
        s
    }

    /// Erase count of every line (all blocks of a line are erased together).
    pub fn erase_counts(&self) -> Vec<u32> {
        self.lines.iter().map(|l| l.erase_count).collect()
    }

    pub fn cache_slots(&self) -> u32 {
        self.cache.slots()
    }

    // ---- Data path ------------------------------------------------------------------

    /// Run one host operation: within it, a map page is read from its slot and checked
    /// once (`map_page`); nothing carries over to the next operation.
    fn host_op<T>(&mut self, op: impl FnOnce(&mut Self) -> Result<T, FtlError>) -> Result<T, FtlError> {
        self.op_checked = None;
        self.in_host_op = true;
        let r = op(self);
        self.in_host_op = false;
        self.op_checked = None;
        r
    }

    fn check_range(&self, off: u64, len: u64) -> Result<(), FtlError> {
        let size = self.logical_bytes();
        if off.checked_add(len).is_none_or(|end| end > size) {
            return Err(FtlError::Range { off, len, size });
        }
        Ok(())
    }

    /// Read [off, off+len) into `buf`; unmapped pages read as zeroes. Returns when the
    /// last NAND operation ends (`now` if none).
    pub fn read(&mut self, off: u64, buf: &mut [u8], now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        let len = buf.len();
        self.read_into(off, len, &mut BufferTarget(buf), now, ev)
    }

    /// [`Ftl::read`] of `len` bytes into `target` (the NVMe controller's: the command's
    /// guest pages). The same NAND operations, events, counters and modelled time.
    pub fn read_into(
        &mut self,
        off: u64,
        len: usize,
        target: &mut dyn ReadTarget,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        self.host_op(|ftl| ftl.read_op(off, len, target, now, ev))
    }

    fn read_op(
        &mut self,
        off: u64,
        len: usize,
        target: &mut dyn ReadTarget,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        self.check_range(off, len as u64)?;
        let pb = self.geo.page_bytes;
        let mut end = now;
        // The NAND operations are modelled (and their events made) page by page, in
        // order; the data is read afterwards, a run of physically consecutive pages in
        // one medium read straight into the target (a large sequential read is one pread,
        // not one per page: the copy and the syscalls were most of a 1 MiB read's time).
        let mut pages: Vec<PageRead> = Vec::with_capacity(len.div_ceil(pb as usize));
        for PageSpan { index, in_page, at, n } in page_spans(pb, off, len) {
            let (ppn, t) = self.map_get(index as u32, now, ev)?;
            if ppn == NO_PPN {
                target.zeroes(at, n);
                end = end.max(t);
            } else {
                end = end.max(self.nand_read_op(ppn, Purpose::Host, t, ev));
                pages.push(PageRead { ppn, at, in_page, n });
            }
        }
        self.read_pages(&pages, target)?;
        Ok(end)
    }

    /// The data of `pages` (as `read_op` listed them) into `target`.
    fn read_pages(&self, pages: &[PageRead], target: &mut dyn ReadTarget) -> Result<(), FtlError> {
        let pb = self.geo.page_bytes as usize;
        let whole = |p: &PageRead| p.in_page == 0 && p.n == pb;
        let mut i = 0;
        while i < pages.len() {
            let first = &pages[i];
            if !whole(first) {
                let mut page = vec![0u8; pb];
                self.medium.read_at(self.geo.data_at(first.ppn), &mut page)?;
                target.put(first.at, &page[first.in_page..first.in_page + first.n]);
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < pages.len()
                && whole(&pages[j])
                && pages[j].ppn == pages[j - 1].ppn + 1
                && pages[j].at == pages[j - 1].at + pb
            {
                j += 1;
            }
            let len = (j - i) * pb;
            let at = self.geo.data_at(first.ppn);
            self.medium.with_medium(|m| target.medium_run(m, at, first.at, len))?;
            i = j;
        }
        Ok(())
    }

    /// Write `data` at `off`: each touched page goes to a new place on the log (a partial
    /// page is merged with its old content first).
    pub fn write(&mut self, off: u64, data: &[u8], now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        self.write_from(off, &BufferSource(data), now, ev)
    }

    /// [`Ftl::write`] of `source`'s bytes (the NVMe controller's: the command's guest
    /// pages, written to the medium straight from there: write_source.rs). The same NAND
    /// operations, events, counters, modelled time and medium bytes.
    pub fn write_from(
        &mut self,
        off: u64,
        source: &dyn WriteSource,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        self.host_op(|ftl| ftl.write_op(off, source, now, ev))
    }

    fn write_op(
        &mut self,
        off: u64,
        source: &dyn WriteSource,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        self.check_range(off, source.len() as u64)?;
        let pb = self.geo.page_bytes;
        let mut page = vec![0u8; pb as usize];
        let mut end = now;
        let mut pages = || {
            for PageSpan { index, in_page, at, n } in page_spans(pb, off, source.len()) {
                let t = self.rewrite_page(index as u32, in_page, Some((source, at)), n, &mut page, now, ev)?;
                end = end.max(t);
            }
            Ok::<_, FtlError>(())
        };
        let r = pages();
        // The pages' data and records are staged per run of consecutive pages (one write
        // each, staged.rs): out before the write completes, also after an error.
        let flushed = self.medium.flush_staged();
        r?;
        flushed?;
        Ok(end)
    }

    /// Deallocate [off, off+len): whole pages are unmapped, the parts of partial pages are
    /// written as zeroes (deallocated blocks read as zeroes). The map pages this changed
    /// are written back at once, so a deallocation survives a power cycle.
    pub fn deallocate(&mut self, off: u64, len: u64, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        self.host_op(|ftl| ftl.deallocate_op(off, len, now, ev))
    }

    fn deallocate_op(&mut self, off: u64, len: u64, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        self.check_range(off, len)?;
        let pb = self.geo.page_bytes;
        let mut page = vec![0u8; pb as usize];
        let mut end = now;
        let mut pos = off;
        while pos < off + len {
            let lpn = (pos / pb) as u32;
            let in_page = (pos % pb) as usize;
            let n = (pb - in_page as u64).min(off + len - pos) as usize;
            if n as u64 == pb {
                let (old, t) = self.map_set(lpn, NO_PPN, now, ev)?;
                if old != NO_PPN {
                    self.invalidate(old);
                }
                end = end.max(t);
            } else {
                let (cur, t) = self.map_get(lpn, now, ev)?;
                end = end.max(t);
                if cur != NO_PPN {
                    end = end.max(self.rewrite_page(lpn, in_page, None, n, &mut page, now, ev)?);
                }
            }
            pos += n as u64;
        }
        let end = end.max(self.write_back_map(now, ev)?);
        self.medium.flush_staged()?;
        Ok(end)
    }

    /// Write every dirty map page back and make the medium durable (Flush, shutdown).
    pub fn flush(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        let end = self.write_back_map(now, ev)?;
        self.medium.sync()?;
        Ok(end)
    }

    /// Program logical page `lpn` anew: bytes [in_page, in_page+n) from `data` (the
    /// source's from its position; zeroes when None), the rest from its current copy.
    #[allow(clippy::too_many_arguments)]
    fn rewrite_page(
        &mut self,
        lpn: u32,
        in_page: usize,
        data: Option<(&dyn WriteSource, usize)>,
        n: usize,
        page: &mut [u8],
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        self.collect_garbage(now, ev)?;
        let entry = self.map_prepare(lpn, now, ev)?;
        let mut t = entry.ready;
        // A whole page is staged straight from the host's memory (not copied); a partial
        // one is merged with its current copy in `page` first.
        let mut slices = std::mem::take(&mut self.page_slices);
        let content = match data {
            Some((source, at)) if n == page.len() => {
                source.slices(at, n, &mut slices);
                PageData::Host(&slices)
            }
            _ => {
                if n < page.len() {
                    if entry.old == NO_PPN {
                        page.fill(0);
                    } else {
                        t = self.nand_read(entry.old, page, Purpose::Host, t, ev)?;
                    }
                }
                match data {
                    Some((source, at)) => source.copy_to(at, &mut page[in_page..in_page + n]),
                    None => page[in_page..in_page + n].fill(0),
                }
                PageData::Bytes(page)
            }
        };
        self.stats.host_pages_written += 1;
        let programmed = self.program_as(|seq| Oob::Data { lpn, seq }, content, Purpose::Host, true, t, ev);
        // Kept allocated, emptied: the staged run holds its own copy of the slices.
        slices.clear();
        self.page_slices = slices;
        let (ppn, t) = programmed?;
        let old = entry.old;
        self.map_commit(entry, ppn)?;
        if old != NO_PPN {
            self.invalidate(old);
        }
        Ok(t)
    }

    // ---- NAND pages -----------------------------------------------------------------

    pub(crate) fn is_valid(&self, ppn: u32) -> bool {
        self.valid[(ppn / 64) as usize] & (1 << (ppn % 64)) != 0
    }

    pub(crate) fn set_valid(&mut self, ppn: u32) {
        self.valid[(ppn / 64) as usize] |= 1 << (ppn % 64);
        self.lines[self.geo.line_of(ppn) as usize].valid += 1;
    }

    pub(crate) fn invalidate(&mut self, ppn: u32) {
        if self.is_valid(ppn) {
            self.valid[(ppn / 64) as usize] &= !(1 << (ppn % 64));
            self.lines[self.geo.line_of(ppn) as usize].valid -= 1;
        }
    }

    pub(crate) fn read_oob(&self, ppn: u32) -> Result<Oob, FtlError> {
        let mut b = [0u8; crate::oob::OOB_BYTES];
        self.medium.read_at(self.geo.oob_at(ppn), &mut b)?;
        Oob::decode(&b).ok_or_else(|| FtlError::Corrupt(format!("unreadable OOB record of page {ppn}")))
    }

    pub(crate) fn nand_read(
        &mut self,
        ppn: u32,
        buf: &mut [u8],
        purpose: Purpose,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        self.medium.read_at(self.geo.data_at(ppn), buf)?;
        Ok(self.nand_read_op(ppn, purpose, now, ev))
    }

    /// The modelled NAND read of `ppn` (counted, timed, its event made) without its data:
    /// the caller reads the data itself; returns when the read ends.
    fn nand_read_op(&mut self, ppn: u32, purpose: Purpose, now: u64, ev: &mut Vec<FtlEvent>) -> u64 {
        self.stats.nand_reads += 1;
        let op = self.clock.run(NandOpKind::Read, purpose, self.geo.place(ppn), now, 0);
        ev.push(FtlEvent::Nand(op));
        op.start_ns + u64::from(op.latency_ns)
    }

    /// The next page of the log's frontier (a new line when the open one is full: the free
    /// line erased least often, so wear spreads).
    fn allocate(&mut self) -> Result<u32, FtlError> {
        if let Some((line, next)) = self.open {
            if next < self.geo.line_pages {
                self.open = Some((line, next + 1));
                return Ok(line * self.geo.line_pages + next);
            }
            self.lines[line as usize].state = LineState::Full;
            self.lines_changed();
            self.open = None;
        }
        let line = (0..self.geo.lines)
            .filter(|&l| self.lines[l as usize].state == LineState::Free)
            .min_by_key(|&l| self.lines[l as usize].erase_count)
            .ok_or(FtlError::NoSpace)?;
        self.lines[line as usize].state = LineState::Open;
        self.lines_changed();
        self.open = Some((line, 1));
        Ok(line * self.geo.line_pages)
    }

    /// Program `data` on the frontier with the OOB record `oob(seq)`: data first, then the
    /// record, which is what makes the page count at recovery.
    pub(crate) fn program(
        &mut self,
        oob: impl FnOnce(u64) -> Oob,
        data: &[u8],
        purpose: Purpose,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<(u32, u64), FtlError> {
        self.program_as(oob, PageData::Bytes(data), purpose, false, now, ev)
    }

    /// `program`, the medium writes staged with the run of consecutive pages before
    /// (`staged`: a host write's pages, flushed when the write ends; staged.rs) or
    /// written at once.
    fn program_as(
        &mut self,
        oob: impl FnOnce(u64) -> Oob,
        data: PageData<'_>,
        purpose: Purpose,
        staged: bool,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<(u32, u64), FtlError> {
        let ppn = self.allocate()?;
        self.seq += 1;
        let record = oob(self.seq).encode();
        if staged && self.stage_host_pages {
            self.medium
                .stage_program(self.geo.data_at(ppn), data, self.geo.oob_at(ppn), &record)?;
        } else {
            self.medium.write_page_at(self.geo.data_at(ppn), data)?;
            self.medium.write_at(self.geo.oob_at(ppn), &record)?;
        }
        self.set_valid(ppn);
        self.stats.nand_programs += 1;
        let op = self
            .clock
            .run(NandOpKind::Program, purpose, self.geo.place(ppn), now, 0);
        ev.push(FtlEvent::Nand(op));
        Ok((ppn, op.start_ns + u64::from(op.latency_ns)))
    }

    // ---- The map, through the cache ---------------------------------------------------

    fn split(&self, lpn: u32) -> (u32, u32) {
        (lpn / self.geo.entries_per_map_page, lpn % self.geo.entries_per_map_page)
    }

    /// The slot holding map page `idx` and when it is ready; its checked content is left in
    /// `self.map_buf`. A miss reads the page from NAND into the least recently used slot
    /// (written back first if dirty); a hit whose page changed behind the controller is
    /// reported and reloaded.
    ///
    /// Within one host operation, a page this operation already checked is used from
    /// `map_buf` without reading its slot again (the same hit event, counter and modelled
    /// time as a read): `map_buf` is what the slot held at that check plus the
    /// controller's own updates since (`set_entry` writes both), and it still holds that
    /// page only if no other page was looked up in between. A host write into the slot
    /// during the operation is found at the next operation's first use of the slot.
    pub(crate) fn map_page(&mut self, idx: u32, now: u64, ev: &mut Vec<FtlEvent>) -> Result<(u32, u64), FtlError> {
        if let Some((checked, slot)) = self.op_checked {
            if checked == idx && self.map_buf_holds == Some(idx) && self.cache.peek(idx) == Some(slot) {
                self.cache.find(idx);
                self.stats.cache_hits += 1;
                ev.push(self.cache_event(CacheEventKind::Hit, idx, slot));
                return Ok((slot, now + self.cache_lookup_ns()));
            }
        }
        let mut page = std::mem::take(&mut self.map_buf);
        page.resize(self.geo.page_bytes as usize, 0);
        self.map_buf_holds = None;
        self.op_checked = None;
        let r = self.map_page_into(idx, &mut page, now, ev);
        self.map_buf = page;
        if let Ok((slot, _)) = r {
            self.map_buf_holds = Some(idx);
            if self.in_host_op {
                self.op_checked = Some((idx, slot));
            }
        }
        r
    }

    /// The modelled time of a lookup that hits: an HMB read when the cache is there.
    fn cache_lookup_ns(&self) -> u64 {
        if self.cache_external {
            u64::from(self.cfg.hmb_access_ns)
        } else {
            0
        }
    }

    fn map_page_into(
        &mut self,
        idx: u32,
        page: &mut [u8],
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<(u32, u64), FtlError> {
        if let Some(slot) = self.cache.find(idx) {
            if let Err(found) = self.cache.read_checked(slot, page)? {
                self.corrupt(slot, idx, found, CorruptionFound::InUse, ev);
                let t = self.reload(slot, idx, page, now, ev)?;
                return Ok((slot, t));
            }
            self.stats.cache_hits += 1;
            ev.push(self.cache_event(CacheEventKind::Hit, idx, slot));
            return Ok((slot, now + self.cache_lookup_ns()));
        }
        self.stats.cache_misses += 1;
        let slot = self.cache.victim();
        ev.push(self.cache_event(CacheEventKind::Miss, idx, slot));
        let mut t = now;
        if let Some((old, true)) = self.cache.occupant(slot) {
            t = self.write_back_slot(slot, old, page, now, ev)?;
        }
        self.cache.forget(slot);
        t = t.max(self.load_map_page(idx, page, now, ev)?);
        self.cache.install(slot, idx, page)?;
        ev.push(self.cache_event(CacheEventKind::Fill, idx, slot));
        Ok((slot, t))
    }

    /// Map page `idx` as NAND has it (all unmapped if never written).
    fn load_map_page(&mut self, idx: u32, page: &mut [u8], now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        let ppn = self.gtd[idx as usize];
        if ppn == NO_PPN {
            page.fill(0xFF);
            return Ok(now);
        }
        self.stats.map_page_reads += 1;
        self.nand_read(ppn, page, Purpose::Map, now, ev)
    }

    pub(crate) fn corrupt(
        &mut self,
        slot: u32,
        map_page: u32,
        found: u64,
        when: CorruptionFound,
        ev: &mut Vec<FtlEvent>,
    ) {
        self.stats.cache_corruptions += 1;
        ev.push(FtlEvent::MapCacheCorrupt {
            map_page,
            slot,
            offset: self.cache.offset(slot),
            found,
            when,
        });
    }

    /// Replace a changed slot's page: from NAND if it was clean, rebuilt from NAND (its
    /// newest copy and the data pages programmed since) if it held updates not yet written
    /// back, which stay to be written.
    fn reload(
        &mut self,
        slot: u32,
        idx: u32,
        page: &mut [u8],
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        let dirty = self.cache.is_dirty(slot);
        self.cache.forget(slot);
        let t = if dirty {
            self.rebuild_map_page(idx, page)?;
            now
        } else {
            self.load_map_page(idx, page, now, ev)?
        };
        self.cache.install(slot, idx, page)?;
        if dirty {
            self.cache.mark_dirty(slot);
        }
        ev.push(self.cache_event(CacheEventKind::Fill, idx, slot));
        Ok(t)
    }

    fn cache_event(&self, kind: CacheEventKind, map_page: u32, slot: u32) -> FtlEvent {
        FtlEvent::MapCache {
            kind,
            map_page,
            slot,
            offset: self.cache.offset(slot),
        }
    }

    /// Program the cached map page `idx` of `slot` (checked first: a changed page is
    /// rebuilt, never programmed) and make it the newest copy.
    fn write_back_slot(
        &mut self,
        slot: u32,
        idx: u32,
        page: &mut [u8],
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        // A changed page is rebuilt and programmed, and its slot emptied (not rewritten:
        // the cache writes the HMB only to fill or update a slot it uses).
        let changed = match self.cache.read_checked(slot, page)? {
            Ok(()) => false,
            Err(found) => {
                self.corrupt(slot, idx, found, CorruptionFound::InUse, ev);
                self.rebuild_map_page(idx, page)?;
                true
            }
        };
        ev.push(self.cache_event(CacheEventKind::WriteBack, idx, slot));
        let t = self.program_map_page(idx, page, now, ev)?;
        if changed {
            self.cache.forget(slot);
        } else {
            self.cache.mark_clean(slot);
        }
        Ok(t)
    }

    /// Program map page `idx` with `page` as its newest copy (covering every update so far).
    pub(crate) fn program_map_page(
        &mut self,
        idx: u32,
        page: &[u8],
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u64, FtlError> {
        let (ppn, t) = self.program(
            |seq| Oob::Map {
                index: idx,
                seq,
                covers: seq,
            },
            page,
            Purpose::Map,
            now,
            ev,
        )?;
        self.stats.map_page_writes += 1;
        let old = std::mem::replace(&mut self.gtd[idx as usize], ppn);
        if old != NO_PPN {
            self.invalidate(old);
        }
        Ok(t)
    }

    pub(crate) fn write_back_map(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<u64, FtlError> {
        let mut end = now;
        let mut page = vec![0u8; self.geo.page_bytes as usize];
        for slot in self.cache.dirty_slots() {
            if let Some((idx, true)) = self.cache.occupant(slot) {
                end = end.max(self.write_back_slot(slot, idx, &mut page, now, ev)?);
            }
        }
        Ok(end)
    }

    /// The PPN of `lpn` (NO_PPN: unmapped) and when the lookup is done.
    pub(crate) fn map_get(&mut self, lpn: u32, now: u64, ev: &mut Vec<FtlEvent>) -> Result<(u32, u64), FtlError> {
        let (idx, i) = self.split(lpn);
        let (_, t) = self.map_page(idx, now, ev)?;
        Ok((entry(&self.map_buf, i), t))
    }

    /// Map `lpn` to `ppn`; returns the old PPN (the caller invalidates it).
    pub(crate) fn map_set(
        &mut self,
        lpn: u32,
        ppn: u32,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<(u32, u64), FtlError> {
        let (idx, i) = self.split(lpn);
        let (slot, t) = self.map_page(idx, now, ev)?;
        let old = entry(&self.map_buf, i);
        // Unchanged (deallocating what was never written): the page stays clean, so a
        // large deallocation of a sparse namespace programs nothing.
        if old != ppn {
            self.cache.set_entry(slot, &mut self.map_buf, i, ppn)?;
        }
        Ok((old, t))
    }

    /// The map entry of `lpn`, loaded before its new copy is programmed: a changed slot
    /// found at this load is rebuilt from the data pages on NAND, and must not see the
    /// copy being written as already mapped.
    pub(crate) fn map_prepare(&mut self, lpn: u32, now: u64, ev: &mut Vec<FtlEvent>) -> Result<MapEntry, FtlError> {
        let (idx, i) = self.split(lpn);
        let (slot, ready) = self.map_page(idx, now, ev)?;
        let old = entry(&self.map_buf, i);
        Ok(MapEntry {
            slot,
            idx,
            i,
            old,
            ready,
        })
    }

    /// Point the prepared entry at `ppn` (nothing touched the cache since: programs do
    /// not, so `map_buf` still holds its page).
    pub(crate) fn map_commit(&mut self, e: MapEntry, ppn: u32) -> Result<(), FtlError> {
        if self.map_buf_holds != Some(e.idx) {
            return Err(FtlError::Corrupt(format!(
                "map page {} changed between an entry's load and its update",
                e.idx
            )));
        }
        if e.old != ppn {
            self.cache.set_entry(e.slot, &mut self.map_buf, e.i, ppn)?;
        }
        Ok(())
    }

    /// Map page `idx` as it is now (cached copy, else NAND), without touching the cache.
    pub(crate) fn peek_map_page(&self, idx: u32) -> Result<Vec<u32>, FtlError> {
        let mut page = vec![0u8; self.geo.page_bytes as usize];
        if let Some(slot) = self.cache.peek(idx) {
            // A changed slot is what its next use will load: NAND's copy, rebuilt if dirty.
            if self.cache.peek_checked(slot, &mut page)?.is_err() {
                if self.cache.is_dirty(slot) {
                    self.rebuilt_map_page(idx, &mut page)?;
                } else if self.gtd[idx as usize] == NO_PPN {
                    page.fill(0xFF);
                } else {
                    self.medium
                        .read_at(self.geo.data_at(self.gtd[idx as usize]), &mut page)?;
                }
            }
        } else if self.gtd[idx as usize] == NO_PPN {
            page.fill(0xFF);
        } else {
            self.medium
                .read_at(self.geo.data_at(self.gtd[idx as usize]), &mut page)?;
        }
        Ok(page
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }
}

impl Ftl {
    /// Write the first `len` bytes of the logical space as a flat image into `out` (what
    /// `dd` of the namespace would give): pages that read as zeroes are left as holes, so the file is as sparse
    /// as the namespace. Returns the bytes of data written. The reads go through the map
    /// cache like the controller's (use an overlay medium to leave the region unchanged).
    pub fn export_image(&mut self, out: &std::fs::File, len: u64) -> Result<u64, FtlError> {
        use std::os::unix::fs::FileExt;
        const CHUNK: u64 = 256;
        self.check_range(0, len)?;
        let pb = self.geo.page_bytes;
        let size = len;
        out.set_len(0)?;
        out.set_len(size)?;
        let mut buf = vec![0u8; (CHUNK * pb) as usize];
        let mut ev = Vec::new();
        let mut written = 0;
        let mut off = 0;
        while off < size {
            let n = (size - off).min(CHUNK * pb) as usize;
            self.read(off, &mut buf[..n], 0, &mut ev)?;
            ev.clear();
            for (i, page) in buf[..n].chunks(pb as usize).enumerate() {
                if page.iter().any(|&b| b != 0) {
                    out.write_all_at(page, off + i as u64 * pb)?;
                    written += page.len() as u64;
                }
            }
            off += n as u64;
        }
        Ok(written)
    }

    /// Give the medium back without writing anything (a power loss: the next `open`
    /// recovers from what reached NAND). Call `flush` first for a clean shutdown.
    pub fn into_medium(self) -> Box<dyn Medium> {
        self.medium.into_inner()
    }
}

/// Entry `i` of a map page.
fn entry(page: &[u8], i: u32) -> u32 {
    let at = i as usize * 4;
    u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes"))
}

/// A map entry loaded for an update (map_prepare / map_commit).
pub(crate) struct MapEntry {
    slot: u32,
    idx: u32,
    i: u32,
    pub old: u32,
    /// When the map page was ready (after a miss's NAND read).
    pub ready: u64,
}

#[cfg(test)]
mod staging_tests {
    //! Staged host-page programs (staged.rs) leave the medium exactly as a write per page
    //! did, with the same events and counters, across GC, partial pages, deallocation and
    //! a power cycle.
    use super::*;
    use crate::medium::MemMedium;
    use proptest::prelude::*;

    const PAGE: u64 = 4096;
    const LOGICAL: u64 = 1536 * PAGE;

    fn cfg() -> FtlConfig {
        FtlConfig {
            channels: 2,
            dies_per_channel: 2,
            pages_per_block: 16,
            map_cache_pages: 1,
            wl_threshold: 4,
            ..Default::default()
        }
    }

    fn fresh(staged: bool) -> Ftl {
        let bytes = Ftl::region_bytes(&cfg(), LOGICAL).unwrap();
        let mut f = Ftl::open(&cfg(), LOGICAL, Box::new(MemMedium::new(bytes).unwrap()))
            .unwrap()
            .0;
        f.stage_host_pages = staged;
        f
    }

    fn region(m: &dyn Medium) -> Vec<u8> {
        let mut b = vec![0u8; Ftl::region_bytes(&cfg(), LOGICAL).unwrap() as usize];
        m.read_at(0, &mut b).unwrap();
        b
    }

    #[derive(Clone, Debug)]
    enum Op {
        Write { off: u64, len: u64, seed: u8 },
        Deallocate { off: u64, len: u64 },
        Read { off: u64, len: u64 },
        Flush,
    }

    fn op() -> impl Strategy<Value = Op> {
        let sector = LOGICAL / 512;
        prop_oneof![
            6 => (0..sector, 1u64..=2048, any::<u8>()).prop_map(move |(s, n, seed)| {
                Op::Write { off: s * 512, len: n.min(sector - s) * 512, seed }
            }),
            1 => (0..sector, 1u64..=256).prop_map(move |(s, n)| {
                Op::Deallocate { off: s * 512, len: n.min(sector - s) * 512 }
            }),
            2 => (0..sector, 1u64..=512).prop_map(move |(s, n)| {
                Op::Read { off: s * 512, len: n.min(sector - s) * 512 }
            }),
            1 => Just(Op::Flush),
        ]
    }

    fn apply(f: &mut Ftl, op: &Op, ev: &mut Vec<FtlEvent>) -> Vec<u8> {
        match *op {
            Op::Write { off, len, seed } => {
                let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
                f.write(off, &data, 0, ev).unwrap();
                Vec::new()
            }
            Op::Deallocate { off, len } => {
                f.deallocate(off, len, 0, ev).unwrap();
                Vec::new()
            }
            Op::Read { off, len } => {
                let mut b = vec![0u8; len as usize];
                f.read(off, &mut b, 0, ev).unwrap();
                b
            }
            Op::Flush => {
                f.flush(0, ev).unwrap();
                Vec::new()
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

        #[test]
        fn staged_programs_leave_the_bytes_a_write_per_page_did(ops in prop::collection::vec(op(), 1..40)) {
            let (mut staged, mut direct) = (fresh(true), fresh(false));
            for op in &ops {
                let (mut a, mut b) = (Vec::new(), Vec::new());
                prop_assert_eq!(apply(&mut staged, op, &mut a), apply(&mut direct, op, &mut b));
                prop_assert_eq!(a, b, "events of {:?}", op);
                prop_assert_eq!(region(&**staged.medium.inner_for_test()), region(&**direct.medium.inner_for_test()));
            }
            prop_assert_eq!(staged.stats(), direct.stats());
            staged.check_invariants().map_err(TestCaseError::fail)?;
            // A power cycle (no flush): both recover the same FTL from the same bytes.
            let (ms, md) = (staged.into_medium(), direct.into_medium());
            prop_assert_eq!(region(&*ms), region(&*md));
            let mut s2 = Ftl::open(&cfg(), LOGICAL, ms).unwrap().0;
            let mut d2 = Ftl::open(&cfg(), LOGICAL, md).unwrap().0;
            let (mut a, mut b) = (vec![0u8; LOGICAL as usize], vec![0u8; LOGICAL as usize]);
            s2.read(0, &mut a, 0, &mut Vec::new()).unwrap();
            d2.read(0, &mut b, 0, &mut Vec::new()).unwrap();
            prop_assert!(a == b, "the namespaces differ after recovery");
            s2.check_invariants().map_err(TestCaseError::fail)?;
        }
    }
}
