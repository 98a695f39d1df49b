//! nvme scenarios for the lock paths of the module and the series that no
//! other scenario takes (issue 32): the module removed while the driver
//! resets the controller, and the daemon's REINIT racing back-to-back
//! `reset_controller`s. On a lockdep kernel (6.12-debug) the lock orders
//! these paths take are checked whichever way the race goes in a run;
//! on every kernel the outcome is the same.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use hmb_harness::guest_script::files;
use hmb_harness::journal_truth;
use hmb_harness::nvme_guest;
use hmb_harness::nvme_session::{NvmeGuestOptions, NvmeSession};
use hmb_trace_file::MappedTrace;
use serde_json::{json, Value};

use super::nvme_io::check_io;
use crate::env::{Device, Env, FINISH};
use crate::outcome::{daemon_error, kernel_log};

const STARTED: Duration = Duration::from_secs(90);

/// How many times each race is run, each at another offset.
const ROUNDS: usize = 3;

/// `nvme-hmb-trace.ko` removed while the driver resets the controller, three
/// times, the rmmod started 0, 0.1 and 0.3 s after the `reset_controller`
/// write. The module's exit unregisters its client from the series
/// (`nvme_hmb_trace_unregister`: the slice's client_lock, the client's
/// `remove`, which unregisters the node) while the reset work marks the
/// ring FROZEN and calls the client's `reset` under the same client_lock,
/// or finds no client. Each rmmod and each reset succeeds, the node goes,
/// and the module loaded again gets the slice back (the series replays it):
/// the ring is FROZEN whichever came first, so the daemon (`--follow`)
/// REINITs and traces the next epoch. The I/O loop runs throughout and
/// never fails. (rmmod is refused while the node is open, so the daemon
/// of the first epoch is stopped before the races.)
pub fn rmmod_during_reset(env: &Env) -> Result<Value> {
    let body = "load_nvme\nload_module\nio_start\nstart_daemon\nsleep 1\nstop_daemon\n\
         for delay in 0 0.1 0.3; do\n\
             echo 1 > /sys/class/nvme/nvme0/reset_controller &\n\
             r=$!\n\
             sleep $delay\n\
             rmmod nvme_hmb_trace; rm_rc=$?\n\
             wait $r; reset_rc=$?\n\
             wait_live\n\
             echo \"HMBT-RACE rmmod=$rm_rc reset=$reset_rc node=$([ -e /dev/nvme-hmb-trace0 ] && echo present || echo gone)\"\n\
             load_module\n\
         done\n\
         rm -f \"/tmp/$TRACE\"\n\
         start_daemon --follow\n\
         sleep 2\n\
         io_stop\nsleep 1\nstop_daemon\ncollect\nmark collected\nwait_file journal_taken\nexit 0\n";
    let mut s = env.start_nvme("nvme_rmmod_in_reset", body, &NvmeGuestOptions::default())?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.wait_share_file("collected", Duration::from_secs(240))?;
    s.signal("journal_taken")?;
    let rc = s.finish(FINISH)?;
    let console = std::fs::read_to_string(s.run_dir.join("console.log"))?;
    let races: Vec<String> = console
        .lines()
        .filter_map(|l| l.split("HMBT-RACE ").nth(1))
        .map(|l| l.trim().to_string())
        .collect();
    ensure!(
        races.len() == ROUNDS && races.iter().all(|r| r == "rmmod=0 reset=0 node=gone"),
        "rmmod during reset: {races:?}"
    );
    // trace.bin holds only the daemon started after the last reload.
    let traced = trace_records(&s)?;
    ensure!(traced > 0, "the module loaded again traced nothing");
    check_io(&s)?;
    Ok(json!({
        "guest_rc": rc,
        "races": races,
        "traced_after_reload": traced > 0,
        "daemon_exit_codes": s.daemon_exit_codes(),
        "daemon_error": daemon_error(&s.run_dir),
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, &[]),
    }))
}

/// Back-to-back `reset_controller`s under I/O while the daemon streams with
/// `--follow`: after each reset the daemon drains the FROZEN ring and
/// REINITs (the core's device lock, then the series' t->lock; the advert
/// goes out from a work item under advert_lock), which lands in the next
/// reset (the reset work's advert_lock and t->lock in
/// `nvme_hmb_trace_start`, the lockless disable in `nvme_dev_disable`). A
/// REINIT whose advert the reset cancelled or held back stays pending and
/// is sent once the controller is LIVE again. However the races fall, the
/// trace equals the controller's journal (every epoch frozen, nothing lost
/// uncounted), the controller adopts the last generation the daemon asked
/// for, and the I/O loop never fails.
pub fn reinit_during_reset(env: &Env) -> Result<Value> {
    let body = "load_nvme\nload_module\nio_start\nstart_daemon --follow\n\
         wait_file resets\n\
         for i in 1 2 3; do echo 1 > /sys/class/nvme/nvme0/reset_controller || fail \"reset_controller $i\"; done\n\
         wait_live\n\
         # The daemon drains the last FROZEN and REINITs: wait until the ring is live.\n\
         t=/sys/class/nvme-hmb-trace/nvme-hmb-trace0\n\
         i=0; while [ $(( $(cat $t/flags) & 2 )) -ne 0 ]; do i=$((i + 1)); [ $i -lt 300 ] || fail \"ring still FROZEN 30 s after the resets\"; sleep 0.1; done\n\
         note last_epoch \"$(cat $t/epoch)\"\n\
         mark resets.done\n\
         wait_stop\nio_stop\nsleep 1\nstop_daemon\ncollect\nmark collected\nwait_file journal_taken\nexit 0\n";
    let mut s = env.start_nvme("nvme_reinit_in_reset", body, &NvmeGuestOptions::default())?;
    s.wait_share_file(files::STARTED, STARTED)?;
    s.run_for(1.0)?;
    s.signal("resets")?;
    s.wait_share_file("resets.done", STARTED)?;
    // The last REINIT's advert is sent once the controller is LIVE.
    // Read from the share: the run folder gets the notes at the end.
    let live_notes = std::fs::read_to_string(s.share_file(nvme_guest::files::RESULTS)).unwrap_or_default();
    let asked: u64 = nvme_guest::parse_results(&live_notes)
        .get("last_epoch")
        .context("the guest noted no last_epoch")?
        .trim()
        .parse()
        .context("last_epoch is not a number")?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let st = s.status()?;
        let adopted = st.pointer("/trace/adopted_generation").and_then(Value::as_u64);
        if adopted == Some(asked) {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the controller did not adopt generation {asked}, the daemon's last REINIT, within 30 s (adopted {adopted:?})"
        );
        s.run_for(0.2)?;
    }
    s.run_for(1.0)?;
    s.signal(files::STOP)?;
    s.wait_share_file("collected", STARTED)?;
    let journal = s.journal()?;
    s.signal("journal_taken")?;
    let rc = s.finish(FINISH)?;
    let truth = journal_truth::check(&s.run_dir.join(files::TRACE), &journal)?;
    ensure!(
        truth.passed(),
        "trace.bin differs from the journal: {}",
        truth.summary()
    );
    ensure!(
        truth.epochs.len() >= 2,
        "three resets but one epoch: {}",
        truth.summary()
    );
    check_io(&s)?;
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": s.daemon_exit_codes(),
        // How many epochs depends on where each REINIT fell: not a fact.
        "truth": {
            "passed": truth.passed(),
            "epochs_at_least_two": truth.epochs.len() >= 2,
            "every_epoch_but_the_last_frozen_by_controller": journal.frozen.len() + 1 >= truth.epochs.len(),
            "uncounted_gaps": truth.uncounted_gaps.len(),
            "missing_at_end": truth.missing.len(),
            "duplicates": truth.duplicates,
            "mismatches": truth.mismatches.len() + truth.unknown.len(),
        },
        "kernel_log": kernel_log(&s.run_dir, Device::Nvme, &[]),
    }))
}

/// Records in the guest's trace.bin (the analyzer's record count).
fn trace_records(s: &NvmeSession) -> Result<u64> {
    let trace = s.run_dir.join(files::TRACE);
    let file = MappedTrace::open(&trace).with_context(|| format!("reading {}", trace.display()))?;
    let mut records = 0;
    for item in file.items() {
        if !item?.is_marker() {
            records += 1;
        }
    }
    Ok(records)
}
