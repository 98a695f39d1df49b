//! Where everything is: physical page numbers, lines (superblocks: the same block on every
//! die), and the FTL's region of the backing store.
//!
//! A physical page number (PPN) is line-major and striped over dies, channel first:
//! `ppn = line * line_pages + page_in_block * dies + die_index`, `channel = die_index %
//! channels`, `die = die_index / channels`, block = line. So consecutive writes of the log
//! land on consecutive channels, then dies, and a line is erased as a whole.
//!
//! Region layout (offsets from the region's start, each part 4 KiB aligned):
//! superblock (4 KiB) | line table (u32 erase count per line) | OOB table (24 bytes per
//! physical page, oob.rs) | page data (`page_bytes` per physical page).

use serde::Serialize;

use crate::{FtlConfig, FtlError};

/// Lines GC can choose from at least: with fewer, one full victim is a large part of the
/// device and greedy GC has no choice.
const MIN_DATA_LINES: u64 = 16;
pub(crate) const NO_PPN: u32 = u32::MAX;
const ALIGN: u64 = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub page_bytes: u64,
    pub channels: u32,
    pub dies: u32,
    pub pages_per_block: u32,
    pub line_pages: u32,
    pub lines: u32,
    pub logical_pages: u64,
    pub entries_per_map_page: u32,
    pub map_pages: u32,
    pub line_table_off: u64,
    pub oob_off: u64,
    pub data_off: u64,
    pub region_bytes: u64,
}

/// The geometry as the report shows it.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct GeometryReport {
    pub channels: u32,
    pub dies_per_channel: u32,
    pub page_bytes: u64,
    pub pages_per_block: u32,
    pub lines: u32,
    pub logical_pages: u64,
    pub physical_pages: u64,
    pub map_pages: u32,
    /// (physical - logical) / logical, per mille: what GC really has to work with.
    pub effective_op_permille: u64,
    pub region_bytes: u64,
}

impl Geometry {
    pub fn new(cfg: &FtlConfig, logical_bytes: u64) -> Result<Self, FtlError> {
        cfg.validate()?;
        let page_bytes = u64::from(cfg.page_bytes);
        let logical_pages = logical_bytes.div_ceil(page_bytes);
        if logical_pages == 0 {
            return Err(FtlError::Config("empty logical space".into()));
        }
        let entries_per_map_page = cfg.page_bytes / 4;
        let map_pages = u32::try_from(logical_pages.div_ceil(u64::from(entries_per_map_page)))
            .map_err(|_| FtlError::Config("logical space too large".into()))?;
        let channels = u32::from(cfg.channels);
        let dies = channels * u32::from(cfg.dies_per_channel);
        // Data pages GC works inside: the logical pages, their over-provisioning, and the
        // live map pages.
        let op_pages = (logical_pages * u64::from(cfg.op_permille)).div_ceil(1000);
        let needed = logical_pages + op_pages.max(1) + u64::from(map_pages);
        let mut ppb = cfg.pages_per_block;
        while ppb > 1 && needed.div_ceil(u64::from(dies * ppb)) < MIN_DATA_LINES {
            ppb /= 2;
        }
        let line_pages = dies * ppb;
        // + the GC reserve and the open line.
        let lines = needed.div_ceil(u64::from(line_pages)) + u64::from(cfg.gc_free_lines) + 1;
        let physical = lines * u64::from(line_pages);
        if physical >= u64::from(NO_PPN) {
            return Err(FtlError::Config("too many physical pages for 32-bit PPNs".into()));
        }
        let lines = lines as u32;
        let align = |x: u64| x.div_ceil(ALIGN) * ALIGN;
        let line_table_off = ALIGN;
        let oob_off = line_table_off + align(u64::from(lines) * 4);
        let data_off = oob_off + align(physical * crate::oob::OOB_BYTES as u64);
        let region_bytes = data_off + physical * page_bytes;
        Ok(Geometry {
            page_bytes,
            channels,
            dies,
            pages_per_block: ppb,
            line_pages,
            lines,
            logical_pages,
            entries_per_map_page,
            map_pages,
            line_table_off,
            oob_off,
            data_off,
            region_bytes,
        })
    }

    pub fn physical_pages(&self) -> u64 {
        u64::from(self.lines) * u64::from(self.line_pages)
    }

    pub fn line_of(&self, ppn: u32) -> u32 {
        ppn / self.line_pages
    }

    /// (die index, channel, die in channel, block, page in block) of a PPN.
    pub fn place(&self, ppn: u32) -> Place {
        let line = ppn / self.line_pages;
        let off = ppn % self.line_pages;
        let die_index = off % self.dies;
        Place {
            die_index,
            channel: (die_index % self.channels) as u8,
            die: (die_index / self.channels) as u8,
            block: line,
            page: off / self.dies,
        }
    }

    /// The die index of a line's blocks, in order, for its erase.
    pub fn die_place(&self, line: u32, die_index: u32) -> Place {
        Place {
            die_index,
            channel: (die_index % self.channels) as u8,
            die: (die_index / self.channels) as u8,
            block: line,
            page: 0,
        }
    }

    pub fn data_at(&self, ppn: u32) -> u64 {
        self.data_off + u64::from(ppn) * self.page_bytes
    }

    pub fn oob_at(&self, ppn: u32) -> u64 {
        self.oob_off + u64::from(ppn) * crate::oob::OOB_BYTES as u64
    }

    pub fn report(&self) -> GeometryReport {
        let physical = self.physical_pages();
        GeometryReport {
            channels: self.channels,
            dies_per_channel: self.dies / self.channels,
            page_bytes: self.page_bytes,
            pages_per_block: self.pages_per_block,
            lines: self.lines,
            logical_pages: self.logical_pages,
            physical_pages: physical,
            map_pages: self.map_pages,
            effective_op_permille: (physical - self.logical_pages) * 1000 / self.logical_pages,
            region_bytes: self.region_bytes,
        }
    }

    /// The superblock's fields: a store made for another geometry is refused, not misread.
    pub fn superblock(&self) -> [u64; 6] {
        [
            self.page_bytes,
            u64::from(self.channels),
            u64::from(self.dies),
            u64::from(self.pages_per_block),
            u64::from(self.lines),
            self.logical_pages,
        ]
    }
}

/// One page's part of a byte range: page `index`, from byte `in_page` of it, for `n`
/// bytes, at byte `at` of the range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageSpan {
    pub index: u64,
    pub in_page: usize,
    pub at: usize,
    pub n: usize,
}

/// The pages of `page_bytes` that [off, off+len) touches, in order.
pub(crate) fn page_spans(page_bytes: u64, off: u64, len: usize) -> impl Iterator<Item = PageSpan> {
    let mut at = 0usize;
    std::iter::from_fn(move || {
        if at >= len {
            return None;
        }
        let pos = off + at as u64;
        let in_page = (pos % page_bytes) as usize;
        let n = (page_bytes as usize - in_page).min(len - at);
        let span = PageSpan {
            index: pos / page_bytes,
            in_page,
            at,
            n,
        };
        at += n;
        Some(span)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Place {
    pub die_index: u32,
    pub channel: u8,
    pub die: u8,
    pub block: u32,
    pub page: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_namespaces_get_small_blocks_and_enough_lines() {
        let g = Geometry::new(&FtlConfig::default(), 8 << 20).unwrap();
        assert!(g.lines as u64 >= MIN_DATA_LINES);
        assert!(g.physical_pages() > g.logical_pages + u64::from(g.map_pages));
        let g = Geometry::new(&FtlConfig::default(), 4 << 30).unwrap();
        assert_eq!(g.pages_per_block, 64);
    }

    #[test]
    fn page_spans_split_a_range_at_page_boundaries() {
        let spans: Vec<_> = page_spans(4096, 4000, 5000)
            .map(|s| (s.index, s.in_page, s.at, s.n))
            .collect();
        assert_eq!(spans, [(0, 4000, 0, 96), (1, 0, 96, 4096), (2, 0, 4192, 808)]);
        assert_eq!(page_spans(4096, 0, 0).count(), 0);
    }

    #[test]
    fn consecutive_pages_stripe_over_channels_then_dies() {
        let g = Geometry::new(&FtlConfig::default(), 64 << 20).unwrap();
        let p: Vec<_> = (0..10).map(|n| g.place(n)).collect();
        assert_eq!((p[0].channel, p[0].die, p[0].page), (0, 0, 0));
        assert_eq!((p[1].channel, p[1].die), (1, 0));
        assert_eq!((p[8].channel, p[8].die), (0, 1));
        let last = g.place(g.dies);
        assert_eq!((last.channel, last.die, last.page, last.block), (0, 0, 1, 0));
        assert_eq!(g.place(g.line_pages).block, 1);
    }
}
