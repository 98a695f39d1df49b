//! Throughput of the real daemon binary: firmware model (this process) ->
//! 16 MiB ring in /dev/shm -> hmb-trace-daemon -> trace.bin on the same
//! tmpfs, next to plain 1 MiB write(2) calls of the same bytes to a fresh
//! file on that file system, measured in the same run.
//!
//! Also the firmware's cost per traced event: the model's `Producer`
//! alone on one thread (64 B payloads), in ns per record, beside the BPF
//! ring buffer's published single-producer figures (docs/performance.md).
//!
//! Every figure is also printed as one `BENCH {json}` line for
//! `cargo xtask bench`.
//!
//! `cargo bench -p hmb-trace-daemon --bench daemon [-- --gib N --dir /dev/shm]`
//!
//! For the spread study (docs/performance.md, "The daemon's spread"):
//! `HMB_BENCH_CPUS=P,D` pins the producer (this process) to CPU P and the
//! daemon to CPU D (`taskset`); each case also prints the context
//! switches the producer and the daemon went through (voluntary: waited
//! for the other side; involuntary: preempted by something else).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmb_firmware_model::{module_sim, Producer, SharedRing};
use hmb_trace_abi::{align_record, offsets, HMB_RING_HDR_SIZE};
use memmap2::MmapOptions;

const RING: u64 = 16 << 20;

/// 1 MiB `write(2)` calls of `total` bytes into a fresh file, taken in
/// turn from a source buffer of `src_len` bytes: 1 MiB for the `BENCH`
/// baseline (the source stays in the writer's L2), ring-sized for the
/// figure printed beside it (the source comes from L3, as the ring's bytes
/// do when the daemon copies them). Returns (wall seconds, CPU seconds of
/// this process meanwhile).
fn write_limit(dir: &Path, total: u64, src_len: usize) -> (f64, f64) {
    let path = dir.join("hmb-bench-write.bin");
    let _ = std::fs::remove_file(&path);
    let mut f = File::create(&path).unwrap();
    let src_len = src_len.max(1 << 20);
    let buf = vec![1u8; src_len];
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
    drop(f);
    let _ = std::fs::remove_file(&path);
    (t, cpu)
}

/// CPU seconds (user + system) of a process, from /proc/PID/stat.
fn cpu_secs(pid: &str) -> f64 {
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

/// Returns (seconds, CPU cores the producer got, CPU cores the daemon got).
fn through_daemon(dir: &Path, payload: usize, records: u64) -> (f64, f64, f64) {
    let ring_path = dir.join("hmb-bench-ring");
    let out = dir.join("hmb-bench-trace.bin");
    let _ = std::fs::remove_file(&out);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .read(true)
        .write(true)
        .truncate(true)
        .open(&ring_path)
        .unwrap();
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
    let start = Instant::now();
    for i in 0..records {
        // Spin briefly, then give the CPU away: on a shared machine the
        // consumer may need this core.
        let mut spins = 0u32;
        while !p.fits(payload) {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        p.produce(0x0F01, 0, i, &body);
    }
    let tail = ring.atomic_u64(offsets::TAIL);
    while tail.load(std::sync::atomic::Ordering::Acquire) != p.head() {
        std::hint::spin_loop();
    }
    let t = start.elapsed().as_secs_f64();
    let (cpu_p, cpu_d) = ((cpu_secs("self") - cpu_p0) / t, (cpu_secs(&daemon_pid) - cpu_d0) / t);
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
    let _ = std::fs::remove_file(&ring_path);
    (t, cpu_p, cpu_d)
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
    let mut dir = PathBuf::from("/dev/shm");
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--gib" => gib = it.next().and_then(|v| v.parse().ok()).unwrap_or(1.0),
            "--dir" => dir = PathBuf::from(it.next().unwrap_or_default()),
            _ => {}
        }
    }
    println!(
        "daemon binary, ring {} MiB, {gib} GiB per case, file system: {}",
        RING >> 20,
        dir.display()
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
        let (t_daemon, cores_p, cores_d) = through_daemon(&dir, payload, records);
        let (t_write, cpu_write) = write_limit(&dir, total, 1 << 20);
        let (t_write_ring, _) = write_limit(&dir, total, RING as usize);
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
            "{:>7} | beside (not a target): write(2) from a {} MiB source {:.2} GB/s (daemon {:.0}% of it)",
            "",
            RING >> 20,
            total as f64 / t_write_ring / 1e9,
            100.0 * t_write_ring / t_daemon
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
