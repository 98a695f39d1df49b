//! The scenarios. Each drives one guest session and returns its normalised
//! outcome; `tests/conformance.rs` snapshots it.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use hmb_emu_device::control::Fault;
use hmb_emu_device::ivshmem::report::{GroundTruth, HeaderView, Stats};
use hmb_harness::guest_script::files;
use hmb_harness::ivshmem_session::Session;
use hmb_harness::qemu::console;
use serde_json::{json, Value};

use super::shared::{self, Verdict};
use crate::env::{Device, Env, Extra, FINISH};
use crate::outcome::{check_truth, daemon_error, kernel_log, truth_facts};
use hmb_harness::emu::EmuDevice;

/// Ring of the streaming scenarios: big enough never to overflow at their rates.
const RING: u64 = 1 << 20;
/// Ring of the overflow scenario: fills in a few milliseconds.
const SMALL_RING: u64 = 64 << 10;
/// Ring of the big_ring scenario: large enough that zeroing it under the
/// device lock would show (hundreds of milliseconds under TCG).
const BIG_RING: u64 = 512 << 20;
/// How long the device goes on writing after a withdrawal in access_rules
/// (`late-stop`): less than the module's 5 s acknowledgement bound.
const LATE_STOP_MS: u64 = 2000;
const STARTED: Duration = Duration::from_secs(60);

/// The ivshmem device's side of the shared scenarios.
impl shared::Side for EmuDevice {
    const DEVICE: Device = Device::Ivshmem;
    const STARTED: Duration = STARTED;
    /// `load_module ring_size={RING}` (checked by a test).
    const UP: &'static str = "load_module ring_size=1048576\n";
    const DOWN: &'static str = "stop_daemon\ncollect\nwait_file stop\nexit 0\n";
    type Truth = (GroundTruth, Stats);

    fn start(env: &Env, name: &str, body: &str) -> Result<Session> {
        env.start(name, RING, body)
    }

    fn produce(g: &mut Session, workload: &str, seed: u64, rate: u64) -> Result<()> {
        g.dev.start_workload(workload, seed, rate)
    }

    fn inject(g: &mut Session, fault: Fault) -> Result<()> {
        g.dev.inject(fault).map(drop)
    }

    fn wind_down(g: &mut Session) -> Result<(Self::Truth, i32)> {
        let (gt, stats, rc) = wind_down(g)?;
        Ok(((gt, stats), rc))
    }

    fn finish_unchecked(g: &mut Session) -> Result<i32> {
        g.signal(files::STOP)?;
        g.finish(FINISH)
    }

    fn check(g: &Session, (gt, stats): &Self::Truth) -> Result<Verdict> {
        let truth = check_truth(&g.run_dir, gt, stats)?;
        Ok(Verdict {
            passed: truth.passed(),
            summary: truth.summary(),
            facts: truth_facts(&truth),
        })
    }

    fn after(_: &Session) -> Result<()> {
        Ok(())
    }
}

/// Run one scenario on the ivshmem device.
pub fn run(env: &Env, name: &str) -> Result<Value> {
    match name {
        "streaming" => streaming(env),
        "overflow" => overflow(env),
        "frozen_exit" => frozen(env, false),
        "frozen_follow" => frozen(env, true),
        "access_rules" => access_rules(env),
        "binding" => binding(env),
        "no_msix" => no_msix(env),
        "big_ring" => big_ring(env),
        "removal" => removal(env),
        "format_rules" => format_rules(env),
        "pci_error" => pci_error(env),
        "aer_unrecovered" => super::ivshmem_lock_paths::aer_unrecovered(env),
        "suspend" => suspend(env),
        other => bail!(
            "scenario {other:?} has no ivshmem version; known: {}",
            hmb_harness::matrix::on(Device::Ivshmem, &env.kernel).join(", ")
        ),
    }
}

/// Script body: stream until the host says stop.
fn stream_body(ring: u64, daemon_args: &str) -> String {
    format!("load_module ring_size={ring}\nstart_daemon {daemon_args}\nwait_stop\nstop_daemon\ncollect\nwait_file stop\nexit 0\n")
}

/// The ring header of a `stats` answer: there is one once the guest advertised.
fn header_of(stats: &Stats) -> Result<HeaderView> {
    stats
        .header
        .clone()
        .context("emu-device reports no ring header (no slice adopted)")
}

/// Wait until the daemon has drained the ring, or has exited: a daemon that
/// exited cannot drain, and its exit code tells why. Its exit code file is
/// looked at on every round, not once before the wait: a daemon that refuses
/// the ring (bad_magic) may write it only after wind-down began (seen on
/// 6.12-debug under load, where the scenario then waited 60 s for a drain).
fn wait_drained_or_daemon_gone(s: &mut Session, timeout: Duration) -> Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if s.share_file(files::DAEMON_RC).exists() || s.dev.wait_drained(Duration::ZERO).is_ok() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return s
                .dev
                .wait_drained(Duration::ZERO)
                .context("the daemon neither drained the ring nor exited");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stop production, wait for the drain, take the ground truth, stop the guest.
/// Returns the ground truth, the device's final stats and the guest's exit code.
fn wind_down(s: &mut Session) -> Result<(GroundTruth, Stats, i32)> {
    s.dev.stop_workload()?;
    wait_drained_or_daemon_gone(s, Duration::from_secs(60))?;
    let truth = s.dev.ground_truth()?;
    let stats = s.dev.stats()?;
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
    s.dev.start_workload("sizes", 7, 4000)?;
    s.run_for(1.5)?;
    if env.inject_reset {
        s.dev.inject(Fault::Reset)?;
    }
    s.run_for(1.5)?;
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
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// Stop the guest over QMP while the firmware produces into a small ring.
fn overflow(env: &Env) -> Result<Value> {
    let mut s = env.start("overflow", SMALL_RING, &stream_body(SMALL_RING, ""))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.dev.start_workload("ssd", 3, 20_000)?;
    s.run_for(0.5)?;
    let mut qmp = s.qmp()?;
    qmp.stop(Duration::from_secs(5))?;
    std::thread::sleep(Duration::from_millis(1500));
    let during = s.dev.stats()?;
    qmp.cont(Duration::from_secs(5))?;
    s.run_for(1.5)?;
    let after_stats = s.dev.stats()?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    let (during, after) = (header_of(&during)?, header_of(&after_stats)?);
    let dropped = after.dropped_records;
    anyhow::ensure!(dropped > 0, "the stopped guest caused no drops; header {after:?}");
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "device_dropped_records_nonzero": dropped > 0,
        "lost_in_trace_equals_device_dropped": truth.lost_counted == dropped,
        "overflowed_while_stopped": during.overflowed(),
        "overflowed_after_drain": after.overflowed(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// Controller reset mid-stream: the daemon drains and exits with FROZEN's
/// code, or follows into the new epoch.
fn frozen(env: &Env, follow: bool) -> Result<Value> {
    let name = if follow { "frozen_follow" } else { "frozen_exit" };
    let mut s = env.start(name, RING, &stream_body(RING, if follow { "--follow" } else { "" }))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.dev.start_workload("ssd", 5, 3000)?;
    s.run_for(1.0)?;
    s.dev.inject(Fault::Reset)?;
    if follow {
        s.run_for(1.5)?;
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
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// Run the guest test program to its end, doing what it asks of the host
/// (`REQUEST ...` lines): freeze the ring, rewind the header, make the
/// device stop late, hot-unplug it.
fn serve_test_program(s: &mut Session, timeout: Duration) -> Result<()> {
    loop {
        let line = s.vm.wait_for("hmbtrace-test", timeout, |l| {
            l.contains("REQUEST ") || l.contains("HMBT-TEST") || console::parse_result(l).is_some()
        })?;
        if line.contains("REQUEST freeze") {
            s.dev.inject(Fault::Reset)?;
        } else if line.contains("REQUEST rewind_header") {
            s.dev.inject(Fault::RewindHeader)?;
        } else if line.contains("REQUEST late_stop") {
            s.dev.inject(Fault::LateStop { ms: LATE_STOP_MS })?;
        } else if line.contains("REQUEST device_del") {
            s.qmp()?.device_del("hmb0", Duration::from_secs(5))?;
        } else {
            return Ok(());
        }
    }
}

/// Starts the device's workload once the guest has turned the module's
/// tracepoints on (`module_events_on` in the guest prelude): the test
/// program finds them on and leaves its static keys alone while the device
/// interrupts.
fn start_after_module_events(s: &mut Session, workload: &str, seed: u64, rate: u64) -> Result<()> {
    s.vm.wait_for("the module's tracepoints on", Duration::from_secs(120), |l| {
        l.contains("HMBT-EVENTS-ON")
    })?;
    s.dev.start_workload(workload, seed, rate)
}

/// The test program's check lines (`ok NAME`, `FAIL NAME`, `skip NAME`),
/// sorted, and its exit code from the `HMBT-TEST rc=` line.
fn test_program_result(console: &str) -> (Vec<String>, String) {
    let mut checks: Vec<String> = console
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ok ") || l.starts_with("FAIL ") || l.starts_with("skip "))
        .map(|l| match l.split_once(':') {
            Some((head, _)) if !l.starts_with("ok ") => head.to_string(),
            _ => l.split_whitespace().take(2).collect::<Vec<_>>().join(" "),
        })
        .collect();
    checks.sort();
    checks.dedup();
    let rc = console
        .lines()
        .find_map(|l| l.split("HMBT-TEST rc=").nth(1))
        .map(str::trim)
        .unwrap_or("none")
        .to_string();
    (checks, rc)
}

/// The module's access rules, checked by the static test program in the
/// guest (kmod/tests/hmbtrace-test.c), plus a user outside the node's group.
/// The device rewinds the module's header fields once (the module keeps its
/// own tail and epoch) and goes on writing for LATE_STOP_MS after the unbind
/// (the rebind must wait for its acknowledgement).
fn access_rules(env: &Env) -> Result<Value> {
    let body = format!(
        "load_module ring_size={RING}\n\
         module_events_on\n\
         echo 'nobody:x:65534:65534:nobody:/:/bin/sh' >> /etc/passwd\n\
         echo 'tracer:x:1000:0:tracer:/:/bin/sh' >> /etc/passwd\n\
         echo \"outsider: $(su -s /bin/sh nobody -c 'exec 3</dev/nvme-hmb-trace0 && echo opened' 2>&1)\"\n\
         echo \"member: $(su -s /bin/sh tracer -c 'exec 3</dev/nvme-hmb-trace0 && echo opened' 2>&1)\"\n\
         /bin/hmbtrace-test --freeze --irq --hostile --late-stop --remove unbind\n\
         echo \"HMBT-TEST rc=$?\"\n\
         collect\nexit 0\n"
    );
    let mut s = env.start("access_rules", RING, &body)?;
    start_after_module_events(&mut s, "ssd", 11, 2000)?;
    serve_test_program(&mut s, Duration::from_secs(180))?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let (checks, test_rc) = test_program_result(&console);
    let outsider = console.lines().find(|l| l.contains("outsider:")).unwrap_or_default();
    let member = console.lines().find(|l| l.contains("member:")).unwrap_or_default();
    Ok(json!({
        "guest_rc": rc,
        "hmbtrace_test_rc": test_rc,
        "outsider_open_refused": outsider.contains("Permission denied") && !outsider.contains("opened"),
        "group_member_open_allowed": member.contains("opened"),
        "checks": checks,
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// Size of the foreign ivshmem-plain device's memory (BAR2) in the binding scenario.
const FOREIGN_SIZE: usize = 4 << 20;

/// The bytes the host puts into the foreign device's memory; they must be
/// there unchanged after the guest ran.
fn foreign_pattern() -> Vec<u8> {
    (0..FOREIGN_SIZE)
        .map(|i| (i.wrapping_mul(7) ^ (i >> 12)) as u8 | 1)
        .collect()
}

/// Which devices the module binds, and what it refuses to load with:
/// - bad parameters: a `device_peer` beyond the doorbell's 16 bits and a
///   ring size that is no power of two are refused at insmod; a
///   `slice_offset` whose sum with the slice length wraps around is refused
///   at probe (no node, no fault);
/// - a second, foreign ivshmem-plain device without the device's opt-in
///   signature: the module does not bind it and writes none of its memory
///   (checked byte for byte on the host afterwards);
/// - the syscall fuzzer (10^5 calls) on the real device while it produces;
/// - poweroff (the driver's .shutdown): the device acknowledges the
///   withdrawal of the last advert, so nothing live is left behind.
fn binding(env: &Env) -> Result<Value> {
    let name = "binding";
    let shm = env.run_dir(name).with_file_name(format!("{name}.foreign.shm"));
    std::fs::create_dir_all(shm.parent().context("run folder has a parent")?)?;
    let pattern = foreign_pattern();
    std::fs::write(&shm, &pattern)?;
    let module = env.tools()?.module()?;
    let body = format!(
        "for p in 'ring_size={RING} device_peer=65536' 'ring_size={RING} slice_offset=18446744073709547520' 'ring_size=12345'; do\n\
             if insmod {module} $p 2>/dev/null; then r=loaded; else r=refused; fi\n\
             sleep 1\n\
             echo \"HMBT-PARAM $p insmod=$r nodes=$(ls /dev | grep -c '^nvme-hmb-trace')\"\n\
             rmmod nvme_hmb_trace 2>/dev/null\n\
         done\n\
         load_module ring_size={RING}\n\
         sleep 1\n\
         echo \"HMBT-NODES $(ls /dev | grep -c '^nvme-hmb-trace')\"\n\
         for d in /sys/bus/pci/devices/*; do\n\
             [ \"$(cat $d/vendor)\" = 0x1af4 ] && [ \"$(cat $d/device)\" = 0x1110 ] || continue\n\
             drv=none; [ -e $d/driver ] && drv=$(basename $(readlink $d/driver))\n\
             echo \"HMBT-IVSHMEM $(sed -n 3p $d/resource) driver=$drv\"\n\
         done\n\
         echo \"HMBT-NOTOURS $(dmesg | grep -c 'not an emulated HMB, not binding')\"\n\
         /bin/hmbtrace-test --fuzz 100000 --seed 7\n\
         echo \"HMBT-TEST rc=$?\"\n\
         collect\nexit 0\n"
    );
    let extra = Extra {
        qemu_args: vec![
            "-object".into(),
            format!(
                "memory-backend-file,id=foreignmem,share=on,mem-path={},size={FOREIGN_SIZE}",
                shm.display()
            ),
            "-device".into(),
            "ivshmem-plain,memdev=foreignmem,id=foreign0".into(),
        ],
        cmdline: Vec::new(),
    };
    let mut s = env.start_with(name, RING, &body, extra)?;
    s.dev.start_workload("ssd", 31, 2000)?;
    serve_test_program(&mut s, Duration::from_secs(600))?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let (checks, test_rc) = test_program_result(&console);
    let params: Vec<String> = console
        .lines()
        .filter_map(|l| l.split("HMBT-PARAM ").nth(1))
        .map(|l| l.trim().to_string())
        .collect();
    // BAR2 size tells the devices apart: the foreign one is FOREIGN_SIZE.
    let mut ours = Vec::new();
    let mut foreign = Vec::new();
    for line in console.lines().filter_map(|l| l.split("HMBT-IVSHMEM ").nth(1)) {
        let mut words = line.split_whitespace();
        let (start, end) = (words.next(), words.next());
        let driver = line.rsplit("driver=").next().unwrap_or("?").trim().to_string();
        let size = match (start, end) {
            (Some(a), Some(b)) => {
                let parse = |x: &str| u64::from_str_radix(x.trim_start_matches("0x"), 16).unwrap_or(0);
                parse(b).saturating_sub(parse(a)) + 1
            }
            _ => 0,
        };
        if size == FOREIGN_SIZE as u64 {
            foreign.push(driver);
        } else {
            ours.push(driver);
        }
    }
    let after = std::fs::read(&shm).unwrap_or_default();
    let changed = after.iter().zip(&pattern).filter(|(a, b)| a != b).count() + pattern.len().abs_diff(after.len());
    let _ = std::fs::remove_file(&shm);
    let emu_log = std::fs::read_to_string(s.run_dir.join("emu-device.log")).unwrap_or_default();
    Ok(json!({
        "guest_rc": rc,
        "bad_parameters": params,
        "nodes": console.lines().find_map(|l| l.split("HMBT-NODES ").nth(1)).map(str::trim),
        "our_device_driver": ours,
        "foreign_device_driver": foreign,
        "foreign_refusal_logged": console
            .lines()
            .find_map(|l| l.split("HMBT-NOTOURS ").nth(1))
            .is_some_and(|n| n.trim() != "0"),
        "foreign_bytes_changed": changed,
        "fuzz_rc": test_rc,
        "fuzz_checks": checks,
        "withdrawn_at_poweroff": last_generation_acknowledged(&emu_log),
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// Whether emu-device acknowledged the withdrawal of the last ring it was
/// given (its log: "ring ready: epoch E", later "acknowledging the
/// withdrawal of generation E").
fn last_generation_acknowledged(emu_log: &str) -> bool {
    let last_ready = emu_log.lines().enumerate().filter_map(|(i, l)| {
        let epoch = l.split("ring ready: epoch ").nth(1)?.split_whitespace().next()?;
        Some((i, epoch.to_string()))
    });
    let Some((at, epoch)) = last_ready.last() else {
        return false;
    };
    let ack = format!("acknowledging the withdrawal of generation {epoch}");
    emu_log.lines().skip(at).any(|l| l.contains(&ack))
}

/// No MSI-X (`pci=nomsi`): the module falls back to sampling the ring and
/// every access rule still holds (the test program without --irq).
fn no_msix(env: &Env) -> Result<Value> {
    let body = format!(
        "load_module ring_size={RING}\n\
         module_events_on\n\
         echo \"HMBT-FALLBACK $(dmesg | grep -c 'no MSI-X vector')\"\n\
         /bin/hmbtrace-test --freeze --hostile --remove unbind\n\
         echo \"HMBT-TEST rc=$?\"\n\
         collect\nexit 0\n"
    );
    let extra = Extra {
        qemu_args: Vec::new(),
        cmdline: vec!["pci=nomsi".into()],
    };
    let mut s = env.start_with("no_msix", RING, &body, extra)?;
    start_after_module_events(&mut s, "ssd", 37, 2000)?;
    serve_test_program(&mut s, Duration::from_secs(180))?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let (checks, test_rc) = test_program_result(&console);
    Ok(json!({
        "guest_rc": rc,
        "fallback_logged": console
            .lines()
            .find_map(|l| l.split("HMBT-FALLBACK ").nth(1))
            .is_some_and(|n| n.trim() != "0"),
        "hmbtrace_test_rc": test_rc,
        "checks": checks,
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// REINIT on a 512 MiB ring while another thread polls and reads sysfs:
/// the device lock is held for the header only (kmod/tests/hmbtrace-test.c
/// --big-reinit checks both waits against a 250 ms bound), and the kernel
/// log stays clean (no soft lockup).
fn big_ring(env: &Env) -> Result<Value> {
    let body = format!(
        "load_module ring_size={BIG_RING}\n\
         /bin/hmbtrace-test --big-reinit\n\
         echo \"HMBT-TEST rc=$?\"\n\
         collect\nexit 0\n"
    );
    let mut s = env.start("big_ring", BIG_RING, &body)?;
    s.dev.start_workload("ssd", 41, 1000)?;
    serve_test_program(&mut s, Duration::from_secs(300))?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let (checks, test_rc) = test_program_result(&console);
    Ok(json!({
        "guest_rc": rc,
        "hmbtrace_test_rc": test_rc,
        "checks": checks,
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
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
    s.dev.start_workload("ssd", 17, 2000)?;
    s.run_for(1.5)?;
    s.signal("unbind")?;
    s.wait_share_file(files::DAEMON_RC, Duration::from_secs(30))
        .context("the daemon did not notice the removal")?;
    s.dev.stop_workload()?;
    s.signal(files::STOP)?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    Ok(json!({
        "guest_rc": rc,
        "rmmod_while_open": if console.contains("HMBT-RMMOD refused") { "refused" } else { "accepted" },
        "unbind_while_open_and_mapped": if console.contains("HMBT-UNBIND done") { "done" } else { "failed" },
        "daemon_exit_codes": s.daemon_exit_codes(),
        "daemon_error": daemon_error(&s.run_dir),
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// The analyzer on the guest's trace.bin (npu workload) and on damaged
/// copies of it and of its .pccx export: each case gets its documented exit code.
fn format_rules(env: &Env) -> Result<Value> {
    let mut s = env.start("format_rules", RING, &stream_body(RING, ""))?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.dev.start_workload("npu", 23, 3000)?;
    s.run_for(1.5)?;
    let (gt, stats, rc) = wind_down(&mut s)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    let dir = s.run_dir.clone();
    let trace = dir.join(files::TRACE);
    let bytes = std::fs::read(&trace)?;
    let analyzer = &env.tools()?.analyzer_bin;
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
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// An uncorrectable (fatal) PCIe error injected by QEMU at the controller's
/// root port while the daemon streams with --follow: the AER driver calls
/// error_detected (frozen), resets the link, then slot_reset and resume.
/// The module stops the device (acknowledged withdrawal) and marks the ring
/// FROZEN, as a controller reset does; the daemon drains it and starts the
/// next epoch with REINIT; the trace matches the ground truth in two epochs.
/// Then the device vanishes (`vanish`: its memory reads all-ones): sysfs
/// says ENODEV rather than an all-ones head, and the unbind does not wait
/// for an acknowledgement nobody can give.
fn pci_error(env: &Env) -> Result<Value> {
    let sysfs = "/sys/class/nvme-hmb-trace/nvme-hmb-trace0";
    let body = format!(
        "load_module ring_size={RING}\n\
         start_daemon --follow\n\
         wait_file injected\n\
         i=0; while ! dmesg | grep -q 'recovered from a PCI error' && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done\n\
         echo \"HMBT-AER detected=$(dmesg | grep -c 'trace ring stopped until reset') recovered=$(dmesg | grep -c 'recovered from a PCI error')\"\n\
         mark recovered\n\
         wait_stop\nstop_daemon\ncollect\n\
         bdf=$(basename $(readlink {sysfs}/device))\n\
         mark collected\n\
         wait_file vanished\n\
         echo \"HMBT-GONE head=$(cat {sysfs}/head 2>&1 | sed 's/.*: //') freeze_count=$(cat {sysfs}/freeze_count 2>&1 | sed 's/.*: //')\"\n\
         t0=$(date +%s)\n\
         echo $bdf > /sys/bus/pci/drivers/nvme-hmb-trace/unbind\n\
         took=$(($(date +%s) - t0))\n\
         echo \"HMBT-UNBOUND under_3s=$([ $took -lt 3 ] && echo yes || echo no) ack_timeouts=$(dmesg | grep -c 'did not acknowledge') gone=$(dmesg | grep -c 'device gone: not waiting')\"\n\
         exit 0\n"
    );
    let extra = Extra {
        qemu_args: Vec::new(),
        cmdline: Vec::new(),
    };
    let mut s = env.start_with("pci_error", RING, &body, extra)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.dev.start_workload("ssd", 47, 2000)?;
    s.run_for(1.0)?;
    // Data link protocol error: uncorrectable, fatal by default severity.
    let out = s
        .qmp()?
        .hmp("pcie_aer_inject_error hmbrp DLP", Duration::from_secs(5))?;
    anyhow::ensure!(out.starts_with("OK id: hmbrp"), "pcie_aer_inject_error: {out}");
    s.signal("injected")?;
    s.wait_share_file("recovered", Duration::from_secs(120))?;
    s.run_for(1.0)?;
    s.dev.stop_workload()?;
    s.dev.wait_drained(Duration::from_secs(60))?;
    let gt = s.dev.ground_truth()?;
    let stats = s.dev.stats()?;
    s.signal(files::STOP)?;
    s.wait_share_file("collected", Duration::from_secs(60))?;
    s.dev.inject(Fault::Vanish)?;
    s.signal("vanished")?;
    let rc = s.finish(FINISH)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let tagged = |tag: &str| {
        console
            .lines()
            .find_map(|l| l.split(tag).nth(1))
            .map(|l| l.trim().to_string())
            .unwrap_or_else(|| "none".into())
    };
    let aer = tagged("HMBT-AER ");
    anyhow::ensure!(aer == "detected=1 recovered=1", "error recovery: {aer}");
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "recovery": aer,
        "epochs_in_trace": truth.epochs,
        "truth": truth_facts(&truth),
        "vanished_sysfs": tagged("HMBT-GONE "),
        "unbind_after_vanish": tagged("HMBT-UNBOUND "),
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

/// Standard base64 (busybox `base64`'s output, line breaks and all) back to
/// bytes; None on any other character.
fn from_base64(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The console lines between `HMBT-<tag>-BEGIN` and `HMBT-<tag>-END`.
fn console_block(console: &str, tag: &str) -> Option<String> {
    let begin = format!("HMBT-{tag}-BEGIN");
    let end = format!("HMBT-{tag}-END");
    let from = console.find(&begin)? + begin.len();
    let to = from + console[from..].find(&end)?;
    Some(console[from..to].trim_start_matches(['\r', '\n']).to_string())
}

/// The numbers following `needle` in emu-device's log, in order (e.g. the
/// epochs of "ring ready: epoch E" lines).
fn emu_log_numbers(emu_log: &str, needle: &str) -> Vec<u64> {
    emu_log
        .lines()
        .filter_map(|l| l.split(needle).nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

/// System suspend twice while the daemon streams with --follow
/// (`/sys/power/pm_test` = `devices`, state `freeze`: every device's suspend
/// and resume callback runs, the machine itself does not sleep). At suspend
/// the module withdraws the advert, waits for the device's acknowledgment
/// and marks the ring FROZEN; after resume the daemon drains it and REINIT
/// advertises the next generation. So each suspend ends an epoch, the
/// device acknowledges each generation once (the last at poweroff), and the
/// trace matches the ground truth over three epochs.
///
/// The 9p share does not survive a suspend (virtio-pci's resume resets the
/// device and 9pnet_virtio has no restore callback), so once the guest has
/// suspended it uses only the console: the whole script is one block that
/// the shell has read before the first suspend, the daemon writes to /tmp,
/// the guest waits for the ring to go quiet instead of a stop file, prints
/// the kernel log and the trace (base64), and powers off itself (init would
/// unmount the dead share and hang).
fn suspend(env: &Env) -> Result<Value> {
    let sysfs = "/sys/class/nvme-hmb-trace/nvme-hmb-trace0";
    let body = format!(
        "load_module ring_size={RING}\n\
         {{\n\
         /bin/hmb-trace-daemon --device /dev/nvme-hmb-trace0 --output /tmp/trace.bin --stats --follow 2>/tmp/daemon.stderr &\n\
         daemon=$!\n\
         mark {started}\n\
         wait_file suspend\n\
         if [ -w /sys/module/suspend/parameters/pm_test_delay ]; then echo 1 > /sys/module/suspend/parameters/pm_test_delay; fi\n\
         echo devices > /sys/power/pm_test\n\
         for i in 1 2; do\n\
             echo freeze > /sys/power/state; echo \"HMBT-SUSPEND $i rc=$?\"\n\
             sleep 1\n\
         done\n\
         echo HMBT-RESUMED\n\
         last=x; quiet=0\n\
         while [ $quiet -lt 4 ]; do\n\
             sleep 0.5\n\
             h=$(cat {sysfs}/head); t=$(cat {sysfs}/tail)\n\
             if [ \"$h\" = \"$t\" ] && [ \"$h\" = \"$last\" ]; then quiet=$((quiet + 1)); else quiet=0; fi\n\
             last=$h\n\
         done\n\
         kill -TERM $daemon; wait $daemon; echo \"HMBT-DAEMON rc=$?\"\n\
         tail -n 2 /tmp/daemon.stderr\n\
         dmesg -n 1\n\
         echo HMBT-DMESG-BEGIN; dmesg; echo HMBT-DMESG-END\n\
         echo HMBT-TRACE-BEGIN; base64 /tmp/trace.bin; echo HMBT-TRACE-END\n\
         echo \"HMBT-RESULT rc=0\"\n\
         poweroff -f\n\
         }}\n",
        started = files::STARTED,
    );
    let mut s = env.start("suspend", RING, &body)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.dev.start_workload("ssd", 43, 500)?;
    s.run_for(1.0)?;
    s.signal("suspend")?;
    s.vm.wait_for("HMBT-RESUMED", Duration::from_secs(120), |l| l.contains("HMBT-RESUMED"))?;
    s.run_for(1.0)?;
    s.dev.stop_workload()?;
    s.dev.wait_drained(Duration::from_secs(60))?;
    let gt = s.dev.ground_truth()?;
    let stats = s.dev.stats()?;
    let rc = s.finish(Duration::from_secs(180))?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let trace = console_block(&console, "TRACE")
        .and_then(|t| from_base64(&t))
        .context("no trace (base64) on the console")?;
    std::fs::write(s.run_dir.join(files::TRACE), trace)?;
    let dmesg = console_block(&console, "DMESG").context("no kernel log on the console")?;
    std::fs::write(s.run_dir.join(files::DMESG), dmesg)?;
    let truth = check_truth(&s.run_dir, &gt, &stats)?;
    anyhow::ensure!(truth.passed(), "{}", truth.summary());
    let emu_log = std::fs::read_to_string(s.run_dir.join("emu-device.log")).unwrap_or_default();
    let ready = emu_log_numbers(&emu_log, "ring ready: epoch ");
    let acked = emu_log_numbers(&emu_log, "acknowledging the withdrawal of generation ");
    // Without dev_pm_ops the device never hears of the suspends: one epoch.
    anyhow::ensure!(
        ready == [1, 2, 3] && acked == [1, 2, 3],
        "two suspends: rings {ready:?}, withdrawals acknowledged {acked:?}"
    );
    Ok(json!({
        "guest_rc": rc,
        "daemon": console.lines().find_map(|l| l.split("HMBT-DAEMON ").nth(1)).map(str::trim),
        "suspends": console
            .lines()
            .filter_map(|l| l.split("HMBT-SUSPEND ").nth(1))
            .map(str::trim)
            .collect::<Vec<_>>(),
        "rings_adopted": ready,
        "withdrawals_acknowledged": acked,
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir, Device::Ivshmem, &[]),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_bodies_are_the_ivshmem_ones() {
        assert_eq!(
            <EmuDevice as shared::Side>::UP,
            format!("load_module ring_size={RING}\n")
        );
        assert_eq!(
            shared::stream_body::<EmuDevice>("--follow"),
            stream_body(RING, "--follow")
        );
    }

    #[test]
    fn base64_from_the_console_round_trips() {
        let data: Vec<u8> = (0..=255u8).chain([0, 1]).collect();
        let text = hmb_harness::qemu::base64(&data);
        let wrapped: String = text
            .as_bytes()
            .chunks(76)
            .map(|l| format!("{}\r\n", std::str::from_utf8(l).unwrap()))
            .collect();
        assert_eq!(from_base64(&wrapped).as_deref(), Some(&data[..]));
        assert_eq!(from_base64("aGk=").as_deref(), Some(&b"hi"[..]));
        assert_eq!(from_base64("a[b"), None);
        let console = "x\nHMBT-T-BEGIN\r\nabc\nHMBT-T-END\n";
        assert_eq!(console_block(console, "T").as_deref(), Some("abc\n"));
    }
}
