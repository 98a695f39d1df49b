//! The checked-in golden vectors are exactly what the generator makes, and
//! each one shows the property it is named for.

use std::path::PathBuf;

use hmb_trace_abi::reference::{decode, Decoded, DecodedItem};
use hmb_trace_abi::vectors::{all, expected_json};
use hmb_trace_abi::AbiError;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/test-vectors/v1")
}

#[test]
fn checked_in_vectors_match_the_generator() {
    let vectors = all();
    for v in &vectors {
        let ring = std::fs::read(dir().join(format!("{}.ring", v.name)))
            .unwrap_or_else(|e| panic!("{}: {e} (run `cargo xtask vectors`)", v.name));
        assert!(
            ring == v.image,
            "{}.ring differs from the generator (run `cargo xtask vectors`)",
            v.name
        );
        let json = std::fs::read_to_string(dir().join(format!("{}.json", v.name))).unwrap();
        assert_eq!(json, expected_json(v), "{}.json differs from the generator", v.name);
    }
    let on_disk = std::fs::read_dir(dir()).unwrap().count();
    assert_eq!(on_disk, 2 * vectors.len(), "stray files in docs/test-vectors/v1");
}

fn decoded(name: &str) -> Result<Decoded, AbiError> {
    decode(&std::fs::read(dir().join(format!("{name}.ring"))).unwrap())
}

fn records(d: &Decoded) -> Vec<u64> {
    d.items
        .iter()
        .filter_map(|i| {
            if let DecodedItem::Record { seq, .. } = i {
                Some(*seq)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn small_tails_are_skipped_and_larger_ones_padded() {
    for (name, bytes) in [("wrap_skip_8", 8), ("wrap_skip_16", 16), ("wrap_skip_24", 24)] {
        let d = decoded(name).unwrap();
        assert!(
            d.items.contains(&DecodedItem::Skip {
                pos: 8192 - bytes,
                bytes
            }),
            "{name}: {:?}",
            d.items
        );
        assert_eq!(d.head % 8192, 136, "{name}: record after the skip starts at offset 0");
    }
    for (name, bytes) in [("wrap_pad_32", 32), ("wrap_pad_1000", 1000)] {
        let d = decoded(name).unwrap();
        assert!(
            d.items.contains(&DecodedItem::Pad {
                pos: 8192 - bytes,
                bytes
            }),
            "{name}: {:?}",
            d.items
        );
    }
    let exact = decoded("wrap_exact_fit").unwrap();
    assert_eq!(exact.head, 8192);
    assert!(exact.items.iter().all(|i| matches!(i, DecodedItem::Record { .. })));
}

#[test]
fn overflow_counts_drops_and_clears() {
    let full = decoded("overflow").unwrap();
    assert_eq!(full.dropped_records, 3);
    assert_eq!(full.overflow_events, 1);
    assert_eq!(full.flags, vec!["OVERFLOWED"]);
    let cleared = decoded("overflow_cleared").unwrap();
    assert!(cleared.flags.is_empty());
    let lost: Vec<_> = cleared
        .items
        .iter()
        .filter(|i| matches!(i, DecodedItem::Lost { .. }))
        .collect();
    assert_eq!(lost, vec![&DecodedItem::Lost { first_seq: 7, count: 3 }]);
}

#[test]
fn frozen_keeps_published_records_and_reinit_starts_an_epoch() {
    let frozen = decoded("frozen").unwrap();
    assert_eq!(frozen.flags, vec!["FROZEN"]);
    assert_eq!(records(&frozen), vec![0, 1, 2]);
    let drops = decoded("frozen_after_drops").unwrap();
    assert_eq!(
        drops.items.last(),
        Some(&DecodedItem::Lost {
            first_seq: drops.next_seq - 1,
            count: 1
        })
    );
    let reinit = decoded("reinit_epoch").unwrap();
    assert_eq!((reinit.epoch, records(&reinit)), (2, vec![0, 1]));
}

#[test]
fn version_rules() {
    let minor = decoded("newer_minor_unknown_flag").unwrap();
    assert_eq!(minor.version, "1.7");
    assert_eq!(minor.flags, vec!["UNKNOWN(0x200)"]);
    assert!(matches!(decoded("bad_magic"), Err(AbiError::BadMagic { .. })));
    assert!(matches!(
        decoded("too_new_major"),
        Err(AbiError::UnsupportedMajor { found: 2, .. })
    ));
}

#[test]
fn corrupt_rings_are_rejected() {
    assert!(matches!(
        decoded("hostile_length"),
        Err(AbiError::LengthTooLarge { length: 5000, .. })
    ));
    assert!(matches!(
        decoded("head_behind_tail"),
        Err(AbiError::HeadBehindTail { .. })
    ));
}
