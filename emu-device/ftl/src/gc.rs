//! Garbage collection (greedy: the full line with the fewest valid pages), static wear
//! levelling (move the coldest full line once erase counts spread too far) and line erase.

use crate::events::{FtlEvent, NandOpKind, Purpose};
use crate::ftl::{Ftl, LineState};
use crate::oob::Oob;
use crate::FtlError;

/// What GC and wear levelling look at before a host page's write (`Ftl::line_census`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LineCensus {
    pub(crate) free: u32,
    /// The least-erased line (the first of equals); None without lines.
    pub(crate) coldest: Option<u32>,
    pub(crate) max_erase_count: u32,
}

impl Ftl {
    /// Before a host page is written: collect until more than `gc_free_lines` lines are
    /// free, then level wear.
    pub(crate) fn collect_garbage(&mut self, now: u64, ev: &mut Vec<FtlEvent>) -> Result<(), FtlError> {
        let mut runs = 0;
        let mut census = self.line_census();
        while census.free <= self.cfg.gc_free_lines {
            let Some(victim) = (0..self.geo.lines)
                .filter(|&l| self.lines[l as usize].state == LineState::Full)
                .min_by_key(|&l| self.lines[l as usize].valid)
            else {
                break;
            };
            let valid = self.lines[victim as usize].valid;
            if valid >= self.geo.line_pages || runs > self.geo.lines {
                // Nothing to gain: every full line is wholly valid (cannot happen with
                // over-provisioning unless the metadata is wrong).
                return Err(FtlError::NoSpace);
            }
            ev.push(FtlEvent::GcStart {
                line: victim,
                valid,
                time_ns: now,
            });
            let moved = self.relocate(victim, Purpose::Gc, now, ev)?;
            self.stats.gc_runs += 1;
            self.stats.gc_pages_moved += u64::from(moved);
            ev.push(FtlEvent::GcEnd {
                line: victim,
                moved,
                time_ns: now,
            });
            runs += 1;
            census = self.line_census();
        }
        self.level_wear(census, now, ev)
    }

    /// The free lines, the least-erased line and the highest erase count. Every host
    /// page's write asks (it was four passes over the lines per page); they change only
    /// when a line opens, fills or is erased (`lines_changed`), so they are counted again
    /// only then.
    fn line_census(&mut self) -> LineCensus {
        if let Some(c) = self.census {
            debug_assert_eq!(c, self.count_lines(), "a line changed without lines_changed()");
            return c;
        }
        let c = self.count_lines();
        self.census = Some(c);
        c
    }

    /// A line's state or erase count changed: `line_census` counts again.
    pub(crate) fn lines_changed(&mut self) {
        self.census = None;
    }

    /// `line_census` in one pass over the lines (also `stats`, which takes `&self`).
    pub(crate) fn count_lines(&self) -> LineCensus {
        let mut c = LineCensus {
            free: 0,
            coldest: None,
            max_erase_count: 0,
        };
        let mut min = u32::MAX;
        for (l, line) in self.lines.iter().enumerate() {
            if line.state == LineState::Free {
                c.free += 1;
            }
            // The first of equally erased lines, as `min_by_key` had it.
            if c.coldest.is_none() || line.erase_count < min {
                (c.coldest, min) = (Some(l as u32), line.erase_count);
            }
            c.max_erase_count = c.max_erase_count.max(line.erase_count);
        }
        c
    }

    /// Static wear levelling: once max - min erase count exceeds the threshold and the
    /// least-erased line is full (cold data sitting on it), move its pages and erase it so
    /// it joins the free pool, where allocation (least erased first) takes it next.
    /// `census`: the lines as they are now (`line_census`).
    fn level_wear(&mut self, census: LineCensus, now: u64, ev: &mut Vec<FtlEvent>) -> Result<(), FtlError> {
        if census.free <= self.cfg.gc_free_lines {
            return Ok(());
        }
        let Some(cold) = census.coldest else {
            return Ok(());
        };
        let min = self.lines[cold as usize].erase_count;
        let max = census.max_erase_count;
        if max - min <= self.cfg.wl_threshold || self.lines[cold as usize].state != LineState::Full {
            return Ok(());
        }
        let moved = self.relocate(cold, Purpose::WearLevel, now, ev)?;
        self.stats.wear_level_moves += 1;
        self.stats.wear_level_pages_moved += u64::from(moved);
        ev.push(FtlEvent::WearLevelMove {
            line: cold,
            erase_count: self.lines[cold as usize].erase_count,
            moved,
            time_ns: now,
        });
        Ok(())
    }

    /// Move every valid page of `line` to the frontier, then erase it. Returns the pages
    /// moved.
    pub(crate) fn relocate(
        &mut self,
        line: u32,
        purpose: Purpose,
        now: u64,
        ev: &mut Vec<FtlEvent>,
    ) -> Result<u32, FtlError> {
        let mut page = vec![0u8; self.geo.page_bytes as usize];
        let mut moved = 0;
        // Data pages in LPN order, so each map page is loaded once per line however small
        // the cache (in page order a small cache would miss and write back per page, and
        // GC would program more than it frees).
        let mut pages = Vec::new();
        for off in 0..self.geo.line_pages {
            let ppn = line * self.geo.line_pages + off;
            if self.is_valid(ppn) {
                let key = match self.read_oob(ppn)? {
                    Oob::Data { lpn, .. } => u64::from(lpn),
                    _ => 0,
                };
                pages.push((key, ppn));
            }
        }
        pages.sort_unstable();
        for (_, ppn) in pages {
            // A map write-back during this loop may have invalidated a later page.
            if !self.is_valid(ppn) {
                continue;
            }
            let oob = self.read_oob(ppn)?;
            let t = self.nand_read(ppn, &mut page, purpose, now, ev)?;
            match oob {
                Oob::Data { lpn, .. } => {
                    let entry = self.map_prepare(lpn, t, ev)?;
                    if entry.old != ppn {
                        return Err(FtlError::Corrupt(format!(
                            "valid page {ppn} holds LPN {lpn}, which maps to {}",
                            entry.old
                        )));
                    }
                    let (new, _) = self.program(|seq| Oob::Data { lpn, seq }, &page, purpose, t, ev)?;
                    self.map_commit(entry, new)?;
                }
                Oob::Map { index, covers, .. } => {
                    let (new, _) = self.program(|seq| Oob::Map { index, seq, covers }, &page, purpose, t, ev)?;
                    self.gtd[index as usize] = new;
                }
                Oob::Erased => {
                    return Err(FtlError::Corrupt(format!("valid page {ppn} is erased")));
                }
            }
            self.invalidate(ppn);
            moved += 1;
        }
        self.erase_line(line, purpose, now, ev)?;
        Ok(moved)
    }

    /// Erase every block of `line`: its OOB records cleared, its erase count incremented
    /// and persisted, the line free.
    fn erase_line(&mut self, line: u32, purpose: Purpose, now: u64, ev: &mut Vec<FtlEvent>) -> Result<(), FtlError> {
        if self.lines[line as usize].valid != 0 {
            return Err(FtlError::Corrupt(format!("erasing line {line} with valid pages")));
        }
        let first = line * self.geo.line_pages;
        let zeros = vec![0u8; self.geo.line_pages as usize * crate::oob::OOB_BYTES];
        self.medium.write_at(self.geo.oob_at(first), &zeros)?;
        let count = self.lines[line as usize].erase_count + 1;
        self.medium
            .write_at(self.geo.line_table_off + u64::from(line) * 4, &count.to_le_bytes())?;
        self.lines[line as usize].erase_count = count;
        self.lines[line as usize].state = LineState::Free;
        self.lines_changed();
        for d in 0..self.geo.dies {
            let op = self
                .clock
                .run(NandOpKind::Erase, purpose, self.geo.die_place(line, d), now, count);
            ev.push(FtlEvent::Nand(op));
        }
        self.stats.nand_erases += u64::from(self.geo.dies);
        Ok(())
    }
}
