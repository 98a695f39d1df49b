//! The engine loop: notification policy, rate limit, freeze and resume.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmb_firmware_model::*;
use hmb_trace_abi::HMB_RING_HDR_SIZE;

struct Mem(Vec<u64>);

fn ring(mem: &mut Mem, ring_size: u64) -> SharedRing {
    // SAFETY: `mem` outlives the ring in every test.
    let ring = unsafe { SharedRing::from_raw(mem.0.as_mut_ptr() as *mut u8, mem.0.len() * 8).unwrap() };
    module_sim::init(&ring, ring_size, 1).unwrap();
    ring
}

fn mem(ring_size: u64) -> Mem {
    Mem(vec![0; (HMB_RING_HDR_SIZE as u64 + ring_size) as usize / 8])
}

/// Records (reason, head at the time) of every notification.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(NotifyReason, u64)>>>, Option<SharedRingHead>);

#[derive(Clone)]
struct SharedRingHead(Arc<SharedRing>);

impl Notifier for Log {
    fn notify(&mut self, reason: NotifyReason) {
        let head = self.1.as_ref().map_or(0, |r| {
            r.0.atomic_u64(hmb_trace_abi::offsets::HEAD).load(Ordering::Acquire)
        });
        self.0.lock().unwrap().push((reason, head));
    }
}

#[test]
fn watermark_notifications_come_every_watermark_bytes() {
    let mut m = mem(1 << 20);
    let r = ring(&mut m, 1 << 20);
    let log = Log(Arc::default(), Some(SharedRingHead(Arc::new(r.share()))));
    let p = Producer::attach(r).unwrap();
    let mut e = Engine::new(p, Workload::Ssd, 1, Rate::Unlimited, log.clone())
        .with_policy(NotifyPolicy {
            watermark_bytes: 4096,
            timeout: Duration::from_secs(3600),
        })
        .with_limit(5000);
    assert_eq!(e.run_until(&AtomicBool::new(false)), RunOutcome::LimitReached);
    let calls = log.0.lock().unwrap().clone();
    let head = e.producer().head();
    let watermarks: Vec<u64> = calls
        .iter()
        .filter(|c| c.0 == NotifyReason::Watermark)
        .map(|c| c.1)
        .collect();
    assert!(watermarks.windows(2).all(|w| w[1] - w[0] >= 4096));
    // Checked after every burst of at most 256 records of at most 24+32 bytes.
    assert!(watermarks.windows(2).all(|w| w[1] - w[0] < 4096 + 256 * 56));
    assert!(watermarks.len() as u64 >= head / (4096 + 256 * 56));
    assert_eq!(
        calls.last().unwrap().1,
        head,
        "everything is notified when the engine stops"
    );
    assert_eq!(e.stats().notifications as usize, calls.len());
    assert_eq!(e.stats().written, 5000);
}

#[test]
fn rate_limit_is_never_exceeded_and_timeouts_notify_small_amounts() {
    let mut m = mem(1 << 20);
    let r = ring(&mut m, 1 << 20);
    let log = Log::default();
    let p = Producer::attach(r).unwrap();
    let mut e = Engine::new(
        p,
        Workload::Npu,
        1,
        Rate::PerSecond {
            records: 2000,
            burst: 10,
        },
        log.clone(),
    )
    .with_policy(NotifyPolicy {
        watermark_bytes: 1 << 30,
        timeout: Duration::from_millis(5),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        s.store(true, Ordering::Relaxed);
    });
    let start = Instant::now();
    assert_eq!(e.run_until(&stop), RunOutcome::Stopped);
    let secs = start.elapsed().as_secs_f64();
    t.join().unwrap();
    let attempts = e.stats().attempts;
    assert!(attempts > 0);
    assert!(
        attempts as f64 <= 2000.0 * secs + 10.0,
        "{attempts} records in {secs} s"
    );
    let calls = log.0.lock().unwrap();
    assert!(calls.iter().all(|c| c.0 == NotifyReason::Timeout));
    assert!(calls.len() >= 2, "timeouts notify while data trickles in");
}

#[test]
fn requested_freeze_stops_notifies_and_resumes_after_reinit() {
    let mut m = mem(8192);
    let r = ring(&mut m, 8192);
    let owner = r.share();
    let log = Log::default();
    let p = Producer::attach(r).unwrap();
    let mut e = Engine::new(p, Workload::Ssd, 9, Rate::Unlimited, log.clone()).with_limit(100);
    assert_eq!(e.run_until(&AtomicBool::new(false)), RunOutcome::LimitReached);
    let control = e.control();
    control.request_freeze();
    assert_eq!(e.run_until(&AtomicBool::new(false)), RunOutcome::Frozen);
    assert_eq!(log.0.lock().unwrap().last().unwrap().0, NotifyReason::Frozen);
    assert_eq!(e.step(), Produced::Frozen);
    assert!(!e.resume().unwrap(), "no resume before the owner re-initialises");
    module_sim::reinit(&owner).unwrap();
    assert!(e.resume().unwrap());
    assert_eq!((e.producer().epoch(), e.producer().next_seq()), (2, 0));
    assert!(matches!(e.step(), Produced::Written { seq: 0 }));
    assert_eq!(e.stats().freezes, 1);
}

/// ssd:causal records carry the simulated time: in the ring, each record's
/// timestamp is the engine's clock at seq 0 plus the simulation's time for
/// it, so completion − fetch equals the completion's `latency_ns`.
#[test]
fn causal_workload_timestamps_are_simulated_time() {
    let mut m = mem(1 << 20);
    let r = ring(&mut m, 1 << 20);
    let p = Producer::attach(r).unwrap();
    let w = Workload::parse("ssd:causal").unwrap();
    let mut e = Engine::new(p, w, 4, Rate::Unlimited, Log::default()).with_limit(3000);
    assert_eq!(e.run_until(&AtomicBool::new(false)), RunOutcome::LimitReached);
    let image: Vec<u8> = m.0.iter().flat_map(|w| w.to_le_bytes()).collect();
    let d = hmb_trace_abi::reference::decode(&image).unwrap();
    let mut base = None;
    let mut buf = [0u8; hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD as usize];
    let mut records = 0;
    for item in &d.items {
        if let hmb_trace_abi::reference::DecodedItem::Record {
            seq,
            opcode,
            timestamp_ns,
            ..
        } = item
        {
            let shape = fill_record(4, w, *seq, &mut buf);
            assert_eq!(shape.opcode, *opcode);
            let sim = shape.sim_ns.expect("ssd:causal simulates time");
            let b = *base.get_or_insert(timestamp_ns - sim);
            assert_eq!(*timestamp_ns, b + sim, "seq {seq}");
            records += 1;
        }
    }
    assert_eq!(records, 3000);
}
