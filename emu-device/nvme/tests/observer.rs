//! Observer events: fetch, media operations, completion in order with consistent times;
//! vendor-specific features reach `VendorFeatures` with their data and the HMB.

mod common;

use std::sync::{Arc, Mutex};

use common::{pattern, ready_host};
use hmb_nvme::fake_host::Command;
use hmb_nvme::{
    CommandObserver, CompletionEvent, ControllerConfig, FetchEvent, HostMemoryBuffer, MediaEvent, MediaOpKind, Status,
    VendorFeatures,
};

#[derive(Debug)]
enum Ev {
    Fetch(FetchEvent),
    Media(MediaEvent),
    Complete(CompletionEvent),
}

struct Log(Arc<Mutex<Vec<Ev>>>);

impl CommandObserver for Log {
    fn on_fetch(&mut self, f: &FetchEvent) {
        self.0.lock().unwrap().push(Ev::Fetch(f.clone()));
    }
    fn on_media(&mut self, m: &MediaEvent) {
        self.0.lock().unwrap().push(Ev::Media(m.clone()));
    }
    fn on_complete(&mut self, c: &CompletionEvent) {
        self.0.lock().unwrap().push(Ev::Complete(c.clone()));
    }
}

#[test]
fn events_tell_one_causally_consistent_story() {
    let mut h = ready_host(ControllerConfig::default());
    let log = Arc::new(Mutex::new(Vec::new()));
    h.ctrl.set_observer(Box::new(Log(log.clone())));
    // 64 KiB write: 16 NAND pages of 4 KiB striped over 8 channels and 2 dies; the same
    // again goes to the next 16 dies (log-structured: new pages, no erase in place).
    let data = pattern(64 << 10, 5);
    assert!(h.write_lbas(1, 0, &data, 9).ok());
    assert!(h.write_lbas(1, 0, &data, 9).ok());
    let (c, _) = h.read_lbas(1, 0, 128, 9);
    assert!(c.ok());
    let evs = log.lock().unwrap();
    let mut fetch_t = None;
    let mut cid = 0;
    let mut media_end = 0u64;
    let mut kinds = Vec::new();
    let mut per_die: std::collections::HashMap<(u8, u8), Vec<(u64, u64)>> = Default::default();
    for e in evs.iter() {
        match e {
            Ev::Fetch(f) => {
                assert!(fetch_t.is_none(), "one command at a time here");
                assert_eq!((f.qid, f.nsid, f.slba, f.nlb), (1, 1, 0, 128));
                fetch_t = Some(f.time_ns);
                cid = f.cid;
                media_end = f.time_ns;
            }
            Ev::Media(m) => {
                let t0 = fetch_t.expect("media op inside a command");
                assert_eq!(m.cid, cid);
                assert!(m.op.start_ns >= t0, "media starts after the fetch");
                media_end = media_end.max(m.op.start_ns + u64::from(m.op.latency_ns));
                kinds.push(m.op.kind);
                per_die
                    .entry((m.op.channel, m.op.die))
                    .or_default()
                    .push((m.op.start_ns, m.op.start_ns + u64::from(m.op.latency_ns)));
            }
            Ev::Complete(c) => {
                let t0 = fetch_t.take().expect("completion after its fetch");
                assert_eq!(c.cid, cid);
                assert_eq!(c.status, 0);
                assert!(c.time_ns >= t0);
                assert_eq!(c.latency_ns, c.time_ns - t0);
                assert_eq!(c.media_latency_ns, media_end - t0);
            }
        }
    }
    assert_eq!(kinds.iter().filter(|k| **k == MediaOpKind::Program).count(), 32);
    assert_eq!(kinds.iter().filter(|k| **k == MediaOpKind::Erase).count(), 0);
    assert_eq!(kinds.iter().filter(|k| **k == MediaOpKind::Read).count(), 16);
    let programs: std::collections::HashSet<_> = evs
        .iter()
        .filter_map(|e| match e {
            Ev::Media(m) if m.op.kind == MediaOpKind::Program => Some((m.op.channel, m.op.die, m.op.block, m.op.page)),
            _ => None,
        })
        .collect();
    assert_eq!(programs.len(), 32, "every program on a page of its own");
    assert_eq!(
        programs
            .iter()
            .map(|p| (p.0, p.1))
            .collect::<std::collections::HashSet<_>>()
            .len(),
        32,
        "the log stripes the two writes over all 8 x 4 dies"
    );
    // Operations on one die never overlap.
    for ops in per_die.values() {
        for w in ops.windows(2) {
            assert!(w[1].0 >= w[0].1, "die contention: {ops:?}");
        }
    }
    assert_eq!(h.ctrl.report().counters.media_ops, 48);
}

struct Vendor(Arc<Mutex<Vec<String>>>);

impl VendorFeatures for Vendor {
    fn set(&mut self, fid: u8, cdw11: u32, data: &[u8], hmb: Option<&HostMemoryBuffer>) -> Result<u32, Status> {
        if fid != 0xC1 {
            return Err(Status::INVALID_FIELD);
        }
        self.0
            .lock()
            .unwrap()
            .push(format!("set {cdw11:#x} {:?} hmb={}", &data[..4], hmb.is_some()));
        Ok(0x1234)
    }
    fn get(&mut self, fid: u8, _cdw11: u32) -> Result<(u32, Vec<u8>), Status> {
        match fid {
            0xC1 => Ok((7, b"advert".to_vec())),
            _ => Err(Status::INVALID_FIELD),
        }
    }
    fn set_data_len(&self, _fid: u8, _cdw11: u32) -> usize {
        16
    }
}

#[test]
fn vendor_features_get_their_data() {
    let mut h = ready_host(ControllerConfig::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    h.ctrl.set_vendor_features(Box::new(Vendor(seen.clone())));
    let buf = h.alloc(4096);
    h.guest_write(buf, &[1, 2, 3, 4]);
    let c = h.admin(Command::set_features(0xC1, 0x55).prp1(buf));
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 0x1234));
    assert_eq!(seen.lock().unwrap()[0], "set 0x55 [1, 2, 3, 4] hmb=false");
    let c = h.admin(Command::get_features(0xC1).prp1(buf));
    assert_eq!((c.status, c.dw0), (Status::SUCCESS, 7));
    assert_eq!(h.guest_read(buf, 6), b"advert");
    assert_eq!(h.admin(Command::get_features(0xC2)).status, Status::INVALID_FIELD);
    // Data that cannot be read: Data Transfer Error, the vendor hook is not called.
    let c = h.admin(Command::set_features(0xC1, 0).prp1(0x7000_0000));
    assert_eq!(c.status, Status::DATA_TRANSFER_ERROR);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// What a pass of the controller did, in the order it did it: interrupts and the
/// observer's calls in one list.
#[derive(Debug, PartialEq)]
enum Seen {
    Irq(u16),
    Fetch(u16),
    Media(u16),
    Complete(u16),
}

struct SeenLog(Arc<Mutex<Vec<Seen>>>);

impl CommandObserver for SeenLog {
    fn on_fetch(&mut self, f: &FetchEvent) {
        self.0.lock().unwrap().push(Seen::Fetch(f.cid));
    }
    fn on_media(&mut self, m: &MediaEvent) {
        self.0.lock().unwrap().push(Seen::Media(m.cid));
    }
    fn on_complete(&mut self, c: &CompletionEvent) {
        self.0.lock().unwrap().push(Seen::Complete(c.cid));
    }
}

impl hmb_nvme::InterruptSink for SeenLog {
    fn raise(&self, vector: u16) {
        self.0.lock().unwrap().push(Seen::Irq(vector));
    }
}

/// An I/O queue's pass posts its CQEs and raises its interrupt before the observer hears
/// of its commands (held.rs: the host does not wait for the trace's records); the
/// observer then hears of every command, in the order it happened. An admin command is
/// told of before its interrupt.
#[test]
fn an_io_pass_raises_its_interrupt_before_the_observer_hears_of_it() {
    let cfg = ControllerConfig::default();
    let mut h = hmb_nvme::fake_host::FakeHost::new(cfg.clone(), common::GUEST_BYTES);
    let log = Arc::new(Mutex::new(Vec::new()));
    h.ctrl = hmb_nvme::Controller::new(cfg, h.mem.clone(), Arc::new(SeenLog(log.clone()))).unwrap();
    h.ctrl.set_observer(Box::new(SeenLog(log.clone())));
    assert_eq!(h.enable(32) & 0b11, 1);
    h.create_io_queue(1, 64).expect("I/O queue pair 1");
    log.lock().unwrap().clear();

    // Three writes of 64 KiB (16 NAND programs each) on one doorbell: one pass.
    let mut cids = Vec::new();
    for i in 0..3u64 {
        let (prp1, prp2, segs) = h.build_prps(64 << 10, 0, 512);
        for (a, n) in segs {
            h.guest_write(a, &pattern(n, i));
        }
        let cmd = Command::new(0x01)
            .nsid(1)
            .prp1(prp1)
            .prp2(prp2)
            .cdw(10, (i * 128) as u32)
            .cdw(12, 127);
        cids.push(h.push(1, cmd));
    }
    h.ring(1);
    for _ in 0..3 {
        assert!(h.reap(1).expect("completed in the pass").ok());
    }
    let seen = std::mem::take(&mut *log.lock().unwrap());
    let mut want = vec![Seen::Irq(1)];
    for &cid in &cids {
        want.push(Seen::Fetch(cid));
        want.extend((0..16).map(|_| Seen::Media(cid)));
        want.push(Seen::Complete(cid));
    }
    assert_eq!(seen, want);

    // The admin queue's pass is not held: Identify is told of before its interrupt.
    let id = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, id)).ok());
    let seen = std::mem::take(&mut *log.lock().unwrap());
    assert!(
        matches!(seen[..], [Seen::Fetch(_), Seen::Complete(_), Seen::Irq(0)]),
        "{seen:?}"
    );
}
