//! The differential test's three paths by which a driver loses and gets
//! back its HMB (issue 26): `reset_controller`, a device-side fatal status
//! (CSTS.CFS: the driver's I/O timeout finds it and resets) and the
//! driver's unbind and bind. The controller's HMB audit is cumulative
//! (emu-device/nvme/src/audit.rs), so the host takes it at the start of
//! each path after the first and judges each path on its part: the Set
//! Features 0Dh commands it brought and the audit counters it moved.
//!
//! What each path must show (on the `stock` personality, either driver):
//! - `reset`: the probe's list, then the same list given back with MR=1;
//! - `fatal`: the same list given back with MR=1 (the controller checked its
//!   pages when CFS made it lose the HMB and again at the re-enable);
//! - `rebind`: the unbind frees the HMB (the controller checks its pages
//!   when the driver shuts it down: no host write while enabled); the bind
//!   allocates a new one, so its first enable must say MR=0 (a new buffer is
//!   not "returned": nothing can be compared across it) and carry the same
//!   list as the probe.
//!
//! and every path: no host write (violations 0), pages actually checked,
//! no vendor feature. The series' driver must send, path by path, exactly
//! the stock driver's Set Features 0Dh commands (EHM, MR, size, descriptor
//! count, chunk sizes, status).

use anyhow::{ensure, Context, Result};
use serde_json::Value;

/// How the driver loses and regains the HMB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Path {
    Reset,
    Fatal,
    Rebind,
}

impl Path {
    pub fn name(self) -> &'static str {
        match self {
            Path::Reset => "reset",
            Path::Fatal => "fatal",
            Path::Rebind => "rebind",
        }
    }
}

/// The three paths, in the order the guest takes them.
pub const ALL: &[Path] = &[Path::Reset, Path::Fatal, Path::Rebind];

/// What one path did, as the report shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PathOutcome {
    pub path: Path,
    /// Set Features 0Dh EHM=1 that succeeded, and of those with MR=1.
    pub enables: u64,
    pub mr_reenables: u64,
    /// Audits run (a loss of the HMB, an MR=1 re-enable) and pages compared.
    pub checks: u64,
    pub pages_checked: u64,
    pub violations: u64,
}

/// One path's part of the audit: from `before` (the audit when it
/// started) to `after`.
#[derive(Clone)]
pub(crate) struct Segment<'a> {
    pub path: Path,
    /// The Set Features 0Dh commands it brought.
    pub commands: &'a [Value],
    delta: [u64; 5],
}

const COUNTERS: [&str; 5] = [
    "mr_reenables",
    "checks",
    "pages_checked",
    "violations",
    "vendor_feature_commands",
];

fn counter(audit: &Value, key: &str) -> Result<u64> {
    audit[key]
        .as_u64()
        .with_context(|| format!("the audit has no {key}: {audit}"))
}

fn commands(audit: &Value) -> Result<&[Value]> {
    let list = audit["set_features_0d"]
        .as_array()
        .with_context(|| format!("the audit has no set_features_0d: {audit}"))?;
    // The controller keeps the first 64 commands: a path must lie inside them.
    ensure!(
        counter(audit, "set_features_0d_total")? == list.len() as u64,
        "more Set Features 0Dh than the audit keeps: {audit}"
    );
    Ok(list)
}

/// Split a phase's final audit at the audits taken when each path after
/// the first started (`marks`, in path order).
pub(crate) fn segments<'a>(paths: &[Path], marks: &'a [Value], last: &'a Value) -> Result<Vec<Segment<'a>>> {
    ensure!(
        marks.len() + 1 == paths.len(),
        "{} audits for the starts of {} paths",
        marks.len(),
        paths.len()
    );
    let bounds: Vec<&Value> = marks.iter().chain([last]).collect();
    let all = commands(last)?;
    let mut out = Vec::new();
    let (mut from, mut before) = (0usize, None::<&Value>);
    for (&path, after) in paths.iter().zip(bounds) {
        let to = commands(after)?.len();
        ensure!(to >= from && to <= all.len(), "the audits are not in order");
        let mut delta = [0u64; 5];
        for (d, key) in delta.iter_mut().zip(COUNTERS) {
            let start = before.map_or(Ok(0), |b| counter(b, key))?;
            *d = counter(after, key)?
                .checked_sub(start)
                .context("an audit counter went down")?;
        }
        out.push(Segment {
            path,
            commands: &all[from..to],
            delta,
        });
        (from, before) = (to, Some(after));
    }
    Ok(out)
}

fn succeeded_enable(c: &Value) -> bool {
    c["ehm"] == true && c["status"] == "sct 0x0 sc 0x00"
}

/// The part of a command both drivers must agree on.
pub(crate) fn command_shape(c: &Value) -> Value {
    serde_json::json!([
        c["ehm"],
        c["mr"],
        c["bytes"],
        c["descriptors"],
        c["chunk_sizes"],
        c["status"]
    ])
}

impl Segment<'_> {
    pub fn mr_reenables(&self) -> u64 {
        self.delta[0]
    }

    pub fn violations(&self) -> u64 {
        self.delta[3]
    }

    pub fn vendor_features(&self) -> u64 {
        self.delta[4]
    }

    pub fn enables(&self) -> Vec<&Value> {
        self.commands.iter().filter(|c| succeeded_enable(c)).collect()
    }

    pub fn outcome(&self) -> PathOutcome {
        PathOutcome {
            path: self.path,
            enables: self.enables().len() as u64,
            mr_reenables: self.delta[0],
            checks: self.delta[1],
            pages_checked: self.delta[2],
            violations: self.delta[3],
        }
    }

    /// The path's own rules (see the module's comment); `probe` is the
    /// list of the phase's first enable.
    pub fn check(&self, probe: &Value, name: &str) -> Result<()> {
        let path = self.path.name();
        let enables = self.enables();
        let shape = |c: &Value| (c["bytes"].clone(), c["descriptors"].clone(), c["chunk_sizes"].clone());
        ensure!(
            !enables.is_empty() && enables.iter().all(|c| shape(c) == shape(probe)),
            "{name}, {path}: the HMB was not enabled again with the probe's list {probe}: {:?}",
            self.commands
        );
        match self.path {
            Path::Reset | Path::Fatal => {
                let again = if self.path == Path::Reset { &enables[1..] } else { &enables[..] };
                ensure!(
                    !again.is_empty() && again.iter().all(|c| c["returned"] == true && c["mr"] == true),
                    "{name}, {path}: the same HMB was not given back with MR=1: {:?}",
                    self.commands
                );
                ensure!(
                    self.mr_reenables() >= 1,
                    "{name}, {path}: the controller audited no MR=1 re-enable"
                );
            }
            Path::Rebind => ensure!(
                enables[0]["mr"] == false && enables[0]["returned"] == false,
                "{name}, {path}: the HMB allocated at bind was enabled with MR=1 (a new buffer holds nothing of the old one): {}",
                enables[0]
            ),
        }
        ensure!(
            self.violations() == 0,
            "{name}, {path}: the host wrote into the controller's HMB ({} pages)",
            self.violations()
        );
        ensure!(self.delta[2] > 0, "{name}, {path}: the controller checked no page");
        ensure!(
            self.vendor_features() == 0,
            "{name}, {path}: a vendor feature reached a controller that declares none"
        );
        Ok(())
    }
}

/// The differential, path by path: the series' Set Features 0Dh commands
/// equal the stock driver's.
pub(crate) fn same_commands(stock: &[Segment], series: &[Segment], name: &str) -> Result<()> {
    ensure!(
        stock.len() == series.len(),
        "{name}: the paths differ from the stock driver's"
    );
    for (a, b) in stock.iter().zip(series) {
        let (x, y): (Vec<Value>, Vec<Value>) = (
            a.commands.iter().map(command_shape).collect(),
            b.commands.iter().map(command_shape).collect(),
        );
        ensure!(
            x == y,
            "{name}, {}: the series' Set Features 0Dh commands differ from the stock driver's \
             ([EHM, MR, bytes, descriptors, chunk sizes, status]): {y:?} against {x:?}",
            b.path.name()
        );
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A Set Features 0Dh as the audit reports it.
    pub(crate) fn cmd(ehm: bool, mr: bool, returned: bool, bytes: u64, n: u64, chunk: u64) -> Value {
        json!({"ehm": ehm, "mr": mr, "returned": returned, "bytes": bytes, "descriptors": n,
               "chunk_sizes": if ehm { json!([{"bytes": chunk, "count": n}]) } else { json!([]) },
               "status": "sct 0x0 sc 0x00"})
    }

    /// The cumulative audit after `cmds`, with the counters given.
    pub(crate) fn cumulative(cmds: &[Value], mr: u64, checks: u64, pages: u64, violations: u64) -> Value {
        json!({"set_features_0d": cmds, "set_features_0d_total": cmds.len(), "mr_reenables": mr,
               "checks": checks, "pages_checked": pages, "violations": violations,
               "vendor_feature_commands": 0, "c0h_received": false, "first_violations": []})
    }

    /// A good stock run of the three paths: (marks, last).
    pub(crate) fn three_paths(bytes: u64, n: u64, chunk: u64) -> (Vec<Value>, Value) {
        let probe = cmd(true, false, false, bytes, n, chunk);
        let back = cmd(true, true, true, bytes, n, chunk);
        let reset = vec![probe.clone(), back.clone()];
        let fatal: Vec<Value> = reset.iter().cloned().chain([back]).collect();
        let rebind: Vec<Value> = fatal.iter().cloned().chain([probe]).collect();
        (
            vec![cumulative(&reset, 1, 2, 100, 0), cumulative(&fatal, 2, 4, 200, 0)],
            cumulative(&rebind, 2, 6, 300, 0),
        )
    }

    #[test]
    fn each_path_passes_when_good_and_fails_on_its_defect() {
        let m = 4u64 << 20;
        let (marks, last) = three_paths(8 * m, 8, m);
        let segs = segments(ALL, &marks, &last).unwrap();
        let probe = segs[0].enables()[0].clone();
        for s in &segs {
            s.check(&probe, "t").unwrap();
        }
        assert_eq!(segs.iter().map(|s| s.outcome().enables).collect::<Vec<_>>(), [2, 1, 1]);
        same_commands(&segs, &segs, "t").unwrap();

        // A host write during the fatal path only.
        let mut bad = marks.clone();
        let mut bad_last = last.clone();
        bad[1]["violations"] = json!(3);
        bad_last["violations"] = json!(3);
        let segs = segments(ALL, &bad, &bad_last).unwrap();
        assert!(segs[0].check(&probe, "t").is_ok());
        let e = segs[1].check(&probe, "t").unwrap_err().to_string();
        assert!(e.contains("fatal") && e.contains("wrote into"), "{e}");
        assert!(segs[2].check(&probe, "t").is_ok());

        // The bind's new HMB enabled with MR=1.
        let mut mr_bind = last.clone();
        mr_bind["set_features_0d"][3]["mr"] = json!(true);
        let segs = segments(ALL, &marks, &mr_bind).unwrap();
        let e = segs[2].check(&probe, "t").unwrap_err().to_string();
        assert!(e.contains("rebind") && e.contains("MR=1"), "{e}");

        // No MR=1 re-enable after the fatal status (the driver freed and rebuilt the HMB).
        let mut fresh = last.clone();
        fresh["set_features_0d"][2] = cmd(true, false, false, 8 * m, 8, m);
        let mut fresh_marks = marks.clone();
        fresh_marks[1]["set_features_0d"][2] = cmd(true, false, false, 8 * m, 8, m);
        let segs = segments(ALL, &fresh_marks, &fresh).unwrap();
        assert!(segs[1].check(&probe, "t").unwrap_err().to_string().contains("MR=1"));

        // The series with another list on the bind: the differential fails.
        let stock = segments(ALL, &marks, &last).unwrap();
        let mut other = last.clone();
        other["set_features_0d"][3] = cmd(true, false, false, 9 * m, 9, m);
        let series = segments(ALL, &marks, &other).unwrap();
        let e = same_commands(&stock, &series, "t").unwrap_err().to_string();
        assert!(e.contains("rebind") && e.contains("differ"), "{e}");
        assert!(series[2].check(&probe, "t").is_err());
    }

    #[test]
    fn the_marks_must_fit_the_paths_and_the_commands_kept() {
        let m = 4u64 << 20;
        let (marks, last) = three_paths(8 * m, 8, m);
        assert!(segments(ALL, &marks[..1], &last).is_err());
        let mut truncated = last.clone();
        truncated["set_features_0d_total"] = json!(70);
        assert!(segments(ALL, &marks, &truncated).is_err());
    }
}
