//! Access to the trace ring, behind a trait so host tests can drive the
//! daemon without the kernel module.
//!
//! * [`CharDevice`]: `/dev/nvme-hmb-traceN` — GET_INFO, the ring view
//!   mapped read-only chunk by chunk (GET_CHUNK, docs/abi.md decision 11),
//!   PUBLISH_TAIL and REINIT ioctls, `poll()`.
//! * [`RingFile`]: a trace slice in a plain file or `/dev/shm` object that
//!   another process (the firmware model, the emulated device) produces
//!   into. The daemon plays the module's part itself: tail as an atomic
//!   store with the module's checks, re-initialisation with the module's
//!   rules, and polling by sampling the header.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmb_trace_abi::ioctl::*;
use hmb_trace_abi::*;
use hmb_trace_abi::{module_sim, SharedRing};
use hmb_trace_consumer::{AtomicTailPublisher, Chunk, RingView, TailPublisher};
use memmap2::MmapOptions;
use zerocopy::FromZeros;

/// What `wait` saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    pub readable: bool,
    pub frozen: bool,
    /// The device went away (POLLHUP/POLLERR).
    pub gone: bool,
}

pub trait TraceDevice {
    /// Map the whole trace slice read-only.
    fn map(&mut self) -> io::Result<RingView>;
    /// The tail publisher for this device (once per batch).
    fn publisher(&mut self) -> io::Result<Box<dyn TailPublisher>>;
    /// Sleep until data, FROZEN, removal, a signal (EINTR: returns with
    /// nothing set) or `timeout`.
    fn wait(&mut self, timeout: Duration) -> io::Result<Readiness>;
    /// Sleep `d` while records gather: new data does not end it, only a
    /// freeze (`frozen`), removal (`gone`), a signal (EINTR) or the time. The daemon must not
    /// touch the ring after a removal (the module takes the mapping away:
    /// SIGBUS), so it learns of one here as it would in `wait`.
    fn nap(&mut self, d: Duration) -> io::Result<Readiness>;
    /// Re-initialise a FROZEN ring; returns the new epoch.
    fn reinit(&mut self) -> io::Result<u64>;
    /// A name for messages.
    fn name(&self) -> String;
}

nix::ioctl_read_bad!(ioc_get_info, HMB_TRACE_IOC_GET_INFO, hmb_trace_info);
nix::ioctl_write_ptr_bad!(ioc_publish_tail, HMB_TRACE_IOC_PUBLISH_TAIL, u64);
nix::ioctl_readwrite_bad!(ioc_reinit, HMB_TRACE_IOC_REINIT, u64);
nix::ioctl_readwrite_bad!(ioc_get_chunk, HMB_TRACE_IOC_GET_CHUNK, hmb_trace_chunk);

/// The kernel module's character device.
pub struct CharDevice {
    path: PathBuf,
    file: Arc<File>,
    info: hmb_trace_info,
}

impl CharDevice {
    /// Open (the module allows one opener: EBUSY otherwise) and GET_INFO;
    /// a module that speaks another device interface major is refused here.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc_o_cloexec())
            .open(path)?;
        let mut info = hmb_trace_info::new_zeroed();
        // SAFETY: the request's size matches hmb_trace_info (abi crate).
        unsafe { ioc_get_info(std::os::fd::AsRawFd::as_raw_fd(&file), &mut info) }.map_err(io::Error::from)?;
        check_interface(&info)?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Arc::new(file),
            info,
        })
    }

    pub fn info(&self) -> &hmb_trace_info {
        &self.info
    }

    /// The chunks of the ring view, in order (GET_CHUNK for each index).
    fn chunks(&self) -> io::Result<Vec<Chunk>> {
        (0..self.info.nr_chunks.get())
            .map(|index| {
                let mut c = hmb_trace_chunk::new_zeroed();
                c.index = index.into();
                // SAFETY: the request's size matches hmb_trace_chunk (abi crate).
                unsafe { ioc_get_chunk(std::os::fd::AsRawFd::as_raw_fd(&*self.file), &mut c) }
                    .map_err(io::Error::from)?;
                Ok(Chunk {
                    offset: c.offset.get(),
                    len: c.len.get(),
                })
            })
            .collect()
    }
}

/// The device interface this daemon speaks: a different major maps
/// differently (1.x had one mapping at offset 0), so it is refused.
fn check_interface(info: &hmb_trace_info) -> io::Result<()> {
    let (major, minor) = (info.abi_major.get(), info.abi_minor.get());
    if major != HMB_TRACE_DEV_ABI_MAJOR || info.nr_chunks.get() == 0 {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "the module speaks device interface {major}.{minor} with {} chunks; this daemon needs {HMB_TRACE_DEV_ABI_MAJOR}.x with at least one",
                info.nr_chunks.get()
            ),
        ));
    }
    Ok(())
}

fn libc_o_cloexec() -> i32 {
    nix::fcntl::OFlag::O_CLOEXEC.bits()
}

struct IoctlPublisher(Arc<File>);

impl TailPublisher for IoctlPublisher {
    fn publish_tail(&mut self, tail: u64) -> io::Result<()> {
        // SAFETY: PUBLISH_TAIL reads one u64.
        unsafe { ioc_publish_tail(std::os::fd::AsRawFd::as_raw_fd(&*self.0), &tail) }
            .map(|_| ())
            .map_err(io::Error::from)
    }
}

impl CharDevice {
    /// One poll() of the device for `events` (POLLHUP/POLLERR/POLLNVAL are
    /// always reported); EINTR returns with nothing set.
    fn poll_for(&self, events: nix::poll::PollFlags, timeout: Duration) -> io::Result<Readiness> {
        use nix::poll::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(self.file.as_fd(), events)];
        match poll(&mut fds, poll_timeout(timeout)) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(Readiness::default()),
            Err(e) => return Err(e.into()),
        }
        let r = fds[0].revents().unwrap_or(PollFlags::empty());
        Ok(Readiness {
            readable: r.intersects(PollFlags::POLLIN | PollFlags::POLLRDNORM),
            frozen: r.contains(PollFlags::POLLPRI),
            gone: r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL),
        })
    }
}

impl TraceDevice for CharDevice {
    fn map(&mut self) -> io::Result<RingView> {
        let len = self.info.mmap_len.get();
        let len = usize::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "mmap_len too large"))?;
        let chunks = self.chunks()?;
        RingView::map_chunks(&self.file, len, &chunks).map_err(|e| io::Error::other(e.to_string()))
    }

    fn publisher(&mut self) -> io::Result<Box<dyn TailPublisher>> {
        Ok(Box::new(IoctlPublisher(self.file.clone())))
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<Readiness> {
        self.poll_for(nix::poll::PollFlags::POLLIN | nix::poll::PollFlags::POLLPRI, timeout)
    }

    fn nap(&mut self, d: Duration) -> io::Result<Readiness> {
        // Not POLLIN: new records are what the nap lets gather. POLLPRI (a
        // freeze: a reset or a removal on its way, which waits for the
        // daemon to drain) and POLLHUP/POLLERR/POLLNVAL (always reported)
        // end it.
        self.poll_for(nix::poll::PollFlags::POLLPRI, d)
    }

    fn reinit(&mut self) -> io::Result<u64> {
        let mut epoch = 0u64;
        // SAFETY: REINIT writes one u64.
        unsafe { ioc_reinit(std::os::fd::AsRawFd::as_raw_fd(&*self.file), &mut epoch) }.map_err(io::Error::from)?;
        Ok(epoch)
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// A ring in a plain file (host tests, emulation without the module).
pub struct RingFile {
    path: PathBuf,
    file: File,
    ring: SharedRing,
    rw: Arc<memmap2::MmapRaw>,
}

impl RingFile {
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = usize::try_from(file.metadata()?.len()).map_err(|_| io::Error::other("file too large"))?;
        if len < HMB_RING_HDR_SIZE as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is shorter than a ring header", path.display()),
            ));
        }
        let rw = Arc::new(MmapOptions::new().len(len).map_raw(&file)?);
        let ring = SharedRing::from_mmap(rw.clone()).map_err(|e| io::Error::other(e.to_string()))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            ring,
            rw,
        })
    }
}

impl TraceDevice for RingFile {
    fn map(&mut self) -> io::Result<RingView> {
        let len = self.file.metadata()?.len() as usize;
        RingView::map_file(&self.file, 0, len).map_err(|e| io::Error::other(e.to_string()))
    }

    fn publisher(&mut self) -> io::Result<Box<dyn TailPublisher>> {
        Ok(Box::new(AtomicTailPublisher::from_mmap(self.rw.clone())))
    }

    fn nap(&mut self, d: Duration) -> io::Result<Readiness> {
        // A plain file cannot go away under its mapping: a sleep that a
        // signal ends (poll() with no descriptors returns EINTR).
        let _ = nix::poll::poll(&mut [], poll_timeout(d));
        Ok(Readiness::default())
    }

    fn wait(&mut self, timeout: Duration) -> io::Result<Readiness> {
        use std::sync::atomic::Ordering::Acquire;
        let start = Instant::now();
        loop {
            let flags = self.ring.atomic_u32(offsets::FLAGS).load(Acquire);
            let head = self.ring.atomic_u64(offsets::HEAD).load(Acquire);
            let tail = self.ring.atomic_u64(offsets::TAIL).load(Acquire);
            let r = Readiness {
                readable: head != tail,
                frozen: flags & HMB_RING_FLAG_FROZEN != 0,
                gone: false,
            };
            if r.readable || r.frozen || start.elapsed() >= timeout {
                return Ok(r);
            }
            // Sampling, like the module without device interrupts.
            std::thread::sleep(Duration::from_micros(200));
            if crate::signals::pending() {
                return Ok(Readiness::default());
            }
        }
    }

    fn reinit(&mut self) -> io::Result<u64> {
        module_sim::reinit(&self.ring).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))
    }

    fn name(&self) -> String {
        self.path.display().to_string()
    }
}

/// `d` as poll()'s timeout, saturating.
fn poll_timeout(d: Duration) -> nix::poll::PollTimeout {
    let ms = d.as_millis().min(i32::MAX as u128) as i32;
    nix::poll::PollTimeout::try_from(ms).unwrap_or(nix::poll::PollTimeout::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(major: u16, minor: u16, nr_chunks: u32) -> hmb_trace_info {
        let mut i = hmb_trace_info::new_zeroed();
        i.abi_major = major.into();
        i.abi_minor = minor.into();
        i.nr_chunks = nr_chunks.into();
        i
    }

    /// Interface 2.x with chunks is taken, a newer minor too; 1.x (one
    /// mapping at offset 0, the ring's 1.0 in GET_INFO), a future major
    /// and an empty chunk table are refused with a message naming both.
    #[test]
    fn only_device_interface_2_is_accepted() {
        assert!(check_interface(&info(HMB_TRACE_DEV_ABI_MAJOR, 0, 5)).is_ok());
        assert!(check_interface(&info(HMB_TRACE_DEV_ABI_MAJOR, 9, 1)).is_ok());
        for bad in [info(1, 0, 0), info(3, 0, 5), info(HMB_TRACE_DEV_ABI_MAJOR, 0, 0)] {
            let e = check_interface(&bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::Unsupported);
            assert!(e.to_string().contains("device interface"), "{e}");
        }
    }
}
