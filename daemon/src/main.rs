use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use hmb_trace_daemon::device::{CharDevice, RingFile, TraceDevice};
use hmb_trace_daemon::drain::{self, DaemonStats, Exit, Options};
use hmb_trace_daemon::output::Fsync;
use hmb_trace_daemon::{exit, signals};

/// Drain the NVMe HMB trace ring into trace.bin: raw records, in ring
/// order, with LOST / FROZEN / EPOCH markers; nothing lost, nothing doubled,
/// also across SIGKILL and restart.
#[derive(Parser, Debug)]
#[command(version, after_help = exit::HELP)]
struct Cli {
    /// Trace device of the kernel module (opened exclusively).
    #[arg(short, long, default_value = "/dev/nvme-hmb-trace0", conflicts_with = "ring_file")]
    device: PathBuf,
    /// Drain a ring held in a plain file or /dev/shm object instead of the
    /// device (host tests, emulation); the daemon then publishes the tail
    /// and re-initialises the ring itself.
    #[arg(long, value_name = "PATH")]
    ring_file: Option<PathBuf>,
    /// Output file; appended to (after recovery) if it exists.
    #[arg(short, long, default_value = "trace.bin")]
    output: PathBuf,
    /// After FROZEN: re-initialise the ring and continue with the new
    /// epoch instead of exiting with code 8.
    #[arg(long)]
    follow: bool,
    /// Print records, bytes, drops, batches and wakeups to stderr at exit.
    #[arg(long)]
    stats: bool,
    /// When to sync trace.bin: `never` (safe against crashes and SIGKILL)
    /// or `batch` (also against power loss, before each tail publish).
    #[arg(long, value_enum, default_value_t = Fsync::Never)]
    fsync: Fsync,
    /// Longest sleep in poll() when the ring is empty, in milliseconds.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    poll_timeout_ms: u64,
    /// After a batch smaller than an eighth of the ring (a slow producer),
    /// sleep this long before looking again, so records gather into fewer,
    /// larger batches; 0 looks again at once. A signal ends the sleep; the
    /// ring is drained before the daemon stops. Bounds how stale trace.bin
    /// is, on top of the module's poll_ms.
    #[arg(long, default_value_t = 100, value_name = "MS")]
    batch_wait_ms: u64,
    /// Largest batch written with one writev, in KiB (the tail is published
    /// after each batch). 256 KiB keeps a batch in the core's L2 between
    /// validating it and the kernel copying it, and hands space back to the
    /// producer sooner; measured no worse than 1 MiB (docs/performance.md).
    #[arg(long, default_value_t = 256, value_name = "KIB", value_parser = clap::value_parser!(u64).range(4..=1048576))]
    max_batch_kib: u64,
    /// Write trace.bin with O_DIRECT: whole blocks from an aligned copy of
    /// each batch, the partial last block rewritten by the next, so the
    /// trace never goes through the page cache and its writeback. The file's
    /// bytes are the same; between batches it may end in less than a block
    /// of 0xFF padding, cut at exit (and by recovery after a kill). Falls back to
    /// buffered writes, with a warning, where the file system has no
    /// O_DIRECT (tmpfs before Linux 6.6).
    #[arg(long)]
    direct: bool,
    /// Test hook for crash tests: sleep this long in the middle of every
    /// batch write and before every tail publish.
    #[arg(long, hide = true, value_name = "US")]
    debug_crash_window_us: Option<u64>,
    /// Log more (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let level = ["warn", "info", "debug"][cli.verbose.min(2) as usize];
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level)).init();
    if let Err(e) = signals::install() {
        eprintln!("hmb-trace-daemon: installing signal handlers: {e}");
        return ExitCode::from(exit::INTERNAL);
    }
    let mut dev: Box<dyn TraceDevice> = match &cli.ring_file {
        Some(path) => match RingFile::open(path) {
            Ok(d) => Box::new(d),
            Err(e) => return fail(&format!("{}: {e}", path.display()), exit::DEVICE),
        },
        None => match CharDevice::open(&cli.device) {
            Ok(d) => Box::new(d),
            Err(e) => return fail(&format!("{}: {e}", cli.device.display()), exit::DEVICE),
        },
    };
    let opts = Options {
        output: cli.output.clone(),
        follow: cli.follow,
        fsync: cli.fsync,
        poll_timeout: Duration::from_millis(cli.poll_timeout_ms),
        batch_wait: Duration::from_millis(cli.batch_wait_ms),
        max_batch_bytes: cli.max_batch_kib * 1024,
        max_iov: 1024,
        direct: cli.direct,
        crash_window: cli.debug_crash_window_us.map(Duration::from_micros),
    };
    let mut stats = DaemonStats::default();
    let result = drain::run(dev.as_mut(), &opts, &mut stats);
    if cli.stats {
        eprintln!("hmb-trace-daemon: {stats}");
    }
    match result {
        Ok(Exit::Stopped) => ExitCode::from(exit::OK),
        Ok(Exit::Frozen) => fail(
            "ring FROZEN (controller reset): drained, FROZEN marker written",
            exit::FROZEN,
        ),
        Ok(Exit::DeviceGone) => fail(exit::DEVICE_GONE_MESSAGE, exit::DEVICE_GONE),
        Err(e) => {
            let (detail, message, code) = exit::closing(&e);
            if let Some(detail) = detail {
                eprintln!("hmb-trace-daemon: {detail}");
            }
            fail(&message, code)
        }
    }
}

fn fail(msg: &str, code: u8) -> ExitCode {
    eprintln!("hmb-trace-daemon: {msg} (exit {code})");
    ExitCode::from(code)
}
