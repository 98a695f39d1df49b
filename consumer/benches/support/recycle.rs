//! The benches' fair start for file work: one source for
//! `consumer/benches/ring.rs` and `daemon/benches/daemon.rs` (the daemon's
//! bench includes this file with `#[path]`).

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Writes a scratch file of `total` bytes in `dir` and removes it, so the
/// side that runs next takes its file's pages from the ones just freed,
/// whichever side it is. Without it the side that runs second gets the
/// pages the first one's file gave back a moment before, the first one
/// pages from wherever the kernel finds them (reclaim, when the page cache
/// is full).
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
}
