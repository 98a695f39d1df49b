//! `export pccx` checked against pccx-lab's own reader: its structs
//! (pccxai/pccx-lab `crates/core/src/trace.rs` and `pccx_format.rs`, as of
//! their current main) mirrored here with serde, decoded with the real
//! `bincode` 1.3 crate as pccx-lab's `NpuTrace::from_payload` does, and its
//! `PccxFile::read` procedure step for step. Nothing here uses the `pccx`
//! crate, so a mistake in our encoder cannot hide behind the same mistake
//! in our decoder.

#[path = "common/synth.rs"]
mod synth;

use std::path::Path;
use std::process::Command;

use hmb_firmware_model::Workload;
use serde::{Deserialize, Serialize};
use synth::{write_trace, SynthSpec};

// --- pccx-lab crates/core/src/typed.rs: #[serde(transparent)] newtypes ---
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
struct CycleCount(u64);
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
struct CoreId(u32);

// --- pccx-lab crates/core/src/trace.rs ---
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NpuEvent {
    core_id: CoreId,
    start_cycle: CycleCount,
    duration: CycleCount,
    event_type: String,
    #[serde(default)]
    api_name: Option<String>,
}
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct NpuTrace {
    total_cycles: u64,
    events: Vec<NpuEvent>,
}

// --- pccx-lab crates/core/src/pccx_format.rs ---
#[derive(Debug, Serialize, Deserialize, Default, Clone)]
struct ArchConfig {
    mac_dims: (u32, u32),
    isa_version: String,
    #[serde(default)]
    peak_tops: f64,
}
#[derive(Debug, Serialize, Deserialize, Default, Clone)]
struct TraceConfig {
    cycles: u64,
    cores: u32,
    #[serde(default = "default_clock_mhz")]
    clock_mhz: u32,
}
fn default_clock_mhz() -> u32 {
    1000
}
#[derive(Debug, Serialize, Deserialize, Default, Clone)]
struct PayloadConfig {
    encoding: String,
    byte_length: u64,
    #[serde(default)]
    checksum_fnv64: Option<u64>,
}
#[derive(Debug, Serialize, Deserialize, Default, Clone)]
struct PccxHeader {
    pccx_lab_version: String,
    #[serde(default)]
    arch: ArchConfig,
    #[serde(default)]
    trace: TraceConfig,
    #[serde(default)]
    payload: PayloadConfig,
    #[serde(default)]
    format_minor: u8,
}

fn fnv1a_64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x00000100000001b3)
    })
}

/// pccx-lab's `PccxFile::read` (major must be 1, JSON header, payload of
/// `byte_length` bytes), plus the checks it only warns about, as asserts.
fn lab_read(bytes: &[u8]) -> (PccxHeader, Vec<u8>) {
    assert_eq!(&bytes[..4], b"PCCX");
    assert_eq!(bytes[4], 0x01, "major");
    let hlen = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
    let header: PccxHeader = serde_json::from_slice(&bytes[16..16 + hlen]).expect("pccx-lab parses the header");
    let payload = bytes[16 + hlen..16 + hlen + header.payload.byte_length as usize].to_vec();
    assert_eq!(16 + hlen + payload.len(), bytes.len(), "no trailing bytes");
    assert_eq!(header.payload.checksum_fnv64, Some(fnv1a_64(&payload)));
    (header, payload)
}

fn export(dir: &Path, trace: &str, out: &str, extra: &[&str]) {
    let st = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["export", "pccx", trace, "-o", out])
        .args(extra)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", String::from_utf8_lossy(&st.stderr));
}

fn npu_records(dir: &Path) -> Vec<NpuEvent> {
    let bytes = std::fs::read(dir.join("npu.bin")).unwrap();
    let names = [
        "UNKNOWN",
        "MAC_COMPUTE",
        "DMA_READ",
        "DMA_WRITE",
        "SYSTOLIC_STALL",
        "BARRIER_SYNC",
    ];
    hmb_trace_file::SliceReader::new(&bytes)
        .unwrap()
        .map(|i| {
            let p = i.unwrap().payload.to_vec();
            let u64_at = |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().unwrap());
            NpuEvent {
                core_id: CoreId(u32::from_le_bytes(p[0..4].try_into().unwrap())),
                start_cycle: CycleCount(u64_at(4)),
                duration: CycleCount(u64_at(12)),
                event_type: names[u32::from_le_bytes(p[20..24].try_into().unwrap()) as usize].to_string(),
                api_name: None,
            }
        })
        .collect()
}

/// The default export is what pccx-lab's `NpuTrace::from_payload` reads:
/// the npu workload's events, exactly, stably sorted by start cycle.
#[test]
fn pccx_lab_decodes_the_default_export() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(
        std::fs::File::create(dir.path().join("npu.bin")).unwrap(),
        &SynthSpec::simple(Workload::Npu, 9, 3000),
    )
    .unwrap();
    export(dir.path(), "npu.bin", "npu.pccx", &["--encoding", "bincode"]);
    let (header, payload) = lab_read(&std::fs::read(dir.path().join("npu.pccx")).unwrap());
    assert_eq!(header.payload.encoding, "bincode");
    let trace: NpuTrace = bincode::deserialize(&payload).expect("pccx-lab decodes the payload");
    // bincode::deserialize ignores trailing bytes; re-encoding shows there are none.
    assert_eq!(bincode::serialize(&trace).unwrap(), payload);
    let mut want = npu_records(dir.path());
    want.sort_by_key(|e| e.start_cycle); // stable: ties keep trace order
    assert_eq!(trace.events, want);
    let end = want.iter().map(|e| e.start_cycle.0 + e.duration.0).max().unwrap();
    assert_eq!(
        (trace.total_cycles, header.trace.cycles, header.trace.cores),
        (end, end, 4)
    );
    // The unsorted trace really has inversions, so the sort is tested.
    assert!(npu_records(dir.path())
        .windows(2)
        .any(|w| w[1].start_cycle < w[0].start_cycle));
}

/// The seed layout stays available and decodes with the seed's struct; the
/// flatbuf option is sorted too (pccx-lab's viewport binary-searches it).
#[test]
fn seed_layout_and_flatbuf_options() {
    #[derive(Debug, PartialEq, Deserialize, Serialize)]
    struct SeedEvent {
        core_id: u32,
        start_cycle: u64,
        duration: u64,
        event_type: String,
    }
    #[derive(Debug, PartialEq, Deserialize, Serialize)]
    struct SeedTrace {
        total_cycles: u64,
        events: Vec<SeedEvent>,
    }
    let dir = tempfile::tempdir().unwrap();
    write_trace(
        std::fs::File::create(dir.path().join("npu.bin")).unwrap(),
        &SynthSpec::simple(Workload::Npu, 4, 500),
    )
    .unwrap();
    let mut want = npu_records(dir.path());
    want.sort_by_key(|e| e.start_cycle);

    export(dir.path(), "npu.bin", "seed.pccx", &["--encoding", "bincode-seed"]);
    let (_, payload) = lab_read(&std::fs::read(dir.path().join("seed.pccx")).unwrap());
    let seed: SeedTrace = bincode::deserialize(&payload).unwrap();
    assert_eq!(bincode::serialize(&seed).unwrap(), payload);
    let got: Vec<(u32, u64, u64, String)> = seed
        .events
        .into_iter()
        .map(|e| (e.core_id, e.start_cycle, e.duration, e.event_type))
        .collect();
    let exp: Vec<(u32, u64, u64, String)> = want
        .iter()
        .map(|e| (e.core_id.0, e.start_cycle.0, e.duration.0, e.event_type.clone()))
        .collect();
    assert_eq!(got, exp);

    export(dir.path(), "npu.bin", "flat.pccx", &["--encoding", "flatbuf"]);
    let (header, payload) = lab_read(&std::fs::read(dir.path().join("flat.pccx")).unwrap());
    assert_eq!(header.payload.encoding, "flatbuf");
    let starts: Vec<u64> = payload
        .chunks_exact(24)
        .map(|c| u64::from_le_bytes(c[4..12].try_into().unwrap()))
        .collect();
    assert_eq!(starts, exp.iter().map(|e| e.1).collect::<Vec<_>>());
}

/// The causal ssd workload exports with every pair matched, and pccx-lab
/// reads it sorted.
#[test]
fn causal_ssd_export_pairs_everything() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(
        std::fs::File::create(dir.path().join("ssd.bin")).unwrap(),
        &SynthSpec::simple(Workload::SsdCausal, 3, 20_000),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["export", "pccx", "ssd.bin", "-o", "ssd.pccx", "--encoding", "bincode"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success());
    // Only the commands and GC still running when the trace ends are open.
    let line = text.lines().find(|l| l.starts_with("pairs:")).unwrap();
    let nums: Vec<u64> = line
        .split(' ')
        .filter_map(|w| w.trim_start_matches('(').parse().ok())
        .collect();
    assert_eq!(nums[0], 0, "no end without a begin: {line}");
    assert!(
        nums[2] <= 64 + 2,
        "at most the in-flight commands and one GC stay open: {line}"
    );
    let (_, payload) = lab_read(&std::fs::read(dir.path().join("ssd.pccx")).unwrap());
    let trace: NpuTrace = bincode::deserialize(&payload).unwrap();
    assert!(trace.events.len() > 10_000);
    assert!(trace.events.windows(2).all(|w| w[0].start_cycle <= w[1].start_cycle));
}
