//! The host's side of a rendezvous through the 9p share: wait until the
//! guest script creates a file, while watching the console (the script
//! ending or failing first is an error, at once, with the console's tail)
//! and the device process (its death is an error too).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

use crate::qemu::{Vm, WaitError};

/// Console lines after which the file cannot come any more: the script
/// failed (ivshmem's `fail`, the nvme prelude's checks) or ended.
const SCRIPT_ENDS: [&str; 3] = ["HMBT-ERROR", "HMBT-RESULT", "HMBT-NVME FAIL"];
/// Console lines shown with an error.
const TAIL_LINES: usize = 30;

/// Wait until the guest creates `share/name`; `device_alive` fails when
/// the device process (emu-device, the NVMe controller) has died.
pub fn wait_share_file(
    vm: &mut Vm,
    share: &Path,
    name: &str,
    timeout: Duration,
    mut device_alive: impl FnMut() -> Result<()>,
) -> Result<()> {
    let path = share.join(name);
    let deadline = Instant::now() + timeout;
    while !path.exists() {
        device_alive()?;
        match vm.wait_for(name, Duration::from_millis(200), |l| {
            SCRIPT_ENDS.iter().any(|m| l.contains(m))
        }) {
            // The file may have appeared just before the script ended.
            Ok(_) if path.exists() => break,
            Ok(line) => bail!(
                "the guest script stopped before {name}: {line}\n{}",
                vm.console.tail(TAIL_LINES)
            ),
            Err(e) if WaitError::is_timeout(&e) => {}
            Err(e) => return Err(e),
        }
        if Instant::now() > deadline {
            bail!(
                "timeout: the guest made no {name} within {}s; console:\n{}",
                timeout.as_secs(),
                vm.console.tail(TAIL_LINES)
            );
        }
    }
    Ok(())
}
