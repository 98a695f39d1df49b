//! The whole device in-process (HMB, ivshmem server, device thread,
//! firmware model, control socket) with a fake guest that speaks QEMU's
//! side of the ivshmem protocol and plays the kernel module on the shared
//! memory it receives. Faults are injected over the control socket and
//! checked on the shared memory.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hmb_emu_device::control::{call, Fault, Request, VersionPart};
use hmb_emu_device::ivshmem::faults::{CORRUPT_MAGIC, HOSTILE_LENGTH};
use hmb_emu_device::ivshmem::hmb::MemRegion;
use hmb_emu_device::ivshmem::serve::{ServeOptions, Serving};
use hmb_emu_device::ivshmem::transport::Vectors;
use hmb_emu_device::ivshmem::{IvshmemClient, DEVICE_PEER_ID};
use hmb_emu_device::EmuError;
use hmb_firmware_model::{expected_record, NotifyPolicy, Workload};
use hmb_trace_abi::reference::{decode, DecodedItem};
use hmb_trace_abi::{
    check_compat, hmb_advert, hmb_ring_hdr, offsets, AbiError, RingSnapshot, HMB_ADVERT_MAGIC, HMB_ADVERT_STATE_NONE,
    HMB_ADVERT_STATE_READY, HMB_RING_FLAG_FROZEN, HMB_RING_MAGIC,
};
use serde_json::{json, Value};
use zerocopy::IntoBytes;

const T: Duration = Duration::from_secs(10);
const SLICE: usize = 4096;
const RING: u64 = 256 * 1024;

struct Rig {
    _dir: tempfile::TempDir,
    ctl: PathBuf,
    device: Option<JoinHandle<Result<String, EmuError>>>,
    guest: IvshmemClient,
    _map: memmap2::MmapRaw,
    mem: MemRegion,
}

impl Rig {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ivs = dir.path().join("ivs.sock");
        let ctl = dir.path().join("ctl.sock");
        let serving = Serving::start(&ServeOptions {
            ivshmem_socket: ivs.clone(),
            control_socket: ctl.clone(),
            hmb_size: 2 << 20,
            vectors: 2,
            policy: NotifyPolicy {
                watermark_bytes: 16 * 1024,
                timeout: Duration::from_millis(2),
            },
            exit_on_disconnect: true,
            initial_plan: None,
            // Separate vectors so the tests can tell the two notifications apart.
            irq_vectors: Vectors { data: 0, state: 1 },
        })
        .unwrap();
        let device = Some(std::thread::spawn(move || serving.run()));
        let guest = IvshmemClient::connect(&ivs, 2, T).unwrap();
        let file = std::fs::File::from(guest.shm.try_clone().unwrap());
        let map = memmap2::MmapOptions::new().map_raw(&file).unwrap();
        // SAFETY: `map` lives in the rig as long as `mem`.
        let mem = unsafe { MemRegion::from_raw(std::ptr::NonNull::new(map.as_mut_ptr()).unwrap(), map.len()) };
        Self {
            _dir: dir,
            ctl,
            device,
            guest,
            _map: map,
            mem,
        }
    }

    fn ctl(&self, req: Request) -> Value {
        let r = call(&self.ctl, &req, T).unwrap();
        assert!(r.ok, "{req:?}: {:?}", r.error);
        r.result.unwrap()
    }

    fn ctl_err(&self, req: Request) -> String {
        let r = call(&self.ctl, &req, T).unwrap();
        assert!(!r.ok, "{req:?} should fail");
        r.error.unwrap()
    }

    fn wait_phase(&self, want: &str) -> Value {
        let deadline = Instant::now() + T;
        loop {
            let s = self.ctl(Request::Status);
            if s["phase"] == want {
                return s;
            }
            assert!(Instant::now() < deadline, "phase {want} not reached: {s}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The module's (re)initialisation: header, advert, READY, doorbell.
    fn advertise(&self, epoch: u64) {
        self.mem
            .write(SLICE, hmb_ring_hdr::initialised(RING, epoch).as_bytes())
            .unwrap();
        self.mem.write(SLICE + 4096, &vec![0u8; RING as usize]).unwrap();
        let adv = hmb_advert {
            magic: HMB_ADVERT_MAGIC.into(),
            state: HMB_ADVERT_STATE_NONE.into(),
            generation: epoch.into(),
            slice_offset: (SLICE as u64).into(),
            slice_len: (4096 + RING).into(),
            ..Default::default()
        };
        self.mem.write(0, adv.as_bytes()).unwrap();
        self.mem.store_u32(4, HMB_ADVERT_STATE_READY).unwrap();
        self.guest.ring(DEVICE_PEER_ID, 0).unwrap();
    }

    fn hdr_u64(&self, off: usize) -> u64 {
        self.mem.load_u64(SLICE + off).unwrap()
    }

    fn hdr(&self) -> hmb_ring_hdr {
        let mut raw = [0u8; 192];
        self.mem.read(SLICE, &mut raw).unwrap();
        RingSnapshot::parse(&raw).unwrap().hdr
    }

    /// The consumer: publish tail = head (what the daemon does per batch).
    fn drain(&self) {
        let head = self.hdr_u64(offsets::HEAD);
        self.mem
            .atomic_u64(SLICE + offsets::TAIL)
            .unwrap()
            .store(head, Ordering::Release);
    }

    fn image(&self) -> Vec<u8> {
        let mut img = vec![0u8; 4096 + RING as usize];
        self.mem.read(SLICE, &mut img).unwrap();
        img
    }

    fn wait_head_above(&self, min: u64) -> u64 {
        let deadline = Instant::now() + T;
        loop {
            let h = self.hdr_u64(offsets::HEAD);
            if h > min {
                return h;
            }
            assert!(Instant::now() < deadline, "head stuck at {h}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn finish(mut self) {
        drop(self.guest);
        let why = self.device.take().unwrap().join().unwrap().unwrap();
        assert!(why.contains("disconnected"), "{why}");
        assert!(!self.ctl.exists());
    }
}

fn start_ssd(rig: &Rig, seed: u64, rate: u64) {
    rig.ctl(Request::Start {
        workload: "ssd".into(),
        seed,
        rate,
        burst: None,
    });
}

/// Every record in the published window is the model's record for its seq.
fn check_against_ground_truth(image: &[u8], seed: u64, workload: Workload) -> usize {
    let d = decode(image).unwrap();
    let mut n = 0;
    for item in &d.items {
        if let DecodedItem::Record {
            seq,
            opcode,
            source,
            payload_hex,
            ..
        } = item
        {
            let want = expected_record(seed, workload, *seq);
            assert_eq!((*opcode, *source), (want.opcode, want.source), "seq {seq}");
            let hex: String = want.payload.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(payload_hex, &hex, "seq {seq}");
            n += 1;
        }
    }
    n
}

#[test]
fn production_waits_for_the_advert_matches_ground_truth_and_moderates_interrupts() {
    let rig = Rig::start();
    assert_eq!(rig.ctl(Request::Status)["phase"], "waiting-for-advert");
    // Faults and production need a ring first.
    assert!(rig.ctl_err(Request::Inject(Fault::Reset)).contains("no ring"));
    assert!(rig
        .ctl_err(Request::Start {
            workload: "floppy".into(),
            seed: 0,
            rate: 0,
            burst: None
        })
        .contains("workload"));
    start_ssd(&rig, 11, 0);
    assert_eq!(
        rig.ctl(Request::Status)["phase"],
        "waiting-for-advert",
        "start before the advert is pending"
    );

    // A doorbell with a bad advert is refused and logged, nothing starts.
    rig.mem.store_u32(0, 0x1234).unwrap();
    rig.guest.ring(DEVICE_PEER_ID, 0).unwrap();
    let deadline = Instant::now() + T;
    while rig.ctl(Request::Status)["last_advert_error"].is_null() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(rig.ctl(Request::Status)["phase"], "waiting-for-advert");

    rig.advertise(1);
    rig.wait_phase("producing");
    assert!(rig.guest.wait_interrupt(0, T).unwrap().is_some(), "data vector");
    // Run as the consumer for a while, unlimited rate.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        rig.drain();
        std::thread::sleep(Duration::from_millis(1));
    }
    rig.ctl(Request::Stop);
    let stats = rig.ctl(Request::Stats);
    let written = stats["engine_totals"]["written"].as_u64().unwrap();
    let irqs = stats["interrupts"]["data"].as_u64().unwrap();
    eprintln!("moderation: {written} records, {irqs} data interrupts in 300 ms");
    assert!(written > 1000, "{stats}");
    assert!(
        irqs > 0 && irqs * 10 < written,
        "moderated: {irqs} interrupts for {written} records"
    );
    let n = check_against_ground_truth(&rig.image(), 11, Workload::Ssd);
    assert!(n > 0);
    let truth = rig.ctl(Request::GroundTruth);
    let seg = &truth["segments"][0];
    assert_eq!(
        (seg["epoch"].clone(), seg["seed"].clone(), seg["first_seq"].clone()),
        (json!(1), json!(11), json!(0))
    );
    assert_eq!(seg["end_seq"].as_u64(), Some(rig.hdr().next_seq.get()));
    rig.finish();
}

#[test]
fn reset_freezes_interrupts_and_resumes_only_on_a_newer_generation() {
    let rig = Rig::start();
    start_ssd(&rig, 3, 20_000);
    rig.advertise(1);
    rig.wait_phase("producing");
    rig.wait_head_above(0);
    let r = rig.ctl(Request::Inject(Fault::Reset));
    let hdr = rig.hdr();
    assert!(hdr.flags.get() & HMB_RING_FLAG_FROZEN != 0);
    assert_eq!(hdr.head.get(), r["head"].as_u64().unwrap());
    assert_eq!(hdr.next_seq.get(), r["next_seq"].as_u64().unwrap(), "next_seq is final");
    assert!(rig.guest.wait_interrupt(1, T).unwrap().is_some(), "state vector");
    // Frozen: nothing moves, a second reset is refused.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(rig.hdr().head.get(), hdr.head.get());
    assert!(rig.ctl_err(Request::Inject(Fault::Reset)).contains("FROZEN"));
    // The decoder reports the frozen ring consistently.
    let d = decode(&rig.image()).unwrap();
    assert!(d.flags.contains(&"FROZEN".to_string()));

    // Same generation again: still frozen.
    rig.guest.ring(DEVICE_PEER_ID, 0).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(rig.ctl(Request::Status)["phase"], "frozen");
    // Re-init with epoch 2: production resumes with the same plan.
    rig.advertise(2);
    let st = rig.wait_phase("producing");
    assert_eq!(st["slice"]["epoch"], 2);
    rig.wait_head_above(0);
    assert_eq!(rig.hdr().epoch.get(), 2);
    rig.ctl(Request::Stop);
    check_against_ground_truth(&rig.image(), 3, Workload::Ssd);
    rig.finish();
}

#[test]
fn header_faults_change_exactly_the_field_and_signal_the_guest() {
    let rig = Rig::start();
    start_ssd(&rig, 1, 5_000);
    rig.advertise(1);
    rig.wait_phase("producing");

    rig.ctl(Request::Inject(Fault::BumpVersion {
        part: VersionPart::Minor,
    }));
    let c = check_compat(&rig.hdr()).unwrap();
    assert!(c.newer_minor);
    assert!(rig.guest.wait_interrupt(1, T).unwrap().is_some());

    let e = rig.ctl(Request::Inject(Fault::UnknownFlag));
    assert_eq!(e["after"].as_u64().unwrap() & (1 << 9), 1 << 9);
    let head = rig.hdr().head.get();
    rig.wait_head_above(head);
    // The producer keeps writing and keeps the bit it does not own.
    assert_eq!(check_compat(&rig.hdr()).unwrap().unknown_flags, 1 << 9);

    let e = rig.ctl(Request::Inject(Fault::BumpVersion {
        part: VersionPart::Major,
    }));
    assert_eq!((e["before"].as_u64(), e["after"].as_u64()), (Some(1), Some(2)));
    assert!(matches!(
        check_compat(&rig.hdr()),
        Err(AbiError::UnsupportedMajor { found: 2, .. })
    ));

    let e = rig.ctl(Request::Inject(Fault::CorruptMagic));
    assert_eq!(e["before"].as_u64(), Some(HMB_RING_MAGIC as u64));
    assert_eq!(rig.hdr().magic.get(), CORRUPT_MAGIC);
    assert!(matches!(check_compat(&rig.hdr()), Err(AbiError::BadMagic { .. })));
    let truth = rig.ctl(Request::GroundTruth);
    let names: Vec<&str> = truth["faults"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["fault"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "bump-version minor",
            "unknown-flag",
            "bump-version major",
            "corrupt-magic"
        ]
    );
    rig.finish();
}

#[test]
fn a_hostile_record_is_published_then_production_halts_until_a_new_epoch() {
    let rig = Rig::start();
    start_ssd(&rig, 5, 10_000);
    rig.advertise(1);
    rig.wait_phase("producing");
    rig.wait_head_above(0);
    let e = rig.ctl(Request::Inject(Fault::Hostile));
    let (at, head) = (e["before"].as_u64().unwrap(), e["after"].as_u64().unwrap());
    assert_eq!(rig.hdr().head.get(), head);
    rig.wait_phase("halted");
    match decode(&rig.image()) {
        Err(AbiError::LengthTooLarge { pos, length }) => {
            assert_eq!(length, HOSTILE_LENGTH);
            assert!(pos >= at && pos < head);
        }
        other => panic!("expected the lying length to be caught, got {other:?}"),
    }
    assert!(rig
        .ctl_err(Request::Start {
            workload: "npu".into(),
            seed: 0,
            rate: 0,
            burst: None
        })
        .contains("halted"));
    // A reset and a new epoch bring production back, with the plan kept.
    rig.ctl(Request::Inject(Fault::Reset));
    rig.advertise(2);
    rig.wait_phase("producing");
    rig.wait_head_above(0);
    rig.finish();
}

#[test]
fn stall_pauses_the_producer_then_it_resumes() {
    let rig = Rig::start();
    start_ssd(&rig, 9, 20_000);
    rig.advertise(1);
    rig.wait_phase("producing");
    rig.wait_head_above(0);
    rig.ctl(Request::Inject(Fault::Stall { ms: 1000 }));
    assert_eq!(rig.ctl(Request::Status)["phase"], "stalled");
    let h0 = rig.hdr().head.get();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(rig.hdr().head.get(), h0, "no production while stalled");
    rig.wait_phase("producing");
    rig.wait_head_above(h0);
    let truth = rig.ctl(Request::GroundTruth);
    assert_eq!(truth["segments"][0]["ended_by"], "stall");
    assert_eq!(
        truth["segments"][1]["first_seq"], truth["segments"][0]["end_seq"],
        "no seq gap across a stall"
    );
    rig.ctl(Request::Stop);
    assert!(rig
        .ctl_err(Request::Inject(Fault::Stall { ms: 10 }))
        .contains("not producing"));
    rig.finish();
}

#[test]
fn a_withdrawn_advert_stops_production_until_a_newer_one() {
    let rig = Rig::start();
    start_ssd(&rig, 2, 20_000);
    rig.advertise(1);
    rig.wait_phase("producing");
    rig.wait_head_above(0);
    // The module withdraws (unload or re-init): state NONE.
    rig.mem.store_u32(4, HMB_ADVERT_STATE_NONE).unwrap();
    rig.wait_phase("waiting-for-advert");
    let h0 = rig.hdr().head.get();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(rig.hdr().head.get(), h0, "nothing written after the withdrawal");
    // The same generation again is not a new ring.
    rig.mem.store_u32(4, HMB_ADVERT_STATE_READY).unwrap();
    rig.guest.ring(DEVICE_PEER_ID, 0).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let st = rig.ctl(Request::Status);
    assert_eq!(st["phase"], "waiting-for-advert", "{st}");
    assert!(st["last_advert_error"].as_str().unwrap().contains("older"), "{st}");
    rig.advertise(2);
    rig.wait_phase("producing");
    rig.finish();
}
