//! The report in a real browser: headless Debian Chromium (installed with
//! apt-get by this test when missing) loads the file, the timeline script
//! runs, the lane filter (given as `#lanes=TEXT`) hides exactly the lanes
//! whose name lacks the text, and the console stays silent (no errors, no
//! messages at all).

#[path = "common/synth.rs"]
mod synth;

use std::path::{Path, PathBuf};
use std::process::Command;

use hmb_firmware_model::Workload;
use synth::{write_trace, SynthSpec};

fn chromium() -> PathBuf {
    let bin = PathBuf::from("/usr/bin/chromium");
    if !bin.exists() {
        let install = || {
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends", "chromium"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .is_ok_and(|s| s.success())
        };
        if !install() {
            // A fresh machine may have no package lists yet.
            let _ = Command::new("apt-get").args(["update", "-qq"]).status();
            assert!(install(), "apt-get install chromium failed");
        }
    }
    bin
}

/// (dumped DOM, stderr) of the page after its scripts ran.
fn load(page: &Path, hash: &str) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("file://{}{hash}", page.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn shown(dom: &str) -> (usize, usize) {
    let v = dom
        .split("data-timeline=\"ready ")
        .nth(1)
        .expect("the timeline script ran");
    let v = &v[..v.find('"').unwrap()];
    let (a, b) = v.split_once('/').unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn report_renders_filters_and_logs_nothing_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    write_trace(
        std::fs::File::create(dir.path().join("t.bin")).unwrap(),
        &SynthSpec::simple(Workload::SsdCausal, 6, 3000),
    )
    .unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_hmb-trace-analyze"))
        .args(["report", "t.bin", "-o", "r.html", "--records", "3000"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(st.status.success());
    let page = dir.path().join("r.html");
    let html = std::fs::read_to_string(&page).unwrap();
    let lanes: Vec<&str> = html
        .split("data-lane=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert!(lanes.len() > 40, "queues, dies and the FTL core: {}", lanes.len());

    let (dom, log) = load(&page, "");
    assert!(!log.contains(":CONSOLE"), "console output: {log}");
    assert_eq!(shown(&dom), (lanes.len(), lanes.len()));
    assert!(
        dom.contains("id=\"timeline\"") && dom.matches("<rect").count() > 1000,
        "bars rendered"
    );

    let want = lanes.iter().filter(|l| l.contains("NAND channel 3")).count();
    assert_eq!(want, 4);
    let (dom, log) = load(&page, "#lanes=NAND%20channel%203");
    assert!(!log.contains(":CONSOLE"), "console output: {log}");
    assert_eq!(shown(&dom), (want, lanes.len()), "the filter shows only matching lanes");
}
