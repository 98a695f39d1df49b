//! The walk both ground-truth checks (`ivshmem_truth`, `journal_truth`)
//! make over a trace.bin: every item through a `Walker` from the ring's
//! start, a file cut short reported rather than failed, and the records that
//! repeat after a backwards step counted as duplicates. What a record must
//! equal is each check's own.

use std::path::Path;

use anyhow::{Context, Result};
use hmb_trace_file::{Event, TraceReader, Walker};

/// Where the walk stands: the epoch, and the sequence number it expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) epoch: u64,
    pub(crate) expected: u64,
}

impl Place {
    fn of(walker: &Walker) -> Self {
        Self {
            epoch: walker.epoch(),
            expected: walker.expected().unwrap_or(0),
        }
    }
}

/// One item of the file: the place before and after it, and its events
/// (without `SeqBackwards` and the records repeated after it: those are
/// `Walked::duplicates`).
pub(crate) struct Step<'a, 'b> {
    pub(crate) before: Place,
    pub(crate) after: Place,
    pub(crate) events: Vec<Event<'a, 'b>>,
}

/// What the walk itself found.
#[derive(Debug, Default)]
pub(crate) struct Walked {
    pub(crate) duplicates: u64,
    /// Why the file ends early (a torn or corrupt item), if it does.
    pub(crate) truncated: Option<String>,
}

/// Walks `trace` item by item, handing each to `each`. The producer starts
/// every epoch at seq 0 and the daemon runs before it, so records missing
/// at the start of the file are losses too (`Walker::from_start`).
pub(crate) fn walk_trace(trace: &Path, mut each: impl FnMut(Step<'_, '_>) -> Result<()>) -> Result<Walked> {
    let file = std::fs::File::open(trace).with_context(|| format!("opening {}", trace.display()))?;
    let mut reader = TraceReader::new(std::io::BufReader::with_capacity(1 << 20, file))
        .with_context(|| format!("reading {}", trace.display()))?;
    let mut walker = Walker::from_start(reader.header());
    let mut walked = Walked::default();
    loop {
        let item = match reader.next_item() {
            Ok(Some(item)) => item,
            Ok(None) => break,
            Err(e) => {
                walked.truncated = Some(e.to_string());
                break;
            }
        };
        item.kind().context("decoding a marker")?;
        let before = Place::of(&walker);
        let mut events = Vec::new();
        let mut duplicate = false;
        walker.feed(&item, &mut |ev| match ev {
            Event::SeqBackwards { .. } => duplicate = true,
            Event::Record { .. } if duplicate => walked.duplicates += 1,
            ev => events.push(ev),
        });
        each(Step {
            before,
            after: Place::of(&walker),
            events,
        })?;
    }
    Ok(walked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmb_trace_abi::hmb_record_hdr;
    use hmb_trace_file::{FileHeader, Marker, TraceWriter};
    use std::io::Write;

    fn record(w: &mut TraceWriter<std::fs::File>, seq: u64) {
        let hdr = hmb_record_hdr {
            length: 4u32.into(),
            seq: seq.into(),
            ..Default::default()
        };
        w.write_record(&hdr, b"abcd").unwrap();
    }

    /// Records 0, 1, 1 (a repeat), a LOST marker for 2, then 3 and a torn tail.
    #[test]
    fn repeats_are_counted_apart_and_a_torn_tail_is_reported() {
        let file = tempfile::NamedTempFile::new().unwrap();
        let mut w = TraceWriter::new(file.reopen().unwrap(), &FileHeader::new(1, 0, 1 << 16, 1)).unwrap();
        for seq in [0, 1, 1] {
            record(&mut w, seq);
        }
        w.write_marker(&Marker::Lost {
            first_seq: 2,
            count: 1,
            epoch: 1,
        })
        .unwrap();
        record(&mut w, 3);
        w.flush().unwrap();
        drop(w);
        let mut tail = std::fs::OpenOptions::new().append(true).open(file.path()).unwrap();
        tail.write_all(&[0xff; 5]).unwrap();

        let mut steps = Vec::new();
        let walked = walk_trace(file.path(), |step| {
            let kinds: Vec<String> = step
                .events
                .iter()
                .map(|ev| match ev {
                    Event::Record { item, .. } => format!("record {}", item.seq()),
                    Event::Lost { first_seq, count, .. } => format!("lost {first_seq}+{count}"),
                    other => format!("{other:?}"),
                })
                .collect();
            steps.push((step.before.expected, step.after.expected, kinds));
            Ok(())
        })
        .unwrap();
        assert_eq!(walked.duplicates, 1);
        assert!(walked.truncated.is_some(), "{walked:?}");
        let want: Vec<(u64, u64, Vec<String>)> = vec![
            (0, 1, vec!["record 0".into()]),
            (1, 2, vec!["record 1".into()]),
            (2, 2, vec![]),
            (2, 3, vec!["lost 2+1".into()]),
            (3, 4, vec!["record 3".into()]),
        ];
        assert_eq!(steps, want);
    }
}
