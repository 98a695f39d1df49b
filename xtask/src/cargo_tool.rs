//! Tools the xtask commands install on first use (the nightly toolchain,
//! cargo-nextest): one probe-then-install routine so each says why it
//! installs and fails with the same kind of error.

use anyhow::{Context, Result};
use xshell::{cmd, Shell};

/// Runs `probe` quietly; if it fails, says what `install` is for and runs it.
fn ensure(probe: xshell::Cmd<'_>, install: xshell::Cmd<'_>, why: &str) -> Result<()> {
    if probe.quiet().ignore_stdout().ignore_stderr().run().is_ok() {
        return Ok(());
    }
    println!("installing {why}");
    install.run().with_context(|| format!("could not install {why}"))
}

/// The nightly toolchain: libFuzzer and the sanitizers need it.
pub(crate) fn ensure_nightly(sh: &Shell) -> Result<()> {
    ensure(
        cmd!(sh, "cargo +nightly --version"),
        cmd!(sh, "rustup toolchain install nightly --profile minimal"),
        "the nightly toolchain (rustup, minimal profile): libFuzzer and sanitizers need it",
    )
}

/// cargo-nextest: runs the conformance scenarios one process each, with JUnit.
pub(crate) fn ensure_nextest(sh: &Shell) -> Result<()> {
    ensure(
        cmd!(sh, "cargo nextest --version"),
        cmd!(sh, "cargo install --locked cargo-nextest"),
        "cargo-nextest (crates.io): runs the conformance scenarios one process each, with JUnit",
    )
}
