//! Trace records of the controller's FTL (issue 27): map-cache hits, misses, fills,
//! write-backs and changed pages with their HMB offset, NAND reads, programs and erases
//! with channel, die, block, page and modelled times, GC and wear levelling; each with
//! the (qid, cid) of the command that caused it, or flagged background. Layouts: the
//! firmware-model catalog (`L2P_*`, `FLASH_*`, `FTL_*`, workload "nvme").

use hmb_firmware_model::catalog::{
    OP_FLASH_ERASE, OP_FLASH_PROGRAM, OP_FLASH_READ, OP_FTL_GC_END, OP_FTL_GC_START, OP_FTL_WEAR_LEVEL, OP_L2P_CORRUPT,
    OP_L2P_FILL, OP_L2P_HIT, OP_L2P_MISS, OP_L2P_WRITE_BACK,
};
use hmb_nvme::{CacheEventKind, CorruptionFound, FtlEvent, FtlTraceEvent, NandOpKind, Purpose};

/// `flags` bit 0: background work (qid = cid = 0xFFFF).
pub const FLAG_BACKGROUND: u8 = 1;
/// `flags` bit 1: the map cache is in the HMB (`hmb_offset` is an HMB offset).
pub const FLAG_IN_HMB: u8 = 2;
/// `flags` bit 2 (L2P_CORRUPT): found when the HMB came back with MR=1.
pub const FLAG_AT_RETURN: u8 = 4;

/// One record: opcode, source, timestamp, payload.
pub type Record = (u16, u32, u64, Payload);

/// An FTL record's payload (at most 32 bytes) on the stack: a `Vec` per
/// record was an allocation and a free on the I/O path, two per page a Write
/// programs (docs/nvme-controller.md, "Tenth round").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payload {
    bytes: [u8; 32],
    len: u8,
}

impl Payload {
    /// `len` zeroed bytes.
    fn zeroed(len: usize) -> Payload {
        Payload {
            bytes: [0; 32],
            len: u8::try_from(len).expect("at most 32 bytes"),
        }
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl std::ops::DerefMut for Payload {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..usize::from(self.len)]
    }
}

/// The record of an FTL event.
pub fn ftl_record(e: &FtlTraceEvent) -> Record {
    let (qid, cid) = e.command.unwrap_or((u16::MAX, u16::MAX));
    let mut flags = if e.command.is_none() { FLAG_BACKGROUND } else { 0 };
    let head = |len: usize, flags: u8| {
        let mut p = Payload::zeroed(len);
        p[0..2].copy_from_slice(&qid.to_le_bytes());
        p[2..4].copy_from_slice(&cid.to_le_bytes());
        p[4] = flags;
        p
    };
    let put32 = |p: &mut Payload, at: usize, v: u32| p[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let sat = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    let (opcode, payload) = match e.event {
        FtlEvent::MapCache {
            kind,
            map_page,
            slot,
            offset,
        } => {
            if e.cache_in_hmb {
                flags |= FLAG_IN_HMB;
            }
            let op = match kind {
                CacheEventKind::Hit => OP_L2P_HIT,
                CacheEventKind::Miss => OP_L2P_MISS,
                CacheEventKind::Fill => OP_L2P_FILL,
                CacheEventKind::WriteBack => OP_L2P_WRITE_BACK,
            };
            (op, l2p(head(24, flags), map_page, slot, offset))
        }
        FtlEvent::MapCacheCorrupt {
            map_page,
            slot,
            offset,
            when,
            ..
        } => {
            flags |= FLAG_IN_HMB;
            if when == CorruptionFound::AtReturn {
                flags |= FLAG_AT_RETURN;
            }
            (OP_L2P_CORRUPT, l2p(head(24, flags), map_page, slot, offset))
        }
        FtlEvent::Nand(op) => {
            let mut p = head(32, flags);
            p[5] = match op.purpose {
                Purpose::Host => 0,
                Purpose::Map => 1,
                Purpose::Gc => 2,
                Purpose::WearLevel => 3,
            };
            p[6] = op.channel;
            p[7] = op.die;
            put32(&mut p, 8, op.block);
            put32(&mut p, 12, op.page);
            put32(&mut p, 16, sat(op.start_ns.saturating_sub(e.time_ns)));
            put32(&mut p, 20, op.latency_ns);
            put32(&mut p, 24, sat(op.wait_ns));
            put32(&mut p, 28, op.erase_count);
            let opcode = match op.kind {
                NandOpKind::Read => OP_FLASH_READ,
                NandOpKind::Program => OP_FLASH_PROGRAM,
                NandOpKind::Erase => OP_FLASH_ERASE,
            };
            (opcode, p)
        }
        FtlEvent::GcStart { line, valid, .. } => {
            let mut p = head(16, flags);
            put32(&mut p, 8, line);
            put32(&mut p, 12, valid);
            (OP_FTL_GC_START, p)
        }
        FtlEvent::GcEnd { line, moved, .. } => {
            let mut p = head(16, flags);
            put32(&mut p, 8, line);
            put32(&mut p, 12, moved);
            (OP_FTL_GC_END, p)
        }
        FtlEvent::WearLevelMove {
            line,
            erase_count,
            moved,
            ..
        } => {
            let mut p = head(24, flags);
            put32(&mut p, 8, line);
            put32(&mut p, 12, moved);
            put32(&mut p, 16, erase_count);
            (OP_FTL_WEAR_LEVEL, p)
        }
    };
    (opcode, u32::from(qid), e.time_ns, payload)
}

fn l2p(mut p: Payload, map_page: u32, slot: u32, offset: u64) -> Payload {
    p[8..12].copy_from_slice(&map_page.to_le_bytes());
    p[12..16].copy_from_slice(&slot.to_le_bytes());
    p[16..24].copy_from_slice(&offset.to_le_bytes());
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_firmware_model::catalog::opcode_info;

    /// Every record has its catalog opcode's payload length, and the fields the catalog
    /// names are where this encoder puts them.
    #[test]
    fn records_match_the_catalog() {
        let nand = hmb_nvme::NandOp {
            kind: NandOpKind::Program,
            purpose: Purpose::Gc,
            channel: 3,
            die: 2,
            block: 7,
            page: 9,
            start_ns: 1500,
            latency_ns: 600,
            wait_ns: 400,
            erase_count: 0,
        };
        let events = [
            FtlEvent::Nand(nand),
            FtlEvent::MapCache {
                kind: CacheEventKind::WriteBack,
                map_page: 5,
                slot: 6,
                offset: 0x6000,
            },
            FtlEvent::MapCacheCorrupt {
                map_page: 1,
                slot: 2,
                offset: 0x2000,
                found: 0,
                when: CorruptionFound::AtReturn,
            },
            FtlEvent::GcStart {
                line: 4,
                valid: 10,
                time_ns: 0,
            },
            FtlEvent::GcEnd {
                line: 4,
                moved: 10,
                time_ns: 0,
            },
            FtlEvent::WearLevelMove {
                line: 8,
                erase_count: 3,
                moved: 12,
                time_ns: 0,
            },
        ];
        for (i, ev) in events.into_iter().enumerate() {
            let e = FtlTraceEvent {
                command: (i % 2 == 0).then_some((1, 42)),
                time_ns: 1000,
                cache_in_hmb: true,
                event: ev,
            };
            let (op, source, ts, p) = ftl_record(&e);
            let info = opcode_info(op).expect("in the catalog");
            assert_eq!(Some(p.len() as u16), info.payload_len, "{}", info.name);
            assert_eq!(ts, 1000);
            let field = |name: &str| {
                let f = info.fields.iter().find(|f| f.name == name).expect(name);
                let at = f.offset as usize;
                match f.ty {
                    "u8" => u64::from(p[at]),
                    "u16" => u64::from(u16::from_le_bytes([p[at], p[at + 1]])),
                    "u32" => u64::from(u32::from_le_bytes(p[at..at + 4].try_into().unwrap())),
                    _ => u64::from_le_bytes(p[at..at + 8].try_into().unwrap()),
                }
            };
            let background = e.command.is_none();
            assert_eq!(field("qid"), if background { 0xFFFF } else { 1 });
            assert_eq!(u64::from(source), field("qid"));
            assert_eq!(field("flags") & 1, u64::from(background));
            match info.name {
                "FLASH_PROGRAM" => {
                    assert_eq!(
                        (field("channel"), field("die"), field("block"), field("page")),
                        (3, 2, 7, 9)
                    );
                    assert_eq!(
                        (field("start_ns"), field("latency_ns"), field("wait_ns")),
                        (500, 600, 400)
                    );
                    assert_eq!(field("purpose"), 2);
                }
                "L2P_WRITE_BACK" => assert_eq!((field("map_page"), field("slot"), field("hmb_offset")), (5, 6, 0x6000)),
                "L2P_CORRUPT" => assert_eq!(field("flags"), u64::from(FLAG_IN_HMB | FLAG_AT_RETURN)),
                "FTL_GC_START" | "FTL_GC_END" => assert_eq!((field("victim_line"), field("pages")), (4, 10)),
                "FTL_WEAR_LEVEL" => {
                    assert_eq!((field("line"), field("moved_pages"), field("erase_count")), (8, 12, 3))
                }
                other => panic!("unexpected {other}"),
            }
        }
    }
}
