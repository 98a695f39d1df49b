//! emu-device as a child process of a run: started with its sockets in the
//! run folder, talked to over its control socket, and always stopped.

pub mod nvme;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hmb_emu_device::control::{call, Fault, Request};
use hmb_emu_device::ivshmem::report::{GroundTruth, Stats, Status};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::guest::devices::RootPort;
use crate::qemu::args::{self, PciPlace};

/// An emu-device child (`serve` or `serve-nvme`): spawned with its log,
/// ready once its sockets exist, checked for an unexpected death, asked
/// over its control socket, and always stopped (Drop).
pub(crate) struct EmuProcess {
    child: Option<Child>,
    /// What the errors call it (`emu-device`, `emu-device serve-nvme`).
    what: &'static str,
    /// The log's name in the run folder, for the errors.
    log: String,
    pub control_socket: PathBuf,
}

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl EmuProcess {
    /// Spawn `command` with its output in `run_dir/log` and wait (10 s at
    /// most) until the control socket and `sockets` exist.
    pub(crate) fn spawn(
        what: &'static str,
        command: Command,
        run_dir: &Path,
        log: &str,
        control_socket: PathBuf,
        sockets: &[&Path],
    ) -> Result<EmuProcess> {
        let child = spawn_child(command, &run_dir.join(log))?;
        let mut process = EmuProcess {
            child: Some(child),
            what,
            log: log.to_string(),
            control_socket,
        };
        let timeout = Duration::from_secs(10);
        let deadline = Instant::now() + timeout;
        while !(process.control_socket.exists() && sockets.iter().all(|s| s.exists())) {
            process.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "{what} did not create its sockets within {}s; see {log}",
                    timeout.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(process)
    }

    /// Fail if the process has died (unless `kill` was asked for).
    pub(crate) fn check_alive(&mut self) -> Result<()> {
        if let Some(child) = self.child.as_mut() {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                bail!("{} exited unexpectedly ({status}); see {}", self.what, self.log);
            }
        }
        Ok(())
    }

    /// A control request; its `result` (Null when there is none).
    pub(crate) fn request(&mut self, req: &Request) -> Result<Value> {
        self.check_alive()?;
        let resp = call(&self.control_socket, req, CALL_TIMEOUT)
            .with_context(|| format!("emu-device control request {req:?}"))?;
        if !resp.ok {
            bail!("emu-device refused {req:?}: {}", resp.error.unwrap_or_default());
        }
        Ok(resp.result.unwrap_or(Value::Null))
    }

    /// Wait for the process to exit by itself; `None` if it is still
    /// running at the deadline.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Result<Option<std::process::ExitStatus>> {
        let deadline = Instant::now() + timeout;
        while let Some(child) = self.child.as_mut() {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(Some(status));
            }
            if Instant::now() > deadline {
                return Ok(None);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("{} was already stopped", self.what)
    }

    /// SIGKILL now, no clean shutdown. Later `check_alive` calls pass (the
    /// death was asked for).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Ask for a clean shutdown, then make sure the process is gone.
    pub(crate) fn shutdown(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = call(&self.control_socket, &Request::Shutdown, Duration::from_secs(2));
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EmuProcess {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// QMP id of the ivshmem controller (`device_del` names it).
pub(crate) const DEVICE_ID: &str = "hmb0";
/// MSI-X vectors of the ivshmem device (emu-device serves two by default).
pub(crate) const VECTORS: u16 = 2;

impl crate::guest::GuestDevice for EmuDevice {
    const MORE_FILES: &'static [&'static str] = &[];
    /// Its scripts start with `guest_script::prelude` (the module and the
    /// daemon), which the NVMe sessions share: nothing of the device's own.
    const PRELUDE: &'static [crate::guest_script::ScriptFile] = &[];

    /// `ivshmem-doorbell` on emu-device's socket, behind the first root port.
    fn configure(&self, vm: &mut crate::qemu::VmConfig) {
        let port = RootPort::FIRST;
        vm.devices.extend(port.args());
        vm.devices.extend(args::ivshmem_doorbell(
            &self.ivshmem_socket,
            DEVICE_ID,
            VECTORS,
            PciPlace::Bus(port.id),
        ));
    }

    fn check_alive(&mut self) -> Result<()> {
        self.process.check_alive()
    }

    fn shutdown(&mut self) {
        self.process.shutdown();
    }
}

/// emu-device's ivshmem device (`serve`).
pub struct EmuDevice {
    process: EmuProcess,
    pub ivshmem_socket: PathBuf,
}

impl EmuDevice {
    /// Start `binary serve` with its sockets and log in `run_dir`.
    pub(crate) fn start(binary: &Path, run_dir: &Path, hmb_size: &str) -> Result<Self> {
        let sockets = socket_dir(run_dir)?;
        let ivshmem_socket = sockets.join("ivshmem.sock");
        let control_socket = sockets.join("control.sock");
        let mut command = Command::new(binary);
        command
            .arg("serve")
            .arg("--socket")
            .arg(&ivshmem_socket)
            .arg("--control")
            .arg(&control_socket)
            .arg("--hmb-size")
            .arg(hmb_size);
        let process = EmuProcess::spawn(
            "emu-device",
            command,
            run_dir,
            "emu-device.log",
            control_socket,
            &[&ivshmem_socket],
        )?;
        Ok(EmuDevice {
            process,
            ivshmem_socket,
        })
    }

    pub fn control_socket(&self) -> &Path {
        &self.process.control_socket
    }

    /// Fail if emu-device has died.
    pub fn check_alive(&mut self) -> Result<()> {
        self.process.check_alive()
    }

    pub(crate) fn request(&mut self, req: &Request) -> Result<Value> {
        self.process.request(req)
    }

    pub fn start_workload(&mut self, workload: &str, seed: u64, rate: u64) -> Result<()> {
        self.request(&Request::Start {
            workload: workload.to_string(),
            seed,
            rate,
            burst: None,
        })
        .map(drop)
    }

    pub fn stop_workload(&mut self) -> Result<()> {
        self.request(&Request::Stop).map(drop)
    }

    pub fn inject(&mut self, fault: Fault) -> Result<Value> {
        self.request(&Request::Inject(fault))
    }

    /// A request whose answer has a type in `hmb_emu_device::ivshmem::report`.
    fn typed<T: DeserializeOwned>(&mut self, req: &Request) -> Result<T> {
        let value = self.request(req)?;
        serde_json::from_value(value).with_context(|| format!("emu-device's answer to {req:?}"))
    }

    pub fn status(&mut self) -> Result<Status> {
        self.typed(&Request::Status)
    }

    pub fn stats(&mut self) -> Result<Stats> {
        self.typed(&Request::Stats)
    }

    pub fn ground_truth(&mut self) -> Result<GroundTruth> {
        self.typed(&Request::GroundTruth)
    }

    /// The ground truth and statistics after a run, saved in `run_dir` as
    /// ground-truth.json and emu-stats.json (the truth check's inputs).
    pub fn save_truth(&mut self, run_dir: &Path) -> Result<(GroundTruth, Stats)> {
        let ground_truth = self.ground_truth()?;
        std::fs::write(
            run_dir.join("ground-truth.json"),
            serde_json::to_string_pretty(&ground_truth)?,
        )?;
        let stats = self.stats()?;
        std::fs::write(run_dir.join("emu-stats.json"), serde_json::to_string_pretty(&stats)?)?;
        Ok((ground_truth, stats))
    }

    /// Wait until the consumer has caught up with the producer (tail == head).
    pub fn wait_drained(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let header = self.stats()?.header;
            if header.as_ref().is_some_and(|h| h.drained()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let (head, tail) = header.map_or((None, None), |h| (Some(h.head), Some(h.tail)));
                bail!(
                    "the daemon did not drain the ring within {}s (head {head:?}, tail {tail:?})",
                    timeout.as_secs()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Wait for emu-device to exit by itself (it does when QEMU, its last
    /// guest, disconnects); `None` if it is still running at the deadline.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<std::process::ExitStatus>> {
        self.process.wait_exit(timeout)
    }

    /// Ask for a clean shutdown, then make sure the process is gone.
    pub(crate) fn shutdown(&mut self) {
        self.process.shutdown();
    }
}

/// Where a run's unix sockets go: the run folder itself, unless its path
/// is too long for a socket address (108 bytes with the NUL, and the
/// socket is first bound as `.<name>.<pid>.binding`, see emu-device's
/// sockpath.rs). Then a short folder under /tmp named after a hash of the
/// run folder (the same run folder gets the same one; stale sockets in it
/// are replaced), linked from the run folder as `sockets`.
pub(crate) fn socket_dir(run_dir: &Path) -> Result<PathBuf> {
    // The longest name bound there: ".vfio-user.sock.<u32 pid>.binding" and a slash.
    const LONGEST: usize = 1 + ".vfio-user.sock.4294967295.binding".len();
    const SUN_PATH: usize = 107;
    if run_dir.as_os_str().len() + LONGEST <= SUN_PATH {
        return Ok(run_dir.to_path_buf());
    }
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    run_dir.hash(&mut h);
    let dir = std::env::temp_dir().join(format!("hmbt-{:016x}", h.finish()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let link = run_dir.join("sockets");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&dir, &link).with_context(|| format!("linking {}", link.display()))?;
    Ok(dir)
}

/// Start `command` as a child of a run: stdin closed, stdout and stderr
/// into `log`, its own process group (a terminal Ctrl-C reaches only us, and
/// we stop it in order), and killed by the kernel if we die outright.
pub(crate) fn spawn_child(mut command: Command, log: &Path) -> Result<Child> {
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    command
        .stdin(std::process::Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    command
        .spawn()
        .with_context(|| format!("starting {}", command.get_program().to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_move_to_a_short_folder_only_when_the_run_path_is_too_long() {
        let short = std::env::temp_dir().join(format!("hmbt-short-{}", std::process::id()));
        std::fs::create_dir_all(&short).unwrap();
        assert_eq!(socket_dir(&short).unwrap(), short);
        let long = short.join("a".repeat(60)).join("nvme_controller_killed");
        std::fs::create_dir_all(&long).unwrap();
        let dir = socket_dir(&long).unwrap();
        assert_ne!(dir, long);
        let longest = dir.join(".vfio-user.sock.4294967295.binding");
        assert!(longest.as_os_str().len() < 108, "{}", longest.display());
        assert_eq!(std::fs::read_link(long.join("sockets")).unwrap(), dir);
        assert_eq!(
            socket_dir(&long).unwrap(),
            dir,
            "the same run folder, the same socket folder"
        );
        std::fs::remove_dir_all(&short).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
