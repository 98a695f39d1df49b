//! Issue 26's differential test, its stock half: the kernel's stock nvme.ko
//! against emu-device's controller personalities (`stock` by default),
//! audited by the controller (`hmb-audit`): no C0h, no host write into the
//! HMB across `reset_controller` and the recovery from a device-side fatal
//! status, the same descriptor list throughout, inside the personality's
//! HMB limits. One more guest boot, so not in `cargo xtask conformance` nor
//! the test command; run it with
//! `HMB_TRACE_KERNEL=6.12 cargo test -p conformance --test stock_driver -- --ignored --nocapture`
//! (`HMB_AUDIT_PERSONALITY=small-hmb` etc. for another personality).

use conformance::scenarios::nvme;
use hmb_nvme_trace::Personality;

#[test]
#[ignore = "boots a guest on the nvme device (see the file's comment)"]
fn stock_driver_leaves_the_controllers_hmb_alone() {
    let kernel = std::env::var("HMB_TRACE_KERNEL").ok().filter(|k| !k.is_empty());
    let personality: Personality = std::env::var("HMB_AUDIT_PERSONALITY")
        .map(|p| p.parse().unwrap_or_else(|e| panic!("HMB_AUDIT_PERSONALITY: {e}")))
        .unwrap_or(Personality::Stock);
    let out =
        nvme::stock_driver_audit(kernel.as_deref(), personality).unwrap_or_else(|e| panic!("{personality}: {e:#}"));
    eprintln!("{}", serde_json::to_string_pretty(&out).unwrap());
    assert_eq!(out["violations"], 0, "{out}");
    assert_eq!(out["c0h_received"], false, "{out}");
    assert_eq!(out["vendor_feature_commands"], 0, "{out}");
}
