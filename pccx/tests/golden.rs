//! Golden .pccx files for every rule of docs/pccx.md, made by the
//! independent writer in `support/`. Each file is read by both readers, in
//! lenient and strict mode, and must give the recorded outcome.
//! `PCCX_UPDATE_GOLDEN=1 cargo test -p pccx --test golden` rewrites them.

mod support;

use std::path::PathBuf;

use pccx::*;
use support::*;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Reads; `events` is the decoded event count (None: raw/unknown),
    /// `checksum` is "match" | "absent" | "mismatch", `warnings` counted.
    Good {
        events: Option<u64>,
        checksum: &'static str,
        warnings: usize,
    },
    /// Fails with an error whose message contains this text.
    Bad(&'static str),
}
use Expect::{Bad, Good};

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    lenient: Expect,
    strict: Expect,
}

fn case(name: &'static str, bytes: Vec<u8>, lenient: Expect, strict: Expect) -> Case {
    Case {
        name,
        bytes,
        lenient,
        strict,
    }
}

fn cases() -> Vec<Case> {
    let flat3 = flat(&[(0, 0, 10, 1), (1, 5, 20, 2), (2, 30, 1, 99)]);
    let lab_trace = sample_lab_trace();
    let bin = bincode::serialize(&lab_trace).unwrap();
    let v2 = LabNpuTraceV2 {
        total_cycles: 10,
        events: vec![
            LabEventV2 {
                core_id: 1,
                start_cycle: 0,
                duration: 5,
                event_type: "API_CALL".into(),
                api_name: Some("uca_init".into()),
            },
            LabEventV2 {
                core_id: 1,
                start_cycle: 5,
                duration: 5,
                event_type: "MAC_COMPUTE".into(),
                api_name: None,
            },
        ],
    };
    let bin_v2 = bincode::serialize(&v2).unwrap();
    let ok = |events, checksum, warnings| Good {
        events,
        checksum,
        warnings,
    };
    let min_header = |payload_json: &str| format!(r#"{{"pccx_lab_version":"t","format_minor":1{payload_json}}}"#);
    let v = vec![
        case(
            "lab_shaped_bincode",
            lab_write(&lab_header("bincode", &bin, 4800), &bin),
            ok(Some(4), "match", 0),
            ok(Some(4), "match", 0),
        ),
        case(
            "lab_shaped_flatbuf",
            lab_write(&lab_header("flatbuf", &flat3, 31), &flat3),
            ok(Some(3), "match", 0),
            ok(Some(3), "match", 0),
        ),
        case(
            "lab_api_name_bincode",
            lab_write(&lab_header("bincode", &bin_v2, 10), &bin_v2),
            ok(Some(2), "match", 0),
            ok(Some(2), "match", 0),
        ),
        case(
            "checksum_hex_string",
            with_json(
                &min_header(&format!(
                    r#","payload":{{"encoding":"flatbuf","byte_length":72,"checksum_fnv64":"{:#018x}"}}"#,
                    fnv(&flat3)
                )),
                &flat3,
            ),
            ok(Some(3), "match", 0),
            ok(Some(3), "match", 0),
        ),
        case(
            "checksum_null",
            with_json(
                &min_header(r#","payload":{"encoding":"flatbuf","byte_length":72,"checksum_fnv64":null}"#),
                &flat3,
            ),
            ok(Some(3), "absent", 0),
            ok(Some(3), "absent", 0),
        ),
        case(
            "checksum_mismatch",
            with_json(
                &min_header(r#","payload":{"encoding":"flatbuf","byte_length":72,"checksum_fnv64":12345}"#),
                &flat3,
            ),
            ok(Some(3), "mismatch", 1),
            Bad("checksum mismatch"),
        ),
        // A missing payload object means encoding "" (unknown) and format_minor 0
        // (differs from the preamble's 1): two warnings.
        case(
            "only_version_field",
            with_json(r#"{"pccx_lab_version":"x"}"#, &[]),
            ok(None, "absent", 2),
            Bad("encoding"),
        ),
        case(
            "unknown_fields_and_newer_minor",
            {
                let json = r#"{"pccx_lab_version":"x","future":{"a":[1,2]},"format_minor":7,"payload":{"encoding":"raw","byte_length":3,"checksum_fnv64":null,"zstd":true}}"#;
                raw(1, 7, [0, 0], json.len() as u64, json.as_bytes(), b"abc")
            },
            ok(None, "absent", 1),
            ok(None, "absent", 1),
        ),
        case(
            "major_2",
            raw(2, 0, [0, 0], 2, b"{}", b""),
            Bad("major version 2"),
            Bad("major version 2"),
        ),
        case(
            "bad_magic",
            b"PCCY\x01\x01\0\0\x02\0\0\0\0\0\0\0{}".to_vec(),
            Bad("magic"),
            Bad("magic"),
        ),
        case(
            "header_len_2_pow_60",
            raw(1, 1, [0, 0], 1 << 60, b"{}", b""),
            Bad("exceeds the limit"),
            Bad("exceeds the limit"),
        ),
        case(
            "payload_len_2_pow_60",
            with_json(
                &min_header(r#","payload":{"encoding":"raw","byte_length":1152921504606846976}"#),
                b"",
            ),
            Bad("payload length 1152921504606846976 exceeds"),
            Bad("payload length 1152921504606846976 exceeds"),
        ),
        case(
            "truncated_preamble",
            b"PCCX\x01\x01\0\0\x02\0".to_vec(),
            Bad("truncated"),
            Bad("truncated"),
        ),
        case(
            "truncated_header",
            raw(1, 1, [0, 0], 100, b"{\"pccx", b""),
            Bad("truncated file: JSON header"),
            Bad("truncated file: JSON header"),
        ),
        case(
            "truncated_payload",
            with_json(
                &min_header(r#","payload":{"encoding":"flatbuf","byte_length":72}"#),
                &flat3[..50],
            ),
            Bad("truncated file: payload needs 72 bytes, only 50"),
            Bad("truncated file: payload needs 72 bytes, only 50"),
        ),
        case(
            "trailing_bytes",
            with_json(
                &min_header(r#","payload":{"encoding":"flatbuf","byte_length":48}"#),
                &flat3,
            ),
            Bad("24 trailing bytes"),
            Bad("24 trailing bytes"),
        ),
        case(
            "invalid_utf8",
            raw(1, 1, [0, 0], 4, b"{\xff\xfe}", b""),
            Bad("not valid UTF-8"),
            Bad("not valid UTF-8"),
        ),
        case(
            "json_array",
            with_json("[1,2,3]", b""),
            Bad("not a JSON object"),
            Bad("not a JSON object"),
        ),
        case(
            "json_string",
            with_json("\"PCCX\"", b""),
            Bad("not a JSON object"),
            Bad("not a JSON object"),
        ),
        case(
            "json_broken",
            with_json("{\"pccx_lab_version\":", b""),
            Bad("JSON header is invalid"),
            Bad("JSON header is invalid"),
        ),
        case(
            "missing_version",
            with_json("{\"arch\":{\"mac_dims\":[1,1],\"isa_version\":\"1\"}}", b""),
            Bad("pccx_lab_version"),
            Bad("pccx_lab_version"),
        ),
        case(
            "reserved_nonzero",
            {
                let json = min_header(r#","payload":{"encoding":"raw","byte_length":0}"#);
                raw(1, 1, [0xAA, 0], json.len() as u64, json.as_bytes(), b"")
            },
            ok(None, "absent", 1),
            Bad("reserved bytes"),
        ),
        case(
            "flatbuf_not_multiple_of_24",
            with_json(
                &min_header(r#","payload":{"encoding":"flatbuf","byte_length":25}"#),
                &[0u8; 25],
            ),
            Bad("not a whole number of 24-byte events"),
            Bad("not a whole number of 24-byte events"),
        ),
        case(
            "bincode_count_too_large",
            {
                let mut p = 5u64.to_le_bytes().to_vec();
                p.extend_from_slice(&u64::MAX.to_le_bytes());
                with_json(
                    &min_header(&format!(
                        r#","payload":{{"encoding":"bincode","byte_length":{}}}"#,
                        p.len()
                    )),
                    &p,
                )
            },
            Bad("events cannot fit"),
            Bad("events cannot fit"),
        ),
        case(
            "bincode_trailing_garbage",
            {
                let mut p = bin.clone();
                p.extend_from_slice(&[7, 7, 7]);
                with_json(
                    &min_header(&format!(
                        r#","payload":{{"encoding":"bincode","byte_length":{}}}"#,
                        p.len()
                    )),
                    &p,
                )
            },
            Bad("bytes after the last event"),
            Bad("bytes after the last event"),
        ),
        case(
            "unknown_encoding",
            with_json(&min_header(r#","payload":{"encoding":"zstd","byte_length":2}"#), b"hi"),
            ok(None, "absent", 1),
            Bad("zstd"),
        ),
        case(
            "empty_flatbuf",
            with_json(
                &min_header(
                    r#","payload":{"encoding":"flatbuf","byte_length":0,"checksum_fnv64":14695981039346656037}"#,
                ),
                b"",
            ),
            ok(Some(0), "match", 0),
            ok(Some(0), "match", 0),
        ),
    ];
    v
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Read a file the way `pccx verify` does: open, then decode the payload.
fn outcome_mapped(path: &std::path::Path, strict: bool) -> Result<(Option<u64>, ChecksumStatus, usize), String> {
    let opts = ReadOptions {
        strict,
        ..Default::default()
    };
    let f = MappedPccx::open(path, &opts).map_err(|e| e.to_string())?;
    let events = f.check_payload().map_err(|e| e.to_string())?;
    Ok((events, f.verified.checksum, f.verified.warnings.len()))
}

fn outcome_stream(bytes: &[u8], strict: bool) -> Result<(Option<u64>, ChecksumStatus, usize), String> {
    let opts = ReadOptions {
        strict,
        ..Default::default()
    };
    let f = PccxFile::read_from(bytes, &opts).map_err(|e| e.to_string())?;
    let events = f.check_payload().map_err(|e| e.to_string())?;
    Ok((events, f.verified.checksum, f.verified.warnings.len()))
}

fn check(name: &str, mode: &str, got: Result<(Option<u64>, ChecksumStatus, usize), String>, want: Expect) {
    match (got, want) {
        (
            Ok((events, checksum, warnings)),
            Good {
                events: we,
                checksum: wc,
                warnings: ww,
            },
        ) => {
            let c = match checksum {
                ChecksumStatus::Match(_) => "match",
                ChecksumStatus::Absent => "absent",
                ChecksumStatus::Mismatch { .. } => "mismatch",
                ChecksumStatus::NotChecked => "not-checked",
            };
            assert_eq!((events, c, warnings), (we, wc, ww), "{name} ({mode})");
        }
        (Err(msg), Bad(text)) => assert!(msg.contains(text), "{name} ({mode}): error {msg:?} lacks {text:?}"),
        (got, want) => panic!("{name} ({mode}): got {got:?}, want {want:?}"),
    }
}

#[test]
fn golden_files_are_current_and_read_as_recorded() {
    let dir = golden_dir();
    let update = std::env::var_os("PCCX_UPDATE_GOLDEN").is_some();
    for c in cases() {
        let path = dir.join(format!("{}.pccx", c.name));
        if update {
            std::fs::write(&path, &c.bytes).unwrap();
        }
        let on_disk = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(on_disk, c.bytes, "{} differs from its generator", c.name);
        for strict in [false, true] {
            let want = if strict { c.strict } else { c.lenient };
            let mode = if strict { "strict" } else { "lenient" };
            check(c.name, mode, outcome_mapped(&path, strict), want);
            check(c.name, mode, outcome_stream(&on_disk, strict), want);
        }
    }
}

#[test]
fn golden_bincode_payload_matches_bincode_1_3_and_our_encoder() {
    let lab = sample_lab_trace();
    let theirs = bincode::serialize(&lab).unwrap();
    let ours = NpuTrace {
        total_cycles: lab.total_cycles,
        events: lab
            .events
            .iter()
            .map(|e| NpuEvent {
                core_id: e.core_id,
                start_cycle: e.start_cycle,
                duration: e.duration,
                event_type: e.event_type.clone(),
                api_name: None,
            })
            .collect(),
    };
    let encoded = ours.encode(BincodeLayout::Seed).unwrap();
    assert_eq!(encoded, theirs);
    let path = golden_dir().join("npu_trace_seed.bincode");
    if std::env::var_os("PCCX_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &encoded).unwrap();
    }
    assert_eq!(std::fs::read(&path).unwrap(), encoded, "golden bincode bytes changed");
    // The layout spelled out: total_cycles, count, then the first event.
    assert_eq!(&encoded[0..8], &4800u64.to_le_bytes());
    assert_eq!(&encoded[8..16], &4u64.to_le_bytes());
    assert_eq!(&encoded[16..20], &0u32.to_le_bytes());
    assert_eq!(&encoded[36..44], &8u64.to_le_bytes());
    assert_eq!(&encoded[44..52], b"DMA_READ");
    let (back, layout) = NpuTrace::decode(&encoded).unwrap();
    assert_eq!((back, layout), (ours.clone(), BincodeLayout::Seed));
    let lab_back: LabNpuTrace = bincode::deserialize(&encoded).unwrap();
    assert_eq!(lab_back, lab);

    // The api_name layout against bincode 1.3 too.
    let mut named = ours;
    named.events[1].api_name = Some("uca_submit_cmd".into());
    let v2 = named.encode(BincodeLayout::ApiName).unwrap();
    let lab_v2: LabNpuTraceV2 = bincode::deserialize(&v2).unwrap();
    assert_eq!(bincode::serialize(&lab_v2).unwrap(), v2);
    assert_eq!(NpuTrace::decode(&v2).unwrap(), (named.clone(), BincodeLayout::ApiName));
    assert!(named.encode(BincodeLayout::Seed).is_err());
}

/// The container (preamble + JSON header) is byte-identical to what
/// pccx-lab's `PccxFile::write` produces for the same header values and
/// payload bytes. The payload here is current pccx-lab's `NpuTrace` (with
/// `api_name`), which is what its generator writes today.
#[test]
fn our_writer_is_byte_identical_to_pccx_labs() {
    let seed = sample_lab_trace();
    let lab = LabNpuTraceV2 {
        total_cycles: seed.total_cycles,
        events: seed
            .events
            .iter()
            .map(|e| LabEventV2 {
                core_id: e.core_id,
                start_cycle: e.start_cycle,
                duration: e.duration,
                event_type: e.event_type.clone(),
                api_name: None,
            })
            .collect(),
    };
    let payload = bincode::serialize(&lab).unwrap();
    // The seed's four-field payload is not what current pccx-lab decodes.
    let seed_payload = bincode::serialize(&seed).unwrap();
    assert!(bincode::deserialize::<LabNpuTraceV2>(&seed_payload).map_or(true, |t| t != lab));
    let lab_bytes = lab_write(&lab_header("bincode", &payload, 4800), &payload);
    let header = PccxHeader {
        pccx_lab_version: "v0.4.0-contention-aware".into(),
        arch: ArchConfig {
            mac_dims: (32, 32),
            isa_version: "1.1".into(),
            peak_tops: 65.54,
        },
        trace: TraceConfig {
            cycles: 4800,
            cores: 32,
            clock_mhz: 1000,
        },
        payload: PayloadConfig {
            encoding: "bincode".into(),
            ..Default::default()
        },
        format_minor: 0,
    };
    let mut ours = Vec::new();
    write_pccx(&mut ours, &header, &payload).unwrap();
    assert_eq!(ours, lab_bytes);
    // And pccx-lab's structs read what we wrote.
    let hlen = u64::from_le_bytes(ours[8..16].try_into().unwrap()) as usize;
    let parsed: LabHeader = serde_json::from_slice(&ours[16..16 + hlen]).unwrap();
    assert_eq!(parsed.payload.checksum_fnv64, Some(fnv(&payload)));
}

#[test]
fn flatbuf_mmap_reads_in_place() {
    let events: Vec<FlatEvent> = (0..1000u32)
        .map(|i| FlatEvent {
            core_id: i % 32,
            start_cycle: i as u64 * 10,
            duration: 7,
            event_type_id: i % 8,
        })
        .collect();
    let payload = pccx::flatbuf::encode_events(&events);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.pccx");
    let header = PccxHeader {
        pccx_lab_version: "hmb".into(),
        payload: PayloadConfig {
            encoding: "flatbuf".into(),
            ..Default::default()
        },
        ..Default::default()
    };
    write_pccx(std::fs::File::create(&path).unwrap(), &header, &payload).unwrap();
    let f = MappedPccx::open(
        &path,
        &ReadOptions {
            strict: true,
            ..Default::default()
        },
    )
    .unwrap();
    let flat = f.flat_events().unwrap();
    assert_eq!(flat.iter().collect::<Vec<_>>(), events);
    // Zero-copy: the events slice points into the map.
    let p = f.payload().as_ptr() as usize;
    let mapped = f.payload().len();
    assert!(p != payload.as_ptr() as usize && mapped == payload.len());
    assert_eq!(flat.get(999).unwrap().event_type_id, 7);
    assert_eq!(flat.get(999).unwrap().type_name(), None, "id 7 is unknown but kept");
}
