//! Golden test vectors: ring images for every case docs/abi.md names, with
//! their expected decoding. `cargo xtask vectors` writes them under
//! docs/test-vectors/v1/; a test fails if the checked-in files differ.

use std::path::Path;

use serde::Serialize;

use crate::layout::*;
use crate::reference::{decode, Produced, RefRing};

/// Ring size of every vector: the smallest legal ring keeps files small.
pub const VECTOR_RING_SIZE: u64 = HMB_RING_MIN_SIZE as u64;

/// One vector: a name, a ring image and what decoding it must give.
pub struct Vector {
    pub name: &'static str,
    pub about: &'static str,
    pub image: Vec<u8>,
}

#[derive(Serialize)]
struct Expected<'a> {
    about: &'a str,
    #[serde(flatten)]
    outcome: Outcome,
}

#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Outcome {
    Ok(crate::reference::Decoded),
    Error(String),
}

/// Deterministic payload for a sequence number, so vectors are reproducible.
pub fn payload_for(seq: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (seq as usize * 31 + i) as u8).collect()
}

fn produce(ring: &mut RefRing, len: usize) -> Produced {
    let seq = ring.hdr().next_seq.get();
    ring.produce(0x0101, 3, 1_000 + seq * 10, &payload_for(seq, len))
}

/// Produce records with the consumer keeping up until head is exactly
/// `target`, so the next record meets a chosen room before the ring end.
fn advance_head_to(ring: &mut RefRing, target: u64) {
    loop {
        let head = ring.hdr().head.get();
        if head >= target {
            return;
        }
        let remaining = target - head;
        let mut size = remaining.min(2048);
        if remaining - size > 0 && remaining - size < 32 {
            size = remaining - 32;
        }
        ring.publish_tail(head);
        produce(ring, size as usize - 32);
    }
}

fn wrap_case(room: u64, next_len: usize) -> Vec<u8> {
    let mut ring = RefRing::new(VECTOR_RING_SIZE, 1);
    advance_head_to(&mut ring, VECTOR_RING_SIZE - room - 64);
    let head = ring.hdr().head.get();
    ring.publish_tail(head);
    produce(&mut ring, 32); // one 64-byte record before the wrap
    produce(&mut ring, next_len);
    ring.image
}

fn fill_until_drop(ring: &mut RefRing) {
    while let Produced::Written { .. } = produce(ring, 1000) {}
}

/// Every vector, in a fixed order.
pub fn all() -> Vec<Vector> {
    let mut v = Vec::new();
    v.push(Vector {
        name: "empty",
        about: "freshly initialised ring, epoch 1",
        image: RefRing::new(VECTOR_RING_SIZE, 1).image,
    });

    let mut one = RefRing::new(VECTOR_RING_SIZE, 1);
    produce(&mut one, 13);
    v.push(Vector {
        name: "one_record",
        about: "one record with a 13-byte payload, padded to 48 bytes",
        image: one.image,
    });

    for (name, room) in [("wrap_skip_8", 8u64), ("wrap_skip_16", 16), ("wrap_skip_24", 24)] {
        v.push(Vector {
            name,
            about: "fewer than 32 bytes before the ring end are skipped, next record at offset 0",
            image: wrap_case(room, 100),
        });
    }
    v.push(Vector {
        name: "wrap_pad_32",
        about: "32 bytes before the end: a PAD record with length 0",
        image: wrap_case(32, 100),
    });
    v.push(Vector {
        name: "wrap_pad_1000",
        about: "1000 bytes before the end, 4096-byte record: PAD with length 968",
        image: wrap_case(1000, 4064),
    });
    v.push(Vector {
        name: "wrap_exact_fit",
        about: "a record that ends exactly at the ring end needs no filler",
        image: wrap_case(136, 100),
    });

    let mut full = RefRing::new(VECTOR_RING_SIZE, 1);
    fill_until_drop(&mut full);
    produce(&mut full, 1000);
    produce(&mut full, 1000);
    v.push(Vector {
        name: "overflow",
        about: "ring full, three records dropped: counted, OVERFLOWED set",
        image: full.image.clone(),
    });

    let mut cleared = full.clone();
    let first = crate::parse::parse_record_at(
        &cleared.image[HMB_RING_HDR_SIZE as usize..],
        0,
        cleared.hdr().head.get(),
    )
    .expect("first record parses")
    .advance();
    cleared.publish_tail(first);
    produce(&mut cleared, 8);
    v.push(Vector {
        name: "overflow_cleared",
        about: "tail advanced, next record written: OVERFLOWED cleared, gap of 3 in seq",
        image: cleared.image,
    });

    let mut frozen = RefRing::new(VECTOR_RING_SIZE, 1);
    for len in [0, 64, 200] {
        produce(&mut frozen, len);
    }
    frozen.freeze();
    let refused = produce(&mut frozen, 10);
    debug_assert_eq!(refused, Produced::Frozen);
    v.push(Vector {
        name: "frozen",
        about: "controller reset after three records: FROZEN, published records stay valid",
        image: frozen.image.clone(),
    });

    let mut frozen_drops = RefRing::new(VECTOR_RING_SIZE, 1);
    fill_until_drop(&mut frozen_drops);
    frozen_drops.freeze();
    v.push(Vector {
        name: "frozen_after_drops",
        about: "drops after the last record are final once FROZEN: reported as lost",
        image: frozen_drops.image,
    });

    let mut reinit = frozen;
    reinit.reinit();
    produce(&mut reinit, 16);
    produce(&mut reinit, 16);
    v.push(Vector {
        name: "reinit_epoch",
        about: "re-initialised after FROZEN: epoch 2, seq restarts at 0",
        image: reinit.image,
    });

    let mut minor = RefRing::new(VECTOR_RING_SIZE, 1);
    produce(&mut minor, 24);
    let mut hdr = minor.hdr();
    hdr.version_minor = 7.into();
    hdr.flags = (1u32 << 9).into();
    minor.set_hdr(&hdr);
    v.push(Vector {
        name: "newer_minor_unknown_flag",
        about: "minor 7 and unknown flag bit 9: accepted, flag reported",
        image: minor.image,
    });

    let mut magic = RefRing::new(VECTOR_RING_SIZE, 1);
    let mut hdr = magic.hdr();
    hdr.magic = 0xdead_beef.into();
    magic.set_hdr(&hdr);
    v.push(Vector {
        name: "bad_magic",
        about: "wrong magic: the consumer aborts",
        image: magic.image,
    });

    let mut major = RefRing::new(VECTOR_RING_SIZE, 1);
    let mut hdr = major.hdr();
    hdr.version_major = 2.into();
    major.set_hdr(&hdr);
    v.push(Vector {
        name: "too_new_major",
        about: "major 2: the consumer aborts",
        image: major.image,
    });

    let mut lying = RefRing::new(VECTOR_RING_SIZE, 1);
    produce(&mut lying, 40);
    let data = HMB_RING_HDR_SIZE as usize;
    lying.image[data..data + 4].copy_from_slice(&5000u32.to_le_bytes());
    v.push(Vector {
        name: "hostile_length",
        about: "a record claiming 5000 payload bytes: rejected",
        image: lying.image,
    });

    let mut backwards = RefRing::new(VECTOR_RING_SIZE, 1);
    produce(&mut backwards, 40);
    backwards.publish_tail(72);
    let mut hdr = backwards.hdr();
    hdr.head = 8.into();
    backwards.set_hdr(&hdr);
    v.push(Vector {
        name: "head_behind_tail",
        about: "head behind tail: rejected",
        image: backwards.image,
    });
    v
}

/// The expected-decoding JSON of a vector.
pub fn expected_json(vector: &Vector) -> String {
    let outcome = match decode(&vector.image) {
        Ok(d) => Outcome::Ok(d),
        Err(e) => Outcome::Error(e.to_string()),
    };
    let mut s = serde_json::to_string_pretty(&Expected {
        about: vector.about,
        outcome,
    })
    .expect("serialisable");
    s.push('\n');
    s
}

/// Write every vector into `dir` as NAME.ring and NAME.json.
pub fn write_all(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for vector in all() {
        std::fs::write(dir.join(format!("{}.ring", vector.name)), &vector.image)?;
        std::fs::write(dir.join(format!("{}.json", vector.name)), expected_json(&vector))?;
    }
    Ok(())
}
