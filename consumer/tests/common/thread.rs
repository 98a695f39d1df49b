//! The producer on its own thread, driven step by step so that scenarios
//! with two threads still have one deterministic outcome.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use hmb_firmware_model::{Produced, Producer, Workload};

use super::produce_truth;

#[derive(Debug, Clone, Copy)]
pub enum Cmd {
    /// Produce `n` ground-truth records (written or dropped).
    Produce {
        n: u64,
    },
    /// Produce fixed-size records until `drops` of them were dropped.
    UntilDrops {
        payload: usize,
        drops: u64,
    },
    /// Produce fixed-size records until head reaches `target` exactly (the
    /// consumer keeps up between calls, so there is room).
    RecordOfSize {
        payload: usize,
    },
    Freeze,
    WaitReinit,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reply {
    pub written: u64,
    pub dropped: u64,
    pub head: u64,
    pub next_seq: u64,
}

pub struct ProducerThread {
    tx: Sender<Option<Cmd>>,
    rx: Receiver<Reply>,
    handle: Option<JoinHandle<()>>,
}

impl ProducerThread {
    pub fn spawn(mut p: Producer, seed: u64, workload: Workload) -> Self {
        let (tx, cmd_rx) = channel::<Option<Cmd>>();
        let (reply_tx, rx) = channel();
        let handle = std::thread::spawn(move || {
            while let Ok(Some(cmd)) = cmd_rx.recv() {
                let mut r = Reply::default();
                let count = |out: Produced, r: &mut Reply| match out {
                    Produced::Written { .. } => r.written += 1,
                    Produced::Dropped { .. } => r.dropped += 1,
                    Produced::Frozen => {}
                };
                match cmd {
                    Cmd::Produce { n } => {
                        for _ in 0..n {
                            count(produce_truth(&mut p, seed, workload), &mut r);
                        }
                    }
                    Cmd::UntilDrops { payload, drops } => {
                        let body = vec![0xA5u8; payload];
                        while r.dropped < drops {
                            let seq = p.next_seq();
                            count(p.produce(0x0F01, 0, seq, &body), &mut r);
                        }
                    }
                    Cmd::RecordOfSize { payload } => {
                        let seq = p.next_seq();
                        let body: Vec<u8> = (0..payload).map(|i| (i as u64 + seq) as u8).collect();
                        count(p.produce(0x0F01, 0, seq, &body), &mut r);
                    }
                    Cmd::Freeze => p.freeze(),
                    Cmd::WaitReinit => {
                        let stop = std::sync::atomic::AtomicBool::new(false);
                        p.wait_for_reinit(&stop, Duration::from_secs(10)).unwrap();
                    }
                }
                r.head = p.head();
                r.next_seq = p.next_seq();
                if reply_tx.send(r).is_err() {
                    return;
                }
            }
        });
        Self {
            tx,
            rx,
            handle: Some(handle),
        }
    }

    pub fn run(&self, cmd: Cmd) -> Reply {
        self.tx.send(Some(cmd)).unwrap();
        self.rx.recv().unwrap()
    }
}

impl Drop for ProducerThread {
    fn drop(&mut self) {
        let _ = self.tx.send(None);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
