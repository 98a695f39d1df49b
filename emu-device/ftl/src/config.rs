//! What the FTL is built from: NAND geometry, over-provisioning, GC and wear-levelling
//! thresholds, the internal map cache's size and the NAND timings.

use crate::FtlError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FtlConfig {
    pub channels: u8,
    pub dies_per_channel: u8,
    /// NAND page = mapping unit (4 KiB: what DRAM-less SSDs map). A map page holds
    /// `page_bytes / 4` entries.
    pub page_bytes: u32,
    /// Pages per block at most: smaller namespaces get smaller blocks so that there are at
    /// least `MIN_DATA_LINES` lines to collect (geometry.rs).
    pub pages_per_block: u32,
    /// Over-provisioning: physical data pages beyond the logical ones, per mille.
    pub op_permille: u32,
    /// Garbage collection runs before a host write while this many lines or fewer are free.
    pub gc_free_lines: u32,
    /// Static wear levelling moves the coldest full line once the spread of erase counts
    /// (max - min) exceeds this.
    pub wl_threshold: u32,
    /// Map pages the internal cache (controller SRAM) holds when no HMB is given.
    pub map_cache_pages: u32,
    /// NAND page sense (tR), program (tPROG) and block erase (tBERS) times on a die.
    pub read_ns: u32,
    pub program_ns: u32,
    pub erase_ns: u32,
    /// One page over a channel, either way (4 KiB at ~800 MB/s: ONFI 4 / Toggle 4).
    pub transfer_ns: u32,
    /// A map-cache lookup in a slot in the HMB: a PCIe read round trip to host memory.
    /// A slot in controller SRAM costs nothing the model counts.
    pub hmb_access_ns: u32,
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            channels: 8,
            dies_per_channel: 4,
            page_bytes: 4096,
            pages_per_block: 64,
            op_permille: 125,
            gc_free_lines: 2,
            wl_threshold: 8,
            map_cache_pages: 4,
            read_ns: 50_000,
            program_ns: 600_000,
            erase_ns: 3_000_000,
            transfer_ns: 5_000,
            hmb_access_ns: 1_000,
        }
    }
}

impl FtlConfig {
    pub fn validate(&self) -> Result<(), FtlError> {
        let bad = |m: String| Err(FtlError::Config(m));
        if self.channels == 0 || self.dies_per_channel == 0 || self.pages_per_block == 0 {
            return bad("channels, dies per channel and pages per block must be non-zero".into());
        }
        if !(4096..=65536).contains(&self.page_bytes) || !self.page_bytes.is_power_of_two() {
            return bad(format!(
                "NAND page {} is not a power of two in 4096..=65536",
                self.page_bytes
            ));
        }
        if self.op_permille == 0 || self.op_permille > 1000 {
            return bad(format!(
                "over-provisioning {} per mille not in 1..=1000",
                self.op_permille
            ));
        }
        if self.gc_free_lines == 0 {
            return bad("gc_free_lines must be at least 1 (GC needs a free line to write into)".into());
        }
        if self.map_cache_pages == 0 {
            return bad("the map cache needs at least one page".into());
        }
        Ok(())
    }
}
