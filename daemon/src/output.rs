//! trace.bin on disk: create with a header, or recover an existing file
//! (truncate a torn last item, set a damaged file aside), append batches
//! with `writev` straight from the ring mapping (or with O_DIRECT through
//! an aligned copy, `--direct`: crate::direct), reopen on SIGHUP.

use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Write};
use std::path::{Path, PathBuf};

use crate::direct::{DirectFile, ALIGN, PAD};
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

/// Opens trace.bin for O_DIRECT writes (a parameter so a test can refuse
/// it as a file system without O_DIRECT does).
pub(crate) type DirectOpen = fn(&Path, u64) -> io::Result<DirectFile>;

pub struct Output {
    path: PathBuf,
    file: File,
    len: u64,
    fsync: Fsync,
    /// How to open the O_DIRECT side (`--direct`), kept for SIGHUP.
    direct_open: Option<DirectOpen>,
    /// The O_DIRECT side when in use: every write goes through it, `file`
    /// (O_APPEND) only syncs and truncates.
    direct: Option<DirectFile>,
    /// Test hook (`--debug-crash-window-us`): split every batch write in two
    /// with a sleep in between, widening the window a SIGKILL can tear.
    crash_window: Option<std::time::Duration>,
}

impl Output {
    /// Open `path` for appending. Returns the progress of the file's last
    /// epoch when an existing file was resumed.
    /// `direct`: write with O_DIRECT (falls back to buffered writes, with
    /// a warning, where the file system has none).
    pub fn open(
        path: &Path,
        ring: &RingIdent,
        fsync: Fsync,
        direct: bool,
    ) -> Result<(Self, Option<EpochProgress>), OutputError> {
        let direct_open: Option<DirectOpen> = if direct { Some(DirectFile::open) } else { None };
        let (mut out, progress) = Self::open_buffered(path, ring, fsync)?;
        out.direct_open = direct_open;
        out.start_direct()?;
        Ok((out, progress))
    }

    /// Open the O_DIRECT side if asked for; EINVAL (no O_DIRECT here) means
    /// buffered writes from now on.
    fn start_direct(&mut self) -> Result<(), OutputError> {
        let Some(open) = self.direct_open else { return Ok(()) };
        match open(&self.path, self.len) {
            Ok(d) => self.direct = Some(d),
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {
                log::warn!(
                    "{}: the file system has no O_DIRECT ({e}): writing through the page cache",
                    self.path.display()
                );
                self.direct_open = None;
            }
            Err(e) => return Err(self.io(e)),
        }
        Ok(())
    }

    fn open_buffered(
        path: &Path,
        ring: &RingIdent,
        fsync: Fsync,
    ) -> Result<(Self, Option<EpochProgress>), OutputError> {
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
        strip_padding(path).map_err(io_err)?;
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
            direct_open: None,
            direct: None,
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
            direct_open: None,
            direct: None,
            crash_window: None,
        })
    }

    /// SIGHUP (logrotate moved the file away): continue in a file at the
    /// same path — appended to if one is there, created otherwise.
    pub fn reopen(&mut self, ring: &RingIdent) -> Result<Option<EpochProgress>, OutputError> {
        self.sync()?;
        self.settle();
        let (mut new, progress) = Self::open_buffered(&self.path.clone(), ring, self.fsync)?;
        new.crash_window = self.crash_window;
        new.direct_open = self.direct_open;
        new.start_direct()?;
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

    /// Whether trace.bin is written with O_DIRECT.
    pub fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    pub fn write_marker(&mut self, marker: &[u8; MARKER_SIZE]) -> Result<(), OutputError> {
        if self.direct.is_some() {
            return self.write_direct(&[marker.as_slice()]);
        }
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
        if self.direct.is_some() {
            // One write for the marker and the records.
            let mut parts: Vec<&[u8]> = Vec::with_capacity(iov.len() + 1);
            parts.extend(lost.map(|m| m.as_slice()));
            parts.extend(iov.iter().map(|s| &s[..]));
            return self.write_direct(&parts);
        }
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

    /// Append through the O_DIRECT side. EINVAL on its first write (the
    /// file system takes the open but not the I/O) falls back to buffered.
    fn write_direct(&mut self, parts: &[&[u8]]) -> Result<(), OutputError> {
        let Some(d) = self.direct.as_mut() else {
            unreachable!("write_direct without --direct")
        };
        let start = self.len;
        let first = !d.has_written();
        match d.append(start, parts, self.crash_window) {
            Ok(()) => {
                self.len += parts.iter().map(|p| p.len() as u64).sum::<u64>();
                Ok(())
            }
            Err(e) if first && e.raw_os_error() == Some(nix::libc::EINVAL) => {
                log::warn!(
                    "{}: O_DIRECT write refused ({e}): writing through the page cache",
                    self.path.display()
                );
                self.settle();
                self.direct = None;
                self.direct_open = None;
                let _ = self.file.set_len(start);
                self.write_buffered_parts(parts)
            }
            Err(e) => Err(self.roll_back(start, e)),
        }
    }

    fn write_buffered_parts(&mut self, parts: &[&[u8]]) -> Result<(), OutputError> {
        let start = self.len;
        for p in parts {
            if let Err(e) = self.file.write_all(p) {
                return Err(self.roll_back(start, e));
            }
            self.len += p.len() as u64;
        }
        Ok(())
    }

    /// Cut the file back to its data (the O_DIRECT side's padding): at
    /// every way out and before a SIGHUP reopen. A failure is logged: the
    /// next start's recovery strips the padding instead.
    fn settle(&mut self) {
        let Some(d) = self.direct.as_mut() else { return };
        if !d.is_padded() {
            return;
        }
        match self.file.set_len(self.len) {
            Ok(()) => d.settled(),
            Err(e) => log::error!(
                "{}: cannot cut the O_DIRECT padding back to {} bytes ({e}); the next start does",
                self.path.display(),
                self.len
            ),
        }
    }

    /// After a failed write: cut the file back to `len` (shrinking needs no
    /// free space) and return the write's error. If even that fails, the
    /// next start's recovery truncates the torn item instead.
    fn roll_back(&mut self, len: u64, source: io::Error) -> OutputError {
        match self.file.set_len(len) {
            Ok(()) => {
                self.len = len;
                if let Some(d) = self.direct.as_mut() {
                    d.settled();
                }
            }
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

impl Drop for Output {
    /// The file's length is its data's on every way out of the daemon
    /// (`run` returns, and its Output with it, on every exit code).
    fn drop(&mut self) {
        self.settle();
    }
}

/// Cut off the end of `path` the padding an O_DIRECT batch filled its last
/// block with and that a kill between two batches left there: less than a
/// block of [`PAD`] bytes after the last whole item, to a block-aligned
/// length. Recovery calls them a corrupt item (a length over the maximum)
/// and would set the whole file aside. Anything else is left to recovery.
fn strip_padding(path: &Path) -> io::Result<()> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let len = file.metadata()?.len();
    if len <= FILE_HEADER_SIZE as u64 || !len.is_multiple_of(ALIGN as u64) {
        return Ok(());
    }
    let mut block = vec![0u8; ALIGN];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut block, len - ALIGN as u64)?;
    let pad = block.iter().rev().take_while(|&&b| b == PAD).count() as u64;
    if pad == 0 {
        return Ok(());
    }
    let Ok(rec) = recover(path) else { return Ok(()) };
    let end = rec.valid_len;
    let cut = matches!(rec.tail, TailState::Corrupt { .. } | TailState::Torn { .. });
    if cut && end >= len - pad && end < len {
        log::warn!(
            "{}: {} bytes of O_DIRECT padding after the last item at {end}: cutting them",
            path.display(),
            len - end
        );
        file.set_len(end)?;
    }
    Ok(())
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

    const RING: RingIdent = RingIdent {
        abi_major: hmb_trace_abi::HMB_RING_VERSION_MAJOR,
        abi_minor: hmb_trace_abi::HMB_RING_VERSION_MINOR,
        ring_size: 65536,
        epoch: 1,
    };

    /// Write the same markers (epochs: any bytes would do, these are items
    /// recovery understands) through an Output opened with `direct_open`.
    fn write_epochs(path: &Path, direct_open: Option<DirectOpen>, n: u64) -> Output {
        let (mut out, _) = Output::open_buffered(path, &RING, Fsync::Never).unwrap();
        out.direct_open = direct_open;
        out.start_direct().unwrap();
        for e in 2..2 + n {
            out.write_marker(&hmb_trace_file::encode_epoch(e, 65536)).unwrap();
        }
        out
    }

    #[test]
    fn without_o_direct_the_output_falls_back_to_buffered_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        drop(write_epochs(&a, None, 50));
        // What a file system without O_DIRECT (tmpfs before 6.6) answers.
        let refuse: DirectOpen = |_, _| Err(io::Error::from_raw_os_error(nix::libc::EINVAL));
        let out = write_epochs(&b, Some(refuse), 50);
        assert!(!out.is_direct());
        drop(out);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        // Any other error opening it is an output error, not a fallback.
        let deny: DirectOpen = |_, _| Err(io::Error::from_raw_os_error(nix::libc::EACCES));
        let (mut out, _) = Output::open_buffered(&b, &RING, Fsync::Never).unwrap();
        out.direct_open = Some(deny);
        assert!(out.start_direct().is_err());
    }

    #[test]
    fn direct_writes_are_the_buffered_bytes_and_the_padding_goes_at_drop() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        drop(write_epochs(&a, None, 70));
        let out = write_epochs(&b, Some(DirectFile::open), 70);
        assert!(out.is_direct());
        let len = out.len();
        // Before the drop the file ends in padding up to a whole block.
        let on_disk = std::fs::metadata(&b).unwrap().len();
        assert!(
            on_disk > len && on_disk.is_multiple_of(ALIGN as u64),
            "{on_disk} for {len}"
        );
        drop(out);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    }

    #[test]
    fn padding_left_by_a_kill_is_cut_and_appending_continues() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        drop(write_epochs(&a, None, 90));
        let out = write_epochs(&b, Some(DirectFile::open), 40);
        // A kill: no drop, the padding stays.
        std::mem::forget(out);
        let padded = std::fs::metadata(&b).unwrap().len();
        assert!(padded.is_multiple_of(ALIGN as u64));
        // Without the cut, recovery sees an all-zero item: corrupt.
        assert!(matches!(recover(&b).unwrap().tail, TailState::Corrupt { .. }));
        let (mut out, progress) = Output::open(&b, &RING, Fsync::Never, true).unwrap();
        assert!(progress.is_some(), "resumed, not set aside");
        assert_eq!(out.len(), FILE_HEADER_SIZE as u64 + 40 * MARKER_SIZE as u64);
        for e in 42..92 {
            out.write_marker(&hmb_trace_file::encode_epoch(e, 65536)).unwrap();
        }
        drop(out);
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert!(!dir.path().join("b.corrupt.0").exists());
    }

    #[test]
    fn zeros_are_not_padding_and_are_left_to_recovery() {
        // Zeros after the items are not an O_DIRECT batch's padding (they
        // read as empty records, which recovery then judges): untouched.
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("b");
        drop(write_epochs(&b, None, 10));
        let len = std::fs::metadata(&b).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&b)
            .unwrap()
            .set_len((len / ALIGN as u64 + 2) * ALIGN as u64)
            .unwrap();
        strip_padding(&b).unwrap();
        assert_eq!(
            std::fs::metadata(&b).unwrap().len(),
            (len / ALIGN as u64 + 2) * ALIGN as u64
        );
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
