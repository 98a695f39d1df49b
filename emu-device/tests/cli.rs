//! The `emu-device` binary: help, bad input, the ctl client, and clean
//! shutdown on SIGTERM, on QEMU disconnecting and after SIGKILL.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use hmb_emu_device::ivshmem::IvshmemClient;

const BIN: &str = env!("CARGO_BIN_EXE_emu-device");
const T: Duration = Duration::from_secs(10);

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The device process, killed when the test ends however it ends.
struct Device(Child);
impl Drop for Device {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
impl std::ops::Deref for Device {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}
impl std::ops::DerefMut for Device {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

fn serve(dir: &Path, extra: &[&str]) -> Device {
    let child = Command::new(BIN)
        .arg("serve")
        .arg("--socket")
        .arg(dir.join("ivs.sock"))
        .arg("--control")
        .arg(dir.join("ctl.sock"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Device(child);
    let deadline = Instant::now() + T;
    // Connectable, not just present: a stale file may be there after SIGKILL.
    while std::os::unix::net::UnixStream::connect(dir.join("ctl.sock")).is_err() {
        assert!(
            child.try_wait().unwrap().is_none() && Instant::now() < deadline,
            "emu-device did not come up"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + T;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        assert!(Instant::now() < deadline, "emu-device did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn help_documents_every_subcommand() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    for word in ["serve", "ctl", "peer"] {
        assert!(text(&o).contains(word), "{word}");
    }
    let o = run(&["serve", "--help"]);
    for opt in [
        "--socket",
        "--control",
        "--hmb-size",
        "--vectors",
        "--watermark",
        "--notify-timeout-us",
        "--stay-after-disconnect",
    ] {
        assert!(text(&o).contains(opt), "{opt}");
    }
    let o = run(&["ctl", "inject", "--help"]);
    for f in ["reset", "corrupt-magic", "bump-version", "hostile", "stall"] {
        assert!(text(&o).contains(f), "{f}");
    }
    let o = run(&["serve-nvme", "--help"]);
    assert!(text(&o).contains("--timing"));
    let o = run(&["export-namespace", "--help"]);
    assert!(o.status.success());
    for opt in ["--backing", "--namespace-size", "--output"] {
        assert!(text(&o).contains(opt), "{opt}");
    }
}

#[test]
fn bad_input_is_a_clear_error_and_a_nonzero_exit() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let (a, b) = (format!("{d}/a"), format!("{d}/b"));
    let blank = format!("{d}/blank.img");
    std::fs::write(&blank, vec![0u8; 4096]).unwrap();
    let out = format!("{d}/out.img");
    let cases: [(&[&str], &str); 10] = [
        (
            &["serve", "--socket", &a, "--control", &b, "--hmb-size", "3M"],
            "power of two",
        ),
        (
            &["serve", "--socket", &a, "--control", &b, "--hmb-size", "lots"],
            "not a size",
        ),
        (
            &["serve", "--socket", &a, "--control", &b, "--workload", "tape"],
            "unknown workload",
        ),
        (&["serve", "--socket", &a, "--control", &b, "--vectors", "0"], "vectors"),
        (&["ctl", "-c", &format!("{d}/nothing.sock"), "status"], "cannot connect"),
        (
            &["serve-nvme", "--socket", &a, "--control", &b, "--personality", "fast"],
            "unknown personality \"fast\"; one of: stock, tracing, refusing-probe",
        ),
        // The controller's telemetry history must hold a record and fit data areas 1-3.
        (
            &[
                "serve-nvme",
                "--socket",
                &a,
                "--control",
                &b,
                "--telemetry-history",
                "1K",
            ],
            "a telemetry history of 1024 bytes",
        ),
        (
            &[
                "serve-nvme",
                "--socket",
                &a,
                "--control",
                &b,
                "--telemetry-history",
                "64M",
            ],
            "fit data areas 1-3 (33553856 bytes at most)",
        ),
        (
            &["serve-nvme", "--socket", &a, "--control", &b, "--timing", "fast"],
            "neither \"none\" nor \"model\"",
        ),
        (
            &["export-namespace", "--backing", &blank, "--output", &out],
            "holds no FTL",
        ),
    ];
    for (args, want) in cases {
        let o = run(args);
        assert!(!o.status.success(), "{args:?}");
        assert!(text(&o).contains(want), "{args:?}: {}", text(&o));
        assert!(!text(&o).contains("panicked"), "{args:?}");
    }
    assert!(
        !Path::new(&format!("{d}/a")).exists(),
        "nothing left after a failed start"
    );
}

#[test]
fn sigterm_shuts_down_cleanly_and_removes_the_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve(dir.path(), &[]);
    let guest = IvshmemClient::connect(&dir.path().join("ivs.sock"), 2, T).unwrap();
    let ctl = dir.path().join("ctl.sock");
    let o = run(&["ctl", "-c", ctl.to_str().unwrap(), "status"]);
    assert!(o.status.success(), "{}", text(&o));
    let status: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(status["guests"], serde_json::json!([1]));
    // The error path of ctl: a request the device refuses.
    let o = run(&["ctl", "-c", ctl.to_str().unwrap(), "inject", "corrupt-magic"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("no ring advertised"), "{}", text(&o));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_exit(&mut child).success());
    assert!(guest.server_closed(T).unwrap(), "QEMU's connection is closed");
    assert!(!dir.path().join("ivs.sock").exists() && !ctl.exists());
}

#[test]
fn qemu_disconnecting_ends_the_device_and_stay_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = serve(dir.path(), &[]);
    drop(IvshmemClient::connect(&dir.path().join("ivs.sock"), 2, T).unwrap());
    assert!(wait_exit(&mut child).success());
    assert!(!dir.path().join("ivs.sock").exists());

    let mut child = serve(dir.path(), &["--stay-after-disconnect"]);
    // The debug peer is a client too: it prints its setup and leaves.
    let o = run(&[
        "peer",
        "--socket",
        dir.path().join("ivs.sock").to_str().unwrap(),
        "info",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        text(&o).trim(),
        "id 1 shm 33554432 bytes own vectors 2 peers [0(2 vectors)]"
    );
    // A second QEMU can come after the first left.
    let again = IvshmemClient::connect(&dir.path().join("ivs.sock"), 2, T).unwrap();
    assert_eq!(again.id, 1);
    let o = run(&["ctl", "-c", dir.path().join("ctl.sock").to_str().unwrap(), "shutdown"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(wait_exit(&mut child).success());
}

#[test]
fn after_sigkill_no_shm_file_exists_and_a_restart_reuses_the_paths() {
    let dir = tempfile::tempdir().unwrap();
    let shm_before: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    let mut child = serve(dir.path(), &[]);
    let guest = IvshmemClient::connect(&dir.path().join("ivs.sock"), 2, T).unwrap();
    let shm_during: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    let ours: Vec<_> = shm_during
        .iter()
        .filter(|n| !shm_before.contains(n) && n.to_string_lossy().contains("emu"))
        .collect();
    assert!(ours.is_empty(), "the HMB is a memfd, not a /dev/shm file: {ours:?}");
    child.kill().unwrap();
    child.wait().unwrap();
    drop(guest);
    // Stale socket files remain after SIGKILL; the next start replaces them.
    assert!(dir.path().join("ivs.sock").exists());
    let mut child = serve(dir.path(), &[]);
    let g = IvshmemClient::connect(&dir.path().join("ivs.sock"), 2, T).unwrap();
    assert_eq!(g.id, 1);
    drop(g);
    assert!(wait_exit(&mut child).success());
}
