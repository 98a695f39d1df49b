//! `cargo xtask fuzz`: build the libFuzzer targets of `fuzz/` with nightly
//! and run each for a bounded time over its corpus (seeded from the golden
//! vectors), after replaying its recorded crashes (`fuzz/regressions/<t>`).
//!
//! It builds with the flags cargo-fuzz uses (sancov, trace-compares,
//! AddressSanitizer, debug assertions and overflow checks) straight through
//! `cargo +nightly build`, so a fresh machine does not first spend minutes
//! compiling cargo-fuzz; `cargo +nightly fuzz run <t>` from `fuzz/` works
//! the same for people who have it. docs/fuzzing.md has the targets.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

/// Every target and the directories seeding its corpus (relative to the root).
pub const TARGETS: &[(&str, &[&str])] = &[
    ("ring_parse", &["docs/test-vectors/v1"]),
    ("consumer_walk", &["docs/test-vectors/v1"]),
    ("trace_read", &["fuzz/seeds/trace_read"]),
    ("pccx_read", &["pccx/tests/golden"]),
    ("nvme_controller", &["fuzz/seeds/nvme_controller"]),
    ("control_request", &["fuzz/seeds/control_request"]),
    ("catalog_load", &["fuzz/seeds/catalog_load"]),
    ("vfio_user_backend", &["fuzz/seeds/vfio_user_backend"]),
    ("vfio_user_server", &["fuzz/seeds/vfio_user_server"]),
    ("telemetry_read", &["fuzz/seeds/telemetry_read"]),
    ("telemetry_log_page", &["fuzz/seeds/telemetry_log_page"]),
];

pub(crate) const TRIPLE: &str = "x86_64-unknown-linux-gnu";
const RUSTFLAGS: &str = "-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
    -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
    -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Zsanitizer=address \
    -Cdebug-assertions -Coverflow-checks -Cforce-frame-pointers";

#[derive(Args, Debug)]
pub struct Fuzz {
    /// One target (default: all of them, one after the other).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(TARGETS.iter().map(|t| t.0)))]
    pub target: Option<String>,
    /// Seconds of fuzzing per target (default 10, or no limit with --runs).
    #[arg(long)]
    pub time: Option<u64>,
    /// Executions per target (libFuzzer's -runs=): the long runs of
    /// docs/fuzzing.md use 10000000. With --time too, whichever ends first.
    #[arg(long)]
    pub runs: Option<u64>,
    /// libFuzzer's random seed (default: a new one each run). The test
    /// command fixes it, so that what it explores is the same on every run
    /// and a failure there is a regression, not a new find of the day.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Longest input libFuzzer makes (its -max_len=; default: its own, 4096
    /// for these corpora). The controller's programs cost time in their
    /// length: the long run of nvme_controller uses 1024 (docs/fuzzing.md).
    #[arg(long)]
    pub max_len: Option<usize>,
    /// Targets fuzzed at the same time (default 1: a long run's exec/s is
    /// then its own). The test command runs two, one per core: each target
    /// still gets its whole `--time` (libFuzzer's limit is wall time).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8))]
    pub jobs: u32,
    /// The cargo profile of fuzz/Cargo.toml the targets are built with:
    /// `release` (default: the long runs' exec/s), or `fuzz-ci`, the test
    /// command's, which builds in less CPU time for its 10 s runs
    /// (docs/performance.md, "Eleventh session").
    #[arg(long, default_value = "release", value_parser = clap::builder::PossibleValuesParser::new(PROFILES))]
    pub profile: String,
}

/// The profiles `--profile` takes; each builds into its own directory
/// (`target/fuzz/<triple>/<profile>`), so switching does not rebuild.
pub(crate) const PROFILES: &[&str] = &["release", "fuzz-ci"];

impl Fuzz {
    pub fn run(self, sh: &Shell) -> Result<()> {
        run(self, sh)
    }
}

fn run(args: Fuzz, sh: &Shell) -> Result<()> {
    let root = hmb_harness::workspace_root();
    sh.change_dir(&root);
    crate::cargo_tool::ensure_nightly(sh)?;
    let target_dir = root.join("target/fuzz");
    let profile = &args.profile;
    println!("building the fuzz targets (nightly, sancov + AddressSanitizer, profile {profile})");
    let _flags = sh.push_env("RUSTFLAGS", RUSTFLAGS);
    cmd!(
        sh,
        "cargo +nightly build --quiet --profile {profile} --manifest-path fuzz/Cargo.toml --target {TRIPLE} --bins --target-dir {target_dir}"
    )
    .run()?;
    let bin_dir = target_dir.join(TRIPLE).join(profile);
    let selected: Vec<&(&str, &[&str])> = TARGETS
        .iter()
        .filter(|(name, _)| args.target.as_deref().is_none_or(|t| t == *name))
        .collect();
    let done = run_all(&root, &bin_dir, &target_dir, &selected, &args)?;
    print_table(&done);
    Ok(())
}

/// Runs the targets `args.jobs` at a time (each worker with its own shell:
/// `Shell` is not `Sync`), in TARGETS order within a worker; the stats come
/// back in TARGETS order. Every target runs even when one fails, and the
/// first failure in that order is the error.
fn run_all(
    root: &Path,
    bin_dir: &Path,
    target_dir: &Path,
    selected: &[&(&str, &[&str])],
    args: &Fuzz,
) -> Result<Vec<Stats>> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: std::sync::Mutex<Vec<Option<Result<Stats>>>> =
        std::sync::Mutex::new(selected.iter().map(|_| None).collect());
    let workers = (args.jobs as usize).clamp(1, selected.len().max(1));
    let shells = (0..workers)
        .map(|_| {
            let sh = Shell::new()?;
            sh.change_dir(root);
            Ok(sh)
        })
        .collect::<Result<Vec<Shell>>>()?;
    std::thread::scope(|scope| {
        for sh in shells {
            let (next, results) = (&next, &results);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some((name, seeds)) = selected.get(i) else { return };
                let outcome = run_target(&sh, root, bin_dir, target_dir, name, seeds, args);
                results.lock().expect("no worker panics holding it")[i] = Some(outcome);
            });
        }
    });
    results
        .into_inner()
        .expect("no worker panicked")
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(anyhow::anyhow!("a fuzz target was not run"))))
        .collect()
}

fn run_target(
    sh: &Shell,
    root: &Path,
    bin_dir: &Path,
    target_dir: &Path,
    name: &str,
    seeds: &[&str],
    args: &Fuzz,
) -> Result<Stats> {
    let secs = match (args.time, args.runs) {
        (Some(s), _) => Some(s),
        (None, Some(_)) => None,
        (None, None) => Some(10),
    };
    let bin = bin_dir.join(name);
    let regressions = files_in(&root.join("fuzz/regressions").join(name))?;
    if !regressions.is_empty() {
        println!("==> fuzz {name}: replaying {} recorded crash(es)", regressions.len());
        cmd!(sh, "{bin} {regressions...}")
            .quiet()
            .ignore_stderr()
            .run()
            .with_context(|| format!("{name}: a recorded crash (fuzz/regressions/{name}) fails again"))?;
    }
    let corpus = target_dir.join("corpus").join(name);
    let artifacts = target_dir.join("artifacts").join(name);
    std::fs::create_dir_all(&corpus)?;
    std::fs::create_dir_all(&artifacts)?;
    let seed_dirs: Vec<PathBuf> = seeds.iter().map(|s| root.join(s)).filter(|p| p.is_dir()).collect();
    let prefix = format!("-artifact_prefix={}/", artifacts.display());
    let mut limits: Vec<String> = secs.map(|s| format!("-max_total_time={s}")).into_iter().collect();
    limits.extend(args.runs.map(|r| format!("-runs={r}")));
    limits.extend(args.max_len.map(|n| format!("-max_len={n}")));
    let seed: Vec<String> = args.seed.map(|s| format!("-seed={s}")).into_iter().collect();
    println!("==> fuzz {name}: {} (corpus {})", limits.join(" "), corpus.display());
    // libFuzzer's output goes straight to a file, so a long run's progress
    // can be followed (and its figures read) while it runs.
    let logs = target_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let log_path = logs.join(format!("{name}.log"));
    let started = Instant::now();
    let status = std::process::Command::new(&bin)
        .envs(asan_options(name).map(|o| ("ASAN_OPTIONS", o)))
        .args(&limits)
        .args(&seed)
        .arg("-print_final_stats=1")
        .arg(&prefix)
        .arg(&corpus)
        .args(&seed_dirs)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log_path)?)
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    let wall = started.elapsed();
    let log = String::from_utf8_lossy(&std::fs::read(&log_path)?).into_owned();
    if !status.success() {
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        for l in tail.into_iter().rev() {
            eprintln!("    {l}");
        }
        bail!(
            "fuzz target {name} failed ({}): the input is in {}; turn it into a regression \
             (fuzz/regressions/{name}/) once fixed",
            status,
            artifacts.display()
        );
    }
    let stats = Stats::parse(name, &log, wall);
    println!("    {}", stats.line());
    Ok(stats)
}

/// AddressSanitizer's options for a target, after any the caller set.
///
/// `vfio_user_server` catches the crate's panics (as emu-device does), and
/// each unwind leaves the frames of ASan's fake stack (its detection of
/// stack use after return) allocated: `__asan_stack_malloc_1` then scans
/// ever longer for a free frame. Measured: 2 048 exec/s at the start, 587
/// on average after 262 144 executions, 56 % of the time in that function
/// (`perf record -p`); without the detection, 1 807 after as many. Safe
/// Rust cannot return a reference to its stack, so little is lost.
fn asan_options(target: &str) -> Option<String> {
    let ours = match target {
        "vfio_user_server" => "detect_stack_use_after_return=0",
        _ => return None,
    };
    Some(match std::env::var("ASAN_OPTIONS") {
        Ok(theirs) if !theirs.is_empty() => format!("{theirs}:{ours}"),
        _ => ours.to_string(),
    })
}

/// One run's figures, from libFuzzer's final stats (`-print_final_stats=1`)
/// and its last status line (`#N DONE cov: E ft: F corp: C/SIZE ...`).
struct Stats {
    name: String,
    executions: String,
    exec_per_sec: String,
    edges: String,
    features: String,
    corpus: String,
    wall: Duration,
    load: String,
}

impl Stats {
    fn parse(name: &str, log: &str, wall: Duration) -> Stats {
        let stat = |k: &str| {
            log.lines()
                .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
                .unwrap_or_else(|| "?".into())
        };
        let status = log.lines().rev().find(|l| l.contains(" cov: ")).unwrap_or("");
        let field = |k: &str| {
            let mut words = status.split_whitespace();
            words
                .find(|w| *w == k)
                .and_then(|_| words.next())
                .unwrap_or("?")
                .to_string()
        };
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        Stats {
            name: name.to_string(),
            executions: stat("stat::number_of_executed_units:"),
            exec_per_sec: stat("stat::average_exec_per_sec:"),
            edges: field("cov:"),
            features: field("ft:"),
            corpus: field("corp:"),
            wall,
            load: load.split_whitespace().take(3).collect::<Vec<_>>().join(" "),
        }
    }

    fn line(&self) -> String {
        format!(
            "{} executions in {:.0} s, {} exec/s, {} edges, {} features, corpus {} (load average {})",
            self.executions,
            self.wall.as_secs_f64(),
            self.exec_per_sec,
            self.edges,
            self.features,
            self.corpus,
            self.load
        )
    }
}

fn print_table(done: &[Stats]) {
    println!(
        "\n| target | executions | edges | features | corpus (inputs/bytes) | wall | exec/s | load average at the end |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    for s in done {
        println!(
            "| {} | {} | {} | {} | {} | {:.0} s | {} | {} |",
            s.name,
            s.executions,
            s.edges,
            s.features,
            s.corpus,
            s.wall.as_secs_f64(),
            s.exec_per_sec,
            s.load
        );
    }
}

fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    v.retain(|p| p.is_file());
    v.sort();
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_profile_offered_is_one_fuzz_cargo_toml_defines() {
        let manifest = std::fs::read_to_string(hmb_harness::workspace_root().join("fuzz/Cargo.toml")).unwrap();
        for profile in PROFILES.iter().filter(|p| **p != "release") {
            assert!(
                manifest.lines().any(|l| l.trim() == format!("[profile.{profile}]")),
                "fuzz/Cargo.toml has no [profile.{profile}]"
            );
        }
    }

    #[test]
    fn the_profile_flag_takes_only_the_offered_profiles() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            fuzz: Fuzz,
        }
        assert_eq!(Cli::try_parse_from(["x"]).unwrap().fuzz.profile, "release");
        assert_eq!(
            Cli::try_parse_from(["x", "--profile", "fuzz-ci"]).unwrap().fuzz.profile,
            "fuzz-ci"
        );
        assert!(Cli::try_parse_from(["x", "--profile", "dev"]).is_err());
    }
}
