//! `cargo xtask <command>`: the project's entry points for people and CI.

mod test_cmd;
mod vectors;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "hmb-trace project tasks", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything CI runs: formatting, clippy, host tests, ABI checks.
    Test(test_cmd::TestArgs),
    /// Regenerate docs/test-vectors/v1 from the reference producer.
    Vectors,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Test(args) => test_cmd::run(args),
        Command::Vectors => vectors::run(),
    }
}

/// The workspace root, whichever directory cargo was started from.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}
