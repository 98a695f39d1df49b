//! Throughput of the real daemon binary: firmware model (this process) ->
//! 16 MiB ring -> hmb-trace-daemon -> trace.bin in `--dir` (/dev/shm, a
//! tmpfs), next to plain 1 MiB write(2) calls of the same bytes to a fresh
//! file in the same directory, measured in the same run.
//!
//! The ring is a memfd (`--ring memfd`, the default): shared memory that
//! is no file in any directory, like the device's HMB mapping; the daemon
//! opens it as `/proc/<this pid>/fd/<n>`. `--ring shm` puts it in `--dir`
//! as a named file instead (the bench before 6 December 2026).
//!
//! Both sides do the same file work: each writes a fresh file of the same
//! size in the same directory, and each starts right after a scratch file
//! of that size was written there and removed, so both take their pages
//! from the same place (the one that runs second would otherwise get the
//! pages the first one just freed). `--no-recycle` leaves that out.
//!
//! Also the firmware's cost per traced event: the model's `Producer`
//! alone on one thread (64 B payloads), in ns per record, beside the BPF
//! ring buffer's published single-producer figures (docs/performance.md).
//!
//! Every figure is also printed as one `BENCH {json}` line for
//! `cargo xtask bench`.
//!
//! `cargo bench -p hmb-trace-daemon --bench daemon [-- --gib N --dir /dev/shm --ring memfd|shm --no-recycle]`
//!
//! For the spread study (docs/performance.md, "The daemon's spread"):
//! `HMB_BENCH_CPUS=P,D` pins the producer (this process) to CPU P and the
//! daemon to CPU D (`taskset`); each case also prints the context
//! switches the producer and the daemon went through (voluntary: waited
//! for the other side; involuntary: preempted by something else) and the
//! page faults each side took (the daemon's, the `write(2)` loop's).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmb_firmware_model::{module_sim, Producer, SharedRing};
use hmb_trace_abi::{align_record, offsets, HMB_RING_HDR_SIZE};
use memmap2::MmapOptions;

#[path = "../../consumer/benches/support/backoff.rs"]
mod backoff;
#[path = "../../consumer/benches/support/recycle.rs"]
mod recycle;
#[path = "../../consumer/benches/support/two_core.rs"]
mod two_core;
use recycle::recycle;

const RING: u64 = 16 << 20;

/// Where the ring lives.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RingKind {
    /// A memfd: shared memory in no directory, as the device's mapping is.
    Memfd,
    /// A named file in `--dir` (a tmpfs: /dev/shm).
    Shm,
}

/// The run's options.
struct Opts {
    dir: PathBuf,
    ring: RingKind,
    /// Write and remove a scratch file of a side's size before each side.
    recycle: bool,
}

/// `write(2)` of bytes another core wrote a moment ago: a writer thread
/// fills a ring-sized buffer `slot` bytes at a time (one copy each, as the
/// producer copies a record), publishing its position once per 256 KiB;
/// this thread `write(2)`s each published 256 KiB into a fresh file in
/// `dir`, as the daemon `writev`s a batch. The daemon's file work and
/// hand-over between the cores without its protocol (headers, the walk,
/// the tail). Not a `BENCH` baseline: printed beside, to say how much of
/// the gap to the one-thread `write(2)` loop is the second core's bytes.
/// Returns wall seconds.
fn two_core_write(dir: &Path, total: u64, slot: usize) -> f64 {
    let path = dir.join("hmb-bench-write.bin");
    let _ = std::fs::remove_file(&path);
    let mut f = File::create(&path).unwrap();
    let start = Instant::now();
    two_core::hand_over(RING, total, slot, |piece| f.write_all(piece).unwrap());
    let t = start.elapsed().as_secs_f64();
    drop(f);
    let _ = std::fs::remove_file(&path);
    t
}

/// 1 MiB `write(2)` calls of `total` bytes into a fresh file, taken in
/// turn from a source buffer of `src_len` bytes: 1 MiB for the `BENCH`
/// baseline (the source stays in the writer's L2), ring-sized for the
/// figure printed beside it (the source comes from L3, as the ring's bytes
/// do when the daemon copies them). Returns (wall seconds, CPU seconds of
/// this process meanwhile, its page faults and the machine's reclaim
/// meanwhile).
fn write_limit(dir: &Path, total: u64, src_len: usize) -> (f64, f64, Faults, Reclaim) {
    let path = dir.join("hmb-bench-write.bin");
    let _ = std::fs::remove_file(&path);
    let mut f = File::create(&path).unwrap();
    let src_len = src_len.max(1 << 20);
    let buf = vec![1u8; src_len];
    let (faults0, reclaim0) = (Faults::of("self"), Reclaim::now());
    let (start, cpu0) = (Instant::now(), cpu_secs("self"));
    let mut done = 0u64;
    while done < total {
        let off = (done % src_len as u64) as usize;
        let n = ((total - done) as usize).min(1 << 20).min(src_len - off);
        f.write_all(&buf[off..off + n]).unwrap();
        done += n as u64;
    }
    let t = start.elapsed().as_secs_f64();
    let cpu = cpu_secs("self") - cpu0;
    let (faults, reclaim) = (Faults::of("self").since(faults0), Reclaim::now().since(reclaim0));
    drop(f);
    let _ = std::fs::remove_file(&path);
    (t, cpu, faults, reclaim)
}

/// Page faults of a process so far, from /proc/PID/stat.
#[derive(Clone, Copy, Default, Debug)]
struct Faults {
    minor: u64,
    major: u64,
}

impl Faults {
    fn of(pid: &str) -> Self {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let after_comm = stat.rsplit(')').next().unwrap_or("");
        let fields: Vec<&str> = after_comm.split_whitespace().collect();
        // Fields 10 and 12 of the line; index from state (field 3).
        let n = |i: usize| fields.get(i).and_then(|v| v.parse().ok()).unwrap_or(0);
        Self {
            minor: n(7),
            major: n(9),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            minor: self.minor.saturating_sub(before.minor),
            major: self.major.saturating_sub(before.major),
        }
    }
}

/// Pages the kernel reclaimed so far (all processes), by kswapd and by
/// allocating tasks themselves, from /proc/vmstat: whether a side's file
/// got its pages by evicting page cache while it ran.
#[derive(Clone, Copy, Default, Debug)]
struct Reclaim {
    kswapd: u64,
    direct: u64,
}

impl Reclaim {
    fn now() -> Self {
        let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
        let field = |name: &str| {
            vmstat
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        Self {
            kswapd: field("pgsteal_kswapd"),
            direct: field("pgsteal_direct"),
        }
    }

    fn since(self, before: Self) -> Self {
        Self {
            kswapd: self.kswapd.saturating_sub(before.kswapd),
            direct: self.direct.saturating_sub(before.direct),
        }
    }
}

/// CPU seconds (user + system) of a process: its CPU-time clock
/// (`clock_getcpuclockid`, nanoseconds, the time of a running process up
/// to now), or /proc/PID/stat's 10 ms ticks if that clock cannot be read.
/// The ticks made the CPU ratio of a 0.25 GiB case move by 5-10 % from
/// rounding alone (docs/performance.md, "Ninth pass: the daemon's walk").
fn cpu_secs(pid: &str) -> f64 {
    let id = if pid == "self" {
        Some(libc::CLOCK_PROCESS_CPUTIME_ID)
    } else {
        pid.parse::<libc::pid_t>().ok().and_then(|p| {
            let mut id: libc::clockid_t = 0;
            // SAFETY: writes one clockid_t.
            (unsafe { libc::clock_getcpuclockid(p, &mut id) } == 0).then_some(id)
        })
    };
    if let Some(id) = id {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: writes one timespec.
        if unsafe { libc::clock_gettime(id, &mut ts) } == 0 {
            return ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9;
        }
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Context switches of a process so far, (voluntary, involuntary), from
/// /proc/PID/status (the main thread: the producer runs on it, the daemon
/// has no other).
fn ctx_switches(pid: &str) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("voluntary_ctxt_switches:"), field("nonvoluntary_ctxt_switches:"))
}

/// `HMB_BENCH_CPUS=P,D`: the producer's and the daemon's CPU, if asked.
fn pinning() -> Option<(u32, u32)> {
    let v = std::env::var("HMB_BENCH_CPUS").ok()?;
    let (p, d) = v.split_once(',')?;
    Some((p.trim().parse().ok()?, d.trim().parse().ok()?))
}

/// Pin a process (its main thread) to one CPU with taskset(1).
fn pin(pid: u32, cpu: u32) {
    let ok = Command::new("taskset")
        .args(["-pc", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "taskset -pc {cpu} {pid} failed");
}

/// The ring's file and the path the daemon opens it by.
fn ring_file(opts: &Opts) -> (File, PathBuf) {
    match opts.ring {
        RingKind::Memfd => {
            let fd = nix::sys::memfd::memfd_create(c"hmb-bench-ring", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
                .unwrap();
            let file = File::from(fd);
            let path = PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                std::os::fd::AsRawFd::as_raw_fd(&file)
            ));
            (file, path)
        }
        RingKind::Shm => {
            let path = opts.dir.join("hmb-bench-ring");
            let file = std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .write(true)
                .truncate(true)
                .open(&path)
                .unwrap();
            (file, path)
        }
    }
}

/// What one run through the daemon measured.
struct DaemonRun {
    secs: f64,
    /// CPU cores the producer and the daemon got (CPU time / wall time).
    cores_producer: f64,
    cores_daemon: f64,
    daemon_faults: Faults,
    reclaim: Reclaim,
}

fn through_daemon(opts: &Opts, payload: usize, records: u64) -> DaemonRun {
    let out = opts.dir.join("hmb-bench-trace.bin");
    let _ = std::fs::remove_file(&out);
    let (file, ring_path) = ring_file(opts);
    file.set_len(HMB_RING_HDR_SIZE as u64 + RING).unwrap();
    let map = Arc::new(MmapOptions::new().populate().map_raw(&file).unwrap());
    let ring = SharedRing::from_mmap(map).unwrap();
    module_sim::init(&ring, RING, 1).unwrap();
    let mut p = Producer::attach(ring.share()).unwrap();
    let daemon = Command::new(env!("CARGO_BIN_EXE_hmb-trace-daemon"))
        .arg("--ring-file")
        .arg(&ring_path)
        .arg("-o")
        .arg(&out)
        .arg("--stats")
        // Extra daemon options for experiments, e.g. "--max-batch-kib 1024".
        .args(
            std::env::var("HMB_BENCH_DAEMON_ARGS")
                .unwrap_or_default()
                .split_whitespace(),
        )
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let it start and create the file before the clock runs.
    while !out.exists() {
        std::thread::sleep(Duration::from_millis(1));
    }
    if let Some((p_cpu, d_cpu)) = pinning() {
        pin(std::process::id(), p_cpu);
        pin(daemon.id(), d_cpu);
    }
    let body = vec![0x5Au8; payload];
    let daemon_pid = daemon.id().to_string();
    let (cpu_p0, cpu_d0) = (cpu_secs("self"), cpu_secs(&daemon_pid));
    let (sw_p0, sw_d0) = (ctx_switches("self"), ctx_switches(&daemon_pid));
    let faults0 = Faults::of(&daemon_pid);
    let reclaim0 = Reclaim::now();
    let start = Instant::now();
    for i in 0..records {
        backoff::spin_then_yield(|| p.fits(payload));
        p.produce(0x0F01, 0, i, &body);
    }
    let tail = ring.atomic_u64(offsets::TAIL);
    while tail.load(std::sync::atomic::Ordering::Acquire) != p.head() {
        std::hint::spin_loop();
    }
    let t = start.elapsed().as_secs_f64();
    let (cpu_p, cpu_d) = ((cpu_secs("self") - cpu_p0) / t, (cpu_secs(&daemon_pid) - cpu_d0) / t);
    let daemon_faults = Faults::of(&daemon_pid).since(faults0);
    let reclaim = Reclaim::now().since(reclaim0);
    let (sw_p, sw_d) = (ctx_switches("self"), ctx_switches(&daemon_pid));
    eprintln!(
        "switches during the run: producer {} voluntary {} involuntary, daemon {} voluntary {} involuntary{}",
        sw_p.0 - sw_p0.0,
        sw_p.1 - sw_p0.1,
        sw_d.0 - sw_d0.0,
        sw_d.1 - sw_d0.1,
        pinning().map_or(String::new(), |(p, d)| format!(
            " (producer on CPU {p}, daemon on CPU {d})"
        ))
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let finished = daemon.wait_with_output().unwrap();
    assert_eq!(finished.status.code(), Some(0));
    // The daemon's --stats line: how many writev batches the bytes took.
    let stderr = String::from_utf8_lossy(&finished.stderr);
    let batches = stderr
        .split_whitespace()
        .find_map(|w| w.strip_prefix("batches="))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    let bytes = records * align_record(payload as u32) as u64;
    eprintln!(
        "daemon: {batches} batches, {:.1} KiB per batch",
        bytes as f64 / batches.max(1) as f64 / 1024.0
    );
    let size = align_record(payload as u32) as u64;
    assert_eq!(
        std::fs::metadata(&out).unwrap().len(),
        64 + records * size,
        "trace.bin holds every record"
    );
    let _ = std::fs::remove_file(&out);
    if opts.ring == RingKind::Shm {
        let _ = std::fs::remove_file(&ring_path);
    }
    DaemonRun {
        secs: t,
        cores_producer: cpu_p,
        cores_daemon: cpu_d,
        daemon_faults,
        reclaim,
    }
}

/// One figure for `cargo xtask bench` (which parses these lines); `cpu`:
/// the same figure and ratio over CPU seconds instead of wall seconds.
fn bench_line(
    figure: &str,
    value: f64,
    unit: &str,
    baseline: f64,
    baseline_what: &str,
    ratio: f64,
    cpu: Option<(f64, f64)>,
) {
    let cpu = cpu.map_or(String::new(), |(v, r)| {
        format!(",\"cpu_value\":{v:.6},\"cpu_ratio\":{r:.6}")
    });
    println!(
        "BENCH {{\"figure\":\"{figure}\",\"value\":{value:.6},\"unit\":\"{unit}\",\"baseline\":{baseline:.6},\"baseline_what\":\"{baseline_what}\",\"ratio\":{ratio:.6}{cpu}}}"
    );
}

/// ns per record of `Producer::produce` (64 B payload) on one thread: the
/// ring is emptied by moving the tail to the head (as a consumer's publish
/// does) whenever it is full, so no record is dropped and none is read.
fn producer_ns(records: u64) -> f64 {
    let fd = nix::sys::memfd::memfd_create(c"hmb-bench-p", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
    let file = File::from(fd);
    file.set_len(HMB_RING_HDR_SIZE as u64 + RING).unwrap();
    let map = Arc::new(MmapOptions::new().populate().map_raw(&file).unwrap());
    let ring = SharedRing::from_mmap(map).unwrap();
    module_sim::init(&ring, RING, 1).unwrap();
    let mut p = Producer::attach(ring.share()).unwrap();
    let body = [0x5Au8; 64];
    let tail = ring.atomic_u64(offsets::TAIL);
    let start = Instant::now();
    for i in 0..records {
        if !p.fits(body.len()) {
            tail.store(p.head(), std::sync::atomic::Ordering::Release);
        }
        let r = p.produce(0x0F01, 0, i, &body);
        debug_assert!(matches!(r, hmb_firmware_model::Produced::Written { .. }));
    }
    let t = start.elapsed().as_secs_f64();
    assert_eq!(p.dropped_records(), 0, "the producer bench drops nothing");
    t * 1e9 / records as f64
}

fn main() {
    let mut gib = 1.0f64;
    let mut opts = Opts {
        dir: PathBuf::from("/dev/shm"),
        ring: RingKind::Memfd,
        recycle: true,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--gib" => gib = it.next().and_then(|v| v.parse().ok()).unwrap_or(1.0),
            "--dir" => opts.dir = PathBuf::from(it.next().unwrap_or_default()),
            "--ring" => {
                opts.ring = match it.next().as_deref() {
                    Some("shm") => RingKind::Shm,
                    _ => RingKind::Memfd,
                }
            }
            "--no-recycle" => opts.recycle = false,
            _ => {}
        }
    }
    println!(
        "daemon binary, ring {} MiB ({:?}), {gib} GiB per case, file system: {}, scratch file before each side: {}",
        RING >> 20,
        opts.ring,
        opts.dir.display(),
        if opts.recycle { "yes" } else { "no" }
    );
    println!("(cores: CPU time / wall time the producer and the daemon got)");
    println!(
        "{:>7} | {:>10} {:>7} | {:>7} {:>5} | {:>5} {:>5}",
        "payload", "daemon Mr/s", "GB/s", "write2", "%", "prod", "daemon"
    );
    for payload in [64usize, 4064] {
        let size = align_record(payload as u32) as u64;
        let records = ((gib * (1u64 << 30) as f64) as u64 / size).max(1);
        let total = records * size;
        if opts.recycle {
            recycle(&opts.dir, total);
        }
        let run = through_daemon(&opts, payload, records);
        let (t_daemon, cores_p, cores_d) = (run.secs, run.cores_producer, run.cores_daemon);
        if opts.recycle {
            recycle(&opts.dir, total);
        }
        let (t_write, cpu_write, write_faults, write_reclaim) = write_limit(&opts.dir, total, 1 << 20);
        if opts.recycle {
            recycle(&opts.dir, total);
        }
        let (t_write_ring, _, _, _) = write_limit(&opts.dir, total, RING as usize);
        if opts.recycle {
            recycle(&opts.dir, total);
        }
        let t_two_core = two_core_write(&opts.dir, total, size as usize);
        let cpu_daemon = (cores_d * t_daemon).max(1e-6);
        println!(
            "{:>7} | {:>10.2} {:>7.2} | {:>7.2} {:>4.0}% | {:>5.2} {:>5.2}",
            payload,
            records as f64 / t_daemon / 1e6,
            total as f64 / t_daemon / 1e9,
            total as f64 / t_write / 1e9,
            100.0 * t_write / t_daemon,
            cores_p,
            cores_d
        );
        println!(
            "{:>7} | beside (not targets): write(2) from a {} MiB source {:.2} GB/s (daemon {:.0}% of it); two-core write(2) of bytes the other core wrote {:.2} GB/s (daemon {:.0}% of it)",
            "",
            RING >> 20,
            total as f64 / t_write_ring / 1e9,
            100.0 * t_write_ring / t_daemon,
            total as f64 / t_two_core / 1e9,
            100.0 * t_two_core / t_daemon
        );
        println!(
            "{:>7} | page faults: daemon {} minor {} major, write(2) loop {} minor {} major; pages reclaimed meanwhile (kswapd + direct): daemon's run {} + {}, write(2)'s {} + {}",
            "",
            run.daemon_faults.minor,
            run.daemon_faults.major,
            write_faults.minor,
            write_faults.major,
            run.reclaim.kswapd,
            run.reclaim.direct,
            write_reclaim.kswapd,
            write_reclaim.direct
        );
        bench_line(
            &format!("daemon_{payload}"),
            total as f64 / t_daemon / 1e9,
            "GB/s",
            total as f64 / t_write / 1e9,
            "write(2) of the same bytes, 1 MiB calls",
            t_write / t_daemon,
            Some((total as f64 / cpu_daemon / 1e9, cpu_write / cpu_daemon)),
        );
    }
    // As many records as 64 B cases of the daemon run, at least 1 M.
    let records = ((gib * (1u64 << 30) as f64) as u64 / 96).max(1 << 20);
    let ns = producer_ns(records);
    // Published: 12 to 21.5 M records/s single producer (bench_ringbufs);
    // the slower end as the baseline, in ns per record.
    let bpf_ns = 1e9 / 12e6;
    println!(
        "producer: {ns:.1} ns per 64 B record ({:.1} M records/s on one thread); BPF ringbuf reserve/commit, published: 46.5-83.3 ns (12-21.5 M/s)",
        1e3 / ns
    );
    bench_line(
        "producer_64_ns",
        ns,
        "ns/record",
        bpf_ns,
        "BPF ringbuf reserve+commit, published 12 M/s single producer (83.3 ns; 21.5 M/s = 46.5 ns)",
        ns / bpf_ns,
        None,
    );
}
