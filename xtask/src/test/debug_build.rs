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
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new("nice")
            .args(["-n", "19"])
            .arg(&exe)
            .args(["debug-kernel", "--kernel-only"])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {} debug-kernel --kernel-only", exe.display()))?;
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
