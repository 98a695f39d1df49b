//! The shared-memory producer equals `hmb_trace_abi::reference::RefRing`
//! bit for bit, for any sequence of produce / consume / freeze / reinit.

use hmb_firmware_model::{module_sim, Produced, Producer, SharedRing};
use hmb_trace_abi::reference::RefRing;
use hmb_trace_abi::*;
use proptest::prelude::*;

/// 8-aligned heap memory standing in for a shared mapping.
struct Mem(Vec<u64>);

impl Mem {
    fn ring(&mut self) -> SharedRing {
        // SAFETY: the Vec outlives every use within one test case.
        unsafe { SharedRing::from_raw(self.0.as_mut_ptr() as *mut u8, self.0.len() * 8).unwrap() }
    }
}

#[derive(Debug, Clone)]
enum Op {
    Produce {
        len: usize,
        opcode: u16,
        source: u32,
    },
    /// Consume up to n items (records, pads, skips) from the tail.
    Consume(usize),
    Freeze,
    Reinit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (prop_oneof![0usize..=64, 0usize..=4064, Just(4064usize), 4065usize..5000], any::<u16>(), any::<u32>())
            .prop_map(|(len, opcode, source)| Op::Produce { len, opcode, source }),
        4 => (1usize..8).prop_map(Op::Consume),
        1 => Just(Op::Freeze),
        1 => Just(Op::Reinit),
    ]
}

fn consume(reference: &mut RefRing, n: usize) -> u64 {
    let hdr = reference.hdr();
    let (head, mut tail) = (hdr.head.get(), hdr.tail.get());
    let data = &reference.image[HMB_RING_HDR_SIZE as usize..];
    for _ in 0..n {
        if tail >= head {
            break;
        }
        tail += parse_record_at(data, tail, head)
            .expect("reference ring parses")
            .advance();
    }
    tail
}

fn run(ring_size: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut mem = Mem(vec![0u64; (HMB_RING_HDR_SIZE as usize + ring_size as usize) / 8]);
    let ring = mem.ring();
    module_sim::init(&ring, ring_size, 1).unwrap();
    let owner = ring.share();
    let mut producer = Producer::attach(ring).unwrap();
    let mut reference = RefRing::new(ring_size, 1);
    prop_assert_eq!(owner.image(), reference.image.clone());
    for (i, op) in ops.iter().enumerate() {
        match *op {
            Op::Produce { len, opcode, source } => {
                let payload: Vec<u8> = (0..len)
                    .map(|b| (b as u8).wrapping_mul(7).wrapping_add(i as u8))
                    .collect();
                let ts = i as u64 * 1000;
                let got = producer.produce(opcode, source, ts, &payload);
                let want = reference.produce(opcode, source, ts, &payload);
                prop_assert_eq!(got, want, "op {} {:?}", i, op);
            }
            Op::Consume(n) => {
                let tail = consume(&mut reference, n);
                reference.publish_tail(tail);
                module_sim::publish_tail(&owner, tail).unwrap();
            }
            Op::Freeze => {
                producer.freeze();
                reference.freeze();
                prop_assert_eq!(producer.produce(1, 1, 1, &[]), Produced::Frozen);
            }
            Op::Reinit => {
                if reference.hdr().flags.get() & HMB_RING_FLAG_FROZEN != 0 {
                    reference.reinit();
                    module_sim::reinit(&owner).unwrap();
                    prop_assert!(producer.reattach().unwrap());
                } else {
                    prop_assert!(module_sim::reinit(&owner).is_err());
                    prop_assert!(!producer.reattach().unwrap());
                }
            }
        }
        prop_assert!(
            owner.image() == reference.image,
            "images differ after op {} {:?}",
            i,
            op
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn producer_matches_reference_ring(ops in proptest::collection::vec(op(), 1..200)) {
        run(8192, &ops)?;
    }

    #[test]
    fn producer_matches_reference_ring_16k(ops in proptest::collection::vec(op(), 1..300)) {
        run(16384, &ops)?;
    }
}

/// Every small-tail case (room 8..=4096 before the end) against the reference.
#[test]
fn every_room_before_the_end_matches() {
    for room in (8..=256u64).step_by(8).chain([1000, 4088, 4096]) {
        for next_len in [0usize, 1, 100, 4064] {
            let mut ops = Vec::new();
            // Fill to exactly ring_size - room with the consumer keeping up.
            let mut head = 0u64;
            let target = 8192 - room;
            while head < target {
                let left = target - head;
                let mut size = left.min(2048);
                if left > size && left - size < 32 {
                    size = left - 32;
                }
                ops.push(Op::Produce {
                    len: size as usize - 32,
                    opcode: 1,
                    source: 2,
                });
                ops.push(Op::Consume(2));
                head += size;
            }
            ops.push(Op::Produce {
                len: next_len,
                opcode: 3,
                source: 4,
            });
            run(8192, &ops).unwrap_or_else(|e| panic!("room {room} len {next_len}: {e}"));
        }
    }
}
