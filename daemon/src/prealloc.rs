//! trace.bin's blocks reserved ahead of its end (`--preallocate-mib`).
//!
//! Appending to a file on ext4 makes the file system reserve a delayed
//! block for every page the write dirties, and allocate them all when the
//! pages are written back: per-page work that, in a TCG guest, cost the
//! daemon's writes into ext4 about as much as the rest of its work
//! (docs/performance.md, "What the trace's cost is made of"). With the
//! blocks already allocated ahead of the end (`fallocate` with
//! `FALLOC_FL_KEEP_SIZE`: the file's size, and so its bytes, do not change)
//! a page's write finds its block mapped.
//!
//! Preallocation is an optimisation only: any `fallocate` failure (a file
//! system without it, a full disk, a file size limit) turns it off for this
//! file and the writes go on as before, so a full output still ends as
//! docs/daemon.md says (exit 11 after a whole batch). What is reserved past
//! the end is released when the output is dropped (a stop, a reopen); after
//! a SIGKILL it stays until the file is truncated or removed.

use std::fs::File;
use std::os::fd::AsRawFd;

use nix::fcntl::{fallocate, FallocateFlags};

/// Reserves blocks ahead of a file's end, `step` bytes at a time.
#[derive(Debug)]
pub(crate) struct Prealloc {
    /// Bytes reserved per call; 0: off.
    step: u64,
    /// The file is reserved up to here (its length when nothing is).
    reserved_to: u64,
}

impl Prealloc {
    /// `step` bytes ahead at a time (0: never) of a file `len` bytes long.
    pub(crate) fn new(step: u64, len: u64) -> Prealloc {
        Prealloc { step, reserved_to: len }
    }

    /// Before writing up to byte `end`: if that passes the reserved part,
    /// reserve up to the next multiple of `step` past `end`. Never fails:
    /// an error switches preallocation off.
    pub(crate) fn ahead_of(&mut self, file: &File, end: u64) {
        if self.step == 0 || end <= self.reserved_to {
            return;
        }
        let to = (end / self.step + 1) * self.step;
        let (Ok(offset), Ok(len)) = (i64::try_from(self.reserved_to), i64::try_from(to - self.reserved_to)) else {
            self.step = 0;
            return;
        };
        match fallocate(file.as_raw_fd(), FallocateFlags::FALLOC_FL_KEEP_SIZE, offset, len) {
            Ok(()) => self.reserved_to = to,
            Err(e) => {
                log::info!("preallocating trace.bin failed ({e}): writing without it");
                self.step = 0;
            }
        }
    }

    /// Whether blocks past `len` may be reserved (a release is due).
    pub(crate) fn beyond(&self, len: u64) -> bool {
        self.reserved_to > len
    }

    /// The file was cut back to `len` (a failed write's roll-back), which
    /// releases what was reserved past it.
    pub(crate) fn truncated(&mut self, len: u64) {
        self.reserved_to = len;
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const STEP: u64 = 1 << 20;

    fn allocated(f: &File) -> u64 {
        f.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn blocks_are_reserved_a_step_ahead_and_the_size_does_not_move() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = File::create(dir.path().join("t")).unwrap();
        let mut p = Prealloc::new(STEP, 0);
        p.ahead_of(&f, 100);
        f.write_all(&[7u8; 100]).unwrap();
        assert_eq!(f.metadata().unwrap().len(), 100);
        assert_eq!(p.reserved_to, STEP, "off after an error: {p:?}");
        assert!(allocated(&f) >= STEP, "{} bytes allocated", allocated(&f));
        // Within the reserved part: no call; past it: the next step.
        p.ahead_of(&f, STEP);
        assert_eq!(p.reserved_to, STEP);
        p.ahead_of(&f, STEP + 1);
        assert_eq!(p.reserved_to, 2 * STEP);
        assert!(p.beyond(100));
        p.truncated(100);
        assert!(!p.beyond(100));
    }

    #[test]
    fn a_failing_fallocate_turns_preallocation_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        File::create(&path).unwrap();
        // Read-only: fallocate fails with EBADF.
        let f = File::open(&path).unwrap();
        let mut p = Prealloc::new(STEP, 0);
        p.ahead_of(&f, 10);
        assert_eq!((p.step, p.reserved_to), (0, 0));
        p.ahead_of(&f, 10);
        assert_eq!(allocated(&f), 0);
    }

    #[test]
    fn step_zero_never_reserves() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::create(dir.path().join("t")).unwrap();
        let mut p = Prealloc::new(0, 0);
        p.ahead_of(&f, 1 << 30);
        assert_eq!(allocated(&f), 0);
        assert!(!p.beyond(0));
    }
}
