//! The FTL's invariants, checked from its state and the medium (property tests, and a
//! debugging aid: `Ftl::check_invariants`).

use crate::ftl::{Ftl, LineState};
use crate::geometry::NO_PPN;
use crate::oob::Oob;

impl Ftl {
    /// Every invariant of the mapping and the lines; the first violation as text.
    /// - each line's valid count equals its valid bits; a free line has no valid page and
    ///   no programmed page (no block both free and in use); the frontier is the one open line;
    /// - every mapped logical page points at a valid page whose OOB names it, every map
    ///   page's GTD entry at a valid map page of that index, and nothing else is valid;
    /// - erase counts spread at most `wl_threshold + 2` (static wear levelling's bound).
    pub fn check_invariants(&self) -> Result<(), String> {
        let g = &self.geo;
        let mut valid_total = 0u64;
        for (l, line) in self.lines.iter().enumerate() {
            let first = l as u32 * g.line_pages;
            let bits = (first..first + g.line_pages).filter(|&p| self.is_valid(p)).count() as u32;
            if bits != line.valid {
                return Err(format!("line {l}: valid count {} but {bits} valid pages", line.valid));
            }
            valid_total += u64::from(bits);
            let open = self.open.is_some_and(|(o, _)| o == l as u32);
            if open != (line.state == LineState::Open) {
                return Err(format!("line {l}: state {:?}, frontier {:?}", line.state, self.open));
            }
            if line.state == LineState::Free {
                for p in first..first + g.line_pages {
                    match self.read_oob(p) {
                        Ok(Oob::Erased) => {}
                        other => return Err(format!("free line {l}: page {p} is {other:?}")),
                    }
                }
            }
        }
        let mut expected = 0u64;
        for idx in 0..g.map_pages {
            let gppn = self.gtd[idx as usize];
            if gppn != NO_PPN {
                expected += 1;
                match self.read_oob(gppn) {
                    Ok(Oob::Map { index, .. }) if index == idx && self.is_valid(gppn) => {}
                    other => return Err(format!("map page {idx} at {gppn}: {other:?}")),
                }
            }
            let entries = self.peek_map_page(idx).map_err(|e| e.to_string())?;
            for (i, &ppn) in entries.iter().enumerate() {
                let lpn = idx * g.entries_per_map_page + i as u32;
                if ppn == NO_PPN {
                    continue;
                }
                if u64::from(lpn) >= g.logical_pages || u64::from(ppn) >= g.physical_pages() {
                    return Err(format!("LPN {lpn} maps to {ppn} outside the device"));
                }
                expected += 1;
                match self.read_oob(ppn) {
                    Ok(Oob::Data { lpn: l, .. }) if l == lpn && self.is_valid(ppn) => {}
                    other => {
                        return Err(format!(
                            "LPN {lpn} maps to page {ppn} (valid {}): {other:?}",
                            self.is_valid(ppn)
                        ))
                    }
                }
            }
        }
        if expected != valid_total {
            return Err(format!("{valid_total} valid pages, {expected} referenced"));
        }
        let min = self.lines.iter().map(|l| l.erase_count).min().unwrap_or(0);
        let max = self.lines.iter().map(|l| l.erase_count).max().unwrap_or(0);
        if max - min > self.cfg.wl_threshold + 2 {
            return Err(format!("erase counts spread {min}..{max}"));
        }
        Ok(())
    }
}
