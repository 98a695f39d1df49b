//! ivshmem scenarios for the module's lock paths that no other scenario
//! takes (issue 32): PCI error recovery that ends without `.resume`, with a
//! sysfs reader and the daemon's page fault waiting out the pause when the
//! function is unbound.

use std::time::Duration;

use anyhow::{ensure, Result};
use hmb_harness::guest_script::files;
use serde_json::{json, Value};

use crate::env::{Device, Env, Extra, FINISH};
use crate::outcome::kernel_log;

/// The streaming scenarios' ring (ivshmem.rs).
const RING: u64 = 1 << 20;
const STARTED: Duration = Duration::from_secs(60);

/// The first console line holding `tag`, from it on ("none" without one).
fn tagged(console: &str, tag: &str) -> String {
    console
        .lines()
        .find_map(|l| l.split(tag).nth(1))
        .map(|l| l.trim().to_string())
        .unwrap_or_else(|| "none".into())
}

/// A fatal PCIe error that the recovery cannot handle: beside our function
/// (00.0 behind the root port) sits QEMU's `edu` device (00.1), which has no
/// driver, hence no error handlers. The AER core calls our
/// `error_detected` (the module pauses the core: sysfs reads and faults on
/// the ring mapping wait), resets the link, then gives up ("can't recover
/// (no error_detected callback)", "device recovery failed"): no
/// `slot_reset`, no `resume`. On 6.1 and 6.12 no further callback either
/// (the failed path only sends a uevent), so the pause would last for
/// ever; newer kernels (7.x) call `error_detected(perm_failure)`, and the
/// module marks the device dead and ends the pause. Then:
///
/// - a sysfs reader (`cat head`) started after the failure blocks while
///   the pause lasts (and reads ENODEV at once where the kernel told the
///   driver);
/// - the daemon (`--follow`) blocks in a fault on its ring mapping at its
///   next poll timeout, or sees POLLHUP;
/// - the function is unbound: `hmb_trace_unregister()` sets `gone` and
///   wakes both before `cdev_device_del()` waits for sysfs readers. The
///   reader gets ENODEV, the fault SIGBUS (the daemon dies of it: exit
///   status 128 + 7) or the poll POLLHUP (exit 10), the unbind returns
///   within 3 s and the node goes.
///
/// Without the wake-up the unbind would hang in `cdev_device_del()`
/// (kernfs drains active readers) with the reader asleep for ever.
pub fn aer_unrecovered(env: &Env) -> Result<Value> {
    let sysfs = "/sys/class/nvme-hmb-trace/nvme-hmb-trace0";
    let body = format!(
        "now_cs() {{ read -r up _ < /proc/uptime; echo \"${{up%.*}}${{up#*.}}\"; }}\n\
         load_module ring_size={RING}\n\
         start_daemon --follow\n\
         bdf=$(basename $(readlink {sysfs}/device))\n\
         wait_file injected\n\
         i=0; while ! dmesg | grep -q 'device recovery failed' && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done\n\
         echo \"HMBT-AER detected=$(dmesg | grep -c 'trace ring stopped until reset') no_handler=$(dmesg | grep -c 'no error_detected callback') failed=$(dmesg | grep -c 'device recovery failed') resumed=$(dmesg | grep -c 'recovered from a PCI error')\"\n\
         echo \"HMBT-ABANDONED $(dmesg | grep -c 'trace ring abandoned')\"\n\
         ( v=$(cat {sysfs}/head 2>&1); echo \"$v\" > /tmp/reader.out ) &\n\
         reader=$!\n\
         sleep 2\n\
         if kill -0 $reader 2>/dev/null; then blocked=yes; else blocked=no; fi\n\
         t0=$(now_cs)\n\
         echo $bdf > /sys/bus/pci/drivers/nvme-hmb-trace/unbind; unbind_rc=$?\n\
         t1=$(now_cs)\n\
         wait $reader\n\
         echo \"HMBT-READER blocked=$blocked result=$(sed 's/.*: //' /tmp/reader.out)\"\n\
         echo \"HMBT-UNBIND rc=$unbind_rc under_3s=$([ $((t1 - t0)) -lt 300 ] && echo yes || echo no) node_gone=$([ -e /dev/nvme-hmb-trace0 ] && echo no || echo yes)\"\n\
         i=0; while kill -0 $daemon 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done\n\
         stop_daemon\n\
         collect\n\
         exit 0\n"
    );
    let extra = Extra {
        qemu_args: vec![
            // A function beside ours needs function 0 to say it has company.
            "-global".into(),
            "ivshmem-doorbell.multifunction=on".into(),
            "-device".into(),
            "edu,bus=hmbrp,addr=0.1".into(),
        ],
        cmdline: Vec::new(),
    };
    let name = "aer_unrecovered";
    let mut s = env.start_with(name, RING, &body, extra)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.dev.start_workload("ssd", 53, 2000)?;
    s.run_for(1.0)?;
    // Data link protocol error: uncorrectable, fatal by default severity.
    let out = s
        .qmp()?
        .hmp("pcie_aer_inject_error hmbrp DLP", Duration::from_secs(5))?;
    ensure!(out.starts_with("OK id: hmbrp"), "pcie_aer_inject_error: {out}");
    s.signal("injected")?;
    // The guest waits up to 30 s for the recovery to give up, then 2 s
    // with the reader, then unbinds and powers off.
    let rc = s.finish(FINISH + Duration::from_secs(40))?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let recovery = tagged(&console, "HMBT-AER ");
    ensure!(
        recovery == "detected=1 no_handler=1 failed=1 resumed=0",
        "the recovery did not end as planned (paused, then given up): {recovery}"
    );
    // Whether the kernel told the driver of the failure: 6.1 and 6.12 send
    // only a uevent, newer kernels call error_detected(perm_failure) (the
    // module then marks the device dead and ends the pause itself).
    let notified = tagged(&console, "HMBT-ABANDONED ") == "1";
    let reader = tagged(&console, "HMBT-READER ");
    let blocked = if notified { "no" } else { "yes" };
    ensure!(
        reader == format!("blocked={blocked} result=No such device"),
        "sysfs reader (the kernel {} the driver of the failed recovery): {reader}",
        if notified { "told" } else { "did not tell" }
    );
    let unbind = tagged(&console, "HMBT-UNBIND ");
    ensure!(unbind == "rc=0 under_3s=yes node_gone=yes", "unbind: {unbind}");
    let codes = s.daemon_exit_codes();
    // Device gone: POLLHUP (exit 10), or SIGBUS (128 + 7) in a fault that
    // waited out the pause; which one depends on where its poll timeout fell.
    let daemon_ended_with_the_device = matches!(codes.as_slice(), [10] | [135]);
    Ok(json!({
        "guest_rc": rc,
        "recovery": recovery,
        // Blocked exactly while the pause lasted (checked above), then:
        "sysfs_reader_result": reader.split_once("result=").map(|(_, r)| r),
        "unbind": unbind,
        "daemon_ended_with_the_device": daemon_ended_with_the_device,
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}
