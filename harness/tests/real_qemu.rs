//! emu-device against a real QEMU: its ivshmem-doorbell device model, its
//! chardev speaking our server protocol, its MSI-X emulation. The guest is
//! played by the qtest protocol (`-qtest`, vCPUs stopped): the test does the PCI
//! config cycles and MMIO accesses the kernel module would do, so every
//! byte and interrupt crosses QEMU exactly as with a guest. The QEMU command
//! line comes from the harness's argument builders, as for every guest.
//!
//! QEMU: `$HMB_TRACE_QEMU_BINARY`, default /usr/bin/qemu-system-x86_64, with
//! `-L DIR` for each directory in `$HMB_TRACE_QEMU_FIRMWARE` (colon-separated;
//! needed for an unpacked QEMU such as bookworm-backports' 10.0, together with
//! `QEMU_MODULE_DIR`). Without QEMU the test says so and passes, unless
//! `HMB_TRACE_REQUIRE_QEMU=1`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use hmb_harness::qemu::args::{self, MemoryBackend, PciPlace};
use hmb_harness::qemu::binary::QemuBinary;
use hmb_harness::qemu::Accel;

use hmb_emu_device::control::{call, Fault, Request};
use hmb_emu_device::ivshmem::serve::{ServeOptions, Serving};
use hmb_emu_device::ivshmem::transport::Vectors;
use hmb_firmware_model::NotifyPolicy;
use hmb_qmp::Qmp;
use hmb_trace_abi::{
    hmb_advert, hmb_ring_hdr, HMB_ADVERT_MAGIC, HMB_ADVERT_STATE_NONE, HMB_ADVERT_STATE_READY, HMB_RING_FLAG_FROZEN,
};
use serde_json::Value;
use support::qtest::QTest;
use zerocopy::IntoBytes;

const T: Duration = Duration::from_secs(10);
/// PCI slot the test puts the ivshmem device in.
const SLOT: u8 = 4;
const BAR0: u64 = 0xfeb0_0000;
const BAR1: u64 = 0xfeb0_1000;
const BAR2: u64 = 0xe000_0000;
/// Guest RAM where the MSI-X table sends vector v's message (v * 16).
const MSI_ADDR: u64 = 0x0010_0000;
const MSI_DATA: u32 = 0xc0de_0000;
const SLICE: u64 = 4096;
const RING: u64 = 1 << 20;

fn qemu_binary() -> Option<QemuBinary> {
    let p =
        PathBuf::from(std::env::var("HMB_TRACE_QEMU_BINARY").unwrap_or_else(|_| "/usr/bin/qemu-system-x86_64".into()));
    if p.exists() {
        let mut binary = QemuBinary::at(p);
        binary.firmware_dirs = std::env::var("HMB_TRACE_QEMU_FIRMWARE")
            .unwrap_or_default()
            .split(':')
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .collect();
        Some(binary)
    } else if std::env::var("HMB_TRACE_REQUIRE_QEMU").is_ok_and(|v| v == "1") {
        panic!("{} not found and HMB_TRACE_REQUIRE_QEMU=1", p.display());
    } else {
        eprintln!("skipping: {} not found (set HMB_TRACE_QEMU_BINARY)", p.display());
        None
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn ctl(path: &Path, req: Request) -> Value {
    let r = call(path, &req, T).unwrap();
    assert!(r.ok, "{req:?}: {:?}", r.error);
    r.result.unwrap()
}

fn wait_phase(path: &Path, want: &str) -> Value {
    let deadline = Instant::now() + T;
    loop {
        let s = ctl(path, Request::Status);
        if s["phase"] == want {
            return s;
        }
        assert!(Instant::now() < deadline, "phase {want} not reached: {s}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the kernel module does at load or after REINIT: ring header, advert
/// with state NONE, then state READY last, then the doorbell to peer 0.
fn module_advertise(q: &mut QTest, epoch: u64) {
    let hdr = hmb_ring_hdr::initialised(RING, epoch);
    q.write(BAR2 + SLICE, hdr.as_bytes());
    let adv = hmb_advert {
        magic: HMB_ADVERT_MAGIC.into(),
        state: HMB_ADVERT_STATE_NONE.into(),
        generation: epoch.into(),
        slice_offset: SLICE.into(),
        slice_len: (4096 + RING).into(),
        ..Default::default()
    };
    q.write(BAR2, adv.as_bytes());
    q.writel(BAR2 + 4, HMB_ADVERT_STATE_READY);
    // Doorbell register: peer id in the high 16 bits, vector in the low.
    q.writel(BAR0 + 12, 0);
}

struct Qemu(Child);
impl Qemu {
    /// Why QEMU is gone, for a failure message: its exit status (if it has
    /// exited) and the end of its log without qtest's access trace.
    fn post_mortem(&mut self, log: &Path) -> String {
        std::thread::sleep(Duration::from_millis(200));
        let status = match self.0.try_wait() {
            Ok(Some(s)) => format!("QEMU exited: {s}"),
            Ok(None) => "QEMU still running".to_string(),
            Err(e) => format!("QEMU status unknown: {e}"),
        };
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with("[R +") && !l.starts_with("[S +"))
            .collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("{status}; end of qemu.log:\n{tail}")
    }
}
impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn qemu_connects_interrupts_flow_both_ways_and_the_ring_lives_through_a_reset() {
    let Some(qemu) = qemu_binary() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (ivs, ctl_sock, qmp_sock, qt_sock) = (
        dir.path().join("ivs.sock"),
        dir.path().join("ctl.sock"),
        dir.path().join("qmp.sock"),
        dir.path().join("qtest.sock"),
    );
    let fds_before = open_fds();

    let serving = Serving::start(&ServeOptions {
        ivshmem_socket: ivs.clone(),
        control_socket: ctl_sock.clone(),
        hmb_size: 32 << 20,
        vectors: 2,
        policy: NotifyPolicy {
            watermark_bytes: 4096,
            timeout: Duration::from_millis(1),
        },
        exit_on_disconnect: true,
        initial_plan: None,
        // Separate vectors so the tests can tell the two notifications apart.
        irq_vectors: Vectors { data: 0, state: 1 },
    })
    .unwrap();
    let device = std::thread::spawn(move || serving.run());

    let listener = QTest::listen(&qt_sock);
    let mut command = qemu.command();
    // TCG with vCPUs never started (-S): the qtest socket plays the guest,
    // and without KVM's irqfd QEMU delivers MSI-X as a memory write the
    // test can read back.
    command
        .args(args::base())
        .args(args::machine(Accel::Tcg, 128, MemoryBackend::Anonymous, 1))
        .arg("-S")
        .args(args::firmware_dirs(&qemu.firmware_dirs))
        .args(args::qtest(&qt_sock))
        .args(args::ivshmem_doorbell(&ivs, "hmb0", 2, PciPlace::Slot(SLOT)))
        .args(args::qmp(&qmp_sock));
    let child = command
        .stdin(Stdio::null())
        // qtest traces every access on stderr: keep it out of the test output.
        .stderr(std::fs::File::create(dir.path().join("qemu.log")).unwrap())
        .spawn()
        .unwrap();
    drop(command); // it holds the log file's fd
    let mut _qemu = Qemu(child);
    let mut q = QTest::accept(&listener, T);
    let (mut qmp, status) = Qmp::wait_ready(&qmp_sock, T)
        .unwrap_or_else(|e| panic!("{e:?}\n{}", _qemu.post_mortem(&dir.path().join("qemu.log"))));
    eprintln!("QEMU {} status {:?}", qmp.version, status.status);

    // QEMU got its peer id over our socket.
    let st = ctl(&ctl_sock, Request::Status);
    assert_eq!(st["guests"], serde_json::json!([1]));
    assert_eq!(st["phase"], "waiting-for-advert");

    // The guest's view: ivshmem at 00:04.0, BARs placed, memory + bus master.
    assert_eq!(q.cfg_read(SLOT, 0), 0x1110_1af4, "vendor 1af4 device 1110");
    q.cfg_write(SLOT, 0x10, BAR0 as u32);
    q.cfg_write(SLOT, 0x14, BAR1 as u32);
    q.cfg_write(SLOT, 0x18, BAR2 as u32);
    q.cfg_write(SLOT, 0x1c, 0);
    let cmd = q.cfg_read(SLOT, 0x04);
    q.cfg_write(SLOT, 0x04, (cmd & 0xffff) | 0x6);
    assert_eq!(q.readl(BAR0 + 8), 1, "IVPosition is the id our server gave");

    // BAR2 is our HMB memfd: 32 MiB, zero until the module writes.
    assert_eq!(q.readq(BAR2 + (32 << 20) - 8), 0);

    // MSI-X: find the capability, program vectors 0 and 1 to write
    // MSI_DATA+v at MSI_ADDR+16v in RAM, unmask, enable.
    let mut cap = (q.cfg_read(SLOT, 0x34) & 0xfc) as u8;
    let msix = loop {
        assert_ne!(cap, 0, "no MSI-X capability");
        let hdr = q.cfg_read(SLOT, cap);
        if hdr & 0xff == 0x11 {
            break cap;
        }
        cap = ((hdr >> 8) & 0xfc) as u8;
    };
    let table = q.cfg_read(SLOT, msix + 4);
    assert_eq!(table & 7, 1, "MSI-X table in BAR1");
    let table = BAR1 + (table & !7) as u64;
    for v in 0..2u64 {
        q.writel(table + 16 * v, (MSI_ADDR + 16 * v) as u32);
        q.writel(table + 16 * v + 4, 0);
        q.writel(table + 16 * v + 8, MSI_DATA + v as u32);
        q.writel(table + 16 * v + 12, 0);
    }
    let ctrl = q.cfg_read(SLOT, msix);
    q.cfg_write(SLOT, msix, ctrl | 1 << 31);

    // emu-device -> guest: vector 1 lands, vector 0 does not.
    ctl(&ctl_sock, Request::Interrupt { vector: 1 });
    assert!(q.wait_l(MSI_ADDR + 16, MSI_DATA + 1, T), "MSI-X vector 1 delivered");
    assert_eq!(q.readl(MSI_ADDR), 0, "vector 0 untouched");

    // guest -> emu-device: the module's handshake through the doorbell.
    ctl(
        &ctl_sock,
        Request::Start {
            workload: "ssd".into(),
            seed: 7,
            rate: 50_000,
            burst: None,
        },
    );
    let before = ctl(&ctl_sock, Request::Status)["doorbells"].as_u64().unwrap();
    module_advertise(&mut q, 1);
    let st = wait_phase(&ctl_sock, "producing");
    assert_eq!(st["doorbells"].as_u64().unwrap(), before + 1);
    assert_eq!(st["slice"]["epoch"], 1);

    // Records appear in the guest's BAR2 and the data vector fires.
    let deadline = Instant::now() + T;
    while q.readq(BAR2 + SLICE + 64) == 0 {
        assert!(Instant::now() < deadline, "head never moved");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(q.wait_l(MSI_ADDR, MSI_DATA, T), "MSI-X vector 0 (data) delivered");
    // Keep the ring drained like the module would, for a moment.
    for _ in 0..20 {
        let head = q.readq(BAR2 + SLICE + 64);
        q.writeq(BAR2 + SLICE + 128, head);
        std::thread::sleep(Duration::from_millis(10));
    }

    // Controller reset: FROZEN in the guest's view, state vector fires.
    q.writel(MSI_ADDR + 16, 0);
    let r = ctl(&ctl_sock, Request::Inject(Fault::Reset));
    assert!(
        q.readl(BAR2 + SLICE + 72) & HMB_RING_FLAG_FROZEN != 0,
        "FROZEN visible to the guest"
    );
    assert_eq!(q.readq(BAR2 + SLICE + 64), r["head"].as_u64().unwrap(), "head final");
    assert!(q.wait_l(MSI_ADDR + 16, MSI_DATA + 1, T), "state vector after reset");
    wait_phase(&ctl_sock, "frozen");

    // Module re-initialises: epoch 2, new advert, doorbell; production resumes.
    module_advertise(&mut q, 2);
    let st = wait_phase(&ctl_sock, "producing");
    assert_eq!(st["slice"]["epoch"], 2);
    let truth = ctl(&ctl_sock, Request::GroundTruth);
    let segs = truth["segments"].as_array().unwrap();
    assert_eq!(segs.len(), 2);
    assert_eq!(
        (segs[0]["epoch"].as_u64(), segs[1]["epoch"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(segs[0]["ended_by"], "reset");
    assert_eq!(segs[1]["first_seq"], 0);

    // QMP while we are here: stop/cont/status.
    qmp.stop(T).unwrap();
    assert!(!qmp.query_status(T).unwrap().running);
    qmp.cont(T).unwrap();

    // system_reset: QEMU reports RESET and keeps its ivshmem connection.
    qmp.system_reset(T).unwrap();
    let ev = qmp.wait_event("RESET", T).unwrap();
    assert_eq!(ev["event"], "RESET");
    assert_eq!(ctl(&ctl_sock, Request::Status)["guests"], serde_json::json!([1]));
    // A device on the root bus cannot be hot-unplugged: a clean QMP error.
    match qmp.device_del("hmb0", T) {
        Err(hmb_qmp::QmpError::Command { command, .. }) => assert_eq!(command, "device_del"),
        other => panic!("device_del on pcie.0: {other:?}"),
    }

    // QEMU quits: emu-device sees the disconnect and shuts down cleanly.
    drop(q);
    qmp.quit(T).unwrap();
    let why = device.join().unwrap().unwrap();
    assert!(why.contains("disconnected"), "{why}");
    assert!(!ivs.exists() && !ctl_sock.exists(), "sockets removed");
    drop((listener, qmp, _qemu));
    // Control connection threads close their socket when they see EOF,
    // a moment after the client is gone.
    let deadline = Instant::now() + Duration::from_secs(3);
    while open_fds() != fds_before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<_> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
        .collect();
    assert_eq!(open_fds(), fds_before, "no fd left behind: {left:?}");
}
