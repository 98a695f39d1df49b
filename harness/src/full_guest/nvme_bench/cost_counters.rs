//! Where a traced fio job's time goes (issue 28, the cost of tracing): the
//! guest script writes one line of counters before and one after every cost
//! job (`counters` in full-guest-nvme-bench.sh); this turns each pair into
//! rates per second and per I/O and takes the median over the repetitions,
//! so the trace-on and trace-off modes can be compared count by count.

use std::collections::BTreeMap;

use anyhow::{bail, ensure, Context, Result};

/// Counters compared per I/O (events) and as shares of the guest's CPU ticks.
const PER_IO: &[&str] = &["ctxt", "intr", "nvme_irq", "res", "cal", "daemon_vcs", "daemon_ncs"];
const PER_S: &[&str] = &["loc", "daemon_vcs"];
const TICKS: &[&str] = &["user", "sys", "irq", "idle", "daemon_ticks"];
/// The guest's disk writes per second (issue 28, what trace.bin's writes
/// cost): write requests, sectors written and flushes completed by its
/// virtio disks (/proc/diskstats), pages dirtied and written back
/// (/proc/vmstat nr_dirtied, nr_written), virtio interrupts. Optional: lines
/// from before they were counted parse without them.
const DISK_PER_S: &[&str] = &[
    "blk_wr",
    "blk_wsect",
    "blk_flush",
    "pg_dirtied",
    "pg_written",
    "virtio_irq",
];

/// One job in one mode, medians over the repetitions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CostCounters {
    pub job: String,
    pub mode: String,
    pub reps: usize,
    /// Events per I/O (the rate over the whole job, ramp included, over fio's IOPS).
    pub per_io: BTreeMap<String, f64>,
    /// Events per second.
    pub per_s: BTreeMap<String, f64>,
    /// Percent of all the guest's CPU ticks (every vCPU) during the job.
    pub cpu_pct: BTreeMap<String, f64>,
}

type Line = BTreeMap<String, String>;

fn fields(line: &str) -> Line {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn num(l: &Line, key: &str) -> Result<f64> {
    l.get(key)
        .with_context(|| format!("no {key}"))?
        .parse::<f64>()
        .with_context(|| format!("{key} is not a number"))
}

/// `text`: the guest's cost-counters.txt; `iops(job, mode, rep)`: fio's figure of that run.
pub fn parse(text: &str, iops: impl Fn(&str, &str, u32) -> Result<f64>) -> Result<Vec<CostCounters>> {
    // (job, mode) -> key -> one value per repetition
    type Samples = BTreeMap<&'static str, Vec<f64>>;
    let mut runs: BTreeMap<(String, String), (Samples, Samples, Samples)> = BTreeMap::new();
    let lines: Vec<Line> = text.lines().map(fields).filter(|l| l.contains_key("job")).collect();
    ensure!(
        lines.len().is_multiple_of(2),
        "cost-counters.txt: a job without its closing line"
    );
    for pair in lines.chunks(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let id = |l: &Line| (l.get("job").cloned(), l.get("mode").cloned(), l.get("rep").cloned());
        if id(a) != id(b) {
            bail!(
                "cost-counters.txt: lines of different jobs paired: {:?} and {:?}",
                id(a),
                id(b)
            );
        }
        let (job, mode) = (a["job"].clone(), a["mode"].clone());
        let rep: u32 = a.get("rep").context("no rep")?.parse().context("rep")?;
        let delta = |k: &str| -> Result<f64> { Ok(num(b, k)? - num(a, k)?) };
        let secs = delta("ns")? / 1e9;
        ensure!(secs > 0.0, "cost-counters.txt: {job} {mode} rep {rep} took no time");
        let io_s = iops(&job, &mode, rep)?;
        let ticks: f64 = ["user", "sys", "irq", "idle"]
            .iter()
            .map(|k| delta(k))
            .sum::<Result<f64>>()?;
        let entry = runs.entry((job, mode)).or_default();
        for k in PER_IO {
            entry.0.entry(k).or_default().push(delta(k)? / secs / io_s);
        }
        for k in PER_S {
            entry.1.entry(k).or_default().push(delta(k)? / secs);
        }
        for k in DISK_PER_S {
            if a.contains_key(*k) && b.contains_key(*k) {
                entry.1.entry(k).or_default().push(delta(k)? / secs);
            }
        }
        for k in TICKS {
            entry
                .2
                .entry(k)
                .or_default()
                .push(if ticks > 0.0 { 100.0 * delta(k)? / ticks } else { 0.0 });
        }
    }
    let medians = |s: Samples| -> BTreeMap<String, f64> {
        s.into_iter().map(|(k, v)| (k.to_string(), super::median(&v))).collect()
    };
    Ok(runs
        .into_iter()
        .map(|((job, mode), (per_io, per_s, cpu))| CostCounters {
            reps: per_s.values().next().map_or(0, Vec::len),
            job,
            mode,
            per_io: medians(per_io),
            per_s: medians(per_s),
            cpu_pct: medians(cpu),
        })
        .collect())
}

impl std::fmt::Display for CostCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(f64::NAN);
        write!(
            f,
            "{} trace {}: per I/O ctxt {:.2} intr {:.2} nvme_irq {:.2} res {:.3} cal {:.3} daemon_cs {:.3}; per s loc {:.0} daemon_wakeups {:.0}; disk per s writes {:.1} KiB {:.0} flushes {:.2} pages dirtied {:.0} written {:.0} virtio_irq {:.1}; CPU % user {:.1} sys {:.1} irq {:.1} idle {:.1} daemon {:.1} (medians of {})",
            self.job,
            self.mode,
            g(&self.per_io, "ctxt"),
            g(&self.per_io, "intr"),
            g(&self.per_io, "nvme_irq"),
            g(&self.per_io, "res"),
            g(&self.per_io, "cal"),
            g(&self.per_io, "daemon_vcs") + g(&self.per_io, "daemon_ncs"),
            g(&self.per_s, "loc"),
            g(&self.per_s, "daemon_vcs"),
            g(&self.per_s, "blk_wr"),
            g(&self.per_s, "blk_wsect") / 2.0,
            g(&self.per_s, "blk_flush"),
            g(&self.per_s, "pg_dirtied"),
            g(&self.per_s, "pg_written"),
            g(&self.per_s, "virtio_irq"),
            g(&self.cpu_pct, "user"),
            g(&self.cpu_pct, "sys"),
            g(&self.cpu_pct, "irq"),
            g(&self.cpu_pct, "idle"),
            g(&self.cpu_pct, "daemon_ticks"),
            self.reps
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str =
        "user=0 sys=0 irq=0 idle=0 nvme_irq=0 loc=0 res=0 cal=0 daemon_vcs=0 daemon_ncs=0 daemon_ticks=0";

    #[test]
    fn pairs_become_rates_per_io_and_shares_of_the_cpu() {
        let text = format!(
            "vcpus=2 tmp_fs=tmpfs\n\
             job=j mode=on rep=1 ns=0 ctxt=100 intr=50 {LINE}\n\
             job=j mode=on rep=1 ns=2000000000 ctxt=4100 intr=2050 user=10 sys=30 irq=10 idle=150 nvme_irq=2000 loc=400 res=0 cal=0 daemon_vcs=200 daemon_ncs=0 daemon_ticks=4\n"
        );
        let rows = parse(&text, |_, _, _| Ok(1000.0)).unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.job.as_str(), r.mode.as_str(), r.reps), ("j", "on", 1));
        // 4000 switches in 2 s at 1000 IOPS: 2 per I/O.
        assert_eq!(r.per_io["ctxt"], 2.0);
        assert_eq!(r.per_io["nvme_irq"], 1.0);
        assert_eq!(r.per_s["daemon_vcs"], 100.0);
        assert_eq!(r.cpu_pct["idle"], 75.0);
        assert_eq!(r.cpu_pct["daemon_ticks"], 2.0);
        assert!(!r.per_s.contains_key("blk_wr"), "no disk counters in these lines");
    }

    #[test]
    fn disk_writes_become_rates_per_second() {
        let text = format!(
            "job=j mode=on rep=1 ns=0 ctxt=0 intr=0 {LINE} blk_wr=10 blk_wsect=80 blk_flush=1 pg_dirtied=5 pg_written=0 virtio_irq=7\n\
             job=j mode=on rep=1 ns=4000000000 ctxt=0 intr=0 {LINE} blk_wr=50 blk_wsect=8080 blk_flush=3 pg_dirtied=3005 pg_written=2000 virtio_irq=47\n"
        );
        let r = &parse(&text, |_, _, _| Ok(1000.0)).unwrap()[0];
        assert_eq!(r.per_s["blk_wr"], 10.0);
        assert_eq!(r.per_s["blk_wsect"], 2000.0);
        assert_eq!(r.per_s["blk_flush"], 0.5);
        assert_eq!(r.per_s["pg_dirtied"], 750.0);
        assert_eq!(r.per_s["pg_written"], 500.0);
        assert_eq!(r.per_s["virtio_irq"], 10.0);
        assert!(
            r.to_string().contains("disk per s writes 10.0 KiB 1000 flushes 0.50"),
            "{r}"
        );
    }

    #[test]
    fn a_job_without_its_closing_line_or_with_another_jobs_is_an_error() {
        let open = format!("job=j mode=on rep=1 ns=0 ctxt=0 intr=0 {LINE}\n");
        assert!(parse(&open, |_, _, _| Ok(1.0)).is_err());
        let other = format!("{open}job=j mode=off rep=1 ns=5 ctxt=0 intr=0 {LINE}\n");
        assert!(parse(&other, |_, _, _| Ok(1.0)).is_err());
    }
}
