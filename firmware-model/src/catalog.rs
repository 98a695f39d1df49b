//! The opcode catalog: every record the model emits, with its payload
//! layout. `docs/firmware-model.md` is generated from the same facts and
//! the analyzer reads [`catalog_json`]. All fields are little-endian.

use serde::Serialize;

/// One payload field.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct FieldInfo {
    pub name: &'static str,
    pub offset: u16,
    /// "u8", "u16", "u32" or "u64", little-endian.
    #[serde(rename = "type")]
    pub ty: &'static str,
}

/// One opcode.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct OpcodeInfo {
    pub opcode: u16,
    pub name: &'static str,
    /// Workload that emits it: "ssd", "npu" or "sizes", or "nvme" (the NVMe controller).
    pub workload: &'static str,
    /// Fixed payload length in bytes; `None` for variable (sizes).
    pub payload_len: Option<u16>,
    /// Meaning of the record header's `source` field.
    pub source: &'static str,
    pub fields: &'static [FieldInfo],
    pub about: &'static str,
}

const fn f(name: &'static str, offset: u16, ty: &'static str) -> FieldInfo {
    FieldInfo { name, offset, ty }
}

pub const OP_CMD_FETCH: u16 = 0x0101;
pub const OP_CMD_COMPLETE: u16 = 0x0102;
pub const OP_FTL_MAP_HIT: u16 = 0x0201;
pub const OP_FTL_MAP_MISS: u16 = 0x0202;
pub const OP_NAND_READ: u16 = 0x0301;
pub const OP_NAND_PROGRAM: u16 = 0x0302;
pub const OP_NAND_ERASE: u16 = 0x0303;
pub const OP_GC_START: u16 = 0x0401;
pub const OP_GC_END: u16 = 0x0402;
pub const OP_WEAR_LEVEL: u16 = 0x0501;
pub const OP_WEAR_LEVEL_END: u16 = 0x0502;
/// NPU opcodes are `OP_NPU_BASE + event_type_id` (1..=5, pccx ids).
pub const OP_NPU_BASE: u16 = 0x0600;
pub const OP_NPU_MAC_COMPUTE: u16 = OP_NPU_BASE + 1;
pub const OP_NPU_DMA_READ: u16 = OP_NPU_BASE + 2;
pub const OP_NPU_DMA_WRITE: u16 = OP_NPU_BASE + 3;
pub const OP_NPU_SYSTOLIC_STALL: u16 = OP_NPU_BASE + 4;
pub const OP_NPU_BARRIER_SYNC: u16 = OP_NPU_BASE + 5;
pub const OP_SIZES_FILL: u16 = 0x0F01;
/// The NVMe controller's FTL (emu-device/ftl, issue 27): what a real command caused, or
/// background work. Every payload starts with qid u16, cid u16, flags u8 (bit 0:
/// background, qid = cid = 0xFFFF).
pub const OP_L2P_HIT: u16 = 0x0701;
pub const OP_L2P_MISS: u16 = 0x0702;
pub const OP_L2P_FILL: u16 = 0x0703;
pub const OP_L2P_WRITE_BACK: u16 = 0x0704;
pub const OP_L2P_CORRUPT: u16 = 0x0705;
pub const OP_FLASH_READ: u16 = 0x0711;
pub const OP_FLASH_PROGRAM: u16 = 0x0712;
pub const OP_FLASH_ERASE: u16 = 0x0713;
pub const OP_FTL_GC_START: u16 = 0x0721;
pub const OP_FTL_GC_END: u16 = 0x0722;
pub const OP_FTL_WEAR_LEVEL: u16 = 0x0723;

const CMD_FETCH: &[FieldInfo] = &[
    f("qid", 0, "u16"),
    f("cid", 2, "u16"),
    f("nvme_opcode", 4, "u8"),
    f("nsid", 8, "u32"),
    f("nlb", 12, "u32"),
    f("slba", 16, "u64"),
];
const CMD_COMPLETE: &[FieldInfo] = &[
    f("qid", 0, "u16"),
    f("cid", 2, "u16"),
    f("status", 4, "u16"),
    f("latency_ns", 8, "u32"),
];
const MAP_HIT: &[FieldInfo] = &[f("lba", 0, "u64"), f("ppa", 8, "u64")];
const MAP_MISS: &[FieldInfo] = &[f("lba", 0, "u64"), f("ppa", 8, "u64"), f("fetch_ns", 16, "u32")];
const NAND_RW: &[FieldInfo] = &[
    f("channel", 0, "u8"),
    f("die", 1, "u8"),
    f("plane", 2, "u8"),
    f("block", 4, "u32"),
    f("page", 8, "u32"),
    f("latency_ns", 12, "u32"),
];
const NAND_ERASE: &[FieldInfo] = &[
    f("channel", 0, "u8"),
    f("die", 1, "u8"),
    f("plane", 2, "u8"),
    f("block", 4, "u32"),
    f("erase_count", 8, "u32"),
    f("latency_ns", 12, "u32"),
];
const GC_START: &[FieldInfo] = &[
    f("victim_block", 0, "u32"),
    f("valid_pages", 4, "u32"),
    f("free_blocks", 8, "u32"),
];
const GC_END: &[FieldInfo] = &[
    f("victim_block", 0, "u32"),
    f("moved_pages", 4, "u32"),
    f("duration_ns", 8, "u32"),
    f("free_blocks", 12, "u32"),
];
const WEAR_LEVEL: &[FieldInfo] = &[
    f("src_block", 0, "u32"),
    f("dst_block", 4, "u32"),
    f("src_erase_count", 8, "u32"),
    f("dst_erase_count", 12, "u32"),
];
const WEAR_LEVEL_END: &[FieldInfo] = &[
    f("src_block", 0, "u32"),
    f("dst_block", 4, "u32"),
    f("moved_pages", 8, "u32"),
    f("duration_ns", 12, "u32"),
];
/// Map-cache events: flags bit 1 = the cache is in the HMB (then `hmb_offset` is the
/// slot's HMB offset), bit 2 (L2P_CORRUPT only) = found when the HMB came back (MR=1).
const L2P: &[FieldInfo] = &[
    f("qid", 0, "u16"),
    f("cid", 2, "u16"),
    f("flags", 4, "u8"),
    f("map_page", 8, "u32"),
    f("slot", 12, "u32"),
    f("hmb_offset", 16, "u64"),
];
/// NAND operations: purpose 0 host data, 1 map page, 2 GC, 3 wear levelling; `start_ns`
/// is the modelled start after the record's timestamp (the command's fetch).
const FLASH: &[FieldInfo] = &[
    f("qid", 0, "u16"),
    f("cid", 2, "u16"),
    f("flags", 4, "u8"),
    f("purpose", 5, "u8"),
    f("channel", 6, "u8"),
    f("die", 7, "u8"),
    f("block", 8, "u32"),
    f("page", 12, "u32"),
    f("start_ns", 16, "u32"),
    f("latency_ns", 20, "u32"),
    f("wait_ns", 24, "u32"),
    f("erase_count", 28, "u32"),
];
const FTL_GC: &[FieldInfo] = &[
    f("qid", 0, "u16"),
    f("cid", 2, "u16"),
    f("flags", 4, "u8"),
    f("victim_line", 8, "u32"),
    f("pages", 12, "u32"),
];
const FTL_WEAR_LEVEL: &[FieldInfo] = &[
    f("qid", 0, "u16"),
    f("cid", 2, "u16"),
    f("flags", 4, "u8"),
    f("line", 8, "u32"),
    f("moved_pages", 12, "u32"),
    f("erase_count", 16, "u32"),
];

const fn nvme(
    opcode: u16,
    name: &'static str,
    payload_len: u16,
    fields: &'static [FieldInfo],
    about: &'static str,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        name,
        workload: "nvme",
        payload_len: Some(payload_len),
        source: "submission queue id of the command (0xFFFF: background)",
        fields,
        about,
    }
}

/// The pccx "flatbuf" event, byte for byte.
const NPU_EVENT: &[FieldInfo] = &[
    f("core_id", 0, "u32"),
    f("start_cycle", 4, "u64"),
    f("duration", 12, "u64"),
    f("event_type_id", 20, "u32"),
];

const fn npu(opcode: u16, name: &'static str, about: &'static str) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        name,
        workload: "npu",
        payload_len: Some(24),
        source: "core_id",
        fields: NPU_EVENT,
        about,
    }
}

/// Every opcode the model emits.
pub const OPCODES: &[OpcodeInfo] = &[
    OpcodeInfo {
        opcode: OP_CMD_FETCH,
        name: "CMD_FETCH",
        workload: "ssd",
        payload_len: Some(24),
        source: "submission queue id",
        fields: CMD_FETCH,
        about: "an NVMe command fetched from a submission queue",
    },
    OpcodeInfo {
        opcode: OP_CMD_COMPLETE,
        name: "CMD_COMPLETE",
        workload: "ssd",
        payload_len: Some(16),
        source: "completion queue id",
        fields: CMD_COMPLETE,
        about: "a completion posted",
    },
    OpcodeInfo {
        opcode: OP_FTL_MAP_HIT,
        name: "FTL_MAP_HIT",
        workload: "ssd",
        payload_len: Some(16),
        source: "FTL core id",
        fields: MAP_HIT,
        about: "logical-to-physical lookup hit the map cache",
    },
    OpcodeInfo {
        opcode: OP_FTL_MAP_MISS,
        name: "FTL_MAP_MISS",
        workload: "ssd",
        payload_len: Some(24),
        source: "FTL core id",
        fields: MAP_MISS,
        about: "map cache miss: the map page was fetched from NAND",
    },
    OpcodeInfo {
        opcode: OP_NAND_READ,
        name: "NAND_READ",
        workload: "ssd",
        payload_len: Some(16),
        source: "channel << 8 | die",
        fields: NAND_RW,
        about: "NAND page read on one die",
    },
    OpcodeInfo {
        opcode: OP_NAND_PROGRAM,
        name: "NAND_PROGRAM",
        workload: "ssd",
        payload_len: Some(16),
        source: "channel << 8 | die",
        fields: NAND_RW,
        about: "NAND page program on one die",
    },
    OpcodeInfo {
        opcode: OP_NAND_ERASE,
        name: "NAND_ERASE",
        workload: "ssd",
        payload_len: Some(16),
        source: "channel << 8 | die",
        fields: NAND_ERASE,
        about: "NAND block erase on one die",
    },
    OpcodeInfo {
        opcode: OP_GC_START,
        name: "GC_START",
        workload: "ssd",
        payload_len: Some(16),
        source: "FTL core id",
        fields: GC_START,
        about: "garbage collection of a victim block starts",
    },
    OpcodeInfo {
        opcode: OP_GC_END,
        name: "GC_END",
        workload: "ssd",
        payload_len: Some(16),
        source: "FTL core id",
        fields: GC_END,
        about: "garbage collection of a victim block ends",
    },
    OpcodeInfo {
        opcode: OP_WEAR_LEVEL,
        name: "WEAR_LEVEL",
        workload: "ssd",
        payload_len: Some(16),
        source: "FTL core id",
        fields: WEAR_LEVEL,
        about: "static wear levelling moved a cold block (in ssd:causal: the migration starts)",
    },
    OpcodeInfo {
        opcode: OP_WEAR_LEVEL_END,
        name: "WEAR_LEVEL_END",
        workload: "ssd:causal",
        payload_len: Some(16),
        source: "FTL core id",
        fields: WEAR_LEVEL_END,
        about: "a wear-levelling migration finished (ssd:causal only)",
    },
    npu(
        OP_NPU_MAC_COMPUTE,
        "MAC_COMPUTE",
        "MAC array computation (pccx event type 1)",
    ),
    npu(OP_NPU_DMA_READ, "DMA_READ", "AXI DMA read (pccx event type 2)"),
    npu(OP_NPU_DMA_WRITE, "DMA_WRITE", "AXI DMA write (pccx event type 3)"),
    npu(
        OP_NPU_SYSTOLIC_STALL,
        "SYSTOLIC_STALL",
        "systolic pipeline drain stall (pccx event type 4)",
    ),
    npu(
        OP_NPU_BARRIER_SYNC,
        "BARRIER_SYNC",
        "inter-core barrier (pccx event type 5)",
    ),
    nvme(
        OP_L2P_HIT,
        "L2P_HIT",
        24,
        L2P,
        "NVMe controller: an L2P lookup or update found its map page in the cache",
    ),
    nvme(
        OP_L2P_MISS,
        "L2P_MISS",
        24,
        L2P,
        "NVMe controller: map page not cached; `slot` is the one it will take",
    ),
    nvme(
        OP_L2P_FILL,
        "L2P_FILL",
        24,
        L2P,
        "NVMe controller: a map page loaded into a cache slot",
    ),
    nvme(
        OP_L2P_WRITE_BACK,
        "L2P_WRITE_BACK",
        24,
        L2P,
        "NVMe controller: a dirty cached map page programmed to NAND",
    ),
    nvme(
        OP_L2P_CORRUPT,
        "L2P_CORRUPT",
        24,
        L2P,
        "NVMe controller: a cached map page changed by the host, dropped and reloaded",
    ),
    nvme(
        OP_FLASH_READ,
        "FLASH_READ",
        32,
        FLASH,
        "NVMe controller: NAND page read",
    ),
    nvme(
        OP_FLASH_PROGRAM,
        "FLASH_PROGRAM",
        32,
        FLASH,
        "NVMe controller: NAND page program",
    ),
    nvme(
        OP_FLASH_ERASE,
        "FLASH_ERASE",
        32,
        FLASH,
        "NVMe controller: NAND block erase (page 0)",
    ),
    nvme(
        OP_FTL_GC_START,
        "FTL_GC_START",
        16,
        FTL_GC,
        "NVMe controller: GC of a victim line starts; `pages` = its valid pages",
    ),
    nvme(
        OP_FTL_GC_END,
        "FTL_GC_END",
        16,
        FTL_GC,
        "NVMe controller: GC of a victim line ends; `pages` = pages moved",
    ),
    nvme(
        OP_FTL_WEAR_LEVEL,
        "FTL_WEAR_LEVEL",
        24,
        FTL_WEAR_LEVEL,
        "NVMe controller: static wear levelling moved a cold line",
    ),
    OpcodeInfo {
        opcode: OP_SIZES_FILL,
        name: "SIZES_FILL",
        workload: "sizes",
        payload_len: None,
        source: "0",
        fields: &[],
        about: "stress record: 0..=4064 pseudo-random bytes from (seed, seq)",
    },
];

/// Look an opcode up.
pub fn opcode_info(opcode: u16) -> Option<&'static OpcodeInfo> {
    OPCODES.iter().find(|o| o.opcode == opcode)
}

#[derive(Serialize)]
struct CatalogFile {
    catalog_version: u32,
    opcodes: &'static [OpcodeInfo],
}

/// The catalog as JSON (`{"catalog_version":1,"opcodes":[...]}`).
pub fn catalog_json() -> String {
    serde_json::to_string_pretty(&CatalogFile {
        catalog_version: 1,
        opcodes: OPCODES,
    })
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opcodes_are_unique_and_fields_fit_their_payload() {
        for (i, a) in OPCODES.iter().enumerate() {
            assert!(
                OPCODES[i + 1..].iter().all(|b| b.opcode != a.opcode),
                "{:#x} twice",
                a.opcode
            );
            if let Some(len) = a.payload_len {
                for fld in a.fields {
                    let w = match fld.ty {
                        "u8" => 1,
                        "u16" => 2,
                        "u32" => 4,
                        "u64" => 8,
                        t => panic!("type {t}"),
                    };
                    assert!(fld.offset + w <= len, "{}.{} past payload", a.name, fld.name);
                }
            }
        }
    }

    #[test]
    fn json_lists_every_opcode() {
        let v: serde_json::Value = serde_json::from_str(&catalog_json()).unwrap();
        assert_eq!(v["opcodes"].as_array().unwrap().len(), OPCODES.len());
        let mac = v["opcodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == "MAC_COMPUTE")
            .unwrap();
        assert_eq!(mac["fields"][3]["name"], "event_type_id");
    }
}
