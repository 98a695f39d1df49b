//! `export perfetto` streams: its peak memory does not grow with the trace.
//! Own test binary, so the children's peak RSS (getrusage) is only ours.

#[path = "common/synth.rs"]
mod synth;

use std::process::{Command, Stdio};

use hmb_firmware_model::Workload;
use synth::{write_trace, SynthSpec};

/// Peak RSS in KiB of all children waited for so far.
fn children_max_rss_kib() -> i64 {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) }, 0);
    ru.ru_maxrss
}

fn export_from_stdin(dir: &std::path::Path, trace: &str) -> i64 {
    let st = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["export", "perfetto", "-", "-o", "out.pftrace"])
        .stdin(std::fs::File::open(dir.join(trace)).unwrap())
        .stdout(Stdio::null())
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(st.success());
    children_max_rss_kib()
}

#[test]
fn memory_stays_flat_as_the_trace_grows() {
    let dir = tempfile::tempdir().unwrap();
    for (name, n) in [("small.bin", 20_000u64), ("big.bin", 400_000)] {
        write_trace(
            std::fs::File::create(dir.path().join(name)).unwrap(),
            &SynthSpec::simple(Workload::SsdCausal, 2, n),
        )
        .unwrap();
    }
    let small = export_from_stdin(dir.path(), "small.bin");
    let big = export_from_stdin(dir.path(), "big.bin");
    let big_len = std::fs::metadata(dir.path().join("big.bin")).unwrap().len();
    let out_len = std::fs::metadata(dir.path().join("out.pftrace")).unwrap().len();
    // 20x the records (about 20 MB in, more out) in at most 8 MiB more.
    assert!(
        big <= small + 8 * 1024,
        "peak RSS {small} KiB -> {big} KiB for {big_len} bytes in, {out_len} out"
    );
    assert!(out_len > big_len / 2, "the big export really was written");
}
