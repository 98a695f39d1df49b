//! `cargo xtask <command>`: the project's entry points for people and CI.

mod boot;
mod deps;
mod guest_smoke;
mod images;
mod interrupt;
mod phases;
mod qemu;
mod test_cmd;
mod truth;
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
    /// The main job: emulated SSD -> QEMU guest (real module and daemon) -> trace.bin -> report.
    Boot(boot::BootArgs),
    /// Run everything CI runs: formatting, clippy, host tests, ABI checks.
    Test(test_cmd::TestArgs),
    /// Regenerate docs/test-vectors/v1 from the reference producer.
    Vectors,
    /// Install missing host packages (apt), saying what and why.
    Deps(deps::DepsArgs),
    /// Prepare a guest image: kernel, module, initramfs (cached).
    Image(images::ImageArgs),
    /// Boot a guest image, run uname -r and insmod, power off.
    GuestSmoke(guest_smoke::SmokeArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Boot(args) => boot::run(args),
        Command::Test(args) => test_cmd::run(args),
        Command::Vectors => vectors::run(),
        Command::Deps(args) => deps::run(args),
        Command::Image(args) => images::run(args),
        Command::GuestSmoke(args) => guest_smoke::run(args),
    }
}

/// The workspace root, whichever directory cargo was started from.
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the root")
        .to_path_buf()
}
