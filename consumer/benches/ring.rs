//! Ring throughput, each figure next to its limit measured in the same run.
//!
//! `cargo bench -p hmb-trace-consumer --bench ring [-- --gib N --dir /dev/shm --ring-mib 16 --min-batch-kib 256 --max-batch-kib 256 --wait poll|watermark --payloads 0,64,512,4064]`
//!
//! Beside each figure it prints what each side cost in CPU per KiB while
//! working (waits left out), a two-core copy and `write(2)` from a
//! ring-sized source: not targets, the measurements behind
//! docs/performance.md's "The ring engine at 4 KiB and the daemon's spread".
//!
//! The 64 B and 4064 B figures are also printed as `BENCH {json}` lines for
//! `cargo xtask bench` (docs/performance.md).
//!
//! For payloads of 0, 64, 512 and 4064 bytes:
//! * ring only: producer thread -> ring (memfd) -> consumer thread that
//!   copies every byte of every batch out, next to one memcpy of the same
//!   bytes;
//! * with the file: the same, but the consumer `writev`s each batch into a
//!   fresh file on a tmpfs, next to plain 1 MiB `write(2)` calls of the same
//!   bytes into a fresh file on the same file system; each side starts right
//!   after a scratch file of its size was written there and removed
//!   (`support/recycle.rs`), so both take their pages from the same place.
//!
//! The consumer waits until `min-batch` bytes are published (the daemon
//! waits for the device's watermark interrupt the same way), so a fast
//! consumer does not degrade into one system call per record.

use std::fs::File;
use std::io::{IoSlice, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use hmb_firmware_model::{module_sim, Producer, SharedRing};
use hmb_trace_abi::{align_record, HMB_RING_HDR_SIZE};
use hmb_trace_consumer::{AtomicTailPublisher, Consumer, ConsumerConfig, RingView, Step};
use memmap2::MmapOptions;

#[path = "support/backoff.rs"]
mod backoff;
#[path = "support/recycle.rs"]
mod recycle;
#[path = "support/two_core.rs"]
mod two_core;

struct Args {
    bytes: u64,
    dir: PathBuf,
    ring: u64,
    min_batch: u64,
    /// The consumer's batch limit (`ConsumerConfig::max_batch_bytes`).
    max_batch: u64,
    /// How the consumer waits for `min_batch` bytes.
    wait: Wait,
    payloads: Vec<usize>,
}

/// How the consumer thread waits until `min_batch` bytes are published.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Wait {
    /// Re-read head between `yield`s.
    Poll,
    /// Sleep until the producer has published `min_batch` bytes beyond the
    /// tail and wakes it, as the device's watermark interrupt wakes the
    /// daemon's poll().
    Watermark,
}

fn args() -> Args {
    let mut a = Args {
        bytes: 1 << 30,
        dir: PathBuf::from("/dev/shm"),
        ring: 16 << 20,
        min_batch: 256 << 10,
        max_batch: ConsumerConfig::default().max_batch_bytes,
        wait: Wait::Poll,
        payloads: vec![0, 64, 512, 4064],
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, d: f64| v.and_then(|v| v.parse::<f64>().ok()).unwrap_or(d);
    while let Some(x) = it.next() {
        match x.as_str() {
            "--gib" => a.bytes = (num(it.next(), 1.0) * (1u64 << 30) as f64) as u64,
            "--dir" => a.dir = PathBuf::from(it.next().unwrap_or_default()),
            "--ring-mib" => a.ring = (num(it.next(), 16.0) as u64) << 20,
            "--min-batch-kib" => a.min_batch = (num(it.next(), 256.0) as u64) << 10,
            "--max-batch-kib" => a.max_batch = (num(it.next(), 1024.0) as u64) << 10,
            "--wait" => {
                a.wait = match it.next().as_deref() {
                    Some("watermark") => Wait::Watermark,
                    _ => Wait::Poll,
                }
            }
            "--payloads" => {
                a.payloads = it
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .filter_map(|v| v.trim().parse().ok())
                    .collect()
            }
            _ => {} // cargo bench passes --bench
        }
    }
    a
}

fn ring(ring: u64) -> (File, Arc<memmap2::MmapRaw>) {
    let fd = nix::sys::memfd::memfd_create(c"hmb-bench", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC).unwrap();
    let file = File::from(fd);
    let len = HMB_RING_HDR_SIZE as u64 + ring;
    file.set_len(len).unwrap();
    let rw = Arc::new(MmapOptions::new().len(len as usize).populate().map_raw(&file).unwrap());
    module_sim::init(&SharedRing::from_mmap(rw.clone()).unwrap(), ring, 1).unwrap();
    (file, rw)
}

/// The consumer's side of a watermark wake-up: it sleeps with `wake_at`
/// set, the producer wakes it once head reaches `wake_at`.
struct Doorbell {
    sleeping: AtomicBool,
    wake_at: AtomicU64,
}

/// Producer and consumer threads over one ring; `sink` gets every batch.
fn run_ring(a: &Args, payload: usize, records: u64, mut sink: impl FnMut(&[IoSlice<'_>])) -> (f64, Work) {
    let (file, rw) = ring(a.ring);
    let mut p = Producer::attach(SharedRing::from_mmap(rw.clone()).unwrap()).unwrap();
    let view = RingView::map_file(&file, 0, (HMB_RING_HDR_SIZE as u64 + a.ring) as usize).unwrap();
    let config = ConsumerConfig {
        max_batch_bytes: a.max_batch,
        ..ConsumerConfig::default()
    };
    let mut c = Consumer::attach(view, AtomicTailPublisher::from_mmap(rw), config).unwrap();
    let body = vec![0x5Au8; payload];
    let done = Arc::new(AtomicBool::new(false));
    let bell = Arc::new(Doorbell {
        sleeping: AtomicBool::new(false),
        wake_at: AtomicU64::new(0),
    });
    let (done_p, bell_p) = (done.clone(), bell.clone());
    let consumer_thread = std::thread::current();
    let start = Instant::now();
    let producer = std::thread::spawn(move || {
        let (mut work, mut t0) = (0.0, thread_cpu());
        for i in 0..records {
            // Spin briefly, then give the CPU away: on a shared machine the
            // consumer may need this core.
            if !p.fits(payload) {
                work += thread_cpu() - t0;
                backoff::spin_then_yield(|| p.fits(payload));
                t0 = thread_cpu();
            }
            p.produce(0x0F01, 0, i, &body);
            // The watermark "interrupt": one load of a line the consumer
            // writes only when it goes to sleep.
            if bell_p.sleeping.load(Ordering::Relaxed)
                && p.head() >= bell_p.wake_at.load(Ordering::Relaxed)
                && bell_p.sleeping.swap(false, Ordering::AcqRel)
            {
                consumer_thread.unpark();
            }
        }
        work += thread_cpu() - t0;
        done_p.store(true, Ordering::Release);
        bell_p.sleeping.store(false, Ordering::Release);
        consumer_thread.unpark();
        work
    });
    let min_batch = a.min_batch.min(a.ring / 2);
    let (mut got, mut work) = (0, 0.0);
    while got < records {
        if c.available() < min_batch && !done.load(Ordering::Acquire) {
            match a.wait {
                Wait::Poll => std::thread::yield_now(),
                Wait::Watermark => {
                    bell.wake_at.store(c.tail() + min_batch, Ordering::Relaxed);
                    bell.sleeping.store(true, Ordering::SeqCst);
                    // Published meanwhile: the producer may have checked
                    // before `sleeping` was set.
                    if c.available() < min_batch && !done.load(Ordering::Acquire) {
                        std::thread::park_timeout(std::time::Duration::from_millis(1));
                    }
                    bell.sleeping.store(false, Ordering::Relaxed);
                }
            }
            continue;
        }
        let t0 = thread_cpu();
        match c.next_batch().unwrap() {
            Step::Batch(b) => {
                got += b.records;
                sink(b.iov);
            }
            Step::Empty => std::thread::yield_now(),
            Step::Frozen(_) => unreachable!(),
        }
        c.commit().unwrap();
        work += thread_cpu() - t0;
    }
    let producer = producer.join().unwrap();
    assert_eq!(c.stats().lost_records, 0);
    (
        start.elapsed().as_secs_f64(),
        Work {
            producer,
            consumer: work,
        },
    )
}

/// Producer and consumer alternating on one thread: the CPU cost of the
/// ring path itself, whatever the scheduler does with two threads.
fn run_one_thread(a: &Args, payload: usize, records: u64, mut sink: impl FnMut(&[IoSlice<'_>])) -> f64 {
    let (file, rw) = ring(a.ring);
    let mut p = Producer::attach(SharedRing::from_mmap(rw.clone()).unwrap()).unwrap();
    let view = RingView::map_file(&file, 0, (HMB_RING_HDR_SIZE as u64 + a.ring) as usize).unwrap();
    let mut c = Consumer::attach(view, AtomicTailPublisher::from_mmap(rw), ConsumerConfig::default()).unwrap();
    let body = vec![0x5Au8; payload];
    let start = Instant::now();
    let (mut produced, mut got) = (0u64, 0u64);
    while got < records {
        while produced < records && p.fits(payload) {
            p.produce(0x0F01, 0, produced, &body);
            produced += 1;
        }
        while let Step::Batch(b) = c.next_batch().unwrap() {
            got += b.records;
            sink(b.iov);
            c.commit().unwrap();
        }
    }
    assert_eq!(c.stats().lost_records, 0);
    start.elapsed().as_secs_f64()
}

/// writev straight from the mapping, finishing a short write.
fn write_all_vectored(mut out: &File, iov: &[IoSlice<'_>]) {
    let mut done = nix::sys::uio::writev(out, iov).unwrap();
    for s in iov {
        if done >= s.len() {
            done -= s.len();
            continue;
        }
        out.write_all(&s[done..]).unwrap();
        done = 0;
    }
}

/// CPU seconds the calling thread has used (CLOCK_THREAD_CPUTIME_ID):
/// counts only while the thread runs, so a side's cost per byte does not
/// depend on how often the scheduler takes its core away.
fn thread_cpu() -> f64 {
    let mut ts = nix::libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { nix::libc::clock_gettime(nix::libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// CPU seconds each side of a two-thread run spent working (waiting for
/// space or for a batch left out).
#[derive(Default, Clone, Copy)]
struct Work {
    producer: f64,
    consumer: f64,
}

/// CPU seconds (user + system) this process has used, from /proc/self/stat:
/// shows whether the two threads got their two cores on a shared machine.
fn cpu_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_comm = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of the line are utime and stime; index from state (field 3).
    (ticks(11) + ticks(12)) / 100.0
}

/// Returns (wall seconds, CPU seconds of the calling thread).
fn memcpy_limit(ring: u64, total: u64) -> (f64, f64) {
    let src = vec![1u8; ring as usize];
    let mut dst = vec![0u8; 1 << 20];
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut done = 0u64;
    while done < total {
        let off = (done % ring) as usize;
        let n = ((total - done) as usize).min(1 << 20).min(ring as usize - off);
        dst[..n].copy_from_slice(&src[off..off + n]);
        std::hint::black_box(&dst);
        done += n as u64;
    }
    (start.elapsed().as_secs_f64(), thread_cpu() - cpu0)
}

/// The two-core ceiling: a writer thread fills `slot`-byte slots of a
/// ring-sized buffer (one `copy_from_slice` each, as the producer copies a
/// payload) and the calling thread copies 256 KiB pieces out, each side
/// publishing its position once per 256 KiB: the same bytes from the same
/// kind of memory (written a moment ago by the other core) as the ring
/// engine, without record headers or per-record publication. Not a
/// `BENCH` baseline; printed beside the ratio to say how much of the gap
/// to one-thread memcpy is the two cores' hand-over.
/// Returns (wall seconds, CPU seconds the copying side spent copying).
fn two_core_limit(ring: u64, total: u64, slot: usize) -> (f64, f64) {
    let mut dst = vec![0u8; 256 << 10];
    let mut work = 0.0;
    let start = Instant::now();
    two_core::hand_over(ring, total, slot, |piece| {
        let t0 = thread_cpu();
        dst[..piece.len()].copy_from_slice(piece);
        std::hint::black_box(&dst);
        work += thread_cpu() - t0;
    });
    (start.elapsed().as_secs_f64(), work)
}

/// 1 MiB `write(2)` calls of `total` bytes into a fresh file, taken in
/// turn from a source buffer of `src_len` bytes: 1 MiB (the `BENCH`
/// baseline: the source stays in the writer's L2) or ring-sized (the
/// source comes from L3, as the ring's bytes do; printed beside it).
/// Returns (wall seconds, CPU seconds of the calling thread).
fn write_limit(dir: &std::path::Path, total: u64, src_len: usize) -> (f64, f64) {
    let path = dir.join("hmb-bench-write.bin");
    let _ = std::fs::remove_file(&path);
    let mut f = File::create(&path).unwrap();
    let src_len = src_len.max(1 << 20);
    let buf = vec![1u8; src_len];
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let mut done = 0u64;
    while done < total {
        let off = (done % src_len as u64) as usize;
        let n = ((total - done) as usize).min(1 << 20).min(src_len - off);
        f.write_all(&buf[off..off + n]).unwrap();
        done += n as u64;
    }
    let (secs, cpu) = (start.elapsed().as_secs_f64(), thread_cpu() - cpu0);
    drop(f);
    let _ = std::fs::remove_file(&path);
    (secs, cpu)
}

fn main() {
    let a = args();
    println!(
        "ring {} MiB, consumer batches >= {} KiB, {:.2} GiB of records per case, file system: {}",
        a.ring >> 20,
        a.min_batch >> 10,
        a.bytes as f64 / (1u64 << 30) as f64,
        a.dir.display()
    );
    println!("(cores = CPU time / wall time the two threads got; 2.00 means both ran all the time)");
    println!(
        "{:>7} | {:>9} {:>6} {:>7} {:>5} {:>5} | {:>10} {:>6} | {:>9} {:>6} {:>7} {:>5} {:>5}",
        "payload",
        "ring Mr/s",
        "GB/s",
        "memcpy",
        "%",
        "cores",
        "1-thr Mr/s",
        "GB/s",
        "file Mr/s",
        "GB/s",
        "write2",
        "%",
        "cores"
    );
    for &payload in &a.payloads {
        let size = align_record(payload as u32) as u64;
        let records = (a.bytes / size).min(40_000_000);
        let total = records * size;
        let mut scratch = vec![0u8; 1 << 20];
        let cpu0 = cpu_secs();
        let (t_ring, w_ring) = run_ring(&a, payload, records, |iov| {
            for s in iov {
                for chunk in s.chunks(scratch.len()) {
                    scratch[..chunk.len()].copy_from_slice(chunk);
                    std::hint::black_box(&scratch);
                }
            }
        });
        let ring_cores = (cpu_secs() - cpu0) / t_ring;
        let t_one = run_one_thread(&a, payload, records, |iov| {
            for s in iov {
                for chunk in s.chunks(scratch.len()) {
                    scratch[..chunk.len()].copy_from_slice(chunk);
                    std::hint::black_box(&scratch);
                }
            }
        });
        let (t_memcpy, cpu_memcpy) = memcpy_limit(a.ring, total);
        let (t_two, cpu_two) = two_core_limit(a.ring, total, size as usize);

        // The file case and its baseline start alike (support/recycle.rs).
        recycle::recycle(&a.dir, total);
        let path = a.dir.join("hmb-bench-ring.bin");
        let _ = std::fs::remove_file(&path);
        let out = File::create(&path).unwrap();
        let cpu1 = cpu_secs();
        let (t_file, w_file) = run_ring(&a, payload, records, |iov| write_all_vectored(&out, iov));
        let file_cores = (cpu_secs() - cpu1) / t_file;
        assert_eq!(out.metadata().unwrap().len(), total, "file holds every record byte");
        drop(out);
        let _ = std::fs::remove_file(&path);
        recycle::recycle(&a.dir, total);
        let (t_write, cpu_write) = write_limit(&a.dir, total, 1 << 20);
        recycle::recycle(&a.dir, total);
        let (t_write_ring, cpu_write_ring) = write_limit(&a.dir, total, a.ring as usize);

        let gb = |t: f64| total as f64 / t / 1e9;
        println!(
            "{:>7} | {:>9.1} {:>6.2} {:>7.2} {:>4.0}% {:>5.2} | {:>10.1} {:>6.2} | {:>9.1} {:>6.2} {:>7.2} {:>4.0}% {:>5.2}",
            payload,
            records as f64 / t_ring / 1e6,
            gb(t_ring),
            gb(t_memcpy),
            100.0 * t_memcpy / t_ring,
            ring_cores,
            records as f64 / t_one / 1e6,
            gb(t_one),
            records as f64 / t_file / 1e6,
            gb(t_file),
            gb(t_write),
            100.0 * t_write / t_file,
            file_cores,
        );
        println!(
            "{:>7} | beside (not targets): two-core copy {:.2} GB/s (ring {:.0}% of it); write(2) from a {} MiB source {:.2} GB/s (file {:.0}% of it)",
            "",
            gb(t_two),
            100.0 * t_two / t_ring,
            a.ring >> 20,
            gb(t_write_ring),
            100.0 * t_write_ring / t_file,
        );
        let ns_kib = |cpu: f64| cpu * 1e9 / (total as f64 / 1024.0);
        println!(
            "{:>7} | CPU ns per KiB while working: ring producer {:.1} consumer {:.1}, memcpy {:.1}, two-core copy's reader {:.1}; file producer {:.1} consumer {:.1}, write(2) {:.1}, write(2) from {} MiB {:.1}",
            "",
            ns_kib(w_ring.producer),
            ns_kib(w_ring.consumer),
            ns_kib(cpu_memcpy),
            ns_kib(cpu_two),
            ns_kib(w_file.producer),
            ns_kib(w_file.consumer),
            ns_kib(cpu_write),
            a.ring >> 20,
            ns_kib(cpu_write_ring),
        );
        if payload == 64 || payload == 4064 {
            let mrps = records as f64 / t_ring / 1e6;
            let memcpy_mrps = records as f64 / t_memcpy / 1e6;
            let what = if payload == 64 {
                (mrps, "M rec/s", memcpy_mrps, "memcpy of the same bytes, in records/s")
            } else {
                (gb(t_ring), "GB/s", gb(t_memcpy), "memcpy of the same bytes")
            };
            bench_line(
                &format!("ring_{payload}"),
                what.0,
                what.1,
                what.2,
                what.3,
                t_memcpy / t_ring,
            );
            bench_line(
                &format!("ring_file_{payload}"),
                gb(t_file),
                "GB/s",
                gb(t_write),
                "write(2) of the same bytes, 1 MiB calls",
                t_write / t_file,
            );
        }
    }
}

/// One figure for `cargo xtask bench` (which parses these lines).
fn bench_line(figure: &str, value: f64, unit: &str, baseline: f64, baseline_what: &str, ratio: f64) {
    println!(
        "BENCH {{\"figure\":\"{figure}\",\"value\":{value:.6},\"unit\":\"{unit}\",\"baseline\":{baseline:.6},\"baseline_what\":\"{baseline_what}\",\"ratio\":{ratio:.6}}}"
    );
}
