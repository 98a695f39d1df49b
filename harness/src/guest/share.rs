//! The end of a guest script run through the share, the same for every
//! device: the script's result line, QEMU's exit, and the guest's files
//! moved from the share into the run folder.

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::qemu::{console, Vm};

/// Wait (`timeout`) for the script's `HMBT-RESULT rc=N` line, then (`power_off`)
/// for QEMU to exit: the guest powers off after its script. The line.
pub(crate) fn wait_result(vm: &mut Vm, timeout: Duration, power_off: Duration) -> Result<String> {
    let line = vm.wait_for("HMBT-RESULT", timeout, |l| console::parse_result(l).is_some())?;
    vm.wait_exit(power_off)?;
    Ok(line)
}

/// The script's exit code in its result line (-1 when it has none).
pub(crate) fn exit_code(result_line: &str) -> i32 {
    console::parse_result(result_line).unwrap_or(-1)
}

/// Move those of `names` the guest left in `share` into `run_dir`.
pub(crate) fn move_artifacts(share: &Path, run_dir: &Path, names: &[&str]) -> Result<()> {
    for name in names {
        let from = share.join(name);
        if from.exists() {
            std::fs::rename(&from, run_dir.join(name))?;
        }
    }
    Ok(())
}

/// Answer a checkpoint of the guest script: create `NAME.ok` in the share.
pub(crate) fn answer(share: &Path, checkpoint: &str) -> Result<()> {
    std::fs::write(share.join(format!("{checkpoint}.ok")), b"")?;
    Ok(())
}

/// The numbers of a file of one number a line (the daemon's exit codes).
pub(crate) fn read_codes(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_files_there_move_and_codes_skip_junk() {
        let dir = std::env::temp_dir().join(format!("hmbt-share-{}", std::process::id()));
        let (share, run) = (dir.join("share"), dir.join("run"));
        std::fs::create_dir_all(&share).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(share.join("a"), "0\nx\n3\n").unwrap();
        move_artifacts(&share, &run, &["a", "b"]).unwrap();
        assert!(!share.join("a").exists() && run.join("a").exists() && !run.join("b").exists());
        assert_eq!(read_codes(&run.join("a")), [0, 3]);
        answer(&share, "done").unwrap();
        assert!(share.join("done.ok").exists());
        assert_eq!(exit_code("HMBT-RESULT rc=2"), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
