//! Issue 26 in the trace guest run (`cargo xtask boot`, no extra boot): after
//! the trace checks, with nvme unloaded, the guest loads a driver once per
//! phase below against emu-device's controller turned into another
//! personality (serve-nvme's control request `personality`, honoured only
//! while no driver runs the controller). Each load reads, resets the
//! controller (`reset_controller`: an MR=1 re-enable the controller audits),
//! loads nvme-hmb-trace.ko with the series' driver, and unloads. At each
//! checkpoint the host takes the controller's HMB audit of the load before
//! (the switch starts a fresh one), so every load is judged on its own:
//!
//! - the differential: the kernel's stock nvme.ko and the series' nvme.ko
//!   on the `stock` personality send the same Set Features 0Dh lists (size,
//!   descriptor count, chunk sizes), no command with FID C0h and no vendor
//!   feature, write nothing into the controller's HMB, and the series
//!   reserves no slice (no `HMB trace slice` line, no trace device). These
//!   two loads take all three ways a driver loses and regains its HMB, each
//!   judged on its own part of the audit (nvme_audit_paths.rs): the
//!   `reset_controller`, then a device-side fatal status (the host sets
//!   CSTS.CFS at a checkpoint; the read after it times out and the driver
//!   resets), then the driver's unbind and bind (a new HMB, MR=0); the
//!   series' Set Features 0Dh commands must equal the stock driver's path by
//!   path;
//! - `refusing-probe`: the advert is refused, the driver says so, no trace
//!   device, and nothing is written into the HMB after the refusal (across
//!   the reset too: issue 26 point 2);
//! - `small-hmb` (HMPRE = HMMIN) and `few-descriptors` (HMMAXD = 4): no
//!   slice, the log names the limit, no C0h, the list inside the limits;
//! - `big-chunks` (HMMINDS = 2 MiB): a slice (every chunk at least HMMINDS)
//!   adopted, one trace device;
//! - `refusing-reinit`: the slice adopted at probe, the daemon (`--follow`)
//!   drains the epoch the reset froze and REINITs, the controller refuses
//!   the re-advert: the reader is detached and the daemon exits 10 (device
//!   gone, docs/daemon.md), the driver says why, and nothing is written into
//!   the dead slice afterwards.
//!
//! Every load's list must keep its personality's HMPRE, HMMIN, HMMAXD and
//! HMMINDS, as the controller saw it.
//!
//! Then the pair phase (two controllers in one guest): a second controller,
//! a second emu-device with the `stock` personality behind its own root
//! port, kept from every driver by `driver_override` until then (its audit
//! at the pair checkpoint must show no HMB ever set), and the first one
//! made `tracing` again. The guest
//! loads nvme-hmb-trace.ko BEFORE the series' nvme.ko, then reloads it
//! after, reads and resets both: only the tracing controller gets a slice
//! and the one trace device (both times), and the stock controller's audit
//! is the stock driver's (the same list as the `stock` phase with the
//! kernel's own driver, no C0h, no vendor feature, no host write into its
//! HMB across the MR=1 re-enable).

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use hmb_emu_device::control::{Fault, Request};
use hmb_nvme_trace::Personality;
use serde_json::Value;

use crate::emu::nvme::NvmeDevice;
use crate::guest_script::Script;
use crate::nvme_audit_paths::{self as paths, PathOutcome};
use crate::qemu::Vm;

pub use crate::nvme_audit_paths::Path as HmbPath;

/// Which nvme.ko a phase loads: `$share/mods/<file>.ko`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// The kernel's own nvme.ko (staged as nvme-stock.ko).
    Stock,
    /// The series' nvme.ko.
    Series,
}

impl Driver {
    pub fn file(self) -> &'static str {
        match self {
            Driver::Stock => "nvme-stock",
            Driver::Series => "nvme",
        }
    }
}

/// One driver load against one personality.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    pub personality: Personality,
    pub driver: Driver,
    /// The ways the load loses and regains its HMB, in order: always the
    /// `reset_controller` first; the differential's loads take all three.
    pub paths: &'static [HmbPath],
}

const RESET_ONLY: &[HmbPath] = &[HmbPath::Reset];

pub const PHASES: [Phase; 7] = [
    Phase {
        personality: Personality::Stock,
        driver: Driver::Stock,
        paths: paths::ALL,
    },
    Phase {
        personality: Personality::Stock,
        driver: Driver::Series,
        paths: paths::ALL,
    },
    Phase {
        personality: Personality::RefusingProbe,
        driver: Driver::Series,
        paths: RESET_ONLY,
    },
    Phase {
        personality: Personality::SmallHmb,
        driver: Driver::Series,
        paths: RESET_ONLY,
    },
    Phase {
        personality: Personality::FewDescriptors,
        driver: Driver::Series,
        paths: RESET_ONLY,
    },
    Phase {
        personality: Personality::BigChunks,
        driver: Driver::Series,
        paths: RESET_ONLY,
    },
    Phase {
        personality: Personality::RefusingReinit,
        driver: Driver::Series,
        paths: RESET_ONLY,
    },
];

/// The daemon's exit code when its device goes away (docs/daemon.md), which
/// a refused REINIT looks like to the reader.
pub const DAEMON_DEVICE_GONE: u64 = 10;

/// The last checkpoint: the host takes the last phase's audit.
const END: &str = "persona-end";

/// The pair phase's checkpoint (and its log's stem in the share).
const PAIR: &str = "persona-pair";

impl Phase {
    /// Its checkpoint (the guest waits there for the switch) and log's stem.
    pub fn name(&self) -> String {
        format!("persona-{}-{}", self.personality.name(), self.driver.file())
    }

    /// The checkpoint where `path` (not the first) starts.
    pub fn path_checkpoint(&self, path: HmbPath) -> String {
        format!("{}-{}", self.name(), path.name())
    }
}

/// How many loads take the fatal path: each leaves one
/// `nvme_guest::FATAL_DRIVER_LINE` in the guest's kernel log.
pub fn fatal_loads() -> usize {
    PHASES.iter().filter(|p| p.paths.contains(&HmbPath::Fatal)).count()
}

/// The guest script's part (harness/guest-scripts/nvme-personalities.sh),
/// run after the trace checks with nvme unloaded: its parameters, then the
/// file. The script calls its `personas` after the trace removal.
/// `peer_port`: the PCI address of the root port the second (stock)
/// controller sits behind, or `None` without one (no pair phase).
pub fn guest_script(script: Script, peer_port: Option<&str>) -> Script {
    script
        .set("PERSONA_PHASES", phase_lines())
        .set("PERSONA_IO_TIMEOUT_MS", crate::nvme_guest::FATAL_IO_TIMEOUT_S * 1000)
        .set("PERSONA_END", END)
        .set("PERSONA_PAIR", PAIR)
        .set("PEER_PORT", peer_port.unwrap_or_default())
        .file(&crate::guest_script::NVME_PERSONALITIES)
}

/// The script's phase lines: "personality driver path,path,...".
fn phase_lines() -> String {
    PHASES
        .iter()
        .map(|p| {
            let paths: Vec<&str> = p.paths.iter().map(|x| x.name()).collect();
            format!("{} {} {}\n", p.personality.name(), p.driver.file(), paths.join(","))
        })
        .collect()
}

/// What one phase left: the controller's audit and the guest's kernel log.
#[derive(Debug, Clone)]
pub struct PhaseAudit {
    pub phase: Phase,
    pub audit: Value,
    /// The audit at the start of each path after the first.
    pub marks: Vec<Value>,
}

/// The pair phase's two audits: the first controller (made `tracing`) and
/// the second one (`stock`).
#[derive(Debug, Clone)]
pub struct PairAudit {
    pub tracing: Value,
    pub stock: Value,
    /// The second controller's audit at the pair checkpoint: no driver may
    /// have given it an HMB before (its firmware, SeaBIOS, enables it at
    /// boot but never sets an HMB).
    pub stock_before: Value,
}

/// Everything the persona checkpoints collected.
#[derive(Debug, Clone)]
pub struct Audits {
    pub phases: Vec<PhaseAudit>,
    pub pair: PairAudit,
}

fn audit(dev: &mut NvmeDevice, run_dir: &Path, name: &str) -> Result<Value> {
    let audit = dev.request(&Request::HmbAudit)?;
    std::fs::write(
        run_dir.join(format!("{name}.audit.json")),
        serde_json::to_string_pretty(&audit)?,
    )?;
    Ok(audit)
}

/// A checkpoint of the persona script, and what the host does there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// A load starts: audit the load before, switch the personality.
    Phase(usize),
    /// A path after the first starts within a load: audit so far; for the
    /// fatal path, fail the controller (CSTS.CFS).
    Path(usize, HmbPath),
    Pair,
    End,
}

/// Every checkpoint, in the script's order.
fn stops() -> Vec<(String, Stop)> {
    let mut out = Vec::new();
    for (i, p) in PHASES.iter().enumerate() {
        out.push((p.name(), Stop::Phase(i)));
        out.extend(
            p.paths
                .iter()
                .skip(1)
                .map(|&x| (p.path_checkpoint(x), Stop::Path(i, x))),
        );
    }
    out.push((PAIR.to_string(), Stop::Pair));
    out.push((END.to_string(), Stop::End));
    out
}

/// Answer the guest's persona checkpoints: at a load's, take the audit of
/// the load before (if any), make the controller the next personality,
/// answer; at a path's, take the audit so far (and for the fatal path set
/// CSTS.CFS, checked in the controller's status). At the pair checkpoint
/// the first controller becomes `tracing`, and the second one's (`dev`'s
/// peer) audit so far is taken: the guest kept it unbound, so no HMB may
/// have been set on it.
pub fn serve(vm: &mut Vm, dev: &mut NvmeDevice, share: &Path, run_dir: &Path) -> Result<Audits> {
    let mut phases = Vec::new();
    let mut marks = Vec::new();
    let mut pair = None;
    let mut stock_before = None;
    for (name, stop) in stops() {
        crate::guest::share_wait::wait_share_file(vm, share, &name, PHASE_TIMEOUT, || dev.check_alive())
            .with_context(|| format!("waiting for the guest at {name}"))?;
        let ended = match stop {
            Stop::Phase(i) => i.checked_sub(1),
            Stop::Pair => Some(PHASES.len() - 1),
            Stop::Path(..) | Stop::End => None,
        };
        if let Some(j) = ended {
            let phase = PHASES[j];
            let audit = audit(dev, run_dir, &phase.name())?;
            phases.push(PhaseAudit {
                phase,
                audit,
                marks: std::mem::take(&mut marks),
            });
        }
        match stop {
            Stop::Phase(i) => {
                let next = PHASES[i].personality;
                dev.request(&Request::Personality { personality: next })
                    .with_context(|| format!("making the controller {next}"))?;
            }
            Stop::Path(i, path) => {
                marks.push(audit(
                    dev,
                    run_dir,
                    &format!("{}-before", PHASES[i].path_checkpoint(path)),
                )?);
                if path == HmbPath::Fatal {
                    dev.request(&Request::Inject(Fault::Reset))
                        .context("failing the controller (CSTS.CFS)")?;
                    crate::nvme_guest::check_failed(&dev.status()?)
                        .with_context(|| format!("{name}: the injected failure"))?;
                }
            }
            Stop::Pair => {
                dev.request(&Request::Personality {
                    personality: Personality::Tracing,
                })
                .context("making the controller tracing for the pair phase")?;
                stock_before = Some(audit(dev.peer_mut()?, run_dir, &format!("{PAIR}-stock-before"))?);
            }
            Stop::End => {
                pair = Some(PairAudit {
                    tracing: audit(dev, run_dir, &format!("{PAIR}-tracing"))?,
                    stock: audit(dev.peer_mut()?, run_dir, &format!("{PAIR}-stock"))?,
                    stock_before: stock_before
                        .take()
                        .context("no audit of the stock controller before the pair")?,
                });
            }
        }
        std::fs::write(share.join(format!("{name}.ok")), b"")?;
    }
    Ok(Audits {
        phases,
        pair: pair.context("no audit of the pair phase")?,
    })
}

/// One phase as the report shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseOutcome {
    pub personality: String,
    pub driver: String,
    pub hmb_bytes: u64,
    pub descriptors: u64,
    pub c0h: bool,
    pub slice: bool,
    pub trace_devices: u64,
    pub mr_reenables: u64,
    pub pages_checked: u64,
    pub violations: u64,
    /// The driver's line that says why there is no slice (or that there is one).
    pub driver_line: String,
    /// Each way the load lost and regained its HMB, on its own part of the audit.
    pub paths: Vec<PathOutcome>,
}

impl PhaseOutcome {
    pub fn summary(&self) -> String {
        format!(
            "{} with {}: {} bytes in {} descriptors, C0h {}, slice {}, {} trace device(s), {} MR=1 re-enable(s), {} pages checked, {} violations",
            self.personality,
            self.driver,
            self.hmb_bytes,
            self.descriptors,
            if self.c0h { "sent" } else { "none" },
            if self.slice { "yes" } else { "no" },
            self.trace_devices,
            self.mr_reenables,
            self.pages_checked,
            self.violations
        ) + &self
            .paths
            .iter()
            .map(|x| {
                format!(
                    "; {}: {} enable(s), {} with MR=1, {} pages checked, {} violations",
                    x.path.name(),
                    x.enables,
                    x.mr_reenables,
                    x.pages_checked,
                    x.violations
                )
            })
            .collect::<String>()
    }
}

/// The successful EHM=1 lists of an audit, the first (the probe's) first.
fn enabled_lists(audit: &Value) -> Result<Vec<&Value>> {
    Ok(audit["set_features_0d"]
        .as_array()
        .context("the audit has no set_features_0d")?
        .iter()
        .filter(|c| c["ehm"] == true && c["status"] == "sct 0x0 sc 0x00")
        .collect())
}

fn shape(c: &Value) -> (Value, Value, Value) {
    (c["bytes"].clone(), c["descriptors"].clone(), c["chunk_sizes"].clone())
}

/// Check every phase (see the module's comment). `results` are the guest's
/// KEY=VALUE notes; the phase logs are `share/<phase>.log`.
pub fn check(
    audits: &[PhaseAudit],
    share: &Path,
    results: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<PhaseOutcome>> {
    ensure!(
        audits.len() == PHASES.len(),
        "{} of {} personality phases audited",
        audits.len(),
        PHASES.len()
    );
    let mut out = Vec::new();
    let mut stock_list = None;
    let mut stock_paths = None;
    for PhaseAudit { phase, audit, marks } in audits {
        let p = phase.personality;
        let name = phase.name();
        let log = std::fs::read_to_string(share.join(format!("{name}.log")))
            .with_context(|| format!("the guest left no {name}.log"))?;
        let u = |key: &str| {
            audit[key]
                .as_u64()
                .with_context(|| format!("{name}: the audit has no {key}: {audit}"))
        };
        let lists = enabled_lists(audit)?;
        let probe = *lists
            .first()
            .with_context(|| format!("{name}: no HMB enabled: {audit}"))?;
        ensure!(
            lists.iter().all(|c| shape(c) == shape(probe)),
            "{name}: the list changed across the reset: {lists:?}"
        );
        let segs =
            paths::segments(phase.paths, marks, audit).with_context(|| format!("{name}: the audits of its paths"))?;
        if p == Personality::Stock {
            for seg in &segs {
                seg.check(probe, &name)?;
            }
        } else {
            ensure!(
                lists.iter().skip(1).all(|c| c["returned"] == true) && u("mr_reenables")? >= 1,
                "{name}: reset_controller did not give the same HMB back with MR=1: {audit}"
            );
        }
        let fatals = log.matches(crate::nvme_guest::FATAL_DRIVER_LINE).count();
        let want_fatals = usize::from(phase.paths.contains(&HmbPath::Fatal));
        ensure!(
            fatals == want_fatals,
            "{name}: {fatals} '{}' lines in the load's kernel log, want {want_fatals}:\n{log}",
            crate::nvme_guest::FATAL_DRIVER_LINE
        );
        ensure!(
            u("violations")? == 0,
            "{name}: the host wrote into the controller's HMB: {}",
            audit["first_violations"]
        );
        ensure!(u("pages_checked")? > 0, "{name}: no page checked: {audit}");
        // The personality's limits, as serve-nvme is started (default sizes).
        let lim = p.apply(hmb_nvme::ControllerConfig::default());
        let (bytes, count) = (
            probe["bytes"].as_u64().unwrap_or(0),
            probe["descriptors"].as_u64().unwrap_or(0),
        );
        let chunks: Vec<u64> = probe["chunk_sizes"]
            .as_array()
            .context("no chunk sizes")?
            .iter()
            .map(|c| c["bytes"].as_u64().unwrap_or(0))
            .collect();
        ensure!(
            (lim.hmmin_bytes..=lim.hmpre_bytes).contains(&bytes)
                && (lim.hmmaxd == 0 || count <= u64::from(lim.hmmaxd))
                && chunks.iter().all(|&b| b >= lim.hmminds_bytes),
            "{name}: the list {probe} breaks {p}'s limits (HMMIN {}, HMPRE {}, HMMAXD {}, HMMINDS {})",
            lim.hmmin_bytes,
            lim.hmpre_bytes,
            lim.hmmaxd,
            lim.hmminds_bytes
        );
        let c0h = audit["c0h_received"] == true;
        let slice = log.contains("HMB trace slice:");
        let devices: u64 = match phase.driver {
            Driver::Stock => 0,
            Driver::Series => results
                .get(&format!("persona-{p}-trace-devices"))
                .with_context(|| format!("{name}: the guest counted no trace devices"))?
                .parse()
                .context("trace device count")?,
        };
        let find = |pat: &str| log.lines().find(|l| l.contains(pat)).map(str::to_string);
        let driver_line = match (phase.driver, p) {
            (Driver::Stock, _) => String::new(),
            (_, Personality::Stock) => String::new(),
            (_, Personality::RefusingProbe) => find("trace slice not adopted by the controller")
                .with_context(|| format!("{name}: the driver did not log the refusal:\n{log}"))?,
            (_, Personality::SmallHmb) => find("exceed the HMB size")
                .with_context(|| format!("{name}: no 'no trace slice: ... exceed the HMB size' line:\n{log}"))?,
            (_, Personality::FewDescriptors) => find("exceed HMMAXD")
                .with_context(|| format!("{name}: no 'no trace slice: ... exceed HMMAXD' line:\n{log}"))?,
            (_, Personality::RefusingReinit) => find("trace slice not adopted by the controller")
                .with_context(|| format!("{name}: the driver did not log the refused re-advert:\n{log}"))?,
            _ => find("HMB trace slice:").with_context(|| format!("{name}: no slice reserved:\n{log}"))?,
        };
        match (phase.driver, p) {
            (Driver::Stock, _) | (_, Personality::Stock) => {
                ensure!(
                    !c0h && u("vendor_feature_commands")? == 0,
                    "{name}: a vendor feature reached a controller that declares none: {audit}"
                );
                ensure!(
                    !slice && devices == 0,
                    "{name}: a trace slice on the stock personality:\n{log}"
                );
                match (phase.driver, &stock_list, &stock_paths) {
                    (Driver::Stock, _, _) => {
                        stock_list = Some(shape(probe));
                        stock_paths = Some(segs.clone());
                    }
                    (_, Some(stock), Some(stock_segs)) => {
                        ensure!(
                            *stock == shape(probe),
                            "{name}: the series' list {:?} differs from the stock driver's {stock:?}",
                            shape(probe)
                        );
                        paths::same_commands(stock_segs, &segs, &name)?;
                    }
                    _ => anyhow::bail!("the stock driver's phase must come first"),
                }
            }
            (_, Personality::RefusingProbe) => {
                ensure!(c0h, "{name}: the series sent no advert: {audit}");
                ensure!(
                    log.contains("trace slice dead") && devices == 0,
                    "{name}: a refused slice is not dead, or has a trace device ({devices}):\n{log}"
                );
            }
            (_, Personality::RefusingReinit) => {
                let rc: u64 = results
                    .get(&format!("persona-{p}-daemon-rc"))
                    .with_context(|| format!("{name}: the guest noted no daemon exit code"))?
                    .parse()
                    .context("daemon exit code")?;
                ensure!(
                    c0h && slice && devices == 1,
                    "{name}: expected the slice adopted at probe and one trace device ({devices}): {audit}\n{log}"
                );
                ensure!(
                    rc == DAEMON_DEVICE_GONE && log.contains("reader detached") && log.contains("trace slice dead"),
                    "{name}: after the refused REINIT the daemon exited {rc} (want {DAEMON_DEVICE_GONE}) \
                     or the log does not say the slice is dead and the reader detached:\n{log}"
                );
            }
            (_, Personality::SmallHmb | Personality::FewDescriptors) => {
                ensure!(
                    !c0h && !slice && devices == 0,
                    "{name}: a slice (or an advert) that does not fit the limits: {audit}\n{log}"
                );
            }
            _ => {
                ensure!(
                    c0h && slice && devices == 1,
                    "{name}: expected an adopted slice and one trace device ({devices}): {audit}\n{log}"
                );
            }
        }
        out.push(PhaseOutcome {
            personality: p.name().to_string(),
            driver: phase.driver.file().to_string(),
            hmb_bytes: bytes,
            descriptors: count,
            c0h,
            slice,
            trace_devices: devices,
            mr_reenables: u("mr_reenables")?,
            pages_checked: u("pages_checked")?,
            violations: u("violations")?,
            driver_line: driver_line
                .split_once("] ")
                .map_or(driver_line.as_str(), |(_, m)| m)
                .to_string(),
            paths: segs.iter().map(paths::Segment::outcome).collect(),
        });
    }
    Ok(out)
}

/// The pair phase as the report shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PairOutcome {
    /// PCI function and nvmeN of each controller in the pair phase.
    pub tracing: String,
    pub stock: String,
    /// Trace devices (all the tracing controller's) with nvme-hmb-trace.ko
    /// loaded before nvme.ko, and reloaded after it.
    pub trace_devices_before: u64,
    pub trace_devices_after: u64,
    pub stock_hmb_bytes: u64,
    pub stock_descriptors: u64,
    pub stock_mr_reenables: u64,
    pub stock_pages_checked: u64,
    pub stock_violations: u64,
    pub tracing_violations: u64,
}

impl PairOutcome {
    pub fn summary(&self) -> String {
        format!(
            "two controllers: tracing {} has the one trace device ({} with the module loaded before nvme.ko, {} after); \
             stock {} got the stock driver's list ({} bytes in {} descriptors), no C0h, {} MR=1 re-enable(s), \
             {} pages checked, {} violations (tracing: {})",
            self.tracing,
            self.trace_devices_before,
            self.trace_devices_after,
            self.stock,
            self.stock_hmb_bytes,
            self.stock_descriptors,
            self.stock_mr_reenables,
            self.stock_pages_checked,
            self.stock_violations,
            self.tracing_violations
        )
    }
}

/// The pair phase (see the module's comment). `phases` must hold the stock
/// driver's phase on the `stock` personality: its list is the reference.
pub fn check_pair(
    pair: &PairAudit,
    phases: &[PhaseAudit],
    share: &Path,
    results: &std::collections::BTreeMap<String, String>,
) -> Result<PairOutcome> {
    let get = |key: &str| {
        results
            .get(key)
            .map(|v| v.trim().to_string())
            .with_context(|| format!("pair: the guest noted no {key}"))
    };
    let (tracing_pci, tracing_ctrl) = get("persona-pair-tracing")?
        .split_once(' ')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .context("pair: persona-pair-tracing is not 'PCI nvmeN'")?;
    let (stock_pci, stock_ctrl) = get("persona-pair-stock")?
        .split_once(' ')
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .context("pair: persona-pair-stock is not 'PCI nvmeN'")?;
    let mut devices = [0u64; 2];
    for (n, when) in devices.iter_mut().zip(["before", "after"]) {
        *n = get(&format!("persona-pair-{when}-trace-devices"))?
            .parse()
            .context("pair: trace device count")?;
        let owners = get(&format!("persona-pair-{when}-trace-pci"))?;
        ensure!(
            *n == 1 && owners == tracing_pci,
            "pair, nvme-hmb-trace.ko loaded {when} nvme.ko: {n} trace device(s) of [{owners}]; \
             want one, of the tracing controller {tracing_pci} (the stock one is {stock_pci})"
        );
    }
    let log = std::fs::read_to_string(share.join(format!("{PAIR}.log")))
        .with_context(|| format!("the guest left no {PAIR}.log"))?;
    let waiting = log.find("no patched nvme driver loaded yet; attaching when one is");
    let attached = log.find("attached to the patched nvme driver");
    ensure!(
        waiting.is_some() && attached.is_some() && waiting < attached,
        "pair: the module loaded before nvme.ko did not wait for it and attach when it came up:\n{log}"
    );
    ensure!(
        log.contains(&format!("{tracing_ctrl}: HMB trace slice:")),
        "pair: no trace slice for the tracing controller {tracing_ctrl}:\n{log}"
    );
    let stock_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(&format!("{stock_ctrl}:")) && l.to_lowercase().contains("trace"))
        .collect();
    ensure!(
        stock_lines.is_empty(),
        "pair: the driver did trace work on the stock controller {stock_ctrl}: {stock_lines:?}"
    );
    let u = |audit: &Value, who: &str, key: &str| {
        audit[key]
            .as_u64()
            .with_context(|| format!("pair, {who}: the audit has no {key}: {audit}"))
    };
    let b = &pair.stock_before;
    ensure!(
        u(b, "stock before the pair", "set_features_0d_total")? == 0 && u(b, "stock before the pair", "enables")? == 0,
        "pair: a driver set an HMB on the second controller before the pair phase (driver_override did not hold): {b}"
    );
    let t = &pair.tracing;
    ensure!(
        t["c0h_received"] == true && u(t, "tracing", "violations")? == 0,
        "pair: the tracing controller's slice was not advertised, or the host wrote into its HMB: {t}"
    );
    let st = &pair.stock;
    ensure!(
        st["c0h_received"] != true && u(st, "stock", "vendor_feature_commands")? == 0,
        "pair: a vendor feature reached the stock controller: {st}"
    );
    ensure!(
        u(st, "stock", "violations")? == 0,
        "pair: the host wrote into the stock controller's HMB: {}",
        st["first_violations"]
    );
    ensure!(
        u(st, "stock", "mr_reenables")? >= 1 && u(st, "stock", "pages_checked")? > 0,
        "pair: the stock controller's HMB was not given back with MR=1 and checked: {st}"
    );
    let reference = phases
        .iter()
        .find(|p| p.phase.personality == Personality::Stock && p.phase.driver == Driver::Stock)
        .context("pair: no phase of the stock driver on the stock personality")?;
    let reference = shape(
        enabled_lists(&reference.audit)?
            .first()
            .context("pair: the stock driver's phase enabled no HMB")?,
    );
    let lists = enabled_lists(st)?;
    ensure!(
        !lists.is_empty() && lists.iter().all(|c| shape(c) == reference),
        "pair: the stock controller's lists {:?} differ from the stock driver's {reference:?}",
        lists.iter().map(|c| shape(c)).collect::<Vec<_>>()
    );
    Ok(PairOutcome {
        tracing: format!("{tracing_pci} ({tracing_ctrl})"),
        stock: format!("{stock_pci} ({stock_ctrl})"),
        trace_devices_before: devices[0],
        trace_devices_after: devices[1],
        stock_hmb_bytes: lists[0]["bytes"].as_u64().unwrap_or(0),
        stock_descriptors: lists[0]["descriptors"].as_u64().unwrap_or(0),
        stock_mr_reenables: u(st, "stock", "mr_reenables")?,
        stock_pages_checked: u(st, "stock", "pages_checked")?,
        stock_violations: u(st, "stock", "violations")?,
        tracing_violations: u(t, "tracing", "violations")?,
    })
}

/// How long the host waits for one persona checkpoint.
pub const PHASE_TIMEOUT: Duration = Duration::from_secs(180);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stock_driver_comes_first_and_every_checkpoint_is_in_the_script() {
        assert_eq!(
            (PHASES[0].personality, PHASES[0].driver),
            (Personality::Stock, Driver::Stock)
        );
        let script = guest_script(Script::new(), Some("0000:00:10.0")).build();
        // The phases, in order, as the "personality driver" lines the
        // script's personas reads, and its last checkpoint.
        assert!(
            script.contains(&format!("PERSONA_PHASES='{}'", phase_lines())),
            "{script}"
        );
        assert!(script.contains("PERSONA_PHASES='stock nvme-stock reset,fatal,rebind\nstock nvme reset,fatal,rebind\nrefusing-probe nvme reset\n"), "{script}");
        // Every path checkpoint the host waits at is one the script makes.
        for (name, _) in stops() {
            assert!(name.starts_with("persona-"), "{name}");
        }
        assert!(
            script.contains("checkpoint \"persona-$1-$2-fatal\"")
                && script.contains("checkpoint \"persona-$1-$2-rebind\"")
        );
        assert_eq!(fatal_loads(), 2);
        assert!(script.contains("PERSONA_END='persona-end'"), "{script}");
        assert!(script.contains("checkpoint \"persona-$1-$2\""), "{script}");
        assert!(script.contains("checkpoint \"$PERSONA_END\""), "{script}");
        assert!(script.contains("PEER_PORT='0000:00:10.0'") && script.contains("PERSONA_PAIR='persona-pair'"));
        assert!(script.contains("checkpoint \"$PERSONA_PAIR\""), "{script}");
        for p in PHASES {
            // The guest's checkpoint name is the host's.
            assert_eq!(
                format!("persona-{}-{}", p.personality.name(), p.driver.file()),
                p.name()
            );
        }
    }

    fn audit(c0h: bool, lists: &[(u64, u64, u64)], violations: u64) -> Value {
        let l: Vec<Value> = lists
            .iter()
            .enumerate()
            .map(|(i, &(bytes, n, chunk))| {
                serde_json::json!({"ehm": true, "status": "sct 0x0 sc 0x00", "bytes": bytes,
                    "descriptors": n, "chunk_sizes": [{"bytes": chunk, "count": n}], "returned": i > 0})
            })
            .collect();
        serde_json::json!({"set_features_0d": l, "c0h_received": c0h, "vendor_feature_commands": u64::from(c0h),
            "violations": violations, "first_violations": [], "mr_reenables": lists.len() as u64 - 1,
            "pages_checked": 100, "checks": lists.len() as u64 + 1, "set_features_0d_total": lists.len()})
    }

    const FATAL_LOG: &str = "nvme nvme0: controller is down; will reset: CSTS=0x3, PCI_STATUS=0x10";

    /// The checks fail on what they exist for: a C0h or a different list on the stock
    /// personality, a host write, a slice on a controller whose limits leave no room.
    #[test]
    fn check_refuses_each_defect() {
        let dir = tempfile::tempdir().unwrap();
        let mut results = std::collections::BTreeMap::new();
        let m = 4u64 << 20;
        let mut good = Vec::new();
        for p in PHASES {
            let (log, list, c0h, devices) = match p.personality {
                Personality::Stock => (FATAL_LOG, (32 * m / 4, 8, m), false, 0),
                Personality::RefusingProbe => (
                    "trace slice not adopted by the controller (2)\ntrace slice dead (2)",
                    (32 * m / 4, 13, m),
                    true,
                    0,
                ),
                Personality::SmallHmb => (
                    "no trace slice: 16384 KiB ring + HMMIN 4096 KiB exceed the HMB size 4096 KiB",
                    (m, 1, m),
                    false,
                    0,
                ),
                Personality::FewDescriptors => (
                    "no trace slice: 4 cache + 5 slice descriptors exceed HMMAXD 4",
                    (4 * m, 4, m),
                    false,
                    0,
                ),
                Personality::RefusingReinit => (
                    "HMB trace slice: 16384 KiB ring\ntrace slice not adopted by the controller (2)\n\
                     trace slice dead (2)\nthe device refused the trace slice: reader detached",
                    (32 * m / 4, 13, m),
                    true,
                    1,
                ),
                _ => ("HMB trace slice: 16384 KiB ring", (8 * m, 6, 2 << 20), true, 1),
            };
            std::fs::write(dir.path().join(format!("{}.log", p.name())), log).unwrap();
            if p.driver == Driver::Series {
                results.insert(format!("persona-{}-trace-devices", p.personality), devices.to_string());
            }
            let (marks, last) = match p.personality {
                Personality::Stock => crate::nvme_audit_paths::tests::three_paths(list.0, list.1, list.2),
                _ => (Vec::new(), audit(c0h, &[list, list], 0)),
            };
            good.push(PhaseAudit {
                phase: p,
                audit: last,
                marks,
            });
        }
        results.insert("persona-refusing-reinit-daemon-rc".into(), "10".into());
        let out = check(&good, dir.path(), &results).unwrap();
        assert_eq!(out.len(), PHASES.len());
        let broken = |i: usize, a: Value| {
            let mut v = good.clone();
            v[i].audit = a;
            check(&v, dir.path(), &results).unwrap_err().to_string()
        };
        let stock_list = (32 * m / 4, 8, m);
        let mut c0h = good[1].audit.clone();
        c0h["c0h_received"] = true.into();
        c0h["vendor_feature_commands"] = 1.into();
        assert!(broken(1, c0h).contains("vendor feature"));
        // The series with another list on every path.
        let mut other = good.clone();
        (other[1].marks, other[1].audit) = crate::nvme_audit_paths::tests::three_paths(4 * m, 4, m);
        let e = check(&other, dir.path(), &results).unwrap_err().to_string();
        assert!(e.contains("differs"), "{e}");
        // The series sends one more Set Features 0Dh (an EHM=0) at the unbind.
        let mut extra = good.clone();
        let cmds = extra[1].audit["set_features_0d"].as_array_mut().unwrap();
        cmds.insert(3, crate::nvme_audit_paths::tests::cmd(false, false, false, 0, 0, 0));
        extra[1].audit["set_features_0d_total"] = 5.into();
        let e = check(&extra, dir.path(), &results).unwrap_err().to_string();
        assert!(e.contains("rebind") && e.contains("differ"), "{e}");
        // The driver never saw the fatal status (no line in the load's log).
        std::fs::write(dir.path().join(format!("{}.log", PHASES[1].name())), "").unwrap();
        let e = check(&good, dir.path(), &results).unwrap_err().to_string();
        assert!(e.contains("want 1"), "{e}");
        std::fs::write(dir.path().join(format!("{}.log", PHASES[1].name())), FATAL_LOG).unwrap();
        assert!(broken(2, audit(true, &[stock_list, stock_list], 3)).contains("wrote into"));
        assert!(broken(3, audit(false, &[(8 * m, 2, m), (8 * m, 2, m)], 0)).contains("limits"));
        let mut wedged = results.clone();
        wedged.insert("persona-refusing-reinit-daemon-rc".into(), "9".into());
        let e = check(&good, dir.path(), &wedged).unwrap_err().to_string();
        assert!(e.contains("exited 9"), "{e}");
        let _ = std::fs::write(
            dir.path().join(format!("{}.log", PHASES[4].name())),
            "no trace slice: exceed HMMAXD 4\nHMB trace slice: 16384 KiB",
        );
        assert!(check(&good, dir.path(), &results)
            .unwrap_err()
            .to_string()
            .contains("does not fit"));
    }

    /// The pair checks fail on a trace device for the stock controller (or
    /// none), a C0h or a different list on the stock controller, a host
    /// write into its HMB, and a module that did not wait for nvme.ko.
    #[test]
    fn check_pair_refuses_each_defect() {
        let dir = tempfile::tempdir().unwrap();
        let m = 4u64 << 20;
        let stock_list = (32 * m / 4, 8, m);
        let phases = vec![PhaseAudit {
            phase: PHASES[0],
            audit: audit(false, &[stock_list, stock_list], 0),
            marks: Vec::new(),
        }];
        let good_log = "nvme-hmb-trace: no patched nvme driver loaded yet; attaching when one is\n\
                        nvme-hmb-trace: attached to the patched nvme driver\n\
                        nvme nvme0: HMB trace slice: 16384 KiB ring at HMB offset 33554432 in 5 chunks, FID 0xc0\n\
                        nvme nvme1: allocated 32 MiB host memory buffer.\n";
        std::fs::write(dir.path().join("persona-pair.log"), good_log).unwrap();
        let mut results = std::collections::BTreeMap::new();
        for (k, v) in [
            ("persona-pair-tracing", "0000:01:00.0 nvme0"),
            ("persona-pair-stock", "0000:02:00.0 nvme1"),
            ("persona-pair-before-trace-devices", "1"),
            ("persona-pair-before-trace-pci", "0000:01:00.0 "),
            ("persona-pair-after-trace-devices", "1"),
            ("persona-pair-after-trace-pci", "0000:01:00.0 "),
        ] {
            results.insert(k.to_string(), v.to_string());
        }
        let good = PairAudit {
            tracing: audit(true, &[(40 * m / 4, 13, m), (40 * m / 4, 13, m)], 0),
            stock: audit(false, &[stock_list, stock_list], 0),
            stock_before: serde_json::json!({"set_features_0d_total": 0, "enables": 0}),
        };
        let out = check_pair(&good, &phases, dir.path(), &results).unwrap();
        assert_eq!((out.trace_devices_before, out.stock_descriptors), (1, 8));
        let fails = |pair: &PairAudit, results: &std::collections::BTreeMap<String, String>| {
            check_pair(pair, &phases, dir.path(), results).unwrap_err().to_string()
        };
        let mut r = results.clone();
        r.insert("persona-pair-after-trace-pci".into(), "0000:02:00.0 ".into());
        assert!(fails(&good, &r).contains("loaded after"));
        let mut r = results.clone();
        r.insert("persona-pair-before-trace-devices".into(), "2".into());
        assert!(fails(&good, &r).contains("loaded before"));
        let mut bad = good.clone();
        bad.stock_before = serde_json::json!({"set_features_0d_total": 1, "enables": 1});
        assert!(fails(&bad, &results).contains("driver_override"));
        let mut bad = good.clone();
        bad.stock = audit(true, &[stock_list, stock_list], 0);
        assert!(fails(&bad, &results).contains("vendor feature"));
        bad.stock = audit(false, &[stock_list, stock_list], 2);
        assert!(fails(&bad, &results).contains("wrote into"));
        bad.stock = audit(false, &[(40 * m / 4, 13, m), (40 * m / 4, 13, m)], 0);
        assert!(fails(&bad, &results).contains("differ"));
        std::fs::write(
            dir.path().join("persona-pair.log"),
            good_log.replace("no patched nvme driver loaded yet; attaching when one is", ""),
        )
        .unwrap();
        assert!(fails(&good, &results).contains("did not wait"));
        std::fs::write(
            dir.path().join("persona-pair.log"),
            format!("{good_log}nvme nvme1: HMB trace slice: 16384 KiB ring\n"),
        )
        .unwrap();
        assert!(fails(&good, &results).contains("trace work on the stock controller"));
    }
}
