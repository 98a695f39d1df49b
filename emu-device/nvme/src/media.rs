//! A small NAND media model, so the events of one command tell a causally consistent
//! story: fetch, then page reads/programs (and the erases they need) on the dies the LBAs
//! map to, each starting when its die is free, then the completion.
//!
//! Mapping (static, so reads and programs of an LBA hit the same die): media page
//! p = byte offset / page_bytes; channel = p % channels; die = (p / channels) % dies;
//! the die's page index q = p / (channels * dies) gives block = q / pages_per_block and
//! page = q % pages_per_block. Programming a page already programmed since its block's
//! last erase first erases the block (in-place update, no FTL: kept small on purpose).
//! Times are virtual, on the controller's clock; the data path itself is not delayed.

use serde::Serialize;

use crate::Error;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaConfig {
    pub channels: u8,
    pub dies_per_channel: u8,
    pub page_bytes: u32,
    pub pages_per_block: u32,
    pub read_ns: u32,
    pub program_ns: u32,
    pub erase_ns: u32,
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            channels: 8,
            dies_per_channel: 4,
            page_bytes: 16384,
            pages_per_block: 256,
            read_ns: 50_000,
            program_ns: 600_000,
            erase_ns: 3_000_000,
        }
    }
}

impl MediaConfig {
    pub(crate) fn validate(&self) -> Result<(), Error> {
        if self.channels == 0 || self.dies_per_channel == 0 || self.pages_per_block == 0 {
            return Err(Error::Config(
                "media: channels, dies and pages per block must be non-zero".into(),
            ));
        }
        if self.page_bytes < 512 || !self.page_bytes.is_power_of_two() {
            return Err(Error::Config(format!(
                "media page {} is not a power of two >= 512",
                self.page_bytes
            )));
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaOpKind {
    Read,
    Program,
    Erase,
}

/// One NAND operation on one die.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct MediaOp {
    pub kind: MediaOpKind,
    pub channel: u8,
    pub die: u8,
    pub plane: u8,
    pub block: u32,
    pub page: u32,
    /// When the die starts it (controller clock, ns): at or after the command's fetch.
    pub start_ns: u64,
    pub latency_ns: u32,
    /// How long it waited for its die (die contention).
    pub wait_ns: u64,
    /// Erases of this block so far, this one included (0 for reads/programs).
    pub erase_count: u32,
}

pub(crate) struct MediaModel {
    cfg: MediaConfig,
    busy_until: Vec<u64>,
    /// One bit per media page: programmed since its block's last erase.
    programmed: Vec<u64>,
    erase_counts: std::collections::HashMap<(u32, u32), u32>,
    pub(crate) ops: u64,
}

impl MediaModel {
    pub fn new(cfg: MediaConfig, namespace_bytes: u64) -> Self {
        let dies = usize::from(cfg.channels) * usize::from(cfg.dies_per_channel);
        let pages = namespace_bytes.div_ceil(u64::from(cfg.page_bytes)) as usize;
        MediaModel {
            cfg,
            busy_until: vec![0; dies],
            programmed: vec![0; pages.div_ceil(64)],
            erase_counts: Default::default(),
            ops: 0,
        }
    }

    /// Model the pages of byte range [off, off+len); append the operations to `out` and
    /// return the time the last one ends (`now` when there is nothing to do).
    pub fn service(&mut self, write: bool, off: u64, len: u64, now: u64, out: &mut Vec<MediaOp>) -> u64 {
        if len == 0 {
            return now;
        }
        let pb = u64::from(self.cfg.page_bytes);
        let (first, last) = (off / pb, (off + len - 1) / pb);
        let mut done = now;
        for p in first..=last {
            let ch = p % u64::from(self.cfg.channels);
            let die = (p / u64::from(self.cfg.channels)) % u64::from(self.cfg.dies_per_channel);
            let dies_total = u64::from(self.cfg.channels) * u64::from(self.cfg.dies_per_channel);
            let q = p / dies_total;
            let block = (q / u64::from(self.cfg.pages_per_block)) as u32;
            let page = (q % u64::from(self.cfg.pages_per_block)) as u32;
            let die_index = (ch * u64::from(self.cfg.dies_per_channel) + die) as usize;
            let at = |kind, erase_count| (kind, erase_count);
            let mut steps = Vec::with_capacity(2);
            if write {
                if self.is_programmed(p) {
                    let key = (die_index as u32, block);
                    let count = self.erase_counts.entry(key).or_insert(0);
                    *count += 1;
                    steps.push(at(MediaOpKind::Erase, *count));
                    self.clear_block(p, q, dies_total);
                }
                steps.push(at(MediaOpKind::Program, 0));
                self.set_programmed(p);
            } else {
                steps.push(at(MediaOpKind::Read, 0));
            }
            for (kind, erase_count) in steps {
                let latency = match kind {
                    MediaOpKind::Read => self.cfg.read_ns,
                    MediaOpKind::Program => self.cfg.program_ns,
                    MediaOpKind::Erase => self.cfg.erase_ns,
                };
                let start = now.max(self.busy_until[die_index]);
                let end = start + u64::from(latency);
                self.busy_until[die_index] = end;
                done = done.max(end);
                self.ops += 1;
                out.push(MediaOp {
                    kind,
                    channel: ch as u8,
                    die: die as u8,
                    plane: 0,
                    block,
                    page: if kind == MediaOpKind::Erase { 0 } else { page },
                    start_ns: start,
                    latency_ns: latency,
                    wait_ns: start - now,
                    erase_count,
                });
            }
        }
        done
    }

    fn is_programmed(&self, p: u64) -> bool {
        self.programmed
            .get((p / 64) as usize)
            .is_some_and(|w| w & (1 << (p % 64)) != 0)
    }

    fn set_programmed(&mut self, p: u64) {
        if let Some(w) = self.programmed.get_mut((p / 64) as usize) {
            *w |= 1 << (p % 64);
        }
    }

    /// Forget the programmed bits of every page of the block holding media page p.
    fn clear_block(&mut self, p: u64, q: u64, dies_total: u64) {
        let ppb = u64::from(self.cfg.pages_per_block);
        let die_slot = p % dies_total;
        let first_q = q - q % ppb;
        for qq in first_q..first_q + ppb {
            let pp = qq * dies_total + die_slot;
            if let Some(w) = self.programmed.get_mut((pp / 64) as usize) {
                *w &= !(1 << (pp % 64));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_spread_over_channels_and_contend_on_one_die() {
        let mut m = MediaModel::new(MediaConfig::default(), 64 << 20);
        let mut ops = Vec::new();
        // Two pages on channels 0 and 1: both start at once.
        let done = m.service(false, 0, 32768, 1000, &mut ops);
        assert_eq!((ops[0].channel, ops[1].channel), (0, 1));
        assert_eq!((ops[0].start_ns, ops[1].start_ns), (1000, 1000));
        assert_eq!(done, 51_000);
        // The same page again at t=2000 waits for its die.
        ops.clear();
        m.service(false, 0, 512, 2000, &mut ops);
        assert_eq!(ops[0].start_ns, 51_000);
        assert_eq!(ops[0].wait_ns, 49_000);
    }

    #[test]
    fn rewriting_a_page_erases_its_block_first() {
        let mut m = MediaModel::new(MediaConfig::default(), 64 << 20);
        let mut ops = Vec::new();
        m.service(true, 0, 512, 0, &mut ops);
        assert_eq!(
            ops.iter().map(|o| o.kind).collect::<Vec<_>>(),
            vec![MediaOpKind::Program]
        );
        ops.clear();
        let done = m.service(true, 0, 512, 0, &mut ops);
        assert_eq!(
            ops.iter().map(|o| o.kind).collect::<Vec<_>>(),
            vec![MediaOpKind::Erase, MediaOpKind::Program]
        );
        assert_eq!(ops[0].erase_count, 1);
        // Erase waits for the first program, the program for the erase.
        assert_eq!(ops[0].start_ns, 600_000);
        assert_eq!(ops[1].start_ns, 3_600_000);
        assert_eq!(done, 4_200_000);
    }
}
