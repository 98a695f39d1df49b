//! Deterministic workloads. Each record is a pure function of
//! `(seed, workload, seq)`: [`fill_record`] writes it into a caller buffer
//! (no allocation, used by the engine) and [`expected_record`] returns it
//! for tests and ground-truth checks.

use crate::catalog::*;
use crate::error::ModelError;
use crate::rng::SplitMix64;
use hmb_trace_abi::HMB_RECORD_MAX_PAYLOAD;

/// Payload length distribution of the `sizes` workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeDist {
    /// Always `n` bytes.
    Fixed(u32),
    /// Uniform in `min..=max`.
    Uniform { min: u32, max: u32 },
    /// Uniform exponent then uniform mantissa in `0..=4064`: as many tiny
    /// records as large ones, every wrap case gets hit.
    LogUniform,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Every record drawn independently (kept byte for byte: conformance
    /// ground truth and snapshots depend on it).
    Ssd,
    /// `ssd:causal`: a discrete-event SSD model (crate::ssd_sim) whose
    /// fetches, NAND operations, completions and GC pair up, timestamped
    /// with its simulated time.
    SsdCausal,
    Npu,
    Sizes(SizeDist),
}

impl Workload {
    /// `ssd`, `npu`, `sizes` (log-uniform), `sizes:fixed=N`,
    /// `sizes:uniform=A-B`.
    pub fn parse(s: &str) -> Result<Self, ModelError> {
        let bad = || ModelError::UnknownWorkload(s.to_string());
        let max = HMB_RECORD_MAX_PAYLOAD;
        let num = |t: &str| t.trim().parse::<u32>().ok().filter(|&n| n <= max);
        match s {
            "ssd" => Ok(Self::Ssd),
            "ssd:causal" => Ok(Self::SsdCausal),
            "npu" => Ok(Self::Npu),
            "sizes" => Ok(Self::Sizes(SizeDist::LogUniform)),
            _ => {
                if let Some(n) = s.strip_prefix("sizes:fixed=") {
                    return num(n).map(|n| Self::Sizes(SizeDist::Fixed(n))).ok_or_else(bad);
                }
                if let Some(r) = s.strip_prefix("sizes:uniform=") {
                    let (a, b) = r.split_once('-').ok_or_else(bad)?;
                    let (min, max) = (num(a).ok_or_else(bad)?, num(b).ok_or_else(bad)?);
                    if min > max {
                        return Err(bad());
                    }
                    return Ok(Self::Sizes(SizeDist::Uniform { min, max }));
                }
                Err(bad())
            }
        }
    }

    pub fn name(&self) -> String {
        match self {
            Self::Ssd => "ssd".into(),
            Self::SsdCausal => "ssd:causal".into(),
            Self::Npu => "npu".into(),
            Self::Sizes(SizeDist::LogUniform) => "sizes".into(),
            Self::Sizes(SizeDist::Fixed(n)) => format!("sizes:fixed={n}"),
            Self::Sizes(SizeDist::Uniform { min, max }) => format!("sizes:uniform={min}-{max}"),
        }
    }
}

/// What the model emits for one sequence number (timestamp aside, which
/// comes from the clock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedRecord {
    pub opcode: u16,
    pub source: u32,
    pub payload: Vec<u8>,
}

/// The shape [`fill_record`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordShape {
    pub opcode: u16,
    pub source: u32,
    pub len: usize,
    /// The record's timestamp in ns since the workload started, for
    /// workloads that simulate time (`ssd:causal`); others take the clock's.
    pub sim_ns: Option<u64>,
}

/// Ground truth: the record the model emits as sequence number `seq`.
pub fn expected_record(seed: u64, workload: Workload, seq: u64) -> ExpectedRecord {
    let mut buf = [0u8; HMB_RECORD_MAX_PAYLOAD as usize];
    let shape = fill_record(seed, workload, seq, &mut buf);
    ExpectedRecord {
        opcode: shape.opcode,
        source: shape.source,
        payload: buf[..shape.len].to_vec(),
    }
}

/// Write record `seq`'s payload into `buf` and return its shape.
pub fn fill_record(
    seed: u64,
    workload: Workload,
    seq: u64,
    buf: &mut [u8; HMB_RECORD_MAX_PAYLOAD as usize],
) -> RecordShape {
    let mut rng = SplitMix64::for_record(seed, seq);
    match workload {
        Workload::Ssd => ssd(&mut rng, buf),
        Workload::SsdCausal => {
            let (opcode, source, len, t) = crate::ssd_sim::fill(seed, seq, buf);
            RecordShape {
                opcode,
                source,
                len,
                sim_ns: Some(t),
            }
        }
        Workload::Npu => npu(&mut rng, seq, buf),
        Workload::Sizes(dist) => sizes(&mut rng, dist, buf),
    }
}

/// Little-endian field writer over a zeroed payload.
struct Payload<'a> {
    buf: &'a mut [u8],
}

impl Payload<'_> {
    fn new(buf: &mut [u8], len: usize) -> Payload<'_> {
        buf[..len].fill(0);
        Payload { buf: &mut buf[..len] }
    }
    fn u8(&mut self, off: usize, v: u8) -> &mut Self {
        self.buf[off] = v;
        self
    }
    fn u16(&mut self, off: usize, v: u16) -> &mut Self {
        self.buf[off..off + 2].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.buf[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.buf[off..off + 8].copy_from_slice(&v.to_le_bytes());
        self
    }
}

const QUEUES: u64 = 8;
const CHANNELS: u64 = 8;
const DIES: u64 = 4;
const BLOCKS: u64 = 4096;
const PAGES: u64 = 256;

fn shape(opcode: u16, source: u32, len: usize) -> RecordShape {
    RecordShape {
        opcode,
        source,
        len,
        sim_ns: None,
    }
}

fn ssd(rng: &mut SplitMix64, buf: &mut [u8]) -> RecordShape {
    // Weights out of 100, roughly a read-heavy host load with background FTL work.
    let pick = rng.below(100);
    let r = rng;
    match pick {
        0..=24 => {
            let qid = r.below(QUEUES) as u16;
            Payload::new(buf, 24)
                .u16(0, qid)
                .u16(2, r.below(1024) as u16)
                .u8(4, [0x01u8, 0x02, 0x00][r.below(3) as usize]) // write, read, flush
                .u32(8, 1)
                .u32(12, r.range(0, 255) as u32)
                .u64(16, r.below(1 << 32));
            shape(OP_CMD_FETCH, qid as u32, 24)
        }
        25..=49 => {
            let qid = r.below(QUEUES) as u16;
            let status = if r.below(1000) == 0 { 0x0281 } else { 0 }; // rare media error
            Payload::new(buf, 16)
                .u16(0, qid)
                .u16(2, r.below(1024) as u16)
                .u16(4, status)
                .u32(8, r.range(5_000, 900_000) as u32);
            shape(OP_CMD_COMPLETE, qid as u32, 16)
        }
        50..=64 => {
            Payload::new(buf, 16)
                .u64(0, r.below(1 << 32))
                .u64(8, r.next_u64() >> 24);
            shape(OP_FTL_MAP_HIT, 0, 16)
        }
        65..=69 => {
            Payload::new(buf, 24)
                .u64(0, r.below(1 << 32))
                .u64(8, r.next_u64() >> 24)
                .u32(16, r.range(40_000, 90_000) as u32);
            shape(OP_FTL_MAP_MISS, 0, 24)
        }
        70..=92 => {
            let (ch, die) = (r.below(CHANNELS), r.below(DIES));
            let (op, lat) = if pick <= 84 {
                (OP_NAND_READ, r.range(45_000, 80_000))
            } else {
                (OP_NAND_PROGRAM, r.range(400_000, 1_200_000))
            };
            Payload::new(buf, 16)
                .u8(0, ch as u8)
                .u8(1, die as u8)
                .u8(2, r.below(2) as u8)
                .u32(4, r.below(BLOCKS) as u32)
                .u32(8, r.below(PAGES) as u32)
                .u32(12, lat as u32);
            shape(op, (ch << 8 | die) as u32, 16)
        }
        93..=94 => {
            let (ch, die) = (r.below(CHANNELS), r.below(DIES));
            Payload::new(buf, 16)
                .u8(0, ch as u8)
                .u8(1, die as u8)
                .u8(2, r.below(2) as u8)
                .u32(4, r.below(BLOCKS) as u32)
                .u32(8, r.range(1, 3000) as u32)
                .u32(12, r.range(2_000_000, 5_000_000) as u32);
            shape(OP_NAND_ERASE, (ch << 8 | die) as u32, 16)
        }
        95..=96 => {
            Payload::new(buf, 16)
                .u32(0, r.below(BLOCKS) as u32)
                .u32(4, r.below(PAGES) as u32)
                .u32(8, r.range(2, 64) as u32);
            shape(OP_GC_START, 0, 16)
        }
        97..=98 => {
            Payload::new(buf, 16)
                .u32(0, r.below(BLOCKS) as u32)
                .u32(4, r.below(PAGES) as u32)
                .u32(8, r.range(1_000_000, 50_000_000) as u32)
                .u32(12, r.range(2, 64) as u32);
            shape(OP_GC_END, 0, 16)
        }
        _ => {
            Payload::new(buf, 16)
                .u32(0, r.below(BLOCKS) as u32)
                .u32(4, r.below(BLOCKS) as u32)
                .u32(8, r.range(2000, 3000) as u32)
                .u32(12, r.range(1, 500) as u32);
            shape(OP_WEAR_LEVEL, 0, 16)
        }
    }
}

/// NPU cores; record `seq` belongs to core `seq % NPU_CORES`, and its
/// start cycle grows with `seq`, so each core's events are in time order.
pub const NPU_CORES: u64 = 4;
/// Cycles between consecutive records of one core (start-cycle stride).
pub const NPU_CYCLE_STRIDE: u64 = 4096;

fn npu(rng: &mut SplitMix64, seq: u64, buf: &mut [u8]) -> RecordShape {
    let core = seq % NPU_CORES;
    // pccx event type ids: 1 MAC_COMPUTE, 2 DMA_READ, 3 DMA_WRITE, 4 SYSTOLIC_STALL, 5 BARRIER_SYNC.
    let pick = rng.below(100);
    let (event_type, duration) = match pick {
        0..=49 => (1u32, rng.range(256, 3000)),
        50..=69 => (2, rng.range(100, 2000)),
        70..=84 => (3, rng.range(100, 2000)),
        85..=94 => (4, rng.range(10, 500)),
        _ => (5, rng.range(50, 800)),
    };
    let start = (seq / NPU_CORES) * NPU_CYCLE_STRIDE + rng.below(NPU_CYCLE_STRIDE - 3000);
    Payload::new(buf, 24)
        .u32(0, core as u32)
        .u64(4, start)
        .u64(12, duration)
        .u32(20, event_type);
    shape(OP_NPU_BASE + event_type as u16, core as u32, 24)
}

fn sizes(rng: &mut SplitMix64, dist: SizeDist, buf: &mut [u8]) -> RecordShape {
    let max = HMB_RECORD_MAX_PAYLOAD as u64;
    let len = match dist {
        SizeDist::Fixed(n) => n as u64,
        SizeDist::Uniform { min, max } => rng.range(min as u64, max as u64),
        SizeDist::LogUniform => {
            let bits = rng.below(13); // 2^12 = 4096 > 4064
            rng.below(1 << bits).min(max)
        }
    }
    .min(max) as usize;
    rng.fill(&mut buf[..len]);
    shape(OP_SIZES_FILL, 0, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips_names() {
        for s in [
            "ssd",
            "ssd:causal",
            "npu",
            "sizes",
            "sizes:fixed=64",
            "sizes:uniform=0-4064",
        ] {
            assert_eq!(Workload::parse(s).unwrap().name(), s);
        }
        for s in ["", "hdd", "sizes:fixed=4065", "sizes:uniform=9-3", "sizes:uniform=1"] {
            assert!(Workload::parse(s).is_err(), "{s}");
        }
    }

    #[test]
    fn npu_records_carry_core_cycles_duration_and_pccx_type() {
        for seq in 0..2000u64 {
            let r = expected_record(5, Workload::Npu, seq);
            assert_eq!(r.payload.len(), 24);
            let core = u32::from_le_bytes(r.payload[0..4].try_into().unwrap());
            let start = u64::from_le_bytes(r.payload[4..12].try_into().unwrap());
            let ty = u32::from_le_bytes(r.payload[20..24].try_into().unwrap());
            assert_eq!(core as u64, seq % NPU_CORES);
            assert_eq!(r.source, core);
            assert!((1..=5).contains(&ty));
            assert_eq!(r.opcode, OP_NPU_BASE + ty as u16);
            assert!(start >= (seq / NPU_CORES) * NPU_CYCLE_STRIDE && start < (seq / NPU_CORES + 1) * NPU_CYCLE_STRIDE);
        }
    }

    #[test]
    fn every_ssd_opcode_appears_and_matches_the_catalog() {
        let mut seen = std::collections::BTreeSet::new();
        for seq in 0..5000 {
            let r = expected_record(1, Workload::Ssd, seq);
            let info = opcode_info(r.opcode).expect("catalogued");
            assert_eq!(info.workload, "ssd");
            assert_eq!(info.payload_len, Some(r.payload.len() as u16));
            seen.insert(r.opcode);
        }
        assert_eq!(seen.len(), OPCODES.iter().filter(|o| o.workload == "ssd").count());
    }

    #[test]
    fn sizes_cover_the_whole_range() {
        let lens: Vec<usize> = (0..20_000)
            .map(|s| expected_record(3, Workload::parse("sizes").unwrap(), s).payload.len())
            .collect();
        assert!(lens.contains(&0));
        assert!(lens.iter().any(|&l| l > 3000));
        assert!(lens.iter().all(|&l| l <= 4064));
        let fixed = expected_record(3, Workload::parse("sizes:fixed=4064").unwrap(), 9);
        assert_eq!(fixed.payload.len(), 4064);
    }
}
