//! `emu-device`: the emulated NVMe controller (serve) and its control
//! client (ctl), plus a debug ivshmem peer (peer).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use hmb_emu_device::control::{call, Fault, Request, VersionPart};
use hmb_emu_device::ivshmem::device::Msg;
use hmb_emu_device::ivshmem::hmb::HMB_DEFAULT_SIZE;
use hmb_emu_device::ivshmem::production::Plan;
use hmb_emu_device::ivshmem::serve::{ServeOptions, Serving};
use hmb_emu_device::ivshmem::transport::{Vectors, VECTOR_DATA, VECTOR_STATE};
use hmb_emu_device::ivshmem::{IvshmemClient, DEFAULT_VECTORS, DEVICE_PEER_ID};
use hmb_emu_device::vfio_user::nvme::{NvmeServeOptions, NvmeServing};
use hmb_firmware_model::NotifyPolicy;
use hmb_nvme_trace::{Personality, ProducerKind};
use nix::sys::signal::{SigSet, Signal};

#[derive(Parser)]
#[command(
    name = "emu-device",
    version,
    about = "Emulated NVMe controller of hmb-trace: serves an emulated HMB to QEMU's ivshmem-doorbell device and runs the firmware model in it (serve), or a full NVMe controller with a real HMB over vfio-user (serve-nvme)"
)]
struct Cli {
    /// Log level: error, warn, info, debug, trace (RUST_LOG overrides).
    #[arg(long, global = true, default_value = "info")]
    log_level: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the device: ivshmem server (QEMU connects with
    /// `-chardev socket,path=SOCKET,id=ivs -device ivshmem-doorbell,chardev=ivs,vectors=2`)
    /// and the control socket. Exits on SIGTERM/SIGINT, on `ctl shutdown`,
    /// or when QEMU disconnects.
    Serve(ServeArgs),
    /// Run the NVMe controller (hmb-nvme, with a real HMB) on a vfio-user
    /// socket for QEMU 11.1's `vfio-user-pci` (guest RAM must be a shared
    /// memfd), and the control socket. Exits on SIGTERM/SIGINT, on
    /// `ctl shutdown`, or when QEMU disconnects.
    ServeNvme(ServeNvmeArgs),
    /// Write a serve-nvme namespace as a flat image (what `dd` of the namespace gives),
    /// read from its backing file through the FTL (recovered read-only as at power-on:
    /// the backing file is never written). For e2fsck, debugfs, mount -o loop and
    /// pattern checks on the host. Exit 1 with a message if the file holds no FTL or was
    /// made for another namespace size.
    ExportNamespace(ExportNamespaceArgs),
    /// Talk to a running device over its control socket.
    Ctl {
        /// Control socket of the device.
        #[arg(long, short = 'c', env = "HMB_TRACE_CONTROL")]
        control: PathBuf,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 30)]
        timeout: u64,
        #[command(subcommand)]
        cmd: CtlCmd,
    },
    /// Connect to an ivshmem server as a client (what QEMU does), for
    /// debugging: print the setup, then ring or watch.
    Peer {
        /// ivshmem server socket.
        #[arg(long)]
        socket: PathBuf,
        /// Vectors this client is configured for.
        #[arg(long, default_value_t = DEFAULT_VECTORS)]
        vectors: u16,
        #[command(subcommand)]
        cmd: PeerCmd,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Unix socket QEMU's ivshmem chardev connects to.
    #[arg(long)]
    socket: PathBuf,
    /// Unix socket for control requests (line-delimited JSON).
    #[arg(long)]
    control: PathBuf,
    /// HMB size: a power of two, with optional K/M/G suffix.
    #[arg(long, default_value_t = HMB_DEFAULT_SIZE.to_string(), value_parser = parse_size)]
    hmb_size: String,
    /// Interrupt vectors per peer; must match QEMU's `vectors=`.
    #[arg(long, default_value_t = DEFAULT_VECTORS)]
    vectors: u16,
    /// Vector raised when records are published.
    #[arg(long, default_value_t = VECTOR_DATA)]
    data_vector: u16,
    /// Vector raised on ring state changes (FROZEN, header faults); the
    /// kernel module uses one vector for everything, hence 0.
    #[arg(long, default_value_t = VECTOR_STATE)]
    state_vector: u16,
    /// Interrupt the guest once this many new bytes are published...
    #[arg(long, default_value = "64K", value_parser = parse_size)]
    watermark: String,
    /// ...or once unnotified data has waited this many microseconds.
    #[arg(long, default_value_t = 1000)]
    notify_timeout_us: u64,
    /// Keep serving after the last QEMU disconnects.
    #[arg(long)]
    stay_after_disconnect: bool,
    /// Start producing this workload as soon as a ring is ready
    /// (ssd, npu, sizes, sizes:fixed=N, sizes:uniform=A-B).
    #[arg(long)]
    workload: Option<String>,
    /// Seed of the initial workload.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Records per second of the initial workload (0 = unlimited).
    #[arg(long, default_value_t = 0)]
    rate: u64,
}

#[derive(clap::Args)]
struct ServeNvmeArgs {
    /// Unix socket QEMU's vfio-user-pci connects to.
    #[arg(long)]
    socket: PathBuf,
    /// Unix socket for control requests (line-delimited JSON).
    #[arg(long)]
    control: PathBuf,
    /// Namespace size (K/M/G suffix; a multiple of 512).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    namespace_size: String,
    /// Sparse file behind the namespace (default: memory).
    #[arg(long)]
    backing: Option<PathBuf>,
    /// HMB the controller prefers (Identify HMPRE; 0 = no HMB).
    #[arg(long, default_value = "32M", value_parser = parse_size)]
    hmb_preferred: String,
    /// Smallest HMB the controller accepts (Identify HMMIN).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    hmb_minimum: String,
    /// Most HMB descriptors the controller takes (Identify HMMAXD; 0 = no limit
    /// reported). A 1 GiB trace ring in 4 MiB chunks needs more than the default.
    #[arg(long, default_value_t = hmb_nvme::ControllerConfig::default().hmmaxd)]
    hmb_max_descriptors: u16,
    /// Keep serving after QEMU disconnects (the next QEMU finds the same
    /// controller and data).
    #[arg(long)]
    stay_after_disconnect: bool,
    /// Which controller to be: tracing (declares the trace contract), stock (an HMB, no
    /// contract: C0h Invalid Field), refusing-probe, refusing-reinit, small-hmb (HMPRE =
    /// HMMIN), few-descriptors (HMMAXD 4), big-chunks (HMMINDS 2 MiB). The environment
    /// variable lets a harness that starts serve-nvme pick one without new flags.
    #[arg(long, env = "HMB_EMU_NVME_PERSONALITY", default_value = "tracing")]
    personality: Personality,
    /// Which producer writes the trace ring: rust (the firmware model) or c
    /// (firmware-sdk's library through FFI; same bytes, docs/firmware-sdk.md).
    #[arg(long, env = "HMB_EMU_NVME_PRODUCER", default_value = "rust")]
    producer: ProducerKind,
    /// Bound of the controller's own history of trace records, which the
    /// Telemetry log pages (07h, 08h) serve (K/M suffix; 64K ..= 33553856,
    /// so that it fits data areas 1-3).
    #[arg(long, default_value = "4M", value_parser = parse_size)]
    telemetry_history: String,
    /// Bound of the journal of records produced into an adopted trace slice,
    /// the ground truth the harness checks trace.bin against (K/M/G suffix; at
    /// least 4K; about 57 bytes a record): beyond it the oldest records go and
    /// the journal counts them, so a long traced run stays this size.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    trace_journal: String,
    /// Identify Controller's serial number, at most 20 ASCII characters
    /// (default HMBTRACE0001); the subsystem NQN ends in it. Give each
    /// controller of one guest its own.
    #[arg(long)]
    serial: Option<String>,
    /// When I/O completions are posted: none (at once, the fastest tests) or model (when
    /// the FTL's NAND timing model says the command's media work ends, so fio and the
    /// trace see the model's latencies). The environment variable lets a harness pick one
    /// without new flags.
    #[arg(long, env = "HMB_EMU_NVME_TIMING", default_value = "none")]
    timing: hmb_nvme::Timing,
}

#[derive(clap::Args)]
struct ExportNamespaceArgs {
    /// The namespace's backing file (serve-nvme --backing).
    #[arg(long)]
    backing: PathBuf,
    /// The namespace size it was served with (serve-nvme --namespace-size).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    namespace_size: String,
    /// The flat image to write (created or truncated; sparse where the namespace reads
    /// zeroes).
    #[arg(long)]
    output: PathBuf,
}

#[derive(Subcommand)]
enum CtlCmd {
    /// Phase, guests, slice, plan.
    Status,
    /// Start (or change) production; it begins when a ring is ready and
    /// resumes by itself after resets.
    Start {
        #[arg(long, default_value = "ssd")]
        workload: String,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Records per second, 0 = unlimited.
        #[arg(long, default_value_t = 0)]
        rate: u64,
        /// Most records emitted back to back (default about 1 ms worth).
        #[arg(long)]
        burst: Option<u32>,
    },
    /// Stop production (the ring stays live).
    Stop,
    /// Inject a fault.
    Inject {
        #[command(subcommand)]
        fault: FaultCmd,
    },
    /// Producer, header and interrupt counters.
    Stats,
    /// Segments produced (epoch, workload, seed, seq range) and faults.
    GroundTruth,
    /// Raise an interrupt vector in the guest by hand.
    Interrupt { vector: u16 },
    /// Shut the device down cleanly.
    Shutdown,
    /// NVMe device: the controller's host-write audit of its HMB (violations, Set
    /// Features 0Dh seen, vendor features seen).
    HmbAudit,
    /// NVMe device: when I/O completions are posted from now on (as serve-nvme
    /// --timing): none (at once) or model (when the NAND timing model says).
    Timing { timing: String },
}

#[derive(Subcommand)]
enum FaultCmd {
    /// Controller reset: FROZEN, state interrupt, wait for re-init.
    Reset,
    /// Overwrite the ring magic.
    CorruptMagic,
    /// Raise the ring's major or minor version.
    BumpVersion { part: VersionPart },
    /// Publish a record with a lying length, then halt production.
    Hostile,
    /// Set a ring flag bit ABI v1 does not define.
    UnknownFlag,
    /// Pause the producer.
    Stall {
        /// How long, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        ms: u64,
    },
    /// On the next withdrawal, keep producing for a while before stopping
    /// and acknowledging (in-flight DMA).
    LateStop {
        /// How long, in milliseconds.
        #[arg(long, default_value_t = 1000)]
        ms: u64,
    },
    /// Rewrite the module's header fields: tail to 0, epoch one lower.
    RewindHeader,
    /// Stop and make the advert, device block and ring header read all-ones.
    Vanish,
    /// NVMe: a recovered firmware assert: Controller-Initiated Telemetry
    /// captured and announced, the controller carries on.
    FirmwareAssert,
}

#[derive(Subcommand)]
enum PeerCmd {
    /// Print id, shared memory size and peers, then exit.
    Info,
    /// Ring a peer's vector (the device is peer 0).
    Ring {
        #[arg(long, default_value_t = DEVICE_PEER_ID)]
        peer: u16,
        #[arg(long, default_value_t = 0)]
        vector: u16,
    },
    /// Wait for interrupts on a vector and print them.
    Watch {
        #[arg(long, default_value_t = 0)]
        vector: u16,
        /// Stop after this many seconds.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
    },
}

/// `65536`, `64K`, `32M`, `1G` (binary units, optional `iB`).
fn parse_size_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: u64 = num.trim().parse().map_err(|_| format!("not a size: {s:?}"))?;
    n.checked_mul(mult).ok_or_else(|| format!("size too large: {s:?}"))
}

fn parse_size(s: &str) -> Result<String, String> {
    parse_size_bytes(s).map(|n| n.to_string())
}

fn serve(args: ServeArgs) -> Result<()> {
    // Block the termination signals in every thread; one thread waits for
    // them and turns them into a clean shutdown.
    let mut sigs = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        sigs.add(s);
    }
    sigs.thread_block().context("blocking signals")?;
    let initial_plan = args.workload.map(|workload| Plan {
        workload,
        seed: args.seed,
        rate: args.rate,
        burst: Plan::default_burst(args.rate),
    });
    if let Some(plan) = &initial_plan {
        plan.workload()?;
    }
    let opts = ServeOptions {
        ivshmem_socket: args.socket,
        control_socket: args.control,
        hmb_size: args.hmb_size.parse()?,
        vectors: args.vectors,
        policy: NotifyPolicy {
            watermark_bytes: args.watermark.parse()?,
            timeout: Duration::from_micros(args.notify_timeout_us),
        },
        exit_on_disconnect: !args.stay_after_disconnect,
        initial_plan,
        irq_vectors: Vectors {
            data: args.data_vector,
            state: args.state_vector,
        },
    };
    let serving = Serving::start(&opts)?;
    let tx = serving.sender();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        if let Ok(sig) = sigs.wait() {
            log::info!("{sig:?} received, shutting down");
            let _ = tx.send(Msg::Shutdown(format!("{sig:?}")));
        }
    })?;
    let why = serving.run()?;
    log::info!("emu-device stopped: {why}");
    Ok(())
}

fn serve_nvme(args: ServeNvmeArgs) -> Result<()> {
    let mut sigs = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        sigs.add(s);
    }
    sigs.thread_block().context("blocking signals")?;
    let opts = NvmeServeOptions {
        socket: args.socket,
        control_socket: args.control,
        namespace_bytes: args.namespace_size.parse()?,
        backing: args.backing,
        hmb_preferred: args.hmb_preferred.parse()?,
        hmb_minimum: args.hmb_minimum.parse()?,
        hmb_max_descriptors: args.hmb_max_descriptors,
        keep_serving: args.stay_after_disconnect,
        personality: args.personality,
        producer: args.producer,
        telemetry_history_bytes: args.telemetry_history.parse()?,
        trace_journal_bytes: args.trace_journal.parse()?,
        serial: args.serial,
        timing: args.timing,
    };
    let serving = NvmeServing::start(&opts)?;
    let stop = serving.shutdown_sender();
    std::thread::Builder::new().name("signals".into()).spawn(move || {
        if let Ok(sig) = sigs.wait() {
            log::info!("{sig:?} received, shutting down");
            stop(format!("{sig:?}"));
        }
    })?;
    let why = serving.run()?;
    log::info!("emu-device stopped: {why}");
    // A QEMU still attached keeps the vfio-user thread in its read: end here.
    std::process::exit(0);
}

/// Print a line on stdout; a closed pipe (`| head`) ends quietly, not in
/// a panic.
fn say(text: impl std::fmt::Display) -> Result<()> {
    use std::io::Write;
    match writeln!(std::io::stdout().lock(), "{text}") {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

fn ctl(control: PathBuf, timeout: u64, cmd: CtlCmd) -> Result<()> {
    let req = match cmd {
        CtlCmd::Status => Request::Status,
        CtlCmd::Start {
            workload,
            seed,
            rate,
            burst,
        } => Request::Start {
            workload,
            seed,
            rate,
            burst,
        },
        CtlCmd::Stop => Request::Stop,
        CtlCmd::Inject { fault } => Request::Inject(match fault {
            FaultCmd::Reset => Fault::Reset,
            FaultCmd::CorruptMagic => Fault::CorruptMagic,
            FaultCmd::BumpVersion { part } => Fault::BumpVersion { part },
            FaultCmd::Hostile => Fault::Hostile,
            FaultCmd::Stall { ms } => Fault::Stall { ms },
            FaultCmd::UnknownFlag => Fault::UnknownFlag,
            FaultCmd::LateStop { ms } => Fault::LateStop { ms },
            FaultCmd::RewindHeader => Fault::RewindHeader,
            FaultCmd::Vanish => Fault::Vanish,
            FaultCmd::FirmwareAssert => Fault::FirmwareAssert,
        }),
        CtlCmd::Stats => Request::Stats,
        CtlCmd::GroundTruth => Request::GroundTruth,
        CtlCmd::Interrupt { vector } => Request::Interrupt { vector },
        CtlCmd::Shutdown => Request::Shutdown,
        CtlCmd::HmbAudit => Request::HmbAudit,
        CtlCmd::Timing { timing } => Request::Timing { timing },
    };
    let resp = call(&control, &req, Duration::from_secs(timeout))?;
    if resp.ok {
        say(serde_json::to_string_pretty(&resp.result.unwrap_or_default())?)?;
        Ok(())
    } else {
        bail!("{}", resp.error.unwrap_or_else(|| "request failed".into()))
    }
}

fn peer(socket: PathBuf, vectors: u16, cmd: PeerCmd) -> Result<()> {
    let client = IvshmemClient::connect(&socket, vectors as usize, Duration::from_secs(5))?;
    let shm_size = nix::sys::stat::fstat(std::os::fd::AsRawFd::as_raw_fd(&client.shm))?.st_size;
    match cmd {
        PeerCmd::Info => {
            let peers: Vec<String> = client
                .peers
                .iter()
                .map(|(id, fds)| format!("{id}({} vectors)", fds.len()))
                .collect();
            say(format!(
                "id {} shm {} bytes own vectors {} peers [{}]",
                client.id,
                shm_size,
                client.own.len(),
                peers.join(", ")
            ))?;
        }
        PeerCmd::Ring { peer, vector } => {
            client.ring(peer, vector)?;
            say(format!("rang peer {peer} vector {vector}"))?;
        }
        PeerCmd::Watch { vector, seconds } => {
            let deadline = std::time::Instant::now() + Duration::from_secs(seconds);
            let mut total = 0u64;
            while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
                if let Some(n) = client.wait_interrupt(vector, left)? {
                    total += n;
                    say(format!("interrupt on vector {vector} (x{n}, total {total})"))?;
                }
            }
        }
    }
    Ok(())
}

fn export_namespace(args: ExportNamespaceArgs) -> Result<()> {
    let bytes: u64 = args.namespace_size.parse()?;
    let mut image = hmb_nvme::NamespaceImage::open(&args.backing, bytes)
        .with_context(|| format!("reading the FTL of {}", args.backing.display()))?;
    let written = image
        .export(&args.output)
        .with_context(|| format!("exporting to {}", args.output.display()))?;
    println!("{}: {bytes} bytes, {written} bytes of data", args.output.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(&cli.log_level))
        .format_timestamp_millis()
        .init();
    let result = match cli.cmd {
        Cmd::Serve(args) => serve(args),
        Cmd::ServeNvme(args) => serve_nvme(args),
        Cmd::ExportNamespace(args) => export_namespace(args),
        Cmd::Ctl { control, timeout, cmd } => ctl(control, timeout, cmd),
        Cmd::Peer { socket, vectors, cmd } => peer(socket, vectors, cmd),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("emu-device: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size_bytes("65536"), Ok(65536));
        assert_eq!(parse_size_bytes("64K"), Ok(65536));
        assert_eq!(parse_size_bytes("32M"), Ok(32 << 20));
        assert_eq!(parse_size_bytes("32MiB"), Ok(32 << 20));
        assert_eq!(parse_size_bytes("1G"), Ok(1 << 30));
        assert!(parse_size_bytes("lots").is_err());
        assert!(parse_size_bytes("99999999999999G").is_err());
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
