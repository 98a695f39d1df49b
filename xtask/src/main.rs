//! `cargo xtask <command>`: the project's entry points for people and CI.
//! The command line is declared here, once; each command is one module that
//! `run`s itself over the `hmb-harness` library.

mod bench;
mod boot;
mod cargo_tool;
mod conformance;
mod debug_kernel;
mod deps;
mod firmware_sdk;
mod flags;
mod fuzz;
mod guest_smoke;
mod host_integration;
mod image;
mod nvme_series;
mod nvme_smoke;
mod sanitize;
mod soak;
mod test;
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
    /// Without --device: nvme, or ivshmem when an option only ivshmem has is given.
    Boot(boot::Boot),
    /// Conformance scenarios on real guest kernels (snapshots, table, JUnit).
    Conformance(conformance::Conformance),
    /// The lock scenarios on the 6.12-debug kernel (lockdep, KASAN, UBSAN; opt-in, built on first use).
    DebugKernel(debug_kernel::DebugKernel),
    /// Every throughput figure beside its baseline in one table, bench.json in the run folder.
    Bench(bench::Bench),
    /// Run everything CI runs: formatting, clippy, host tests, ABI checks.
    Test(test::Test),
    /// Regenerate docs/test-vectors/v1 from the reference producer.
    Vectors(vectors::Vectors),
    /// Install missing host packages (apt), saying what and why.
    Deps(deps::Deps),
    /// Prepare a guest image: kernel, module, initramfs (cached).
    Image(image::Image),
    /// Boot a guest image, run uname -r and insmod, power off.
    GuestSmoke(guest_smoke::GuestSmoke),
    /// NVMe driver patch series: fetch Debian's source, apply, checkpatch --strict, build nvme.ko.
    NvmeSeries(nvme_series::NvmeSeries),
    /// The patched nvme.ko in a guest under the stock nvme-core, on QEMU's own NVMe device.
    NvmeSmoke(nvme_smoke::NvmeSmoke),
    /// DKMS, udev and the systemd unit as a user installs them, in a full Debian guest.
    HostIntegration(host_integration::HostIntegration),
    /// Fuzz the parsers of untrusted bytes and the NVMe controller (nightly, libFuzzer).
    Fuzz(fuzz::Fuzz),
    /// The tests of the crates with unsafe mapping code under AddressSanitizer (nightly).
    Sanitize(sanitize::Sanitize),
    /// A bench: stream for minutes with resets every minute, then check the ground truth.
    Soak(soak::Soak),
    /// The C producer for firmware: sanitizer run, code size, `--regen` of its events header.
    FirmwareSdk(firmware_sdk::FirmwareSdk),
}

fn main() -> Result<()> {
    let command = Cli::parse().command;
    // One shell for the whole command: its steps and the library's helpers
    // run their host commands through it.
    let sh = &xshell::Shell::new()?;
    match command {
        Command::Boot(c) => c.run(sh),
        Command::Conformance(c) => c.run(sh),
        Command::DebugKernel(c) => c.run(sh),
        Command::Test(c) => c.run(sh),
        Command::Bench(c) => c.run(sh),
        Command::Vectors(c) => c.run(sh),
        Command::Deps(c) => c.run(sh),
        Command::Image(c) => c.run(sh),
        Command::GuestSmoke(c) => guest_smoke::run(c, sh),
        Command::NvmeSeries(c) => c.run(sh),
        Command::NvmeSmoke(c) => nvme_smoke::run(c, sh),
        Command::HostIntegration(c) => c.run(sh),
        Command::Fuzz(c) => c.run(sh),
        Command::Sanitize(c) => c.run(sh),
        Command::Soak(c) => c.run(sh),
        Command::FirmwareSdk(c) => c.run(sh),
    }
}
