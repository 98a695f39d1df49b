//! What every guest run of the project shares, whichever device it has:
//! the boot with its one early-boot retry and the typed [`BootError`]
//! (`boot`, [`Guest::boot`]), the wait for a file in the share
//! (`share_wait`), the
//! end of a script run through the share (`share`), and [`Guest`], a
//! running guest with its device, its share and its run folder. A device
//! is a [`GuestDevice`]: its QEMU arguments, its in-guest prelude, its
//! process. emu-device's child is `emu::EmuProcess`; the ivshmem session is
//! `Guest<EmuDevice>` (`ivshmem_session.rs`), the NVMe one `Guest<NvmeDevice>`
//! (`nvme_session.rs`, `nvme_guest.rs`); the guests without an emu-device
//! are in `devices` (`NoDevice`, `QemuNvme`).

pub mod boot;
pub mod devices;
pub mod share;
pub mod share_wait;
pub mod tools;

pub use boot::BootError;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::guest_script::{files, Script, ScriptFile};
use crate::qemu::{accel, Vm, VmConfig};

/// The device half of a guest run: what it puts into QEMU, the shell
/// functions its guest scripts start with, and its host process (an
/// emu-device child, or none).
pub trait GuestDevice {
    /// Files of the share this device's scripts hand over, beyond the
    /// trace, the daemon's output, sysfs and the kernel log.
    const MORE_FILES: &'static [&'static str];
    /// The files of harness/guest-scripts/ every script on this device
    /// starts with (ivshmem: the module and daemon functions; NVMe:
    /// nvme-lib.sh; none).
    const PRELUDE: &'static [ScriptFile];
    /// Put the device into the guest: its arguments (from `qemu::args`) into
    /// `vm.devices`, and what it needs of the machine (memfd RAM for a
    /// vfio-user server).
    fn configure(&self, vm: &mut VmConfig);
    /// Fail if the device process has died.
    fn check_alive(&mut self) -> Result<()>;
    /// Stop the device process (a clean shutdown, then a kill).
    fn shutdown(&mut self);
    /// `script` followed by this device's prelude files.
    fn prelude(script: Script) -> Script {
        Self::PRELUDE.iter().fold(script, |s, f| s.file(f))
    }
}

/// The first line of ours a boot waits for: before it nothing of ours has
/// run, so a timeout or a fault there is TCG's early-boot flake.
#[derive(Debug, Clone, Copy)]
pub struct FirstLine<'a> {
    /// What the errors call it.
    pub what: &'a str,
    /// A console line containing this is the line.
    pub marker: &'a str,
    pub timeout: Duration,
}

/// The files every traced guest's script hands over through the share.
pub(crate) const SESSION_FILES: [&str; 5] = [
    files::TRACE,
    files::DAEMON_STDERR,
    files::DMESG,
    files::SYSFS,
    files::DAEMON_RC,
];

/// A running guest: QEMU, its device, the share the script talks through.
pub struct Guest<D> {
    pub run_dir: PathBuf,
    pub share: PathBuf,
    pub dev: D,
    pub vm: Vm,
}

impl<D: GuestDevice> Guest<D> {
    /// Boot `vm` with the device `start_device` starts for each attempt
    /// (it gets the attempt's number, 1 or 2) and wait for `first`; an
    /// early hang is retried once, from scratch (`boot`). `vm.share_dir`
    /// is the share; its accelerator is resolved here.
    pub fn boot(
        mut vm: VmConfig,
        first: FirstLine,
        mut start_device: impl FnMut(u32) -> Result<D>,
    ) -> Result<Guest<D>> {
        let share = vm.share_dir.clone().context("a guest needs a share")?;
        vm.accel = accel::resolve(vm.accel, &vm)?;
        boot::retry_early_hang(|attempt| {
            let dev = start_device(attempt)?;
            let mut cfg = vm.clone();
            dev.configure(&mut cfg);
            let mut running = Vm::start(&cfg)?;
            boot::wait_started(&mut running, first.what, first.timeout, |l| l.contains(first.marker))?;
            Ok(Guest {
                run_dir: cfg.run_dir,
                share: share.clone(),
                dev,
                vm: running,
            })
        })
    }

    pub fn share_file(&self, name: &str) -> PathBuf {
        self.share.join(name)
    }

    /// Create `name` in the share: a signal to the guest script.
    pub fn signal(&self, name: &str) -> Result<()> {
        std::fs::write(self.share_file(name), b"").with_context(|| format!("signalling {name}"))
    }

    /// Wait until the guest creates `name` in the share, watching the device
    /// process and the console (a fault, a timeout or the script ending
    /// first is a [`BootError`]).
    pub fn wait_share_file(&mut self, name: &str, timeout: Duration) -> Result<()> {
        let dev = &mut self.dev;
        share_wait::wait_share_file(&mut self.vm, &self.share, name, timeout, || dev.check_alive())
    }

    /// Let the guest run for `secs`, keeping an eye on the device.
    pub fn run_for(&mut self, secs: f64) -> Result<()> {
        let end = Instant::now() + Duration::from_secs_f64(secs);
        while Instant::now() < end {
            self.dev.check_alive()?;
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    pub fn qmp(&self) -> Result<hmb_qmp::Qmp> {
        Ok(hmb_qmp::Qmp::connect(&self.vm.qmp_socket, Duration::from_secs(5))?)
    }

    /// Wait for the script's result and QEMU's exit, stop the device, and
    /// move the guest's files from the share into the run folder. The
    /// script's exit code (a [`BootError`] when the wait fails; a non-zero
    /// code is the caller's to judge: some scenarios expect one).
    pub fn finish(&mut self, timeout: Duration) -> Result<i32> {
        let line = share::wait_result(&mut self.vm, timeout, Duration::from_secs(30)).map_err(boot::typed)?;
        self.dev.shutdown();
        share::move_artifacts(&self.share, &self.run_dir, &SESSION_FILES)?;
        share::move_artifacts(&self.share, &self.run_dir, D::MORE_FILES)?;
        Ok(share::exit_code(&line))
    }

    /// Exit codes of every daemon run of the script, in order (after `finish`).
    pub fn daemon_exit_codes(&self) -> Vec<i32> {
        share::read_codes(&self.run_dir.join(files::DAEMON_RC))
    }
}
