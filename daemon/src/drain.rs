//! The drain loop: ring -> trace.bin, exactly once.
//!
//! Order per batch: write (LOST marker, then the records by writev), sync
//! if `--fsync batch`, then publish the tail. A crash between write and
//! publish re-reads the batch on restart; the sequence numbers recovered
//! from trace.bin make the consumer skip what is already there.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use hmb_trace_consumer::{Consumer, ConsumerConfig, ConsumerError, Step, TailPublisher};
use hmb_trace_file::{encode_epoch, encode_frozen, encode_lost};
use thiserror::Error;

use crate::device::TraceDevice;
use crate::output::{Fsync, Output, OutputError, RingIdent};
use crate::signals;

#[derive(Debug, Clone)]
pub struct Options {
    pub output: PathBuf,
    pub follow: bool,
    pub fsync: Fsync,
    pub poll_timeout: Duration,
    pub max_batch_bytes: u64,
    pub max_iov: usize,
    /// After a small batch (a slow producer), let records gather this long
    /// before looking again instead of waking for every few (0: never).
    pub batch_wait: Duration,
    /// Write trace.bin with O_DIRECT (`--direct`, crate::direct).
    pub direct: bool,
    /// Test hook: widen the windows between the two halves of a batch
    /// write and between the write and the tail publish.
    pub crash_window: Option<Duration>,
}

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error("device: {0}")]
    Device(io::Error),
    #[error("ring: {0}")]
    Ring(#[from] ConsumerError),
    #[error("output: {0}")]
    Output(#[from] OutputError),
    #[error("re-initialising the ring failed: {0}")]
    Reinit(io::Error),
}

/// Why the loop ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Stopped,
    Frozen,
    DeviceGone,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DaemonStats {
    pub records: u64,
    pub bytes: u64,
    pub lost_records: u64,
    pub lost_events: u64,
    pub batches: u64,
    pub wakeups: u64,
    pub duplicates: u64,
    pub epochs: u64,
    /// Sleeps of `batch_wait` after a small batch.
    pub naps: u64,
}

impl std::fmt::Display for DaemonStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "records={} bytes={} drops={} drop_events={} batches={} wakeups={} naps={} duplicates_skipped={} epochs={}",
            self.records,
            self.bytes,
            self.lost_records,
            self.lost_events,
            self.batches,
            self.wakeups,
            self.naps,
            self.duplicates,
            self.epochs
        )
    }
}

fn ident<P: TailPublisher>(c: &Consumer<P>) -> RingIdent {
    let hdr = c.view().header();
    RingIdent {
        abi_major: hdr.version_major.get(),
        abi_minor: hdr.version_minor.get(),
        ring_size: c.ring_size(),
        epoch: c.epoch(),
    }
}

/// Attach, resume trace.bin, then drain until a signal, FROZEN (without
/// `--follow`), removal or an error.
pub fn run(dev: &mut dyn TraceDevice, opts: &Options, stats: &mut DaemonStats) -> Result<Exit, DaemonError> {
    let view = dev.map().map_err(DaemonError::Device)?;
    let publisher = dev.publisher().map_err(DaemonError::Device)?;
    let config = ConsumerConfig {
        max_iov: opts.max_iov,
        max_batch_bytes: opts.max_batch_bytes,
    };
    let mut consumer = Consumer::attach(view, publisher, config)?;
    let mut ring = ident(&consumer);
    log::info!(
        "{}: ring ABI {}.{}, {} bytes, epoch {}",
        dev.name(),
        ring.abi_major,
        ring.abi_minor,
        ring.ring_size,
        ring.epoch
    );
    let (mut out, progress) = Output::open(&opts.output, &ring, opts.fsync, opts.direct)?;
    if opts.direct {
        log::info!(
            "{}: {}",
            out.path().display(),
            if out.is_direct() {
                "O_DIRECT"
            } else {
                "buffered (no O_DIRECT)"
            }
        );
    }
    out.set_crash_window(opts.crash_window);
    stats.epochs = 1;
    let mut frozen_written = resume(&mut consumer, &mut out, &ring, progress)?;
    // Batches still allowed after a stop request: enough to take what the
    // ring held then (a nap may have left up to `batch_wait` of records),
    // bounded so a producer that never pauses cannot keep the daemon alive.
    let mut stopping: Option<u64> = None;
    // When the ring was last looked at: a batch's bytes over the time since
    // give the producer's rate, which bounds how long a nap may be.
    let mut last_look = std::time::Instant::now();
    loop {
        if stopping.is_none() && signals::stop_requested() {
            stopping = Some(consumer.ring_size() / opts.max_batch_bytes.max(1) + 2);
        }
        if stopping == Some(0) {
            out.commit_point()?;
            return Ok(Exit::Stopped);
        }
        if let Some(n) = stopping.as_mut() {
            *n -= 1;
        }
        if signals::take_reopen() {
            log::info!("SIGHUP: reopening {}", out.path().display());
            let progress = out.reopen(&ring)?;
            if progress.is_some_and(|p| p.epoch != ring.epoch) {
                out.write_marker(&encode_epoch(ring.epoch, ring.ring_size))?;
            }
        }
        let epoch = consumer.epoch();
        let consumer_ring_size = consumer.ring_size();
        // One clock read per look: under TCG with the HPET as the guest's
        // clocksource each is a system call and an MMIO exit.
        let now = std::time::Instant::now();
        let since_last_look = now.saturating_duration_since(last_look);
        last_look = now;
        // What the ring held when the daemon looked: a batch that reaches it
        // took everything there was, so its bytes over `since_last_look`
        // are the producer's rate.
        let head_at_look = consumer.view().head();
        match consumer.next_batch() {
            Err(ConsumerError::EpochChanged { old, new }) if opts.follow => {
                log::warn!("ring epoch changed from {old} to {new} without a freeze seen: following");
                consumer.reattach()?;
                ring = ident(&consumer);
                out.write_marker(&encode_epoch(ring.epoch, ring.ring_size))?;
                stats.epochs += 1;
                frozen_written = false;
            }
            Err(e) => return Err(e.into()),
            Ok(Step::Batch(b)) => {
                let lost = b.lost.map(|l| encode_lost(l.first_seq, l.count, epoch));
                if b.duplicates > 0 {
                    log::info!("skipped {} records already in {}", b.duplicates, out.path().display());
                }
                out.write_batch(lost.as_ref(), b.iov)?;
                let small = b.bytes < small_batch_bytes(consumer_ring_size, opts.max_batch_bytes);
                let end = b.end;
                let wait = nap_length(opts.batch_wait, consumer_ring_size, b.bytes, since_last_look);
                stats.records += b.records;
                stats.bytes += b.bytes;
                stats.duplicates += b.duplicates;
                stats.batches += 1;
                if let Some(l) = b.lost {
                    stats.lost_records += l.count;
                    stats.lost_events += 1;
                }
                out.commit_point()?;
                if let Some(window) = opts.crash_window {
                    std::thread::sleep(window);
                }
                consumer.commit()?;
                // Only a batch that took all the ring held at the look
                // measured the producer's rate (one cut by --max-batch-kib or
                // IOV_MAX did not: a 64 B producer's full batch is 1024
                // records, under 100 KiB). Records that arrived during the
                // write wait for the nap's end: before, the ring had to be
                // empty after the write, and at QD32 in the NVMe bench's TCG
                // guest a nap was followed by a second, smaller batch (1.6-2.4
                // batches per nap), each a writev, a PUBLISH_TAIL and clock
                // reads (docs/performance.md, "The daemon's work per I/O in
                // the TCG guest").
                let took_all = end >= head_at_look;
                if small && took_all && stopping.is_none() && !wait.is_zero() && !signals::pending() {
                    let r = dev.nap(wait).map_err(DaemonError::Device)?;
                    stats.naps += 1;
                    if r.gone {
                        return Ok(Exit::DeviceGone);
                    }
                }
            }
            Ok(Step::Empty) if stopping.is_some() => stopping = Some(0),
            Ok(Step::Empty) => {
                let r = dev.wait(opts.poll_timeout).map_err(DaemonError::Device)?;
                if r.gone {
                    return Ok(Exit::DeviceGone);
                }
                if r.readable || r.frozen {
                    stats.wakeups += 1;
                }
            }
            Ok(Step::Frozen(info)) => {
                if !frozen_written {
                    if let Some(l) = info.lost {
                        out.write_marker(&encode_lost(l.first_seq, l.count, info.epoch))?;
                        stats.lost_records += l.count;
                        stats.lost_events += 1;
                    }
                    out.write_marker(&encode_frozen(info.epoch, info.last_seq, info.next_seq))?;
                    out.sync()?;
                    log::warn!(
                        "ring FROZEN in epoch {} (last seq {:?}, next seq {})",
                        info.epoch,
                        info.last_seq,
                        info.next_seq
                    );
                }
                if !opts.follow {
                    return Ok(Exit::Frozen);
                }
                if stopping.is_some() {
                    // Everything up to FROZEN is in the file: stop here
                    // rather than start the next epoch.
                    out.commit_point()?;
                    return Ok(Exit::Stopped);
                }
                let new_epoch = match dev.reinit() {
                    Ok(epoch) => epoch,
                    // ENODEV: the device went away after the freeze (removed,
                    // the slice refused, or on NVMe a controller a failed
                    // reset left dead): what the file holds is complete.
                    Err(e) if e.raw_os_error() == Some(nix::libc::ENODEV) => return Ok(Exit::DeviceGone),
                    Err(e) => return Err(DaemonError::Reinit(e)),
                };
                consumer.reattach()?;
                ring = ident(&consumer);
                log::info!("ring re-initialised: epoch {new_epoch}");
                out.write_marker(&encode_epoch(ring.epoch, ring.ring_size))?;
                stats.epochs += 1;
                frozen_written = false;
            }
        }
    }
}

/// Below this a batch is small: the producer wrote less than an eighth of
/// the ring (and less than a full batch) since the last look, so a nap of
/// `batch_wait` leaves it ample room. At QD1 on the NVMe controller a look
/// every poll_ms (10 ms) found ~60 records and cost the guest's daemon
/// 3-4 ms of TCG CPU, most of it per wake-up, not per record
/// (docs/performance.md, "The cost of tracing at QD1").
fn small_batch_bytes(ring_size: u64, max_batch_bytes: u64) -> u64 {
    (ring_size / 8).min(max_batch_bytes)
}

/// How long to nap after a small batch of `bytes` gathered over `since`:
/// `batch_wait`, but no longer than the producer, at that rate, takes to
/// fill an eighth of the ring (a fast producer that the daemon just caught
/// up with must not stall on a full ring), and none under a millisecond.
fn nap_length(batch_wait: Duration, ring_size: u64, bytes: u64, since: Duration) -> Duration {
    let room = ring_size / 8;
    let fill = if bytes == 0 {
        batch_wait
    } else {
        since.mul_f64(room as f64 / bytes as f64)
    };
    let d = batch_wait.min(fill);
    if d < Duration::from_millis(1) {
        Duration::ZERO
    } else {
        d
    }
}

/// Line the consumer up with what trace.bin already holds. Returns whether
/// the FROZEN marker of the current epoch is already in the file.
fn resume<P: TailPublisher>(
    consumer: &mut Consumer<P>,
    out: &mut Output,
    ring: &RingIdent,
    progress: Option<hmb_trace_file::EpochProgress>,
) -> Result<bool, DaemonError> {
    let Some(p) = progress else { return Ok(false) };
    // The same epoch number on a ring that has produced fewer sequence
    // numbers than the file holds is another ring incarnation (module
    // reloaded, epochs restarted): resuming would skip its records.
    let same_ring = p.epoch == ring.epoch && consumer.view().next_seq() >= p.next_seq;
    if p.epoch == ring.epoch && !same_ring {
        log::warn!(
            "file is at seq {} of epoch {}, the ring only at {}: treating it as a new ring",
            p.next_seq,
            p.epoch,
            consumer.view().next_seq()
        );
    }
    if same_ring {
        // Only a file that recorded something of this epoch knows where it
        // stands; a fresh file (e.g. after logrotate) starts at the tail.
        if p.records > 0 || p.next_seq > 0 {
            log::info!("resuming epoch {} at seq {}", p.epoch, p.next_seq);
            consumer.resume_from(p.next_seq);
        }
        return Ok(p.frozen);
    }
    log::info!(
        "file ends in epoch {}, ring is in epoch {}: new epoch marker",
        p.epoch,
        ring.epoch
    );
    out.write_marker(&encode_epoch(ring.epoch, ring.ring_size))?;
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nap_never_outlasts_an_eighth_of_the_ring_at_the_producers_rate() {
        let ms = Duration::from_millis;
        // QD1 on the NVMe controller: ~7 KB in 23 ms of a 16 MiB ring: the full wait.
        assert_eq!(nap_length(ms(100), 16 << 20, 7000, ms(23)), ms(100));
        // A fast producer: 256 KiB in 1 ms of the same ring: 2 MiB fill in 8 ms.
        assert_eq!(nap_length(ms(100), 16 << 20, 256 << 10, ms(1)), ms(8));
        // Faster still: under a millisecond is no nap.
        assert_eq!(
            nap_length(ms(100), 16 << 20, 256 << 10, Duration::from_micros(50)),
            Duration::ZERO
        );
        assert_eq!(nap_length(Duration::ZERO, 16 << 20, 1, ms(100)), Duration::ZERO);
    }
}
