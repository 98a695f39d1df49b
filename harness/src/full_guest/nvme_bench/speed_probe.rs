//! How fast the host's CPU is while each fio job runs (issue 28, how precise
//! the guest figures are). Under TCG every guest instruction is host CPU, and
//! the host's speed itself moves: in some 5-second windows QEMU's vCPU
//! threads and serve-nvme both take 1.3-1.5x the CPU per I/O with the host's
//! busy cores, the vCPUs' wait for a core and the guest's per-I/O counters
//! unchanged (another hardware thread of the same core, outside this VM,
//! competing for it: docs/performance.md "Fourth pass"). A repetition's IOPS
//! then says as much about that window as about the code under test.
//!
//! A host thread on each CPU (pinned: each of the host's cores has its own
//! sibling, and QEMU's vCPU threads run on both) times two fixed
//! register-only loops every `PERIOD`: a
//! dependent chain (each step waits for the last: latency-bound, which an
//! SMT sibling slows little) and `LANES` independent chains (throughput-
//! bound: they compete with the sibling for execution ports, as TCG's
//! translated code, many independent loads, stores and ALU ops, does). The
//! median of each over a job's window, per CPU and then averaged over the
//! CPUs, is that job's speed index (ns per loop: higher is slower). A third
//! loop, the eight chains with a load from an L1-sized table in each step,
//! asks whether the sibling's cache traffic matters beyond its ALU use.
//! About 0.6 ms per 100 ms on each CPU, ~1.2 % of one core in all; the host
//! has ~0.8 core idle during these jobs when the machine is otherwise idle.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Time between the starts of two samples on one CPU: ~45 samples per CPU
/// in a 4.7 s job, 0.6 ms of loops each (~0.6 % of each core).
const PERIOD: Duration = Duration::from_millis(100);
/// Steps of the dependent chain (0.2 ms on the bench's host: 2.2 ns a step).
const DEP_STEPS: u64 = 90_000;
/// Independent chains, and steps of each (0.2 ms in all: 4.1 ns a round).
const LANES: usize = 8;
const LANE_STEPS: u64 = 50_000;
/// Rounds of the mixed loop (~0.2 ms), and its table: 32 KiB, an L1 data
/// cache's size (shared with the sibling).
const MIXED_STEPS: u64 = 45_000;
const TABLE: usize = 4096;

/// One sample: when (ns since the sampler's start) and each loop's time, ns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    pub at_ns: f64,
    /// The CPU the sampling thread is pinned to.
    pub cpu: usize,
    pub dep_ns: f64,
    pub indep_ns: f64,
    pub mixed_ns: f64,
}

/// A step of the fallback loops: xorshift then multiply (a bijection, so no
/// chain collapses to a constant and the compiler cannot fold the loop).
#[cfg(not(target_arch = "x86_64"))]
fn step(x: u64) -> u64 {
    (x ^ (x >> 29)).wrapping_mul(0x7F4A_7C15)
}

// On x86_64 the loops are assembly: `cargo xtask` runs unoptimized, where
// Rust's loop would load and store every step, and the probe is meant to
// time the core's execution units alone (registers only, no memory).
// A step: mov, shr, xor, imul (5 cycles of latency, 4 µops).

/// One chain: each step needs the last one's result (latency-bound).
#[cfg(target_arch = "x86_64")]
fn dep_chain(steps: u64, seed: u64) -> u64 {
    let (mut x, mut n) = (seed, steps.max(1));
    // SAFETY: registers only; the asm touches no memory and no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {t}, {x}", "shr {t}, 29", "xor {x}, {t}", "imul {x}, {x}, 0x7F4A7C15",
            "dec {n}", "jnz 2b",
            x = inout(reg) x, n = inout(reg) n, t = out(reg) _,
            options(nomem, nostack),
        );
    }
    black_box(n);
    x
}

/// Eight chains side by side, a step of each per round (throughput-bound:
/// 32 µops and 8 multiplies a round against 5 cycles of latency).
#[cfg(target_arch = "x86_64")]
fn indep_chains(steps: u64, seed: u64) -> u64 {
    let mut l = [0u64; LANES];
    for (i, x) in l.iter_mut().enumerate() {
        *x = seed.wrapping_add(i as u64);
    }
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] = l;
    let mut n = steps.max(1);
    // SAFETY: registers only; the asm touches no memory and no stack.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {t}, {a}", "shr {t}, 29", "xor {a}, {t}", "imul {a}, {a}, 0x7F4A7C15",
            "mov {t}, {b}", "shr {t}, 29", "xor {b}, {t}", "imul {b}, {b}, 0x7F4A7C15",
            "mov {t}, {c}", "shr {t}, 29", "xor {c}, {t}", "imul {c}, {c}, 0x7F4A7C15",
            "mov {t}, {d}", "shr {t}, 29", "xor {d}, {t}", "imul {d}, {d}, 0x7F4A7C15",
            "mov {t}, {e}", "shr {t}, 29", "xor {e}, {t}", "imul {e}, {e}, 0x7F4A7C15",
            "mov {t}, {f}", "shr {t}, 29", "xor {f}, {t}", "imul {f}, {f}, 0x7F4A7C15",
            "mov {t}, {g}", "shr {t}, 29", "xor {g}, {t}", "imul {g}, {g}, 0x7F4A7C15",
            "mov {t}, {h}", "shr {t}, 29", "xor {h}, {t}", "imul {h}, {h}, 0x7F4A7C15",
            "dec {n}", "jnz 2b",
            a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d,
            e = inout(reg) e, f = inout(reg) f, g = inout(reg) g, h = inout(reg) h,
            n = inout(reg) n, t = out(reg) _,
            options(nomem, nostack),
        );
    }
    black_box(n);
    a ^ b ^ c ^ d ^ e ^ f ^ g ^ h
}

/// The independent chains again, each step first xoring in a word of
/// `table` that the chain's value picks (8 loads a round from an L1-sized
/// table: TCG's code loads and stores its guest state all the time, so the
/// sibling's cache traffic may slow it beyond what the ALU loops see).
#[cfg(target_arch = "x86_64")]
fn mixed_chains(steps: u64, seed: u64, table: &[u64; TABLE]) -> u64 {
    let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut h] =
        std::array::from_fn::<u64, LANES, _>(|i| seed.wrapping_add(i as u64));
    let mut n = steps.max(1);
    // SAFETY: reads `table` only, at an index masked to its length.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {t}, {a}", "and {t}, 4095", "xor {a}, [{p} + {t}*8]", "imul {a}, {a}, 0x7F4A7C15",
            "mov {t}, {b}", "and {t}, 4095", "xor {b}, [{p} + {t}*8]", "imul {b}, {b}, 0x7F4A7C15",
            "mov {t}, {c}", "and {t}, 4095", "xor {c}, [{p} + {t}*8]", "imul {c}, {c}, 0x7F4A7C15",
            "mov {t}, {d}", "and {t}, 4095", "xor {d}, [{p} + {t}*8]", "imul {d}, {d}, 0x7F4A7C15",
            "mov {t}, {e}", "and {t}, 4095", "xor {e}, [{p} + {t}*8]", "imul {e}, {e}, 0x7F4A7C15",
            "mov {t}, {f}", "and {t}, 4095", "xor {f}, [{p} + {t}*8]", "imul {f}, {f}, 0x7F4A7C15",
            "mov {t}, {g}", "and {t}, 4095", "xor {g}, [{p} + {t}*8]", "imul {g}, {g}, 0x7F4A7C15",
            "mov {t}, {h}", "and {t}, 4095", "xor {h}, [{p} + {t}*8]", "imul {h}, {h}, 0x7F4A7C15",
            "dec {n}", "jnz 2b",
            a = inout(reg) a, b = inout(reg) b, c = inout(reg) c, d = inout(reg) d,
            e = inout(reg) e, f = inout(reg) f, g = inout(reg) g, h = inout(reg) h,
            n = inout(reg) n, t = out(reg) _, p = in(reg) table.as_ptr(),
            options(readonly, nostack),
        );
    }
    black_box(n);
    a ^ b ^ c ^ d ^ e ^ f ^ g ^ h
}

#[cfg(not(target_arch = "x86_64"))]
fn mixed_chains(steps: u64, seed: u64, table: &[u64; TABLE]) -> u64 {
    let mut l: [u64; LANES] = std::array::from_fn(|i| seed.wrapping_add(i as u64));
    for _ in 0..steps {
        for x in l.iter_mut() {
            *x = (*x ^ table[*x as usize % TABLE]).wrapping_mul(0x7F4A_7C15);
        }
    }
    l.iter().fold(0, |a, x| a ^ x)
}

/// The mixed loop's table: fixed words that differ in their low bits.
fn table() -> Box<[u64; TABLE]> {
    let mut t = Box::new([0u64; TABLE]);
    let mut x = 0x1234_5678_9ABC_DEF1u64;
    for w in t.iter_mut() {
        x = (x ^ (x >> 29)).wrapping_mul(0x7F4A_7C15).wrapping_add(1);
        *w = x;
    }
    t
}

#[cfg(not(target_arch = "x86_64"))]
fn dep_chain(steps: u64, seed: u64) -> u64 {
    let mut x = seed;
    for _ in 0..steps {
        x = step(x);
    }
    x
}

#[cfg(not(target_arch = "x86_64"))]
fn indep_chains(steps: u64, seed: u64) -> u64 {
    let mut l = [0u64; LANES];
    for (i, x) in l.iter_mut().enumerate() {
        *x = seed.wrapping_add(i as u64);
    }
    for _ in 0..steps {
        for x in l.iter_mut() {
            *x = step(*x);
        }
    }
    l.iter().fold(0, |a, x| a ^ x)
}

fn time_ns(f: impl FnOnce() -> u64) -> f64 {
    let t = Instant::now();
    black_box(f());
    t.elapsed().as_nanos() as f64
}

/// The probe's threads (one pinned to each CPU) and their samples; stopped
/// when dropped.
pub(crate) struct Probe {
    samples: Arc<Mutex<Vec<Sample>>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

/// The CPUs this process may run on.
fn cpus() -> Vec<usize> {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    match nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)) {
        Ok(set) => (0..nix::sched::CpuSet::count())
            .filter(|c| set.is_set(*c).unwrap_or(false))
            .collect(),
        Err(_) => (0..n).collect(),
    }
}

/// Pin the calling thread to `cpu`.
fn pin(cpu: usize) -> bool {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).is_ok() && nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).is_ok()
}

impl Probe {
    /// Start sampling; `start` is the clock the job markers are read on.
    /// A thread per CPU: the host's cores slow independently (each has its
    /// own sibling outside this VM), and QEMU's vCPU threads run on both.
    pub(crate) fn start(start: Instant) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let threads = cpus()
            .into_iter()
            .filter_map(|cpu| {
                let (s, st) = (samples.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("speed-probe-{cpu}"))
                    .spawn(move || {
                        if !pin(cpu) {
                            return;
                        }
                        let table = table();
                        while !st.load(Ordering::Relaxed) {
                            let t0 = Instant::now();
                            let at_ns = start.elapsed().as_nanos() as f64;
                            let seed = black_box(at_ns as u64);
                            let dep_ns = time_ns(|| dep_chain(black_box(DEP_STEPS), seed));
                            let indep_ns = time_ns(|| indep_chains(black_box(LANE_STEPS), seed));
                            let mixed_ns = time_ns(|| mixed_chains(black_box(MIXED_STEPS), seed, &table));
                            s.lock().unwrap().push(Sample {
                                at_ns,
                                cpu,
                                dep_ns,
                                indep_ns,
                                mixed_ns,
                            });
                            std::thread::sleep(PERIOD.saturating_sub(t0.elapsed()));
                        }
                    })
                    .ok()
            })
            .collect();
        Probe { samples, stop, threads }
    }

    pub(crate) fn samples(&self) -> Vec<Sample> {
        let mut v = self.samples.lock().unwrap().clone();
        v.sort_by(|a, b| a.at_ns.total_cmp(&b.at_ns));
        v
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A window's speed index: each loop's median per CPU over the samples
/// taken in it, averaged over the CPUs (each core's speed counts alike: the
/// vCPU threads run on both); the independent loop's per CPU; and how many
/// samples there were. None: no sample in the window.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WindowIndex {
    pub dep_ns: f64,
    pub indep_ns: f64,
    pub mixed_ns: f64,
    pub indep_ns_per_cpu: Vec<(usize, f64)>,
    pub samples: usize,
}

pub(crate) fn index(samples: &[Sample], begin_ns: f64, end_ns: f64) -> Option<WindowIndex> {
    let inside: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at_ns >= begin_ns && s.at_ns <= end_ns)
        .collect();
    let mut cpus: Vec<usize> = inside.iter().map(|s| s.cpu).collect();
    cpus.sort_unstable();
    cpus.dedup();
    if cpus.is_empty() {
        return None;
    }
    let per_cpu = |f: fn(&Sample) -> f64| -> Vec<(usize, f64)> {
        cpus.iter()
            .map(|c| {
                let v: Vec<f64> = inside.iter().filter(|s| s.cpu == *c).map(|s| f(s)).collect();
                (*c, super::median(&v))
            })
            .collect()
    };
    let mean = |v: &[(usize, f64)]| v.iter().map(|x| x.1).sum::<f64>() / v.len() as f64;
    let (dep, indep) = (per_cpu(|s| s.dep_ns), per_cpu(|s| s.indep_ns));
    Some(WindowIndex {
        dep_ns: mean(&dep),
        indep_ns: mean(&indep),
        mixed_ns: mean(&per_cpu(|s| s.mixed_ns)),
        indep_ns_per_cpu: indep,
        samples: inside.len(),
    })
}

/// The spread of a figure over repetitions: its coefficient of variation
/// (population standard deviation over the mean), 0 for fewer than 2.
pub(crate) fn cv(xs: &[f64]) -> f64 {
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return 0.0;
    }
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    var.sqrt() / mean
}

/// How much of a figure's spread over repetitions the index explains: the
/// share of its (relative) variance that goes once each value is multiplied
/// by its repetition's index (a slower host, more ns per loop, fewer IOPS:
/// IOPS x ns is what the same work would have done at a fixed speed).
/// Negative when normalizing adds spread.
pub(crate) fn explained(values: &[f64], index: &[f64]) -> f64 {
    let norm: Vec<f64> = values.iter().zip(index).map(|(v, i)| v * i).collect();
    let raw = cv(values);
    if raw == 0.0 {
        return 0.0;
    }
    1.0 - (cv(&norm) / raw).powi(2)
}

/// One repetition of one job: its figure, the probe's index over it and
/// serve-nvme's CPU per I/O (0 on QEMU's controller, which it does not serve).
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpeedRep {
    pub job: String,
    pub mode: String,
    pub rep: u32,
    /// fio's figure in the job's unit (IOPS or MB/s).
    pub value: f64,
    pub unit: &'static str,
    /// Medians over the window of the dependent and the independent loop,
    /// ns (`index`: the mean over the CPUs of each CPU's median).
    pub dep_ns: f64,
    pub indep_ns: f64,
    pub mixed_ns: f64,
    /// (CPU, the independent loop's median on it).
    pub indep_ns_per_cpu: Vec<(usize, f64)>,
    pub samples: usize,
    pub serve_us_per_io: f64,
}

/// Every marked repetition that the probe sampled; `value(job, mode, rep)`:
/// fio's figure and its unit.
pub(crate) fn speed_reps(
    reps: &[super::host_counters::Rep],
    samples: &[Sample],
    value: impl Fn(&str, &str, u32) -> anyhow::Result<(f64, &'static str)>,
) -> anyhow::Result<Vec<SpeedRep>> {
    let mut out = Vec::new();
    for r in reps {
        let Some(w) = index(samples, r.begin_ns, r.end_ns) else {
            continue;
        };
        let (value, unit) = value(&r.job, &r.mode, r.rep)?;
        out.push(SpeedRep {
            job: r.job.clone(),
            mode: r.mode.clone(),
            rep: r.rep,
            value,
            unit,
            dep_ns: w.dep_ns,
            indep_ns: w.indep_ns,
            mixed_ns: w.mixed_ns,
            indep_ns_per_cpu: w.indep_ns_per_cpu,
            samples: w.samples,
            serve_us_per_io: r.serve_us_per_io(),
        });
    }
    Ok(out)
}

/// One job in one mode over its repetitions: the figure's spread, the
/// spread of the figure times each index, and the share each explains.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpeedSpread {
    pub job: String,
    pub mode: String,
    pub unit: &'static str,
    pub values: Vec<f64>,
    pub dep_us: Vec<f64>,
    pub indep_us: Vec<f64>,
    pub mixed_us: Vec<f64>,
    pub serve_us_per_io: Vec<f64>,
    /// Coefficients of variation, %.
    pub cv_pct: f64,
    pub cv_x_dep_pct: f64,
    pub cv_x_indep_pct: f64,
    pub cv_x_mixed_pct: f64,
    /// `explained`, of each index.
    pub explained_dep: f64,
    pub explained_indep: f64,
    pub explained_mixed: f64,
}

/// The repetitions grouped by job and mode, in the order they first came.
pub(crate) fn spreads(reps: &[SpeedRep]) -> Vec<SpeedSpread> {
    let mut keys: Vec<(&str, &str)> = Vec::new();
    for r in reps {
        if !keys.contains(&(r.job.as_str(), r.mode.as_str())) {
            keys.push((&r.job, &r.mode));
        }
    }
    keys.into_iter()
        .map(|(job, mode)| {
            let mut g: Vec<&SpeedRep> = reps.iter().filter(|r| r.job == job && r.mode == mode).collect();
            g.sort_by_key(|r| r.rep);
            let col = |f: fn(&SpeedRep) -> f64| g.iter().map(|r| f(r)).collect::<Vec<f64>>();
            let (v, dep, indep) = (col(|r| r.value), col(|r| r.dep_ns), col(|r| r.indep_ns));
            let mixed = col(|r| r.mixed_ns);
            let times = |i: &[f64]| cv(&v.iter().zip(i).map(|(a, b)| a * b).collect::<Vec<_>>()) * 100.0;
            SpeedSpread {
                job: job.to_string(),
                mode: mode.to_string(),
                unit: g[0].unit,
                cv_pct: cv(&v) * 100.0,
                cv_x_dep_pct: times(&dep),
                cv_x_indep_pct: times(&indep),
                cv_x_mixed_pct: times(&mixed),
                explained_dep: explained(&v, &dep),
                explained_indep: explained(&v, &indep),
                explained_mixed: explained(&v, &mixed),
                values: v,
                dep_us: dep.iter().map(|x| x / 1e3).collect(),
                indep_us: indep.iter().map(|x| x / 1e3).collect(),
                mixed_us: mixed.iter().map(|x| x / 1e3).collect(),
                serve_us_per_io: col(|r| r.serve_us_per_io),
            }
        })
        .collect()
}

impl std::fmt::Display for SpeedSpread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |xs: &[f64], p: usize| -> String {
            let v: Vec<String> = xs.iter().map(|x| format!("{x:.p$}")).collect();
            v.join(" ")
        };
        write!(
            f,
            "speed probe {} {}: {} [{}], loop us indep [{}] mixed [{}] dep [{}], serve-nvme us per I/O [{}]; spread (cv) {:.1} %, x indep {:.1} % (explains {:.0} % of the variance), x mixed {:.1} % ({:.0} %), x dep {:.1} % ({:.0} %)",
            self.job,
            self.mode,
            self.unit,
            list(&self.values, 0),
            list(&self.indep_us, 1),
            list(&self.mixed_us, 1),
            list(&self.dep_us, 1),
            list(&self.serve_us_per_io, 1),
            self.cv_pct,
            self.cv_x_indep_pct,
            self.explained_indep * 100.0,
            self.cv_x_mixed_pct,
            self.explained_mixed * 100.0,
            self.cv_x_dep_pct,
            self.explained_dep * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(at: f64, dep: f64, indep: f64) -> Sample {
        Sample {
            at_ns: at,
            cpu: 0,
            dep_ns: dep,
            indep_ns: indep,
            mixed_ns: indep,
        }
    }

    #[test]
    fn a_windows_index_is_the_median_of_its_samples_only() {
        let xs = [
            s(0.0, 900.0, 900.0),
            s(10.0, 1.0, 4.0),
            s(20.0, 3.0, 2.0),
            s(30.0, 2.0, 6.0),
            s(40.0, 7.0, 7.0),
        ];
        let w = index(&xs, 10.0, 30.0).unwrap();
        assert_eq!((w.dep_ns, w.indep_ns, w.samples), (2.0, 4.0, 3));
        assert_eq!(index(&xs, 41.0, 50.0), None);
        // Two CPUs: each CPU's median, then their mean (CPU 1's three
        // samples do not outvote CPU 0's one).
        let mut ys = vec![s(0.0, 10.0, 100.0)];
        for (at, v) in [(1.0, 20.0), (2.0, 30.0), (3.0, 40.0)] {
            ys.push(Sample {
                cpu: 1,
                ..s(at, v, v * 10.0)
            });
        }
        let w = index(&ys, 0.0, 3.0).unwrap();
        assert_eq!((w.dep_ns, w.indep_ns, w.samples), (20.0, 200.0, 4));
        assert_eq!(w.indep_ns_per_cpu, vec![(0, 100.0), (1, 300.0)]);
    }

    #[test]
    fn spread_and_what_the_index_explains() {
        assert_eq!(cv(&[5.0]), 0.0);
        // mean 2, deviations 1: cv 0.5
        assert_eq!(cv(&[1.0, 3.0]), 0.5);
        // IOPS exactly inverse to the loop's time: all of it explained.
        let iops = [1000.0, 500.0, 800.0];
        let idx = [1.0, 2.0, 1.25];
        assert!((explained(&iops, &idx) - 1.0).abs() < 1e-12);
        // An index that does not move explains nothing.
        assert!(explained(&iops, &[3.0, 3.0, 3.0]).abs() < 1e-12);
        // One that moves the wrong way adds spread.
        assert!(explained(&iops, &[2.0, 1.0, 1.5]) < 0.0);
    }

    fn rep(mode: &str, rep: u32, value: f64, dep: f64, indep: f64) -> SpeedRep {
        SpeedRep {
            job: "j".into(),
            mode: mode.into(),
            rep,
            value,
            unit: "IOPS",
            dep_ns: dep,
            indep_ns: indep,
            mixed_ns: indep,
            indep_ns_per_cpu: vec![(0, indep)],
            samples: 1,
            serve_us_per_io: 0.0,
        }
    }

    #[test]
    fn reps_take_the_probes_samples_inside_their_markers() {
        let line = |rep: u32, at: &str, ns: u64| {
            format!("job=j mode=off rep={rep} at={at} ns={ns} serve_run={ns} serve_wait=0 vcpu_run=0 vcpu_wait=0 qemu_other_run=0 host_busy=0 host_all=0\n")
        };
        let text = [
            line(1, "begin", 0),
            line(1, "end", 1000),
            line(2, "begin", 2000),
            line(2, "end", 3000),
        ]
        .concat();
        let host = super::super::host_counters::reps(&text, |_, _, _| Ok(1e6)).unwrap();
        let xs = [s(500.0, 1.0, 10.0), s(1500.0, 99.0, 99.0), s(2500.0, 2.0, 20.0)];
        let r = speed_reps(&host, &xs, |_, _, rep| Ok((f64::from(rep) * 100.0, "IOPS"))).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].value, r[0].dep_ns, r[0].indep_ns), (100.0, 1.0, 10.0));
        assert_eq!((r[1].value, r[1].dep_ns, r[1].indep_ns), (200.0, 2.0, 20.0));
        // No sample inside: that repetition is left out.
        assert_eq!(
            speed_reps(&host, &xs[..2], |_, _, _| Ok((1.0, "IOPS"))).unwrap().len(),
            1
        );
    }

    #[test]
    fn spreads_group_by_job_and_mode() {
        // off: 1000 IOPS at speed 1, 600 at 1/1.5 slower, 1000; on: 3 %
        // less work done at each speed, its slow rep twice.
        let reps = [
            rep("off", 1, 1000.0, 5.0, 1.0),
            rep("off", 2, 600.0, 5.0, 1.5),
            rep("off", 3, 1000.0, 5.0, 1.0),
            rep("on", 1, 970.0 / 1.5, 5.0, 1.5),
            rep("on", 2, 970.0, 5.0, 1.0),
            rep("on", 3, 970.0 / 1.5, 5.0, 1.5),
        ];
        let sp = spreads(&reps);
        assert_eq!(sp.len(), 2);
        assert_eq!((sp[0].mode.as_str(), sp[0].values.len()), ("off", 3));
        assert_eq!(sp[1].values, vec![970.0 / 1.5, 970.0, 970.0 / 1.5]);
        // on: all of its spread is the index's; the dependent loop's does
        // not move, so it explains none of it.
        assert!((sp[1].explained_indep - 1.0).abs() < 1e-9 && sp[1].cv_x_indep_pct.abs() < 1e-9);
        assert!(sp[1].explained_dep.abs() < 1e-9);
        // off: 1000 900 1000 left of 1000 600 1000.
        assert!((sp[0].cv_pct - 100.0 * cv(&[1000.0, 600.0, 1000.0])).abs() < 1e-9);
        assert!((sp[0].cv_x_indep_pct - 100.0 * cv(&[1000.0, 900.0, 1000.0])).abs() < 1e-9);
    }

    #[test]
    fn the_loops_take_time_in_proportion_to_their_steps() {
        // Not folded by the compiler: 8x the steps takes clearly longer
        // (medians of 5, to ride over a preemption).
        let t = |f: &dyn Fn() -> u64| {
            let mut v: Vec<f64> = (0..5).map(|_| time_ns(f)).collect();
            v.sort_by(f64::total_cmp);
            v[2]
        };
        let dep = t(&|| dep_chain(black_box(80_000), 1)) / t(&|| dep_chain(black_box(10_000), 1));
        let ind = t(&|| indep_chains(black_box(24_000), 1)) / t(&|| indep_chains(black_box(3_000), 1));
        let t8 = table();
        let mix = t(&|| mixed_chains(black_box(24_000), 1, &t8)) / t(&|| mixed_chains(black_box(3_000), 1, &t8));
        assert!(dep > 4.0 && ind > 4.0 && mix > 4.0, "dep {dep} indep {ind} mixed {mix}");
    }

    #[test]
    fn the_probe_samples_until_dropped() {
        let p = Probe::start(Instant::now());
        std::thread::sleep(Duration::from_millis(250));
        let xs = p.samples();
        drop(p);
        let n = cpus().len();
        assert!(xs.len() >= 2 * n, "{} samples in 250 ms on {n} CPUs", xs.len());
        for c in cpus() {
            let on: Vec<f64> = xs.iter().filter(|s| s.cpu == c).map(|s| s.at_ns).collect();
            assert!(on.windows(2).all(|w| w[1] - w[0] >= 90e6), "CPU {c}: {on:?}");
        }
        assert!(xs
            .iter()
            .all(|s| s.dep_ns > 0.0 && s.indep_ns > 0.0 && s.mixed_ns > 0.0));
    }
}
