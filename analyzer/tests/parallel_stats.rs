//! `stats`, `info` and `gaps` walk a mapped file of some size on both cores
//! (analyzer/src/parallel.rs): their results must be those of one walk.
//! (The split itself is checked at every item boundary of generated files
//! by the property test in parallel.rs.)

#[path = "common/synth.rs"]
mod synth;

use std::ops::ControlFlow;

use hmb_firmware_model::Workload;
use hmb_trace_analyze::catalog::Catalog;
use hmb_trace_analyze::commands::{collect_stats, collect_stats_sequential, open_trace, stats, walk_trace, Ctx};
use hmb_trace_analyze::format::Style;
use hmb_trace_analyze::latency::Latency;
use hmb_trace_analyze::parallel::PARALLEL_MIN_BYTES;
use hmb_trace_analyze::stats::Stats;
use rstest::rstest;
use synth::{write_trace, Drop, EpochSpec, SynthSpec};

fn ctx() -> Ctx {
    Ctx {
        catalog: Catalog::builtin(),
        style: Style { color: false },
        progress: false,
    }
}

/// Three epochs with marked and unmarked drops, the first frozen; about
/// 6 MB (above the parallel threshold).
fn spec(workload: Workload, seed: u64) -> SynthSpec {
    let seqs = 45_000;
    SynthSpec {
        workload,
        seed,
        epochs: (0..3)
            .map(|i| EpochSpec {
                epoch: 3 + i,
                ring_size: 1 << 20,
                seqs,
                drops: (1..30)
                    .map(|k| Drop {
                        first_seq: k * seqs / 30 + i,
                        count: 1 + k % 5,
                        marked: k % 3 == 0,
                    })
                    .collect(),
                frozen: i == 0,
            })
            .collect(),
        start_ns: 1_000_000,
        step_ns: 700,
    }
}

#[rstest]
#[case::ssd(Workload::Ssd, 1)]
#[case::ssd_other_seed(Workload::Ssd, 99)]
#[case::causal(Workload::parse("ssd:causal").unwrap(), 5)]
fn stats_on_both_cores_is_one_walk(#[case] workload: Workload, #[case] seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    write_trace(std::fs::File::create(&path).unwrap(), &spec(workload, seed)).unwrap();
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    assert!(len >= PARALLEL_MIN_BYTES, "{len} bytes: below the parallel threshold");
    let p = path.to_str().unwrap();
    let ctx = ctx();

    // One walk, as `stats` did before it used two cores.
    let (walked, (mut s, lat)) = walk_trace(
        &ctx,
        p,
        |h| (Stats::new(h.first_epoch, h.ring_size), Latency::new(&ctx.catalog)),
        |(s, lat), ev| {
            s.add(ev);
            lat.add(ev);
            ControlFlow::Continue(())
        },
    )
    .unwrap();
    s.finish();
    let (pwalked, ps, plat) = stats::compute(&ctx, p).unwrap();
    assert_eq!(
        (pwalked.end.offset, pwalked.end.items, pwalked.end.error.is_none()),
        (walked.end.offset, walked.end.items, walked.end.error.is_none())
    );
    assert_eq!(serde_json::to_string(&ps).unwrap(), serde_json::to_string(&s).unwrap());
    assert_eq!(
        serde_json::to_string(&stats::to_json(&ctx, &ps)).unwrap(),
        serde_json::to_string(&stats::to_json(&ctx, &s)).unwrap()
    );
    assert_eq!(
        serde_json::to_string(&(plat.percentiles(), plat.depth_series(), plat.series_dropped)).unwrap(),
        serde_json::to_string(&(lat.percentiles(), lat.depth_series(), lat.series_dropped)).unwrap()
    );
    assert!(!s.epochs.is_empty() && s.lost_total() > 0);

    // info and gaps: collect_stats.
    let (cw, cs) = collect_stats(&ctx, p).unwrap();
    let (sw, ss) = collect_stats_sequential(&ctx, open_trace(p).unwrap());
    assert_eq!((cw.end.offset, cw.end.items), (sw.end.offset, sw.end.items));
    assert_eq!(serde_json::to_string(&cs).unwrap(), serde_json::to_string(&ss).unwrap());
    assert_eq!(cs.summary_warnings(), ss.summary_warnings());

    // A torn tail: the same error, at the same offset, either way.
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[40, 0, 0, 0, 1, 1, 0, 0, 9]);
    std::fs::write(&path, &bytes).unwrap();
    let (cw, cs) = collect_stats(&ctx, p).unwrap();
    let (sw, ss) = collect_stats_sequential(&ctx, open_trace(p).unwrap());
    assert_eq!(
        cw.end.error.as_ref().map(|e| e.to_string()),
        sw.end.error.as_ref().map(|e| e.to_string())
    );
    assert!(cw.end.error.is_some());
    assert_eq!(serde_json::to_string(&cs).unwrap(), serde_json::to_string(&ss).unwrap());
}

/// `stats` and `stats --json` of the real binary on a mapped file (both
/// cores) print byte for byte what they print on the same bytes from stdin
/// (streamed: one walk, the code the split is merged to equal).
fn binary_split_equals_stdin(path: &std::path::Path) {
    for args in [&["stats"][..], &["stats", "--json"][..]] {
        let run = |file: Option<&std::path::Path>| {
            let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"));
            cmd.arg("--no-progress").args(args);
            match file {
                Some(f) => {
                    cmd.arg(f);
                }
                None => {
                    cmd.arg("-").stdin(std::fs::File::open(path).unwrap());
                }
            }
            let out = cmd.output().unwrap();
            (out.status.code(), out.stdout, out.stderr)
        };
        let (mapped, streamed) = (run(Some(path)), run(None));
        assert_eq!(mapped.0, streamed.0, "{args:?}: exit code");
        assert!(mapped.1 == streamed.1, "{args:?}: stdout differs on {}", path.display());
        assert!(!mapped.1.is_empty());
    }
}

/// The bench's trace (the ssd workload, two epochs, drops with and without
/// LOST markers, a freeze), at 12 MB.
#[test]
fn stats_binary_on_both_cores_prints_the_one_walk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    let mut spec = spec(Workload::Ssd, 7);
    spec.epochs.truncate(2);
    for e in &mut spec.epochs {
        e.seqs = 115_000;
    }
    write_trace(std::fs::File::create(&path).unwrap(), &spec).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() as usize >= 2 * PARALLEL_MIN_BYTES);
    binary_split_equals_stdin(&path);
}

/// A guest's trace.bin (a TCG guest's drain, e.g. the `guest` folder of a
/// `cargo xtask bench --guest` run: `trace.bin` of 348 MB): no such file is
/// in the repository, so this runs on request:
/// `HMB_TRACE_GUEST_TRACE=/path/trace.bin cargo test -p hmb-trace-analyze
/// --test parallel_stats -- --ignored guest`.
#[test]
#[ignore = "needs a guest trace: HMB_TRACE_GUEST_TRACE=/path/trace.bin"]
fn stats_binary_on_both_cores_prints_the_one_walk_on_a_guest_trace() {
    let path = std::env::var_os("HMB_TRACE_GUEST_TRACE").expect("HMB_TRACE_GUEST_TRACE names a guest's trace.bin");
    let path = std::path::PathBuf::from(path);
    assert!(std::fs::metadata(&path).unwrap().len() as usize >= PARALLEL_MIN_BYTES);
    binary_split_equals_stdin(&path);
}
