//! Snapshots of every subcommand, run as the real binary on traces made by
//! the firmware model and the tracefile writer: drops with and without LOST
//! markers, a frozen epoch, a second epoch, a torn tail, a corrupt item, an
//! unknown version. Exit codes are part of each snapshot.

#[path = "common/synth.rs"]
mod synth;

use std::path::{Path, PathBuf};
use std::process::Command;

use hmb_firmware_model::Workload;
use rstest::rstest;
use synth::{write_trace, Drop, EpochSpec, SynthSpec};

struct Fixtures {
    dir: tempfile::TempDir,
}

fn drops_spec() -> SynthSpec {
    SynthSpec {
        workload: Workload::Ssd,
        seed: 1,
        epochs: vec![
            EpochSpec {
                epoch: 3,
                ring_size: 1 << 16,
                seqs: 60,
                drops: vec![
                    Drop {
                        first_seq: 10,
                        count: 4,
                        marked: true,
                    },
                    Drop {
                        first_seq: 20,
                        count: 2,
                        marked: false,
                    },
                    Drop {
                        first_seq: 57,
                        count: 3,
                        marked: true,
                    },
                ],
                frozen: true,
            },
            EpochSpec {
                epoch: 4,
                ring_size: 1 << 17,
                seqs: 40,
                drops: vec![Drop {
                    first_seq: 0,
                    count: 2,
                    marked: false,
                }],
                frozen: false,
            },
        ],
        start_ns: 5_000_000,
        step_ns: 2_000,
    }
}

impl Fixtures {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let f = Self { dir };
        let drops = f.path("drops.bin");
        write_trace(std::fs::File::create(&drops).unwrap(), &drops_spec()).unwrap();
        let npu = SynthSpec::simple(Workload::Npu, 9, 30);
        write_trace(std::fs::File::create(f.path("npu.bin")).unwrap(), &npu).unwrap();
        let causal = SynthSpec::simple(Workload::SsdCausal, 5, 400);
        write_trace(std::fs::File::create(f.path("causal.bin")).unwrap(), &causal).unwrap();
        let bytes = std::fs::read(&drops).unwrap();
        // Cut 10 bytes into the last record: a torn write.
        std::fs::write(f.path("torn.bin"), &bytes[..bytes.len() - 14]).unwrap();
        // Third record's length becomes 5000: corruption, not truncation.
        let mut corrupt = bytes.clone();
        let third = 64 + item_size(&bytes, 64) + item_size(&bytes, 64 + item_size(&bytes, 64));
        corrupt[third..third + 4].copy_from_slice(&5000u32.to_le_bytes());
        std::fs::write(f.path("corrupt.bin"), corrupt).unwrap();
        let mut v2 = bytes.clone();
        v2[8] = 2;
        std::fs::write(f.path("v2.bin"), v2).unwrap();
        std::fs::write(f.path("empty.bin"), &bytes[..64]).unwrap();
        std::fs::write(
            f.path("garbage.bin"),
            b"this is not a trace file at all, not even close......",
        )
        .unwrap();
        f
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

fn item_size(bytes: &[u8], at: usize) -> usize {
    let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
    (32 + len).div_ceil(8) * 8
}

/// Run the binary; stdout, stderr and exit code as one text with the temp
/// directory replaced by [DIR].
fn run(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(args)
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    let text = format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    text.replace(&dir.display().to_string(), "[DIR]")
}

#[rstest]
#[case::info("info", &["info", "drops.bin"])]
#[case::info_npu("info_npu", &["info", "npu.bin"])]
#[case::info_empty("info_empty", &["info", "empty.bin"])]
#[case::info_torn("info_torn", &["info", "torn.bin"])]
#[case::info_corrupt("info_corrupt", &["info", "corrupt.bin"])]
#[case::info_v2("info_v2", &["info", "v2.bin"])]
#[case::info_garbage("info_garbage", &["info", "garbage.bin"])]
#[case::info_missing("info_missing", &["info", "nope.bin"])]
#[case::stats("stats", &["stats", "drops.bin"])]
#[case::stats_json("stats_json", &["stats", "--json", "drops.bin"])]
#[case::decode("decode", &["decode", "drops.bin"])]
#[case::decode_payload("decode_payload", &["decode", "npu.bin", "--limit", "3", "--payload"])]
#[case::decode_filtered("decode_filtered", &["decode", "drops.bin", "--opcode", "CMD_FETCH,0x0102", "--epoch", "3"])]
#[case::decode_time("decode_time", &["decode", "drops.bin", "--from", "5020000", "--to", "5060000", "--core", "0"])]
#[case::decode_torn("decode_torn", &["decode", "torn.bin", "--epoch", "4"])]
#[case::decode_bad_opcode("decode_bad_opcode", &["decode", "drops.bin", "--opcode", "NOPE"])]
#[case::gaps("gaps", &["gaps", "drops.bin"])]
#[case::gaps_json("gaps_json", &["gaps", "--json", "drops.bin"])]
#[case::gaps_corrupt("gaps_corrupt", &["gaps", "corrupt.bin"])]
#[case::convert_csv("convert_csv", &["convert", "drops.bin", "--format", "csv"])]
#[case::convert_jsonl("convert_jsonl", &["convert", "npu.bin", "--format", "jsonl", "--payload"])]
#[case::export_perfetto("export_perfetto", &["export", "perfetto", "drops.bin", "-o", "d.pftrace"])]
#[case::export_perfetto_causal("export_perfetto_causal", &["export", "perfetto", "causal.bin", "-o", "c.pftrace"])]
#[case::catalog("catalog", &["catalog"])]
#[case::usage("usage", &["frobnicate"])]
fn subcommand(#[case] name: &str, #[case] args: &[&str]) {
    let f = Fixtures::new();
    insta::assert_snapshot!(name, run(f.dir.path(), args));
}

#[test]
fn filter_writes_a_trace_the_other_commands_read() {
    let f = Fixtures::new();
    let mut text = run(
        f.dir.path(),
        &[
            "filter",
            "drops.bin",
            "-o",
            "cmd.bin",
            "--opcode",
            "CMD_FETCH,CMD_COMPLETE",
        ],
    );
    text.push_str(&run(f.dir.path(), &["decode", "cmd.bin"]));
    text.push_str(&run(f.dir.path(), &["info", "cmd.bin"]));
    insta::assert_snapshot!("filter", text);
}

#[test]
fn export_pccx_of_both_workloads_verifies() {
    let f = Fixtures::new();
    let mut text = String::new();
    for (trace, out, enc) in [
        ("npu.bin", "npu.pccx", "bincode"),
        ("npu.bin", "npu-flat.pccx", "flatbuf"),
        ("npu.bin", "npu-seed.pccx", "bincode-seed"),
        ("drops.bin", "ssd.pccx", "bincode"),
        ("causal.bin", "causal.pccx", "bincode"),
    ] {
        text.push_str(&run(
            f.dir.path(),
            &["export", "pccx", trace, "-o", out, "--encoding", enc],
        ));
        text.push_str(&run(f.dir.path(), &["pccx", "verify", "--strict", out]));
        text.push_str(&run(f.dir.path(), &["pccx", "info", "--events", "6", out]));
    }
    insta::assert_snapshot!("export_pccx", text);
    // The npu export carries the model's events verbatim, sorted by start
    // cycle: check against the records' payloads independently of the
    // exporter (tests/pccx_lab.rs checks the bincode layouts with
    // pccx-lab's own structs).
    let trace = std::fs::read(f.path("npu.bin")).unwrap();
    let reader = hmb_trace_file::SliceReader::new(&trace).unwrap();
    let mut expected: Vec<Vec<u8>> = reader.map(|i| i.unwrap().payload.to_vec()).collect();
    expected.sort_by_key(|p| u64::from_le_bytes(p[4..12].try_into().unwrap()));
    let file =
        pccx::PccxFile::from_bytes(&std::fs::read(f.path("npu-flat.pccx")).unwrap(), &Default::default()).unwrap();
    assert_eq!(file.payload, expected.concat());
}

#[test]
fn pccx_verify_reports_damage_with_its_exit_code() {
    let f = Fixtures::new();
    run(
        f.dir.path(),
        &["export", "pccx", "npu.bin", "-o", "ok.pccx", "--encoding", "flatbuf"],
    );
    let mut bytes = std::fs::read(f.path("ok.pccx")).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xFF;
    std::fs::write(f.path("flipped.pccx"), &bytes).unwrap();
    std::fs::write(f.path("short.pccx"), &bytes[..bytes.len() - 5]).unwrap();
    // In the bincode layout the last byte is the last event's api_name tag:
    // flipped, the payload no longer decodes (exit 7 even without --strict).
    run(
        f.dir.path(),
        &["export", "pccx", "npu.bin", "-o", "okb.pccx", "--encoding", "bincode"],
    );
    let mut b = std::fs::read(f.path("okb.pccx")).unwrap();
    let last = b.len() - 1;
    b[last] ^= 0xFF;
    std::fs::write(f.path("flipped-bincode.pccx"), &b).unwrap();
    let mut text = run(f.dir.path(), &["pccx", "verify", "flipped.pccx"]);
    text.push_str(&run(f.dir.path(), &["pccx", "verify", "--strict", "flipped.pccx"]));
    text.push_str(&run(f.dir.path(), &["pccx", "verify", "flipped-bincode.pccx"]));
    text.push_str(&run(f.dir.path(), &["pccx", "verify", "short.pccx"]));
    text.push_str(&run(f.dir.path(), &["pccx", "info", "drops.bin"]));
    insta::assert_snapshot!("pccx_verify_damage", text);
}

#[test]
fn report_is_one_self_contained_html_file() {
    let f = Fixtures::new();
    let text = run(
        f.dir.path(),
        &[
            "report",
            "drops.bin",
            "-o",
            "r.html",
            "--records",
            "12",
            "--title",
            "fixture <report>",
        ],
    );
    let html = std::fs::read_to_string(f.path("r.html")).unwrap();
    for forbidden in ["src=", "href=", "@import", "url(", "<link", "fetch(", "XMLHttpRequest"] {
        assert!(
            !html.contains(forbidden),
            "report references something external: {forbidden}"
        );
    }
    assert!(html.contains("fixture &lt;report&gt;"), "title is escaped");
    let latency_charts = html.matches("<h3>").count();
    assert!(latency_charts >= 4, "a latency histogram per opcode and measure");
    assert_eq!(
        html.matches("<svg").count(),
        4 + latency_charts + 1 + html.matches("class=\"track\"").count(),
        "opcode, rate, losses and inter-arrival charts, the latency histograms, the timeline and its lanes"
    );
    assert!(html.contains("id=\"timeline\"") && html.contains("data-lane=\"submission queue 0\""));
    assert!(html.contains("<h2>Latency</h2>") && html.contains("CMD_COMPLETE"));
    insta::assert_snapshot!("report_stdout", text);
    insta::assert_snapshot!("report_html", html);
}

#[test]
fn a_bad_catalog_is_exit_8_and_a_custom_one_renames() {
    let f = Fixtures::new();
    std::fs::write(f.path("bad.json"), "{\"catalog_version\": 1, \"opcodes\": 7}").unwrap();
    let custom = r#"{"catalog_version":1,"opcodes":[{"opcode":257,"name":"FETCH","fields":[{"name":"qid","offset":0,"type":"u16"}]}]}"#;
    std::fs::write(f.path("custom.json"), custom).unwrap();
    let mut text = run(f.dir.path(), &["--catalog", "bad.json", "info", "drops.bin"]);
    text.push_str(&run(
        f.dir.path(),
        &["--catalog", "custom.json", "decode", "drops.bin", "--opcode", "FETCH"],
    ));
    insta::assert_snapshot!("catalog_custom", text);
}

#[test]
fn stdin_is_streamed() {
    let f = Fixtures::new();
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["gaps", "-"])
        .stdin(std::fs::File::open(f.path("drops.bin")).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success());
    let piped = String::from_utf8(out.stdout).unwrap();
    let direct = run(f.dir.path(), &["gaps", "drops.bin"]);
    assert!(direct.contains(&piped), "stdin and file give the same gaps");
}

#[test]
fn writing_over_the_input_is_refused() {
    let f = Fixtures::new();
    let before = std::fs::read(f.path("drops.bin")).unwrap();
    let mut text = run(f.dir.path(), &["filter", "drops.bin", "-o", "drops.bin"]);
    text.push_str(&run(
        f.dir.path(),
        &["convert", "drops.bin", "--format", "csv", "-o", "./drops.bin"],
    ));
    text.push_str(&run(f.dir.path(), &["report", "drops.bin", "-o", "drops.bin"]));
    text.push_str(&run(f.dir.path(), &["export", "pccx", "drops.bin", "-o", "drops.bin"]));
    assert_eq!(std::fs::read(f.path("drops.bin")).unwrap(), before, "input untouched");
    insta::assert_snapshot!("same_output", text);
}

/// On the causal workload a completion's latency field is exactly
/// completion − fetch, so both measures agree row for row, and no queue
/// ever holds more than its depth of 8.
#[test]
fn stats_latency_percentiles_agree_on_the_causal_workload() {
    let f = Fixtures::new();
    let dir = f.dir.path();
    write_trace(
        std::fs::File::create(dir.join("long.bin")).unwrap(),
        &SynthSpec::simple(Workload::SsdCausal, 8, 20_000),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["stats", "--json", "long.bin"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["latency"].as_array().unwrap();
    let pick = |m: &str| -> Vec<serde_json::Value> {
        rows.iter()
            .filter(|r| r["name"] == "CMD_COMPLETE" && r["measure"] == m)
            .map(|r| {
                let mut r = r.clone();
                r["measure"] = serde_json::Value::Null;
                r
            })
            .collect()
    };
    let (field, paired) = (pick("field"), pick("paired"));
    assert_eq!(field.len(), 9, "overall and 8 queues");
    assert_eq!(field, paired);
    let all = &field[0];
    assert!(all["source"].is_null());
    let (p50, p99, max) = (
        all["p50"].as_u64().unwrap(),
        all["p99"].as_u64().unwrap(),
        all["max"].as_u64().unwrap(),
    );
    assert!(p50 > 10_000 && p50 <= p99 && p99 <= max, "{all}");
    assert!(rows.iter().any(|r| r["name"] == "NAND_READ" && r["source"] == 0x0102));
    let depth = v["queue_depth"].as_array().unwrap();
    assert_eq!(
        depth.iter().filter(|d| d["name"] == "CMD_FETCH").count(),
        8,
        "one series per queue"
    );
    assert!(
        depth.iter().any(|d| d["name"] == "GC_START"),
        "GC on the FTL core, apart from queue 0"
    );
    for d in depth.iter().filter(|d| d["name"] == "CMD_FETCH") {
        let peak = d["max"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_u64().unwrap())
            .max()
            .unwrap();
        assert_eq!(peak, 8, "queue {} fills to its depth and no further", d["source"]);
    }
}
