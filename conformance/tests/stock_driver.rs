//! Issue 26's differential test, its stock half: the kernel's stock nvme.ko
//! against emu-device's `stock` controller personality, audited by the
//! controller (`hmb-audit`): no C0h, no host write into the HMB across
//! `reset_controller`, the same descriptor list after it. One more guest
//! boot, so not in `cargo xtask conformance` nor the test command; run it
//! with
//! `HMB_TRACE_DEVICE=nvme HMB_TRACE_KERNEL=6.12 cargo test -p conformance --test stock_driver -- --ignored --nocapture`.

use conformance::{nvme_scenarios, Env};
use hmb_harness::matrix::Device;

#[test]
#[ignore = "boots a guest on the nvme device (see the file's comment)"]
fn stock_driver_leaves_the_stock_controllers_hmb_alone() {
    let env = Env::from_environment().unwrap_or_else(|e| panic!("preparing the guest: {e:#}"));
    assert!(
        matches!(env.device, Device::Nvme),
        "set HMB_TRACE_DEVICE=nvme: this test drives emu-device's NVMe controller"
    );
    let out = nvme_scenarios::stock_driver_audit(&env).unwrap_or_else(|e| panic!("on {}: {e:#}", env.kernel));
    eprintln!("{}", serde_json::to_string_pretty(&out).unwrap());
    assert_eq!(out["kernel_log"], "clean", "{out}");
    assert_eq!(out["guest_rc"], 0, "{out}");
    assert_eq!(out["violations"], 0, "{out}");
    assert_eq!(out["c0h_received"], false, "{out}");
}
