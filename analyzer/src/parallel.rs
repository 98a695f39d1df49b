//! Accounting on both cores. A mapped file is cut at an item boundary: the
//! calling thread walks the earlier part; a second thread finds the
//! boundary near the cut and the epoch there (`resync`), or else hops from
//! the first item to it by lengths alone (noting the epoch from EPOCH
//! markers), then walks the later part with its own `Walker` and `Stats`.
//! A boundary the resync found may lie a little past the cut: the calling
//! thread walks on to it.
//! The later part is appended with `Stats::merge`, which settles what only
//! the whole walk knows: the sequence gap or seq-backwards event at the
//! boundary (from the earlier part's final `Walker` state), the
//! inter-arrival time across it, the epoch both parts share, marker epochs
//! and warnings in file order with their caps.
//!
//! Whenever the cut is not simple (the hop meets a damaged item, the item
//! at the boundary is not a record, that record's seq goes back by more
//! than one, the earlier part stops on an error, the per-core table's cap
//! comes into play) the calling thread walks on from the boundary itself:
//! the result is always the sequential walk's, byte for byte.

use hmb_trace_abi::{
    align_record, HMB_RECORD_FLAG_MARKER, HMB_RECORD_FLAG_PAD, HMB_RECORD_HDR_SIZE, HMB_RECORD_MAX_PAYLOAD,
};
use hmb_trace_file::{parse_item, FileHeader, ItemKind, ItemParse, Marker};

use hmb_trace_file::FileError;

use crate::input::{populate, rec_at, unmap, Rec, WalkEnd};
use crate::latency::Latency;
use crate::progress::Progress;
use crate::resync;
use crate::stats::Stats;
use crate::walk::{Event, Walker};

/// Files below this are walked on one core: a thread and a second set of
/// tables cost more than half of such a walk saves.
pub const PARALLEL_MIN_BYTES: usize = 4 << 20;

/// The record loop moves the progress bar after this many bytes.
const PROGRESS_BYTES: usize = 4 << 20;

/// Where `stats` cuts (`latency_target`), in percent of the file.
const LATENCY_CUT_PERCENT: u64 = 50;

/// Where the later part starts: a record of `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    pub offset: u64,
    pub epoch: u64,
    pub ring_size: u64,
}

/// The boundary a split aimed at file offset `target` uses: the first item
/// boundary at or after `target`, found by hopping from the first item by
/// lengths alone. None when the hop meets an item a reader would reject
/// (length, PAD flag, a marker that does not decode) or the file's end,
/// or when the item at the boundary is not a complete record.
pub fn hop(bytes: &[u8], header: &FileHeader, target: u64) -> Option<Boundary> {
    let mut pos = header.header_size as usize;
    let (mut epoch, mut ring_size) = (header.first_epoch, header.ring_size);
    let target = usize::try_from(target).ok()?;
    while pos < target {
        let h = bytes.get(pos..pos + HMB_RECORD_HDR_SIZE as usize)?;
        let length = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let flags = u16::from_le_bytes([h[6], h[7]]);
        if flags & HMB_RECORD_FLAG_PAD != 0 || length > HMB_RECORD_MAX_PAYLOAD {
            return None;
        }
        if flags & HMB_RECORD_FLAG_MARKER != 0 {
            let Ok(ItemParse::Item(item)) = parse_item(&bytes[pos..], pos as u64) else {
                return None;
            };
            if let Ok(ItemKind::Marker(Marker::Epoch { epoch: e, ring_size: r })) = item.kind() {
                (epoch, ring_size) = (e, r);
            }
        }
        pos += align_record(length) as usize;
    }
    match parse_item(bytes.get(pos..)?, pos as u64) {
        Ok(ItemParse::Item(item)) if !item.is_marker() => Some(Boundary {
            offset: pos as u64,
            epoch,
            ring_size,
        }),
        _ => None,
    }
}

/// Work that rides along each part's accounting walk and is merged with
/// it: nothing for `info` and `gaps`, the latencies for `stats`.
pub trait Rider: Send {
    fn add(&mut self, ev: &Event<'_, '_>);
    /// A device record the walker took in order: `add` of its `Record`
    /// event, the header read once by the record loop.
    fn add_rec(&mut self, r: &Rec<'_>);
    /// Append the later part (`bytes` is the whole file, `header` its
    /// header, `later_end` where the later part's walk ended): the result
    /// is what one walk over both parts gives.
    fn merge(&mut self, later: Self, bytes: &[u8], header: &FileHeader, later_end: u64);
}

impl Rider for () {
    #[inline(always)]
    fn add(&mut self, _: &Event<'_, '_>) {}
    #[inline(always)]
    fn add_rec(&mut self, _: &Rec<'_>) {}
    fn merge(&mut self, _: Self, _: &[u8], _: &FileHeader, _: u64) {}
}

impl Rider for Latency<'_> {
    #[inline(always)]
    fn add(&mut self, ev: &Event<'_, '_>) {
        Latency::add(self, ev)
    }
    #[inline(always)]
    fn add_rec(&mut self, r: &Rec<'_>) {
        Latency::add_rec(self, r)
    }
    fn merge(&mut self, later: Self, bytes: &[u8], header: &FileHeader, later_end: u64) {
        Latency::merge(self, later, bytes, header, later_end)
    }
}

/// Feed the items from `start` while they start below `stop` to `walker`,
/// `stats` and `rider`: what `walk_bytes` with `Walker::feed`, `Stats::add`
/// and `Rider::add` for each event does, in one loop. A device record whose
/// seq is the expected one (`Walker::in_order`, nearly every record) has
/// its header read once and goes to `Stats::add_rec` and `Rider::add_rec`
/// without an `Event`; anything else (markers, gaps, seq going back,
/// damaged items) takes the general path out of line.
fn account<R: Rider>(
    bytes: &[u8],
    walker: &mut Walker,
    stats: &mut Stats,
    rider: &mut R,
    start: u64,
    stop: u64,
    progress: &Progress,
) -> WalkEnd {
    let len = bytes.len();
    let stop = (stop as usize).min(len);
    let mut pos = (start as usize).min(len);
    // The item count, the progress bar's next tick and the error live in
    // locals: kept in `WalkEnd` and a tick counter they were stored and
    // compared on every record (cachegrind: ~8 instructions each).
    let mut items = 0u64;
    let mut error = None;
    // The progress bar moves between stretches of PROGRESS_BYTES, so the
    // record loop compares `pos` with one bound, not with two.
    // The seq the walker takes in order next lives in a register
    // (`Walker::in_order_from`), handed back before the general path.
    let mut want = walker.in_order_from();
    'walk: while pos < stop {
        let tick = pos.saturating_add(PROGRESS_BYTES).min(stop);
        while pos < tick {
            match rec_at(bytes, pos) {
                // Counted in `items` when handed back (`want` went up by
                // one per record).
                Some(r) if r.seq == want && want != u64::MAX => {
                    want += 1;
                    stats.add_rec(&r);
                    rider.add_rec(&r);
                    pos += r.size as usize;
                }
                _ => {
                    items += walker.took_in_order(want);
                    let fed = general(bytes, pos, walker, stats, rider);
                    want = walker.in_order_from();
                    match fed {
                        Ok(size) => pos += size,
                        Err(e) => {
                            error = Some(e);
                            break 'walk;
                        }
                    }
                    items += 1;
                }
            }
        }
        progress.set(pos as u64);
    }
    items += walker.took_in_order(want);
    progress.set(pos as u64);
    WalkEnd {
        offset: pos as u64,
        items,
        error,
        stopped: false,
    }
}

/// `account`'s general path for the item at `pos`: parsed and fed as
/// `walk_bytes` and `Walker::feed` do; its size, or the error that ends
/// the walk there.
#[inline(never)]
fn general<R: Rider>(
    bytes: &[u8],
    pos: usize,
    walker: &mut Walker,
    stats: &mut Stats,
    rider: &mut R,
) -> Result<usize, FileError> {
    match parse_item(&bytes[pos..], pos as u64)? {
        ItemParse::Item(item) => {
            walker.feed(&item, &mut |ev| {
                stats.add(&ev);
                rider.add(&ev);
            });
            Ok(item.size() as usize)
        }
        ItemParse::NeedMore { need } => Err(FileError::Truncated {
            offset: pos as u64,
            have: (bytes.len() - pos) as u64,
            need,
        }),
    }
}

/// The accounting of a whole mapped file in one walk on this thread;
/// finished.
pub fn stats_one_walk(bytes: &[u8], header: &FileHeader, progress: &Progress) -> (WalkEnd, Stats) {
    let mut walker = Walker::new(header);
    let mut stats = Stats::new(header.first_epoch, header.ring_size);
    let start = header.header_size as u64;
    let end = account(
        bytes,
        &mut walker,
        &mut stats,
        &mut (),
        start,
        bytes.len() as u64,
        progress,
    );
    stats.finish();
    (end, stats)
}

/// Where to cut a file of `len` bytes: the middle, the thread that walks
/// the later part finding its start near the cut (`resync`). When it
/// cannot and hops over the earlier part, the earlier part would better be
/// the larger (55 % before the resync).
pub fn default_target(header: &FileHeader, len: usize) -> u64 {
    let start = header.header_size as u64;
    start + (len as u64).saturating_sub(start) / 2
}

/// Where `stats` cuts a file: each part matches its own pairs, the calling
/// thread then applies the later part's log (first touches and depth
/// changes, a few ns each) and the other thread first hops over the
/// earlier part by lengths, so the two threads' work is about equal at the
/// middle (measured: docs/performance.md, "Pair matching on both cores").
pub fn latency_target(header: &FileHeader, len: usize) -> u64 {
    let start = header.header_size as u64;
    start + (len as u64).saturating_sub(start) * LATENCY_CUT_PERCENT / 100
}

/// The accounting of a whole mapped file (`bytes` includes the header) on
/// two threads, cut at the first item boundary at or after `target`;
/// finished. Exactly what one walk from the start gives. `file_mapped`:
/// `bytes` is a read-only mapping of a file (`TraceInput::mapped_bytes`),
/// whose pages the calling thread may drop from the process once it has
/// walked them (`split_at`); false for any other memory.
pub fn stats_split(
    bytes: &[u8],
    header: &FileHeader,
    target: u64,
    progress: &Progress,
    file_mapped: bool,
) -> (WalkEnd, Stats) {
    let window = resync::window_for(header, target);
    let (end, stats, (), _) = split_at(bytes, header, target, progress, (), |_| (), window, file_mapped);
    (end, stats)
}

/// `stats_split` with the latencies (`stats`): the later part's latencies
/// are merged by `Latency::merge`, whose rule for pairs open across the cut
/// and the queue-depth bins is docs/performance.md's. Exactly what one walk
/// gives.
pub fn stats_latency_split<'c>(
    bytes: &[u8],
    header: &FileHeader,
    target: u64,
    progress: &Progress,
    catalog: &'c crate::catalog::Catalog,
    file_mapped: bool,
) -> (WalkEnd, Stats, Latency<'c>) {
    let (end, stats, lat, _) = split_at(
        bytes,
        header,
        target,
        progress,
        Latency::new(catalog),
        |start| Latency::new_part(catalog, start),
        resync::window_for(header, target),
        file_mapped,
    );
    (end, stats, lat)
}

/// `stats_split` with a rider (`first` for the earlier part, `part(start)`
/// makes the later part's), and whether the parts were merged (else the
/// calling thread walked on from the boundary).
///
/// With `file_mapped`, a calling thread that ends its walk while the other
/// is still walking drops the pages it walked from the process
/// (`input::unmap`) before it waits: that part of the mapping's teardown
/// then falls in the wait instead of after the merge, when the file is
/// unmapped. The pages stay in the page cache; a later read of them (a
/// fallback walk from the start) maps them again with the same bytes.
#[allow(clippy::too_many_arguments)]
fn split_at<R: Rider>(
    bytes: &[u8],
    header: &FileHeader,
    target: u64,
    progress: &Progress,
    first: R,
    part: impl FnOnce(u64) -> R + Send,
    epoch_window: usize,
    file_mapped: bool,
) -> (WalkEnd, Stats, R, bool) {
    let len = bytes.len() as u64;
    let start = header.header_size as u64;
    std::thread::scope(|s| {
        let later = s.spawn(|| {
            populate(bytes, 0, target as usize);
            // Found near the cut when it can be (no read of the earlier
            // part), else by the hop; checked at the merge either way.
            let b = resync::boundary(bytes, header, target, epoch_window).or_else(|| hop(bytes, header, target))?;
            let part_header = FileHeader {
                first_epoch: b.epoch,
                ring_size: b.ring_size,
                ..*header
            };
            let mut walker = Walker::new(&part_header);
            let mut stats = Stats::new_part(b.epoch, b.ring_size);
            let mut rider = part(b.offset);
            let end = account(
                bytes,
                &mut walker,
                &mut stats,
                &mut rider,
                b.offset,
                len,
                &Progress::hidden(),
            );
            Some((b, end, stats, rider))
        });
        let mut walker = Walker::new(header);
        let mut stats = Stats::new(header.first_epoch, header.ring_size);
        let mut rider = first;
        populate(bytes, target as usize, bytes.len());
        let mut end = account(bytes, &mut walker, &mut stats, &mut rider, start, target, progress);
        if file_mapped && !later.is_finished() {
            // Only what this walk read: the walk on to the boundary below
            // and the merge read from `end.offset` on.
            unmap(bytes, start as usize, end.offset as usize);
        }
        let later = match later.join() {
            Ok(later) => later,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        // A boundary found by `resync` may lie past the first item at or
        // after `target` (after an EPOCH marker, past a seq gap): the
        // earlier part walks on to it, and the merge below checks that
        // this walk ends exactly there.
        if let Some((b, ..)) = &later {
            if end.error.is_none() && !end.stopped && end.offset < b.offset {
                let more = account(
                    bytes,
                    &mut walker,
                    &mut stats,
                    &mut rider,
                    end.offset,
                    b.offset,
                    progress,
                );
                end = WalkEnd {
                    items: end.items + more.items,
                    ..more
                };
            }
        }
        if end.error.is_some() || end.stopped || end.offset >= len {
            // The whole walk ends in the earlier part too.
            stats.finish();
            return (end, stats, rider, false);
        }
        if let Some((b, later_end, later_stats, later_rider)) = later {
            if b.offset == end.offset {
                if let Some((boundary, first_ts)) = boundary_event(bytes, header, &walker, &b) {
                    if stats.can_merge(&later_stats) {
                        stats.merge(boundary.as_ref(), first_ts, later_stats);
                        stats.finish();
                        rider.merge(later_rider, bytes, header, later_end.offset);
                        progress.set(later_end.offset);
                        let end = WalkEnd {
                            items: end.items + later_end.items,
                            ..later_end
                        };
                        return (end, stats, rider, true);
                    }
                }
            }
        }
        // Not a simple cut: walk on from the boundary on this thread.
        let rest = account(bytes, &mut walker, &mut stats, &mut rider, end.offset, len, progress);
        end = WalkEnd {
            items: end.items + rest.items,
            ..rest
        };
        stats.finish();
        (end, stats, rider, false)
    })
}

/// The event the whole walk's `Walker` emits at the later part's first
/// record (before its `Record` event), and that record's timestamp; None
/// when the later part's own walker would not go on as the whole walk's
/// does (a seq more than one below the expected one, another epoch).
fn boundary_event(
    bytes: &[u8],
    header: &FileHeader,
    walker: &Walker,
    b: &Boundary,
) -> Option<(Option<Event<'static, 'static>>, u64)> {
    let Ok(ItemParse::Item(item)) = parse_item(bytes.get(b.offset as usize..)?, b.offset) else {
        return None;
    };
    if item.is_marker() || walker.epoch() != b.epoch {
        return None;
    }
    let (seq, ts) = (item.seq(), item.timestamp_ns());
    let ev = match walker.expected() {
        // Afterwards the whole walk expects max(want, seq + 1), the part's
        // walker seq + 1: the same only if seq + 1 >= want.
        Some(want) if seq.saturating_add(1) < want => return None,
        Some(want) if seq > want && !header.is_filtered() => Some(Event::Gap {
            offset: b.offset,
            epoch: b.epoch,
            first_seq: want,
            count: seq - want,
            timestamp_ns: ts,
        }),
        Some(want) if seq < want => Some(Event::SeqBackwards {
            offset: b.offset,
            epoch: b.epoch,
            seq,
            expected: want,
        }),
        _ => None,
    };
    Some((ev, ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::input::walk_bytes;
    use crate::latency::reference;
    use hmb_trace_file::{FILE_FLAG_FILTERED, MARKER_LOST};
    use proptest::prelude::*;
    use std::ops::ControlFlow;

    /// One item of a generated file.
    #[derive(Debug, Clone)]
    enum In {
        /// A record: seq and timestamp steps from the previous record
        /// (negative: backwards), opcode, source, payload length.
        Rec {
            dseq: i64,
            dts: i64,
            opcode: u16,
            source: u32,
            len: u16,
        },
        /// A LOST marker for the n-th epoch seen (or one not in the file).
        Lost {
            pick: u8,
            first: u64,
            count: u64,
        },
        Frozen {
            pick: u8,
            next: u64,
        },
        /// A new epoch, or (`again`) a number seen before.
        Epoch {
            again: bool,
            seq: u64,
        },
        Unknown,
        /// An item a reader rejects (the walk stops there): a LOST marker
        /// too short to decode, a PAD record, a length above the maximum.
        Bad(u8),
    }

    fn item(opcode: u16, flags: u16, seq: u64, ts: u64, source: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        v.extend_from_slice(&opcode.to_le_bytes());
        v.extend_from_slice(&flags.to_le_bytes());
        v.extend_from_slice(&seq.to_le_bytes());
        v.extend_from_slice(&ts.to_le_bytes());
        v.extend_from_slice(&source.to_le_bytes());
        v.extend_from_slice(&0u32.to_le_bytes());
        v.extend_from_slice(payload);
        v.resize(align_record(payload.len() as u32) as usize, 0);
        v
    }

    /// The file's bytes and the offset of each item.
    fn file(items: &[In], filtered: bool, torn: usize) -> (Vec<u8>, Vec<u64>) {
        let mut header = FileHeader::new(1, 0, 1 << 16, 5);
        if filtered {
            header.flags |= FILE_FLAG_FILTERED;
        }
        let mut bytes = header.encode().to_vec();
        let mut starts = Vec::new();
        let (mut seq, mut ts) = (100i64, 1_000_000i64);
        let mut epochs = vec![5u64];
        for i in items {
            starts.push(bytes.len() as u64);
            let pick = |p: u8| epochs.get(p as usize % (epochs.len() + 1)).copied().unwrap_or(999);
            let b = match *i {
                In::Rec {
                    dseq,
                    dts,
                    opcode,
                    source,
                    len,
                } => {
                    seq = (seq + dseq).max(0);
                    ts = (ts + dts).max(0);
                    // Few distinct keys (the first bytes), so that pairs match,
                    // replace each other and stay open across the cut.
                    let payload: Vec<u8> = (0..len).map(|k| k as u8 ^ (seq as u8 & 3)).collect();
                    item(opcode, 0, seq as u64, ts as u64, source, &payload)
                }
                In::Lost { pick: p, first, count } => Marker::Lost {
                    first_seq: first,
                    count,
                    epoch: pick(p),
                }
                .encode()
                .to_vec(),
                In::Frozen { pick: p, next } => Marker::Frozen {
                    epoch: pick(p),
                    last_seq: None,
                    next_seq: next,
                }
                .encode()
                .to_vec(),
                In::Epoch { again, seq: s } => {
                    let epoch = if again {
                        epochs[0]
                    } else {
                        epochs.iter().max().unwrap() + 1
                    };
                    epochs.push(epoch);
                    seq = s as i64;
                    Marker::Epoch {
                        epoch,
                        ring_size: 1 << (10 + epochs.len()),
                    }
                    .encode()
                    .to_vec()
                }
                In::Unknown => Marker::Unknown { opcode: 0xFF7A }.encode().to_vec(),
                In::Bad(0) => item(MARKER_LOST, HMB_RECORD_FLAG_MARKER, 0, 0, 0, &[1, 2, 3]),
                In::Bad(1) => item(0x0101, HMB_RECORD_FLAG_PAD, 0, 0, 0, &[0; 16]),
                In::Bad(_) => {
                    let mut b = item(0x0101, 0, 0, 0, 0, &[0; 16]);
                    b[0..4].copy_from_slice(&(HMB_RECORD_MAX_PAYLOAD + 8).to_le_bytes());
                    b
                }
            };
            bytes.extend_from_slice(&b);
        }
        // A torn last item: the first bytes of one more record.
        let extra = item(0x0101, 0, 7, 7, 0, &[0; 24]);
        bytes.extend_from_slice(&extra[..torn.min(extra.len() - 1)]);
        (bytes, starts)
    }

    /// A finished walk, its accounting and its latencies, as comparable
    /// text.
    fn text(end: &WalkEnd, stats: &Stats, latency: String) -> String {
        format!(
            "{} {} {:?} {}\n{}\n{:?}\n{latency}",
            end.offset,
            end.items,
            end.error.as_ref().map(|e| e.to_string()),
            end.stopped,
            serde_json::to_string(stats).unwrap(),
            stats.summary_warnings()
        )
    }

    fn latency_text(lat: &Latency<'_>) -> String {
        format!(
            "{}\n{}\ndropped {}",
            serde_json::to_string(&lat.percentiles()).unwrap(),
            serde_json::to_string(&lat.depth_series()).unwrap(),
            lat.series_dropped
        )
    }

    /// The builtin catalog, parsed once for all the splits.
    fn catalog() -> &'static Catalog {
        static CATALOG: std::sync::OnceLock<Catalog> = std::sync::OnceLock::new();
        CATALOG.get_or_init(Catalog::builtin)
    }

    /// One walk, with the latencies of the implementation before the split
    /// (`latency::reference`, kept for this comparison).
    fn sequential(bytes: &[u8]) -> String {
        let catalog = catalog();
        let header = FileHeader::parse(bytes).unwrap();
        let mut walker = Walker::new(&header);
        let mut stats = Stats::new(header.first_epoch, header.ring_size);
        let mut lat = reference::Latency::new(catalog);
        let end = walk_bytes(
            bytes,
            header.header_size as u64,
            bytes.len() as u64,
            &Progress::hidden(),
            |item| {
                walker.feed(item, &mut |ev| {
                    stats.add(&ev);
                    lat.add(&ev);
                });
                ControlFlow::Continue(())
            },
        );
        stats.finish();
        let latency = format!(
            "{}\n{}\ndropped {}",
            serde_json::to_string(&lat.percentiles()).unwrap(),
            serde_json::to_string(&lat.depth_series()).unwrap(),
            lat.series_dropped
        );
        text(&end, &stats, latency)
    }

    /// The split at `target` with the latencies, the later part logging at
    /// most `log_cap` pairs and looking for EPOCH markers `window` bytes
    /// around its resync point.
    fn split(bytes: &[u8], target: u64, log_cap: usize, window: usize) -> (String, bool) {
        let catalog = catalog();
        let header = FileHeader::parse(bytes).unwrap();
        let (end, stats, lat, merged) = split_at(
            bytes,
            &header,
            target,
            &Progress::hidden(),
            Latency::new(catalog),
            |start| Latency::new_part_capped(catalog, start, log_cap),
            window,
            false,
        );
        (text(&end, &stats, latency_text(&lat)), merged)
    }

    /// Split at every item start and inside every item; returns how many
    /// of the splits were merged (not walked on sequentially).
    fn check_every_split(bytes: &[u8], starts: &[u64]) -> Result<usize, TestCaseError> {
        let want = sequential(bytes);
        let mut merged = 0;
        let mut targets: Vec<u64> = starts.iter().flat_map(|&s| [s, s + 8]).collect();
        targets.extend([0, bytes.len() as u64, bytes.len() as u64 + 64]);
        for (k, target) in targets.into_iter().enumerate() {
            // The later part's pair log: unbounded, empty, or full after a
            // few pairs (the rest walked again by the merge); the resync's
            // window for EPOCH markers: the whole file, a few items (so it
            // takes the file header's epoch, a marker before, the first
            // marker after) or none (the hop).
            let cap = [usize::MAX, 0, 3][k % 3];
            let window = [resync::EPOCH_WINDOW, 64, 200, 0][k % 4];
            let (got, was_merged) = split(bytes, target, cap, window);
            merged += was_merged as usize;
            if !was_merged && std::env::var_os("SPLIT_DEBUG").is_some() {
                eprintln!("not merged at {target} (items at {starts:?})");
            }
            prop_assert_eq!(&got, &want, "split at {} (log cap {})", target, cap);
        }
        Ok(merged)
    }

    /// Where a resync lands: at or after the target, and where the file's
    /// items say (an item start, a device record, in the epoch and ring
    /// size a walk has there) but for rare coincidences, which only cost
    /// the merge's fallback (`check_every_split` checks the result). For
    /// files with no damaged item. Returns how many targets found a
    /// boundary with the default window and how many of all were not
    /// exact.
    fn check_resync(bytes: &[u8], starts: &[u64]) -> Result<(usize, usize), TestCaseError> {
        let header = FileHeader::parse(bytes).unwrap();
        // Whether each item is a marker, and the epoch and ring size there.
        let mut at = std::collections::HashMap::new();
        let mut now = (header.first_epoch, header.ring_size);
        for item in hmb_trace_file::SliceReader::new(bytes).unwrap() {
            let Ok(item) = item else { break };
            if let Ok(ItemKind::Marker(Marker::Epoch { epoch, ring_size })) = item.kind() {
                now = (epoch, ring_size);
            }
            at.insert(item.offset, (item.is_marker(), now.0, now.1));
        }
        let (mut found, mut inexact) = (0, 0);
        for target in starts.iter().flat_map(|&s| [s, s + 8, s + 3]) {
            for window in [resync::EPOCH_WINDOW, 64, 200, 0] {
                if let Some(b) = resync::boundary(bytes, &header, target, window) {
                    found += (window == resync::EPOCH_WINDOW) as usize;
                    prop_assert!(b.offset >= target, "{:?} before {}", b, target);
                    if at.get(&b.offset) != Some(&(false, b.epoch, b.ring_size)) {
                        inexact += 1;
                        if std::env::var_os("SPLIT_DEBUG").is_some() {
                            eprintln!("target {target} window {window}: {b:?} is not an item boundary");
                        }
                    }
                }
            }
        }
        Ok((found, inexact))
    }

    fn any_item() -> impl Strategy<Value = In> {
        prop_oneof![
            12 => (-3i64..5, prop_oneof![-50i64..2000, 0i64..400_000], prop::sample::select(vec![0x0101u16, 0x0102, 0x0301, 0x0401, 0x0402, 0x0501, 0x0502, 7, 0xFFFF]),
                prop::sample::select(vec![0u32, 1, 3, 65535, 65536, 70_000, u32::MAX]), 0u16..40)
                .prop_map(|(dseq, dts, opcode, source, len)| In::Rec { dseq, dts, opcode, source, len }),
            2 => (any::<u8>(), 0u64..300, 1u64..20).prop_map(|(pick, first, count)| In::Lost { pick, first, count }),
            1 => (any::<u8>(), 0u64..400).prop_map(|(pick, next)| In::Frozen { pick, next }),
            1 => (any::<bool>(), 0u64..5).prop_map(|(again, seq)| In::Epoch { again, seq }),
            1 => Just(In::Unknown),
        ]
    }

    /// Generated files per run. Each is split at every item start and
    /// inside every item (2n + 3 splits of an n-item file, each a walk of
    /// the whole file), so the time grows with cases × n²: 200 cases were
    /// 91 s of the dev build's lib tests, CASES keeps them under 30 s
    /// (docs/performance.md). `PROPTEST_CASES=<n>` searches longer.
    const CASES: u32 = 48;

    fn cases() -> u32 {
        std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(CASES)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]
        #[test]
        fn split_equals_one_walk(
            items in prop::collection::vec(any_item(), 0..48),
            bad in prop::option::weighted(0.15, (any::<prop::sample::Index>(), 0u8..3)),
            filtered in prop::bool::weighted(0.2),
            torn in prop::sample::select(vec![0usize, 0, 0, 5, 40]),
        ) {
            let mut items = items;
            if let Some((at, kind)) = bad {
                let at = at.index(items.len() + 1);
                items.insert(at, In::Bad(kind));
            }
            let (bytes, starts) = file(&items, filtered, torn);
            check_every_split(&bytes, &starts)?;
            if bad.is_none() {
                check_resync(&bytes, &starts)?;
            }
            // walk_bytes (with its fast path for records) hands out what
            // the tracefile crate's reader does.
            let header = FileHeader::parse(&bytes).unwrap();
            let mut seen = Vec::new();
            let end = walk_bytes(&bytes, header.header_size as u64, bytes.len() as u64, &Progress::hidden(), |item| {
                seen.push(Ok((item.offset, item.hdr, item.payload.to_vec())));
                ControlFlow::Continue(())
            });
            if let Some(e) = end.error {
                seen.push(Err(e.to_string()));
            }
            let want: Vec<_> = hmb_trace_file::SliceReader::new(&bytes)
                .unwrap()
                .map(|r| r.map(|i| (i.offset, i.hdr, i.payload.to_vec())).map_err(|e| e.to_string()))
                .collect();
            prop_assert_eq!(seen, want);
        }
    }

    fn rec(dseq: i64, source: u32) -> In {
        In::Rec {
            dseq,
            dts: 100,
            opcode: 0x0101,
            source,
            len: 8,
        }
    }

    /// Most splits of an ordinary file merge (the fallback is the rare case).
    #[test]
    fn ordinary_files_merge() {
        let mut items: Vec<In> = (0..40).map(|i| rec(1 + (i % 7 == 0) as i64 * 3, i % 4)).collect();
        items.insert(
            10,
            In::Lost {
                pick: 0,
                first: 0,
                count: 3,
            },
        );
        items.insert(20, In::Epoch { again: false, seq: 0 });
        items.insert(30, In::Frozen { pick: 0, next: 50 });
        let (bytes, starts) = file(&items, false, 0);
        let merged = check_every_split(&bytes, &starts).unwrap();
        assert!(merged >= 60, "{merged} of {} merged", starts.len() * 2 + 3);
        // The resync finds the boundary itself (the hop is the rare case)
        // wherever `CHAIN` items follow the target.
        let (found, inexact) = check_resync(&bytes, &starts).unwrap();
        assert!(found >= (starts.len() - 16) * 3, "{found} boundaries found");
        assert_eq!(inexact, 0);
    }

    /// Each way the resync finds the later part's epoch: the file header's
    /// (the window reaches it), an EPOCH marker before the resync point,
    /// the first record after one ahead of it; and none (the hop) when the
    /// window holds no marker and does not reach the header.
    #[test]
    fn resync_takes_each_path() {
        let mut items: Vec<In> = (0..60).map(|_| rec(1, 0)).collect();
        items.insert(30, In::Epoch { again: false, seq: 0 });
        let (bytes, starts) = file(&items, false, 0);
        let header = FileHeader::parse(&bytes).unwrap();
        // Records are 40 bytes, the marker 56: 200 bytes are ~5 items.
        let at = |item: usize, window| resync::boundary(&bytes, &header, starts[item], window);
        let b = |item: usize, epoch: u64, ring_size: u64| {
            Some(Boundary {
                offset: starts[item],
                epoch,
                ring_size,
            })
        };
        let new = (6, 1 << 12);
        assert_eq!(at(3, 200), b(3, header.first_epoch, header.ring_size));
        assert_eq!(at(33, 200), b(33, new.0, new.1));
        assert_eq!(at(28, 200), b(31, new.0, new.1));
        assert_eq!(at(30, 200), b(31, new.0, new.1));
        let inside = |k| resync::boundary(&bytes, &header, starts[30] + k, 200);
        assert_eq!(inside(8), b(31, new.0, new.1));
        assert_eq!(inside(24), b(31, new.0, new.1));
        assert_eq!(at(10, 200), None);
        assert_eq!(at(10, 0), None);
        // The splits there give one walk's result.
        let want = sequential(&bytes);
        for (item, window) in [(3, 200), (33, 200), (28, 200), (10, 200), (10, 0)] {
            let (got, merged) = split(&bytes, starts[item], usize::MAX, window);
            assert_eq!(got, want, "split at item {item}, window {window}");
            assert!(merged, "split at item {item}, window {window}");
        }
    }

    /// The caps across a boundary: more losses than are listed, more than
    /// ten seq-backwards warnings, more high core numbers than the table
    /// holds (that split walks on sequentially).
    #[test]
    fn caps_across_the_boundary() {
        let many_gaps: Vec<In> = (0..(MAX_LISTED + 500) as u32).map(|i| rec(2, i % 3)).collect();
        let backwards: Vec<In> = (0..40).map(|i| rec(if i % 2 == 0 { -2 } else { 3 }, 0)).collect();
        let cores: Vec<In> = (0..5000u32).map(|i| rec(1, 100_000 + i)).collect();
        // More latency series than are kept (NAND reads from 1 500 sources,
        // small and large numbers), more queue-depth sources than are
        // tracked (fetches from 300 queues).
        let nand = |source| In::Rec {
            dseq: 1,
            dts: 100,
            opcode: 0x0301,
            source,
            len: 16,
        };
        let series: Vec<In> = (0..1500u32)
            .map(|i| nand(if i % 2 == 0 { i } else { 70_000 + i }))
            .collect();
        let depth: Vec<In> = (0..600u32).map(|i| rec(1, i % 300)).collect();
        for items in [many_gaps, backwards, cores, series, depth] {
            let (bytes, starts) = file(&items, false, 0);
            let want = sequential(&bytes);
            for k in 1..8 {
                let target = starts[starts.len() * k / 8];
                assert_eq!(
                    split(&bytes, target, usize::MAX, resync::EPOCH_WINDOW).0,
                    want,
                    "split at {target}"
                );
            }
        }
    }

    const MAX_LISTED: usize = crate::stats::MAX_LISTED_LOSSES;
}
