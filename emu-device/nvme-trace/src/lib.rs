//! hmb-nvme-trace: the firmware trace producer of the NVMe controller model
//! (issue 14), over the trace slice that the patched Linux nvme driver
//! carves out of the Host Memory Buffer (docs/abi.md, decision 9).
//!
//! - [`TraceFeatures`] (a [`VendorFeatures`]) takes the advert: Set Features
//!   C0h with `struct hmb_advert`, checked against the HMB and the ring
//!   header; the slice's pieces are mapped as one ring ([`view`]) and a
//!   [`Producer`] attaches to it. Get Features C0h returns the adopted advert.
//! - [`TraceObserver`] (a [`CommandObserver`]) writes a CMD_FETCH record when
//!   the controller reads a submission queue entry and a CMD_COMPLETE record
//!   when it posts the completion, and writes FROZEN as the last HMB write
//!   when the HMB goes (EHM=0, CC.EN 1->0, shutdown, CFS, transport reset);
//!   then it forgets the advert.
//! - The [`Journal`] keeps the records the controller produced (the ground
//!   truth a trace.bin is compared with) and what was dropped: the newest
//!   [`journal::DEFAULT_JOURNAL_BYTES`] of them (`serve-nvme --trace-journal`),
//!   and how many older ones it let go.
//!
//! Both halves share one [`NvmeTrace`]; the controller calls them from one
//! thread, the mutex only makes the sharing safe.

pub mod ftl;
pub mod journal;
pub mod personality;
pub mod producer;
pub mod telemetry;
pub mod view;

pub use personality::{Personality, Refusal, UnknownPersonality};
pub use producer::{ProducerKind, UnknownProducer};

use std::sync::{Arc, Mutex, MutexGuard};

use hmb_firmware_model::catalog::{OP_CMD_COMPLETE, OP_CMD_FETCH};
use hmb_firmware_model::Produced;
use hmb_nvme::{
    CommandObserver, CompletionEvent, Controller, FetchEvent, FtlTraceEvent, GuestMem, HostMemoryBuffer,
    NoVendorFeatures, Status, TelemetryData, VendorFeatures,
};
use hmb_trace_abi::{
    hmb_advert, hmb_nvme_trace_id, hmb_ring_hdr, HMB_ADVERT_MAGIC, HMB_ADVERT_STATE_NONE, HMB_ADVERT_STATE_READY,
    HMB_NVME_FID_TRACE, HMB_NVME_ID_MAGIC, HMB_NVME_ID_VS_OFFSET, HMB_RING_HDR_SIZE, HMB_RING_MAGIC, HMB_RING_MAX_SIZE,
    HMB_RING_MIN_SIZE, HMB_RING_VERSION_MAJOR, HMB_RING_VERSION_MINOR,
};
use producer::RingProducer;
use serde::{Deserialize, Serialize};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

use hmb_trace_file::TelemetryReason;
use telemetry::History;
use view::SliceView;

/// Size of the Set Features C0h data: one `struct hmb_advert`.
pub const ADVERT_LEN: usize = core::mem::size_of::<hmb_advert>();

/// The controller's declaration of the trace contract (docs/abi.md decision
/// 9): what it puts at Identify Controller byte `HMB_NVME_ID_VS_OFFSET`.
pub fn trace_declaration() -> hmb_nvme_trace_id {
    let mut id = hmb_nvme_trace_id::new_zeroed();
    id.magic = HMB_NVME_ID_MAGIC.into();
    id.abi_major = HMB_RING_VERSION_MAJOR.into();
    id.abi_minor = HMB_RING_VERSION_MINOR.into();
    id.fid = HMB_NVME_FID_TRACE;
    id.max_ring_size = HMB_RING_MAX_SIZE.into();
    id
}

/// One record the controller produced (or dropped), in production order.
/// Serialised in the `ground-truth` answer and read back by the harness's
/// trace check (one definition for both sides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub epoch: u64,
    pub seq: u64,
    pub opcode: u16,
    pub source: u32,
    pub timestamp_ns: u64,
    pub payload: Vec<u8>,
    /// False: the ring was full and the record was counted as dropped.
    pub written: bool,
}

/// Everything the producer did, for the ground-truth check.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Journal {
    /// The records of adopted slices, in production order: the newest that
    /// fit the journal's bound; `evicted` older ones came before them.
    pub entries: Vec<JournalEntry>,
    /// Records produced into adopted slices before `entries[0]` and no longer
    /// kept (the bound, `serve-nvme --trace-journal`).
    #[serde(default)]
    pub evicted: u64,
    /// Of the `evicted`, records the ring had no room for (not written).
    #[serde(default)]
    pub evicted_dropped: u64,
    /// Epochs (generations) adopted, in order.
    pub epochs: Vec<u64>,
    /// Epochs that ended with FROZEN written by the controller.
    #[serde(default)]
    pub frozen: Vec<u64>,
    /// Epochs that ended because the transport took part of the slice's guest
    /// memory away from the device (a DMA unmap): no FROZEN, since the memory
    /// is no longer the device's to write.
    #[serde(default)]
    pub withdrawn: Vec<u64>,
    /// Records produced while no slice was adopted (epoch 0, kept for
    /// Telemetry only): the newest [`UNADOPTED_JOURNAL_MAX`].
    #[serde(default)]
    pub unadopted: std::collections::VecDeque<JournalEntry>,
}

/// Bound of [`Journal::unadopted`]: a stock host never adopts a slice, and
/// the controller may run for long.
pub const UNADOPTED_JOURNAL_MAX: usize = 1 << 20;

impl JournalEntry {
    /// The record's bytes as the producer wrote them into the ring: the
    /// header (flags 0, reserved 0) and the payload, unpadded.
    pub fn record_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::new();
        self.record_bytes_into(&mut bytes);
        bytes
    }

    /// [`JournalEntry::record_bytes`] into `out` (cleared first), so that a
    /// caller with a spare buffer allocates nothing.
    fn record_bytes_into(&self, out: &mut Vec<u8>) {
        record_bytes_into(
            out,
            self.opcode,
            self.seq,
            self.timestamp_ns,
            self.source,
            &self.payload,
        );
    }
}

/// A record's bytes as the producer writes them (header with flags and
/// reserved 0, then the payload, unpadded) into `out`, cleared first.
fn record_bytes_into(out: &mut Vec<u8>, opcode: u16, seq: u64, timestamp_ns: u64, source: u32, payload: &[u8]) {
    let hdr = hmb_trace_abi::hmb_record_hdr::record(payload.len() as u32, opcode, seq, timestamp_ns, source);
    out.clear();
    out.reserve_exact(hdr.as_bytes().len() + payload.len());
    out.extend_from_slice(hdr.as_bytes());
    out.extend_from_slice(payload);
}

struct Adopted {
    advert: hmb_advert,
    // Dropped before the view it points into.
    producer: RingProducer,
    view: SliceView,
}

struct State {
    mem: GuestMem,
    /// Which producer an adopted slice gets.
    kind: ProducerKind,
    adopted: Option<Adopted>,
    /// Highest generation adopted since the HMB was enabled without Memory Return.
    last_generation: u64,
    /// Epochs, freezes, withdrawals and the unadopted records; the adopted
    /// records are in `entries` (`journal.entries` stays empty).
    journal: Journal,
    entries: journal::Store,
    /// The records produced with no slice adopted (`journal.unadopted`
    /// stays empty): the newest [`UNADOPTED_JOURNAL_MAX`].
    unadopted: journal::Store,
    /// The newest records, for Telemetry (telemetry.rs).
    history: History,
}

/// The shared producer state; hand [`NvmeTrace::features`] and
/// [`NvmeTrace::observer`] to the controller.
#[derive(Clone)]
pub struct NvmeTrace {
    state: Arc<Mutex<State>>,
}

impl NvmeTrace {
    /// `mem` is the same guest memory the controller uses (DMA map updates
    /// included: it is the atomic view).
    pub fn new(mem: GuestMem) -> NvmeTrace {
        NvmeTrace::with_producer(mem, ProducerKind::Rust)
    }

    /// [`NvmeTrace::new`] producing with `kind` (`serve-nvme --producer`).
    pub fn with_producer(mem: GuestMem, kind: ProducerKind) -> NvmeTrace {
        NvmeTrace {
            state: Arc::new(Mutex::new(State {
                mem,
                kind,
                adopted: None,
                last_generation: 0,
                journal: Journal::default(),
                entries: journal::Store::new(journal::DEFAULT_JOURNAL_BYTES),
                unadopted: journal::Store::bounded(usize::MAX, UNADOPTED_JOURNAL_MAX),
                history: History::new(telemetry::DEFAULT_HISTORY_BYTES),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic elsewhere must not take the controller down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn features(&self) -> Box<dyn VendorFeatures> {
        self.features_refusing(Refusal::Never)
    }

    /// The advert's Set/Get Features C0h, refusing adverts as `refusal` says.
    pub fn features_refusing(&self, refusal: Refusal) -> Box<dyn VendorFeatures> {
        Box::new(TraceFeatures {
            trace: self.clone(),
            refusal,
        })
    }

    /// Give `ctrl` this producer as `personality` has it: the observer always (without an
    /// adopted advert it writes nothing), the trace contract only if the personality
    /// declares it (`stock`: no vendor features, C0h is Invalid Field).
    pub fn install(&self, ctrl: &mut Controller, personality: Personality) {
        ctrl.set_observer(self.observer());
        if personality.declares_contract() {
            ctrl.set_vendor_features(self.features_refusing(personality.refusal()));
        } else {
            ctrl.set_vendor_features(Box::new(NoVendorFeatures));
        }
    }

    pub fn observer(&self) -> Box<dyn CommandObserver> {
        Box::new(TraceObserver { trace: self.clone() })
    }

    /// Bound the controller's own history of records, served as Telemetry
    /// (`serve-nvme --telemetry-history`; default
    /// [`telemetry::DEFAULT_HISTORY_BYTES`]); the oldest go if it holds more.
    pub fn set_history_bytes(&self, bytes: usize) -> Result<(), telemetry::HistoryBytesError> {
        let bytes = telemetry::check_history_bytes(bytes)?;
        self.lock().history.set_capacity(bytes);
        Ok(())
    }

    /// Bound the journal of adopted slices' records (`serve-nvme
    /// --trace-journal`; default [`journal::DEFAULT_JOURNAL_BYTES`]); the
    /// oldest go, counted, if it holds more.
    pub fn set_journal_bytes(&self, bytes: usize) -> Result<(), journal::JournalBytesError> {
        let bytes = journal::check_journal_bytes(bytes)?;
        self.lock().entries.set_capacity(bytes);
        Ok(())
    }

    pub fn journal(&self) -> Journal {
        let st = self.lock();
        let (evicted, evicted_dropped) = st.entries.evicted();
        Journal {
            entries: st.entries.entries(),
            evicted,
            evicted_dropped,
            unadopted: st.unadopted.entries().into(),
            ..st.journal.clone()
        }
    }

    /// Without copying the journal: records produced into adopted slices
    /// since the start (kept or evicted), of them drops, and evicted.
    pub fn journal_counts(&self) -> JournalCounts {
        let st = self.lock();
        let (produced, dropped) = st.entries.totals();
        JournalCounts {
            written: produced - dropped,
            dropped,
            evicted: st.entries.evicted().0,
            epochs: st.journal.epochs.clone(),
            frozen: st.journal.frozen.clone(),
            withdrawn: st.journal.withdrawn.clone(),
        }
    }

    /// The generation being produced into, if any.
    pub fn adopted_generation(&self) -> Option<u64> {
        self.lock().adopted.as_ref().map(|a| a.advert.generation.get())
    }

    /// The transport took guest memory `address..address + size` away from
    /// the device (vfio-user DMA_UNMAP; `0, u64::MAX` for UNMAP_ALL). The
    /// slice view maps the guest-RAM file itself, so without this the
    /// producer would go on reading `tail` and writing records into memory
    /// the device no longer has (where the controller's own HMB accesses
    /// already fail). If any piece of the adopted slice is in the range, the
    /// advert is withdrawn at once, under the producer's lock (no record is
    /// half-written and none follows): Get Features C0h reports none, later
    /// records go to the controller's own history only, and no FROZEN is
    /// written. Returns the generation withdrawn.
    pub fn dma_unmapped(&self, address: u64, size: u64) -> Option<u64> {
        let mut st = self.lock();
        if !st.adopted.as_ref()?.view.overlaps(address, size) {
            return None;
        }
        let a = st.adopted.take()?;
        let generation = a.advert.generation.get();
        st.journal.withdrawn.push(generation);
        log::error!(
            "trace slice of generation {generation} withdrawn: guest memory {address:#x}+{size:#x} was unmapped \
             from the device under it; no more records go to the ring and FROZEN is not written"
        );
        Some(generation)
    }

    /// The adopted slice as the controller maps it, for the control
    /// socket's hostile-firmware faults (emu-device's `faults.rs` writes
    /// the header the way a buggy controller would). `f` runs under the
    /// producer's lock, so no record is half-written meanwhile; with
    /// `then_stop` the controller produces no more into this slice (after
    /// a hostile record: the consumer must stop at it) until the next
    /// advert. None when no slice is adopted.
    pub fn with_adopted_ring<R>(&self, then_stop: bool, f: impl FnOnce(AdoptedRing) -> R) -> Option<R> {
        let mut st = self.lock();
        let a = st.adopted.as_ref()?;
        let ring = AdoptedRing {
            base: std::ptr::NonNull::new(a.view.as_ptr())?,
            len: a.view.len(),
            generation: a.advert.generation.get(),
        };
        let out = f(ring);
        if then_stop {
            st.adopted = None;
        }
        Some(out)
    }
}

/// [`NvmeTrace::journal_counts`]: what `status` reports of the journal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JournalCounts {
    pub written: u64,
    pub dropped: u64,
    pub evicted: u64,
    pub epochs: Vec<u64>,
    pub frozen: Vec<u64>,
    pub withdrawn: Vec<u64>,
}

/// The adopted slice's mapping (ring header at offset 0), valid only inside
/// [`NvmeTrace::with_adopted_ring`]'s closure.
#[derive(Debug, Clone, Copy)]
pub struct AdoptedRing {
    pub base: std::ptr::NonNull<u8>,
    pub len: usize,
    pub generation: u64,
}

/// Why an advert is refused (answered Invalid Field in Command).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdvertError {
    #[error("data is {0} bytes, not one struct hmb_advert")]
    Length(usize),
    #[error("bad advert magic {0:#x}")]
    Magic(u32),
    #[error("unknown advert state {0}")]
    State(u32),
    #[error("slice {offset:#x}+{len:#x} is not a 4 KiB aligned range inside the {hmb_len:#x}-byte HMB")]
    Placement { offset: u64, len: u64, hmb_len: u64 },
    #[error("generation {0} is not above {1}, the last one adopted")]
    Generation(u64, u64),
    #[error("ring header does not match the advert: {0}")]
    Header(&'static str),
    #[error("cannot map the slice: {0}")]
    Map(String),
}

impl State {
    /// Check and adopt an advert (state READY), or withdraw (state NONE).
    fn take_advert(&mut self, data: &[u8], hmb: &HostMemoryBuffer) -> Result<u32, AdvertError> {
        let advert = hmb_advert::read_from_bytes(data).map_err(|_| AdvertError::Length(data.len()))?;
        if advert.magic.get() != HMB_ADVERT_MAGIC {
            return Err(AdvertError::Magic(advert.magic.get()));
        }
        match advert.state.get() {
            HMB_ADVERT_STATE_NONE => {
                self.adopted = None;
                return Ok(0);
            }
            HMB_ADVERT_STATE_READY => {}
            other => return Err(AdvertError::State(other)),
        }
        let (offset, len, generation) = (
            advert.slice_offset.get(),
            advert.slice_len.get(),
            advert.generation.get(),
        );
        let hmb_len = hmb.len();
        let ring_size = len.saturating_sub(u64::from(HMB_RING_HDR_SIZE));
        if offset % 4096 != 0
            || len % 4096 != 0
            || !ring_size.is_power_of_two()
            || ring_size < u64::from(HMB_RING_MIN_SIZE)
            || ring_size > HMB_RING_MAX_SIZE
            || offset.checked_add(len).is_none_or(|end| end > hmb_len)
        {
            return Err(AdvertError::Placement { offset, len, hmb_len });
        }
        if generation <= self.last_generation {
            return Err(AdvertError::Generation(generation, self.last_generation));
        }
        let mut hdr = hmb_ring_hdr::new_zeroed();
        hmb.read_at(offset, hdr.as_mut_bytes())
            .map_err(|_| AdvertError::Header("unreadable"))?;
        if hdr.magic.get() != HMB_RING_MAGIC {
            return Err(AdvertError::Header("magic"));
        }
        if hdr.ring_size.get() != ring_size {
            return Err(AdvertError::Header("ring_size differs from slice_len - 4096"));
        }
        if hdr.epoch.get() != generation {
            return Err(AdvertError::Header("epoch differs from the generation"));
        }
        let pieces = hmb.pieces(offset, len).map_err(|e| AdvertError::Map(e.to_string()))?;
        let view = SliceView::map(&self.mem, &pieces).map_err(|e| AdvertError::Map(e.to_string()))?;
        // SAFETY: the view stays mapped as long as the producer (both live in
        // `Adopted`, the producer dropped first).
        let producer = unsafe { RingProducer::attach(self.kind, view.as_ptr(), view.len(), generation) }
            .map_err(AdvertError::Map)?;
        self.adopted = Some(Adopted { advert, producer, view });
        self.last_generation = generation;
        self.journal.epochs.push(generation);
        log::info!(
            "trace slice adopted: generation {generation}, HMB offset {offset:#x}, {len} bytes in {} pieces",
            pieces.len()
        );
        Ok(generation as u32)
    }

    fn produce(&mut self, opcode: u16, source: u32, timestamp_ns: u64, payload: &[u8]) {
        let Some(a) = self.adopted.as_mut() else {
            // No ring: the record is kept for Telemetry only. A stock host
            // never adopts, so this runs for every record of every command
            // (258 per 512 KiB write). Both lists are byte arenas reused in
            // place once full: no allocation, and each record's bytes go
            // next to the last one's. Per-record entries with heap buffers
            // cost cold cache lines (and, before the sixth round, frees) on
            // every record: about a quarter of the controller's CPU in a
            // 1 MiB write (docs/nvme-controller.md, "Tenth round").
            let mut seq = 0;
            self.history.unadopted(|s, bytes| {
                seq = s;
                record_bytes_into(bytes, opcode, s, timestamp_ns, source, payload);
            });
            self.unadopted.push(journal::Entry {
                epoch: telemetry::UNADOPTED_EPOCH,
                seq,
                opcode,
                source,
                timestamp_ns,
                payload,
                written: true,
            });
            return;
        };
        let epoch = a.advert.generation.get();
        let (seq, written) = match a.producer.produce(opcode, source, timestamp_ns, payload) {
            Produced::Written { seq } => (seq, true),
            Produced::Dropped { seq } => (seq, false),
            Produced::Frozen => return,
        };
        // Neither the journal nor the history allocates per record once warm:
        // the journal packs it into its arena, the history reuses the buffer
        // of the record it trimmed.
        if written {
            self.history.written(epoch, a.producer.ring_size(), seq, |bytes| {
                record_bytes_into(bytes, opcode, seq, timestamp_ns, source, payload)
            });
        } else {
            self.history.dropped(epoch, seq);
        }
        self.entries.push(journal::Entry {
            epoch,
            seq,
            opcode,
            source,
            timestamp_ns,
            payload,
            written,
        });
    }

    /// The last HMB write of this epoch, then the advert is forgotten.
    fn freeze(&mut self) {
        if let Some(mut a) = self.adopted.take() {
            a.producer.freeze();
            self.history.frozen(a.advert.generation.get(), a.producer.next_seq());
            self.journal.frozen.push(a.advert.generation.get());
            log::info!("trace epoch {} frozen", a.advert.generation.get());
        }
    }
}

/// Set/Get Features C0h: the trace slice advert.
pub struct TraceFeatures {
    trace: NvmeTrace,
    refusal: Refusal,
}

impl VendorFeatures for TraceFeatures {
    fn identify_vendor_specific(&self, area: &mut [u8; 1024]) {
        // The vendor-specific area starts at Identify byte 3072, which is
        // where decision 9 puts the declaration: offset 0 of `area`.
        const AT: usize = HMB_NVME_ID_VS_OFFSET as usize - 3072;
        let id = trace_declaration();
        area[AT..AT + id.as_bytes().len()].copy_from_slice(id.as_bytes());
    }

    fn has_telemetry(&self) -> bool {
        true
    }

    /// The history as a trace.bin stream; the reason names the ring's state.
    fn telemetry(&mut self) -> TelemetryData {
        let st = self.trace.lock();
        let (data, records) = st.history.snapshot();
        let mut reason = TelemetryReason {
            epoch: telemetry::UNADOPTED_EPOCH,
            records,
            stream_bytes: data.len() as u64,
            ..Default::default()
        };
        if let Some(a) = &st.adopted {
            let p = &a.producer;
            reason.epoch = p.epoch();
            reason.head = p.head();
            reason.tail = a.view.load_u64(hmb_trace_abi::offsets::TAIL).unwrap_or(0);
            reason.dropped = p.dropped_records();
        }
        TelemetryData {
            data,
            reason: reason.encode(),
        }
    }

    fn set_data_len(&self, fid: u8, _cdw11: u32) -> usize {
        if fid == HMB_NVME_FID_TRACE {
            ADVERT_LEN
        } else {
            0
        }
    }

    fn set(&mut self, fid: u8, _cdw11: u32, data: &[u8], hmb: Option<&HostMemoryBuffer>) -> Result<u32, Status> {
        if fid != HMB_NVME_FID_TRACE {
            return Err(Status::INVALID_FIELD);
        }
        let Some(hmb) = hmb else {
            return Err(Status::COMMAND_SEQUENCE_ERROR);
        };
        let mut st = self.trace.lock();
        let ready = hmb_advert::read_from_bytes(data).is_ok_and(|a| a.state.get() == HMB_ADVERT_STATE_READY);
        let refuse = match self.refusal {
            Refusal::Never => false,
            Refusal::Always => true,
            // The last generation is reset only by an HMB enabled without MR.
            Refusal::AfterFirst => st.last_generation != 0,
        };
        if ready && refuse {
            log::warn!(
                "trace advert refused: this controller's personality refuses it ({:?})",
                self.refusal
            );
            return Err(Status::INVALID_FIELD);
        }
        st.take_advert(data, hmb).map_err(|e| {
            log::warn!("trace advert refused: {e}");
            Status::INVALID_FIELD
        })
    }

    fn advert_fid(&self) -> Option<u8> {
        Some(HMB_NVME_FID_TRACE)
    }

    fn shared_slice(&self) -> Option<(u64, u64)> {
        let st = self.trace.lock();
        st.adopted
            .as_ref()
            .map(|a| (a.advert.slice_offset.get(), a.advert.slice_len.get()))
    }

    fn get(&mut self, fid: u8, _cdw11: u32) -> Result<(u32, Vec<u8>), Status> {
        if fid != HMB_NVME_FID_TRACE {
            return Err(Status::INVALID_FIELD);
        }
        let st = self.trace.lock();
        Ok(match &st.adopted {
            Some(a) => (a.advert.generation.get() as u32, a.advert.as_bytes().to_vec()),
            None => (0, vec![0u8; ADVERT_LEN]),
        })
    }
}

/// Records of what the controller really does, and FROZEN when the HMB goes.
pub struct TraceObserver {
    trace: NvmeTrace,
}

/// CMD_FETCH payload (firmware-model catalog): qid, cid, opcode, nsid, nlb, slba.
pub fn fetch_payload(f: &FetchEvent) -> [u8; 24] {
    let mut p = [0u8; 24];
    p[0..2].copy_from_slice(&f.qid.to_le_bytes());
    p[2..4].copy_from_slice(&f.cid.to_le_bytes());
    p[4] = f.opcode;
    p[8..12].copy_from_slice(&f.nsid.to_le_bytes());
    p[12..16].copy_from_slice(&f.nlb.to_le_bytes());
    p[16..24].copy_from_slice(&f.slba.to_le_bytes());
    p
}

/// CMD_COMPLETE payload: qid, cid, status, latency (ns, saturated to u32).
pub fn complete_payload(c: &CompletionEvent) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[0..2].copy_from_slice(&c.qid.to_le_bytes());
    p[2..4].copy_from_slice(&c.cid.to_le_bytes());
    p[4..6].copy_from_slice(&c.status.to_le_bytes());
    p[8..12].copy_from_slice(&u32::try_from(c.latency_ns).unwrap_or(u32::MAX).to_le_bytes());
    p
}

impl CommandObserver for TraceObserver {
    fn on_fetch(&mut self, f: &FetchEvent) {
        self.trace
            .lock()
            .produce(OP_CMD_FETCH, u32::from(f.qid), f.time_ns, &fetch_payload(f));
    }

    fn on_complete(&mut self, c: &CompletionEvent) {
        self.trace
            .lock()
            .produce(OP_CMD_COMPLETE, u32::from(c.qid), c.time_ns, &complete_payload(c));
    }

    fn on_ftl(&mut self, e: &FtlTraceEvent) {
        let (opcode, source, ts, payload) = ftl::ftl_record(e);
        self.trace.lock().produce(opcode, source, ts, &payload);
    }

    fn on_hmb_enabled(&mut self, hmb: &HostMemoryBuffer) {
        let mut st = self.trace.lock();
        // A new buffer (no Memory Return): generations start over.
        if !hmb.returned() {
            st.last_generation = 0;
        }
        st.adopted = None;
    }

    fn on_hmb_disabling(&mut self, _hmb: &HostMemoryBuffer) {
        self.trace.lock().freeze();
    }
}
