//! Where the later thread of a split starts, found near the cut instead of
//! by hopping over every item of the earlier part (`parallel::hop`, which
//! reads a header in every line of the first half before the later walk
//! can start).
//!
//! The resync point is the first 8-byte aligned offset at or after the
//! target from which `CHAIN` items in a row decode, `LINKS` of them a
//! record right after a record with the next seq, the first two items such
//! a pair. The later part's epoch and
//! ring size come from the nearest EPOCH marker before that point within
//! a window (`window_for`: 8 MiB, at most 1/64 of the earlier part; the
//! file header's epoch when the window reaches it), or
//! else the boundary moves to the first record after the first EPOCH marker
//! in the window after it. None when none of this holds: the caller hops.
//!
//! Nothing here is trusted: the calling thread walks the earlier part up to
//! the boundary and the merge checks that its walk ends exactly there and
//! that its epoch and ring size are the later part's (`boundary_event`,
//! `Stats::can_merge`); otherwise it walks on itself. A wrong guess costs
//! time, never a different result.

use hmb_trace_abi::{HMB_RECORD_FLAG_MARKER, HMB_RING_ALIGN};
use hmb_trace_file::{parse_item, FileHeader, ItemKind, ItemParse, Marker, MARKER_EPOCH};

use crate::parallel::Boundary;

/// How far before the resync point an EPOCH marker is looked for (and after
/// it, when there is none before), at most: 8 MiB is ~1 M aligned words
/// (~8 M instructions). And at most 1/64 of the earlier part: where the
/// window holds no marker the hop follows, which costs ~0.25 instructions
/// per byte of the earlier part, so a failed look costs at most ~1/8 of
/// it (a 24 MB slice of the bench trace: +2 % of `stats` with a fixed
/// 8 MiB window, none with this).
pub(crate) const EPOCH_WINDOW: usize = 8 << 20;

/// The window for a cut at `target`: `EPOCH_WINDOW`, at most 1/64 of the
/// earlier part.
pub(crate) fn window_for(header: &FileHeader, target: u64) -> usize {
    let earlier = target.saturating_sub(header.header_size as u64) / 64;
    EPOCH_WINDOW.min(usize::try_from(earlier).unwrap_or(usize::MAX))
}

/// How far after the target a resync point is looked for.
const RESYNC_WINDOW: usize = 1 << 20;

/// Items in a row that must decode from a resync point, among which `LINKS` times a record right after a record
/// with the next seq: zeroed or small-number bytes (a marker's payload)
/// decode as short records too, but rarely with consecutive seqs.
const CHAIN: usize = 16;
const LINKS: usize = 4;

/// Items stepped over from a resync point or an EPOCH marker to the first
/// record.
const MAX_MARKERS: usize = 64;

const ALIGN: usize = HMB_RING_ALIGN as usize;

/// A decoded item: its size, and what a split's boundary needs of it.
#[derive(Debug, Clone, Copy)]
enum At {
    Record { seq: u64 },
    Epoch { epoch: u64, ring_size: u64 },
    Marker,
}

/// The item at `pos` if a reader would take it (complete, not PAD, length
/// in bounds, a marker that decodes), with its size.
fn item_at(bytes: &[u8], pos: usize) -> Option<(At, usize)> {
    let Ok(ItemParse::Item(item)) = parse_item(bytes.get(pos..)?, pos as u64) else {
        return None;
    };
    let at = if !item.is_marker() {
        At::Record { seq: item.seq() }
    } else if let Ok(ItemKind::Marker(Marker::Epoch { epoch, ring_size })) = item.kind() {
        At::Epoch { epoch, ring_size }
    } else {
        At::Marker
    };
    Some((at, item.size() as usize))
}

/// Whether `CHAIN` items in a row decode from `pos` with `LINKS` times a
/// record right after a record with the next seq among them (a seq gap is
/// no link, and no failure: files have them), the first link at `pos`
/// itself: a wrong start can decode as a record whose size happens to land
/// on a real item, after which every item is real, but its seq (a
/// timestamp's or a payload's bytes) is rarely one below the next record's.
fn chain_from(bytes: &[u8], pos: usize) -> bool {
    let (mut p, mut prev, mut links) = (pos, None::<u64>, 0);
    for k in 0..CHAIN {
        let Some((at, size)) = item_at(bytes, p) else {
            return false;
        };
        let link = match (prev, at) {
            (Some(s), At::Record { seq }) => s.checked_add(1) == Some(seq),
            _ => false,
        };
        if k == 1 && !link {
            return false;
        }
        links += link as usize;
        prev = match at {
            At::Record { seq } => Some(seq),
            // After a marker the seqs may jump (LOST) or restart (EPOCH).
            At::Epoch { .. } | At::Marker => None,
        };
        p += size;
    }
    links >= LINKS
}

/// Whether the aligned word at an item's start could be an EPOCH marker's
/// (its opcode and the marker flag): the scans test every word this way
/// and decode only the few that pass.
#[inline(always)]
fn maybe_epoch(word: &[u8]) -> bool {
    let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
    (w >> 32) as u16 == MARKER_EPOCH && (w >> 48) as u16 & HMB_RECORD_FLAG_MARKER != 0
}

/// An EPOCH marker at `pos`, decoded, and its size.
fn epoch_at(bytes: &[u8], pos: usize) -> Option<((u64, u64), usize)> {
    match item_at(bytes, pos)? {
        (At::Epoch { epoch, ring_size }, size) => Some(((epoch, ring_size), size)),
        _ => None,
    }
}

/// The last EPOCH marker starting in `lo..hi` (both aligned): where it
/// ends, and its epoch and ring size.
fn last_epoch(bytes: &[u8], lo: usize, mut hi: usize) -> Option<(usize, (u64, u64))> {
    while hi > lo {
        let k = bytes[lo..hi].chunks_exact(ALIGN).rposition(maybe_epoch)?;
        let q = lo + k * ALIGN;
        if let Some((e, size)) = epoch_at(bytes, q) {
            return Some((q + size, e));
        }
        hi = q;
    }
    None
}

/// The first EPOCH marker starting in `lo..hi` (both aligned) after which
/// a chain of items decodes (`chain_from`).
fn first_epoch(bytes: &[u8], mut lo: usize, hi: usize) -> Option<usize> {
    while lo < hi {
        let k = bytes[lo..hi].chunks_exact(ALIGN).position(maybe_epoch)?;
        let m = lo + k * ALIGN;
        if epoch_at(bytes, m).is_some_and(|(_, size)| chain_from(bytes, m + size)) {
            return Some(m);
        }
        lo = m + ALIGN;
    }
    None
}

/// From the item at `pos` (in `epoch`) to the first record: the boundary,
/// following EPOCH markers on the way.
fn first_record(bytes: &[u8], mut pos: usize, mut epoch: (u64, u64)) -> Option<Boundary> {
    for _ in 0..MAX_MARKERS {
        match item_at(bytes, pos)? {
            (At::Record { .. }, _) => {
                return Some(Boundary {
                    offset: pos as u64,
                    epoch: epoch.0,
                    ring_size: epoch.1,
                })
            }
            (At::Epoch { epoch: e, ring_size }, size) => {
                epoch = (e, ring_size);
                pos += size;
            }
            (At::Marker, size) => pos += size,
        }
    }
    None
}

/// The boundary of a split aimed at `target`, found near it (module
/// comment); None when it cannot be told from there.
/// `window` is how far to look for an EPOCH marker (`window_for`; the
/// tests make it small to take every path on small files).
pub(crate) fn boundary(bytes: &[u8], header: &FileHeader, target: u64, window: usize) -> Option<Boundary> {
    let start = header.header_size as usize;
    let target = usize::try_from(target).ok()?;
    if target <= start || target >= bytes.len() {
        return None;
    }
    // Items start at `start` plus a multiple of the ring's alignment.
    let cut = start + (target - start).div_ceil(ALIGN) * ALIGN;
    let limit = cut.saturating_add(RESYNC_WINDOW).min(bytes.len());
    let p = (cut..limit).step_by(ALIGN).find(|&p| chain_from(bytes, p))?;
    // The nearest EPOCH marker before the resync point.
    let window = window / ALIGN * ALIGN;
    let lo = p.saturating_sub(window).max(start);
    match last_epoch(bytes, lo, p) {
        // A resync point inside that marker (its payload, an epoch number
        // and a ring size, can pass for a record whose seq is one below
        // the next record's): the marker's end is the item boundary.
        Some((end, e)) if end > p => first_record(bytes, end, e),
        Some((_, e)) => first_record(bytes, p, e),
        None if lo == start => first_record(bytes, p, (header.first_epoch, header.ring_size)),
        None => {
            // No epoch known at `p`: start after the next EPOCH marker.
            let hi = start + (p.saturating_add(window).min(bytes.len()) - start) / ALIGN * ALIGN;
            let m = first_epoch(bytes, p, hi)?;
            first_record(bytes, m, (header.first_epoch, header.ring_size))
        }
    }
}
