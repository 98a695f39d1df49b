//! `export ctf` and `export parquet` stream: their peak memory does not
//! grow with the trace. Each child's own peak RSS comes from wait4(2).

#[path = "common/synth.rs"]
mod synth;

use std::process::{Command, Stdio};

use hmb_firmware_model::Workload;
use synth::{write_trace, SynthSpec};

/// Run the export reading the trace from stdin; its peak RSS in KiB.
// The child is reaped by wait4 (which also gives its rusage), not wait().
#[allow(clippy::zombie_processes)]
fn export_from_stdin(dir: &std::path::Path, trace: &str, format: &str, out: &str) -> i64 {
    let child = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["export", format, "-", "-o", out])
        .stdin(std::fs::File::open(dir.join(trace)).unwrap())
        .stdout(Stdio::null())
        .current_dir(dir)
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: wait4 on our own child; it only writes the two out-params.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as libc::pid_t);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "export {format} failed"
    );
    ru.ru_maxrss
}

fn size(path: std::path::PathBuf) -> u64 {
    if path.is_dir() {
        std::fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    } else {
        std::fs::metadata(path).unwrap().len()
    }
}

#[test]
fn memory_stays_flat_as_the_trace_grows() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Both sizes beyond two Parquet row groups (122,880 rows each), whose
    // buffer is the export's fixed cost.
    for (name, n) in [("small.bin", 250_000u64), ("big.bin", 750_000)] {
        write_trace(
            std::fs::File::create(d.join(name)).unwrap(),
            &SynthSpec::simple(Workload::SsdCausal, 2, n),
        )
        .unwrap();
    }
    let big_len = size(d.join("big.bin"));
    for (format, ext) in [("ctf", "ctf"), ("parquet", "parquet")] {
        let small = export_from_stdin(d, "small.bin", format, &format!("small.{ext}"));
        let big = export_from_stdin(d, "big.bin", format, &format!("big.{ext}"));
        let out_len = size(d.join(format!("big.{ext}")));
        // 3x the records in at most 4 MiB more.
        assert!(
            big <= small + 4 * 1024,
            "{format}: peak RSS {small} KiB -> {big} KiB for {big_len} bytes in, {out_len} out"
        );
        assert!(out_len > big_len / 2, "{format}: the big export really was written");
    }
}
