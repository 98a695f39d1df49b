//! A trace inside a Telemetry log (`nvme telemetry-log` output): every
//! command reads it as the trace.bin it carries (info, stats, decode,
//! convert, gaps, report, export); `telemetry` prints its
//! header and extracts the stream; truncated and foreign logs get the
//! documented exit codes (docs/analyzer.md).

#[path = "common/synth.rs"]
mod synth;

use std::path::Path;
use std::process::{Command, Output};

use hmb_trace_file::TelemetryReason;

fn analyze(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(args)
        .arg("--no-progress")
        .current_dir(dir)
        .output()
        .unwrap()
}

/// `stream` framed as nvme-cli writes a Host-Initiated log: the 512-byte
/// header, then the data areas padded to whole blocks.
fn telemetry_log(stream: &[u8], generation: u8) -> Vec<u8> {
    let blocks = stream.len().div_ceil(512);
    let mut log = vec![0u8; 512 * (1 + blocks)];
    log[0] = 0x07;
    for at in [8, 10, 12] {
        log[at..at + 2].copy_from_slice(&(blocks as u16).to_le_bytes());
    }
    log[381] = generation;
    let reason = TelemetryReason {
        epoch: 3,
        head: 4096,
        tail: 1024,
        dropped: 2,
        records: 0,
        stream_bytes: stream.len() as u64,
    };
    log[384..512].copy_from_slice(&reason.encode());
    log[512..512 + stream.len()].copy_from_slice(stream);
    log
}

#[test]
fn every_command_reads_the_trace_inside_a_telemetry_log() {
    let dir = tempfile::tempdir().unwrap();
    let names = synth::write_fixtures(dir.path());
    for name in names {
        let stream = std::fs::read(dir.path().join(name)).unwrap();
        let tel = format!("{name}.telemetry");
        std::fs::write(dir.path().join(&tel), telemetry_log(&stream, 7)).unwrap();
        for cmd in [
            &["stats", "--json"][..],
            &["decode", "--payload"],
            &["convert", "--format", "jsonl"],
            &["gaps"],
        ] {
            let plain = analyze(dir.path(), &[cmd, &[name]].concat());
            let framed = analyze(dir.path(), &[cmd, &[tel.as_str()]].concat());
            assert_eq!(plain.status.code(), Some(0), "{cmd:?} {name}");
            assert_eq!(framed.status.code(), Some(0), "{cmd:?} {tel}");
            let text = |o: &Output| String::from_utf8_lossy(&o.stdout).replace(&tel, name);
            // The trace's name appears in some outputs: the framed one says
            // it is a telemetry log, the rest is identical.
            let framed_text = text(&framed).replace(" (telemetry log 07h, generation 7)", "");
            assert_eq!(
                framed_text,
                text(&plain),
                "{cmd:?}: {name} and its telemetry log differ"
            );
        }
        let info = analyze(dir.path(), &["info", &tel]);
        assert_eq!(info.status.code(), Some(0));
        assert!(String::from_utf8_lossy(&info.stdout).contains("telemetry log 07h, generation 7"));
    }
}

/// The commands that write a file (`report`, `export perfetto`) write the
/// same bytes for a trace and for its telemetry log (but for the name).
/// (`export ctf` names each export with a fresh UUID: not comparable.)
#[test]
fn report_and_export_read_a_telemetry_log_as_its_trace() {
    let dir = tempfile::tempdir().unwrap();
    let [name, ..] = synth::write_fixtures(dir.path());
    let stream = std::fs::read(dir.path().join(name)).unwrap();
    std::fs::write(dir.path().join("t.bin"), telemetry_log(&stream, 4)).unwrap();
    for (i, cmd) in [&["report"][..], &["export", "perfetto"]].iter().enumerate() {
        let mut outs = Vec::new();
        for (input, output) in [(name, format!("plain{i}.out")), ("t.bin", format!("framed{i}.out"))] {
            let output = output.as_str();
            let out = analyze(dir.path(), &[*cmd, &[input, "--output", output]].concat());
            assert_eq!(
                out.status.code(),
                Some(0),
                "{cmd:?} {input}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let bytes = std::fs::read(dir.path().join(output)).unwrap();
            outs.push(String::from_utf8_lossy(&bytes).into_owned());
        }
        let framed = outs[1]
            .replace(" (telemetry log 07h, generation 4)", "")
            .replace("t.bin", name);
        assert!(!outs[0].is_empty(), "{cmd:?} wrote nothing");
        assert!(
            framed == outs[0],
            "{cmd:?}: {name} and its telemetry log differ ({} and {} bytes)",
            outs[0].len(),
            framed.len()
        );
    }
}

#[test]
fn telemetry_prints_the_header_and_extracts_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let [name, ..] = synth::write_fixtures(dir.path());
    let stream = std::fs::read(dir.path().join(name)).unwrap();
    std::fs::write(dir.path().join("t.bin"), telemetry_log(&stream, 2)).unwrap();
    let out = analyze(dir.path(), &["--no-color", "telemetry", "t.bin", "--extract", "x.bin"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Host-Initiated (07h)"), "{text}");
    assert!(text.contains("host generation        2"), "{text}");
    assert!(
        text.contains("epoch 3, head 4,096, tail 1,024, 2 records dropped"),
        "{text}"
    );
    assert_eq!(std::fs::read(dir.path().join("x.bin")).unwrap(), stream);
}

#[test]
fn truncated_and_foreign_telemetry_logs_get_their_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let [name, ..] = synth::write_fixtures(dir.path());
    let log = telemetry_log(&std::fs::read(dir.path().join(name)).unwrap(), 1);
    std::fs::write(dir.path().join("cut.bin"), &log[..log.len() - 512]).unwrap();
    let mut foreign = log.clone();
    foreign[384..388].copy_from_slice(b"ACME");
    std::fs::write(dir.path().join("foreign.bin"), &foreign).unwrap();
    for (file, code, says) in [
        ("cut.bin", 5, "data area 3 ends at block"),
        ("foreign.bin", 4, "not an hmb-trace snapshot"),
    ] {
        for cmd in ["info", "telemetry"] {
            let out = analyze(dir.path(), &[cmd, file]);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(code), "{cmd} {file}: {err}");
            assert!(err.contains(says), "{cmd} {file}: {err}");
        }
    }
}
