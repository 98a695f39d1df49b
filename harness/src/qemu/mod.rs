//! Running a guest under QEMU: console to a file scanned for markers and
//! kernel faults, a QMP unix socket, a 9p share, a deadline on every wait,
//! and the QEMU process killed on every exit path (Drop, Ctrl-C, our death).

pub mod accel;
pub mod args;
pub mod binary;
pub mod chroot_qemu;
pub mod console;
pub mod kernel_checks;
pub mod stock_reports;
pub mod version;
mod wait_error;

pub use wait_error::WaitError;

use anyhow::{Context, Result};
use args::MemoryBackend;
use binary::QemuBinary;
use console::ConsoleLog;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The 9p mount tag of the host share (images/guest/init mounts it at /mnt/host).
pub(crate) const SHARE_TAG: &str = "hmbt";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    /// Software emulation: slow but works everywhere (default; KVM guests hang on some hosts).
    Tcg,
    /// Hardware virtualisation through /dev/kvm.
    Kvm,
    /// KVM if a short probe boot under KVM succeeds on this host, else TCG.
    Auto,
}

#[derive(Clone)]
pub struct VmConfig {
    pub binary: QemuBinary,
    /// Tcg or Kvm (Auto is resolved before starting).
    pub accel: Accel,
    /// What -kernel gets: a vmlinux with a PVH entry or a bzImage.
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Gets console.log, qmp.sock and qemu.stderr.
    pub run_dir: PathBuf,
    pub memory_mb: u32,
    /// Where guest RAM comes from (a shared memfd for a vfio-user device).
    pub memory_backend: MemoryBackend,
    pub smp: u32,
    /// Host directory shared with the guest over virtio-9p (tag SHARE_TAG).
    pub share_dir: Option<PathBuf>,
    /// Shell script the guest runs (passed base64 on the kernel command line).
    pub guest_script: Option<String>,
    /// Leave a shell on the console after the job instead of powering off.
    pub keep: bool,
    pub extra_cmdline: Vec<String>,
    /// A disk image the guest boots from (`root=/dev/vda`), its writes
    /// kept out of the image (`args::virtio_disk_snapshot`).
    pub boot_disk: Option<PathBuf>,
    /// The guest's device (`guest::GuestDevice::configure`), from the
    /// builders in `args`.
    pub devices: Vec<OsString>,
    /// More QEMU arguments after the device's (a second device, say).
    pub extra_args: Vec<OsString>,
}

impl VmConfig {
    /// Guest RAM unless a caller sets `memory_mb`.
    pub(crate) const DEFAULT_MEMORY_MB: u32 = 512;

    /// Defaults for one guest job: TCG, 512 MiB, 2 CPUs, no share, no job,
    /// power off after it. Callers set what they need on the result.
    pub(crate) fn new(binary: QemuBinary, kernel: PathBuf, initramfs: PathBuf, run_dir: PathBuf) -> VmConfig {
        VmConfig {
            binary,
            accel: Accel::Tcg,
            kernel,
            initramfs,
            run_dir,
            memory_mb: Self::DEFAULT_MEMORY_MB,
            memory_backend: MemoryBackend::Anonymous,
            smp: 2,
            share_dir: None,
            guest_script: None,
            keep: false,
            extra_cmdline: Vec::new(),
            boot_disk: None,
            devices: Vec::new(),
            extra_args: Vec::new(),
        }
    }

    pub fn console_path(&self) -> PathBuf {
        self.run_dir.join("console.log")
    }

    pub(crate) fn qmp_path(&self) -> PathBuf {
        self.run_dir.join("qmp.sock")
    }

    pub(crate) fn kernel_cmdline(&self) -> String {
        // loglevel=5 keeps WARNING (level 4) and worse on the console, for the fault scan.
        // no_timer_check: the kernel's IO-APIC timer check counts timer ticks
        // in a busy loop, which a TCG guest on a loaded host can fail ("IO-APIC
        // + timer doesn't work!", a panic before init); the timer works.
        let mut parts: Vec<String> = [
            "console=ttyS0",
            "panic=-1",
            "printk.time=1",
            "loglevel=5",
            "no_timer_check",
            "rdinit=/init",
        ]
        .map(String::from)
        .to_vec();
        parts.extend(kernel_checks::cmdline());
        if self.share_dir.is_some() {
            parts.push(format!("hmbt.share={SHARE_TAG}"));
        }
        if let Some(script) = &self.guest_script {
            parts.push(format!("hmbt.cmd={}", base64(script.as_bytes())));
        }
        if self.keep {
            parts.push("hmbt.keep=1".into());
        }
        parts.extend(self.extra_cmdline.iter().cloned());
        parts.join(" ")
    }

    pub(crate) fn args(&self) -> Vec<OsString> {
        let mut a = args::base();
        a.extend(args::no_reboot());
        a.extend(args::machine(self.accel, self.memory_mb, self.memory_backend, self.smp));
        a.extend(args::firmware_dirs(&self.binary.firmware_dirs));
        a.extend(args::direct_kernel(
            &self.kernel,
            &self.initramfs,
            &self.kernel_cmdline(),
        ));
        a.extend(args::serial_console(&self.console_path(), self.keep));
        a.extend(args::qmp(&self.qmp_path()));
        if let Some(share) = &self.share_dir {
            a.extend(args::share_9p(share, SHARE_TAG));
        }
        if let Some(disk) = &self.boot_disk {
            a.extend(args::virtio_disk_snapshot(disk));
        }
        a.extend(self.devices.iter().cloned());
        a.extend(self.extra_args.iter().cloned());
        a
    }
}

/// A running guest. Dropping it kills QEMU.
pub struct Vm {
    child: Option<Child>,
    pub console: ConsoleLog,
    pub qmp_socket: PathBuf,
}

impl Vm {
    pub(crate) fn start(cfg: &VmConfig) -> Result<Vm> {
        crate::interrupt::install();
        std::fs::create_dir_all(&cfg.run_dir)?;
        for stale in [cfg.console_path(), cfg.qmp_path()] {
            let _ = std::fs::remove_file(stale);
        }
        let stderr = std::fs::File::create(cfg.run_dir.join("qemu.stderr"))?;
        let mut command = cfg.binary.command();
        command.args(cfg.args()).stderr(stderr);
        if cfg.keep {
            // Interactive: the console is our terminal (QEMU needs to stay in the
            // foreground process group to read it); Ctrl-C goes to the guest.
            command.stdin(Stdio::inherit()).stdout(Stdio::inherit());
        } else {
            // Own process group: a terminal Ctrl-C reaches only us, and we stop
            // QEMU in order.
            command.stdin(Stdio::null()).stdout(Stdio::null()).process_group(0);
        }
        // PDEATHSIG: if we are killed outright, the kernel kills QEMU.
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let env: String = match cfg.binary.env.is_empty() {
            true => String::new(),
            false => {
                "env ".to_string()
                    + &cfg
                        .binary
                        .env
                        .iter()
                        .map(|(k, v)| format!("{k}={v} "))
                        .collect::<String>()
            }
        };
        std::fs::write(
            cfg.run_dir.join("qemu.cmdline"),
            env + &shell_words(&cfg.binary.argv_prefix(), &cfg.args()),
        )?;
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", cfg.binary.path.display()))?;
        Ok(Vm {
            child: Some(child),
            console: ConsoleLog::new(&cfg.console_path()),
            qmp_socket: cfg.qmp_path(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Wait until a console line satisfies `want`; fail on a kernel fault,
    /// QEMU exiting, the deadline or an interrupt, with the console tail
    /// (a [`WaitError`], other errors are the console file's).
    pub fn wait_for(&mut self, what: &str, timeout: Duration, want: impl Fn(&str) -> bool) -> Result<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let exited = self.try_exit_status()?;
            let mut lines = self.console.poll()?.into_iter();
            while let Some(line) = lines.next() {
                if want(&line) {
                    self.console.unread(lines);
                    self.check_faults()?;
                    return Ok(line);
                }
            }
            self.check_faults()?;
            if let Some(status) = exited {
                return Err(WaitError::Exited {
                    status: status.to_string(),
                    signal: std::os::unix::process::ExitStatusExt::signal(&status),
                    what: what.to_string(),
                    tail: self.console.tail(30),
                }
                .into());
            }
            if crate::interrupt::requested() {
                return Err(WaitError::Interrupted(what.to_string()).into());
            }
            if Instant::now() >= deadline {
                return Err(WaitError::Timeout {
                    what: format!("no {what}"),
                    after: timeout,
                    console: format!(
                        "; console {}:\n{}",
                        self.console.path().display(),
                        self.console.tail(30)
                    ),
                }
                .into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait for QEMU to exit by itself (the guest powered off).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let exited = self.try_exit_status()?;
            self.console.poll()?;
            self.check_faults()?;
            if let Some(status) = exited {
                self.child = None;
                return Ok(status);
            }
            if crate::interrupt::requested() {
                return Err(WaitError::Interrupted("the guest to power off".to_string()).into());
            }
            if Instant::now() >= deadline {
                return Err(WaitError::Timeout {
                    what: "the guest did not power off".to_string(),
                    after: timeout,
                    console: String::new(),
                }
                .into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn try_exit_status(&mut self) -> Result<Option<ExitStatus>> {
        match self.child.as_mut() {
            Some(c) => Ok(c.try_wait()?),
            None => Err(WaitError::NotRunning.into()),
        }
    }

    fn check_faults(&self) -> Result<(), WaitError> {
        match self.console.faults.first() {
            Some(first) => Err(WaitError::Fault {
                line: first.clone(),
                console: self.console.path().display().to_string(),
                tail: self.console.tail(40),
            }),
            None => Ok(()),
        }
    }

    /// Kill QEMU now and reap it (idempotent).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The command line as a shell would need it, saved next to the console log for reruns by hand.
fn shell_words(program: &[OsString], args: &[OsString]) -> String {
    let quote = |s: &str| {
        if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@".contains(c)) {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    };
    let words: Vec<String> = program
        .iter()
        .chain(args)
        .map(|a| quote(&a.to_string_lossy()))
        .collect();
    let mut out = words.join(" ");
    out.push('\n');
    out
}

/// Standard base64 (the guest decodes it with busybox `base64 -d`).
pub fn base64(data: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(TABLE[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"uname -r\n"), "dW5hbWUgLXIK");
    }

    #[test]
    fn the_command_line_has_the_safety_switches() {
        let cfg = VmConfig {
            binary: QemuBinary::at("/q".into()),
            accel: Accel::Tcg,
            kernel: "/k".into(),
            initramfs: "/i".into(),
            run_dir: "/run/x".into(),
            memory_mb: 256,
            memory_backend: MemoryBackend::Anonymous,
            smp: 1,
            share_dir: Some("/s".into()),
            guest_script: Some("true".into()),
            keep: false,
            extra_cmdline: vec![],
            boot_disk: None,
            devices: vec!["-device".into(), "ivshmem-doorbell,chardev=ivsh".into()],
            extra_args: vec!["-device".into(), "virtio-rng-pci".into()],
        };
        let args: Vec<String> = cfg.args().iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let joined = args.join(" ");
        for want in [
            "-no-reboot",
            "-accel tcg",
            "unix:/run/x/qmp.sock,server=on,wait=off",
            "mount_tag=hmbt",
        ] {
            assert!(joined.contains(want), "{want} missing from {joined}");
        }
        assert!(joined.ends_with("-device ivshmem-doorbell,chardev=ivsh -device virtio-rng-pci"));
        let cmdline = cfg.kernel_cmdline();
        assert!(
            cmdline.contains("panic=-1") && cmdline.contains("hmbt.cmd=dHJ1ZQ=="),
            "{cmdline}"
        );
    }
}
