//! The debug kernel's build in the background of the test command (issue
//! 32). Cold, `6.12-debug` is about 800 CPU-seconds of compiling
//! (docs/debug-checks.md); the test command's steps are one after another
//! and many of them leave a core idle (the fuzz targets, the TCG guests
//! of the main jobs, the tests waiting on guests), so the build runs beside
//! them at the lowest priority, as its own process (`cargo xtask
//! debug-kernel --kernel-only` under `nice -n 19`), and the debug step
//! joins it. Nice 19 takes the CPU only when the foreground leaves it idle:
//! the steps before keep their time, and the join waits only for what
//! the idle cores did not finish.
//!
//! A separate process in a process group of its own, so that a failing or
//! interrupted test command ends the whole build (make and its compilers)
//! when the handle is dropped, and its output goes to a log instead of
//! between the foreground's lines.

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// The running build; `join` waits for it, dropping it ends it.
pub(crate) struct BackgroundBuild {
    child: Option<Child>,
    started: Instant,
    log: PathBuf,
}

impl BackgroundBuild {
    /// Starts `cargo xtask debug-kernel --kernel-only` (this very binary)
    /// under `nice -n 19`, its output in `log`.
    pub(crate) fn start(log: PathBuf) -> Result<Self> {
        let exe = std::env::current_exe().context("the path of the running xtask")?;
        let mut command = Command::new("nice");
        command
            .args(["-n", "19"])
            .arg(&exe)
            .args(["debug-kernel", "--kernel-only"]);
        Self::spawn(command, log)
    }

    /// Runs `command` in a process group of its own, its output in `log`.
    fn spawn(mut command: Command, log: PathBuf) -> Result<Self> {
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
            "    the 6.12-debug kernel builds in the background (pid {}, nice 19; log {})",
            child.id(),
            log.display()
        );
        Ok(BackgroundBuild {
            child: Some(child),
            started: Instant::now(),
            log,
        })
    }

    /// Waits for the build; fails with the end of its log if it failed.
    pub(crate) fn join(mut self) -> Result<()> {
        let mut child = self.child.take().expect("joined once");
        let waited = Instant::now();
        let status = child.wait().context("waiting for the debug kernel's build")?;
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        println!(
            "    background build of 6.12-debug: {:.0} s since its start, {:.0} s of it waited for here (load {})",
            self.started.elapsed().as_secs_f64(),
            waited.elapsed().as_secs_f64(),
            hmb_harness::host::load_average()
        );
        if !status.success() {
            for l in log.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev() {
                println!("    | {l}");
            }
            bail!(
                "the background build of the debug kernel failed ({status}); log: {}",
                self.log.display()
            );
        }
        if let Some(last) = log.lines().rfind(|l| l.starts_with("debug-kernel:")) {
            println!("    {last}");
        }
        Ok(())
    }
}

impl Drop for BackgroundBuild {
    /// A test command that fails or is interrupted before the join ends the
    /// build and everything it started (its process group).
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if matches!(child.try_wait(), Ok(None)) {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            let _ = child.wait();
            println!("    stopped the background build of the debug kernel");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let ok = BackgroundBuild::spawn(shell("echo compiling; echo 'debug-kernel: built'"), log_path("ok")).unwrap();
        ok.join().unwrap();
        let bad = BackgroundBuild::spawn(shell("echo 'make: *** [vmlinux] Error 2'; exit 2"), log_path("bad")).unwrap();
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
        let build = BackgroundBuild::spawn(shell(&script), log_path("drop")).unwrap();
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
