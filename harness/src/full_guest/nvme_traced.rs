//! The traced run on emu-device's NVMe controller in the full guest (issues 27
//! and 28): once the ivshmem steps are done, the guest swaps the stock nvme
//! driver for the patch series' nvme.ko, preconditions the namespace with
//! sequential writes (untraced) so that the FTL's free lines are used up,
//! loads the DKMS-installed module over the series' driver and runs the daemon
//! on the controller's trace slice; then fio's crc32c-verifying random writes
//! with `nvme reset` and a Controller Fatal Status (the host's `inject reset`)
//! inside, enough writes for the FTL to collect garbage several times
//! (harness/guest-scripts/full-guest-nvme-traced.sh).
//!
//! The host then checks ([`check`]): the job verified every byte across both
//! failures, the kernel log shows the two recoveries and nothing else,
//! trace.bin equals the controller's journal record for record
//! (`journal_truth`), and the FTL records of the run (GC, wear levelling, map
//! cache, NAND) add up, with those the controller made while no slice was
//! adopted (the precondition, the windows of the resets), to exactly what
//! the controller's own counters rose by (`status` before and after).
//! docs/nvme-controller.md ("The traced run in the full guest").

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use hmb_firmware_model::catalog::{
    OP_FLASH_ERASE, OP_FLASH_PROGRAM, OP_FLASH_READ, OP_FTL_GC_END, OP_FTL_GC_START, OP_FTL_WEAR_LEVEL, OP_L2P_CORRUPT,
    OP_L2P_HIT, OP_L2P_MISS,
};
use hmb_trace_file::{Event, TraceReader, Walker};
use serde_json::Value;

use crate::guest_script::{self, Script};
use crate::journal_truth::{self, Journal, JournalReport};

/// The series' nvme.ko in the share.
pub(crate) const SERIES_NVME: &str = "nvme-series.ko";
/// Folder of the share with the run's answers.
pub(crate) const DIR: &str = "nvme-traced";
pub(crate) const DONE: &str = "nvme-traced.done";
pub(crate) const OK: &str = "nvme-traced.ok";
/// The daemon's trace of the controller's slice, in `DIR`.
pub(crate) const TRACE: &str = "nvme-trace.bin";
/// The tag of the run's fatal-status rendezvous (`nvme_tools::fatal_files`).
pub(crate) const FATAL_TAG: &str = "traced";
/// The verifying job: 4 KiB random writes over this many MiB from offset 0,
/// then its read-back (10240 writes: five lines of the 128 MiB namespace's
/// FTL, 8 MiB each, so at least four GC runs once the precondition has left
/// the FTL at its GC threshold).
const JOB_MIB: u64 = 40;
/// After how many of its writes `nvme reset` and the fatal status come.
const RESET_AFTER: u64 = 2048;
const FATAL_AFTER: u64 = 6144;
/// GC runs the trace must show at least.
const MIN_GC_RUNS: u64 = 3;

/// The guest script's parameters of harness/guest-scripts/full-guest-nvme-traced.sh.
/// `precondition_mib`: the sequential writes before the trace starts (the
/// namespace's size: after the tools, that leaves the FTL at its threshold).
pub(crate) fn guest_section(script: Script, precondition_mib: u64) -> Script {
    script
        .set("SERIES_NVME", SERIES_NVME)
        .set("TRACED_DIR", DIR)
        .set("TRACED_DONE", DONE)
        .set("TRACED_OK", OK)
        .set("TRACE_NVME", TRACE)
        .set("PRECONDITION_MIB", precondition_mib)
        .set("TRACED_JOB_MIB", JOB_MIB)
        .set("TRACED_RESET_AFTER", RESET_AFTER)
        .set("TRACED_FATAL_AFTER", FATAL_AFTER)
        .file(&guest_script::FULL_GUEST_NVME_TRACED)
}

/// FTL record kinds against the controller's counters
/// (`/controller/namespace/ftl/...`): each record is made exactly where the
/// counter is raised (hmb-ftl's ftl.rs and gc.rs).
const COUNTED: &[(u16, &str, &str)] = &[
    (OP_FTL_GC_START, "FTL_GC_START", "gc_runs"),
    (OP_FTL_GC_END, "FTL_GC_END", "gc_runs"),
    (OP_FTL_WEAR_LEVEL, "FTL_WEAR_LEVEL", "wear_level_moves"),
    (OP_L2P_HIT, "L2P_HIT", "cache_hits"),
    (OP_L2P_MISS, "L2P_MISS", "cache_misses"),
    (OP_L2P_CORRUPT, "L2P_CORRUPT", "cache_corruptions"),
    (OP_FLASH_READ, "FLASH_READ", "nand_reads"),
    (OP_FLASH_PROGRAM, "FLASH_PROGRAM", "nand_programs"),
    (OP_FLASH_ERASE, "FLASH_ERASE", "nand_erases"),
];

/// Records per opcode, and the pages GC moved by its FTL_GC_END records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct OpCounts {
    pub(crate) by_opcode: BTreeMap<u16, u64>,
    pub(crate) gc_pages_moved: u64,
}

impl OpCounts {
    fn add(&mut self, opcode: u16, payload: &[u8]) {
        *self.by_opcode.entry(opcode).or_default() += 1;
        if opcode == OP_FTL_GC_END {
            if let Some(b) = payload.get(12..16) {
                self.gc_pages_moved += u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            }
        }
    }
    fn get(&self, opcode: u16) -> u64 {
        self.by_opcode.get(&opcode).copied().unwrap_or(0)
    }
}

/// What the controller made outside the trace: records while no slice was
/// adopted (`unadopted`, epoch 0) and records the ring had no room for.
#[derive(Debug, Default, Clone)]
pub(crate) struct Untraced {
    /// Length of the journal's `unadopted` list.
    pub(crate) unadopted_len: usize,
    pub(crate) counts: OpCounts,
}

/// The journal's untraced records (unadopted and dropped), all of them.
pub(crate) fn untraced(journal: &Journal) -> Result<Untraced> {
    ensure!(
        journal.unadopted.len() < hmb_nvme_trace::UNADOPTED_JOURNAL_MAX,
        "the journal's unadopted list is full ({} records): the oldest are gone and the counts cannot add up",
        journal.unadopted.len()
    );
    ensure!(
        journal.evicted == 0,
        "the journal evicted its oldest {} records (serve-nvme --trace-journal): the counts cannot add up",
        journal.evicted
    );
    let mut counts = OpCounts::default();
    for e in journal
        .unadopted
        .iter()
        .chain(journal.entries.iter().filter(|e| !e.written))
    {
        counts.add(e.opcode, &e.payload);
    }
    Ok(Untraced {
        unadopted_len: journal.unadopted.len(),
        counts,
    })
}

/// Records of trace.bin per opcode.
pub(crate) fn trace_counts(trace: &Path) -> Result<OpCounts> {
    let file = std::fs::File::open(trace).with_context(|| format!("opening {}", trace.display()))?;
    let mut reader =
        TraceReader::new(std::io::BufReader::new(file)).with_context(|| format!("reading {}", trace.display()))?;
    let mut walker = Walker::from_start(reader.header());
    let mut counts = OpCounts::default();
    while let Some(item) = reader.next_item().context("reading a record")? {
        walker.feed(&item, &mut |ev| {
            if let Event::Record { item, .. } = ev {
                counts.add(item.opcode(), item.payload);
            }
        });
    }
    Ok(counts)
}

/// One FTL record kind: records in the trace, outside it during the run, and
/// the controller's counter's rise over the run.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct CountCheck {
    pub(crate) record: &'static str,
    pub(crate) counter: &'static str,
    pub(crate) traced: u64,
    pub(crate) untraced: u64,
    pub(crate) counter_rise: u64,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct TracedOutcome {
    pub(crate) hmb_trace_kb: u64,
    pub(crate) fio_bytes: u64,
    pub(crate) reset_after_writes: u64,
    pub(crate) fatal_after_writes: u64,
    pub(crate) journal: String,
    pub(crate) epochs: Vec<u64>,
    pub(crate) counts: Vec<CountCheck>,
    pub(crate) gc_pages_moved_traced: u64,
}

impl TracedOutcome {
    pub fn summary(&self) -> String {
        let c = |name: &str| self.counts.iter().find(|c| c.record == name).map_or(0, |c| c.traced);
        format!(
            "series nvme.ko (hmb_trace_kb {}), fio verified {} MiB across nvme reset (after {} writes) and a fatal status (after {}); {}; traced: {} GC runs ({} pages moved), {} wear-level moves, {} L2P hits, {} misses, {} NAND reads, {} programs, {} erases; every FTL count equals the controller's counter",
            self.hmb_trace_kb,
            self.fio_bytes >> 20,
            self.reset_after_writes,
            self.fatal_after_writes,
            self.journal,
            c("FTL_GC_START"),
            self.gc_pages_moved_traced,
            c("FTL_WEAR_LEVEL"),
            c("L2P_HIT"),
            c("L2P_MISS"),
            c("FLASH_READ"),
            c("FLASH_PROGRAM"),
            c("FLASH_ERASE"),
        )
    }
}

fn u64_at(v: &Value, path: &str) -> Result<u64> {
    v.pointer(path)
        .and_then(Value::as_u64)
        .with_context(|| format!("the controller's report has no {path}"))
}

/// Everything the host has of the run: the guest's answers in `dir`, the
/// controller's status and untraced records before the run (`before`,
/// `untraced_before`, taken when the tools were done) and after it, and its
/// journal after it.
pub(crate) struct RunData<'a> {
    pub(crate) dir: &'a Path,
    pub(crate) before: &'a Value,
    pub(crate) after: &'a Value,
    pub(crate) untraced_before: &'a Untraced,
    pub(crate) journal: &'a Journal,
}

/// Check the traced run (see the module's comment).
pub(crate) fn check(run: &RunData) -> Result<TracedOutcome> {
    let guest = super::nvme_tools::key_values(&String::from_utf8_lossy(
        &std::fs::read(run.dir.join("guest.txt")).context("the traced run left no guest.txt")?,
    ));
    let g = |k: &str| -> Result<u64> {
        guest
            .get(k)
            .with_context(|| format!("guest.txt has no {k}"))?
            .parse()
            .with_context(|| format!("guest.txt's {k}"))
    };
    let hmb_trace_kb = g("hmb_trace_kb")?;
    ensure!(
        hmb_trace_kb > 0,
        "the series' nvme.ko runs with hmb_trace_kb=0: no trace slice"
    );

    // fio verified every byte, and both failures came while it was writing.
    let json = String::from_utf8_lossy(&std::fs::read(run.dir.join("fio-traced.json")).context("no fio-traced.json")?)
        .into_owned();
    let fio_bytes = super::nvme_tools::fio_written(&json, JOB_MIB << 20).context("the traced fio job")?;
    let reset_after = g("traced.reset_after_writes")?;
    let fatal_after = g(&format!("traced.fatal-{FATAL_TAG}_after_writes"))?;
    let writes = fio_bytes / 4096;
    ensure!(
        (RESET_AFTER..fatal_after).contains(&reset_after) && (FATAL_AFTER..writes).contains(&fatal_after),
        "nvme reset after {reset_after} and the fatal status after {fatal_after} of the job's {writes} writes: not both while it was writing, in that order"
    );

    // The kernel log since the series' driver probed: its probe and the two
    // recoveries, the driver's line for the failed controller, nothing else.
    let dmesg = String::from_utf8_lossy(&std::fs::read(run.dir.join("dmesg-nvme.txt")).context("no dmesg-nvme.txt")?)
        .into_owned();
    let lines: Vec<&str> = dmesg.lines().collect();
    let probe = lines
        .iter()
        .rposition(|l| l.contains("pci function"))
        .context("no probe of the series' driver in the kernel log")?;
    super::nvme_tools::check_recoveries(&lines[probe..].join("\n"), &[], 3, 1)?;

    // The controller: running again, a second fatal error counted (the
    // tools' was the first).
    let fatal_errors = u64_at(run.after, "/controller/counters/fatal_errors")?;
    ensure!(
        fatal_errors == 2 && run.after.pointer("/controller/ready") == Some(&Value::Bool(true)),
        "after the traced run the controller counts {fatal_errors} fatal errors (want 2: the tools' and this run's), ready {}",
        run.after.pointer("/controller/ready").unwrap_or(&Value::Null)
    );

    // trace.bin is the journal.
    let trace = run.dir.join(TRACE);
    let report: JournalReport = journal_truth::check(&trace, run.journal)?;
    ensure!(report.passed(), "trace.bin against the journal: {}", report.summary());
    ensure!(
        report.epochs.len() >= 3,
        "the journal has epochs {:?}: want the first, one after nvme reset and one after the fatal status",
        report.epochs
    );

    // The FTL's records add up to its counters.
    let traced = trace_counts(&trace)?;
    let untraced_after = untraced(run.journal)?;
    ensure!(
        untraced_after.unadopted_len >= run.untraced_before.unadopted_len,
        "the journal's unadopted list shrank"
    );
    let ftl = |v: &Value, name: &str| u64_at(v, &format!("/controller/namespace/ftl/{name}"));
    let mut counts = Vec::new();
    let mut wrong = Vec::new();
    for &(opcode, record, counter) in COUNTED {
        let rise = ftl(run.after, counter)?
            .checked_sub(ftl(run.before, counter)?)
            .with_context(|| format!("the controller's {counter} went back"))?;
        let out = untraced_after.counts.get(opcode) - run.untraced_before.counts.get(opcode);
        let c = CountCheck {
            record,
            counter,
            traced: traced.get(opcode),
            untraced: out,
            counter_rise: rise,
        };
        if c.traced + c.untraced != c.counter_rise {
            wrong.push(format!(
                "{record}: {} traced + {} untraced, {counter} rose by {rise}",
                c.traced, c.untraced
            ));
        }
        counts.push(c);
    }
    let moved_rise = ftl(run.after, "gc_pages_moved")? - ftl(run.before, "gc_pages_moved")?;
    let moved_out = untraced_after.counts.gc_pages_moved - run.untraced_before.counts.gc_pages_moved;
    if traced.gc_pages_moved + moved_out != moved_rise {
        wrong.push(format!(
            "FTL_GC_END pages: {} traced + {moved_out} untraced, gc_pages_moved rose by {moved_rise}",
            traced.gc_pages_moved
        ));
    }
    ensure!(
        wrong.is_empty(),
        "the FTL's records do not add up to the controller's counters: {}",
        wrong.join("; ")
    );
    ensure!(
        traced.get(OP_FTL_GC_START) >= MIN_GC_RUNS,
        "the trace shows {} GC runs; the run must make at least {MIN_GC_RUNS}",
        traced.get(OP_FTL_GC_START)
    );
    Ok(TracedOutcome {
        hmb_trace_kb,
        fio_bytes,
        reset_after_writes: reset_after,
        fatal_after_writes: fatal_after,
        journal: report.summary(),
        epochs: report.epochs.clone(),
        counts,
        gc_pages_moved_traced: traced.gc_pages_moved,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_nvme_trace::JournalEntry;

    fn entry(opcode: u16, written: bool, moved: u32) -> JournalEntry {
        let mut payload = vec![0u8; 16];
        payload[12..16].copy_from_slice(&moved.to_le_bytes());
        JournalEntry {
            epoch: 1,
            seq: 0,
            opcode,
            source: 0xFFFF,
            timestamp_ns: 0,
            payload,
            written,
        }
    }

    #[test]
    fn untraced_counts_unadopted_and_dropped_records_only() {
        let mut j = Journal::default();
        j.entries.push(entry(OP_FTL_GC_START, true, 0));
        j.entries.push(entry(OP_FTL_GC_END, false, 7));
        j.unadopted.push_back(entry(OP_FTL_GC_END, true, 5));
        j.unadopted.push_back(entry(OP_L2P_HIT, true, 0));
        let u = untraced(&j).unwrap();
        assert_eq!(u.unadopted_len, 2);
        assert_eq!(
            u.counts.get(OP_FTL_GC_START),
            0,
            "a written adopted record is the trace's"
        );
        assert_eq!(u.counts.get(OP_FTL_GC_END), 2);
        assert_eq!(u.counts.get(OP_L2P_HIT), 1);
        assert_eq!(u.counts.gc_pages_moved, 12);
    }

    #[test]
    fn the_section_sets_the_job_and_the_precondition() {
        let s = guest_section(Script::new(), 128).build();
        for want in [
            "PRECONDITION_MIB='128'\n",
            "TRACED_JOB_MIB='40'\n",
            "SERIES_NVME='nvme-series.ko'\n",
            "nvme_traced() {",
            "fio_across traced 0 \"$TRACED_JOB_MIB\" 0 \"reset:$TRACED_RESET_AFTER\" \"fatal-traced:$TRACED_FATAL_AFTER\"",
        ] {
            assert!(s.contains(want), "{want} missing");
        }
        assert_eq!(FATAL_TAG, "traced", "the script's fatal-traced action");
    }
}
