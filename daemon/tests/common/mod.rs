//! Host harness: a ring in a /dev/shm file, produced into by the firmware
//! model in this process, drained by the real daemon binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hmb_firmware_model::{expected_record, module_sim, Produced, Producer, SharedRing, Workload};
use hmb_trace_abi::{offsets, HMB_RING_HDR_SIZE};
use hmb_trace_file::{ItemKind, Marker, TraceReader};
use memmap2::MmapOptions;

pub const BIN: &str = env!("CARGO_BIN_EXE_hmb-trace-daemon");

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub ring_path: PathBuf,
    pub out: PathBuf,
    pub ring: SharedRing,
}

impl Rig {
    pub fn new(ring_size: u64) -> Self {
        let dir = tempfile::tempdir_in("/dev/shm")
            .or_else(|_| tempfile::tempdir())
            .unwrap();
        let ring_path = dir.path().join("ring");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .open(&ring_path)
            .unwrap();
        file.set_len(HMB_RING_HDR_SIZE as u64 + ring_size).unwrap();
        let map = Arc::new(MmapOptions::new().map_raw(&file).unwrap());
        let ring = SharedRing::from_mmap(map).unwrap();
        module_sim::init(&ring, ring_size, 1).unwrap();
        let out = dir.path().join("trace.bin");
        Self {
            dir,
            ring_path,
            out,
            ring,
        }
    }

    pub fn producer(&self) -> Producer {
        Producer::attach(self.ring.share()).unwrap()
    }

    pub fn command(&self, extra: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.arg("--ring-file")
            .arg(&self.ring_path)
            .arg("-o")
            .arg(&self.out)
            .args(extra);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        c
    }

    pub fn spawn(&self, extra: &[&str]) -> Child {
        self.command(extra).spawn().unwrap()
    }

    /// Run the daemon to its exit; returns (code, stderr).
    pub fn run(&self, extra: &[&str]) -> (i32, String) {
        let out = self.command(extra).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn head(&self) -> u64 {
        self.ring
            .atomic_u64(offsets::HEAD)
            .load(std::sync::atomic::Ordering::Acquire)
    }
    pub fn tail(&self) -> u64 {
        self.ring
            .atomic_u64(offsets::TAIL)
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Wait until the consumer has published everything produced.
    pub fn wait_drained(&self, timeout: Duration) {
        let start = Instant::now();
        while self.tail() != self.head() {
            assert!(
                start.elapsed() < timeout,
                "daemon did not drain: head {} tail {}",
                self.head(),
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// Produce the ground truth for the next seq; lossless waits for room.
pub fn produce(p: &mut Producer, seed: u64, workload: Workload, lossless: bool) -> Produced {
    let seq = p.next_seq();
    let r = expected_record(seed, workload, seq);
    if lossless {
        while !p.fits(r.payload.len()) {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    p.produce(r.opcode, r.source, seq, &r.payload)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    Record {
        seq: u64,
        opcode: u16,
        source: u32,
        payload: Vec<u8>,
    },
    Marker(Marker),
}

pub fn read_trace(path: &Path) -> Vec<Got> {
    let mut r = TraceReader::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut items = Vec::new();
    while let Some(item) = r.next_item().unwrap() {
        match item.kind().unwrap() {
            ItemKind::Record => items.push(Got::Record {
                seq: item.seq(),
                opcode: item.opcode(),
                source: item.source(),
                payload: item.payload.to_vec(),
            }),
            ItemKind::Marker(m) => items.push(Got::Marker(m)),
        }
    }
    items
}

/// Check records against the ground truth; returns their seqs.
pub fn check_records(items: &[Got], seed: u64, workload: Workload) -> Vec<u64> {
    items
        .iter()
        .filter_map(|g| match g {
            Got::Record {
                seq,
                opcode,
                source,
                payload,
            } => {
                let want = expected_record(seed, workload, *seq);
                assert_eq!((*opcode, *source), (want.opcode, want.source), "seq {seq}");
                assert!(*payload == want.payload, "payload of seq {seq}");
                Some(*seq)
            }
            Got::Marker(_) => None,
        })
        .collect()
}

pub fn markers(items: &[Got]) -> Vec<Marker> {
    items
        .iter()
        .filter_map(|g| if let Got::Marker(m) = g { Some(*m) } else { None })
        .collect()
}

pub fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
}
