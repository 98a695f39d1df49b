//! Synthetic trace.bin files from the firmware model's records, written
//! with the tracefile writer exactly as the daemon lays them out: drops
//! (with or without LOST markers), frozen epochs and new epochs. Used by the
//! tests, the snapshots and the benchmark.
// Shared by several test files and the bench, each using a part of it.
#![allow(dead_code)]

use std::io::Write;

use hmb_firmware_model::{fill_record, Workload};
use hmb_trace_abi::{hmb_record_hdr, HMB_RECORD_MAX_PAYLOAD};
use hmb_trace_file::{FileError, FileHeader, Marker, TraceWriter};

/// Records `count` seqs starting at `first_seq` never reach the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drop {
    pub first_seq: u64,
    pub count: u64,
    /// The daemon wrote a LOST marker for it (else only the gap shows).
    pub marked: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochSpec {
    pub epoch: u64,
    pub ring_size: u64,
    /// Sequence numbers produced in this epoch (records + drops).
    pub seqs: u64,
    pub drops: Vec<Drop>,
    /// The epoch ends with FROZEN; drops at its end are reported then.
    pub frozen: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SynthSpec {
    pub workload: Workload,
    pub seed: u64,
    pub epochs: Vec<EpochSpec>,
    pub start_ns: u64,
    /// Mean nanoseconds between records.
    pub step_ns: u64,
}

impl SynthSpec {
    /// One epoch of `seqs` records, no drops.
    pub fn simple(workload: Workload, seed: u64, seqs: u64) -> Self {
        Self {
            workload,
            seed,
            epochs: vec![EpochSpec {
                epoch: 1,
                ring_size: 1 << 20,
                seqs,
                drops: Vec::new(),
                frozen: false,
            }],
            start_ns: 1_000_000,
            step_ns: 1_000,
        }
    }
}

/// What was written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SynthSummary {
    pub records: u64,
    pub lost: u64,
    pub bytes: u64,
}

pub fn write_trace<W: Write>(w: W, spec: &SynthSpec) -> Result<SynthSummary, FileError> {
    let first = spec.epochs.first().map_or((1 << 20, 0), |e| (e.ring_size, e.epoch));
    let mut tw = TraceWriter::new(w, &FileHeader::new(1, 0, first.0, first.1))?;
    let mut sum = SynthSummary::default();
    let mut buf = [0u8; HMB_RECORD_MAX_PAYLOAD as usize];
    let mut ts = spec.start_ns;
    for (i, e) in spec.epochs.iter().enumerate() {
        if i > 0 {
            tw.write_marker(&Marker::Epoch {
                epoch: e.epoch,
                ring_size: e.ring_size,
            })?;
        }
        let mut last_written = None;
        let mut seq = 0;
        // Simulated-time workloads (ssd:causal) carry their own timestamps,
        // offset so that each epoch follows the previous one.
        let epoch_base = ts;
        while seq < e.seqs {
            if let Some(d) = e.drops.iter().find(|d| d.first_seq == seq) {
                let count = d.count.min(e.seqs - seq);
                sum.lost += count;
                seq += count;
                // Markers go where the daemon notices: before the next record,
                // or (drops at the end of a frozen epoch) before FROZEN.
                if d.marked && (seq < e.seqs || e.frozen) {
                    tw.write_marker(&Marker::Lost {
                        first_seq: d.first_seq,
                        count,
                        epoch: e.epoch,
                    })?;
                }
                continue;
            }
            let shape = fill_record(spec.seed ^ e.epoch, spec.workload, seq, &mut buf);
            ts = match shape.sim_ns {
                Some(sim) => epoch_base + sim,
                None => ts + spec.step_ns / 2 + (seq.wrapping_mul(0x9E37_79B9) >> 7) % spec.step_ns.max(1),
            };
            let hdr = hmb_record_hdr {
                length: (shape.len as u32).into(),
                opcode: shape.opcode.into(),
                seq: seq.into(),
                timestamp_ns: ts.into(),
                source: shape.source.into(),
                ..Default::default()
            };
            tw.write_record(&hdr, &buf[..shape.len])?;
            sum.records += 1;
            last_written = Some(seq);
            seq += 1;
        }
        if e.frozen {
            tw.write_marker(&Marker::Frozen {
                epoch: e.epoch,
                last_seq: last_written,
                next_seq: e.seqs,
            })?;
        }
    }
    tw.flush()?;
    sum.bytes = tw.offset();
    Ok(sum)
}

/// The ssd fixture of the export tests (tests/cli.rs has the same shape):
/// drops with and without LOST markers (one at the end of a frozen epoch),
/// a FROZEN epoch, and a second epoch that starts with an unmarked drop.
pub fn drops_spec() -> SynthSpec {
    let drop = |first_seq, count, marked| Drop {
        first_seq,
        count,
        marked,
    };
    SynthSpec {
        workload: hmb_firmware_model::Workload::Ssd,
        seed: 1,
        epochs: vec![
            EpochSpec {
                epoch: 3,
                ring_size: 1 << 16,
                seqs: 600,
                drops: vec![
                    drop(10, 4, true),
                    drop(20, 2, false),
                    drop(300, 40, true),
                    drop(590, 10, true),
                ],
                frozen: true,
            },
            EpochSpec {
                epoch: 4,
                ring_size: 1 << 17,
                seqs: 400,
                drops: vec![drop(0, 2, false), drop(100, 7, true)],
                frozen: false,
            },
        ],
        start_ns: 5_000_000,
        step_ns: 2_000,
    }
}

/// The export fixtures written into `dir`: `drops.bin` (above), `npu.bin`,
/// `causal.bin` (the causal ssd workload); their names.
pub fn write_fixtures(dir: &std::path::Path) -> [&'static str; 3] {
    let write = |name: &str, spec: &SynthSpec| {
        write_trace(std::fs::File::create(dir.join(name)).unwrap(), spec).unwrap();
    };
    write("drops.bin", &drops_spec());
    write("npu.bin", &SynthSpec::simple(hmb_firmware_model::Workload::Npu, 9, 300));
    write(
        "causal.bin",
        &SynthSpec::simple(hmb_firmware_model::Workload::SsdCausal, 5, 3000),
    );
    ["drops.bin", "npu.bin", "causal.bin"]
}
