//! Reports a debug kernel prints about stock kernel code, in a path the
//! module and the series take no part in, that every kernel-log gate
//! tolerates, each only in its exact shape (docs/debug-checks.md, "Stock
//! reports"). Anything else in or around such a report, and any report
//! that departs from the shape in one line, fails the run as before.
//!
//! One report is known: on 6.12 (`6.12-debug`, lockdep), nvme-core's
//! `nvme_start_freeze()` starts a queue freeze with
//! `blk_freeze_queue_start()` from the timeout work (`nvme_timeout()` ->
//! `nvme_dev_disable()`), and the reset work ends it. The 6.12 stable
//! block layer models a freeze as a lock held by the freezing task, so
//! lockdep reports the timeout work for returning with it:
//!
//! ```text
//! BUG: workqueue leaked atomic, lock or RCU: kworker/1:1H[42]
//!      preempt=0x00000000 lock=0->2 RCU=0->0 workfn=blk_mq_timeout_work
//! 2 locks held by kworker/1:1H/42:
//!  #0: ffff... (&q->q_usage_counter(io)){++++}-{0:0}, at: nvme_start_freeze+0x5a/0xb0 [nvme_core]
//!  #1: ffff... (&q->q_usage_counter(queue)){++++}-{0:0}, at: nvme_start_freeze+0x5a/0xb0 [nvme_core]
//! CPU: 1 UID: 0 PID: 42 Comm: kworker/1:1H Tainted: G           O       6.12.95-hmbt-debug #2
//! Hardware name: QEMU Standard PC (Q35 + ICH9, 2009), BIOS ...
//! Workqueue: kblockd blk_mq_timeout_work
//! Call Trace:
//!  <TASK>
//!  dump_stack_lvl+0x.../0x...
//!  process_one_work+0x.../0x...
//!  ...
//!  </TASK>
//! ```
//!
//! Mainline (6.14, as Debian's 7.x has it) starts and ends that freeze with
//! the `_non_owner` variants, which lockdep does not track, for exactly this
//! reason ("start_freeze is called from timeout work function, but unfreeze
//! is done in reset work context"). The stock driver alone prints the same
//! report on 6.12-debug (docs/debug-checks.md).
//!
//! Tolerated only if every held lock is one of the queue's two freeze maps
//! taken at `nvme_start_freeze`, nothing else leaked (preempt count 0, RCU
//! 0->0, lock 0->N with N those locks), the work function is
//! `blk_mq_timeout_work` on kblockd, and the stack dump ends with no other
//! report inside: a lock of ours held across the work item, or a leak of
//! any other kind, is not this report.

/// The headline (the message after the `[ time]` stamp).
const HEADLINE: &str = "BUG: workqueue leaked atomic, lock or RCU: kworker/";
/// The locks the freeze holds (block/blk-core.c names the maps so).
const FREEZE_MAPS: [&str; 2] = ["(&q->q_usage_counter(io)", "(&q->q_usage_counter(queue)"];
/// Where lockdep says they were taken.
const FREEZE_SITE: &str = ", at: nvme_start_freeze+";
/// Longest report: headline, counts, locks, stack dump (a few dozen lines).
const MAX_LINES: usize = 80;

/// The message of a kernel log line (`[   1.234567] message`), None for a
/// line that is not the kernel's (the guest script's own output).
pub(crate) fn kernel_message(line: &str) -> Option<&str> {
    let rest = line.trim_start_matches(['\r', '\0']).strip_prefix('[')?;
    let (stamp, message) = rest.split_once(']')?;
    let stamp = stamp.trim();
    (!stamp.is_empty() && stamp.chars().all(|c| c.is_ascii_digit() || c == '.')).then_some(message)
}

/// Where a candidate report stands after its lines so far.
#[derive(Debug, PartialEq, Eq)]
enum Shape {
    /// So far the known shape; more lines needed.
    Open,
    /// The whole known report.
    Tolerated,
    /// Not the known report.
    Other,
}

/// The shape of a candidate report: kernel messages, the headline first.
fn shape(messages: &[&str]) -> Shape {
    let mut it = messages.iter().map(|m| m.trim());
    if !it.next().is_some_and(|m| m.starts_with(HEADLINE.trim_start())) {
        return Shape::Other;
    }
    // "preempt=0x00000000 lock=0->N RCU=0->0 workfn=blk_mq_timeout_work"
    let Some(counts) = it.next() else { return Shape::Open };
    let held = counts
        .strip_prefix("preempt=0x00000000 lock=0->")
        .and_then(|r| r.strip_suffix(" RCU=0->0 workfn=blk_mq_timeout_work"))
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n > 0);
    let Some(held) = held else { return Shape::Other };
    let Some(locks_line) = it.next() else {
        return Shape::Open;
    };
    if !(locks_line.starts_with(&format!("{held} locks held by kworker/"))
        || (held == 1 && locks_line.starts_with("1 lock held by kworker/")))
    {
        return Shape::Other;
    }
    for i in 0..held {
        let Some(lock) = it.next() else { return Shape::Open };
        let ours = lock.starts_with(&format!("#{i}: "))
            && FREEZE_MAPS.iter().any(|m| lock.contains(m))
            && lock.contains(FREEZE_SITE);
        if !ours {
            return Shape::Other;
        }
    }
    // The stack dump: its header lines, then the trace to </TASK>.
    let mut workqueue = false;
    let mut in_trace = false;
    for m in it {
        if m == "</TASK>" {
            return if workqueue && in_trace {
                Shape::Tolerated
            } else {
                Shape::Other
            };
        }
        if m == "Call Trace:" {
            in_trace = true;
        } else if m == "Workqueue: kblockd blk_mq_timeout_work" {
            workqueue = !in_trace;
        } else if crate::qemu::kernel_checks::is_fault_message(m) {
            // Another report inside this one.
            return Shape::Other;
        }
    }
    Shape::Open
}

/// Follows a kernel log line by line and holds back the lines of a
/// candidate report until its shape is known: a tolerated report's lines
/// are dropped, any other report's are handed on, to be checked as usual.
#[derive(Debug, Default)]
pub(crate) struct ReportFilter {
    /// The candidate's kernel lines, the headline first.
    held: Vec<String>,
}

impl ReportFilter {
    /// One more line; returns the lines to check for faults now.
    pub(crate) fn feed(&mut self, line: &str) -> Vec<String> {
        let Some(message) = kernel_message(line) else {
            // Not the kernel's: never part of a report.
            return vec![line.to_string()];
        };
        if self.held.is_empty() && !message.trim_start().starts_with(HEADLINE.trim_start()) {
            return vec![line.to_string()];
        }
        self.held.push(line.to_string());
        let messages: Vec<&str> = self.held.iter().filter_map(|l| kernel_message(l)).collect();
        match shape(&messages) {
            Shape::Open if self.held.len() < MAX_LINES => Vec::new(),
            Shape::Tolerated => {
                self.held.clear();
                Vec::new()
            }
            Shape::Open | Shape::Other => self.release(),
        }
    }

    /// Give up the candidate: its headline is checked, and the lines after
    /// it are fed again (one of them may start a report of its own).
    fn release(&mut self) -> Vec<String> {
        let mut held = std::mem::take(&mut self.held).into_iter();
        let mut out: Vec<String> = held.next().into_iter().collect();
        for l in held {
            out.extend(self.feed(&l));
        }
        out
    }

    /// The end of the log: a candidate still open was cut off, so it is
    /// not the known report.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        while !self.held.is_empty() {
            out.extend(self.release());
        }
        out
    }
}

/// The lines of a whole kernel log (dmesg, a console file) but for the
/// tolerated stock reports, in order.
pub fn untolerated_lines(text: &str) -> Vec<String> {
    let mut filter = ReportFilter::default();
    let mut out = Vec::new();
    for line in text.lines() {
        out.extend(filter.feed(line.trim_end_matches('\r')));
    }
    out.extend(filter.finish());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qemu::console::is_fault_line;

    /// The report as 6.12-debug prints it: kernel/workqueue.c
    /// process_one_work's pr_err, lockdep_print_held_locks and print_lock,
    /// dump_stack.
    fn report(locks: &[&str], workfn: &str) -> Vec<String> {
        let mut r = vec![
            "BUG: workqueue leaked atomic, lock or RCU: kworker/1:1H[42]".to_string(),
            format!(
                "     preempt=0x00000000 lock=0->{} RCU=0->0 workfn={workfn}",
                locks.len()
            ),
            format!(
                "{} lock{} held by kworker/1:1H/42:",
                locks.len(),
                if locks.len() == 1 { "" } else { "s" }
            ),
        ];
        for (i, l) in locks.iter().enumerate() {
            r.push(format!(" #{i}: ffff88800a1b2c30 {l}"));
        }
        r.extend(
            [
                "CPU: 1 UID: 0 PID: 42 Comm: kworker/1:1H Tainted: G           O       6.12.95-hmbt-debug #2",
                "Hardware name: QEMU Standard PC (Q35 + ICH9, 2009), BIOS 1.16.2-debian-1.16.2-1 04/01/2014",
                &format!("Workqueue: kblockd {workfn}"),
                "Call Trace:",
                " <TASK>",
                " dump_stack_lvl+0x7e/0xc0",
                " process_one_work+0x8a1/0x1160",
                " worker_thread+0x5d1/0xd70",
                " kthread+0x2d5/0x3a0",
                " ret_from_fork+0x34/0x70",
                " ret_from_fork_asm+0x1a/0x30",
                " </TASK>",
            ]
            .map(String::from),
        );
        r.into_iter()
            .enumerate()
            .map(|(i, m)| format!("[   12.{:06}] {m}", 100 + i))
            .collect()
    }

    const IO: &str = "(&q->q_usage_counter(io)){++++}-{0:0}, at: nvme_start_freeze+0x5a/0xb0 [nvme_core]";
    const QUEUE: &str = "(&q->q_usage_counter(queue)){++++}-{0:0}, at: nvme_start_freeze+0x5a/0xb0 [nvme_core]";

    fn faults(lines: &[String]) -> Vec<String> {
        untolerated_lines(&lines.join("\n"))
            .into_iter()
            .filter(|l| is_fault_line(l))
            .collect()
    }

    #[test]
    fn the_stock_freeze_report_is_tolerated_and_the_lines_around_it_kept() {
        let mut log = vec![
            "[   11.0] nvme nvme0: I/O tag 3 (0003) opcode 0x2 (Read) QID 1 timeout, reset controller".to_string(),
        ];
        log.extend(report(&[IO, QUEUE], "blk_mq_timeout_work"));
        log.push("HMBT-STEP after".to_string());
        log.push("[   13.0] nvme nvme0: 2/0/0 default/read/poll queues".to_string());
        let kept = untolerated_lines(&log.join("\n"));
        assert_eq!(
            kept,
            [log[0].clone(), log[log.len() - 2].clone(), log[log.len() - 1].clone()]
        );
        assert!(faults(&log).is_empty());
        // With the namespace's two maps numbered, as lockdep does for a
        // second queue of the class.
        let numbered = IO.replace("(io)", "(io)#2");
        assert!(faults(&report(&[&numbered, QUEUE], "blk_mq_timeout_work")).is_empty());
    }

    #[test]
    fn any_other_report_of_the_kind_fails() {
        let ours = "(&t->lock){+.+.}-{4:4}, at: nvme_hmb_trace_start+0x2a/0x300 [nvme]";
        let elsewhere = "(&q->q_usage_counter(io)){++++}-{0:0}, at: blk_mq_freeze_queue+0x12/0x20";
        for bad in [
            report(&[IO, QUEUE, ours], "blk_mq_timeout_work"),
            report(&[ours], "blk_mq_timeout_work"),
            report(&[IO, elsewhere], "blk_mq_timeout_work"),
            report(&[IO, QUEUE], "nvme_reset_work"),
        ] {
            let f = faults(&bad);
            assert!(f.iter().any(|l| l.contains("BUG: workqueue leaked")), "{bad:#?}");
        }
        // Preemption or RCU leaked as well.
        let mut rcu = report(&[IO, QUEUE], "blk_mq_timeout_work");
        rcu[1] = rcu[1].replace("RCU=0->0", "RCU=0->1");
        assert!(!faults(&rcu).is_empty());
        // Cut off before its end (the guest died): not tolerated.
        let cut = &report(&[IO, QUEUE], "blk_mq_timeout_work")[..8];
        assert!(!faults(cut).is_empty());
        // Another report inside the stack dump fails, and is named.
        let mut nested = report(&[IO, QUEUE], "blk_mq_timeout_work");
        nested.insert(
            12,
            "[   12.5] BUG: KASAN: slab-use-after-free in nvme_hmb_trace_start+0x1/0x2".into(),
        );
        let f = faults(&nested);
        assert!(f.iter().any(|l| l.contains("KASAN")), "{f:#?}");
        assert!(f.iter().any(|l| l.contains("workqueue leaked")), "{f:#?}");
    }

    /// The live console scan (`ConsoleLog`, fed in pieces as QEMU writes)
    /// holds the report back and drops it; a real fault after it counts.
    #[test]
    fn the_live_console_scan_tolerates_it_too() {
        let mut console = crate::qemu::console::ConsoleLog::new(std::path::Path::new("/nonexistent"));
        let text = report(&[IO, QUEUE], "blk_mq_timeout_work").join("\n") + "\n";
        let (a, b) = text.split_at(text.len() / 3);
        console.feed(a);
        console.feed(b);
        assert!(console.faults.is_empty(), "{:#?}", console.faults);
        console.feed("[   14.0] BUG: sleeping function called from invalid context at x.c:1\n");
        assert_eq!(console.faults.len(), 1);
        let mut other = crate::qemu::console::ConsoleLog::new(std::path::Path::new("/nonexistent"));
        other.feed(&(report(&[IO, QUEUE], "nvme_reset_work").join("\n") + "\n"));
        assert!(other.faults.iter().any(|l| l.contains("workqueue leaked")));
    }

    #[test]
    fn a_report_right_after_a_broken_candidate_is_still_seen() {
        let mut log = report(&[IO], "nvme_reset_work")[..2].to_vec();
        log.extend(report(&[IO, QUEUE], "blk_mq_timeout_work"));
        let f = faults(&log);
        assert_eq!(f.len(), 1, "{f:#?}");
    }
}
