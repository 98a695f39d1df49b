//! A hostile guest: random register writes of any width and offset, random doorbells, and
//! random submission queue entries never panic the model, and the report stays coherent.

mod common;

use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::{Controller, ControllerConfig};
use std::ops::Deref;

use hmb_nvme::vm_memory::{GuestAddressSpace, GuestMemoryMmap};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Register or doorbell write: offset, bytes.
    Write(u64, Vec<u8>),
    Read(u64, usize),
    /// An admin command with random dwords (CID kept by the fake host).
    Admin([u32; 16]),
    /// An I/O command on queue 1 with random dwords.
    Io([u32; 16]),
    /// A plausible admin command with random fields: opcode from the known set.
    KnownAdmin(u8, u32, u32, u32, u64),
    /// Set Features of a known FID with random dwords (0Dh: a random descriptor list too).
    Feature(u8, [u32; 5], Vec<(u64, u32)>),
    Reset,
    ReEnable,
    /// The transport unmaps all guest memory (DMA_UNMAP) / maps it back.
    Unmap,
    Remap,
}

fn offsets() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..0x40,
        0x1000u64..0x1100,
        0u64..Controller::BAR0_SIZE + 16,
        any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (offsets(), proptest::collection::vec(any::<u8>(), 0..9)).prop_map(|(o, b)| Op::Write(o, b)),
        (offsets(), 0usize..9).prop_map(|(o, n)| Op::Read(o, n)),
        any::<[u32; 16]>().prop_map(Op::Admin),
        any::<[u32; 16]>().prop_map(Op::Io),
        (
            prop::sample::select(vec![0x00u8, 0x01, 0x02, 0x04, 0x05, 0x06, 0x08, 0x09, 0x0A, 0x0C]),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            prop_oneof![0u64..(8 << 20), any::<u64>()],
        )
            .prop_map(|(o, a, b, c, p)| Op::KnownAdmin(o, a, b, c, p)),
        (
            prop::sample::select(vec![0x01u8, 0x02, 0x04, 0x07, 0x09, 0x0B, 0x0D, 0x0D, 0x0D, 0x0E, 0xC0]),
            any::<[u32; 5]>(),
            proptest::collection::vec((prop_oneof![0u64..(8 << 20), any::<u64>()], 0u32..64), 0..6),
        )
            .prop_map(|(f, d, l)| Op::Feature(f, d, l)),
        Just(Op::Reset),
        Just(Op::ReEnable),
        Just(Op::Unmap),
        Just(Op::Remap),
    ]
}

/// Reap what is there, bounded: random memory may look like endless valid entries.
fn drain(h: &mut FakeHost, qid: u16) {
    for _ in 0..64 {
        if h.reap(qid).is_none() {
            break;
        }
    }
}

/// The guest memory while the transport has it unmapped (None: mapped).
struct Mapping(Option<GuestMemoryMmap>);

fn apply(h: &mut FakeHost, op: &Op, unmapped: &mut Mapping) {
    match op {
        Op::Unmap => {
            if unmapped.0.is_none() {
                let orig = h.mem.memory().deref().clone();
                h.mem.lock().unwrap().replace(GuestMemoryMmap::default());
                unmapped.0 = Some(orig);
            }
            return;
        }
        Op::Remap => {
            if let Some(orig) = unmapped.0.take() {
                h.mem.lock().unwrap().replace(orig);
            }
            return;
        }
        // The fake host itself needs its memory for everything below but register accesses.
        Op::Write(..) | Op::Read(..) => {}
        _ if unmapped.0.is_some() => return,
        _ => {}
    }
    match op {
        Op::Write(o, b) => h.ctrl.bar0_write(*o, b),
        Op::Read(o, n) => {
            let mut b = vec![0u8; *n];
            h.ctrl.bar0_read(*o, &mut b);
        }
        Op::Admin(d) | Op::Io(d) => {
            let qid = if matches!(op, Op::Admin(_)) { 0 } else { 1 };
            if qid == 1 && h.io.is_empty() {
                return;
            }
            h.push(qid, Command(*d));
            h.ring(qid);
            drain(h, qid);
        }
        Op::KnownAdmin(opc, c10, c11, c12, prp) => {
            let cmd = Command::new(*opc)
                .nsid(1)
                .prp1(*prp)
                .prp2(prp.wrapping_add(4096))
                .cdw(10, *c10)
                .cdw(11, *c11)
                .cdw(12, *c12)
                .cdw(15, c12 & 0x3ff);
            h.push(0, cmd);
            h.ring(0);
            drain(h, 0);
        }
        Op::Feature(fid, d, list) => {
            // Half the time a plausible HMB set-up: the list written into guest memory,
            // HSIZE the sum of the entries, EHM from the random bits.
            let at = h.alloc(4096);
            let plausible = d[0] & (1 << 8) == 0;
            for (i, (addr, pages)) in list.iter().enumerate() {
                let addr = if plausible { addr & !0xfff } else { *addr };
                let mut e = [0u8; 16];
                e[0..8].copy_from_slice(&addr.to_le_bytes());
                e[8..12].copy_from_slice(&pages.to_le_bytes());
                h.guest_write(at + 16 * i as u64, &e);
            }
            let hsize: u32 = list.iter().map(|e| e.1).sum();
            let cmd = Command::set_features(*fid, d[0] & if plausible { 3 } else { u32::MAX })
                .prp1(at)
                .cdw(12, if plausible { hsize } else { d[1] })
                .cdw(13, if plausible { at as u32 } else { d[2] })
                .cdw(14, if plausible { 0 } else { d[3] })
                .cdw(15, if plausible { list.len() as u32 } else { d[4] });
            h.push(0, cmd);
            h.ring(0);
            drain(h, 0);
        }
        Op::Reset => {
            h.ctrl.reset();
            h.forget_queues();
        }
        Op::Unmap | Op::Remap => unreachable!("handled above"),
        Op::ReEnable => {
            h.disable();
            h.enable(8);
            let _ = h.create_io_queue(1, 8);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_guest_behaviour_never_panics(ops in proptest::collection::vec(op(), 1..48)) {
        let mut h = FakeHost::new(ControllerConfig { namespace_bytes: 1 << 20, hmpre_bytes: 1 << 20, hmmin_bytes: 0, ..Default::default() }, 8 << 20);
        h.enable(8);
        let _ = h.create_io_queue(1, 8);
        let mut unmapped = Mapping(None);
        for op in &ops {
            apply(&mut h, op, &mut unmapped);
            let r = h.ctrl.report();
            // CSTS.RDY in the report matches the register.
            prop_assert_eq!(r.ready, h.csts() & 1 == 1);
            for q in &r.queues {
                prop_assert!(q.head < q.entries && q.tail < q.entries);
            }
            if let Some(hmb) = h.ctrl.hmb() {
                prop_assert_eq!(hmb.len(), hmb.descriptors().iter().map(|d| d.bytes).sum::<u64>());
            }
        }
        serde_json::to_string(&h.ctrl.report()).unwrap();
    }
}

/// The plausible HMB path of the proptest does reach an enabled HMB (so the property
/// covers the HMB code, not only its rejections).
#[test]
fn plausible_hmb_op_enables() {
    let mut h = FakeHost::new(
        ControllerConfig {
            namespace_bytes: 1 << 20,
            hmpre_bytes: 1 << 20,
            hmmin_bytes: 0,
            ..Default::default()
        },
        8 << 20,
    );
    h.enable(8);
    apply(
        &mut h,
        &Op::Feature(0x0D, [1, 0, 0, 0, 0], vec![(0x20_0000, 4), (0x30_0123, 2)]),
        &mut Mapping(None),
    );
    assert_eq!(h.ctrl.hmb().map(|b| b.len()), Some(6 * 4096));
}
