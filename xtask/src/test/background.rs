//! Work of the test command that runs beside its steps, as its own
//! process (this very xtask binary), its output in a log instead of between
//! the foreground's lines.
//!
//! * The debug kernel's build (issue 32). Cold, `6.12-debug` is about 800
//!   CPU-seconds of compiling (docs/debug-checks.md); the test command's
//!   steps are one after another and many of them leave a core idle (the
//!   fuzz targets, the TCG guests of the main jobs, the tests waiting on
//!   guests), so the build runs beside them at the lowest priority (`cargo
//!   xtask debug-kernel --kernel-only` under `nice -n 19`), and the debug
//!   step joins it. Nice 19 takes the CPU only when the foreground leaves
//!   it idle: the steps before keep their time, and the join waits only for
//!   what the idle cores did not finish.
//! * The host integration's full Debian guest (`cargo xtask
//!   host-integration`, issue 34): one TCG guest, under one core, for about
//!   four minutes, beside the main jobs' boots, which are one guest at a
//!   time too; joined after them.
//!
//! Each in a process group of its own, so that a failing or interrupted
//! test command ends the whole of it (make and its compilers, QEMU and
//! emu-device) when the handle is dropped.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// Running work; `join` waits for it, dropping it ends it.
pub(crate) struct Background {
    /// What it is, for the messages: "the 6.12-debug kernel's build".
    what: String,
    child: Option<Child>,
    started: Instant,
    log: PathBuf,
    /// The prefix of the log's closing line, printed by `join`.
    summary_prefix: &'static str,
}

impl Background {
    /// Starts `cargo xtask debug-kernel --kernel-only` under `nice -n 19`,
    /// its output in `log`.
    pub(crate) fn debug_kernel_build(log: PathBuf) -> Result<Self> {
        let mut command = Command::new("nice");
        command
            .args(["-n", "19"])
            .arg(xtask_exe()?)
            .args(["debug-kernel", "--kernel-only"]);
        Self::spawn("the 6.12-debug kernel's build (nice 19)", command, log, "debug-kernel:")
    }

    /// Starts `cargo xtask host-integration --run-dir <run_dir>`, its output
    /// in `log`.
    pub(crate) fn host_integration(run_dir: &Path, log: PathBuf) -> Result<Self> {
        let mut command = Command::new(xtask_exe()?);
        command.args(host_integration_args(run_dir));
        Self::spawn("the host integration's guest", command, log, "host integration:")
    }

    /// Runs `command` in a process group of its own, its output in `log`.
    fn spawn(what: &str, mut command: Command, log: PathBuf, summary_prefix: &'static str) -> Result<Self> {
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        println!(
            "    in the background: {what} (pid {}; log {})",
            child.id(),
            log.display()
        );
        Ok(Background {
            what: what.to_string(),
            child: Some(child),
            started: Instant::now(),
            log,
            summary_prefix,
        })
    }

    /// Waits for it; fails with the end of its log if it failed.
    pub(crate) fn join(mut self) -> Result<()> {
        let mut child = self.child.take().expect("joined once");
        let waited = Instant::now();
        let status = child.wait().with_context(|| format!("waiting for {}", self.what))?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        println!(
            "    in the background, {}: {:.0} s since its start, {:.0} s of it waited for here (load {})",
            self.what,
            self.started.elapsed().as_secs_f64(),
            waited.elapsed().as_secs_f64(),
            hmb_harness::host::load_average()
        );
        if !status.success() {
            for l in log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev() {
                println!("    | {l}");
            }
            bail!("{} failed ({status}); log: {}", self.what, self.log.display());
        }
        if let Some(last) = log.lines().rfind(|l| l.starts_with(self.summary_prefix)) {
            println!("    {last}");
        }
        Ok(())
    }
}

impl Drop for Background {
    /// A test command that fails or is interrupted before the join ends the
    /// work and everything it started (its process group).
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if matches!(child.try_wait(), Ok(None)) {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let _ = child.wait();
            println!("    stopped {}", self.what);
        }
    }
}

/// The host integration's command line: its defaults (the default kernel),
/// the run folder given.
fn host_integration_args(run_dir: &Path) -> [&std::ffi::OsStr; 3] {
    ["host-integration".as_ref(), "--run-dir".as_ref(), run_dir.as_os_str()]
}

/// This very binary: the background work is one of its commands.
fn xtask_exe() -> Result<PathBuf> {
    std::env::current_exe().context("the path of the running xtask")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_integration_runs_with_its_defaults_in_the_run_folder_given() {
        let argv: Vec<&str> = host_integration_args(Path::new("/r/hi"))
            .iter()
            .map(|a| a.to_str().unwrap())
            .collect();
        let args: crate::host_integration::HostIntegration = crate::flags::parse(&argv).unwrap();
        assert_eq!(args.run_dir.run_dir.as_deref(), Some(Path::new("/r/hi")));
        assert_eq!(args.kernel.name(), None);
    }

    fn shell(script: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        c
    }

    fn log_path(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("debug-build-test-{}-{name}.log", std::process::id()))
    }

    #[test]
    fn join_passes_a_build_that_succeeds_and_fails_one_that_does_not() {
        let ok = Background::spawn(
            "ok",
            shell("echo compiling; echo 'debug-kernel: built'"),
            log_path("ok"),
            "debug-kernel:",
        )
        .unwrap();
        ok.join().unwrap();
        let bad = Background::spawn(
            "bad",
            shell("echo 'make: *** [vmlinux] Error 2'; exit 2"),
            log_path("bad"),
            "debug-kernel:",
        )
        .unwrap();
        let err = format!("{:#}", bad.join().unwrap_err());
        assert!(err.contains("failed"), "{err}");
        assert!(err.contains(&log_path("bad").display().to_string()), "{err}");
    }

    /// Dropped while running (the test command failed before the join):
    /// the whole process group goes, the grandchild (make's compilers) too.
    #[test]
    fn dropping_a_running_build_ends_its_process_group() {
        let pid_file = log_path("grandchild-pid");
        let script = format!("sleep 60 & echo $! > {}; wait", pid_file.display());
        let build = Background::spawn("drop", shell(&script), log_path("drop"), "debug-kernel:").unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let grandchild = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file)
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
            {
                break pid;
            }
            assert!(Instant::now() < deadline, "the script never started its sleep");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        drop(build);
        // The grandchild was not our child: once killed, init reaps it.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while std::path::Path::new(&format!("/proc/{grandchild}")).exists() {
            let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
            if state.contains(") Z") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the grandchild {grandchild} outlived the drop"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = std::fs::remove_file(pid_file);
    }
}
