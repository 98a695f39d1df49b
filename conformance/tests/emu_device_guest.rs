//! emu-device with a real guest (was emu-device/tests/real_guest.rs, which
//! spelled the QEMU launch itself): the guest loads nvme-hmb-trace.ko, whose
//! advert and doorbell start production (epoch 1, a doorbell counted), the
//! guest's /proc/interrupts line for the module grows, and when the guest
//! powers off emu-device exits 0 by itself and leaves no socket. On the
//! kernel named by HMB_TRACE_KERNEL, through `cargo xtask conformance`.

use std::time::Duration;

use conformance::env::FINISH;
use conformance::Env;
use hmb_emu_device::ivshmem::report::Phase;

/// The module's default ring: at 20 000 records/s nobody drains it, and it
/// must not fill within the 5 s of the test (a full ring raises no data
/// interrupts).
const RING: u64 = 16 << 20;

/// Counts of the nvme-hmb-trace line in /proc/interrupts, summed over CPUs.
fn irq_count(line: &str) -> u64 {
    line.split_whitespace()
        .skip(2)
        .take_while(|w| w.chars().all(|c| c.is_ascii_digit()))
        .filter_map(|w| w.parse::<u64>().ok())
        .sum()
}

#[test]
fn irq_counts_sum_the_cpu_columns() {
    assert_eq!(
        irq_count("HMBT-IRQ1  24:  10  5  PCI-MSIX-0000:01:00.0 0-edge nvme-hmb-trace0"),
        15
    );
    assert_eq!(irq_count("HMBT-IRQ1"), 0);
}

#[test]
#[ignore = "boots a guest: run with `cargo xtask conformance`"]
fn the_module_handshakes_and_receives_msix_interrupts() {
    let env = Env::from_environment().unwrap_or_else(|e| panic!("preparing the guest: {e:#}"));
    let body = format!(
        "load_module ring_size={RING}\n\
         sleep 3\necho \"HMBT-IRQ1 $(grep nvme-hmb-trace /proc/interrupts)\"\n\
         sleep 2\necho \"HMBT-IRQ2 $(grep nvme-hmb-trace /proc/interrupts)\"\n\
         exit 0\n"
    );
    let mut s = env
        .start("emu_device_guest", RING, &body)
        .expect("starting the session");
    s.dev.start_workload("ssd", 4, 20_000).unwrap();
    let first =
        s.vm.wait_for("HMBT-IRQ1", Duration::from_secs(120), |l| l.starts_with("HMBT-IRQ1"))
            .unwrap();
    let status = s.dev.status().unwrap();
    assert_eq!(status.phase, Phase::Producing, "{status:?}");
    assert_eq!(status.slice.map(|sl| sl.epoch), Some(1), "{status:?}");
    assert!(status.doorbells >= 1, "{status:?}");
    let second =
        s.vm.wait_for("HMBT-IRQ2", Duration::from_secs(60), |l| l.starts_with("HMBT-IRQ2"))
            .unwrap();
    let counts = [irq_count(&first), irq_count(&second)];
    eprintln!(
        "guest MSI-X interrupts on {}: {} after 3 s, {} after 5 s",
        env.kernel, counts[0], counts[1]
    );
    assert!(counts[0] > 0 && counts[1] > counts[0], "{counts:?}: {first} / {second}");
    let rc =
        s.vm.wait_for("HMBT-RESULT", FINISH, |l| {
            hmb_harness::qemu::console::parse_result(l).is_some()
        })
        .unwrap();
    assert!(rc.contains("HMBT-RESULT rc=0"), "{rc}");
    s.vm.wait_exit(Duration::from_secs(30)).unwrap();
    // QEMU powered off: emu-device exits cleanly by itself.
    let exit = s.dev.wait_exit(Duration::from_secs(10)).unwrap();
    assert!(exit.is_some_and(|st| st.success()), "emu-device after QEMU: {exit:?}");
    assert!(!s.dev.ivshmem_socket.exists() && !s.dev.control_socket().exists());
    let log = conformance::outcome::kernel_log(&s.run_dir, conformance::env::Device::Ivshmem, &[]);
    assert_eq!(log, "clean", "kernel log: {log}");
}
