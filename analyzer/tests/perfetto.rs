//! `export perfetto` checked by an independent decoder: Perfetto's own
//! Python bindings (`perfetto_trace_pb2` from the `perfetto` package, with
//! `protobuf`), installed by this test into a venv under the target
//! directory. `tests/perfetto_check.py` decodes the file and reports its
//! tracks, slices, instants and structural errors; here they are compared
//! with what `stats` and `gaps` say about the same trace.

#[path = "common/synth.rs"]
mod synth;
#[path = "common/venv.rs"]
mod venv;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use hmb_firmware_model::Workload;
use serde_json::Value;
use synth::{write_trace, Drop, EpochSpec, SynthSpec};

/// Pinned so the check does not move under us.
const PY_PACKAGES: &[&str] = &["perfetto==0.59.1", "protobuf==7.36.2"];

fn venv_python() -> PathBuf {
    venv::venv_python("perfetto-venv", PY_PACKAGES)
}

fn analyze(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Export `trace` and decode it with the Python checker.
fn export_and_check(python: &Path, dir: &Path, trace: &str) -> (Value, String) {
    let out = format!("{trace}.pftrace");
    let summary = analyze(dir, &["export", "perfetto", trace, "-o", &out]);
    let checked = Command::new(python)
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perfetto_check.py"))
        .arg(dir.join(&out))
        .output()
        .unwrap();
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let v: Value = serde_json::from_slice(&checked.stdout).unwrap();
    assert_eq!(v["error_count"], 0, "structural errors: {}", v["errors"]);
    (v, summary)
}

fn records_by_opcode(dir: &Path, trace: &str) -> BTreeMap<String, u64> {
    let s: Value = serde_json::from_str(&analyze(dir, &["stats", "--json", trace])).unwrap();
    s["opcodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap().to_string(), o["records"].as_u64().unwrap()))
        .collect()
}

fn n(v: &Value, group: &str, name: &str) -> u64 {
    v[group][name].as_u64().unwrap_or(0)
}

/// Pair bookkeeping that holds on any trace: every begin record opens one
/// slice, and every end record either closes one or draws its own; every
/// span is a slice. What is missing is exactly what the exporter reported
/// as dropped over the lane limit (`summary`).
fn check_pairs(v: &Value, ops: &BTreeMap<String, u64>, summary: &str) {
    let dropped: u64 = summary
        .split("dropped: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|t| t.parse().ok())
        .expect("summary names the dropped slices");
    let op = |k: &str| ops.get(k).copied().unwrap_or(0);
    let begun = n(v, "slices", "read") + n(v, "slices", "write") + n(v, "slices", "flush");
    assert_eq!(begun, op("CMD_FETCH"), "one slice per fetch");
    let pairs = begun + n(v, "slices", "GC") + n(v, "slices", "WEAR_LEVEL");
    assert_eq!(pairs, op("CMD_FETCH") + op("GC_START") + op("WEAR_LEVEL"));
    let unterminated = v["unterminated"].as_u64().unwrap();
    let orphans = n(v, "slices", "CMD_COMPLETE (no begin)")
        + n(v, "slices", "GC_END (no begin)")
        + n(v, "slices", "WEAR_LEVEL_END (no begin)");
    let ends = op("CMD_COMPLETE") + op("GC_END") + op("WEAR_LEVEL_END");
    let mut missing = ends - (pairs - unterminated + orphans);
    for span in ["NAND_READ", "NAND_PROGRAM", "NAND_ERASE", "FTL_MAP_MISS"] {
        missing += op(span) - n(v, "slices", span);
    }
    assert_eq!(
        missing, dropped,
        "every end closes a slice or draws one, every span is one"
    );
    assert_eq!(n(v, "instants", "FTL_MAP_HIT"), op("FTL_MAP_HIT"));
}

#[test]
fn perfetto_export_decodes_and_matches_stats() {
    let python = venv_python();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();

    // The causal ssd workload, no drops: every pair matches, only the
    // commands still in flight at the end are closed there.
    write_trace(
        std::fs::File::create(d.join("causal.bin")).unwrap(),
        &SynthSpec::simple(Workload::SsdCausal, 11, 20_000),
    )
    .unwrap();
    let (v, summary) = export_and_check(&python, d, "causal.bin");
    let ops = records_by_opcode(d, "causal.bin");
    check_pairs(&v, &ops, &summary);
    assert_eq!(n(&v, "slices", "CMD_COMPLETE (no begin)"), 0);
    assert!(summary.contains("dropped: 0 slices"), "nothing dropped: {summary}");
    let unterminated = v["unterminated"].as_u64().unwrap();
    assert!(unterminated <= 8 * 8 + 2, "{unterminated} open at the end");
    assert!(
        summary.contains(&format!("pairs: {unterminated} closed unterminated")),
        "{summary}"
    );
    let names: Vec<&str> = v["track_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    for q in 0..8 {
        assert!(names.contains(&format!("submission queue {q}").as_str()));
        assert!(names.contains(&format!("submission queue {q} in flight").as_str()));
    }
    for t in [
        "NAND channel 0 die 0",
        "NAND channel 7 die 3",
        "FTL core 0",
        "records/s",
    ] {
        assert!(names.contains(&t), "{t} in {names:?}");
    }
    // The NAND slices sit on their die's track.
    assert!(v["slices_per_source"]["NAND channel 3 die 1"].as_u64().unwrap() > 0);
    assert!(v["counter_values"]["records/s"].as_u64().unwrap() > 0);

    // The independent ssd workload with drops, LOST markers, a frozen
    // epoch and a second epoch: markers and losses as instants, counts as
    // `gaps` reports them.
    let spec = SynthSpec {
        workload: Workload::Ssd,
        seed: 1,
        epochs: vec![
            EpochSpec {
                epoch: 3,
                ring_size: 1 << 16,
                seqs: 3000,
                drops: vec![
                    Drop {
                        first_seq: 100,
                        count: 40,
                        marked: true,
                    },
                    Drop {
                        first_seq: 900,
                        count: 7,
                        marked: false,
                    },
                    Drop {
                        first_seq: 2990,
                        count: 10,
                        marked: true,
                    },
                ],
                frozen: true,
            },
            EpochSpec {
                epoch: 4,
                ring_size: 1 << 17,
                seqs: 2000,
                drops: vec![Drop {
                    first_seq: 0,
                    count: 3,
                    marked: false,
                }],
                frozen: false,
            },
        ],
        start_ns: 5_000_000,
        step_ns: 2_000,
    };
    write_trace(std::fs::File::create(d.join("drops.bin")).unwrap(), &spec).unwrap();
    let (v, summary) = export_and_check(&python, d, "drops.bin");
    check_pairs(&v, &records_by_opcode(d, "drops.bin"), &summary);
    let gaps: Value = serde_json::from_str(&analyze(d, &["gaps", "--json", "drops.bin"])).unwrap();
    let (mut markers, mut marked, mut gap_n, mut gap_sum) = (0, 0, 0, 0);
    for l in gaps["losses"].as_array().unwrap() {
        let c = l["count"].as_u64().unwrap();
        if l["kind"] == "lost_marker" {
            markers += 1;
            marked += c;
        } else {
            gap_n += 1;
            gap_sum += c;
        }
    }
    assert_eq!(
        (n(&v, "instants", "LOST"), v["lost_sum"].as_u64().unwrap()),
        (markers, marked)
    );
    assert_eq!(
        (n(&v, "instants", "sequence gap"), v["gap_sum"].as_u64().unwrap()),
        (gap_n, gap_sum)
    );
    assert_eq!((markers, marked, gap_n, gap_sum), (2, 50, 2, 10));
    assert_eq!(n(&v, "instants", "FROZEN"), 1);
    assert_eq!(n(&v, "instants", "EPOCH"), 1);
    assert_eq!(
        n(&v, "counter_values", "lost records (total)"),
        markers + gap_n,
        "the drops counter moves at every loss"
    );

    // NPU events become slices of their pccx type on their core.
    write_trace(
        std::fs::File::create(d.join("npu.bin")).unwrap(),
        &SynthSpec::simple(Workload::Npu, 9, 2000),
    )
    .unwrap();
    let (v, _) = export_and_check(&python, d, "npu.bin");
    let total: u64 = v["slices"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(total, 2000);
    assert_eq!(
        n(&v, "slices", "MAC_COMPUTE"),
        records_by_opcode(d, "npu.bin")["MAC_COMPUTE"]
    );
    assert!(v["slices_per_source"]["NPU core 3"].as_u64().unwrap() > 0);
}

/// One record of the NVMe controller's trace, as hmb-nvme-trace lays it out (catalog
/// layouts: CMD_FETCH/CMD_COMPLETE, L2P_*, FLASH_*, FTL_GC_*).
struct NvmeRec {
    opcode: u16,
    ts: u64,
    source: u32,
    payload: Vec<u8>,
}

fn put(p: &mut [u8], at: usize, v: &[u8]) {
    p[at..at + v.len()].copy_from_slice(v);
}

fn fetch(ts: u64, qid: u16, cid: u16, nvme_opcode: u8) -> NvmeRec {
    let mut p = vec![0u8; 24];
    put(&mut p, 0, &qid.to_le_bytes());
    put(&mut p, 2, &cid.to_le_bytes());
    p[4] = nvme_opcode;
    put(&mut p, 8, &1u32.to_le_bytes());
    put(&mut p, 12, &8u32.to_le_bytes());
    NvmeRec {
        opcode: 0x0101,
        ts,
        source: qid.into(),
        payload: p,
    }
}

fn complete(ts: u64, qid: u16, cid: u16, latency: u32) -> NvmeRec {
    let mut p = vec![0u8; 16];
    put(&mut p, 0, &qid.to_le_bytes());
    put(&mut p, 2, &cid.to_le_bytes());
    put(&mut p, 8, &latency.to_le_bytes());
    NvmeRec {
        opcode: 0x0102,
        ts,
        source: qid.into(),
        payload: p,
    }
}

/// An FTL record's head: (qid, cid) of its command, or background (flags bit 0).
fn ftl_head(len: usize, cmd: Option<(u16, u16)>) -> Vec<u8> {
    let (qid, cid) = cmd.unwrap_or((0xFFFF, 0xFFFF));
    let mut p = vec![0u8; len];
    put(&mut p, 0, &qid.to_le_bytes());
    put(&mut p, 2, &cid.to_le_bytes());
    p[4] = if cmd.is_none() { 1 } else { 2 };
    p
}

fn l2p(opcode: u16, ts: u64, cmd: (u16, u16), map_page: u32) -> NvmeRec {
    let mut p = ftl_head(24, Some(cmd));
    put(&mut p, 8, &map_page.to_le_bytes());
    put(&mut p, 16, &(u64::from(map_page) * 4096).to_le_bytes());
    NvmeRec {
        opcode,
        ts,
        source: cmd.0.into(),
        payload: p,
    }
}

/// A NAND operation: (channel, die), modelled start after `ts` and latency.
fn flash(opcode: u16, ts: u64, cmd: Option<(u16, u16)>, at: (u8, u8), start: u32, latency: u32) -> NvmeRec {
    let mut p = ftl_head(32, cmd);
    (p[6], p[7]) = at;
    put(&mut p, 16, &start.to_le_bytes());
    put(&mut p, 20, &latency.to_le_bytes());
    NvmeRec {
        opcode,
        ts,
        source: cmd.map_or(0xFFFF, |c| c.0.into()),
        payload: p,
    }
}

fn gc(opcode: u16, ts: u64) -> NvmeRec {
    NvmeRec {
        opcode,
        ts,
        source: 0xFFFF,
        payload: ftl_head(16, None),
    }
}

fn write_nvme_trace(path: &Path, recs: &[NvmeRec]) {
    use hmb_trace_abi::hmb_record_hdr;
    use hmb_trace_file::{FileHeader, TraceWriter};
    let mut tw = TraceWriter::new(std::fs::File::create(path).unwrap(), &FileHeader::new(1, 0, 1 << 20, 1)).unwrap();
    for (seq, r) in recs.iter().enumerate() {
        let hdr = hmb_record_hdr {
            length: (r.payload.len() as u32).into(),
            opcode: r.opcode.into(),
            seq: (seq as u64).into(),
            timestamp_ns: r.ts.into(),
            source: r.source.into(),
            ..Default::default()
        };
        tw.write_record(&hdr, &r.payload).unwrap();
    }
    tw.flush().unwrap();
}

/// The NVMe controller's FTL records in the timeline: NAND operations are slices on
/// their die's track at their modelled time, the rest instants; each caused by a
/// command is linked to that command's slice by a flow that its fetch starts and its
/// completion ends, checked by Perfetto's own decoder; background work and records of
/// a command that is not open join no flow, and a command with no device event gets no
/// arrow.
#[test]
fn perfetto_export_links_device_events_to_their_command() {
    let python = venv_python();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (read_a, write_b) = ((1, 5), (1, 6));
    let recs = [
        fetch(1_000, 1, 5, 0x02),
        l2p(0x0702, 1_000, read_a, 3),                         // L2P_MISS
        flash(0x0711, 1_000, Some(read_a), (0, 0), 0, 55_000), // map page read
        l2p(0x0703, 1_000, read_a, 3),                         // L2P_FILL
        flash(0x0711, 1_000, Some(read_a), (1, 0), 55_000, 55_000),
        fetch(2_000, 1, 6, 0x01),
        l2p(0x0701, 2_000, write_b, 0), // L2P_HIT
        flash(0x0712, 2_000, Some(write_b), (2, 0), 0, 605_000),
        fetch(3_000, 2, 5, 0x02),
        complete(4_000, 2, 5, 1_000),
        gc(0x0721, 5_000),
        flash(0x0712, 5_000, None, (3, 1), 0, 605_000),
        flash(0x0713, 5_000, None, (3, 1), 605_000, 3_000_000),
        gc(0x0722, 5_000),
        flash(0x0711, 6_000, Some((3, 9)), (0, 1), 0, 55_000), // its command is not open
        complete(120_000, 1, 5, 119_000),
        complete(700_000, 1, 6, 698_000),
    ];
    write_nvme_trace(&d.join("nvme.bin"), &recs);
    let (v, summary) = export_and_check(&python, d, "nvme.bin");
    assert!(
        summary.contains("flows: 2 commands linked to 6 device events"),
        "{summary}"
    );
    assert_eq!(v["flows_ended"], 2, "the read and the write: {v}");
    assert_eq!(v["flow_steps_of_ended"], 5 + 3, "fetch + 4 events, fetch + 2 events");
    assert_eq!(
        v["flow_end_tracks"]["submission queue 1"], 2,
        "ended by the completions"
    );
    let named = |k: &str| v["flow_event_names"][k].as_u64().unwrap_or(0);
    assert_eq!(
        named("read"),
        2,
        "every fetch starts a flow (the one without events stays alone)"
    );
    assert_eq!(named("write"), 1);
    assert_eq!(
        (named("FLASH_READ"), named("FLASH_PROGRAM"), named("FLASH_ERASE")),
        (2, 1, 0),
        "background GC and the record of a command not open join no flow"
    );
    assert_eq!((named("L2P_MISS"), named("L2P_FILL"), named("L2P_HIT")), (1, 1, 1));
    // NAND operations are slices of their latency on their die's track.
    assert_eq!(n(&v, "slices", "FLASH_READ"), 3);
    assert_eq!(n(&v, "slices", "FLASH_PROGRAM"), 2);
    assert_eq!(n(&v, "slices", "FLASH_ERASE"), 1);
    assert_eq!(v["slices_per_source"]["NAND channel 3 die 1"], 2);
    assert_eq!(v["slices_per_source"]["NAND channel 1 die 0"], 1);
    assert_eq!(n(&v, "instants", "FTL_GC_START") + n(&v, "instants", "FTL_GC_END"), 2);
    assert_eq!(n(&v, "slices", "read") + n(&v, "slices", "write"), 3);
}
