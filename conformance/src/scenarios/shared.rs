//! The scenarios that run on both devices with the same steps, written once
//! over [`Side`]: a damaged or newer header before the daemon starts, an
//! unknown flag mid-stream, SIGKILLs of the daemon, a hostile record. Each
//! device file implements `Side` for its guest (how the script brings the
//! trace up and winds it down, how the device produces, what the trace is
//! checked against); both reduce to the same outcome, so both devices share
//! its snapshot. `streaming` and `frozen_*` stay in the device files: their
//! device steps differ (an injected reset against the driver's own
//! `reset_controller`, the I/O loop's timeout on nvme).

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use hmb_emu_device::control::Fault;
use hmb_harness::guest::{Guest, GuestDevice};
use hmb_harness::guest_script::files;
use serde_json::{json, Value};

use crate::env::{Device, Env};
use crate::outcome::{daemon_error, kernel_log};

/// A trace's verdict against its device's ground truth.
pub(crate) struct Verdict {
    pub passed: bool,
    pub summary: String,
    /// `outcome::truth_facts` of the report.
    pub facts: Value,
}

/// What a shared scenario needs of a device's guest.
pub(crate) trait Side: GuestDevice + Sized {
    const DEVICE: Device;
    /// How long the guest may take to its first rendezvous.
    const STARTED: Duration;
    /// Script lines that bring the module up (on nvme: the driver, the
    /// module and the I/O loop).
    const UP: &'static str;
    /// Script lines after `wait_stop`: stop the daemon, hand the files over.
    const DOWN: &'static str;
    /// What `wind_down` leaves to check the trace against.
    type Truth;

    fn start(env: &Env, name: &str, body: &str) -> Result<Guest<Self>>;
    /// Start the device's production (ivshmem: a firmware workload; nvme:
    /// nothing, the guest's I/O loop is the production).
    fn produce(g: &mut Guest<Self>, workload: &str, seed: u64, rate: u64) -> Result<()>;
    fn inject(g: &mut Guest<Self>, fault: Fault) -> Result<()>;
    /// Stop: production ends, the ground truth is taken, the guest powers
    /// off. The truth and the guest's exit code.
    fn wind_down(g: &mut Guest<Self>) -> Result<(Self::Truth, i32)>;
    /// The end of a run whose daemon has already stopped and whose trace is
    /// not checked. The guest's exit code.
    fn finish_unchecked(g: &mut Guest<Self>) -> Result<i32>;
    fn check(g: &Guest<Self>, truth: &Self::Truth) -> Result<Verdict>;
    /// Device checks after every shared scenario (nvme: the I/O loop).
    fn after(g: &Guest<Self>) -> Result<()>;
}

/// Run `name` if it is one of the shared scenarios.
pub(crate) fn run<D: Side>(env: &Env, name: &str) -> Option<Result<Value>> {
    if let Some(fault) = super::header_faults::header_fault_of(name) {
        return Some(header_fault::<D>(env, name, fault));
    }
    match name {
        "unknown_flag" => Some(unknown_flag::<D>(env)),
        "crash_safety" => Some(crash_safety::<D>(env)),
        "hostile_firmware" => Some(hostile::<D>(env)),
        _ => None,
    }
}

/// Script body: stream until the host says stop.
pub(crate) fn stream_body<D: Side>(daemon_args: &str) -> String {
    format!("{}start_daemon {daemon_args}\nwait_stop\n{}", D::UP, D::DOWN)
}

fn kernel_log_of<D: Side>(g: &Guest<D>) -> Value {
    kernel_log(&g.run_dir, D::DEVICE, &[])
}

/// A damaged or newer header before the daemon starts.
fn header_fault<D: Side>(env: &Env, name: &str, fault: Fault) -> Result<Value> {
    let body = format!(
        "{}mark loaded\nwait_file go\nstart_daemon\nwait_stop\n{}",
        D::UP,
        D::DOWN
    );
    let mut g = D::start(env, name, &body)?;
    g.wait_share_file("loaded", D::STARTED)?;
    D::produce(&mut g, "ssd", 9, 2000)?;
    g.run_for(0.3)?;
    D::inject(&mut g, fault)?;
    g.signal("go")?;
    g.wait_share_file(files::STARTED, D::STARTED)?;
    g.run_for(1.0)?;
    let (truth, rc) = D::wind_down(&mut g)?;
    let codes = g.daemon_exit_codes();
    let mut out = json!({
        "guest_rc": rc,
        "daemon_exit_codes": codes,
        "daemon_error": daemon_error(&g.run_dir),
        "kernel_log": kernel_log_of(&g),
    });
    if codes == [0] {
        let v = D::check(&g, &truth)?;
        ensure!(v.passed, "{}", v.summary);
        out["truth"] = v.facts;
    }
    D::after(&g)?;
    Ok(out)
}

/// A flag bit ABI v1 does not define appears mid-stream: the daemon logs it
/// once and keeps streaming, losing nothing.
fn unknown_flag<D: Side>(env: &Env) -> Result<Value> {
    let mut g = D::start(env, "unknown_flag", &stream_body::<D>(""))?;
    g.wait_share_file(files::STARTED, D::STARTED)?;
    D::produce(&mut g, "ssd", 29, 3000)?;
    g.run_for(0.5)?;
    D::inject(&mut g, Fault::UnknownFlag)?;
    g.run_for(1.0)?;
    let (truth, rc) = D::wind_down(&mut g)?;
    let v = D::check(&g, &truth)?;
    ensure!(v.passed, "{}", v.summary);
    D::after(&g)?;
    let stderr = std::fs::read_to_string(g.run_dir.join(files::DAEMON_STDERR)).unwrap_or_default();
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": g.daemon_exit_codes(),
        "unknown_flag_logged_once": stderr.matches("unknown bits 0x200").count() == 1,
        "truth": v.facts,
        "kernel_log": kernel_log_of(&g),
    }))
}

/// Eight SIGKILLs of the daemon at random points, each followed by a
/// restart: trace.bin must hold every record exactly once.
fn crash_safety<D: Side>(env: &Env) -> Result<Value> {
    let body = format!(
        "{}\
         i=0\n\
         while [ $i -lt 8 ]; do\n\
             start_daemon\n\
             sleep 0.$((RANDOM % 9 + 1))\n\
             kill -9 $daemon; wait $daemon\n\
             i=$((i + 1))\n\
         done\n\
         mark kills.done\n\
         start_daemon\nwait_stop\n{}",
        D::UP,
        D::DOWN
    );
    let mut g = D::start(env, "crash_safety", &body)?;
    g.wait_share_file(files::STARTED, D::STARTED)?;
    D::produce(&mut g, "sizes", 13, 3000)?;
    g.wait_share_file("kills.done", Duration::from_secs(120))?;
    g.run_for(0.5)?;
    let (truth, rc) = D::wind_down(&mut g)?;
    let v = D::check(&g, &truth)?;
    ensure!(v.passed, "{}", v.summary);
    D::after(&g)?;
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes_after_kills": g.daemon_exit_codes(),
        "truth": v.facts,
        "kernel_log": kernel_log_of(&g),
    }))
}

/// A record with a lying length: the daemon stops cleanly, the kernel log
/// stays clean.
fn hostile<D: Side>(env: &Env) -> Result<Value> {
    let mut g = D::start(env, "hostile_firmware", &stream_body::<D>(""))?;
    g.wait_share_file(files::STARTED, D::STARTED)?;
    D::produce(&mut g, "ssd", 19, 2000)?;
    g.run_for(0.5)?;
    D::inject(&mut g, Fault::Hostile)?;
    g.wait_share_file(files::DAEMON_RC, Duration::from_secs(30))
        .context("the daemon did not stop on a hostile record")?;
    let rc = D::finish_unchecked(&mut g)?;
    Ok(json!({
        "guest_rc": rc,
        "daemon_exit_codes": g.daemon_exit_codes(),
        "daemon_error": daemon_error(&g.run_dir),
        "kernel_log": kernel_log_of(&g),
    }))
}
