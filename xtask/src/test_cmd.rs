//! `cargo xtask test`: the README's test command, and what `.ci/run` calls.

use anyhow::Result;
use clap::Args;
use xshell::{cmd, Shell};

#[derive(Args)]
pub struct TestArgs {
    /// Only the host checks (format, lint, unit and integration tests).
    #[arg(long)]
    pub host_only: bool,
}

pub fn run(_args: TestArgs) -> Result<()> {
    let sh = Shell::new()?;
    sh.change_dir(crate::workspace_root());
    step("cargo fmt --check");
    cmd!(sh, "cargo fmt --all -- --check").run()?;
    step("cargo clippy -D warnings");
    cmd!(sh, "cargo clippy --workspace --all-targets --quiet -- -D warnings").run()?;
    step("host tests");
    cmd!(sh, "cargo test --workspace --quiet").run()?;
    println!("xtask test: all passed");
    Ok(())
}

fn step(name: &str) {
    println!("==> {name}");
}
