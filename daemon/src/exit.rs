//! Exit codes, one per failure class (documented in docs/daemon.md and
//! `--help`).

use hmb_trace_abi::AbiError;
use hmb_trace_consumer::ConsumerError;

use crate::drain::DaemonError;

pub const OK: u8 = 0;
pub const INTERNAL: u8 = 1;
pub const USAGE: u8 = 2;
pub const DEVICE: u8 = 3;
pub const BAD_MAGIC: u8 = 4;
pub const UNSUPPORTED_ABI: u8 = 5;
pub const RING_CORRUPT: u8 = 6;
pub const OUTPUT: u8 = 7;
pub const FROZEN: u8 = 8;
pub const EPOCH: u8 = 9;
pub const DEVICE_GONE: u8 = 10;
pub const OUTPUT_FULL: u8 = 11;

pub const HELP: &str = "\
Exit codes:
   0  stopped by SIGINT or SIGTERM after finishing the current batch
   1  internal error
   2  bad command line
   3  device error: open (EBUSY: already open), GET_INFO (or a device interface other than 2.x), mmap, ioctl or poll failed
   4  bad ring magic
   5  ring ABI major version not supported
   6  ring contents break the ABI (length, window, sequence, geometry): stopped before the bad record
   7  output file error (create, write, sync), or the path holds a file that is not a trace.bin
   8  ring FROZEN (controller reset): everything before the freeze is in the file with a FROZEN marker (without --follow)
   9  re-initialisation failed, or the ring epoch changed behind the daemon's back (without --follow)
  10  the device went away (removed, or REINIT found it gone: ENODEV)
  11  output full (ENOSPC, EDQUOT, EFBIG): the file ends at the last whole batch, the rest stays in the ring";

/// How the daemon closes when it finds its device gone (exit 10).
pub const DEVICE_GONE_MESSAGE: &str = "device removed";

/// The closing message of an error and its exit code, with a detail line
/// to print before it. Every way the daemon finds its device gone (ENODEV
/// after a freeze, or answering a tail publication when the unbind comes
/// while the daemon is in that ioctl) closes with the same
/// [`DEVICE_GONE_MESSAGE`]: one condition, one closing line for scripts
/// and the conformance snapshots, whichever the race; the error itself is
/// the detail.
pub fn closing(e: &DaemonError) -> (Option<String>, String, u8) {
    match for_error(e) {
        DEVICE_GONE => (Some(e.to_string()), DEVICE_GONE_MESSAGE.to_string(), DEVICE_GONE),
        code => (None, e.to_string(), code),
    }
}

pub fn for_error(e: &DaemonError) -> u8 {
    match e {
        DaemonError::Device(_) => DEVICE,
        DaemonError::Ring(ConsumerError::Abi(AbiError::BadMagic { .. })) => BAD_MAGIC,
        DaemonError::Ring(ConsumerError::Abi(AbiError::UnsupportedMajor { .. })) => UNSUPPORTED_ABI,
        DaemonError::Ring(ConsumerError::EpochChanged { .. }) => EPOCH,
        // The device unbound while the daemon published its tail (an
        // unbind during error recovery, conformance's aer_unrecovered): the
        // same condition as ENODEV after a freeze, not a device error.
        DaemonError::Ring(ConsumerError::Publish { source, .. })
            if source.raw_os_error() == Some(nix::libc::ENODEV) =>
        {
            DEVICE_GONE
        }
        DaemonError::Ring(ConsumerError::Publish { .. }) | DaemonError::Ring(ConsumerError::Map(_)) => DEVICE,
        DaemonError::Ring(_) => RING_CORRUPT,
        DaemonError::Output(e) if e.is_full() => OUTPUT_FULL,
        DaemonError::Output(_) => OUTPUT,
        DaemonError::Reinit(_) => EPOCH,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OutputError;

    fn output_error(errno: nix::errno::Errno) -> DaemonError {
        DaemonError::Output(OutputError::Io {
            path: "trace.bin".into(),
            source: std::io::Error::from_raw_os_error(errno as i32),
        })
    }

    /// A tail publication the kernel answers ENODEV (the device unbound
    /// under the daemon) is the device gone; other errors there are device
    /// errors.
    #[test]
    fn enodev_at_publish_is_the_device_gone() {
        use nix::errno::Errno;
        let publish = |errno: Errno| {
            DaemonError::Ring(ConsumerError::Publish {
                tail: 64,
                source: std::io::Error::from_raw_os_error(errno as i32),
            })
        };
        assert_eq!(for_error(&publish(Errno::ENODEV)), DEVICE_GONE);
        assert_eq!(for_error(&publish(Errno::EINVAL)), DEVICE);
        assert_eq!(for_error(&publish(Errno::EIO)), DEVICE);
        // It closes as every other way of finding the device gone does,
        // the publication's error as the detail before it.
        let (detail, message, code) = closing(&publish(Errno::ENODEV));
        assert_eq!((message.as_str(), code), (DEVICE_GONE_MESSAGE, DEVICE_GONE));
        assert!(detail.is_some_and(|d| d.contains("No such device")));
        let (detail, message, code) = closing(&publish(Errno::EIO));
        assert_eq!((detail, code), (None, DEVICE));
        assert!(message.contains("Input/output error"), "{message}");
    }

    /// A full file system, a quota and a file size limit are one condition
    /// (space can be freed, a restart resumes); other write errors are not.
    #[test]
    fn full_output_has_its_own_code() {
        use nix::errno::Errno;
        for errno in [Errno::ENOSPC, Errno::EDQUOT, Errno::EFBIG] {
            assert_eq!(for_error(&output_error(errno)), OUTPUT_FULL, "{errno}");
        }
        for errno in [Errno::EIO, Errno::EACCES, Errno::EROFS] {
            assert_eq!(for_error(&output_error(errno)), OUTPUT, "{errno}");
        }
    }
}
