//! The producer on the real controller model, driven like the patched Linux
//! driver drives it: cache and slice chunks in one HMB descriptor list, the
//! ring header written before Set Features 0Dh, the advert by Set Features
//! C0h, real I/O, then a controller reset. Guest memory is file backed, as
//! QEMU's memfd is, so the slice is mapped the way the transport's is.

use hmb_nvme::fake_host::{Command, FakeHost};
use hmb_nvme::vm_memory::{FileOffset, GuestAddress, GuestMemoryAtomic, GuestMemoryMmap, GuestRegionMmap};
use hmb_nvme::{CommandObserver, CompletionEvent, Controller, ControllerConfig, FetchEvent, HostMemoryBuffer, Status};
use hmb_nvme_trace::personality::{BIG_CHUNK_BYTES, FEW_DESCRIPTORS};
use hmb_nvme_trace::{NvmeTrace, Personality, ProducerKind, ADVERT_LEN};
use hmb_trace_abi::parse::{parse_record_at, RecordAt};
use hmb_trace_abi::*;
use zerocopy::{FromBytes, FromZeros, IntoBytes};

const GUEST: u64 = 96 << 20;
const MB: u64 = 1 << 20;
const RING: u64 = 64 << 10;
const DATA_CHUNK: u64 = 32 << 10;

struct Rig {
    h: FakeHost,
    trace: NvmeTrace,
    /// (guest address, bytes) of the slice chunks: lead, data...
    slice_chunks: Vec<(u64, u64)>,
    list: u64,
    entries: u32,
    hsize_pages: u32,
    slice_offset: u64,
}

fn file_backed_host(cfg: ControllerConfig) -> FakeHost {
    let mut h = FakeHost::new(cfg.clone(), GUEST);
    let file = tempfile::tempfile().unwrap();
    file.set_len(GUEST).unwrap();
    let region = GuestRegionMmap::from_range(GuestAddress(0), GUEST as usize, Some(FileOffset::new(file, 0))).unwrap();
    h.mem = GuestMemoryAtomic::new(GuestMemoryMmap::from_regions(vec![region]).unwrap());
    h.ctrl = Controller::new(cfg, h.mem.clone(), h.irq.clone()).unwrap();
    h
}

fn ring_header(ring_size: u64, epoch: u64) -> hmb_ring_hdr {
    let mut hdr = hmb_ring_hdr::new_zeroed();
    hdr.magic = HMB_RING_MAGIC.into();
    hdr.version_major = HMB_RING_VERSION_MAJOR.into();
    hdr.version_minor = HMB_RING_VERSION_MINOR.into();
    hdr.hdr_size = HMB_RING_HDR_SIZE.into();
    hdr.max_record = HMB_RECORD_MAX_SIZE.into();
    hdr.ring_size = ring_size.into();
    hdr.epoch = epoch.into();
    hdr
}

fn advert(generation: u64, offset: u64, len: u64) -> hmb_advert {
    let mut a = hmb_advert::new_zeroed();
    a.magic = HMB_ADVERT_MAGIC.into();
    a.state = HMB_ADVERT_STATE_READY.into();
    a.generation = generation.into();
    a.slice_offset = offset.into();
    a.slice_len = len.into();
    a
}

/// Two 4 MiB cache chunks, then the slice: a 4 KiB lead chunk (the header)
/// and two data chunks placed apart in guest memory, in reverse order.
fn rig_as(p: Personality) -> Rig {
    rig_with(p, ProducerKind::Rust, false)
}

/// Runs `$body(kind)` once per producer, as two tests.
macro_rules! both_producers {
    ($body:ident: $rust:ident, $c:ident) => {
        #[test]
        fn $rust() {
            $body(ProducerKind::Rust);
        }
        #[test]
        fn $c() {
            $body(ProducerKind::C);
        }
    };
}

/// The controller's observer events with a step clock (1 us per event) and
/// a fixed latency instead of the wall clock, so two runs of the same
/// commands produce the same records.
struct StepClock {
    inner: Box<dyn CommandObserver>,
    t: u64,
}

impl StepClock {
    fn tick(&mut self) -> u64 {
        self.t += 1000;
        self.t
    }
}

impl CommandObserver for StepClock {
    fn on_fetch(&mut self, f: &FetchEvent) {
        let f = FetchEvent {
            time_ns: self.tick(),
            ..f.clone()
        };
        self.inner.on_fetch(&f);
    }
    fn on_complete(&mut self, c: &CompletionEvent) {
        let c = CompletionEvent {
            time_ns: self.tick(),
            latency_ns: 777,
            ..c.clone()
        };
        self.inner.on_complete(&c);
    }
    fn on_hmb_enabled(&mut self, hmb: &HostMemoryBuffer) {
        self.inner.on_hmb_enabled(hmb);
    }
    fn on_hmb_disabling(&mut self, hmb: &HostMemoryBuffer) {
        self.inner.on_hmb_disabling(hmb);
    }
}

/// `p`'s controller producing with `kind`; `step_clock`: deterministic
/// timestamps ([`StepClock`]).
fn rig_with(p: Personality, kind: ProducerKind, step_clock: bool) -> Rig {
    let mut h = file_backed_host(p.apply(ControllerConfig::default()));
    let trace = NvmeTrace::with_producer(h.mem.clone(), kind);
    trace.install(&mut h.ctrl, p);
    if step_clock {
        h.ctrl.set_observer(Box::new(StepClock {
            inner: trace.observer(),
            t: 0,
        }));
    }
    assert_eq!(h.enable(32) & 0b11, 1);
    h.create_io_queue(1, 64).unwrap();

    let cache: Vec<(u64, u64)> = (0..2).map(|_| (h.alloc(4 * MB), 4 * MB)).collect();
    let lead = h.alloc(4096);
    let d1 = h.alloc(DATA_CHUNK);
    let _gap = h.alloc(DATA_CHUNK);
    let d0 = h.alloc(DATA_CHUNK);
    let slice_chunks = vec![(lead, 4096), (d0, DATA_CHUNK), (d1, DATA_CHUNK)];
    let all: Vec<(u64, u64)> = cache.iter().chain(slice_chunks.iter()).copied().collect();
    let list = h.alloc(16 * all.len() as u64);
    for (i, &(addr, bytes)) in all.iter().enumerate() {
        let mut e = [0u8; 16];
        e[0..8].copy_from_slice(&addr.to_le_bytes());
        e[8..12].copy_from_slice(&((bytes / 4096) as u32).to_le_bytes());
        h.guest_write(list + 16 * i as u64, &e);
    }
    let hsize_pages = (all.iter().map(|c| c.1).sum::<u64>() / 4096) as u32;
    Rig {
        h,
        trace,
        slice_chunks,
        list,
        entries: all.len() as u32,
        hsize_pages,
        slice_offset: 8 * MB,
    }
}

impl Rig {
    fn write_header(&mut self, epoch: u64) {
        let hdr = ring_header(RING, epoch);
        self.h.guest_write(self.slice_chunks[0].0, hdr.as_bytes());
    }

    fn set_hmb(&mut self, bits: u32) -> Status {
        let c = Command::set_features(0x0D, bits)
            .cdw(12, self.hsize_pages)
            .cdw(13, self.list as u32)
            .cdw(14, (self.list >> 32) as u32)
            .cdw(15, self.entries);
        self.h.admin(c).status
    }

    fn send_advert(&mut self, a: &hmb_advert) -> (Status, u32) {
        let buf = self.h.alloc(4096);
        self.h.guest_write(buf, a.as_bytes());
        let c = self.h.admin(Command::set_features(HMB_NVME_FID_TRACE, 0).prp1(buf));
        (c.status, c.dw0)
    }

    /// The slice as the host sees it: header page, then the data chunks in order.
    fn slice_image(&self) -> Vec<u8> {
        let mut img = Vec::new();
        for &(addr, bytes) in &self.slice_chunks {
            img.extend(self.h.guest_read(addr, bytes as usize));
        }
        img
    }
}

fn records(img: &[u8]) -> (hmb_ring_hdr, Vec<(hmb_record_hdr, Vec<u8>)>) {
    let hdr = hmb_ring_hdr::read_from_bytes(&img[..core::mem::size_of::<hmb_ring_hdr>()]).unwrap();
    let data = &img[HMB_RING_HDR_SIZE as usize..];
    let (mut pos, head) = (hdr.tail.get(), hdr.head.get());
    let mut out = Vec::new();
    while pos < head {
        let at = parse_record_at(data, pos, head).unwrap();
        if let RecordAt::Record { hdr: r, offset, .. } = at {
            let len = r.length.get() as usize;
            let start = offset + HMB_RECORD_HDR_SIZE as usize;
            out.push((r, data[start..start + len].to_vec()));
        }
        pos += at.advance();
    }
    (hdr, out)
}

both_producers!(real_commands_become_records_that_match_the_journal_and_a_reset_freezes_the_epoch: real_commands_become_records_that_match_the_journal_and_a_reset_freezes_the_epoch_rust, real_commands_become_records_that_match_the_journal_and_a_reset_freezes_the_epoch_c);

fn real_commands_become_records_that_match_the_journal_and_a_reset_freezes_the_epoch(kind: ProducerKind) {
    let mut r = rig_with(Personality::Tracing, kind, false);
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
    assert_eq!(r.trace.adopted_generation(), Some(1));

    // Real I/O: every fetch and completion is a record.
    let data = vec![0x5au8; 4096];
    assert!(r.h.write_lbas(1, 8, &data, 9).ok());
    let (c, back) = r.h.read_lbas(1, 8, 8, 9);
    assert!(c.ok());
    assert_eq!(back, data);

    // Get Features C0h: the adopted advert.
    let buf = r.h.alloc(4096);
    let g = r.h.admin(Command::get_features(HMB_NVME_FID_TRACE).prp1(buf));
    assert!(g.ok());
    assert_eq!(g.dw0, 1);
    assert_eq!(
        r.h.guest_read(buf, ADVERT_LEN),
        advert(1, r.slice_offset, len).as_bytes()
    );

    let (hdr, recs) = records(&r.slice_image());
    let journal = r.trace.journal();
    assert!(
        recs.len() >= 4,
        "fetch+complete of a write and a read at least: {}",
        recs.len()
    );
    assert_eq!(recs.len(), journal.entries.len());
    for ((rh, payload), j) in recs.iter().zip(&journal.entries) {
        assert!(j.written);
        assert_eq!(
            (rh.seq.get(), rh.opcode.get(), rh.source.get()),
            (j.seq, j.opcode, j.source)
        );
        assert_eq!(rh.timestamp_ns.get(), j.timestamp_ns);
        assert_eq!(payload, &j.payload);
    }
    // The write on queue 1: CMD_FETCH with opcode 01h, slba 8, 8 blocks.
    let w = journal
        .entries
        .iter()
        .find(|e| e.opcode == 0x0101 && e.source == 1)
        .expect("a fetch on queue 1");
    assert_eq!(w.payload[4], 0x01);
    assert_eq!(u64::from_le_bytes(w.payload[16..24].try_into().unwrap()), 8);
    assert_eq!(u32::from_le_bytes(w.payload[12..16].try_into().unwrap()), 8);
    assert_eq!(hdr.flags.get() & HMB_RING_FLAG_FROZEN, 0);

    // CC.EN 1->0: FROZEN is the last write, the advert is forgotten.
    r.h.disable();
    let (hdr, recs_after) = records(&r.slice_image());
    assert_ne!(hdr.flags.get() & HMB_RING_FLAG_FROZEN, 0);
    // The reset adds nothing but FROZEN and, before it, the map cache's last work in the
    // HMB (writing its dirty map pages back to NAND), flagged background.
    assert_eq!(recs_after[..recs.len()], recs[..]);
    let extra = &recs_after[recs.len()..];
    assert!(!extra.is_empty(), "the write left a dirty map page");
    for (rh, payload) in extra {
        assert!(
            (0x0700..0x0800).contains(&rh.opcode.get()),
            "an FTL record: {:#x}",
            rh.opcode.get()
        );
        assert_eq!((rh.source.get(), payload[4] & 1), (0xFFFF, 1), "background");
    }
    assert!(
        extra.iter().any(|(rh, _)| rh.opcode.get() == 0x0704),
        "an L2P_WRITE_BACK"
    );
    assert_eq!(r.trace.adopted_generation(), None);
    assert_eq!(r.trace.journal().frozen, vec![1]);

    // Re-enable with Memory Return: no production until a new advert with a
    // higher generation over a re-initialised header.
    assert_eq!(r.h.enable(32) & 0b11, 1);
    assert_eq!(r.set_hmb(0b11), Status::SUCCESS);
    r.h.forget_queues();
    r.h.create_io_queue(1, 64).unwrap();
    let before = r.trace.journal().entries.len();
    assert!(r.h.write_lbas(1, 0, &data, 9).ok());
    assert_eq!(
        r.trace.journal().entries.len(),
        before,
        "nothing produced without an advert"
    );
    r.write_header(1);
    assert_eq!(
        r.send_advert(&advert(1, r.slice_offset, len)).0,
        Status::INVALID_FIELD,
        "generation 1 was adopted in this HMB's life"
    );
    r.write_header(2);
    assert_eq!(r.send_advert(&advert(2, r.slice_offset, len)), (Status::SUCCESS, 2));
    assert!(r.h.write_lbas(1, 0, &data, 9).ok());
    let (hdr, recs) = records(&r.slice_image());
    assert_eq!(hdr.epoch.get(), 2);
    assert!(!recs.is_empty());
    assert_eq!(recs[0].0.seq.get(), 0, "sequence numbers restart in a new epoch");
    assert_eq!(r.trace.journal().epochs, vec![1, 2]);
}

both_producers!(bad_adverts_get_an_nvme_status_and_change_nothing: bad_adverts_get_an_nvme_status_and_change_nothing_rust, bad_adverts_get_an_nvme_status_and_change_nothing_c);

fn bad_adverts_get_an_nvme_status_and_change_nothing(kind: ProducerKind) {
    let mut r = rig_with(Personality::Tracing, kind, false);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    r.write_header(1);
    // No HMB yet.
    assert_eq!(
        r.send_advert(&advert(1, r.slice_offset, len)).0,
        Status::COMMAND_SEQUENCE_ERROR
    );
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    let mut bad_magic = advert(1, r.slice_offset, len);
    bad_magic.magic = 0.into();
    let mut bad_state = advert(1, r.slice_offset, len);
    bad_state.state = 7.into();
    let cases = [
        bad_magic,
        bad_state,
        advert(1, r.slice_offset + 100, len),  // unaligned
        advert(1, r.slice_offset, len + 4096), // ring not a power of two
        advert(1, r.slice_offset + 4096, len), // runs past the HMB
        advert(1, u64::MAX - 4095, len),       // overflows
        advert(2, r.slice_offset, len),        // epoch != generation
        advert(1, 0, len),                     // no ring header there
        advert(0, r.slice_offset, len),        // generation 0
    ];
    for (i, a) in cases.iter().enumerate() {
        assert_eq!(r.send_advert(a).0, Status::INVALID_FIELD, "case {i}");
        assert_eq!(r.trace.adopted_generation(), None, "case {i}");
    }
    // Another vendor FID is not ours.
    assert_eq!(r.h.admin(Command::set_features(0xC1, 0)).status, Status::INVALID_FIELD);
    // Withdraw (state NONE) is accepted and stops production.
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)).0, Status::SUCCESS);
    let mut none = advert(1, r.slice_offset, len);
    none.state = HMB_ADVERT_STATE_NONE.into();
    assert_eq!(r.send_advert(&none).0, Status::SUCCESS);
    assert_eq!(r.trace.adopted_generation(), None);
}

/// docs/abi.md decision 9: the tracing controller declares the contract at
/// Identify Controller byte 3072, and the declaration names the FID that
/// takes the advert and the ABI the producer writes.
#[test]
fn identify_controller_declares_the_trace_contract() {
    let mut h = file_backed_host(ControllerConfig::default());
    let trace = NvmeTrace::new(h.mem.clone());
    h.ctrl.set_vendor_features(trace.features());
    assert_eq!(h.enable(32) & 0b11, 1);
    let buf = h.alloc(4096);
    assert!(h.admin(Command::identify(1, 0, buf)).ok());
    let id = h.guest_read(buf, 4096);
    let at = HMB_NVME_ID_VS_OFFSET as usize;
    let decl = hmb_nvme_trace_id::read_from_bytes(&id[at..at + core::mem::size_of::<hmb_nvme_trace_id>()]).unwrap();
    assert_eq!(decl.magic.get(), HMB_NVME_ID_MAGIC);
    assert_eq!(&id[at..at + 8], b"HMBTRACE", "magic in memory order");
    assert_eq!(decl.abi_major.get(), HMB_RING_VERSION_MAJOR);
    assert_eq!(decl.abi_minor.get(), HMB_RING_VERSION_MINOR);
    assert_eq!(decl.fid, HMB_NVME_FID_TRACE);
    assert_eq!(decl.max_ring_size.get(), HMB_RING_MAX_SIZE);
    assert_eq!((decl.reserved0, decl.reserved1), ([0; 3], [0; 8]));
    assert_eq!(decl, hmb_nvme_trace::trace_declaration());
    // The rest of the vendor-specific area stays zero.
    assert!(id[at + 32..].iter().all(|&b| b == 0));
}

/// Telemetry Host-Initiated (07h) as nvme-cli reads it: the header with
/// create, then the data blocks in 4 KiB reads. Returns (header, data area).
fn telemetry_log(h: &mut FakeHost) -> (Vec<u8>, Vec<u8>) {
    telemetry_log_of(h, 0x07)
}

/// Log `lid` (07h: with create, 08h: as it stands), header and data areas, read as
/// nvme-cli reads it (RAE = 0 on every read).
fn telemetry_log_of(h: &mut FakeHost, lid: u32) -> (Vec<u8>, Vec<u8>) {
    let buf = h.alloc(4096);
    let get = |h: &mut FakeHost, offset: u64, bytes: u32, create: bool| {
        let numd = bytes / 4 - 1;
        let c = h.admin(
            Command::new(0x02)
                .prp1(buf)
                .cdw(10, lid | u32::from(create) << 8 | numd << 16)
                .cdw(12, offset as u32)
                .cdw(13, (offset >> 32) as u32),
        );
        assert_eq!(c.status, Status::SUCCESS, "telemetry at {offset}");
        h.guest_read(buf, bytes as usize)
    };
    let header = get(h, 0, 512, lid == 0x07);
    let last = u16::from_le_bytes([header[12], header[13]]) as u64;
    let mut data = Vec::new();
    let mut offset = 512;
    while offset < (last + 1) * 512 {
        let bytes = (4096).min((last + 1) * 512 - offset) as u32;
        data.extend(get(h, offset, bytes, false));
        offset += u64::from(bytes);
    }
    (header, data)
}

/// The trace.bin items of a telemetry log: records as (epoch, seq,
/// opcode) and markers as they come.
fn telemetry_items(data: &[u8]) -> (u64, Vec<hmb_trace_file::ItemKind>, Vec<(u64, u64, u16)>) {
    let log = hmb_trace_file::TelemetryLog::parse(data).unwrap();
    let r = hmb_trace_file::SliceReader::new(log.stream).unwrap();
    let first_epoch = r.header().first_epoch;
    let mut epoch = first_epoch;
    let (mut markers, mut recs) = (Vec::new(), Vec::new());
    for item in r {
        let item = item.unwrap();
        match item.kind().unwrap() {
            hmb_trace_file::ItemKind::Record => recs.push((epoch, item.seq(), item.opcode())),
            k => {
                if let hmb_trace_file::ItemKind::Marker(hmb_trace_file::Marker::Epoch { epoch: e, .. }) = k {
                    epoch = e;
                }
                markers.push(k);
            }
        }
    }
    (first_epoch, markers, recs)
}

both_producers!(telemetry_serves_the_newest_records_with_and_without_a_slice: telemetry_serves_the_newest_records_with_and_without_a_slice_rust, telemetry_serves_the_newest_records_with_and_without_a_slice_c);

fn telemetry_serves_the_newest_records_with_and_without_a_slice(kind: ProducerKind) {
    use hmb_trace_file::{ItemKind, Marker};
    let mut r = rig_with(Personality::Tracing, kind, false);
    // A stock host: no advert. The controller still keeps its records,
    // under epoch 0, for Telemetry only.
    let data = vec![0x5au8; 4096];
    assert!(r.h.write_lbas(1, 8, &data, 9).ok());
    let (header, area) = telemetry_log(&mut r.h);
    assert_eq!(header[381], 1, "first generation");
    assert_eq!(&header[384..388], b"HMBT");
    let (first_epoch, markers, recs) = telemetry_items(&[header.clone(), area.clone()].concat());
    assert_eq!(first_epoch, 0);
    assert!(markers.is_empty(), "{markers:?}");
    // The write's fetch and completion (and the Get Log Page's own fetch,
    // produced before the snapshot was taken).
    assert!(recs.len() >= 2, "{recs:?}");
    let seqs: Vec<u64> = recs.iter().map(|r| r.1).collect();
    assert_eq!(seqs, (0..recs.len() as u64).collect::<Vec<_>>());
    assert!(recs.iter().any(|&(_, _, op)| op == 0x0101));
    let journal = r.trace.journal();
    assert!(journal.entries.is_empty(), "no ring: nothing in the ring's journal");
    let kept: Vec<(u64, u64, u16)> = journal.unadopted.iter().map(|e| (e.epoch, e.seq, e.opcode)).collect();
    assert_eq!(&kept[..recs.len()], &recs[..], "telemetry holds the unadopted journal");

    // With a slice: the same records the ring gets, then FROZEN at reset.
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
    assert!(r.h.write_lbas(1, 8, &data, 9).ok());
    r.h.disable();
    assert_eq!(r.h.enable(32) & 0b11, 1);
    let (header, area) = telemetry_log(&mut r.h);
    assert_eq!(header[381], 2, "a second create, a higher generation");
    let (_, markers, recs) = telemetry_items(&[header.clone(), area].concat());
    let journal = r.trace.journal();
    let ring_recs: Vec<(u64, u64, u16)> = recs.iter().copied().filter(|r| r.0 == 1).collect();
    let want: Vec<(u64, u64, u16)> = journal.entries.iter().map(|e| (e.epoch, e.seq, e.opcode)).collect();
    assert_eq!(ring_recs, want, "epoch 1 in telemetry is the journal");
    assert!(markers.contains(&ItemKind::Marker(Marker::Epoch {
        epoch: 1,
        ring_size: RING
    })));
    let last = journal.entries.last().unwrap().seq;
    assert!(
        markers.contains(&ItemKind::Marker(Marker::Frozen {
            epoch: 1,
            last_seq: Some(last),
            next_seq: last + 1
        })),
        "{markers:?}"
    );
}

/// The history's bound (`serve-nvme --telemetry-history`) is what the log
/// page serves: with the smallest, a snapshot of many commands holds the
/// newest records only, within the bound, ending with the newest the
/// journal has.
#[test]
fn the_history_bound_limits_the_log_to_the_newest_records() {
    use hmb_nvme_trace::telemetry::{HistoryBytesError, MIN_HISTORY_BYTES};
    let mut r = rig_as(Personality::Tracing);
    assert_eq!(r.trace.set_history_bytes(100), Err(HistoryBytesError(100)));
    r.trace.set_history_bytes(MIN_HISTORY_BYTES).unwrap();
    let data = vec![0x11u8; 4096];
    for lba in 0..400 {
        assert!(r.h.write_lbas(1, lba * 8, &data, 9).ok());
    }
    let (header, area) = telemetry_log(&mut r.h);
    let log = [header, area].concat();
    let parsed = hmb_trace_file::TelemetryLog::parse(&log).unwrap();
    assert!(
        parsed.stream.len() <= MIN_HISTORY_BYTES + hmb_trace_file::FILE_HEADER_SIZE,
        "{} bytes",
        parsed.stream.len()
    );
    let (_, markers, recs) = telemetry_items(&log);
    assert!(markers.is_empty());
    let journal = r.trace.journal();
    assert!(
        journal.unadopted.len() > recs.len(),
        "{} records made, {} kept: the bound cut the oldest",
        journal.unadopted.len(),
        recs.len()
    );
    let all: Vec<(u64, u64, u16)> = journal.unadopted.iter().map(|e| (e.epoch, e.seq, e.opcode)).collect();
    let start = all.iter().position(|x| *x == recs[0]).unwrap();
    assert!(start > 0, "the bound cut the oldest records");
    let end = start + recs.len();
    assert_eq!(all[start..end], recs[..], "a contiguous run of the journal");
    // After it only the admin queue's records: the Get Log Page reads that
    // followed the create (its own fetch is in the snapshot).
    assert!(journal.unadopted.iter().skip(end).all(|e| e.source == 0));
    assert!(journal.unadopted.iter().take(end).any(|e| e.source != 0));
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Identify Controller of each personality: the HMB fields it reports and whether the
/// trace contract is declared at byte 3072.
#[test]
fn each_personality_reports_its_hmb_limits_and_declaration() {
    let base = ControllerConfig::default();
    for p in Personality::ALL {
        let mut h = file_backed_host(p.apply(ControllerConfig::default()));
        NvmeTrace::new(h.mem.clone()).install(&mut h.ctrl, p);
        assert_eq!(h.enable(32) & 0b11, 1);
        let buf = h.alloc(4096);
        assert!(h.admin(Command::identify(1, 0, buf)).ok());
        let id = h.guest_read(buf, 4096);
        let (hmpre, hmmin, hmminds) = (
            u64::from(u32_at(&id, 272)) * 4096,
            u64::from(u32_at(&id, 276)) * 4096,
            u64::from(u32_at(&id, 332)) * 4096,
        );
        let hmmaxd = u16::from_le_bytes([id[336], id[337]]);
        let want = match p {
            Personality::SmallHmb => (base.hmmin_bytes, base.hmmin_bytes, base.hmminds_bytes, base.hmmaxd),
            Personality::FewDescriptors => (base.hmpre_bytes, base.hmmin_bytes, base.hmminds_bytes, FEW_DESCRIPTORS),
            Personality::BigChunks => (base.hmpre_bytes, base.hmmin_bytes, BIG_CHUNK_BYTES, base.hmmaxd),
            _ => (base.hmpre_bytes, base.hmmin_bytes, base.hmminds_bytes, base.hmmaxd),
        };
        assert_eq!((hmpre, hmmin, hmminds, hmmaxd), want, "{p}");
        let at = HMB_NVME_ID_VS_OFFSET as usize;
        if p.declares_contract() {
            assert_eq!(&id[at..at + 8], b"HMBTRACE", "{p}");
        } else {
            assert!(id[3072..].iter().all(|&b| b == 0), "{p}: the vendor area stays zero");
        }
    }
}

/// `stock`: no trace contract. Set and Get Features C0h are Invalid Field even with a
/// valid advert over a valid header, nothing is adopted, the controller owns the whole
/// HMB from the enable, and a clean reset with MR=1 shows no host write.
#[test]
fn stock_answers_c0h_invalid_field_and_owns_its_whole_hmb() {
    let mut r = rig_as(Personality::Stock);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    let a = r.h.ctrl.hmb_audit();
    assert!(!a.claim_pending);
    assert_eq!(a.private_pages, u64::from(r.hsize_pages), "no slice: every page");
    r.write_header(1);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)).0, Status::INVALID_FIELD);
    let buf = r.h.alloc(4096);
    assert_eq!(
        r.h.admin(Command::get_features(HMB_NVME_FID_TRACE).prp1(buf)).status,
        Status::INVALID_FIELD
    );
    assert_eq!(r.trace.adopted_generation(), None);
    let a = r.h.ctrl.hmb_audit();
    assert!(a.c0h_received, "the audit saw the C0h a stock driver must never send");
    assert_eq!(a.vendor_feature_commands, 2);
    // The header write above was a host write into an enabled HMB the controller owns.
    r.h.disable();
    assert_eq!(r.h.ctrl.hmb_audit().violations, 1);
    assert_eq!(r.h.ctrl.hmb_audit().first_violations[0].offset, r.slice_offset);
    assert_eq!(r.h.enable(32) & 0b11, 1);
    assert_eq!(r.set_hmb(0b11), Status::SUCCESS);
    let a = r.h.ctrl.hmb_audit();
    assert_eq!((a.mr_reenables, a.violations), (1, 1), "nothing new while released");
}

/// `refusing-probe`: the contract is declared, every advert refused. The first other
/// admin command makes the whole HMB the controller's, the header page included.
#[test]
fn refusing_probe_refuses_every_advert_and_then_owns_the_slice_too() {
    let mut r = rig_as(Personality::RefusingProbe);
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)).0, Status::INVALID_FIELD);
    assert_eq!(r.send_advert(&advert(2, r.slice_offset, len)).0, Status::INVALID_FIELD);
    assert_eq!(r.trace.adopted_generation(), None);
    assert!(r.h.ctrl.hmb_audit().claim_pending);
    // I/O does not end the wait (it flows while the host re-enables the HMB at run
    // time); the next admin command does.
    assert!(r.h.write_lbas(1, 0, &[7u8; 512], 9).ok());
    assert!(r.h.ctrl.hmb_audit().claim_pending);
    let buf = r.h.alloc(4096);
    assert!(r.h.admin(Command::identify(1, 0, buf)).ok());
    let a = r.h.ctrl.hmb_audit();
    assert_eq!((a.claim_pending, a.private_pages), (false, u64::from(r.hsize_pages)));
    // A driver that keeps the dead slice and marks it FROZEN after MR=1 is caught.
    r.h.disable();
    assert_eq!(r.h.enable(32) & 0b11, 1);
    assert_eq!(r.set_hmb(0b11), Status::SUCCESS);
    let flags_at = r.slice_chunks[0].0 + 16;
    r.h.guest_write(flags_at, &HMB_RING_FLAG_FROZEN.to_le_bytes());
    r.h.disable();
    let a = r.h.ctrl.hmb_audit();
    assert_eq!(a.violations, 1);
    assert_eq!(a.first_violations[0].offset, r.slice_offset);
}

/// `refusing-reinit`: the first advert of a fresh HMB is adopted; after a reset (MR=1) the
/// re-advert is refused, the slice becomes the controller's, and a later host write into
/// it is reported.
#[test]
fn refusing_reinit_adopts_at_probe_and_refuses_the_re_advert() {
    let mut r = rig_as(Personality::RefusingReinit);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
    let a = r.h.ctrl.hmb_audit();
    assert_eq!(a.shared_slice.map(|s| (s.offset, s.len)), Some((r.slice_offset, len)));
    r.h.disable();
    assert_eq!(r.h.enable(32) & 0b11, 1);
    assert_eq!(r.set_hmb(0b11), Status::SUCCESS);
    // The host re-initialises the shared slice (allowed: no advert adopted) and re-adverts.
    r.write_header(2);
    assert_eq!(r.send_advert(&advert(2, r.slice_offset, len)).0, Status::INVALID_FIELD);
    assert_eq!(r.trace.adopted_generation(), None);
    let a = r.h.ctrl.hmb_audit();
    assert_eq!((a.violations, a.shared_slice), (0, None));
    // Written after the refusal: a violation, found when the controller loses the HMB.
    r.write_header(3);
    r.h.disable();
    let a = r.h.ctrl.hmb_audit();
    assert_eq!(a.violations, 1);
    assert_eq!(a.first_violations[0].offset, r.slice_offset);
    // A fresh HMB (MR=0) starts over: the first advert is adopted again.
    assert_eq!(r.h.enable(32) & 0b11, 1);
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
}

both_producers!(the_tracing_protocol_writes_only_the_shared_slice: the_tracing_protocol_writes_only_the_shared_slice_rust, the_tracing_protocol_writes_only_the_shared_slice_c);

/// The tracing personality with the driver's order (header, 0Dh, advert, I/O, reset,
/// MR=1, FROZEN and re-init in the slice, re-advert): the host never touches a
/// controller-private page, so the audit reports nothing.
fn the_tracing_protocol_writes_only_the_shared_slice(kind: ProducerKind) {
    let mut r = rig_with(Personality::Tracing, kind, false);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
    assert!(r.h.write_lbas(1, 0, &[1u8; 4096], 9).ok());
    r.h.disable();
    assert_eq!(r.h.enable(32) & 0b11, 1);
    assert_eq!(r.set_hmb(0b11), Status::SUCCESS);
    r.write_header(2);
    assert_eq!(r.send_advert(&advert(2, r.slice_offset, len)), (Status::SUCCESS, 2));
    r.h.disable();
    let a = r.h.ctrl.hmb_audit();
    let cache_pages = r.slice_offset / 4096;
    assert_eq!(a.private_pages, cache_pages, "the cache part only");
    assert_eq!((a.checks, a.pages_checked), (3, 3 * cache_pages));
    assert_eq!(a.violations, 0, "{:?}", a.first_violations);
    assert!(a.c0h_received);
}

/// The same commands with each producer (deterministic timestamps): the
/// slice is the same, byte for byte, through a full ring (drops and
/// OVERFLOWED), the host advancing tail, a wrap, and FROZEN at reset; and
/// so is the journal.
#[test]
fn the_c_and_rust_producers_write_the_same_ring_and_journal() {
    let run = |kind| {
        let mut r = rig_with(Personality::Tracing, kind, true);
        let len = u64::from(HMB_RING_HDR_SIZE) + RING;
        r.write_header(1);
        assert_eq!(r.set_hmb(1), Status::SUCCESS);
        assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
        let block = [0x33u8; 512];
        // 64 KiB of 56- and 48-byte records: about 630 commands fill it, the rest drop.
        for i in 0..800 {
            assert!(r.h.write_lbas(1, i % 64, &block, 9).ok());
        }
        let (hdr, _) = records(&r.slice_image());
        assert!(hdr.dropped_records.get() > 0, "the ring overflowed");
        // The host consumes everything (tail := head), then more comes: a wrap.
        let tail_at = r.slice_chunks[0].0 + offsets::TAIL as u64;
        r.h.guest_write(tail_at, &hdr.head.get().to_le_bytes());
        for i in 0..400 {
            assert!(r.h.write_lbas(1, i % 64, &block, 9).ok());
        }
        r.h.disable();
        (r.slice_image(), r.trace.journal())
    };
    let (rust_img, rust_journal) = run(ProducerKind::Rust);
    let (c_img, c_journal) = run(ProducerKind::C);
    let (hdr, recs) = records(&rust_img);
    assert_ne!(hdr.flags.get() & HMB_RING_FLAG_FROZEN, 0);
    assert!(hdr.head.get() > RING, "wrapped: head {}", hdr.head.get());
    assert!(rust_journal.entries.iter().any(|e| !e.written), "drops are journalled");
    assert!(!recs.is_empty());
    let first_diff = rust_img.iter().zip(&c_img).position(|(a, b)| a != b);
    assert_eq!(first_diff, None, "the slices differ first at byte {first_diff:?}");
    assert_eq!(rust_img.len(), c_img.len());
    assert_eq!(
        serde_json::to_string(&rust_journal).unwrap(),
        serde_json::to_string(&c_journal).unwrap()
    );
}

/// The host disables the HMB under a live ring: the ring goes FROZEN and the controller
/// captures its Controller-Initiated telemetry (08h) right after, announced by Telemetry
/// Log Changed because the host set AEC bit 10; the capture holds the ring's records and
/// its FROZEN marker, as the journal has them.
#[test]
fn a_frozen_ring_is_captured_as_controller_initiated_telemetry() {
    use hmb_trace_file::{ItemKind, Marker};
    let mut r = rig_with(Personality::Tracing, ProducerKind::Rust, false);
    assert!(r.h.admin(Command::set_features(0x0B, 1 << 10)).ok());
    let aer = r.h.push(0, Command::new(0x0C));
    r.h.ring(0);
    r.write_header(1);
    assert_eq!(r.set_hmb(1), Status::SUCCESS);
    let len = u64::from(HMB_RING_HDR_SIZE) + RING;
    assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
    assert!(r.h.write_lbas(1, 8, &[0x33u8; 4096], 9).ok());
    assert!(r.h.reap(0).is_none(), "no event while the ring runs");

    assert_eq!(r.set_hmb(0), Status::SUCCESS);
    let c = r.h.reap(0).expect("Telemetry Log Changed after the Set Features CQE");
    assert_eq!(
        (c.cid, c.dw0),
        (aer, 0x08_02_02),
        "Notice, Telemetry Log Changed, log 08h"
    );

    let (header, area) = telemetry_log_of(&mut r.h, 0x08);
    assert_eq!((header[0], header[382], header[383]), (0x08, 1, 1));
    let (_, markers, recs) = telemetry_items(&[header, area].concat());
    let journal = r.trace.journal();
    assert_eq!(journal.frozen, vec![1]);
    let want: Vec<(u64, u64, u16)> = journal.entries.iter().map(|e| (e.epoch, e.seq, e.opcode)).collect();
    let ring_recs: Vec<(u64, u64, u16)> = recs.iter().copied().filter(|r| r.0 == 1).collect();
    assert_eq!(ring_recs, want, "the ring's records, as the journal has them");
    let last = journal.entries.last().unwrap().seq;
    assert_eq!(
        markers.last(),
        Some(&ItemKind::Marker(Marker::Frozen {
            epoch: 1,
            last_seq: Some(last),
            next_seq: last + 1
        })),
        "the capture ends with the FROZEN of that release"
    );
    // Read with RAE = 0: released.
    let (header, _) = telemetry_log_of(&mut r.h, 0x08);
    assert_eq!((header[382], header[383]), (0, 1));
}

/// A stock host never adopts a slice: once the unadopted journal is full its
/// oldest entry is reused for the newest (lib.rs, `produce`). Fetch and
/// completion records (24 and 16 payload bytes) in a period of three, so an
/// entry is reused for a record of the other length (2^20 is 1 mod 3).
#[test]
fn a_full_unadopted_journal_keeps_the_newest_records_exactly() {
    let h = FakeHost::new(ControllerConfig::default(), 4 * MB);
    let trace = NvmeTrace::new(h.mem.clone());
    let mut o = trace.observer();
    let n = hmb_nvme_trace::UNADOPTED_JOURNAL_MAX as u64 + 7;
    let fetch = |i: u64| FetchEvent {
        qid: 1,
        cid: i as u16,
        opcode: 2,
        nsid: 1,
        slba: i,
        nlb: 1,
        time_ns: i,
        sqe: [i as u32; 16],
    };
    let complete = |i: u64| CompletionEvent {
        qid: 1,
        cid: i as u16,
        opcode: 2,
        status: 0,
        dw0: i as u32,
        time_ns: i,
        latency_ns: 1,
        media_latency_ns: 0,
    };
    for i in 0..n {
        if i % 3 == 2 {
            o.on_complete(&complete(i));
        } else {
            o.on_fetch(&fetch(i));
        }
    }
    let j = trace.journal();
    assert_eq!(j.unadopted.len(), hmb_nvme_trace::UNADOPTED_JOURNAL_MAX);
    let first = n - j.unadopted.len() as u64;
    for (k, e) in j.unadopted.iter().enumerate() {
        let i = first + k as u64;
        let (opcode, payload) = if i % 3 == 2 {
            (
                hmb_firmware_model::catalog::OP_CMD_COMPLETE,
                hmb_nvme_trace::complete_payload(&complete(i)).to_vec(),
            )
        } else {
            (
                hmb_firmware_model::catalog::OP_CMD_FETCH,
                hmb_nvme_trace::fetch_payload(&fetch(i)).to_vec(),
            )
        };
        assert_eq!(
            (e.epoch, e.seq, e.opcode, e.timestamp_ns),
            (0, i, opcode, i),
            "entry {k}"
        );
        assert_eq!(e.payload, payload, "entry {k}");
        assert!(e.written);
    }
}

/// The journal of an adopted slice under a small bound (`serve-nvme
/// --trace-journal`): the same commands (deterministic timestamps, drops
/// included) leave it holding exactly the newest entries of the unbounded
/// journal, and it counts the older ones it let go, drops apart.
#[test]
fn a_bounded_journal_keeps_the_newest_entries_of_the_whole_and_counts_the_rest() {
    let run = |bytes: Option<usize>| {
        let mut r = rig_with(Personality::Tracing, ProducerKind::Rust, true);
        if let Some(b) = bytes {
            r.trace.set_journal_bytes(b).unwrap();
        }
        let len = u64::from(HMB_RING_HDR_SIZE) + RING;
        r.write_header(1);
        assert_eq!(r.set_hmb(1), Status::SUCCESS);
        assert_eq!(r.send_advert(&advert(1, r.slice_offset, len)), (Status::SUCCESS, 1));
        let block = [0x33u8; 512];
        for i in 0..1200 {
            assert!(r.h.write_lbas(1, i % 64, &block, 9).ok());
        }
        r.h.disable();
        r.trace.journal()
    };
    let whole = run(None);
    let bounded = run(Some(hmb_nvme_trace::journal::MIN_JOURNAL_BYTES));
    assert_eq!((whole.evicted, whole.evicted_dropped), (0, 0));
    let evicted = bounded.evicted as usize;
    assert!(evicted > 0 && !bounded.entries.is_empty());
    assert_eq!(evicted + bounded.entries.len(), whole.entries.len());
    assert_eq!(bounded.entries[..], whole.entries[evicted..]);
    let dropped = whole.entries[..evicted].iter().filter(|e| !e.written).count() as u64;
    assert!(dropped > 0, "the ring overflowed in the evicted part");
    assert_eq!(bounded.evicted_dropped, dropped);
    assert_eq!(bounded.epochs, whole.epochs);
    assert_eq!(bounded.frozen, vec![1]);
    assert!(r_bad_bound().is_err());
}

fn r_bad_bound() -> Result<(), hmb_nvme_trace::journal::JournalBytesError> {
    let h = FakeHost::new(ControllerConfig::default(), 4 * MB);
    NvmeTrace::new(h.mem.clone()).set_journal_bytes(100)
}
