//! Reading the guest console log as it grows: complete lines, the markers
//! printed by images/guest/init, and kernel fault reports.

use super::kernel_checks;
use super::stock_reports::{self, ReportFilter};
use anyhow::{Context, Result};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// True for a kernel log line (`[    1.234567] ...`, printk.time=1) reporting a fault.
/// Only kernel lines are checked: the job's own output may say "WARNING:".
pub fn is_fault_line(line: &str) -> bool {
    let Some(rest) = line.trim_start_matches(['\r', '\0']).strip_prefix('[') else {
        return false;
    };
    let Some((stamp, message)) = rest.split_once(']') else {
        return false;
    };
    let stamp = stamp.trim();
    if stamp.is_empty() || !stamp.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return false;
    }
    // The list is images/KERNEL_CHECKS, shared by every kernel-log gate.
    kernel_checks::is_fault_message(message)
}

/// The fault lines of a whole kernel log (a saved dmesg or console file),
/// but for the stock reports every gate tolerates in their exact shape
/// (`stock_reports`).
pub fn fault_lines(text: &str) -> Vec<String> {
    stock_reports::untolerated_lines(text)
        .into_iter()
        .filter(|l| is_fault_line(l))
        .collect()
}

/// `HMBT-RESULT rc=N` -> Some(N).
pub fn parse_result(line: &str) -> Option<i32> {
    let at = line.find("HMBT-RESULT rc=")?;
    line[at + "HMBT-RESULT rc=".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

pub struct ConsoleLog {
    path: PathBuf,
    offset: u64,
    partial: String,
    /// Lines a waiter read past its match: handed out again by the next poll, so a
    /// marker that arrived in the same read as the previous one is not lost.
    unread: Vec<String>,
    pub lines: Vec<String>,
    pub faults: Vec<String>,
    /// Holds back a candidate stock report until its shape is known.
    reports: ReportFilter,
}

impl ConsoleLog {
    pub(crate) fn new(path: &Path) -> ConsoleLog {
        ConsoleLog {
            path: path.to_path_buf(),
            offset: 0,
            partial: String::new(),
            unread: Vec::new(),
            lines: Vec::new(),
            faults: Vec::new(),
            reports: ReportFilter::default(),
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Read what was appended since the last call; returns the new complete lines.
    pub(crate) fn poll(&mut self) -> Result<Vec<String>> {
        let mut fresh = std::mem::take(&mut self.unread);
        let mut file = match std::fs::File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(fresh),
            Err(e) => return Err(e).with_context(|| format!("opening {}", self.path.display())),
        };
        file.seek(SeekFrom::Start(self.offset))?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf)?;
        self.offset += buf.len() as u64;
        fresh.extend(self.feed(&String::from_utf8_lossy(&buf)));
        Ok(fresh)
    }

    /// Give back lines read but not consumed: the next `poll` returns them first.
    pub(crate) fn unread(&mut self, lines: impl IntoIterator<Item = String>) {
        let mut rest: Vec<String> = lines.into_iter().collect();
        rest.append(&mut self.unread);
        self.unread = rest;
    }

    /// Split text into lines, keeping an incomplete tail for the next call.
    pub(crate) fn feed(&mut self, text: &str) -> Vec<String> {
        self.partial.push_str(text);
        let mut fresh = Vec::new();
        while let Some(end) = self.partial.find('\n') {
            let line: String = self.partial[..end].trim_end_matches('\r').to_string();
            self.partial.drain(..=end);
            let checked = self.reports.feed(&line);
            self.faults.extend(checked.into_iter().filter(|l| is_fault_line(l)));
            fresh.push(line.clone());
            self.lines.push(line);
        }
        fresh
    }

    /// The last `n` lines, for error messages.
    pub fn tail(&self, n: usize) -> String {
        let start = self.lines.len().saturating_sub(n);
        let mut out = self.lines[start..].join("\n");
        if !self.partial.is_empty() {
            out.push('\n');
            out.push_str(&self.partial);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_given_back_come_first_in_the_next_poll() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        std::fs::write(&path, "HMBT-IRQ2 1\nHMBT-RESULT rc=0\n").unwrap();
        let mut log = ConsoleLog::new(&path);
        let mut lines = log.poll().unwrap().into_iter();
        assert_eq!(lines.next().as_deref(), Some("HMBT-IRQ2 1"));
        log.unread(lines);
        std::fs::write(&path, "HMBT-IRQ2 1\nHMBT-RESULT rc=0\nlater\n").unwrap();
        assert_eq!(log.poll().unwrap(), ["HMBT-RESULT rc=0", "later"]);
        assert!(log.poll().unwrap().is_empty());
    }

    #[test]
    fn only_kernel_lines_count_as_faults() {
        assert!(is_fault_line(
            "[   12.345678] BUG: kernel NULL pointer dereference, address: 0"
        ));
        assert!(is_fault_line("[    0.1] WARNING: CPU: 0 PID: 1 at mm/x.c:1 f+0x1/0x2"));
        assert!(is_fault_line(
            "[    3.000001] Kernel panic - not syncing: Attempted to kill init!"
        ));
        assert!(!is_fault_line("WARNING: the job printed this"));
        // The reports of the free checks (qemu::kernel_checks).
        assert!(is_fault_line(
            "[   20.100000] BUG kmalloc-64 (Tainted: G           OE     ): Poison overwritten"
        ));
        assert!(is_fault_line(
            "[   20.100000] BUG: KFENCE: use-after-free read in hmb_trace_release+0x1/0x2"
        ));
        assert!(is_fault_line("[    3.000000] pagealloc: memory corruption"));
        assert!(!is_fault_line("[ok] BUG: not a kernel line"));
        assert!(!is_fault_line(
            "[    1.000000] virtio_blk virtio0: 1/0/0 default/read/poll queues"
        ));
    }

    #[test]
    fn lines_are_split_across_reads_and_results_parsed() {
        let mut log = ConsoleLog::new(Path::new("/nonexistent"));
        assert!(log.feed("HMBT-RES").is_empty());
        let lines = log.feed("ULT rc=3\r\n[ 1.0] Oops: 0002\nrest");
        assert_eq!(lines, ["HMBT-RESULT rc=3", "[ 1.0] Oops: 0002"]);
        assert_eq!(parse_result(&lines[0]), Some(3));
        assert_eq!(log.faults.len(), 1);
        assert!(log.tail(1).ends_with("rest"));
        assert_eq!(parse_result("HMBT-RESULT rc=x"), None);
        assert_eq!(parse_result("noise [ 2.0] xHMBT-RESULT rc=0"), Some(0));
    }
}
