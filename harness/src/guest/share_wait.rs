//! The host's side of a rendezvous through the 9p share: wait until the
//! guest script creates a file, while watching the console (the script
//! ending or failing first is an error, at once, with the console's tail)
//! and the device process (its death is an error too).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;

use super::boot::BootError;
use crate::qemu::{console, Vm, WaitError};

/// Console lines after which the file cannot come any more: the script
/// failed (ivshmem's `fail`, the nvme prelude's checks) or ended.
const SCRIPT_ENDS: [&str; 3] = ["HMBT-ERROR", "HMBT-RESULT", "HMBT-NVME FAIL"];
/// Console lines shown with an error.
const TAIL_LINES: usize = 30;

/// Wait until the guest creates `share/name`; `device_alive` fails when
/// the device process (emu-device, the NVMe controller) has died.
pub(crate) fn wait_share_file(
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
        // Short slices: the file is looked for between them (a checkpoint
        // answered 200 ms late cost the boot a tenth of a second or more each).
        match vm.wait_for(name, Duration::from_millis(50), |l| {
            SCRIPT_ENDS.iter().any(|m| l.contains(m))
        }) {
            // The file may have appeared just before the script ended.
            Ok(_) if path.exists() => break,
            Ok(line) => {
                return Err(BootError::ScriptFailed {
                    script: format!("the guest script (stopped before {name})"),
                    code: console::parse_result(&line).unwrap_or(-1),
                    detail: format!("{line}\n{}", vm.console.tail(TAIL_LINES)),
                }
                .into())
            }
            Err(e) if WaitError::is_timeout(&e) => {}
            Err(e) => return Err(super::boot::typed(e)),
        }
        if Instant::now() > deadline {
            return Err(BootError::Wait(WaitError::Timeout {
                what: format!("the guest made no {name}"),
                after: timeout,
                console: format!("; console:\n{}", vm.console.tail(TAIL_LINES)),
            })
            .into());
        }
    }
    Ok(())
}
