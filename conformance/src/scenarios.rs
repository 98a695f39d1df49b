//! The scenarios. Each drives one guest session and returns its normalised
//! outcome; `tests/conformance.rs` snapshots it.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hmb_emu_device::control::{Fault, VersionPart};
use hmb_harness::guest_script::files;
use hmb_harness::qemu::console;
use hmb_harness::session::Session;
use serde_json::{json, Value};

use crate::env::{Env, FINISH};
use crate::outcome::{check_truth, daemon_error, kernel_log, truth_facts};

/// Ring of the streaming scenarios: big enough never to overflow at their rates.
const RING: u64 = 1 << 20;
/// Ring of the overflow scenario: fills in a few milliseconds.
const SMALL_RING: u64 = 64 << 10;
const STARTED: Duration = Duration::from_secs(60);

/// Every scenario, by name.
pub const ALL: &[&str] = &[
    "streaming",
    "overflow",
    "frozen_exit",
    "frozen_follow",
    "bad_magic",
    "too_new_major",
    "newer_minor",
    "unknown_flag",
    "access_rules",
    "crash_safety",
    "removal",
    "hostile_firmware",
    "format_rules",
];

pub fn run(env: &Env, name: &str) -> Result<Value> {
    match name {
        "streaming" => streaming(env),
        "overflow" => overflow(env),
        "frozen_exit" => frozen(env, false),
        "frozen_follow" => frozen(env, true),
        "bad_magic" => header_fault(env, name, Fault::CorruptMagic),
        "too_new_major" => header_fault(
            env,
            name,
            Fault::BumpVersion {
                part: VersionPart::Major,
            },
        ),
        "newer_minor" => header_fault(
            env,
            name,
            Fault::BumpVersion {
                part: VersionPart::Minor,
            },
        ),
        "unknown_flag" => unknown_flag(env),
        "access_rules" => access_rules(env),
        "crash_safety" => crash_safety(env),
        "removal" => removal(env),
        "hostile_firmware" => hostile(env),
        "format_rules" => format_rules(env),
        other => bail!("unknown scenario {other:?}; known: {}", ALL.join(", ")),
    }
}

/// Script body: stream until the host says stop.
fn stream_body(ring: u64, daemon_args: &str) -> String {
    format!("load_module ring_size={ring}\nstart_daemon {daemon_args}\nwait_stop\nstop_daemon\ncollect\nwait_file stop\nexit 0\n")
}

/// Let production run for `secs`, keeping an eye on emu-device.
fn run_for(s: &mut Session, secs: f64) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        s.emu.check_alive()?;
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Stop production, wait for the drain, take the ground truth, stop the guest.
/// Returns the ground truth, the device's final stats and the guest's exit code.
fn wind_down(s: &mut Session) -> Result<(Value, Value, i32)> {
    // A daemon that already exited cannot drain; its exit code tells why.
    let daemon_running = !s.share_file(files::DAEMON_RC).exists();
    s.emu.stop_workload()?;
    if daemon_running {
        s.emu.wait_drained(Duration::from_secs(60))?;
    }
    let truth = s.emu.ground_truth()?;
    let stats = s.emu.stats()?;
    std::fs::write(
        s.run_dir.join("ground-truth.json"),
        serde_json::to_string_pretty(&truth)?,
    )?;
    s.signal(files::STOP)?;
    let rc = s.finish(FINISH)?;
    Ok((truth, stats, rc))
}

/// Random record sizes; with HMB_TRACE_INJECT=reset, a controller reset half-way.
fn streaming(env: &Env) -> Result<Value> {
    let follow = if env.inject_reset { "--follow" } else { "" };
    let mut s = env.start("streaming", RING, &stream_body(RING, follow))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("sizes", 7, 4000)?;
    run_for(&mut s, 1.5)?;
    if env.inject_reset {
        s.emu.inject(Fault::Reset)?;
    }
    run_for(&mut s, 1.5)?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(
        truth.passed(),
        "trace.bin differs from the ground truth:\n{}",
        truth.summary()
    );
    anyhow::ensure!(truth.records > 1000, "too few records streamed: {}", truth.records);
    anyhow::ensure!(
        truth.epochs == if env.inject_reset { 2 } else { 1 },
        "epochs: {}",
        truth.epochs
    );
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// Stop the guest over QMP while the firmware produces into a small ring.
fn overflow(env: &Env) -> Result<Value> {
    let mut s = env.start("overflow", SMALL_RING, &stream_body(SMALL_RING, ""))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("ssd", 3, 20_000)?;
    run_for(&mut s, 0.5)?;
    let mut qmp = s.qmp()?;
    qmp.stop(Duration::from_secs(5))?;
    std::thread::sleep(Duration::from_millis(1500));
    let during = s.emu.stats()?;
    qmp.cont(Duration::from_secs(5))?;
    run_for(&mut s, 1.5)?;
    let after_stats = s.emu.stats()?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    let dropped = after_stats["header"]["dropped_records"].as_u64().unwrap_or(0);
    let flags_during = during["header"]["flags"].as_u64().unwrap_or(0);
    let flags_after = after_stats["header"]["flags"].as_u64().unwrap_or(0);
    anyhow::ensure!(dropped > 0, "the stopped guest caused no drops; stats {after_stats}");
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "device_dropped_records_nonzero": dropped > 0,
        "lost_in_trace_equals_device_dropped": truth.lost_counted == dropped,
        "overflowed_while_stopped": flags_during & 1 == 1,
        "overflowed_after_drain": flags_after & 1 == 1,
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// Controller reset mid-stream: the daemon drains and exits with FROZEN's
/// code, or follows into the new epoch.
fn frozen(env: &Env, follow: bool) -> Result<Value> {
    let name = if follow { "frozen_follow" } else { "frozen_exit" };
    let mut s = env.start(name, RING, &stream_body(RING, if follow { "--follow" } else { "" }))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("ssd", 5, 3000)?;
    run_for(&mut s, 1.0)?;
    s.emu.inject(Fault::Reset)?;
    if follow {
        run_for(&mut s, 1.5)?;
    } else {
        s.wait_share_file(files::DAEMON_RC, Duration::from_secs(30))
            .context("daemon did not exit on FROZEN")?;
    }
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "epochs_in_trace": truth.epochs,
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// Script body: load, wait for the host to damage the header, then start the daemon.
fn staged_body(ring: u64) -> String {
    format!(
        "load_module ring_size={ring}\nmark loaded\nwait_file go\nstart_daemon\nwait_stop\nstop_daemon\ncollect\nwait_file stop\nexit 0\n"
    )
}

/// A damaged or newer header before the daemon starts.
fn header_fault(env: &Env, name: &str, fault: Fault) -> Result<Value> {
    let mut s = env.start(name, RING, &staged_body(RING))?;
    s.wait_share_file("loaded", STARTED)?;
    s.emu.start_workload("ssd", 9, 2000)?;
    run_for(&mut s, 0.3)?;
    s.emu.inject(fault)?;
    s.signal("go")?;
    s.wait_share_file(files::STARTED, STARTED)?;
    run_for(&mut s, 1.0)?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let codes = s.daemon_exit_codes();
    let mut out = json!({
        "guest_rc": rc,
        "daemon_exit_codes": codes,
        "daemon_error": daemon_error(&s.run_dir),
        "kernel_log": kernel_log(&s.run_dir),
    });
    if codes == [0] {
        let truth = check_truth(&s.run_dir, &gt, &stats)?;
        anyhow::ensure!(truth.passed(), "{}", truth.summary());
        out["truth"] = truth_facts(&truth);
    }
    Ok(out)
}

/// A flag bit ABI v1 does not define appears mid-stream: the daemon logs it
/// once and keeps streaming, losing nothing.
fn unknown_flag(env: &Env) -> Result<Value> {
    let mut s = env.start("unknown_flag", RING, &stream_body(RING, ""))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("ssd", 29, 3000)?;
    run_for(&mut s, 0.5)?;
    s.emu.inject(Fault::UnknownFlag)?;
    run_for(&mut s, 1.0)?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    let stderr = std::fs::read_to_string(s.run_dir.join(files::DAEMON_STDERR)).unwrap_or_default();
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "unknown_flag_logged_once": stderr.matches("unknown bits 0x200").count() == 1,
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// The module's access rules, checked by the static test program in the
/// guest (kmod/tests/hmbtrace-test.c), plus a user outside the node's group.
fn access_rules(env: &Env) -> Result<Value> {
    let body = format!(
        "load_module ring_size={RING}\n\
         echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> /etc/passwd\n\
         echo 'tracer:x:1000:0:tracer:/:/bin/sh' >> /etc/passwd\n\
         echo \"outsider: $(su -s /bin/sh nobody -c 'exec 3</dev/nvme-hmb-trace0 && echo opened' 2>&1)\"\n\
         echo \"member: $(su -s /bin/sh tracer -c 'exec 3</dev/nvme-hmb-trace0 && echo opened' 2>&1)\"\n\
         /bin/hmbtrace-test --freeze --irq --remove unbind\n\
         echo \"HMBT-TEST rc=$?\"\n\
         collect\nexit 0\n"
    );
    let mut s = env.start("access_rules", RING, &body)?;
    s.emu.start_workload("ssd", 11, 2000)?;
    loop {
        let line = s.vm.wait_for("hmbtrace-test", Duration::from_secs(180), |l| {
            l.contains("REQUEST ") || l.contains("HMBT-TEST") || console::parse_result(l).is_some()
        })?;
        if line.contains("REQUEST freeze") {
            s.emu.inject(Fault::Reset)?;
        } else if line.contains("REQUEST device_del") {
            s.qmp()?.device_del("hmb0", Duration::from_secs(5))?;
        } else {
            break;
        }
    }
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let mut checks: Vec<String> = console
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ok ") || l.starts_with("FAIL ") || l.starts_with("skip "))
        .map(|l| match l.split_once(':') {
            Some((head, _)) if l.starts_with("FAIL ") => head.to_string(),
            _ => l.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
        })
        .collect();
    checks.sort();
    checks.dedup();
    let outsider = console.lines().find(|l| l.contains("outsider:")).unwrap_or_default();
    let member = console.lines().find(|l| l.contains("member:")).unwrap_or_default();
    let test_rc = console
        .lines()
        .find_map(|l| l.split("HMBT-TEST rc=").nth(1))
        .map(str::trim)
        .unwrap_or("none");
    Ok(json!({
        "guest_rc": rc,
        "hmbtrace_test_rc": test_rc,
        "outsider_open_refused": outsider.contains("Permission denied") && !outsider.contains("opened"),
        "group_member_open_allowed": member.contains("opened"),
        "checks": checks,
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// SIGKILL the daemon at random moments and restart it: trace.bin must hold
/// every record exactly once.
fn crash_safety(env: &Env) -> Result<Value> {
    let body = format!(
        "load_module ring_size={RING}\n\
         i=0\n\
         while [ $i -lt 8 ]; do\n\
             start_daemon\n\
             sleep 0.$((RANDOM % 9 + 1))\n\
             kill -9 $daemon; wait $daemon\n\
             i=$((i + 1))\n\
         done\n\
         mark kills.done\n\
         start_daemon\nwait_stop\nstop_daemon\ncollect\nexit 0\n"
    );
    let mut s = env.start("crash_safety", RING, &body)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("sizes", 13, 3000)?;
    s.wait_share_file("kills.done", Duration::from_secs(120))?;
    run_for(&mut s, 0.5)?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes_after_kills": s.daemon_exit_codes(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// rmmod with the daemon running is refused; unbinding the PCI device
/// through sysfs with the daemon running and mapped is safe, and the daemon
/// exits with its device-gone code.
///
/// QMP device_del is not used here: with ivshmem-doorbell behind a q35
/// pcie-root-port, QEMU 7.2 and 10.0 themselves segfaulted in about two
/// hot-unplugs of five on this machine (see docs/kmod.md), which would make
/// the suite fail for QEMU's sake. The removal path in the module is the same.
fn removal(env: &Env) -> Result<Value> {
    let body = format!(
        "load_module ring_size={RING}\nstart_daemon\nsleep 1\n\
         if rmmod nvme_hmb_trace 2>/dev/null; then echo 'HMBT-RMMOD accepted'; else echo 'HMBT-RMMOD refused'; fi\n\
         wait_file unbind\n\
         for dev in /sys/bus/pci/drivers/nvme-hmb-trace/0000:*; do\n\
             echo \"${{dev##*/}}\" > /sys/bus/pci/drivers/nvme-hmb-trace/unbind && echo 'HMBT-UNBIND done'\n\
         done\n\
         wait_stop\nstop_daemon\ncollect\nwait_file stop\nexit 0\n"
    );
    let mut s = env.start("removal", RING, &body)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("ssd", 17, 2000)?;
    run_for(&mut s, 1.5)?;
    s.signal("unbind")?;
    s.wait_share_file(files::DAEMON_RC, Duration::from_secs(30))
        .context("the daemon did not notice the removal")?;
    s.emu.stop_workload()?;
    s.signal(files::STOP)?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    Ok(json!({
        "guest_rc": rc,
        "rmmod_while_open": if console.contains("HMBT-RMMOD refused") { "refused" } else { "accepted" },
        "unbind_while_open_and_mapped": if console.contains("HMBT-UNBIND done") { "done" } else { "failed" },
        "daemon_exit_codes": s.daemon_exit_codes(),
        "daemon_error": daemon_error(&s.run_dir),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// Records with lying lengths: the daemon stops cleanly, the kernel log stays clean.
fn hostile(env: &Env) -> Result<Value> {
    let mut s = env.start("hostile_firmware", RING, &stream_body(RING, ""))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("ssd", 19, 2000)?;
    run_for(&mut s, 0.5)?;
    s.emu.inject(Fault::Hostile)?;
    s.wait_share_file(files::DAEMON_RC, Duration::from_secs(30))
        .context("the daemon did not stop on a hostile record")?;
    s.signal(files::STOP)?;
    let rc = s.finish(FINISH)?;
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "daemon_error": daemon_error(&s.run_dir),
        "kernel_log": kernel_log(&s.run_dir),
    }))
}

/// The analyzer on the guest's trace.bin (npu workload) and on damaged
/// copies of it and of its .pccx export: each case gets its documented exit code.
fn format_rules(env: &Env) -> Result<Value> {
    let mut s = env.start("format_rules", RING, &stream_body(RING, ""))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.emu.start_workload("npu", 23, 3000)?;
    run_for(&mut s, 1.5)?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    let dir = s.run_dir.clone();
    let trace = dir.join(files::TRACE);
    let bytes = std::fs::read(&trace)?;
    let analyzer = &env.tools.analyzer_bin;
    let code = |args: &[&std::path::Path], extra: &[&str]| -> Result<i32> {
        let status = std::process::Command::new(analyzer)
            .args(extra)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .context("running hmb-trace-analyze")?;
        Ok(status.code().unwrap_or(-1))
    };
    let variant = |name: &str, edit: &dyn Fn(&mut Vec<u8>)| -> Result<std::path::PathBuf> {
        let mut b = bytes.clone();
        edit(&mut b);
        let path = dir.join(name);
        std::fs::write(&path, b)?;
        Ok(path)
    };
    let truncated = variant("truncated.bin", &|b| b.truncate(b.len() - 10))?;
    let bad_magic = variant("bad-magic.bin", &|b| b[0] ^= 0xff)?;
    let newer_major = variant("newer-major.bin", &|b| b[8..10].copy_from_slice(&2u16.to_le_bytes()))?;
    let newer_minor = variant("newer-minor.bin", &|b| b[10..12].copy_from_slice(&9u16.to_le_bytes()))?;
    let lying = variant("lying-length.bin", &|b| {
        b[64..68].copy_from_slice(&5000u32.to_le_bytes())
    })?;
    let pccx = dir.join("trace.pccx");
    let exported = code(
        &[&trace],
        &["export", "pccx", "--output", pccx.to_str().unwrap_or_default()],
    )?;
    let pccx_bytes = std::fs::read(&pccx).unwrap_or_default();
    let pccx_variant = |name: &str, edit: &dyn Fn(&mut Vec<u8>)| -> Result<std::path::PathBuf> {
        let mut b = pccx_bytes.clone();
        edit(&mut b);
        let path = dir.join(name);
        std::fs::write(&path, b)?;
        Ok(path)
    };
    let flipped = pccx_variant("payload-flipped.pccx", &|b| {
        if let Some(last) = b.last_mut() {
            *last ^= 0xff;
        }
    })?;
    let huge_header = pccx_variant("huge-header.pccx", &|b| {
        b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes())
    })?;
    let pccx_truncated = pccx_variant("truncated.pccx", &|b| b.truncate(b.len() / 2))?;
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "truth": truth_facts(&truth),
        "trace_bin": {
            "valid": code(&[&trace], &["info"])?,
            "newer_minor": code(&[&newer_minor], &["info"])?,
            "truncated": code(&[&truncated], &["info"])?,
            "bad_magic": code(&[&bad_magic], &["info"])?,
            "newer_major": code(&[&newer_major], &["info"])?,
            "lying_length": code(&[&lying], &["info"])?,
        },
        "pccx": {
            "export": exported,
            "verify_strict": code(&[&pccx], &["pccx", "verify", "--strict"])?,
            "payload_flipped_lenient": code(&[&flipped], &["pccx", "verify"])?,
            "payload_flipped_strict": code(&[&flipped], &["pccx", "verify", "--strict"])?,
            "huge_header": code(&[&huge_header], &["pccx", "verify"])?,
            "truncated": code(&[&pccx_truncated], &["pccx", "verify"])?,
        },
        "kernel_log": kernel_log(&s.run_dir),
    }))
}
