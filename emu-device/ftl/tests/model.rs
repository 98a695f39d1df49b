//! The FTL against a plain model of the namespace (a byte vector) through writes,
//! deallocations, reads, flushes, clean and unclean power cycles, with GC and wear
//! levelling running underneath: every read equals the model, and the FTL's invariants
//! (valid-page counts, no line both free and in use, mapping consistency, wear spread)
//! hold after every step.

use std::sync::{Arc, Mutex};

use hmb_ftl::{CacheSnapshot, CorruptionFound, Ftl, FtlConfig, FtlEvent, Medium, MemMedium, NandOpKind, SlotStore};
use proptest::prelude::*;

/// Slots in memory the test can write behind the FTL's back, as a host can write its HMB.
#[derive(Clone)]
struct SharedSlots(Arc<Mutex<Vec<u8>>>);

const SLOTS: u32 = 2;

impl SharedSlots {
    fn new() -> Self {
        SharedSlots(Arc::new(Mutex::new(vec![0; SLOTS as usize * PAGE as usize])))
    }
    fn poke(&self, at: usize, xor: u8) {
        self.0.lock().unwrap()[at] ^= xor;
    }
}

impl SlotStore for SharedSlots {
    fn slots(&self) -> u32 {
        SLOTS
    }
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> std::io::Result<()> {
        let s = (slot as usize * PAGE as usize) + at;
        buf.copy_from_slice(&self.0.lock().unwrap()[s..s + buf.len()]);
        Ok(())
    }
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> std::io::Result<()> {
        let s = (slot as usize * PAGE as usize) + at;
        self.0.lock().unwrap()[s..s + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn offset(&self, slot: u32) -> u64 {
        0x10_0000 + u64::from(slot) * PAGE
    }
}

const PAGE: u64 = 4096;
/// 1.5 map pages of entries, so the one-slot cache misses and writes back.
const LOGICAL: u64 = 1536 * PAGE;

fn cfg() -> FtlConfig {
    FtlConfig {
        channels: 2,
        dies_per_channel: 2,
        pages_per_block: 16,
        map_cache_pages: 1,
        wl_threshold: 4,
        ..Default::default()
    }
}

fn open(medium: Box<dyn Medium>) -> Ftl {
    Ftl::open(&cfg(), LOGICAL, medium).expect("open").0
}

fn fresh() -> Ftl {
    let bytes = Ftl::region_bytes(&cfg(), LOGICAL).unwrap();
    open(Box::new(MemMedium::new(bytes).unwrap()))
}

#[derive(Clone, Debug)]
enum Op {
    /// Write `len` bytes at byte `off` (512-byte aligned like LBAs) of a pattern.
    Write {
        off: u64,
        len: u64,
        seed: u8,
    },
    /// A long sequential overwrite: forces GC.
    Fill {
        first_page: u64,
        pages: u64,
        seed: u8,
    },
    Deallocate {
        off: u64,
        len: u64,
    },
    Read {
        off: u64,
        len: u64,
    },
    Flush,
    PowerCycle {
        clean: bool,
    },
    /// The map cache moves into the shared slots (taking over what it left there when
    /// `returned`), or back to its internal ones.
    Attach {
        returned: bool,
    },
    Detach,
    /// A host write into the shared slots: byte `at` changed.
    Corrupt {
        at: usize,
        xor: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let sector = LOGICAL / 512;
    prop_oneof![
        6 => (0..sector, 1u64..=64, any::<u8>()).prop_map(move |(s, n, seed)| {
            let n = n.min(sector - s);
            Op::Write { off: s * 512, len: n * 512, seed }
        }),
        2 => (0..LOGICAL / PAGE, 64u64..=768, any::<u8>()).prop_map(|(p, n, seed)| {
            Op::Fill { first_page: p, pages: n.min(LOGICAL / PAGE - p), seed }
        }),
        2 => (0..sector, 1u64..=256).prop_map(move |(s, n)| {
            let n = n.min(sector - s);
            Op::Deallocate { off: s * 512, len: n * 512 }
        }),
        2 => (0..sector, 1u64..=64).prop_map(move |(s, n)| {
            let n = n.min(sector - s);
            Op::Read { off: s * 512, len: n * 512 }
        }),
        1 => Just(Op::Flush),
        1 => any::<bool>().prop_map(|clean| Op::PowerCycle { clean }),
        1 => any::<bool>().prop_map(|returned| Op::Attach { returned }),
        1 => Just(Op::Detach),
        2 => (0..(SLOTS * PAGE as u32) as usize, 1u8..=255).prop_map(|(at, xor)| Op::Corrupt { at, xor }),
    ]
}

fn pattern(len: u64, seed: u8, at: u64) -> Vec<u8> {
    (0..len)
        .map(|i| ((at + i) as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

fn read_all_equals(ftl: &mut Ftl, model: &[u8]) -> Result<(), TestCaseError> {
    let mut ev = Vec::new();
    let mut back = vec![0u8; model.len()];
    ftl.read(0, &mut back, 0, &mut ev).unwrap();
    if let Some(i) = back.iter().zip(model).position(|(a, b)| a != b) {
        return Err(TestCaseError::fail(format!(
            "byte {i} differs (page {})",
            i as u64 / PAGE
        )));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn the_ftl_reads_back_what_the_model_holds(ops in prop::collection::vec(op(), 1..60)) {
        let mut ftl = fresh();
        let mut model = vec![0u8; LOGICAL as usize];
        let mut ev = Vec::new();
        let mut now = 0u64;
        let slots = SharedSlots::new();
        let mut attached = false;
        let mut snapshot: Option<CacheSnapshot> = None;
        let mut corrupted = 0u64;
        let mut found = 0u64;
        for op in ops {
            now += 1000;
            ev.clear();
            match op {
                Op::Write { off, len, seed } => {
                    let data = pattern(len, seed, off);
                    ftl.write(off, &data, now, &mut ev).unwrap();
                    model[off as usize..(off + len) as usize].copy_from_slice(&data);
                }
                Op::Fill { first_page, pages, seed } => {
                    let (off, len) = (first_page * PAGE, pages * PAGE);
                    let data = pattern(len, seed, off);
                    ftl.write(off, &data, now, &mut ev).unwrap();
                    model[off as usize..(off + len) as usize].copy_from_slice(&data);
                }
                Op::Deallocate { off, len } => {
                    ftl.deallocate(off, len, now, &mut ev).unwrap();
                    model[off as usize..(off + len) as usize].fill(0);
                }
                Op::Read { off, len } => {
                    let mut back = vec![0u8; len as usize];
                    let end = ftl.read(off, &mut back, now, &mut ev).unwrap();
                    prop_assert!(end >= now);
                    prop_assert_eq!(&back[..], &model[off as usize..(off + len) as usize]);
                }
                Op::Flush => {
                    ftl.flush(now, &mut ev).unwrap();
                }
                Op::PowerCycle { clean } => {
                    if clean {
                        ftl.flush(now, &mut ev).unwrap();
                    }
                    found += ftl.stats().cache_corruptions;
                    ftl = open(ftl.into_medium());
                    attached = false;
                    snapshot = None;
                    read_all_equals(&mut ftl, &model)?;
                }
                Op::Attach { returned } => {
                    if !attached {
                        let snap = if returned { snapshot.as_ref() } else { None };
                        ftl.attach_cache(Box::new(slots.clone()), snap, now, &mut ev).unwrap();
                        attached = true;
                    }
                }
                Op::Detach => {
                    if attached {
                        snapshot = Some(ftl.detach_cache(now, &mut ev).unwrap());
                        attached = false;
                    }
                }
                Op::Corrupt { at, xor } => {
                    slots.poke(at, xor);
                    corrupted += 1;
                }
            }
            // NAND operations never start before their request, and never overlap on a die.
            for e in &ev {
                if let FtlEvent::Nand(op) = e {
                    prop_assert!(op.start_ns >= now);
                }
            }
            if let Err(e) = ftl.check_invariants() {
                return Err(TestCaseError::fail(e));
            }
        }
        read_all_equals(&mut ftl, &model)?;
        found += ftl.stats().cache_corruptions;
        // Every change found is a change made (a change to a slot nothing uses again, or
        // one a later change undid, may go unseen).
        prop_assert!(found <= corrupted, "{found} found, {corrupted} made");
        ftl = open(ftl.into_medium());
        read_all_equals(&mut ftl, &model)?;
        if let Err(e) = ftl.check_invariants() {
            return Err(TestCaseError::fail(e));
        }
    }
}

/// A host write into a clean and into a dirty cached map page: each is found at its next
/// use, counted once, and the data stays right (the dirty one rebuilt from NAND); one
/// made while the cache was away is found when it comes back with memory return.
#[test]
fn host_writes_into_the_cache_are_found_and_lose_nothing() {
    let mut ftl = fresh();
    let slots = SharedSlots::new();
    let mut ev = Vec::new();
    ftl.attach_cache(Box::new(slots.clone()), None, 0, &mut ev).unwrap();
    let data = pattern(8 * PAGE, 3, 0);
    ftl.write(0, &data, 0, &mut ev).unwrap();
    ftl.flush(0, &mut ev).unwrap(); // slot 0 (map page 0) clean
    let more = pattern(2 * PAGE, 9, 0);
    ftl.write(1100 * PAGE, &more, 0, &mut ev).unwrap(); // slot 1 (map page 1) dirty
    let s = ftl.stats();
    assert_eq!((s.cache_hits, s.cache_misses, s.cache_in_hmb), (s.cache_hits, 2, true));
    // The host changes entry 3 of map page 0 and entry 76 of map page 1.
    slots.poke(3 * 4, 0x40);
    slots.poke(PAGE as usize + 76 * 4 + 1, 0x01);
    ev.clear();
    let mut back = vec![0u8; data.len()];
    ftl.read(0, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, data);
    let mut back = vec![0u8; more.len()];
    ftl.read(1100 * PAGE, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, more);
    let found: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            FtlEvent::MapCacheCorrupt {
                map_page, offset, when, ..
            } => Some((*map_page, *offset, *when)),
            _ => None,
        })
        .collect();
    assert_eq!(
        found,
        vec![
            (0, 0x10_0000, CorruptionFound::InUse),
            (1, 0x10_0000 + PAGE, CorruptionFound::InUse)
        ]
    );
    let s = ftl.stats();
    assert_eq!((s.cache_corruptions, s.map_page_rebuilds), (2, 1));
    ftl.check_invariants().unwrap();
    // Memory return: the cache leaves, the host writes slot 0 while it is away, the cache
    // comes back and takes slot 1 over unchanged, finds slot 0 changed.
    let snap = ftl.detach_cache(0, &mut ev).unwrap();
    assert_eq!(snap.len(), 2);
    slots.poke(100, 0xff);
    ev.clear();
    assert_eq!(
        ftl.attach_cache(Box::new(slots.clone()), Some(&snap), 0, &mut ev)
            .unwrap(),
        1
    );
    assert!(ev.iter().any(|e| matches!(
        e,
        FtlEvent::MapCacheCorrupt {
            map_page: 0,
            when: CorruptionFound::AtReturn,
            ..
        }
    )));
    let misses = ftl.stats().cache_misses;
    let mut back = vec![0u8; more.len()];
    ftl.read(1100 * PAGE, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, more);
    assert_eq!(ftl.stats().cache_misses, misses, "the slot taken over is a hit");
    let mut back = vec![0u8; data.len()];
    ftl.read(0, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, data);
    assert_eq!(
        ftl.stats().cache_misses,
        misses + 1,
        "the changed one is read from NAND"
    );
    assert_eq!(ftl.stats().cache_corruptions, 3);
    ftl = open(ftl.into_medium());
    let mut back = vec![0u8; more.len()];
    ftl.read(1100 * PAGE, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, more);
}

/// The internal cache of one slot over two map pages: every switch between them is a
/// miss, and a dirty page is written back before its slot is reused.
#[test]
fn a_small_internal_cache_misses_and_writes_back() {
    let mut ftl = fresh();
    let mut ev = Vec::new();
    let d = pattern(PAGE, 1, 0);
    for _ in 0..3 {
        ftl.write(0, &d, 0, &mut ev).unwrap(); // map page 0
        ftl.write(1200 * PAGE, &d, 0, &mut ev).unwrap(); // map page 1
    }
    let s = ftl.stats();
    assert_eq!((s.cache_misses, s.cache_hits), (6, 0));
    assert_eq!(
        s.map_page_writes, 5,
        "each eviction but the first wrote a dirty page back"
    );
    assert_eq!(s.map_page_reads, 4, "pages written back are read again");
    assert!(!s.cache_in_hmb);
}

/// The timing model seen through the FTL: a lookup whose map page is cached (a hit) ends
/// with the data read; one whose map page is on NAND only (a miss) first reads that page,
/// so it completes later by at least one NAND read.
#[test]
fn a_map_cache_miss_completes_later_than_a_hit() {
    let mut ftl = fresh();
    let mut ev = Vec::new();
    let d = pattern(PAGE, 1, 0);
    ftl.write(0, &d, 0, &mut ev).unwrap(); // map page 0
    ftl.write(1200 * PAGE, &d, 0, &mut ev).unwrap(); // map page 1 evicts page 0 (written back)
    ftl.flush(0, &mut ev).unwrap(); // page 1 clean: evicting it needs no program
                                    // Long after the writes: every die and channel idle again.
    let idle = 10_000_000_000;
    let mut buf = vec![0u8; PAGE as usize];
    let hit = ftl.read(1200 * PAGE, &mut buf, idle, &mut ev).unwrap() - idle;
    let miss = ftl.read(0, &mut buf, 2 * idle, &mut ev).unwrap() - 2 * idle;
    let c = cfg();
    let one_read = u64::from(c.read_ns + c.transfer_ns);
    assert_eq!(hit, one_read, "a hit in SRAM costs the data's NAND read only");
    assert_eq!(miss, 2 * one_read, "a miss reads the map page first");
    assert_eq!(buf, d);
}

/// Enough random overwrites to collect every line several times: GC runs, moves pages,
/// keeps the data, and write amplification is above 1 but bounded.
#[test]
fn random_overwrites_run_gc_and_level_wear() {
    let mut ftl = fresh();
    let mut model = vec![0u8; LOGICAL as usize];
    let mut ev = Vec::new();
    let pages = LOGICAL / PAGE;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    // Cold data: the first half written once and never again.
    let cold = pattern(LOGICAL / 2, 7, 0);
    ftl.write(0, &cold, 0, &mut ev).unwrap();
    model[..cold.len()].copy_from_slice(&cold);
    for n in 0..20 * pages {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let lpn = pages / 2 + x % (pages / 2);
        let data = pattern(PAGE, n as u8, lpn * PAGE);
        ftl.write(lpn * PAGE, &data, n * 10, &mut ev).unwrap();
        model[(lpn * PAGE) as usize..((lpn + 1) * PAGE) as usize].copy_from_slice(&data);
    }
    ftl.check_invariants().unwrap();
    read_all_equals(&mut ftl, &model).unwrap();
    let s = ftl.stats();
    assert!(s.gc_runs > 10, "{s:?}");
    assert!(s.gc_pages_moved > 0);
    assert!(s.wear_level_moves > 0, "the cold half must be moved: {s:?}");
    let wa = s.nand_programs as f64 / s.host_pages_written as f64;
    assert!(wa > 1.0 && wa < 20.0, "write amplification {wa}");
    assert!(s.max_erase_count - s.min_erase_count <= cfg().wl_threshold + 2, "{s:?}");
    let kinds: Vec<_> = ev
        .iter()
        .filter_map(|e| match e {
            FtlEvent::Nand(op) => Some(op.kind),
            _ => None,
        })
        .collect();
    assert!(kinds.contains(&NandOpKind::Erase));
    assert!(ev.iter().any(|e| matches!(e, FtlEvent::GcStart { .. })));
    assert!(ev.iter().any(|e| matches!(e, FtlEvent::WearLevelMove { .. })));
}

#[test]
fn a_file_region_survives_reopen_and_another_geometry_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nand.img");
    let file = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap()
    };
    let bytes = Ftl::region_bytes(&cfg(), LOGICAL).unwrap();
    file().set_len(4096 + bytes).unwrap();
    let mut ev = Vec::new();
    let data = pattern(3 * PAGE + 512, 5, 0);
    {
        let (mut ftl, formatted) =
            Ftl::open(&cfg(), LOGICAL, Box::new(hmb_ftl::FileMedium::new(file(), 4096))).unwrap();
        assert!(formatted);
        ftl.write(PAGE + 512, &data, 0, &mut ev).unwrap();
        ftl.deallocate(PAGE + 512, 512, 0, &mut ev).unwrap();
    }
    let (mut ftl, formatted) = Ftl::open(&cfg(), LOGICAL, Box::new(hmb_ftl::FileMedium::new(file(), 4096))).unwrap();
    assert!(!formatted);
    let mut back = vec![0u8; data.len()];
    ftl.read(PAGE + 512, &mut back, 0, &mut ev).unwrap();
    assert!(back[..512].iter().all(|&b| b == 0));
    assert_eq!(back[512..], data[512..]);
    ftl.check_invariants().unwrap();
    let other = FtlConfig { channels: 4, ..cfg() };
    let err = Ftl::open(&other, LOGICAL, Box::new(hmb_ftl::FileMedium::new(file(), 4096)))
        .err()
        .expect("refused");
    assert!(matches!(err, hmb_ftl::FtlError::Geometry(_)), "{err}");
}

/// Slots whose memory goes away (guest memory unmapped under the HMB).
#[derive(Clone)]
struct VanishingSlots(SharedSlots, Arc<std::sync::atomic::AtomicBool>);

impl SlotStore for VanishingSlots {
    fn slots(&self) -> u32 {
        SLOTS
    }
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> std::io::Result<()> {
        if self.1.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(std::io::Error::other("unmapped"));
        }
        self.0.read(slot, at, buf)
    }
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> std::io::Result<()> {
        if self.1.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(std::io::Error::other("unmapped"));
        }
        self.0.write(slot, at, buf)
    }
    fn offset(&self, slot: u32) -> u64 {
        self.0.offset(slot)
    }
}

/// The cache's store becomes unreadable with dirty pages in it: leaving it rebuilds them
/// from NAND, and nothing is lost.
#[test]
fn a_store_that_vanishes_loses_nothing() {
    let mut ftl = fresh();
    let gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let store = VanishingSlots(SharedSlots::new(), gone.clone());
    let mut ev = Vec::new();
    ftl.attach_cache(Box::new(store), None, 0, &mut ev).unwrap();
    let data = pattern(6 * PAGE, 5, 0);
    ftl.write(1020 * PAGE, &data, 0, &mut ev).unwrap(); // map pages 0 and 1, both dirty
    gone.store(true, std::sync::atomic::Ordering::Relaxed);
    let snap = ftl.detach_cache(0, &mut ev).unwrap();
    assert!(snap.is_empty());
    assert_eq!(ftl.stats().map_page_rebuilds, 2);
    let mut back = vec![0u8; data.len()];
    ftl.read(1020 * PAGE, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, data);
    ftl.check_invariants().unwrap();
    ftl = open(ftl.into_medium());
    ftl.read(1020 * PAGE, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, data);
}

/// Slots that count their whole-page reads (a map page's fetch and check).
struct CountingSlots(SharedSlots, Arc<std::sync::atomic::AtomicUsize>);

impl SlotStore for CountingSlots {
    fn slots(&self) -> u32 {
        self.0.slots()
    }
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> std::io::Result<()> {
        if buf.len() == PAGE as usize {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.0.read(slot, at, buf)
    }
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> std::io::Result<()> {
        self.0.write(slot, at, buf)
    }
    fn offset(&self, slot: u32) -> u64 {
        self.0.offset(slot)
    }
}

/// One host operation reads and checks a map page's slot once however many of its
/// entries it uses, and still reports every lookup (a hit event and a counted hit each);
/// the next operation checks the slot again, so a host write between two operations is
/// found at the second one's first lookup.
#[test]
fn an_operation_checks_each_map_page_once() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut ftl = fresh();
    let slots = SharedSlots::new();
    let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut ev = Vec::new();
    ftl.attach_cache(Box::new(CountingSlots(slots.clone(), reads.clone())), None, 0, &mut ev)
        .unwrap();
    let data = pattern(32 * PAGE, 7, 0);
    ftl.write(0, &data, 0, &mut ev).unwrap(); // map page 0: one miss, then its slot
    let hits = |ftl: &Ftl| ftl.stats().cache_hits;
    let hit_events = |ev: &[FtlEvent]| {
        ev.iter()
            .filter(|e| {
                matches!(
                    e,
                    FtlEvent::MapCache {
                        kind: hmb_ftl::CacheEventKind::Hit,
                        ..
                    }
                )
            })
            .count()
    };
    for round in 0..2 {
        reads.store(0, Relaxed);
        ev.clear();
        let before = hits(&ftl);
        let mut back = vec![0u8; data.len()];
        ftl.read(0, &mut back, 0, &mut ev).unwrap();
        assert_eq!(back, data, "round {round}");
        assert_eq!(reads.load(Relaxed), 1, "round {round}: one fetch of the map page");
        assert_eq!(hits(&ftl) - before, 32, "round {round}: every lookup counted");
        assert_eq!(hit_events(&ev), 32, "round {round}: every lookup reported");
    }
    // A rewrite: one fetch for the 32 lookups and updates of the same map page.
    reads.store(0, Relaxed);
    let again = pattern(32 * PAGE, 8, 0);
    ftl.write(0, &again, 0, &mut ev).unwrap();
    assert_eq!(reads.load(Relaxed), 1);
    // A host write between two operations: the next operation finds it at its first
    // lookup, and reads the right data.
    slots.poke(5 * 4, 0x20);
    ev.clear();
    let mut back = vec![0u8; again.len()];
    ftl.read(0, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, again);
    assert_eq!(
        ev.iter()
            .filter(|e| matches!(e, FtlEvent::MapCacheCorrupt { map_page: 0, .. }))
            .count(),
        1
    );
    assert_eq!(ftl.stats().cache_corruptions, 1);
    ftl.check_invariants().unwrap();
}

/// Slots where the host writes byte `at` (xor 0x40) once, right after the controller's
/// `after`-th entry update: a host write into the HMB while a command runs.
struct PokingSlots(SharedSlots, usize, usize);

impl SlotStore for PokingSlots {
    fn slots(&self) -> u32 {
        self.0.slots()
    }
    fn read(&self, slot: u32, at: usize, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read(slot, at, buf)
    }
    fn write(&mut self, slot: u32, at: usize, buf: &[u8]) -> std::io::Result<()> {
        self.0.write(slot, at, buf)?;
        if buf.len() == 4 {
            self.1 = self.1.saturating_sub(1);
            if self.1 == 0 {
                self.0.poke(self.2, 0x40);
                self.1 = usize::MAX;
            }
        }
        Ok(())
    }
    fn offset(&self, slot: u32) -> u64 {
        self.0.offset(slot)
    }
}

/// The map cache per command (docs/nvme-controller.md, "The map cache per command"): a
/// host write into a slot while a write command updates its entries is not looked for
/// during that command (its lookups and updates use the checked copy), and is found at
/// the next command's first use of the slot, with the checksum of the page as the host
/// left it; the data stay right, and the next check after that finds nothing.
#[test]
fn a_host_write_during_an_operation_is_found_at_the_next_one() {
    let mut ftl = fresh();
    let slots = SharedSlots::new();
    let mut ev = Vec::new();
    ftl.attach_cache(Box::new(PokingSlots(slots.clone(), 10, 900 * 4)), None, 0, &mut ev)
        .unwrap();
    let data = pattern(32 * PAGE, 3, 0);
    // Map page 0 in slot 0: 32 updates, the host's write into entry 900 after the 10th.
    ftl.write(0, &data, 0, &mut ev).unwrap();
    let corrupt = |ev: &[FtlEvent]| -> Vec<(u32, u64)> {
        ev.iter()
            .filter_map(|e| match *e {
                FtlEvent::MapCacheCorrupt {
                    map_page, found, when, ..
                } => {
                    assert_eq!(when, CorruptionFound::InUse);
                    Some((map_page, found))
                }
                _ => None,
            })
            .collect()
    };
    assert_eq!(corrupt(&ev), vec![], "not looked for during the command");
    assert_eq!(ftl.stats().cache_corruptions, 0);
    let mut page = vec![0u8; PAGE as usize];
    slots.read(0, 0, &mut page).unwrap();
    let host_left = hmb_ftl::page_checksum(&page);
    ev.clear();
    let mut back = vec![0u8; data.len()];
    ftl.read(0, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, data);
    assert_eq!(
        corrupt(&ev),
        vec![(0, host_left)],
        "found at the next command's first use"
    );
    assert_eq!(ftl.stats().cache_corruptions, 1);
    // Rebuilt (the slot held updates not on NAND): the next command finds nothing.
    ev.clear();
    ftl.read(0, &mut back, 0, &mut ev).unwrap();
    assert_eq!(back, data);
    assert_eq!(corrupt(&ev), vec![]);
    assert_eq!(ftl.stats().map_page_rebuilds, 1);
    ftl.check_invariants().unwrap();
}
