//! Benchmark: throughput of `hmb-trace-analyze stats` (decode, accounting
//! and latencies, on both cores) on a trace.bin of at least 1 GB, next to
//! the sequential read bandwidth of the same file from the page cache,
//! measured in the same run; beside it the same work in one walk on one
//! core, and the accounting alone (`info`, `gaps`) both ways.
//!
//! Then the text outputs through the real binary (stdout to /dev/null):
//! `convert --format csv`, `convert --format jsonl` and `decode`, in
//! records per second, beside the walk alone (decode + bookkeeping, no
//! output) as the floor they are measured against: five interleaved
//! rounds, each child preceded by an in-process probe of the same code,
//! which says what speed the machine gave that code at that moment.
//!
//! Every figure is also printed as one `BENCH {json}` line for
//! `cargo xtask bench` (docs/performance.md).
//!
//! cargo bench -p hmb-trace-analyze --bench analyze -- [--size-mb N] [--path FILE] [--keep] [--workload ssd|ssd:causal]
//! (default: 1100 MB in /dev/shm, removed afterwards)

#[path = "../tests/common/synth.rs"]
mod synth;

use std::fs::File;
use std::io::{BufWriter, Read};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use hmb_firmware_model::Workload;
use hmb_trace_analyze::catalog::Catalog;
use hmb_trace_analyze::commands::{collect_stats, collect_stats_sequential, open_trace, stats, walk_trace, Ctx};
use hmb_trace_analyze::format::Style;
use hmb_trace_analyze::latency::Latency;
use hmb_trace_analyze::stats::Stats;
use hmb_trace_file::TraceReader;
use synth::{write_trace, Drop, EpochSpec, SynthSpec};

fn main() {
    if let Err(e) = real_main() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// CPU seconds (user + system) used by this process so far: on a shared
/// machine, throughput per CPU second is the figure that does not depend on
/// what else runs.
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Wall and CPU throughput of one run of `f` over `bytes` bytes, in GB/s.
fn measure(bytes: u64, f: impl FnOnce()) -> (f64, f64) {
    let (t, c) = (Instant::now(), cpu_seconds());
    f();
    let (wall, cpu) = (t.elapsed().as_secs_f64(), cpu_seconds() - c);
    (bytes as f64 / wall / 1e9, bytes as f64 / cpu.max(1e-6) / 1e9)
}

fn arg_value(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn real_main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let size_mb: u64 = arg_value(&args, "--size-mb")
        .map(|v| v.parse())
        .transpose()?
        .unwrap_or(1100);
    let default_dir = if std::path::Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "target"
    };
    let path =
        PathBuf::from(arg_value(&args, "--path").unwrap_or_else(|| format!("{default_dir}/hmb-bench-trace.bin")));
    let keep = args.iter().any(|a| a == "--keep");
    let workload = Workload::parse(&arg_value(&args, "--workload").unwrap_or_else(|| "ssd".into()))?;

    // ~52 bytes per ssd record on average.
    let seqs_per_epoch = size_mb * 1_000_000 / 52 / 2;
    let spec = SynthSpec {
        workload,
        seed: 7,
        epochs: (0..2)
            .map(|i| EpochSpec {
                epoch: 10 + i,
                ring_size: 1 << 24,
                seqs: seqs_per_epoch,
                drops: (1..50)
                    .map(|k| Drop {
                        first_seq: k * seqs_per_epoch / 50,
                        count: 100 + k,
                        marked: k % 2 == 0,
                    })
                    .collect(),
                frozen: i == 0,
            })
            .collect(),
        start_ns: 1_000_000_000,
        step_ns: 500,
    };
    let t = Instant::now();
    let summary = write_trace(BufWriter::with_capacity(1 << 20, File::create(&path)?), &spec)?;
    let gen_s = t.elapsed().as_secs_f64();
    let len = std::fs::metadata(&path)?.len();
    println!(
        "trace      {} ({:.3} GB, {} records, {} lost), generated in {gen_s:.1} s",
        path.display(),
        len as f64 / 1e9,
        summary.records,
        summary.lost
    );

    // Sequential read from page cache: one warm-up pass, then the median of 3
    // (every figure below is the median of its 3 samples within the run, so
    // each ratio is median over median; a best sample would favour whichever side the machine disturbed less).
    let mut buf = vec![0u8; 1 << 20];
    let (mut read_bws, mut read_cpus) = (Vec::new(), Vec::new());
    for pass in 0..4 {
        let mut f = File::open(&path)?;
        let mut x = 0u8;
        let (bw, cpu) = measure(len, || loop {
            let n = f.read(&mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            x ^= buf[n - 1];
        });
        std::hint::black_box(x);
        if pass > 0 {
            read_bws.push(bw);
            read_cpus.push(cpu);
        }
    }
    let (read_bw, read_cpu) = (median(read_bws), median(read_cpus));
    println!("read       {read_bw:.2} GB/s wall, {read_cpu:.2} GB/s per CPU-second  sequential read(2) of the file from page cache, 1 MiB buffer (median of 3)");

    let ctx = Ctx {
        catalog: Catalog::builtin(),
        style: Style { color: false },
        progress: false,
    };
    let p = path.to_string_lossy().to_string();
    // What `hmb-trace-analyze stats` does (accounting and latencies),
    // median of 3, then the same in one walk on one core (how it ran before
    // it used both cores), then the accounting alone (`info`, `gaps`) both
    // ways.
    let one_walk = |p: &str| {
        let (walked, (mut s, lat)) = walk_trace(
            &ctx,
            p,
            |h| (Stats::new(h.first_epoch, h.ring_size), Latency::new(&ctx.catalog)),
            |(s, lat), ev| {
                s.add(ev);
                lat.add(ev);
                ControlFlow::Continue(())
            },
        )?;
        s.finish();
        Ok::<_, hmb_trace_analyze::exit::AppError>((walked, s, lat))
    };
    let (mut bws, mut cpus) = (Vec::new(), Vec::new());
    let mut records = 0;
    for _ in 0..3 {
        let mut result = None;
        let (bw, cpu) = measure(len, || result = Some(stats::compute(&ctx, &p)));
        let (_walked, stats, lat) = result.ok_or("no result")??;
        std::hint::black_box(lat.percentiles());
        bws.push(bw);
        cpus.push(cpu);
        records = stats.records;
        assert_eq!(stats.records, summary.records, "stats must see every record");
        assert_eq!(stats.lost_total(), summary.lost, "stats must see every loss");
    }
    let (stats_bw, stats_cpu) = (median(bws), median(cpus));
    println!(
        "stats      {stats_bw:.2} GB/s wall, {stats_cpu:.2} GB/s per CPU-second  decode + stats + latency (mmap path, as `hmb-trace-analyze stats`: both cores), {:.1} M records/s wall (median of 3)",
        records as f64 * stats_bw * 1e9 / len as f64 / 1e6
    );
    let median_of_3 = |f: &dyn Fn()| {
        let (mut b, mut c) = (Vec::new(), Vec::new());
        for _ in 0..3 {
            let (bw, cpu) = measure(len, f);
            b.push(bw);
            c.push(cpu);
        }
        (median(b), median(c))
    };
    let (b, c) = median_of_3(&|| {
        std::hint::black_box(one_walk(&p).map(|r| r.1.records).ok());
    });
    println!("stats-1    {b:.2} GB/s wall, {c:.2} GB/s per CPU-second  the same in one walk on one core (median of 3)");
    let (account_bw, account_cpu) = median_of_3(&|| {
        std::hint::black_box(collect_stats(&ctx, &p).map(|r| r.1.records).ok());
    });
    println!("account    {account_bw:.2} GB/s wall, {account_cpu:.2} GB/s per CPU-second  decode + accounting only, both cores (as `info`, `gaps`; median of 3)");
    let (b, c) = median_of_3(&|| {
        let walked = open_trace(&p).map(|input| collect_stats_sequential(&ctx, input));
        std::hint::black_box(walked.map(|r| r.1.records).ok());
    });
    println!("account-1  {b:.2} GB/s wall, {c:.2} GB/s per CPU-second  the same in one walk on one core (median of 3)");

    let t = Instant::now();
    let mut reader = TraceReader::new(File::open(&path)?)?;
    let mut n = 0u64;
    while let Some(item) = reader.next_item()? {
        n += item.payload.len() as u64 & 1;
    }
    std::hint::black_box(n);
    println!(
        "stream     {:.2} GB/s  decode only through TraceReader over read(2)",
        len as f64 / t.elapsed().as_secs_f64() / 1e9
    );

    let (t, walk_cpu0) = (Instant::now(), cpu_seconds());
    let (_, count) = walk_trace(
        &ctx,
        &p,
        |_| 0u64,
        |c, _| {
            *c += 1;
            ControlFlow::Continue(())
        },
    )?;
    let walk_s = t.elapsed().as_secs_f64();
    let walk_cpu_mrps = summary.records as f64 / (cpu_seconds() - walk_cpu0).max(1e-6) / 1e6;
    std::hint::black_box(count);
    println!(
        "walk       {:.2} GB/s  decode + epoch/seq bookkeeping only (mmap)",
        len as f64 / walk_s / 1e9
    );
    println!(
        "ratio      stats / read = {:.3} wall, {:.3} per CPU-second; accounting / read = {:.3} wall, {:.3} per CPU-second",
        stats_bw / read_bw,
        stats_cpu / read_cpu,
        account_bw / read_bw,
        account_cpu / read_cpu
    );
    bench_line(
        "analyzer_stats",
        stats_bw,
        "GB/s",
        read_bw,
        "read(2) of the file from page cache, 1 MiB buffer",
        stats_bw / read_bw,
        Some((stats_cpu, stats_cpu / read_cpu)),
    );
    // What issue #17 first measured as "analyzer stats" (1.05 GB/s, 15 % of
    // read(2)): the accounting alone, as `info` and `gaps` run it.
    bench_line(
        "analyzer_accounting",
        account_bw,
        "GB/s",
        read_bw,
        "read(2) of the file from page cache, 1 MiB buffer",
        account_bw / read_bw,
        Some((account_cpu, account_cpu / read_cpu)),
    );

    // The text outputs, as a user runs them: the binary, stdout to /dev/null
    // (a character device: no page cache, no file to truncate). Five rounds,
    // each running csv, jsonl and decode once, and the median of each
    // figure's five samples: three samples of one figure in a row (as
    // before, 6 December) put all of a figure's samples into the same
    // second or two, so a slow spell of this VM's host (the idle bench of
    // 6 December: every child at 0.70 s of CPU in run 1, 0.34 s in run 2,
    // the same binary, user time, docs/performance.md "Fourth pass") set
    // the whole figure. Before each child the same command runs in this
    // process as `decode --limit PROBE_RECORDS` (the same code, in the
    // same second, see `probe`): a child slower than its probe points at
    // the child, both slower at the machine.
    let walk_mrps = summary.records as f64 / walk_s / 1e6;
    let figures: [(&str, &[&str]); 3] = [
        ("analyzer_csv", &["convert", "--format", "csv"]),
        ("analyzer_jsonl", &["convert", "--format", "jsonl"]),
        ("analyzer_decode", &["decode"]),
    ];
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); figures.len()];
    let null = || File::create("/dev/null");
    for _round in 0..TEXT_ROUNDS {
        for (i, (_, args)) in figures.iter().enumerate() {
            let probe_cpu = probe(&p)?;
            let (t, cpu0) = (Instant::now(), children_cpu_seconds());
            let status = std::process::Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
                .args(*args)
                .arg(&path)
                .stdout(null()?)
                .status()?;
            let (wall, cpu) = (t.elapsed().as_secs_f64(), (children_cpu_seconds() - cpu0).max(1e-6));
            if !status.success() {
                return Err(format!("hmb-trace-analyze {args:?} failed: {status}").into());
            }
            samples[i].push(Sample { wall, cpu, probe_cpu });
        }
    }
    for ((figure, args), samples) in figures.iter().zip(&samples) {
        let secs = median(samples.iter().map(|s| s.wall).collect());
        let cpu = median(samples.iter().map(|s| s.cpu).collect());
        let probe_mrps = median(
            samples
                .iter()
                .map(|s| PROBE_RECORDS as f64 / s.probe_cpu / 1e6)
                .collect(),
        );
        let mrps = summary.records as f64 / secs / 1e6;
        let cpu_mrps = summary.records as f64 / cpu / 1e6;
        let each: Vec<String> = samples
            .iter()
            .map(|s| {
                format!(
                    "{:.3}/{:.3}/{:.1}",
                    s.wall,
                    s.cpu,
                    PROBE_RECORDS as f64 / s.probe_cpu / 1e6
                )
            })
            .collect();
        println!(
            "{:<10} {mrps:.2} M records/s wall, {cpu_mrps:.2} M records per CPU-second  `hmb-trace-analyze {}` to /dev/null (median of {TEXT_ROUNDS}, rounds interleaved); in-process probe {probe_mrps:.2} M records per CPU-second (median); wall s/CPU s/probe M rec per CPU-s: {}",
            figure.trim_start_matches("analyzer_"),
            args.join(" "),
            each.join(" ")
        );
        bench_line(
            figure,
            mrps,
            "M rec/s",
            walk_mrps,
            "walk alone (decode + bookkeeping, no output), records/s",
            mrps / walk_mrps,
            Some((cpu_mrps, cpu_mrps / walk_cpu_mrps)),
        );
    }
    if !keep {
        std::fs::remove_file(&path)?;
    }
    Ok(())
}

/// One figure for `cargo xtask bench` (which parses these lines); `cpu`:
/// the same figure and ratio over CPU seconds instead of wall seconds.
fn bench_line(
    figure: &str,
    value: f64,
    unit: &str,
    baseline: f64,
    baseline_what: &str,
    ratio: f64,
    cpu: Option<(f64, f64)>,
) {
    let cpu = cpu.map_or(String::new(), |(v, r)| {
        format!(",\"cpu_value\":{v:.6},\"cpu_ratio\":{r:.6}")
    });
    println!(
        "BENCH {{\"figure\":\"{figure}\",\"value\":{value:.6},\"unit\":\"{unit}\",\"baseline\":{baseline:.6},\"baseline_what\":\"{baseline_what}\",\"ratio\":{ratio:.6}{cpu}}}"
    );
}

/// Rounds of the text outputs (each runs csv, jsonl and decode once).
const TEXT_ROUNDS: usize = 5;
/// Records the in-process probe formats before each text-output child
/// (about a tenth of the 200 MB trace: 30-40 ms).
const PROBE_RECORDS: u64 = 400_000;

/// One run of a text output: the child's wall and CPU seconds, and the
/// CPU seconds of the in-process probe just before it.
#[derive(Clone, Copy)]
struct Sample {
    wall: f64,
    cpu: f64,
    probe_cpu: f64,
}

/// `decode --limit PROBE_RECORDS` of `path` in this process, to
/// /dev/null: the text outputs' code (`hmb_trace_analyze::run`, the walk
/// and `textout.rs`) on a tenth of the trace, so its speed is what this
/// machine gives that code at that moment (`convert` has no record limit;
/// its rows are formatted by the same module). Returns the CPU seconds
/// (this process's, the pager thread's included, as the child's): on a
/// busy machine the wall time says what other processes took.
fn probe(path: &str) -> Result<f64, Box<dyn std::error::Error>> {
    use clap::Parser;
    let limit = PROBE_RECORDS.to_string();
    let cli = hmb_trace_analyze::cli::Cli::try_parse_from([
        "hmb-trace-analyze",
        "--no-progress",
        "decode",
        "--limit",
        &limit,
        path,
    ])?;
    let mut out = BufWriter::with_capacity(1 << 16, File::create("/dev/null")?);
    let cpu0 = cpu_seconds();
    hmb_trace_analyze::run(cli, &mut out).map_err(|e| e.to_string())?;
    std::io::Write::flush(&mut out)?;
    Ok((cpu_seconds() - cpu0).max(1e-6))
}

/// CPU seconds of the children this process has waited for.
fn children_cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// The middle of an odd number of samples (the upper middle of an even one).
fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}
