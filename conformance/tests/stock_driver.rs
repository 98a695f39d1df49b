//! Issue 26's differential test, its stock half: the kernel's stock nvme.ko
//! against emu-device's `stock` controller personality, audited by the
//! controller (`hmb-audit`): no C0h, no host write into the HMB across
//! `reset_controller` and the recovery from a device-side fatal status, the
//! same descriptor list throughout. One more guest boot, so not in
//! `cargo xtask conformance` nor the test command; run it with
//! `HMB_TRACE_KERNEL=6.12 cargo test -p conformance --test stock_driver -- --ignored --nocapture`.

use conformance::nvme_scenarios;

#[test]
#[ignore = "boots a guest on the nvme device (see the file's comment)"]
fn stock_driver_leaves_the_stock_controllers_hmb_alone() {
    let kernel = std::env::var("HMB_TRACE_KERNEL").ok().filter(|k| !k.is_empty());
    let out = nvme_scenarios::stock_driver_audit(kernel.as_deref()).unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{}", serde_json::to_string_pretty(&out).unwrap());
    assert_eq!(out["violations"], 0, "{out}");
    assert_eq!(out["c0h_received"], false, "{out}");
    assert_eq!(out["vendor_feature_commands"], 0, "{out}");
}
