//! `cargo xtask sanitize`: the tests of the crates with unsafe code over
//! shared memory, built with AddressSanitizer (nightly `-Zsanitizer=address`,
//! nothing to download) so that an out-of-bounds or use-after-unmap access
//! in a mapping view fails the test instead of reading a neighbour's bytes.
//!
//! The crates: the consumer's read-only ring view and its I/O slices into
//! the mapping (`hmb-trace-consumer`), the firmware model's shared mapping
//! (`hmb-firmware-model`), the NVMe trace view over guest memory
//! (`hmb-nvme-trace`), emu-device's HMB mapping (`hmb-emu-device`'s unit
//! tests) and the daemon binary's device mapping and ioctls
//! (`hmb-trace-daemon`). `hmb-nvme` has no unsafe code. Miri is not
//! installable here (docs/fuzzing.md), which is why this is ASan.

use anyhow::Result;
use clap::Args;
use xshell::{cmd, Shell};

const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Each package and which of its tests run: every test target of the first
/// three; only the unit tests of emu-device (its integration tests start
/// processes and guests ASan adds nothing to); the daemon's tests that run
/// the real binary (instrumented too) on a ring file, not the 120-round
/// kill/restart test.
const RUNS: &[(&str, &[&str])] = &[
    ("hmb-trace-consumer", &["--tests"]),
    ("hmb-firmware-model", &["--tests"]),
    ("hmb-nvme-trace", &["--tests"]),
    ("hmb-emu-device", &["--lib"]),
    ("hmb-trace-daemon", &["--test", "behaviour", "--test", "output_full"]),
];

/// What `--quick` (the test command) runs: the daemon's tests instrument
/// both sides of the ring at once, the firmware model's shared mapping in
/// the test process and the consumer core's view, its I/O slices and the
/// daemon's device code in the binary. The full list costs about twice the
/// CPU (docs/fuzzing.md).
const QUICK: &str = "hmb-trace-daemon";

#[derive(Args, Debug)]
pub struct Sanitize {
    /// One package (default: every package of the list above).
    #[arg(long, short = 'p')]
    pub package: Option<String>,
    /// Only the daemon's tests (what `cargo xtask test` runs).
    #[arg(long, conflicts_with = "package")]
    pub quick: bool,
}

impl Sanitize {
    pub fn run(self, sh: &Shell) -> Result<()> {
        let root = hmb_harness::workspace_root();
        sh.change_dir(&root);
        crate::cargo_tool::ensure_nightly(sh)?;
        // Its own target directory: sanitizer flags rebuild every crate.
        let target_dir = hmb_harness::target_dir().join("asan");
        // `--target` keeps RUSTFLAGS away from build scripts and proc
        // macros, which cannot run instrumented.
        let _flags = sh.push_env("RUSTFLAGS", "-Zsanitizer=address -Cforce-frame-pointers");
        let _rustdoc = sh.push_env("RUSTDOCFLAGS", "-Zsanitizer=address");
        // A leak in a test is a finding too; every report aborts the test.
        let _asan = sh.push_env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1");
        let runs: Vec<_> = RUNS
            .iter()
            .filter(|(p, _)| {
                let only = if self.quick {
                    Some(QUICK)
                } else {
                    self.package.as_deref()
                };
                only.is_none_or(|o| o == *p)
            })
            .collect();
        anyhow::ensure!(
            !runs.is_empty(),
            "unknown package; sanitized: {:?}",
            RUNS.iter().map(|r| r.0).collect::<Vec<_>>()
        );
        // One cargo call per package: each has its own test selection.
        for &(package, select) in runs {
            println!("==> AddressSanitizer: {package} {}", select.join(" "));
            cmd!(
                sh,
                "cargo +nightly test --quiet --target {TRIPLE} --target-dir {target_dir} -p {package} {select...}"
            )
            .run()?;
        }
        println!("AddressSanitizer: no report");
        Ok(())
    }
}
