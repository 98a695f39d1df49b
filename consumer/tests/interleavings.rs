//! Property: any interleaving of produce, consume and reset never loses,
//! duplicates or corrupts a record that was not counted as dropped.

mod common;

use std::collections::BTreeMap;

use common::*;
use hmb_firmware_model::{module_sim, Produced, Workload};
use hmb_trace_consumer::{ConsumerConfig, Step};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Produce(u64),
    /// Consume at most this many batches.
    Consume(u32),
    /// Controller reset: freeze, drain, re-initialise, both sides re-attach.
    Reset,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..40).prop_map(Op::Produce),
        4 => (1u32..4).prop_map(Op::Consume),
        1 => Just(Op::Reset),
    ]
}

/// Per epoch: what the producer did with each seq, and what the consumer saw.
#[derive(Default)]
struct Epoch {
    produced: BTreeMap<u64, bool>, // seq -> written?
    received: Vec<u64>,
    lost: Vec<(u64, u64)>,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn nothing_lost_duplicated_or_corrupted(
        ops in proptest::collection::vec(op(), 1..120),
        max_batch_bytes in prop_oneof![Just(64u64), Just(4096), Just(1 << 20)],
        max_iov in 1usize..4,
        seed in any::<u64>(),
    ) {
        let workload = Workload::parse("sizes").unwrap();
        let shm = Shm::new(8192);
        let mut p = shm.producer();
        let mut c = shm.consumer(ConsumerConfig { max_iov, max_batch_bytes });
        let mut epochs: BTreeMap<u64, Epoch> = BTreeMap::new();
        let consume = |c: &mut hmb_trace_consumer::Consumer<_>, epochs: &mut BTreeMap<u64, Epoch>, limit: u32| -> Result<bool, TestCaseError> {
            for _ in 0..limit {
                let epoch = c.epoch();
                let e = epochs.entry(epoch).or_default();
                match c.next_batch().map_err(|err| TestCaseError::fail(err.to_string()))? {
                    Step::Batch(b) => {
                        prop_assert!(b.iov.len() <= max_iov);
                        if let Some(l) = b.lost { e.lost.push((l.first_seq, l.count)); }
                        for s in records_of(&b) {
                            check_truth(seed, workload, &s);
                            e.received.push(s.seq);
                        }
                    }
                    Step::Empty => return Ok(false),
                    Step::Frozen(f) => {
                        if let Some(l) = f.lost { e.lost.push((l.first_seq, l.count)); }
                        return Ok(true);
                    }
                }
                c.commit().map_err(|err| TestCaseError::fail(err.to_string()))?;
            }
            Ok(false)
        };
        for op in &ops {
            match *op {
                Op::Produce(n) => {
                    for _ in 0..n {
                        let seq = p.next_seq();
                        let out = produce_truth(&mut p, seed, workload);
                        epochs.entry(p.epoch()).or_default().produced.insert(seq, matches!(out, Produced::Written { .. }));
                    }
                }
                Op::Consume(n) => { consume(&mut c, &mut epochs, n)?; }
                Op::Reset => {
                    p.freeze();
                    while !consume(&mut c, &mut epochs, u32::MAX)? {}
                    module_sim::reinit(&shm.owner()).unwrap();
                    prop_assert!(p.reattach().unwrap());
                    c.reattach().unwrap();
                }
            }
        }
        // Final: freeze and drain so trailing drops are reported too.
        p.freeze();
        while !consume(&mut c, &mut epochs, u32::MAX)? {}
        for (epoch, e) in &epochs {
            let written: Vec<u64> = e.produced.iter().filter(|(_, w)| **w).map(|(s, _)| *s).collect();
            prop_assert_eq!(&e.received, &written, "epoch {}: received != written", epoch);
            let mut lost: Vec<u64> = e.lost.iter().flat_map(|&(f, n)| f..f + n).collect();
            lost.sort_unstable();
            let dropped: Vec<u64> = e.produced.iter().filter(|(_, w)| !**w).map(|(s, _)| *s).collect();
            prop_assert_eq!(lost, dropped, "epoch {}: lost != dropped", epoch);
        }
    }
}
