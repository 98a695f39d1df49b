//! Property: whatever the drops (with or without LOST markers, at the start,
//! middle or end of an epoch, frozen or not), the analyzer's loss totals are
//! exact, per epoch and in all, and every record is counted once.

#[path = "common/synth.rs"]
mod synth;

use hmb_firmware_model::Workload;
use hmb_trace_analyze::catalog::Catalog;
use hmb_trace_analyze::commands::{collect_stats, Ctx};
use hmb_trace_analyze::format::Style;
use proptest::prelude::*;
use synth::{write_trace, Drop, EpochSpec, SynthSpec};

fn epoch_strategy() -> impl Strategy<Value = (u64, Vec<(u64, u64, bool)>, bool)> {
    (
        1u64..80,
        proptest::collection::vec((0u64..80, 1u64..6, any::<bool>()), 0..5),
        any::<bool>(),
    )
}

/// Drops sorted, non-overlapping, inside the epoch.
fn clean_drops(seqs: u64, raw: &[(u64, u64, bool)]) -> Vec<Drop> {
    let mut raw = raw.to_vec();
    raw.sort();
    let mut out: Vec<Drop> = Vec::new();
    let mut next_free = 0;
    for (first, count, marked) in raw {
        if first < next_free || first >= seqs {
            continue;
        }
        let count = count.min(seqs - first);
        out.push(Drop {
            first_seq: first,
            count,
            marked,
        });
        next_free = first + count + 1;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn losses_and_records_are_exact(epochs in proptest::collection::vec(epoch_strategy(), 1..4), seed in any::<u64>()) {
        let spec = SynthSpec {
            workload: Workload::Ssd,
            seed,
            epochs: epochs
                .iter()
                .enumerate()
                .map(|(i, (seqs, raw, frozen))| EpochSpec {
                    epoch: 5 + i as u64,
                    ring_size: 1 << 16,
                    seqs: *seqs,
                    drops: clean_drops(*seqs, raw),
                    frozen: *frozen,
                })
                .collect(),
            start_ns: 1000,
            step_ns: 100,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.bin");
        let written = write_trace(std::fs::File::create(&path).unwrap(), &spec).unwrap();
        let ctx = Ctx { catalog: Catalog::builtin(), style: Style { color: false }, progress: false };
        let (walked, stats) = collect_stats(&ctx, path.to_str().unwrap()).unwrap();
        prop_assert!(walked.end.error.is_none());
        prop_assert_eq!(stats.records, written.records);
        prop_assert_eq!(stats.epochs.len(), spec.epochs.len());
        for (e, s) in spec.epochs.iter().zip(&stats.epochs) {
            // Drops the analyzer can know of: all, except those at the very
            // start of the file's first epoch without a marker (the file may
            // start mid-epoch) and those at the end of an epoch that is
            // neither frozen nor followed by a record (nothing reveals them).
            let mut knowable = 0;
            let mut first_record_seen = false;
            let mut seq = 0;
            while seq < e.seqs {
                if let Some(d) = e.drops.iter().find(|d| d.first_seq == seq) {
                    let revealed = seq + d.count < e.seqs || e.frozen;
                    let before_anything = spec.epochs[0].epoch == e.epoch && !first_record_seen && !d.marked;
                    if revealed && !before_anything {
                        knowable += d.count;
                    }
                    seq += d.count;
                } else {
                    first_record_seen = true;
                    seq += 1;
                }
            }
            prop_assert_eq!(s.lost_marked + s.lost_unmarked, knowable, "epoch {}", e.epoch);
            let marked: u64 = e.drops.iter().filter(|d| d.marked && (d.first_seq + d.count < e.seqs || e.frozen)).map(|d| d.count).sum();
            prop_assert_eq!(s.lost_marked, marked, "epoch {} marked", e.epoch);
            prop_assert_eq!(s.frozen, e.frozen);
        }
    }
}
