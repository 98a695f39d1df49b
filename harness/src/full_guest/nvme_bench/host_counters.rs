//! The host's side of a cost job (issue 28, the cost of tracing at QD32):
//! under TCG every guest cycle and every controller cycle is host CPU, and
//! the host has 2 cores, so what the guest's counters cannot see (the
//! controller's work per command in serve-nvme, QEMU's vCPU threads and its
//! other threads, and how long each waited for a core) is sampled here, at
//! the `HMBT-COST ... at=begin|end` console lines the guest script prints
//! around every cost job. Times come from each thread's schedstat (run and
//! run-queue wait in ns), the host's busy share from /proc/stat.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, ensure, Context, Result};

use super::speed_probe::Probe;

/// One sample: what each of our processes has run and waited so far, ns.
#[derive(Debug, Clone, Default, PartialEq)]
struct Sample {
    at_ns: f64,
    serve_run: f64,
    serve_wait: f64,
    vcpu_run: f64,
    vcpu_wait: f64,
    /// Each vCPU thread on its own (by name: 0, 1, ...): at QD32 one of
    /// them runs fio and is the bottleneck.
    vcpu_runs: Vec<f64>,
    vcpu_waits: Vec<f64>,
    qemu_other_run: f64,
    /// The host's ticks (USER_HZ) over all CPUs: busy and all.
    host_busy: f64,
    host_all: f64,
}

/// Samples the host at the guest's cost-job markers.
pub(crate) struct HostSampler {
    qemu: u32,
    serve: Option<u32>,
    start: Instant,
    /// The host's speed, sampled on the same clock as the markers.
    probe: Probe,
    /// host-counters.txt: a line per sample, the marker's fields first.
    lines: RefCell<String>,
}

/// The marker's fields, if `line` is one: `HMBT-COST` around a cost job,
/// `HMBT-FIO` around a job of the ours/QEMU rows (mode: ours or qemu).
fn marker(line: &str) -> Option<(String, String, u32, String)> {
    let rest = ["HMBT-COST ", "HMBT-FIO "]
        .iter()
        .find_map(|m| Some(&line[line.find(m)? + m.len()..]))?;
    let f: BTreeMap<&str, &str> = rest.split_whitespace().filter_map(|w| w.split_once('=')).collect();
    Some((
        f.get("job")?.to_string(),
        f.get("mode")?.to_string(),
        f.get("rep")?.parse().ok()?,
        f.get("at")?.to_string(),
    ))
}

/// (run, wait) ns of one task from its schedstat line.
fn schedstat(path: &Path) -> Option<(f64, f64)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut w = text.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some((w.next()??, w.next()??))
}

/// The serve-nvme process whose command line names `backing` (ours, not
/// another session's).
fn find_serve_nvme(backing: &Path) -> Option<u32> {
    let want = backing.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let mut args = cmdline.split(|b| *b == 0);
        (args.clone().any(|a| a == b"serve-nvme") && args.any(|a| a == want)).then_some(pid)
    })
}

impl HostSampler {
    pub(crate) fn new(qemu: u32, backing: &Path) -> Self {
        let start = Instant::now();
        HostSampler {
            qemu,
            serve: find_serve_nvme(backing),
            start,
            probe: Probe::start(start),
            lines: RefCell::new(String::new()),
        }
    }

    /// Take a sample if `line` is a cost-job marker.
    pub(crate) fn on_line(&self, line: &str) {
        if let Some((job, mode, rep, at)) = marker(line) {
            let s = self.sample();
            let each = |what: &str, xs: &[f64]| -> String {
                xs.iter().enumerate().map(|(i, x)| format!(" {what}{i}={x}")).collect()
            };
            self.lines.borrow_mut().push_str(&format!(
                "job={job} mode={mode} rep={rep} at={at} ns={} serve_run={} serve_wait={} vcpu_run={} vcpu_wait={} qemu_other_run={} host_busy={} host_all={}{}{}\n",
                s.at_ns,
                s.serve_run,
                s.serve_wait,
                s.vcpu_run,
                s.vcpu_wait,
                s.qemu_other_run,
                s.host_busy,
                s.host_all,
                each("vcpu_run_", &s.vcpu_runs),
                each("vcpu_wait_", &s.vcpu_waits)
            ));
        }
    }

    fn sample(&self) -> Sample {
        let mut s = Sample {
            at_ns: self.start.elapsed().as_nanos() as f64,
            ..Sample::default()
        };
        if let Some(pid) = self.serve {
            for (_, run, wait) in tasks(pid) {
                s.serve_run += run;
                s.serve_wait += wait;
            }
        }
        let mut threads = tasks(self.qemu);
        threads.sort_by(|a, b| a.0.cmp(&b.0));
        for (comm, run, wait) in threads {
            // TCG's vCPU threads are named "CPU n/TCG".
            if comm.starts_with("CPU ") {
                s.vcpu_run += run;
                s.vcpu_wait += wait;
                s.vcpu_runs.push(run);
                s.vcpu_waits.push(wait);
            } else {
                s.qemu_other_run += run;
            }
        }
        if let Some((busy, all)) = host_ticks() {
            s.host_busy = busy;
            s.host_all = all;
        }
        s
    }

    /// The samples as the lines `host-counters.txt` keeps.
    pub(crate) fn lines(&self) -> String {
        self.lines.borrow().clone()
    }

    /// The speed probe's samples so far.
    pub(crate) fn probe_samples(&self) -> Vec<super::speed_probe::Sample> {
        self.probe.samples()
    }

    pub(crate) fn found_serve_nvme(&self) -> bool {
        self.serve.is_some()
    }
}

/// Each thread of `pid`: its name, run and wait ns.
fn tasks(pid: u32) -> Vec<(String, f64, f64)> {
    let dir = PathBuf::from(format!("/proc/{pid}/task"));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            let (run, wait) = schedstat(&e.path().join("schedstat"))?;
            Some((comm.trim().to_string(), run, wait))
        })
        .collect()
}

/// The host's busy and total ticks from /proc/stat's `cpu` line.
fn host_ticks() -> Option<(f64, f64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<f64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    if v.len() < 8 {
        return None;
    }
    let all: f64 = v.iter().take(8).sum();
    // idle and iowait
    Some((all - v[3] - v[4], all))
}

/// One job in one mode, medians over the repetitions.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HostCounters {
    pub job: String,
    pub mode: String,
    pub reps: usize,
    /// Host CPU per I/O, µs: serve-nvme (all its threads), QEMU's vCPU
    /// threads, QEMU's other threads.
    pub serve_us_per_io: f64,
    pub vcpu_us_per_io: f64,
    pub qemu_other_us_per_io: f64,
    /// Time spent runnable but waiting for a core, per second of the job:
    /// serve-nvme and the vCPUs (ms/s).
    pub serve_wait_ms_per_s: f64,
    pub vcpu_wait_ms_per_s: f64,
    /// Cores busy on the whole host (every process, other sessions too).
    pub host_busy_cores: f64,
    /// The vCPU that ran most in the job (fio's, at QD32): its host CPU per
    /// I/O (µs), and the share of the job's time it ran and waited for a
    /// core (%): running + waiting near 100 % is a vCPU that never idles.
    pub busiest_vcpu_us_per_io: f64,
    pub busiest_vcpu_run_pct: f64,
    pub busiest_vcpu_wait_pct: f64,
}

/// One repetition of one job in one mode, between its markers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Rep {
    pub job: String,
    pub mode: String,
    pub rep: u32,
    /// The markers' times, ns on the sampler's clock (the speed probe's).
    pub begin_ns: f64,
    pub end_ns: f64,
    /// HostCounters' fields in its order, this repetition's; [0] is
    /// serve-nvme's CPU per I/O, µs.
    vals: [f64; 9],
}

impl Rep {
    pub(crate) fn serve_us_per_io(&self) -> f64 {
        self.vals[0]
    }
}

/// `text`: host-counters.txt; `iops(job, mode, rep)`: fio's IOPS of that run.
pub(crate) fn reps(text: &str, iops: impl Fn(&str, &str, u32) -> Result<f64>) -> Result<Vec<Rep>> {
    let mut begin: BTreeMap<(String, String, u32), BTreeMap<String, f64>> = BTreeMap::new();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: BTreeMap<String, String> = line
            .split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let get = |k: &str| -> Result<&String> { f.get(k).with_context(|| format!("no {k} in {line:?}")) };
        let key = (get("job")?.clone(), get("mode")?.clone(), get("rep")?.parse::<u32>()?);
        let nums: BTreeMap<String, f64> = f
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), v.parse().ok()?)))
            .collect();
        match get("at")?.as_str() {
            "begin" => {
                begin.insert(key, nums);
            }
            "end" => {
                let b = begin
                    .remove(&key)
                    .with_context(|| format!("an end without a begin: {key:?}"))?;
                let d =
                    |k: &str| -> Result<f64> {
                        Ok(nums.get(k).with_context(|| format!("no {k}"))?
                            - b.get(k).with_context(|| format!("no {k}"))?)
                    };
                let secs = d("ns")? / 1e9;
                ensure!(secs > 0.0, "{key:?} took no time");
                let ios = iops(&key.0, &key.1, key.2)? * secs;
                let all = d("host_all")?;
                // The busiest vCPU: the largest run delta of vcpu_run_N.
                let (mut b_run, mut b_wait) = (0.0, 0.0);
                for i in 0.. {
                    let k = format!("vcpu_run_{i}");
                    if !nums.contains_key(&k) {
                        break;
                    }
                    let run = d(&k)?;
                    if run > b_run {
                        (b_run, b_wait) = (run, d(&format!("vcpu_wait_{i}"))?);
                    }
                }
                let wall = d("ns")?;
                out.push(Rep {
                    begin_ns: b["ns"],
                    end_ns: nums["ns"],
                    vals: [
                        d("serve_run")? / 1e3 / ios,
                        d("vcpu_run")? / 1e3 / ios,
                        d("qemu_other_run")? / 1e3 / ios,
                        d("serve_wait")? / 1e6 / secs,
                        d("vcpu_wait")? / 1e6 / secs,
                        if all > 0.0 {
                            d("host_busy")? / all * host_cores()
                        } else {
                            0.0
                        },
                        b_run / 1e3 / ios,
                        100.0 * b_run / wall,
                        100.0 * b_wait / wall,
                    ],
                    job: key.0,
                    mode: key.1,
                    rep: key.2,
                });
            }
            other => bail!("at={other} in {line:?}"),
        }
    }
    Ok(out)
}

/// `text`: host-counters.txt; `iops(job, mode, rep)`: fio's IOPS of that run.
/// Medians per job and mode, the cost jobs' modes only (not the ours/QEMU rows').
pub fn parse(text: &str, iops: impl Fn(&str, &str, u32) -> Result<f64>) -> Result<Vec<HostCounters>> {
    let mut rows: BTreeMap<(String, String), Vec<[f64; 9]>> = BTreeMap::new();
    for r in reps(text, iops)? {
        if r.mode != "ours" && r.mode != "qemu" {
            rows.entry((r.job, r.mode)).or_default().push(r.vals);
        }
    }
    Ok(rows
        .into_iter()
        .map(|((job, mode), v)| {
            let m = |i: usize| super::median(&v.iter().map(|r| r[i]).collect::<Vec<_>>());
            HostCounters {
                reps: v.len(),
                job,
                mode,
                serve_us_per_io: m(0),
                vcpu_us_per_io: m(1),
                qemu_other_us_per_io: m(2),
                serve_wait_ms_per_s: m(3),
                vcpu_wait_ms_per_s: m(4),
                host_busy_cores: m(5),
                busiest_vcpu_us_per_io: m(6),
                busiest_vcpu_run_pct: m(7),
                busiest_vcpu_wait_pct: m(8),
            }
        })
        .collect())
}

fn host_cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

impl std::fmt::Display for HostCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} trace {}: host us per I/O serve-nvme {:.1} vCPUs {:.1} qemu other {:.1} (sum {:.1}); busiest vCPU {:.1} us per I/O, ran {:.0} % waited {:.0} % of the job; waiting for a core ms/s serve-nvme {:.0} vCPUs {:.0}; host cores busy {:.2} (medians of {})",
            self.job,
            self.mode,
            self.serve_us_per_io,
            self.vcpu_us_per_io,
            self.qemu_other_us_per_io,
            self.serve_us_per_io + self.vcpu_us_per_io + self.qemu_other_us_per_io,
            self.busiest_vcpu_us_per_io,
            self.busiest_vcpu_run_pct,
            self.busiest_vcpu_wait_pct,
            self.serve_wait_ms_per_s,
            self.vcpu_wait_ms_per_s,
            self.host_busy_cores,
            self.reps
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_found_behind_the_consoles_prefix() {
        let l = "[   99.1] sh[242]: HMBT-COST job=j mode=on rep=2 at=end";
        assert_eq!(marker(l), Some(("j".into(), "on".into(), 2, "end".into())));
        assert_eq!(marker("HMBT-STEP rep 1 done"), None);
        let l = "HMBT-FIO job=k mode=qemu rep=3 at=begin";
        assert_eq!(marker(l), Some(("k".into(), "qemu".into(), 3, "begin".into())));
        assert_eq!(marker("HMBT-COST job=j mode=on rep=x at=end"), None);
    }

    #[test]
    fn pairs_become_host_time_per_io() {
        let text = "job=j mode=on rep=1 at=begin ns=0 serve_run=0 serve_wait=0 vcpu_run=0 vcpu_wait=0 qemu_other_run=0 host_busy=0 host_all=100 vcpu_run_0=0 vcpu_run_1=0 vcpu_wait_0=0 vcpu_wait_1=0\n\
                    job=j mode=on rep=1 at=end ns=2000000000 serve_run=1000000000 serve_wait=200000000 vcpu_run=3000000000 vcpu_wait=0 qemu_other_run=100000000 host_busy=50 host_all=300 vcpu_run_0=1000000000 vcpu_run_1=1800000000 vcpu_wait_0=0 vcpu_wait_1=200000000\n";
        // 2 s at 10000 IOPS: 20000 I/Os; 1 s of serve-nvme is 50 us each.
        let rows = parse(text, |_, _, _| Ok(10_000.0)).unwrap();
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!(r.serve_us_per_io, 50.0);
        assert_eq!(r.vcpu_us_per_io, 150.0);
        assert_eq!(r.qemu_other_us_per_io, 5.0);
        assert_eq!(r.serve_wait_ms_per_s, 100.0);
        // vCPU 1 ran 1.8 s of the 2 and waited 0.2: 90 us per I/O.
        assert_eq!(r.busiest_vcpu_us_per_io, 90.0);
        assert_eq!((r.busiest_vcpu_run_pct, r.busiest_vcpu_wait_pct), (90.0, 10.0));
        assert!(parse("job=j mode=on rep=1 at=end ns=1\n", |_, _, _| Ok(1.0)).is_err());
        // The ours/QEMU rows' markers: a repetition each, no cost row.
        let ours = text.replace("mode=on", "mode=ours");
        assert!(parse(&ours, |_, _, _| Ok(10_000.0)).unwrap().is_empty());
        let r = reps(&ours, |_, _, _| Ok(10_000.0)).unwrap();
        assert_eq!((r.len(), r[0].mode.as_str(), r[0].serve_us_per_io()), (1, "ours", 50.0));
        assert_eq!((r[0].begin_ns, r[0].end_ns), (0.0, 2e9));
    }

    #[test]
    fn our_own_threads_have_schedstat() {
        let me = std::process::id();
        let t = tasks(me);
        assert!(!t.is_empty() && t.iter().all(|(_, run, _)| *run >= 0.0));
        assert!(t.iter().any(|(_, run, _)| *run > 0.0));
    }
}
