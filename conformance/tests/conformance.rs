//! One test per scenario, on the kernel named by HMB_TRACE_KERNEL and the
//! device named by HMB_TRACE_DEVICE. They boot guests, so they are ignored
//! by plain `cargo test`; `cargo xtask conformance` runs those that apply to
//! the device (hmb_harness::matrix), through cargo-nextest, one process per
//! scenario. The snapshot is the same for every kernel and, for a scenario
//! on both devices, for both: that is the conformance claim.

use std::sync::OnceLock;

use conformance::{scenarios, Env};
use hmb_harness::guest::BootError;
use hmb_harness::matrix::{self, Applies};

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::from_environment().unwrap_or_else(|e| panic!("preparing the guest: {e:#}")))
}

fn check(name: &str) {
    let env = env();
    if let Some(Applies::No(why)) = matrix::find(name).map(|s| s.on_kernel(env.device, &env.kernel)) {
        panic!(
            "scenario {name} does not apply to the {} device on {} ({why}); `cargo xtask conformance` leaves it out",
            env.device.name(),
            env.kernel
        );
    }
    let outcome = match scenarios::run(env, name) {
        // QEMU itself (not the guest) crashing is retried once: QEMU 7.2 was
        // seen to segfault once in about ten hot-unplugs of ivshmem-doorbell.
        // A guest kernel fault is never retried.
        Err(e) if BootError::is_qemu_crash(&e) => {
            eprintln!(
                "scenario {name} on {} ({}): QEMU crashed ({e:#}); retrying once",
                env.kernel,
                env.device.name()
            );
            scenarios::run(env, name)
        }
        other => other,
    }
    .unwrap_or_else(|e| panic!("scenario {name} on {} ({}): {e:#}", env.kernel, env.device.name()));
    assert_eq!(
        outcome["kernel_log"],
        "clean",
        "kernel log of {name} on {} ({}): {}",
        env.kernel,
        env.device.name(),
        outcome["kernel_log"]
    );
    // The free kernel checks were on in this guest (docs/debug-checks.md):
    // every scenario whose guest lived to save its kernel log proves it.
    let dmesg = env.run_dir(name).join(hmb_harness::guest_script::files::DMESG);
    if let Ok(text) = std::fs::read_to_string(&dmesg) {
        hmb_harness::qemu::kernel_checks::verify_active(&text, env.kernel_has_kfence())
            .unwrap_or_else(|e| panic!("scenario {name} on {} ({}): {e:#}", env.kernel, env.device.name()));
    }
    let snapshot = if env.inject_reset && name == "streaming" {
        "streaming_with_reset".to_string()
    } else {
        name.to_string()
    };
    insta::assert_json_snapshot!(snapshot, outcome);
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            #[ignore = "boots a guest: run with `cargo xtask conformance`"]
            fn $name() {
                check(stringify!($name));
            }
        )*

        #[test]
        fn every_scenario_has_a_test() {
            let tests = [$(stringify!($name)),*];
            let listed: Vec<&str> = matrix::SCENARIOS.iter().map(|s| s.name).collect();
            assert_eq!(tests.as_slice(), listed.as_slice());
        }
    };
}

scenarios!(
    streaming,
    overflow,
    frozen_exit,
    frozen_follow,
    bad_magic,
    too_new_major,
    newer_minor,
    unknown_flag,
    access_rules,
    binding,
    no_msix,
    big_ring,
    crash_safety,
    removal,
    hostile_firmware,
    format_rules,
    pci_error,
    aer_unrecovered,
    suspend,
    nvme_traced_io,
    nvme_resets,
    nvme_hmb_toggle,
    nvme_surprise_removal,
    nvme_controller_killed,
    nvme_hostile_controller,
    nvme_rmmod_in_reset,
    nvme_reinit_in_reset,
    nvme_big_ring,
);
