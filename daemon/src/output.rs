//! trace.bin on disk: create with a header, or recover an existing file
//! (truncate a torn last item, set a damaged file aside), append batches
//! with `writev` straight from the ring mapping, reopen on SIGHUP.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};

use hmb_trace_file::{recover, EpochProgress, FileError, FileHeader, TailState, FILE_HEADER_SIZE, MARKER_SIZE};
use thiserror::Error;

/// When trace.bin is synced to stable storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Fsync {
    /// Never: a SIGKILL loses nothing (the page cache keeps every write), a
    /// power cut can lose records whose tail was already published.
    Never,
    /// fdatasync after every batch, before its tail is published: nothing
    /// published is ever lost, even on a power cut. Slower.
    Batch,
}

/// The ring a file is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingIdent {
    pub abi_major: u16,
    pub abi_minor: u16,
    pub ring_size: u64,
    pub epoch: u64,
}

#[derive(Debug, Error)]
pub enum OutputError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} exists and is not a trace.bin this daemon can append to: {source}")]
    Foreign { path: PathBuf, source: FileError },
}

impl OutputError {
    /// The output file system is full, a quota is reached or the file hit
    /// its size limit: space can be freed and the daemon restarted (the
    /// records not written are still in the ring).
    pub fn is_full(&self) -> bool {
        let Self::Io { source, .. } = self else { return false };
        matches!(
            source.raw_os_error(),
            Some(libc_errno::ENOSPC | libc_errno::EDQUOT | libc_errno::EFBIG)
        )
    }
}

/// The errno values of a full output (nix's, as plain integers).
mod libc_errno {
    pub const ENOSPC: i32 = nix::errno::Errno::ENOSPC as i32;
    pub const EDQUOT: i32 = nix::errno::Errno::EDQUOT as i32;
    pub const EFBIG: i32 = nix::errno::Errno::EFBIG as i32;
}

pub struct Output {
    path: PathBuf,
    file: File,
    len: u64,
    fsync: Fsync,
    /// Test hook (`--debug-crash-window-us`): split every batch write in two
    /// with a sleep in between, widening the window a SIGKILL can tear.
    crash_window: Option<std::time::Duration>,
}

impl Output {
    /// Open `path` for appending. Returns the progress of the file's last
    /// epoch when an existing file was resumed.
    pub fn open(path: &Path, ring: &RingIdent, fsync: Fsync) -> Result<(Self, Option<EpochProgress>), OutputError> {
        let io_err = |source| OutputError::Io {
            path: path.to_path_buf(),
            source,
        };
        let existing = match std::fs::metadata(path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(io_err(e)),
        };
        // Shorter than a header: our own create was cut short; start over.
        if existing < FILE_HEADER_SIZE as u64 {
            return Ok((Self::create(path, ring, fsync)?, None));
        }
        let rec = recover(path).map_err(|source| match source {
            FileError::Io(source) => io_err(source),
            source => OutputError::Foreign {
                path: path.to_path_buf(),
                source,
            },
        })?;
        match &rec.tail {
            TailState::Clean => {}
            TailState::Torn { offset, have, need } => {
                log::warn!(
                    "{}: torn last item at {offset} ({have} of {need} bytes): truncating to {}",
                    path.display(),
                    rec.valid_len
                );
                OpenOptions::new()
                    .write(true)
                    .open(path)
                    .and_then(|f| f.set_len(rec.valid_len))
                    .map_err(io_err)?;
            }
            TailState::Corrupt { offset, reason } => {
                let aside = set_aside(path).map_err(io_err)?;
                log::error!(
                    "{}: corrupt item at {offset} ({reason}); moved to {} and starting a new file",
                    path.display(),
                    aside.display()
                );
                return Ok((Self::create(path, ring, fsync)?, None));
            }
        }
        let file = OpenOptions::new().append(true).open(path).map_err(io_err)?;
        let out = Self {
            path: path.to_path_buf(),
            file,
            len: rec.valid_len,
            fsync,
            crash_window: None,
        };
        Ok((out, Some(*rec.last_epoch())))
    }

    fn create(path: &Path, ring: &RingIdent, fsync: Fsync) -> Result<Self, OutputError> {
        let io_err = |source| OutputError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(io_err)?;
        let header = FileHeader::new(ring.abi_major, ring.abi_minor, ring.ring_size, ring.epoch);
        file.write_all(&header.encode()).map_err(io_err)?;
        if fsync == Fsync::Batch {
            file.sync_data().map_err(io_err)?;
        }
        drop(file);
        let file = OpenOptions::new().append(true).open(path).map_err(io_err)?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            len: FILE_HEADER_SIZE as u64,
            fsync,
            crash_window: None,
        })
    }

    /// SIGHUP (logrotate moved the file away): continue in a file at the
    /// same path — appended to if one is there, created otherwise.
    pub fn reopen(&mut self, ring: &RingIdent) -> Result<Option<EpochProgress>, OutputError> {
        self.sync()?;
        let (mut new, progress) = Self::open(&self.path.clone(), ring, self.fsync)?;
        new.crash_window = self.crash_window;
        *self = new;
        Ok(progress)
    }

    pub fn set_crash_window(&mut self, window: Option<std::time::Duration>) {
        self.crash_window = window;
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn io(&self, source: io::Error) -> OutputError {
        OutputError::Io {
            path: self.path.clone(),
            source,
        }
    }

    pub fn write_marker(&mut self, marker: &[u8; MARKER_SIZE]) -> Result<(), OutputError> {
        let start = self.len;
        if let Err(e) = self.file.write_all(marker) {
            return Err(self.roll_back(start, e));
        }
        self.len += MARKER_SIZE as u64;
        Ok(())
    }

    /// A batch: an optional LOST marker, then the ring's bytes by `writev`
    /// (one system call for the whole batch unless the kernel writes short).
    /// All or nothing: a failed write (file system full, file size limit)
    /// truncates the file back to where the batch began, so it never ends
    /// in a torn item or a LOST marker whose records are missing. The tail
    /// is not published, so the batch is still in the ring for a restart.
    pub fn write_batch(&mut self, lost: Option<&[u8; MARKER_SIZE]>, iov: &[IoSlice<'_>]) -> Result<(), OutputError> {
        let start = self.len;
        if let Some(m) = lost {
            self.write_marker(m)?;
        }
        let total: usize = iov.iter().map(|s| s.len()).sum();
        let written = if let (Some(window), true) = (self.crash_window, total > 1) {
            write_split(&self.file, iov, total / 2, window)
        } else if total > 0 {
            write_all_vectored(&self.file, iov)
        } else {
            Ok(())
        };
        if let Err(e) = written {
            return Err(self.roll_back(start, e));
        }
        self.len += total as u64;
        Ok(())
    }

    /// After a failed write: cut the file back to `len` (shrinking needs no
    /// free space) and return the write's error. If even that fails, the
    /// next start's recovery truncates the torn item instead.
    fn roll_back(&mut self, len: u64, source: io::Error) -> OutputError {
        match self.file.set_len(len) {
            Ok(()) => self.len = len,
            Err(e) => log::error!(
                "{}: cannot truncate back to {len} bytes after a failed write ({e}); \
                 the next start recovers the file",
                self.path.display()
            ),
        }
        self.io(source)
    }

    /// Make everything written durable if the policy asks for it (before a
    /// tail is published).
    pub fn commit_point(&mut self) -> Result<(), OutputError> {
        if self.fsync == Fsync::Batch {
            self.sync()?;
        }
        Ok(())
    }

    pub fn sync(&mut self) -> Result<(), OutputError> {
        self.file.sync_data().map_err(|e| self.io(e))
    }
}

/// writev straight from the ring mapping, resuming after EINTR. A file
/// system that pins the source pages for zero-copy I/O (9p, FUSE direct
/// I/O, O_DIRECT) cannot pin a device mapping (VM_PFNMAP) and fails with
/// EFAULT, having written nothing: the batch then goes out through a copy
/// (measured in a guest: trace.bin on its 9p share failed with exit 7
/// before). What a short write left goes through the copy as well. The
/// copy reads the ring in user space, as the validation walk did a moment
/// before: a device removed in between (its mapping zapped) is the same
/// SIGBUS either way; the module drains before it zaps (docs/kmod.md).
fn write_all_vectored(file: &File, iov: &[IoSlice<'_>]) -> io::Result<()> {
    let written = loop {
        match nix::sys::uio::writev(file, iov) {
            Ok(n) => break n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EFAULT) => break 0,
            Err(e) => return Err(e.into()),
        }
    };
    let total: usize = iov.iter().map(|s| s.len()).sum();
    if written < total {
        write_through_copy(file, iov, written)?;
    }
    Ok(())
}

/// Write `iov` from byte `skip` on, copied into one buffer first.
fn write_through_copy(mut file: &File, iov: &[IoSlice<'_>], skip: usize) -> io::Result<()> {
    file.write_all(&rest_of(iov, skip))
}

/// The bytes of `iov` from byte `skip` on, in one buffer.
fn rest_of(iov: &[IoSlice<'_>], mut skip: usize) -> Vec<u8> {
    let total: usize = iov.iter().map(|s| s.len()).sum();
    let mut buf = Vec::with_capacity(total.saturating_sub(skip));
    for s in iov {
        if skip >= s.len() {
            skip -= s.len();
            continue;
        }
        buf.extend_from_slice(&s[skip..]);
        skip = 0;
    }
    buf
}

/// Test hook: the first `split` bytes, a sleep, then the rest.
fn write_split(mut file: &File, iov: &[IoSlice<'_>], split: usize, window: std::time::Duration) -> io::Result<()> {
    let mut at = 0usize;
    for s in iov {
        if at < split && at + s.len() > split {
            file.write_all(&s[..split - at])?;
            std::thread::sleep(window);
            file.write_all(&s[split - at..])?;
        } else {
            if at == split {
                std::thread::sleep(window);
            }
            file.write_all(s)?;
        }
        at += s.len();
    }
    Ok(())
}

/// Rename a damaged file to `<path>.corrupt.N` (first free N).
fn set_aside(path: &Path) -> io::Result<PathBuf> {
    for n in 0..1000 {
        let mut aside = path.as_os_str().to_owned();
        aside.push(format!(".corrupt.{n}"));
        let aside = PathBuf::from(aside);
        if !aside.exists() {
            std::fs::rename(path, &aside)?;
            return Ok(aside);
        }
    }
    Err(io::Error::other("no free .corrupt.N name"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_of_a_batch_starts_anywhere_in_any_slice() {
        let (a, b, c) = (b"abc".as_slice(), b"".as_slice(), b"defgh".as_slice());
        let iov = [IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)];
        assert_eq!(rest_of(&iov, 0), b"abcdefgh");
        assert_eq!(rest_of(&iov, 2), b"cdefgh");
        assert_eq!(rest_of(&iov, 3), b"defgh");
        assert_eq!(rest_of(&iov, 7), b"h");
        assert_eq!(rest_of(&iov, 8), b"");
    }

    #[test]
    fn a_batch_written_through_the_copy_is_the_batch() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let file = File::create(&path).unwrap();
        let (a, b) = (vec![1u8; 5000], vec![2u8; 3000]);
        let iov = [IoSlice::new(&a), IoSlice::new(&b)];
        write_through_copy(&file, &iov, 4999).unwrap();
        let mut want = vec![1u8];
        want.extend_from_slice(&b);
        assert_eq!(std::fs::read(&path).unwrap(), want);
    }
}
