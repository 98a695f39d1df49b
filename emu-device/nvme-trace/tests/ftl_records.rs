//! The FTL's trace records (src/ftl.rs) as the controller produces them for real
//! commands: each inside its command's CMD_FETCH..CMD_COMPLETE with that (qid, cid), a host
//! write into the map cache in the HMB traced as L2P_CORRUPT at its HMB offset, and the
//! cache's last write-back when the HMB goes traced as background. The `stock`
//! personality shares no slice, so the records are the journal's epoch-0 records (the
//! ring equality with an adopted slice is tests/controller.rs's).

use hmb_firmware_model::catalog::*;
use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{ControllerConfig, Status};
use hmb_nvme_trace::ftl::{FLAG_BACKGROUND, FLAG_IN_HMB};
use hmb_nvme_trace::{JournalEntry, NvmeTrace, Personality};

const MB: u64 = 1 << 20;
const PAGE: u64 = 4096;

fn qid_cid(e: &JournalEntry) -> (u16, u16) {
    (
        u16::from_le_bytes([e.payload[0], e.payload[1]]),
        u16::from_le_bytes([e.payload[2], e.payload[3]]),
    )
}

fn u32_at(p: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(p[at..at + 4].try_into().unwrap())
}

struct Hmb {
    addr: u64,
    list: u64,
}

impl Hmb {
    fn new(h: &mut FakeHost) -> Hmb {
        let addr = h.alloc(4 * MB);
        let list = h.alloc(16);
        let mut e = [0u8; 16];
        e[0..8].copy_from_slice(&addr.to_le_bytes());
        e[8..12].copy_from_slice(&((4 * MB / PAGE) as u32).to_le_bytes());
        h.guest_write(list, &e);
        Hmb { addr, list }
    }
    fn set(&self, h: &mut FakeHost, bits: u32) -> Status {
        let c = Command::set_features(0x0D, bits)
            .cdw(12, (4 * MB / PAGE) as u32)
            .cdw(13, self.list as u32)
            .cdw(14, (self.list >> 32) as u32)
            .cdw(15, 1);
        h.admin(c).status
    }
}

/// The records between the fetch and the completion of the last command on queue 1.
fn last_command(entries: &[JournalEntry]) -> (u16, Vec<JournalEntry>) {
    let fetch = entries
        .iter()
        .rposition(|e| e.opcode == OP_CMD_FETCH && e.source == 1)
        .expect("a fetch on queue 1");
    let cid = qid_cid(&entries[fetch]).1;
    let end = fetch
        + entries[fetch..]
            .iter()
            .position(|e| e.opcode == OP_CMD_COMPLETE)
            .expect("its completion");
    assert_eq!(qid_cid(&entries[end]), (1, cid));
    (cid, entries[fetch + 1..end].to_vec())
}

#[test]
fn ftl_records_belong_to_their_command_and_report_a_host_write() {
    let mut h = FakeHost::new(ControllerConfig::default(), 64 * MB);
    let trace = NvmeTrace::new(h.mem.clone());
    trace.install(&mut h.ctrl, Personality::Stock);
    assert_eq!(h.enable(32) & 1, 1);
    h.create_io_queue(1, 64).unwrap();
    let hmb = Hmb::new(&mut h);
    assert_eq!(hmb.set(&mut h, 1), Status::SUCCESS);

    let data: Vec<u8> = (0..2 * PAGE).map(|i| (i % 251) as u8).collect();
    assert!(h.write_lbas(1, 0, &data, 9).ok());
    let j: Vec<JournalEntry> = trace.journal().unadopted.into_iter().collect();
    let (cid, inside) = last_command(&j);
    let ops: Vec<u16> = inside.iter().map(|e| e.opcode).collect();
    assert_eq!(ops.iter().filter(|&&o| o == OP_FLASH_PROGRAM).count(), 2, "{ops:x?}");
    assert!(ops.contains(&OP_L2P_MISS) && ops.contains(&OP_L2P_FILL) && ops.contains(&OP_L2P_HIT));
    for e in &inside {
        assert!((0x0700..0x0800).contains(&e.opcode), "{:#x}", e.opcode);
        assert_eq!((qid_cid(e), e.source), ((1, cid), 1), "caused by this command");
        assert_eq!(e.payload[4] & FLAG_BACKGROUND, 0);
    }
    let fill = inside.iter().find(|e| e.opcode == OP_L2P_FILL).unwrap();
    assert_ne!(fill.payload[4] & FLAG_IN_HMB, 0, "the cache is in the HMB");
    let slot_offset = u64::from_le_bytes(fill.payload[16..24].try_into().unwrap());

    // The host writes into that slot: the next read reports it, and reads right.
    h.guest_write(hmb.addr + slot_offset + 8, &[0x5A; 4]);
    let (c, back) = h.read_lbas(1, 0, 16, 9);
    assert!(c.ok() && back == data);
    let j: Vec<JournalEntry> = trace.journal().unadopted.into_iter().collect();
    let (cid, inside) = last_command(&j);
    let corrupt = inside.iter().find(|e| e.opcode == OP_L2P_CORRUPT).expect("L2P_CORRUPT");
    assert_eq!(qid_cid(corrupt), (1, cid));
    assert_eq!(
        u64::from_le_bytes(corrupt.payload[16..24].try_into().unwrap()),
        slot_offset
    );
    assert_eq!(inside.iter().filter(|e| e.opcode == OP_FLASH_READ).count(), 2);
    assert_eq!(h.ctrl.hmb_audit().violations, 1);

    // EHM=0: the cache writes its dirty page back before the HMB goes: background.
    let before = trace.journal().unadopted.len();
    assert_eq!(hmb.set(&mut h, 0), Status::SUCCESS);
    let j: Vec<JournalEntry> = trace.journal().unadopted.into_iter().collect();
    let wb: Vec<_> = j[before..].iter().filter(|e| e.opcode == OP_L2P_WRITE_BACK).collect();
    assert_eq!(wb.len(), 1, "one dirty map page");
    assert_eq!((qid_cid(wb[0]), wb[0].source), ((0xFFFF, 0xFFFF), 0xFFFF));
    assert_ne!(wb[0].payload[4] & FLAG_BACKGROUND, 0);
    let program = j[before..]
        .iter()
        .find(|e| e.opcode == OP_FLASH_PROGRAM)
        .expect("the map page programmed");
    assert_eq!(program.payload[5], 1, "purpose: map page");
    assert!(u32_at(&program.payload, 20) > 0, "a modelled latency");
}
