//! `cargo xtask <command>`: the project's entry points for people and CI.

use anyhow::Result;
use clap::{Parser, Subcommand};
use xtask::{boot, conformance_cmd, deps, guest_smoke, images, nvme_series, nvme_smoke, test_cmd, vectors};

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
    /// Conformance scenarios on real guest kernels (snapshots, table, JUnit).
    Conformance(conformance_cmd::ConformanceArgs),
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
    /// NVMe driver patch series: fetch Debian's source, apply, checkpatch --strict, build nvme.ko.
    NvmeSeries(nvme_series::SeriesArgs),
    /// The patched nvme.ko in a guest under the stock nvme-core, on QEMU's own NVMe device.
    NvmeSmoke(nvme_smoke::NvmeSmokeArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Boot(args) => boot::run(args),
        Command::Conformance(args) => conformance_cmd::run(args),
        Command::Test(args) => test_cmd::run(args),
        Command::Vectors => vectors::run(),
        Command::Deps(args) => deps::run(args),
        Command::Image(args) => images::run(args),
        Command::GuestSmoke(args) => guest_smoke::run(args),
        Command::NvmeSeries(args) => nvme_series::run(args),
        Command::NvmeSmoke(args) => nvme_smoke::run(args),
    }
}
