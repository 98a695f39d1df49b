//! The benches' fair start for file work: one source for
//! `consumer/benches/ring.rs` and `daemon/benches/daemon.rs` (the daemon's
//! bench includes this file with `#[path]`).

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Writes a scratch file of `total` bytes in `dir`, removes it, and waits
/// until kswapd has stopped reclaiming, so the side that runs next takes
/// its file's pages from the ones just freed and runs without the kernel's
/// reclaim beside it, whichever side it is.
///
/// Without it, with a full page cache, the side that runs first got its
/// pages by reclaim while it ran (kswapd on one of the two cores the
/// producer and the daemon need), and the side that runs second got the
/// pages the first one's file gave back a moment before
/// (docs/performance.md, "Seventh pass").
pub fn recycle(dir: &Path, total: u64) {
    let path = dir.join("hmb-bench-recycle.bin");
    let mut f = File::create(&path).unwrap();
    let buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    while done < total {
        let n = ((total - done) as usize).min(buf.len());
        f.write_all(&buf[..n]).unwrap();
        done += n as u64;
    }
    drop(f);
    std::fs::remove_file(&path).unwrap();
    settle();
}

/// Waits (at most 1 s) until kswapd's reclaim count has stood still for
/// 100 ms.
fn settle() {
    let start = Instant::now();
    let mut last = kswapd_reclaimed();
    let mut still = 0;
    while still < 2 && start.elapsed() < Duration::from_secs(1) {
        std::thread::sleep(Duration::from_millis(50));
        let now = kswapd_reclaimed();
        still = if now == last { still + 1 } else { 0 };
        last = now;
    }
}

/// Pages kswapd has reclaimed since boot (/proc/vmstat `pgsteal_kswapd`;
/// 0 where it cannot be read, so `settle` returns at once).
fn kswapd_reclaimed() -> u64 {
    std::fs::read_to_string("/proc/vmstat")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("pgsteal_kswapd "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}
