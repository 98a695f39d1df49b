//! The scenarios on the nvme device: emu-device's NVMe controller over
//! vfio-user, the series' nvme.ko lending it the HMB, the module and the
//! daemon in the guest, and trace records born of the guest's own NVMe
//! commands (a write/read loop on /dev/nvme0n1 runs under every stream).
//! The truth is the controller's journal (harness/src/journal_truth.rs).
//! A scenario that also runs on ivshmem reduces to the same outcome, so
//! both devices share its snapshot.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use hmb_emu_device::control::Fault;
use hmb_harness::guest_script::files;
use hmb_harness::journal_truth::{self, pair_io, Journal, JournalReport};
use hmb_harness::nvme_guest::ControllerOptions;
use hmb_harness::nvme_guest::{FATAL_DRIVER_LINE, FATAL_IO_TIMEOUT_S};
use hmb_harness::nvme_session::{NvmeGuestOptions, NvmeSession};
use hmb_nvme_trace::ProducerKind;
use serde_json::{json, Value};

use super::nvme_io::check_io;
use super::shared::{self, Verdict};
use crate::env::{Device, Env, FINISH};
use crate::outcome::{daemon_error, kernel_log, truth_facts};
use hmb_harness::nvme_guest::NvmeDevice;

const STARTED: Duration = Duration::from_secs(90);
/// The guest's signal that it stopped the daemon and handed over its files;
/// the host then takes the journal and lets the guest power off.
const COLLECTED: &str = "collected";
const JOURNAL_TAKEN: &str = "journal_taken";

/// The NVMe controller's side of the shared scenarios.
impl shared::Side for NvmeDevice {
    const DEVICE: Device = Device::Nvme;
    const STARTED: Duration = STARTED;
    const UP: &'static str = "load_nvme\nload_module\nio_start\n";
    const DOWN: &'static str = WIND_DOWN;
    type Truth = Journal;

    fn start(env: &Env, name: &str, body: &str) -> Result<NvmeSession> {
        env.start_nvme(name, body, &NvmeGuestOptions::default())
    }

    /// The guest's I/O loop is the production: nothing to start.
    fn produce(_: &mut NvmeSession, _: &str, _: u64, _: u64) -> Result<()> {
        Ok(())
    }

    fn inject(g: &mut NvmeSession, fault: Fault) -> Result<()> {
        g.inject(fault).map(drop)
    }

    fn wind_down(g: &mut NvmeSession) -> Result<(Journal, i32)> {
        wind_down(g)
    }

    fn finish_unchecked(g: &mut NvmeSession) -> Result<i32> {
        finish_daemon_gone(g)
    }

    fn check(g: &NvmeSession, journal: &Journal) -> Result<Verdict> {
        let truth = check_journal(g, journal)?;
        Ok(Verdict {
            passed: truth.passed(),
            summary: truth.summary(),
            facts: truth_facts(&truth),
        })
    }

    fn after(g: &NvmeSession) -> Result<()> {
        check_io(g)
    }
}

/// Run one scenario on the NVMe controller.
pub fn run(env: &Env, name: &str) -> Result<Value> {
    match name {
        "streaming" => streaming(env),
        "frozen_exit" => frozen(env, false),
        "frozen_follow" => frozen(env, true),
        "nvme_traced_io" => traced_io(env),
        "nvme_resets" => resets(env),
        "nvme_hmb_toggle" => hmb_toggle(env),
        "nvme_surprise_removal" => surprise_removal(env),
        "nvme_controller_killed" => controller_killed(env),
        "nvme_hostile_controller" => hostile_controller(env),
        "nvme_rmmod_in_reset" => super::nvme_lock_paths::rmmod_during_reset(env),
        "nvme_reinit_in_reset" => super::nvme_lock_paths::reinit_during_reset(env),
        "nvme_big_ring" => super::nvme_big_ring::run(env),
        other => bail!("scenario {other:?} has no nvme version (see hmb_harness::matrix)"),
    }
}

/// The end of every body: stop the I/O, let the module's 10 ms sampler and
/// the daemon take the last records, stop the daemon, hand the files over,
/// and stay up until the host has the journal (power-off resets the
/// controller, which ends the epoch).
const WIND_DOWN: &str = "io_stop\nsleep 1\nstop_daemon\ncollect\nmark collected\nwait_file journal_taken\nexit 0\n";

/// Load, stream under the I/O loop until the host says stop.
fn stream_body(daemon_args: &str) -> String {
    format!("load_nvme\nload_module\nio_start\nstart_daemon {daemon_args}\nwait_stop\n{WIND_DOWN}")
}

/// Stop: the guest winds down; the journal while the controller still
/// runs; power-off. Returns the journal and the guest's exit code.
fn wind_down(s: &mut NvmeSession) -> Result<(Journal, i32)> {
    s.signal(files::STOP)?;
    s.wait_share_file(COLLECTED, STARTED)?;
    let journal = s.journal()?;
    s.signal(JOURNAL_TAKEN)?;
    let rc = s.finish(FINISH)?;
    Ok((journal, rc))
}

fn check_journal(s: &NvmeSession, journal: &Journal) -> Result<JournalReport> {
    journal_truth::check(&s.run_dir.join(files::TRACE), journal)
}

/// What every scenario whose daemon may stop on its own reports: how the
/// guest script and each daemon run ended, the daemon's error line, and
/// the kernel log (only `expected` lines allowed).
fn daemon_facts(s: &NvmeSession, rc: i32, expected: &[&str]) -> Value {
    json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "daemon_error": daemon_error(&s.run_dir),
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, expected),
    })
}

/// The end of a script whose daemon has already exited (the device went):
/// stop, let the guest collect, take no journal, power off.
fn finish_daemon_gone(s: &mut NvmeSession) -> Result<i32> {
    s.signal(files::STOP)?;
    s.wait_share_file(COLLECTED, STARTED)?;
    s.signal(JOURNAL_TAKEN)?;
    s.finish(FINISH)
}

/// Traced I/O for 3 s; with HMB_TRACE_INJECT=reset a device-side failure
/// (CSTS.CFS) half-way, which the daemon follows into a second epoch.
fn streaming(env: &Env) -> Result<Value> {
    let follow = if env.inject_reset { "--follow" } else { "" };
    let opts = NvmeGuestOptions {
        io_timeout: env.inject_reset.then_some(FATAL_IO_TIMEOUT_S),
        ..Default::default()
    };
    let mut s = env.start_nvme("streaming", &stream_body(follow), &opts)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.5)?;
    if env.inject_reset {
        s.inject(Fault::Reset)?;
        // The driver sees CFS at its 3 s I/O timeout, then resets.
        s.run_for(f64::from(FATAL_IO_TIMEOUT_S) + 4.0)?;
    }
    s.run_for(1.5)?;
    let (journal, rc) = wind_down(&mut s)?;
    let truth = check_journal(&s, &journal)?;
    ensure!(
        truth.passed(),
        "trace.bin differs from the journal: {}",
        truth.summary()
    );
    ensure!(truth.matched > 100, "too few records: {}", truth.summary());
    ensure!(
        truth.epochs.len() == if env.inject_reset { 2 } else { 1 },
        "epochs {:?}",
        truth.epochs
    );
    check_io(&s)?;
    let expected: &[&str] = if env.inject_reset { &[FATAL_DRIVER_LINE] } else { &[] };
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, expected),
    }))
}

/// A host reset (`reset_controller`, CC.EN 1 -> 0) mid-stream: the
/// controller writes FROZEN; the daemon drains and exits with FROZEN's
/// code, or follows into the next epoch.
fn frozen(env: &Env, follow: bool) -> Result<Value> {
    let name = if follow { "frozen_follow" } else { "frozen_exit" };
    let body = format!(
        "load_nvme\nload_module\nio_start\nstart_daemon {}\n\
         wait_file reset\necho 1 > /sys/class/nvme/nvme0/reset_controller || fail reset_controller\nwait_live\nmark reset.done\n\
         wait_stop\n{WIND_DOWN}",
        if follow { "--follow" } else { "" }
    );
    let mut s = env.start_nvme(name, &body, &NvmeGuestOptions::default())?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.signal("reset")?;
    s.wait_share_file("reset.done", STARTED)?;
    if follow {
        s.run_for(1.5)?;
    } else {
        s.wait_share_file(files::DAEMON_RC, Duration::from_secs(30))
            .context("the daemon did not exit on FROZEN")?;
    }
    let (journal, rc) = wind_down(&mut s)?;
    let truth = check_journal(&s, &journal)?;
    ensure!(truth.passed(), "{}", truth.summary());
    check_io(&s)?;
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "epochs_in_trace": truth.epochs.len(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, &[]),
    }))
}

/// Known data written and read back under the trace: one CMD_FETCH and one
/// CMD_COMPLETE per command, paired by (qid, cid), and the controller's own
/// counters (reads, writes, I/O completions and the sum of their
/// latencies) equal what the trace adds up to.
fn traced_io(env: &Env) -> Result<Value> {
    let body = "load_nvme\nload_module\nstart_daemon\n\
         dd if=/dev/urandom of=/tmp/pattern bs=4096 count=256 2>/dev/null || fail pattern\n\
         dd if=/tmp/pattern of=/dev/nvme0n1 bs=4096 seek=2048 oflag=direct 2>/dev/null || fail write\n\
         dd if=/dev/nvme0n1 of=/tmp/back bs=4096 skip=2048 count=256 iflag=direct 2>/dev/null || fail read\n\
         cmp /tmp/pattern /tmp/back || fail \"read back differs\"\n\
         dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=500 iflag=direct 2>/dev/null || fail \"read loop\"\n\
         note verified yes\n\
         sleep 1\nstop_daemon\ncollect\nmark collected\nwait_file journal_taken\nexit 0\n";
    let mut s = env.start_nvme("nvme_traced_io", body, &NvmeGuestOptions::default())?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.wait_share_file(COLLECTED, STARTED)?;
    let status = s.status()?;
    let journal = s.journal()?;
    s.signal(JOURNAL_TAKEN)?;
    let rc = s.finish(FINISH)?;
    let truth = check_journal(&s, &journal)?;
    ensure!(truth.passed(), "{}", truth.summary());
    // trace.bin is the journal's written entries, byte for byte (checked
    // above), so the pairing reads the journal.
    let pairing = pair_io(&journal);
    let counter = |k: &str| -> Result<u64> {
        status
            .pointer(&format!("/controller/counters/{k}"))
            .and_then(Value::as_u64)
            .with_context(|| format!("the controller reports no counters.{k}"))
    };
    let (reads, writes) = (counter("reads")?, counter("writes")?);
    let (completions, latency) = (counter("io_completions")?, counter("io_latency_ns_total")?);
    ensure!(
        pairing.reads >= 500 + 256 / 32,
        "only {} reads traced (the guest issued at least 508)",
        pairing.reads
    );
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "pattern_read_back": s.notes().get("verified").map(String::as_str) == Some("yes"),
        "truth": truth_facts(&truth),
        "io_commands_paired_by_qid_cid": pairing.unpaired_fetches == 0 && pairing.unpaired_completions == 0 && pairing.paired > 0,
        "io_errors_traced": pairing.errors,
        "traced_reads_equal_controller_reads": pairing.reads == reads,
        "traced_writes_equal_controller_writes": pairing.writes == writes,
        "traced_completions_equal_controller": pairing.paired == completions,
        "traced_latency_sum_equals_controller": pairing.latency_ns_total == latency,
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, &[]),
    }))
}

fn controller_status_u64(status: &Value, path: &str) -> Result<u64> {
    status
        .pointer(path)
        .and_then(Value::as_u64)
        .with_context(|| format!("the controller's status has no {path}"))
}

/// A host reset and then a device-side failure while streaming with
/// --follow: each ends an epoch with FROZEN, the daemon REINITs, the driver
/// advertises the next generation; three epochs, nothing lost uncounted,
/// the I/O loop never sees an error.
fn resets(env: &Env) -> Result<Value> {
    let body = format!(
        "load_nvme\nload_module\nio_start\nstart_daemon --follow\n\
         wait_file reset\necho 1 > /sys/class/nvme/nvme0/reset_controller || fail reset_controller\nwait_live\nmark reset.done\n\
         wait_stop\n{WIND_DOWN}"
    );
    // The C producer (firmware-sdk through serve-nvme --producer c) writes
    // this scenario's ring on every kernel: the daemon, the journal check
    // and the analyzer must not tell it from the Rust model, which every
    // other scenario runs.
    let opts = NvmeGuestOptions {
        io_timeout: Some(FATAL_IO_TIMEOUT_S),
        controller: ControllerOptions {
            producer: ProducerKind::C,
            ..Default::default()
        },
    };
    let mut s = env.start_nvme("nvme_resets", &body, &opts)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.signal("reset")?;
    s.wait_share_file("reset.done", STARTED)?;
    s.run_for(1.5)?;
    s.inject(Fault::Reset)?;
    let failed = s.status()?;
    ensure!(
        controller_status_u64(&failed, "/controller/csts")? & 2 == 2,
        "CSTS.CFS not set by the injection"
    );
    // The driver finds CFS at its I/O timeout and resets.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let st = s.status()?;
        let generation = st.pointer("/trace/adopted_generation").and_then(Value::as_u64);
        if generation == Some(3) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the trace did not reach generation 3 within 30 s of the failure (adopted {generation:?})"
        );
        s.run_for(0.2)?;
    }
    s.run_for(1.0)?;
    let recovered = s.status()?;
    let (journal, rc) = wind_down(&mut s)?;
    let truth = check_journal(&s, &journal)?;
    ensure!(truth.passed(), "{}", truth.summary());
    check_io(&s)?;
    ensure!(
        log_says_producer(&s, ProducerKind::C)?,
        "emu-device.log does not say the C producer wrote the ring"
    );
    Ok(json!({
        "producer": ProducerKind::C.to_string(),
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "controller_resets_at_least_two": controller_status_u64(&recovered, "/controller/counters/resets")? >= 2,
        "controller_fatal_errors": controller_status_u64(&recovered, "/controller/counters/fatal_errors")?,
        "epochs_frozen_by_controller": journal.frozen.len(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, &[FATAL_DRIVER_LINE]),
    }))
}

/// emu-device's start line names the producer that writes the ring
/// (`serving an NVMe controller (tracing, c producer, timing none)`).
fn log_says_producer(s: &NvmeSession, producer: ProducerKind) -> Result<bool> {
    let log = std::fs::read_to_string(s.run_dir.join("emu-device.log")).context("reading emu-device.log")?;
    let wanted = format!("{producer} producer");
    Ok(start_line_fields(&log).is_some_and(|f| f.iter().any(|x| *x == wanted)))
}

/// The comma-separated words in the parentheses of emu-device's start line
/// (`serving an NVMe controller (PERSONALITY, P producer, timing T)`), in order.
fn start_line_fields(log: &str) -> Option<Vec<&str>> {
    let rest = log
        .lines()
        .find_map(|l| l.split_once("serving an NVMe controller (").map(|(_, r)| r))?;
    let inside = rest.split_once(')')?.0;
    Some(inside.split(',').map(str::trim).collect())
}

/// The HMB disabled and enabled again by the driver (sysfs `hmb`, Set
/// Features 0Dh EHM=0 then EHM=1) while the daemon streams with --follow.
fn hmb_toggle(env: &Env) -> Result<Value> {
    let body = format!(
        "load_nvme\nload_module\nio_start\nstart_daemon --follow\n\
         hmbf=\nfor f in /sys/class/nvme/nvme0/hmb /sys/class/nvme/nvme0/device/hmb; do [ -e $f ] && hmbf=$f; done\n\
         [ -n \"$hmbf\" ] || fail \"no hmb attribute in sysfs\"\n\
         wait_file toggle\n\
         echo 0 > $hmbf || fail \"hmb=0\"\nnote hmb_after_off \"$(cat $hmbf)\"\nmark hmb.off\n\
         wait_file on\n\
         echo 1 > $hmbf || fail \"hmb=1\"\nnote hmb_after_on \"$(cat $hmbf)\"\n\
         i=0; while [ ! -e /dev/nvme-hmb-trace0 ]; do i=$((i + 1)); [ $i -lt 100 ] || fail \"no trace node after hmb=1\"; sleep 0.1; done\n\
         kill -0 $daemon 2>/dev/null && note daemon_survived yes || {{ note daemon_survived no; stop_daemon; start_daemon --follow; }}\n\
         mark hmb.on\n\
         wait_stop\n{WIND_DOWN}"
    );
    let mut s = env.start_nvme("nvme_hmb_toggle", &body, &NvmeGuestOptions::default())?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.signal("toggle")?;
    s.wait_share_file("hmb.off", STARTED)?;
    let off = s.status()?;
    s.run_for(0.5)?;
    s.signal("on")?;
    s.wait_share_file("hmb.on", STARTED)?;
    s.run_for(1.5)?;
    let on = s.status()?;
    let (journal, rc) = wind_down(&mut s)?;
    let truth = check_journal(&s, &journal)?;
    ensure!(truth.passed(), "{}", truth.summary());
    check_io(&s)?;
    let notes = s.notes();
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "daemon_survived_the_toggle": notes.get("daemon_survived").map(String::as_str) == Some("yes"),
        "controller_hmb_enabled_after_off": off.pointer("/controller/hmb/enabled"),
        "controller_hmb_enabled_after_on": on.pointer("/controller/hmb/enabled"),
        "sysfs_hmb_after_off": notes.get("hmb_after_off"),
        "sysfs_hmb_after_on": notes.get("hmb_after_on"),
        "tracing_after_on": on.pointer("/trace/adopted_generation").is_some_and(|g| !g.is_null()),
        "epochs_frozen_by_controller": journal.frozen.len(),
        "truth": truth_facts(&truth),
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, &[]),
    }))
}

/// Surprise removal of the function while the daemon has the ring mapped:
/// the guest removes the PCI device (`/sys/bus/pci/devices/<bdf>/remove`,
/// the same nvme_remove path a hot-unplug takes: the series' driver lets
/// the module go before it frees the slice), with the I/O loop stopped
/// (removal under I/O fails those commands, which is not the point). The
/// daemon exits with its device-gone code, the kernel log stays clean, and
/// the controller process lives on.
///
/// Not QMP device_del: QEMU 11.1 aborts on the device_del of a
/// vfio-user-pci function behind a PCIe root port
/// (`memory_region_del_subregion: Assertion 'subregion->container == mr'
/// failed`, seen on this machine; docs/conformance.md).
fn surprise_removal(env: &Env) -> Result<Value> {
    let body = "load_nvme\nload_module\nio_start\nstart_daemon\nwait_file remove\nio_stop\n\
                bdf=$(basename \"$(readlink /sys/class/nvme/nvme0/device)\")\n\
                echo 1 > /sys/bus/pci/devices/$bdf/remove || fail \"remove $bdf\"\n\
                [ ! -e /dev/nvme0n1 ] || fail \"/dev/nvme0n1 still there after the removal\"\n\
                wait_stop\nstop_daemon\ncollect\nmark collected\nwait_file journal_taken\nexit 0\n";
    let mut s = env.start_nvme("nvme_surprise_removal", body, &NvmeGuestOptions::default())?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.signal("remove")?;
    s.wait_share_file(files::DAEMON_RC, Duration::from_secs(60))
        .context("the daemon did not notice the removal")?;
    s.dev
        .check_alive()
        .context("the controller process died with the removal")?;
    let rc = finish_daemon_gone(&mut s)?;
    Ok(daemon_facts(&s, rc, &[]))
}

/// Lines the driver prints when its controller is gone: an I/O timeout,
/// the failed reset, the removal, the failed reads of the dying namespace.
const DEAD_CONTROLLER_LINES: &[&str] = &[
    "timeout",
    "controller is down",
    "Removing after probe failure",
    "Disabling device after reset failure",
    "I/O error",
    "I/O Error",
    "Device not ready",
    "Abort status",
];

/// The controller process killed outright (SIGKILL) while the daemon has
/// the ring mapped and follows it. The ring lives in guest RAM, so the
/// daemon sees only that nothing new arrives; the driver notices at its
/// next command's timeout (3 s here) and fails to reset the dead
/// controller. 6.1 then releases the device (the daemon gets POLLHUP);
/// 6.12 and 7.x disable it and keep it bound: the series marks the ring
/// FROZEN and the daemon's REINIT gets ENODEV, and the script unbinds the
/// controller by hand. Either way the daemon exits with its device-gone
/// code.
fn controller_killed(env: &Env) -> Result<Value> {
    let body = "load_nvme\nload_module\nio_start\nstart_daemon --follow\n\
                bdf=$(basename \"$(readlink /sys/class/nvme/nvme0/device)\")\n\
                wait_file io.stop\nio_stop\nmark io.stopped\n\
                wait_file killed\n\
                dd if=/dev/nvme0n1 of=/dev/null bs=4096 count=1 iflag=direct 2>/dev/null && fail \"a read succeeded on a dead controller\"\n\
                sleep 2\n\
                # 6.1 releases a controller it cannot reset; 6.12 and later disable it and\n\
                # keep it bound: unbind it then, as an administrator would.\n\
                if [ -e /sys/bus/pci/drivers/nvme/$bdf ]; then\n\
                    note unbound_by_hand yes\n\
                    echo $bdf > /sys/bus/pci/drivers/nvme/unbind || fail \"unbind $bdf\"\n\
                fi\n\
                wait_stop\nstop_daemon\ncollect\nmark collected\nwait_file journal_taken\nexit 0\n";
    let opts = NvmeGuestOptions {
        io_timeout: Some(FATAL_IO_TIMEOUT_S),
        ..Default::default()
    };
    let mut s = env.start_nvme("nvme_controller_killed", body, &opts)?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.signal("io.stop")?;
    s.wait_share_file("io.stopped", STARTED)?;
    s.dev.kill();
    s.signal("killed")?;
    s.wait_share_file(files::DAEMON_RC, Duration::from_secs(90))
        .context("the daemon did not notice the controller's death")?;
    let rc = finish_daemon_gone(&mut s)?;
    Ok(daemon_facts(&s, rc, DEAD_CONTROLLER_LINES))
}

/// A controller that rewrites the consumer's header fields (tail to 0, the
/// epoch one lower) mid-stream: the module and the daemon go by their own
/// copies and lose nothing.
fn hostile_controller(env: &Env) -> Result<Value> {
    let mut s = env.start_nvme(
        "nvme_hostile_controller",
        &stream_body(""),
        &NvmeGuestOptions::default(),
    )?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.inject(Fault::RewindHeader)?;
    // The daemon must see the rewind and exit by itself (9). Waited for, not
    // a fixed second: on 6.12-debug under load it had not yet seen it after
    // one, was stopped by wind-down and exited 0 with the rewound records
    // missing. A daemon that never notices still fails the snapshot.
    if s.wait_share_file(files::DAEMON_RC, Duration::from_secs(30)).is_err() {
        println!("    the daemon had not exited 30 s after the rewind: stopping it");
    }
    let (journal, rc) = wind_down(&mut s)?;
    let codes = s.daemon_exit_codes();
    let mut out = daemon_facts(&s, rc, &[]);
    if codes == [0] {
        let truth = check_journal(&s, &journal)?;
        out["truth"] = truth_facts(&truth);
    }
    Ok(out)
}

/// Issue 26's differential test, its stock half, on one guest: the kernel's
/// own (stock) nvme.ko against the controller's `stock` personality (an HMB,
/// no trace contract). The guest is the harness's stock-driver run
/// (`cargo xtask boot --device nvme --stock-driver --inject reset`: probe,
/// data, `reset_controller`, a device-side fatal status and the driver's
/// recovery, reads, power-off), with serve-nvme's personality set through
/// `--personality`. The controller keeps private data in every
/// HMB page and audits them when it loses the HMB and at each MR=1 re-enable
/// (docs/nvme-controller.md); its last audit, logged when it exits, must
/// show no vendor command (no C0h), no host write, at least two audited MR=1
/// re-enables, and every EHM=1 list equal to the one at probe. Not in the
/// default test command (one more guest boot): conformance/tests/stock_driver.rs.
pub fn stock_driver_audit(kernel: Option<&str>, personality: hmb_nvme_trace::Personality) -> Result<Value> {
    use hmb_harness::nvme_guest::{self, NvmeRunConfig};
    use hmb_harness::phases::Phases;
    use hmb_harness::qemu::Accel;

    let sh = xshell::Shell::new()?;
    sh.change_dir(hmb_harness::workspace_root());
    let mut phases = Phases::new();
    let tools = nvme_guest::prepare(&sh, kernel, false, &mut phases)
        .context("preparing the nvme guest with the stock driver (image, QEMU 11.1)")?;
    let run_dir = hmb_harness::target_dir()
        .join("hmb-trace/conformance")
        .join(&tools.image.kernel_name)
        // Short: QEMU refuses a QMP socket path of 108 bytes or more.
        .join(format!("nvme/qemu-11.1/stock-{personality}"));
    let cfg = NvmeRunConfig {
        run_dir: run_dir.clone(),
        accel: Accel::Tcg,
        iops_reads: 200,
        timeout: Duration::from_secs(300),
        trace: false,
        inject_fatal: true,
        controller: nvme_guest::ControllerOptions {
            personality,
            ..Default::default()
        },
        viommu: false,
        // As before the boot's main job was split out: the QD32 reads too.
        checks: nvme_guest::Checks::Full,
    };
    nvme_guest::run(&tools, &cfg, &mut phases).context("the stock-driver guest run")?;
    let log = std::fs::read_to_string(run_dir.join("emu-device.log")).context("reading emu-device.log")?;
    let personality_name = personality.to_string();
    ensure!(
        start_line_fields(&log).and_then(|f| f.first().copied()) == Some(personality_name.as_str()),
        "emu-device did not run the {personality} personality (emu-device.log)"
    );
    let audit: Value = log
        .lines()
        .filter_map(|l| l.split_once("hmb-audit at exit: ").map(|(_, j)| j))
        .next_back()
        .context("emu-device.log has no 'hmb-audit at exit' line")
        .and_then(|j| serde_json::from_str(j).context("the exit audit is not JSON"))?;
    std::fs::write(run_dir.join("hmb-audit.json"), serde_json::to_string_pretty(&audit)?)?;
    let u = |key: &str| {
        audit[key]
            .as_u64()
            .with_context(|| format!("hmb-audit has no {key}: {audit}"))
    };
    let lists: Vec<&Value> = audit["set_features_0d"]
        .as_array()
        .context("hmb-audit has no set_features_0d")?
        .iter()
        .filter(|c| c["ehm"] == true && c["status"] == "sct 0x0 sc 0x00")
        .collect();
    let shape = |c: &Value| (c["bytes"].clone(), c["descriptors"].clone(), c["chunk_sizes"].clone());
    let probe_list = lists.first().context("no successful Set Features 0Dh EHM=1")?;
    ensure!(
        lists.iter().all(|c| shape(c) == shape(probe_list)),
        "the descriptor list changed: {lists:?}"
    );
    ensure!(
        lists.iter().skip(1).all(|c| c["returned"] == true),
        "a re-enable was not a Memory Return of the same list: {lists:?}"
    );
    ensure!(audit["c0h_received"] == false, "a C0h reached the controller: {audit}");
    ensure!(u("vendor_feature_commands")? == 0, "vendor commands: {audit}");
    ensure!(
        u("violations")? == 0,
        "the host wrote into the controller's HMB: {}",
        audit["first_violations"]
    );
    ensure!(
        u("mr_reenables")? >= 2,
        "reset_controller and the recovery from CFS should each re-enable with MR=1: {audit}"
    );
    ensure!(u("pages_checked")? > 0, "no page checked: {audit}");
    // What the spec allows this controller (serve-nvme's default sizes, as the
    // harness starts it, under the personality): checked from its view of the list.
    let lim = personality.apply(hmb_nvme::ControllerConfig::default());
    let chunks: Vec<(u64, u64)> = probe_list["chunk_sizes"]
        .as_array()
        .context("no chunk sizes")?
        .iter()
        .map(|c| (c["bytes"].as_u64().unwrap_or(0), c["count"].as_u64().unwrap_or(0)))
        .collect();
    let (bytes, count) = (
        probe_list["bytes"].as_u64().unwrap_or(0),
        probe_list["descriptors"].as_u64().unwrap_or(0),
    );
    ensure!(
        (lim.hmmin_bytes..=lim.hmpre_bytes).contains(&bytes)
            && (lim.hmmaxd == 0 || count <= u64::from(lim.hmmaxd))
            && chunks.iter().all(|&(b, _)| b >= lim.hmminds_bytes),
        "the list {probe_list} breaks {personality}'s limits (HMMIN {}, HMPRE {}, HMMAXD {}, HMMINDS {})",
        lim.hmmin_bytes,
        lim.hmpre_bytes,
        lim.hmmaxd,
        lim.hmminds_bytes
    );
    Ok(json!({
        "personality": personality.name(),
        "driver": "stock",
        "probe_list": shape(probe_list).2,
        "descriptors": probe_list["descriptors"],
        "hmb_bytes": probe_list["bytes"],
        "enables": u("enables")?,
        "mr_reenables": u("mr_reenables")?,
        "checks": u("checks")?,
        "pages_checked": u("pages_checked")?,
        "c0h_received": audit["c0h_received"],
        "vendor_feature_commands": u("vendor_feature_commands")?,
        "violations": u("violations")?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_line_fields_are_read_in_order() {
        let log = "[x INFO hmb_emu_device::vfio_user::nvme] emu-device serving an NVMe controller (stock, c producer, timing none): vfio-user /s";
        assert_eq!(start_line_fields(log), Some(vec!["stock", "c producer", "timing none"]));
        assert_eq!(start_line_fields("no start line"), None);
    }

    #[test]
    fn the_shared_bodies_are_the_nvme_ones() {
        assert_eq!(shared::stream_body::<NvmeDevice>("--follow"), stream_body("--follow"));
    }
}
