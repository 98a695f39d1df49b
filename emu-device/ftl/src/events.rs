//! What the FTL did, in order, with modelled times: the controller turns these into
//! observer events and trace records.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NandOpKind {
    Read,
    Program,
    Erase,
}

/// Why a NAND operation happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Purpose {
    /// The command's own data.
    Host,
    /// A map page read on a cache miss or written back.
    Map,
    /// Garbage collection (relocation and erase).
    Gc,
    /// Static wear levelling (relocation and erase).
    WearLevel,
}

/// One NAND operation on one die.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NandOp {
    pub kind: NandOpKind,
    pub purpose: Purpose,
    pub channel: u8,
    pub die: u8,
    pub block: u32,
    /// Page in the block (0 for an erase).
    pub page: u32,
    /// When its own work starts (controller clock, ns): at or after the request; it ends
    /// at `start_ns + latency_ns`, and one die's operations never overlap (timing.rs).
    pub start_ns: u64,
    /// Its own work: array time (tR, tPROG, tBERS) plus the channel transfer.
    pub latency_ns: u32,
    /// How long it waited for its die or channel (`start_ns` - request).
    pub wait_ns: u64,
    /// Erases of this block so far, this one included (0 for reads/programs).
    pub erase_count: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheEventKind {
    Hit,
    Miss,
    /// A map page loaded into a slot (after a miss).
    Fill,
    /// A dirty slot's map page programmed to NAND.
    WriteBack,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum FtlEvent {
    Nand(NandOp),
    /// A map-cache access: map page index, cache slot, the slot's byte offset in its store
    /// (the HMB offset when the cache lives in the HMB).
    MapCache {
        kind: CacheEventKind,
        map_page: u32,
        slot: u32,
        offset: u64,
    },
    GcStart {
        line: u32,
        valid: u32,
        time_ns: u64,
    },
    GcEnd {
        line: u32,
        moved: u32,
        time_ns: u64,
    },
    WearLevelMove {
        line: u32,
        erase_count: u32,
        moved: u32,
        time_ns: u64,
    },
    /// A cached map page whose checksum no longer matched (a host write into the cache):
    /// dropped and re-read from NAND (rebuilt from NAND when it held updates not yet
    /// written back). `found` is the checksum of what the slot holds now.
    MapCacheCorrupt {
        map_page: u32,
        slot: u32,
        offset: u64,
        found: u64,
        when: CorruptionFound,
    },
}

/// When a changed cache slot was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CorruptionFound {
    /// At a use of the slot, or when the controller let go of the HMB: written while the
    /// buffer was enabled.
    InUse,
    /// When the buffer came back with memory return: written while it was released.
    AtReturn,
}
