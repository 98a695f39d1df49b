//! `cargo xtask sanitize`: the tests of the crates with unsafe code over
//! shared memory, built with AddressSanitizer (nightly `-Zsanitizer=address`,
//! nothing to download) so that an out-of-bounds or use-after-unmap access
//! in a mapping view fails the test instead of reading a neighbour's bytes.
//!
//! The crates: the consumer's read-only ring view and its I/O slices into
//! the mapping (`hmb-trace-consumer`), the firmware model's shared mapping
//! (`hmb-firmware-model`), the NVMe trace view over guest memory
//! (`hmb-nvme-trace`) and emu-device's HMB mapping (`hmb-emu-device`'s unit
//! tests). `hmb-nvme` has no unsafe code. Miri is not installable here
//! (docs/fuzzing.md), which is why this is ASan.

use anyhow::Result;
use clap::Args;
use xshell::{cmd, Shell};

const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Every test target of these packages.
const PACKAGES: &[&str] = &["hmb-trace-consumer", "hmb-firmware-model", "hmb-nvme-trace"];
/// Only the unit tests of these (their integration tests start processes
/// and guests that ASan adds nothing to).
const LIB_ONLY: &[&str] = &["hmb-emu-device"];

#[derive(Args, Debug)]
pub struct Sanitize {
    /// One package (default: all of the list above).
    #[arg(long, short = 'p')]
    pub package: Option<String>,
}

impl Sanitize {
    pub fn run(self) -> Result<()> {
        let sh = Shell::new()?;
        let root = hmb_harness::workspace_root();
        sh.change_dir(&root);
        crate::fuzz::ensure_nightly(&sh)?;
        // Its own target directory: sanitizer flags rebuild every crate.
        let target_dir = hmb_harness::target_dir().join("asan");
        // `--target` keeps RUSTFLAGS away from build scripts and proc
        // macros, which cannot run instrumented.
        let _flags = sh.push_env("RUSTFLAGS", "-Zsanitizer=address -Cforce-frame-pointers");
        let _rustdoc = sh.push_env("RUSTDOCFLAGS", "-Zsanitizer=address");
        // A leak in a test is a finding too; every report aborts the test.
        let _asan = sh.push_env("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=1");
        let wanted = |p: &&str| args_wants(&self.package, p);
        let full: Vec<&str> = PACKAGES.iter().copied().filter(wanted).collect();
        let lib: Vec<&str> = LIB_ONLY.iter().copied().filter(wanted).collect();
        anyhow::ensure!(
            !full.is_empty() || !lib.is_empty(),
            "unknown package; sanitized: {:?} and the unit tests of {:?}",
            PACKAGES,
            LIB_ONLY
        );
        if !full.is_empty() {
            println!("==> AddressSanitizer: every test of {}", full.join(", "));
            let pk: Vec<String> = full.iter().flat_map(|p| ["-p".to_string(), p.to_string()]).collect();
            cmd!(
                sh,
                "cargo +nightly test --quiet --target {TRIPLE} --target-dir {target_dir} {pk...} --tests"
            )
            .run()?;
        }
        if !lib.is_empty() {
            println!("==> AddressSanitizer: the unit tests of {}", lib.join(", "));
            let pk: Vec<String> = lib.iter().flat_map(|p| ["-p".to_string(), p.to_string()]).collect();
            cmd!(
                sh,
                "cargo +nightly test --quiet --target {TRIPLE} --target-dir {target_dir} {pk...} --lib"
            )
            .run()?;
        }
        println!("AddressSanitizer: no report");
        Ok(())
    }
}

fn args_wants(only: &Option<String>, package: &str) -> bool {
    only.as_deref().is_none_or(|o| o == package)
}
