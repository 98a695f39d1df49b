//! Format and mount. The superblock names the geometry (a store made for another one is
//! refused); the line table holds erase counts; everything else is rebuilt from the pages'
//! OOB records:
//!
//! 1. the newest copy of each map page (highest `covers`, then `seq`) becomes the GTD;
//! 2. the whole map is assembled from those pages (a scan at mount, like a controller's
//!    boot), and every data page written after its map page's `covers` is replayed in
//!    sequence order (the writes whose map update was still only in the cache);
//! 3. a page is valid if the map (data) or the GTD (map pages) points at it;
//! 4. lines with nothing programmed are free, the line holding the newest page continues
//!    as the frontier after its last programmed page, the others are full;
//! 5. map pages the replay changed are programmed, so the next mount starts from them.
//!
//! Deallocations write their map pages back before they complete (ftl.rs), so a replay
//! never resurrects deallocated data.

use std::collections::BTreeSet;

use crate::ftl::{Ftl, LineState};
use crate::geometry::NO_PPN;
use crate::oob::{Oob, OOB_BYTES};
use crate::FtlError;

const MAGIC: &[u8; 8] = b"HMBFTL01";

impl Ftl {
    /// Whether `medium` starts with an FTL superblock (of any geometry).
    pub fn is_formatted(medium: &dyn crate::Medium) -> Result<bool, FtlError> {
        let mut magic = [0u8; 8];
        match medium.read_at(0, &mut magic) {
            Ok(()) => Ok(&magic == MAGIC),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Mount what the region holds, or format it if it has no superblock (unless
    /// `may_format` is false: `FtlError::NotFormatted`). True: formatted.
    pub(crate) fn mount(&mut self, may_format: bool) -> Result<bool, FtlError> {
        let mut sb = [0u8; 64];
        self.medium.read_at(0, &mut sb)?;
        if &sb[..8] != MAGIC {
            if !may_format {
                return Err(FtlError::NotFormatted);
            }
            self.format()?;
            return Ok(true);
        }
        let want = self.geo.superblock();
        for (i, w) in want.iter().enumerate() {
            let at = 8 + i * 8;
            let got = u64::from_le_bytes(sb[at..at + 8].try_into().expect("8 bytes"));
            if got != *w {
                return Err(FtlError::Geometry(format!(
                    "superblock field {i} is {got}, this configuration needs {w}"
                )));
            }
        }
        self.recover()?;
        Ok(false)
    }

    fn format(&mut self) -> Result<(), FtlError> {
        self.medium
            .zero(self.geo.line_table_off, self.geo.data_off - self.geo.line_table_off)?;
        let mut sb = [0u8; 64];
        sb[..8].copy_from_slice(MAGIC);
        for (i, v) in self.geo.superblock().iter().enumerate() {
            sb[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        self.medium.write_at(0, &sb)?;
        self.medium.sync()?;
        Ok(())
    }

    fn recover(&mut self) -> Result<(), FtlError> {
        let geo = self.geo.clone();
        let mut counts = vec![0u8; geo.lines as usize * 4];
        self.medium.read_at(geo.line_table_off, &mut counts)?;
        for (l, c) in self.lines.iter_mut().zip(counts.chunks_exact(4)) {
            l.erase_count = u32::from_le_bytes(c.try_into().expect("4 bytes"));
        }
        self.lines_changed();
        // 1. Scan the OOB table.
        let mut data = Vec::new(); // (seq, lpn, ppn)
        let mut best_map: Vec<Option<(u64, u64, u32)>> = vec![None; geo.map_pages as usize]; // (covers, seq, ppn)
        let mut last_programmed: Vec<Option<u32>> = vec![None; geo.lines as usize];
        let mut newest: Option<(u64, u32)> = None; // (seq, line)
        let mut max_seq = self.seq;
        self.scan_oob(|ppn, rec| {
            let oob =
                Oob::decode(rec).ok_or_else(|| FtlError::Corrupt(format!("unreadable OOB record of page {ppn}")))?;
            {
                let seq = match oob {
                    Oob::Erased => return Ok(()),
                    Oob::Data { lpn, seq } => {
                        if u64::from(lpn) >= geo.logical_pages {
                            return Err(FtlError::Corrupt(format!("page {ppn} holds LPN {lpn} past the end")));
                        }
                        data.push((seq, lpn, ppn));
                        seq
                    }
                    Oob::Map { index, seq, covers } => {
                        let slot = best_map.get_mut(index as usize).ok_or_else(|| {
                            FtlError::Corrupt(format!("page {ppn} holds map page {index} past the end"))
                        })?;
                        if slot.is_none_or(|(c, s, _)| (covers, seq) > (c, s)) {
                            *slot = Some((covers, seq, ppn));
                        }
                        seq
                    }
                };
                let line = geo.line_of(ppn);
                let off = ppn % geo.line_pages;
                let lp = &mut last_programmed[line as usize];
                *lp = Some(lp.map_or(off, |o| o.max(off)));
                if newest.is_none_or(|(s, _)| seq > s) {
                    newest = Some((seq, line));
                }
                max_seq = max_seq.max(seq);
            }
            Ok(())
        })?;
        self.seq = max_seq;
        // 2. The map from the newest map pages, then the replay.
        let epm = geo.entries_per_map_page;
        let mut map = vec![NO_PPN; (geo.map_pages * epm) as usize];
        let mut page = vec![0u8; geo.page_bytes as usize];
        let mut covers = vec![0u64; geo.map_pages as usize];
        for (idx, best) in best_map.iter().enumerate() {
            if let Some((c, _, ppn)) = *best {
                self.gtd[idx] = ppn;
                covers[idx] = c;
                self.medium.read_at(geo.data_at(ppn), &mut page)?;
                for (i, e) in page.chunks_exact(4).enumerate() {
                    map[idx * epm as usize + i] = u32::from_le_bytes(e.try_into().expect("4 bytes"));
                }
            }
        }
        data.sort_unstable();
        let mut dirty = BTreeSet::new();
        for &(seq, lpn, ppn) in &data {
            let idx = lpn / epm;
            if seq > covers[idx as usize] {
                map[lpn as usize] = ppn;
                dirty.insert(idx);
            }
        }
        // 3. Validity.
        for &(_, lpn, ppn) in &data {
            if map[lpn as usize] == ppn {
                self.set_valid(ppn);
            }
        }
        for &ppn in &self.gtd.clone() {
            if ppn != NO_PPN {
                self.set_valid(ppn);
            }
        }
        // 4. Line states and the frontier.
        for (l, lp) in last_programmed.iter().enumerate() {
            self.lines[l].state = if lp.is_some() { LineState::Full } else { LineState::Free };
        }
        if let Some((_, line)) = newest {
            let next = last_programmed[line as usize].map_or(0, |o| o + 1);
            if next < geo.line_pages {
                self.lines[line as usize].state = LineState::Open;
                self.open = Some((line, next));
            }
        }
        self.lines_changed();
        // 5. Persist what the replay changed.
        let mut ev = Vec::new();
        for idx in dirty {
            let start = (idx * epm) as usize;
            for (i, e) in map[start..start + epm as usize].iter().enumerate() {
                page[i * 4..i * 4 + 4].copy_from_slice(&e.to_le_bytes());
            }
            let (ppn, _) = self.program(
                |seq| Oob::Map {
                    index: idx,
                    seq,
                    covers: seq,
                },
                &page,
                crate::Purpose::Map,
                0,
                &mut ev,
            )?;
            self.stats.map_page_writes += 1;
            let old = std::mem::replace(&mut self.gtd[idx as usize], ppn);
            if old != NO_PPN {
                self.invalidate(old);
            }
        }
        // Mount-time work is not a command's: its counters start from zero.
        self.stats = Default::default();
        Ok(())
    }
}

impl Ftl {
    /// Map page `idx` rebuilt from NAND alone: its newest copy, then every data page of its
    /// range programmed after that copy's `covers`, in sequence order (as at mount). For a
    /// cached page found changed while it held updates not yet written back.
    pub(crate) fn rebuild_map_page(&mut self, idx: u32, page: &mut [u8]) -> Result<(), FtlError> {
        self.rebuilt_map_page(idx, page)?;
        self.stats.map_page_rebuilds += 1;
        Ok(())
    }

    pub(crate) fn rebuilt_map_page(&self, idx: u32, page: &mut [u8]) -> Result<(), FtlError> {
        let geo = &self.geo;
        let ppn = self.gtd[idx as usize];
        let covers = if ppn == NO_PPN {
            page.fill(0xFF);
            0
        } else {
            self.medium.read_at(geo.data_at(ppn), page)?;
            match self.read_oob(ppn)? {
                Oob::Map { covers, .. } => covers,
                other => return Err(FtlError::Corrupt(format!("map page {idx} at {ppn} is {other:?}"))),
            }
        };
        let epm = geo.entries_per_map_page;
        let mut newer = Vec::new();
        self.scan_oob(|ppn, rec| {
            if let Some(Oob::Data { lpn, seq }) = Oob::decode(rec) {
                if lpn / epm == idx && seq > covers {
                    newer.push((seq, lpn, ppn));
                }
            }
            Ok(())
        })?;
        newer.sort_unstable();
        for (_, lpn, ppn) in newer {
            let at = (lpn % epm) as usize * 4;
            page[at..at + 4].copy_from_slice(&ppn.to_le_bytes());
        }
        Ok(())
    }

    /// Every physical page's raw OOB record, in PPN order, read in large chunks.
    fn scan_oob(&self, mut f: impl FnMut(u32, &[u8]) -> Result<(), FtlError>) -> Result<(), FtlError> {
        const PER_CHUNK: u32 = 1 << 14;
        let physical = self.geo.physical_pages() as u32;
        let mut buf = vec![0u8; PER_CHUNK as usize * OOB_BYTES];
        let mut first = 0u32;
        while first < physical {
            let n = PER_CHUNK.min(physical - first);
            let b = &mut buf[..n as usize * OOB_BYTES];
            self.medium.read_at(self.geo.oob_at(first), b)?;
            for (k, rec) in b.chunks_exact(OOB_BYTES).enumerate() {
                f(first + k as u32, rec)?;
            }
            first += n;
        }
        Ok(())
    }
}
