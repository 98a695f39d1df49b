//! One guest session: emu-device and QEMU with the ivshmem-doorbell device
//! and a 9p share, a guest script, and the host-side handles to drive them.
//! Dropping a session stops QEMU and emu-device.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use xshell::Shell;

use crate::emu::EmuDevice;
use crate::guest::tools::{self, GuestTools};
use crate::guest::{share, FirstLine, Guest};
use crate::guest_script::files;
use crate::host::target_dir;
use crate::phases::Phases;
use crate::qemu::binary::QemuVersion;
use crate::qemu::Accel;

/// Everything built once and shared by the sessions of a run: the guest's
/// image, QEMU and emu-device (`guest::tools`), and the analyzer.
pub struct Tools {
    pub guest: GuestTools,
    pub analyzer_bin: PathBuf,
}

impl std::ops::Deref for Tools {
    type Target = GuestTools;

    fn deref(&self) -> &GuestTools {
        &self.guest
    }
}

impl Tools {
    /// Guest path of nvme-hmb-trace.ko.
    pub fn module(&self) -> Result<&str> {
        self.image
            .our_modules
            .first()
            .map(String::as_str)
            .context("the image has no nvme-hmb-trace module")
    }
}

/// Prepare the image (kernel, module, static daemon, initramfs), QEMU and
/// the host tools. Everything is cached.
pub fn prepare(sh: &Shell, kernel: Option<&str>, qemu: QemuVersion, phases: &mut Phases) -> Result<Tools> {
    let guest = tools::prepare(sh, kernel, qemu, &["hmb-trace-analyze"], phases)?;
    Ok(Tools {
        guest,
        analyzer_bin: target_dir().join("release/hmb-trace-analyze"),
    })
}

pub struct SessionConfig {
    pub run_dir: PathBuf,
    /// `Auto` is resolved (KVM probe) when the session starts.
    pub accel: Accel,
    pub keep: bool,
    /// HMB size for emu-device (a power of two).
    pub hmb_size: u64,
    /// The guest script (see `guest_script`).
    pub guest_script: String,
    /// More QEMU arguments after the controller's (e.g. a second device).
    pub extra_qemu_args: Vec<String>,
    /// More guest kernel command line words (e.g. `pci=nomsi`).
    pub extra_cmdline: Vec<String>,
}

/// A guest on the ivshmem device.
pub type Session = Guest<EmuDevice>;

impl Guest<EmuDevice> {
    /// Start emu-device and the guest, and wait until the guest runs its
    /// script. An early-boot hang is retried once, from scratch: a fresh
    /// share and emu-device (`Guest::boot`).
    pub fn start(tools: &Tools, cfg: &SessionConfig, phases: &mut Phases) -> Result<Session> {
        let share = cfg.run_dir.join("share");
        let mut vm_cfg = tools.vm_config(&cfg.run_dir, &share, cfg.accel);
        vm_cfg.keep = cfg.keep;
        vm_cfg.extra_args.extend(cfg.extra_qemu_args.iter().map(Into::into));
        vm_cfg.extra_cmdline.extend(cfg.extra_cmdline.iter().cloned());
        // Before HMBT-INIT nothing of ours has run (the module loads later,
        // from the script).
        let first = FirstLine {
            what: "HMBT-INIT",
            marker: "HMBT-INIT",
            timeout: Duration::from_secs(90),
        };
        phases.run("guest boot", || {
            let mut session = Guest::boot(vm_cfg, first, |_| {
                let _ = std::fs::remove_dir_all(&share);
                std::fs::create_dir_all(&share).with_context(|| format!("creating {}", share.display()))?;
                std::fs::write(share.join(files::SCRIPT), &cfg.guest_script)?;
                EmuDevice::start(&tools.emu_bin, &cfg.run_dir, &cfg.hmb_size.to_string())
            })?;
            session
                .vm
                .wait_for("HMBT-READY", Duration::from_secs(90), |l| l.contains("HMBT-READY"))
                .map_err(crate::guest::boot::typed)?;
            Ok(session)
        })
    }

    /// Fail if the guest's daemon has already exited (the script records
    /// its exit code when it does), with the daemon's own last words:
    /// waiting on for a drain that cannot come would only end in a
    /// timeout or in "emu-device exited" once the script powers off.
    pub fn check_daemon_running(&self) -> Result<()> {
        let codes = share::read_codes(&self.share_file(files::DAEMON_RC));
        if let Some(code) = codes.last() {
            let stderr = std::fs::read_to_string(self.share_file(files::DAEMON_STDERR)).unwrap_or_default();
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("(no output)");
            bail!("hmb-trace-daemon exited early with code {code}: {last}");
        }
        Ok(())
    }

    /// Wait until the daemon has drained the ring, failing at once if it
    /// has exited.
    pub fn wait_drained(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            self.check_daemon_running()?;
            match self.dev.wait_drained(Duration::ZERO) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}
