//! trace.bin written with O_DIRECT (`--direct`): whole blocks from an
//! aligned buffer, so the trace's bytes never sit in the page cache and are
//! never written back by the kernel's flusher (issue 28: in a TCG guest the
//! host pays for the guest's ext4 writeback).
//!
//! O_DIRECT needs the offset, the length and the buffer aligned. The file's
//! last block is usually partial: its bytes (the carry) stay at the front of
//! the buffer and are written again, with the next batch after them, at the
//! block's offset. Each write is padded to a whole block with 0xFF bytes,
//! so between batches the file is longer than its data by less than a
//! block; [`Output`](crate::output::Output) keeps the true length and cuts
//! the file back to it on every way out, and recovery cuts such padding
//! after the last whole item (crate::output, `strip_padding`). Why 0xFF and
//! not zeros: 32 zero bytes parse as a valid empty record (length, opcode,
//! seq all 0), so zero padding would read as records; an item starting
//! with 0xFF has a length over the maximum, which no reader takes for an
//! item (a reader of the live file sees a damaged end, never false
//! records). A batch is always whole items, so a file killed between
//! batches is whole items followed by padding, never an item completed by it.

use std::alloc::{self, Layout};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::time::Duration;

/// Block size every write is aligned to: ext4's block and a page, a multiple
/// of every logical block size a disk reports (512 or 4096).
pub(crate) const ALIGN: usize = 4096;

/// What a write is padded with (module comment).
pub(crate) const PAD: u8 = 0xFF;

/// A zeroed heap buffer aligned to [`ALIGN`] that can grow keeping its bytes.
struct AlignedBuf {
    ptr: NonNull<u8>,
    cap: usize,
}

impl AlignedBuf {
    fn new(cap: usize) -> Self {
        let cap = round_up(cap.max(ALIGN));
        let layout = Layout::from_size_align(cap, ALIGN).expect("aligned layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        Self { ptr, cap }
    }

    /// At least `need` bytes, the first `keep` kept.
    fn reserve(&mut self, need: usize, keep: usize) {
        if need <= self.cap {
            return;
        }
        let mut bigger = Self::new(need.max(self.cap * 2));
        bigger.as_mut()[..keep].copy_from_slice(&self.as_ref()[..keep]);
        *self = bigger;
    }

    fn as_ref(&self) -> &[u8] {
        // SAFETY: `cap` bytes allocated and initialised (zeroed) in `new`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.cap) }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.cap) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.cap, ALIGN).expect("aligned layout");
        // SAFETY: allocated in `new` with this layout.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
    }
}

fn round_up(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

fn round_down(n: usize) -> usize {
    n / ALIGN * ALIGN
}

/// The O_DIRECT side of trace.bin.
pub(crate) struct DirectFile {
    file: File,
    buf: AlignedBuf,
    /// Bytes of the file's last, partial block (`len % ALIGN`), at the
    /// front of `buf`.
    carry: usize,
    /// The file holds [`PAD`] padding after its data (a write since the last
    /// [`DirectFile::settled`]).
    padded: bool,
    /// A write has gone through (an EINVAL before that means this file
    /// system takes O_DIRECT opens but not the I/O).
    wrote: bool,
    /// The process's file size limit (RLIMIT_FSIZE). The kernel cuts a write
    /// that crosses it short to an unaligned length, which O_DIRECT refuses
    /// with EINVAL; a padded write past it fails here with EFBIG instead,
    /// so a limit reads as a full output (exit 11) as in buffered mode.
    size_limit: u64,
}

impl DirectFile {
    /// Open `path` (whose data is `len` bytes) for O_DIRECT writes and read
    /// its partial last block. Fails with EINVAL where the file system has
    /// no O_DIRECT (tmpfs before Linux 6.6, some FUSE file systems).
    pub(crate) fn open(path: &Path, len: u64) -> io::Result<Self> {
        let file = OpenOptions::new()
            .write(true)
            .custom_flags(nix::libc::O_DIRECT)
            .open(path)?;
        let carry = (len % ALIGN as u64) as usize;
        let mut buf = AlignedBuf::new(256 * 1024);
        if carry > 0 {
            // Through a buffered descriptor: O_DIRECT reads need alignment too.
            File::open(path)?.read_exact_at(&mut buf.as_mut()[..carry], len - carry as u64)?;
        }
        Ok(Self {
            file,
            buf,
            carry,
            padded: false,
            wrote: false,
            size_limit: file_size_limit(),
        })
    }

    /// Append `parts` to the file whose data is `len` bytes: the carry and
    /// the parts, padded to whole blocks with [`PAD`], written at the carry's block.
    /// `crash_window`: test hook, write in two at a block boundary with a
    /// sleep between (the first part unpadded, so a kill there leaves a torn
    /// item for recovery, not one completed by padding). On an error nothing
    /// in the carry has changed; the caller cuts the file back to `len`.
    pub(crate) fn append(&mut self, len: u64, parts: &[&[u8]], crash_window: Option<Duration>) -> io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total == 0 {
            return Ok(());
        }
        let start = len - self.carry as u64;
        let end = self.carry + total;
        let padded = round_up(end);
        if start + padded as u64 > self.size_limit {
            return Err(io::Error::from_raw_os_error(nix::libc::EFBIG));
        }
        self.buf.reserve(padded, self.carry);
        let buf = self.buf.as_mut();
        let mut at = self.carry;
        for p in parts {
            buf[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        buf[end..padded].fill(PAD);
        let split = crash_window.map_or(0, |_| round_down(end / 2));
        if split > 0 {
            self.padded = true;
            write_all_at(&self.file, &self.buf.as_ref()[..split], start)?;
            std::thread::sleep(crash_window.unwrap_or_default());
        } else if let Some(window) = crash_window {
            std::thread::sleep(window);
        }
        self.padded = true;
        write_all_at(&self.file, &self.buf.as_ref()[split..padded], start + split as u64)?;
        let carry = end % ALIGN;
        self.buf.as_mut().copy_within(end - carry..end, 0);
        self.carry = carry;
        self.wrote = true;
        Ok(())
    }

    /// Whether a write has gone through.
    pub(crate) fn has_written(&self) -> bool {
        self.wrote
    }

    /// Whether the file may hold padding after its data.
    pub(crate) fn is_padded(&self) -> bool {
        self.padded
    }

    /// The file was cut back to its data.
    pub(crate) fn settled(&mut self) {
        self.padded = false;
    }
}

fn file_size_limit() -> u64 {
    let mut r = nix::libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { nix::libc::getrlimit(nix::libc::RLIMIT_FSIZE, &mut r) } != 0 || r.rlim_cur == nix::libc::RLIM_INFINITY {
        return u64::MAX;
    }
    r.rlim_cur
}

/// pwrite until done, resuming after EINTR and short writes (an O_DIRECT
/// write ends short only on block boundaries).
fn write_all_at(file: &File, mut buf: &[u8], mut at: u64) -> io::Result<()> {
    while !buf.is_empty() {
        match file.write_at(buf, at) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                buf = &buf[n..];
                at += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
    }

    /// The file as a reader sees it: its data, then only padding to the end.
    fn data_then_padding(path: &Path, len: u64) -> Vec<u8> {
        let all = std::fs::read(path).unwrap();
        assert!(all.len() as u64 >= len, "file shorter than its data");
        assert!(all.len() as u64 - len < ALIGN as u64, "more than a block of padding");
        assert!(all[len as usize..].iter().all(|&b| b == PAD), "padding not PAD");
        all[..len as usize].to_vec()
    }

    #[test]
    fn appends_across_partial_blocks_are_the_bytes_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, bytes(64, 1)).unwrap();
        let mut want = bytes(64, 1);
        let mut f = DirectFile::open(&path, 64).unwrap();
        let mut len = 64u64;
        // Sizes that end inside a block, on a block, across several, and
        // one bigger than the buffer's first capacity.
        for (i, n) in [10usize, 4022, 4096, 1, 9000, 300_000, 4095, 7].into_iter().enumerate() {
            let (a, b) = (bytes(n / 3, i as u8), bytes(n - n / 3, 100 + i as u8));
            f.append(len, &[&a, &b], None).unwrap();
            want.extend_from_slice(&a);
            want.extend_from_slice(&b);
            len += n as u64;
            assert_eq!(data_then_padding(&path, len), want, "after append {i} of {n} bytes");
        }
    }

    #[test]
    fn a_reopened_file_carries_its_partial_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, bytes(5000, 7)).unwrap();
        let mut f = DirectFile::open(&path, 5000).unwrap();
        f.append(5000, &[&bytes(100, 9)], None).unwrap();
        let mut want = bytes(5000, 7);
        want.extend_from_slice(&bytes(100, 9));
        assert_eq!(data_then_padding(&path, 5100), want);
    }

    #[test]
    fn the_crash_hook_leaves_the_first_blocks_unpadded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, bytes(64, 1)).unwrap();
        let mut f = DirectFile::open(&path, 64).unwrap();
        let data = bytes(20_000, 3);
        // A reader in the window sees blocks of data and no padding after them.
        let reader = {
            let path = path.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                std::fs::read(&path).unwrap()
            })
        };
        f.append(64, &[&data], Some(Duration::from_millis(300))).unwrap();
        let mid = reader.join().unwrap();
        assert_eq!(mid.len(), round_down((64 + 20_000) / 2));
        let mut want = bytes(64, 1);
        want.extend_from_slice(&data);
        assert_eq!(mid[..], want[..mid.len()]);
        assert_eq!(data_then_padding(&path, 64 + 20_000), want);
    }
}
