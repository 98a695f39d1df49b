//! The guest scripts of harness/guest-scripts/ pass Debian's shellcheck as
//! POSIX sh (the guests run them with busybox sh or dash), and the harness
//! builds in every file of that folder. shellcheck is one of the test
//! command's host packages; this test installs it the same way when missing.

use std::path::PathBuf;
use std::process::Command;

use hmb_harness::guest_script::ALL_FILES;
use hmb_harness::host::apt::{self, Need};
use hmb_harness::workspace_root;

fn folder() -> PathBuf {
    workspace_root().join("harness/guest-scripts")
}

#[test]
fn every_file_of_the_folder_is_built_in_and_the_same() {
    let mut on_disk: Vec<String> = std::fs::read_dir(folder())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut built: Vec<String> = ALL_FILES.iter().map(|f| f.name.to_string()).collect();
    built.sort();
    assert_eq!(
        on_disk, built,
        "harness/guest-scripts/ and guest_script::ALL_FILES differ"
    );
    for f in ALL_FILES {
        assert_eq!(
            std::fs::read_to_string(folder().join(f.name)).unwrap(),
            f.text,
            "{}",
            f.name
        );
        assert!(
            f.text.starts_with("# shellcheck shell=sh\n"),
            "{}: no shell directive",
            f.name
        );
    }
}

#[test]
fn every_guest_script_is_shellcheck_clean() {
    let sh = xshell::Shell::new().unwrap();
    apt::ensure(
        &sh,
        &[Need::new(
            "shellcheck",
            "checks the guest scripts of harness/guest-scripts/",
        )],
    )
    .expect("shellcheck (Debian's package) could not be installed");
    let paths: Vec<PathBuf> = ALL_FILES.iter().map(|f| folder().join(f.name)).collect();
    let out = Command::new("shellcheck")
        .args(["--shell=sh", "--severity=style", "--format=gcc"])
        .args(&paths)
        .output()
        .expect("running shellcheck");
    assert!(
        out.status.success(),
        "shellcheck found problems:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
