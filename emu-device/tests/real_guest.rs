//! emu-device with a real guest: a Debian kernel booted in QEMU (TCG;
//! `$HMB_QEMU` and `$HMB_QEMU_FIRMWARE` as in real_qemu.rs, default 7.2)
//! loads nvme-hmb-trace.ko, which advertises the ring and rings the
//! doorbell; emu-device produces and its MSI-X interrupts show up in the
//! guest's /proc/interrupts.
//!
//! Needs the images built by `cargo xtask image` (helper "images"):
//! `$HMB_GUEST_KERNEL` and `$HMB_GUEST_INITRD`, by default the 6.1 kernel
//! and initramfs under target/hmb-trace/cache. Skipped with a message when
//! they are absent, unless `HMB_REQUIRE_GUEST=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_emu-device");

/// Kills the process when the test ends, passed or failed.
struct Reaped(std::process::Child);
impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn guest_images() -> Option<(PathBuf, PathBuf)> {
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/hmb-trace/cache");
    let kernel = std::env::var_os("HMB_GUEST_KERNEL").map(PathBuf::from).or_else(|| {
        let boot = cache.join("kernels/6.1/root/boot");
        std::fs::read_dir(boot)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
            })
    });
    let initrd = std::env::var_os("HMB_GUEST_INITRD")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("initramfs/6.1.cpio.gz"));
    match kernel {
        Some(k) if k.exists() && initrd.exists() => Some((k, initrd)),
        _ if std::env::var("HMB_REQUIRE_GUEST").is_ok_and(|v| v == "1") => panic!("guest images not found"),
        _ => {
            eprintln!("skipping: no guest kernel/initramfs (run `cargo xtask image`, or set HMB_GUEST_KERNEL/HMB_GUEST_INITRD)");
            None
        }
    }
}

fn ctl(sock: &Path, args: &[&str]) -> Option<serde_json::Value> {
    let o = Command::new(BIN)
        .arg("ctl")
        .arg("-c")
        .arg(sock)
        .args(args)
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    serde_json::from_slice(&o.stdout).ok()
}

/// Counts of the nvme-hmb-trace line in /proc/interrupts, summed over CPUs.
fn irq_count(line: &str) -> u64 {
    line.split_whitespace()
        .skip(2)
        .take_while(|w| w.chars().all(|c| c.is_ascii_digit()))
        .filter_map(|w| w.parse::<u64>().ok())
        .sum()
}

#[test]
fn the_kernel_module_handshakes_and_receives_msix_interrupts() {
    let Some((kernel, initrd)) = guest_images() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ivs, sock, console) = (
        dir.path().join("ivs.sock"),
        dir.path().join("ctl.sock"),
        dir.path().join("console.log"),
    );
    let device = Command::new(BIN)
        .args(["serve", "--workload", "ssd", "--seed", "4", "--rate", "20000"])
        .arg("--socket")
        .arg(&ivs)
        .arg("--control")
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut device = Reaped(device);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "emu-device did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let script = "set -e\ninsmod /lib/hmbt/nvme-hmb-trace.ko\nsleep 3\necho \"HMBT-IRQ1 $(grep nvme-hmb-trace /proc/interrupts)\"\nsleep 2\necho \"HMBT-IRQ2 $(grep nvme-hmb-trace /proc/interrupts)\"\n";
    let b64 = base64(script.as_bytes());
    let mut qemu = Command::new(std::env::var("HMB_QEMU").unwrap_or_else(|_| "/usr/bin/qemu-system-x86_64".into()));
    // An unpacked QEMU (bookworm-backports 10.0) needs its firmware dirs.
    for dir in std::env::var("HMB_QEMU_FIRMWARE")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
    {
        qemu.arg("-L").arg(dir);
    }
    let qemu = qemu
        .args([
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-no-reboot",
            "-machine",
            "q35",
            "-accel",
            "tcg",
        ])
        .args(["-cpu", "max", "-m", "512", "-smp", "2", "-kernel"])
        .arg(&kernel)
        .arg("-initrd")
        .arg(&initrd)
        .arg("-append")
        .arg(format!("console=ttyS0 panic=-1 loglevel=5 rdinit=/init hmbt.cmd={b64}"))
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-chardev")
        .arg(format!("socket,path={},id=ivs", ivs.display()))
        .args(["-device", "ivshmem-doorbell,chardev=ivs,vectors=2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut qemu = Reaped(qemu);

    // The module's doorbell starts production.
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(s) = ctl(&sock, &["status"]).filter(|s| s["phase"] == "producing") {
            break s;
        }
        if Instant::now() > deadline || qemu.0.try_wait().unwrap().is_some() {
            panic!(
                "no handshake; console:\n{}",
                std::fs::read_to_string(&console).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["slice"]["epoch"], 1);
    assert!(status["doorbells"].as_u64().unwrap() >= 1);

    let deadline = Instant::now() + Duration::from_secs(240);
    while qemu.0.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = qemu.0.kill();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(&console).unwrap();
    let counts: Vec<u64> = ["HMBT-IRQ1", "HMBT-IRQ2"]
        .iter()
        .map(|m| {
            log.lines()
                .find(|l| l.starts_with(m))
                .map(irq_count)
                .unwrap_or_else(|| panic!("{m} missing:\n{log}"))
        })
        .collect();
    eprintln!(
        "guest MSI-X interrupts: {} after 3 s, {} after 5 s",
        counts[0], counts[1]
    );
    assert!(counts[0] > 0 && counts[1] > counts[0], "{counts:?}\n{log}");
    assert!(log.contains("HMBT-RESULT rc=0"), "{log}");

    // QEMU powered off: emu-device exits cleanly by itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    let st = loop {
        if let Some(st) = device.0.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "emu-device did not exit after QEMU");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(st.success());
    assert!(!ivs.exists() && !sock.exists());
}

fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn base64_matches_the_standard_alphabet() {
    assert_eq!(base64(b"Man"), "TWFu");
    assert_eq!(base64(b"Ma"), "TWE=");
    assert_eq!(base64(b"M"), "TQ==");
}
