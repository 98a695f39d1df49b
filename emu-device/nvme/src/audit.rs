//! The controller's own data in its HMB, and the host-write detector (issues 26 and 27).
//!
//! A DRAM-less SSD keeps private state (its mapping cache) in the HMB and trusts it: the
//! NVMe base specification forbids the host to write an enabled HMB, and Memory Return
//! (MR=1) promises that the contents are what the controller left there. So this model keeps
//! a deterministic pseudo-L2P pattern in every HMB page it owns and remembers a 64-bit hash
//! of each. It checks every owned page
//! - when it loses the HMB (EHM=0, CC.EN 1->0, shutdown, CFS, transport reset): a page that
//!   differs was written by the host while the HMB was enabled;
//! - when the same buffer comes back (MR=1, same descriptor list): a page that differs was
//!   written while the HMB was released, which MR=1 says did not happen.
//!
//! Either is a host-write violation: counted, its offset kept (the first 16), logged, and
//! the page's new contents taken as the baseline, so each write is counted once.
//!
//! Which pages are the controller's. A controller that does not declare the trace contract
//! owns the whole HMB from the enable. One that declares it (docs/abi.md decision 9) may
//! adopt part of the HMB as a slice shared with the host, and the host writes that slice's
//! header before the advert (Set Features C0h, the command right after 0Dh in the driver's
//! order at probe). So it waits: the advert adopted, it owns every page outside the slice;
//! any admin command other than a vendor-specific Set/Get Features first, it owns the whole HMB
//! (I/O does not end the wait: it keeps flowing when the host re-enables the HMB at run
//! time, through sysfs `hmb`, and adverts right after)
//! (a refused advert keeps it waiting, so the host may retry). The shared slice stays shared across MR=1 re-enables (the host marks
//! it FROZEN and re-initialises it there) until a fresh buffer (MR=0 or another list). An
//! advert refused later (at re-initialisation) ends the sharing: the controller takes the
//! slice's pages as they are, and any later host write there is a violation (issue 26:
//! a refused slice is never written again).

use serde::Serialize;

use crate::hmb::HmbAttributes;
use crate::{HmbDescriptor, HostMemoryBuffer, Status};

const PAGE: u64 = 4096;
/// Violations and commands kept in the report (the counters count them all).
const KEEP_VIOLATIONS: usize = 16;
const KEEP_COMMANDS: usize = 64;

/// When the host wrote: which check found the page changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuditPhase {
    /// Found when the controller lost the HMB: written while it was enabled.
    WhileEnabled,
    /// Found at an MR=1 re-enable: written while the HMB was released.
    WhileReleased,
}

/// One controller-private page the host changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HmbViolation {
    /// Offset of the 4 KiB page in the HMB view (chunks end to end in list order).
    pub offset: u64,
    pub phase: AuditPhase,
}

/// Descriptors of one size in a Set Features 0Dh list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ChunkSizes {
    pub bytes: u64,
    pub count: u32,
}

/// A Set Features 0Dh as the controller saw it (the differential test compares these
/// between the stock driver and the series' driver).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SetHmbSeen {
    pub ehm: bool,
    pub mr: bool,
    /// HSIZE in bytes.
    pub bytes: u64,
    /// HMDLEC.
    pub descriptors: u32,
    /// Descriptor sizes, largest first (empty when the list was not read: EHM=0 or a
    /// rejected list).
    pub chunk_sizes: Vec<ChunkSizes>,
    /// The command's status ("sct 0x0 sc 0x00" = success).
    pub status: String,
    /// Enabled with MR=1 and the same list as before.
    pub returned: bool,
}

/// A vendor-specific (C0h..FFh) Set or Get Features as the controller saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VendorFeatureSeen {
    pub fid: u8,
    pub set: bool,
    pub status: String,
}

/// A range of the HMB view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HmbRange {
    pub offset: u64,
    pub len: u64,
}

/// What the detector has seen (the control socket's `hmb-audit`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HmbAuditReport {
    /// HMB enables (Set Features 0Dh EHM=1 that succeeded).
    pub enables: u64,
    /// Of those, the ones that returned the previous buffer (MR=1, same list).
    pub mr_reenables: u64,
    /// Checks run (one per loss of the HMB and per MR=1 re-enable).
    pub checks: u64,
    /// Controller-private pages compared, summed over every check.
    pub pages_checked: u64,
    /// Pages found changed by the host, summed over every check.
    pub violations: u64,
    /// The first violations found.
    pub first_violations: Vec<HmbViolation>,
    /// Pages the controller could not read or write (guest memory unmapped under it).
    pub unreadable_pages: u64,
    /// Pages the controller owns now.
    pub private_pages: u64,
    /// The slice shared with the host (adopted advert), if any.
    pub shared_slice: Option<HmbRange>,
    /// A contract-declaring controller waiting for the advert before it claims the HMB.
    pub claim_pending: bool,
    /// Every Set Features 0Dh (the first 64).
    pub set_features_0d: Vec<SetHmbSeen>,
    pub set_features_0d_total: u64,
    /// Every vendor-specific Set/Get Features (the first 64).
    pub vendor_features: Vec<VendorFeatureSeen>,
    pub vendor_feature_commands: u64,
    /// Any Set or Get Features with FID C0h arrived.
    pub c0h_received: bool,
}

/// The detector's state. Lives in the controller; every method is called with the HMB
/// while it is still enabled.
#[derive(Debug, Default)]
pub(crate) struct HmbAudit {
    /// Expected hash per HMB page (index = offset / 4 KiB); None: not the controller's.
    owned: Vec<Option<u64>>,
    shared: Option<(u64, u64)>,
    pending: bool,
    report: HmbAuditReport,
}

impl HmbAudit {
    pub(crate) fn report(&self) -> HmbAuditReport {
        let mut r = self.report.clone();
        r.private_pages = self.owned.iter().filter(|p| p.is_some()).count() as u64;
        r.shared_slice = self.shared.map(|(offset, len)| HmbRange { offset, len });
        r.claim_pending = self.pending;
        r
    }

    pub(crate) fn note_set_hmb(
        &mut self,
        bits: u32,
        attrs: &HmbAttributes,
        descs: Option<&[HmbDescriptor]>,
        status: Status,
        returned: bool,
    ) {
        self.report.set_features_0d_total += 1;
        if self.report.set_features_0d.len() >= KEEP_COMMANDS {
            return;
        }
        let mut sizes: Vec<ChunkSizes> = Vec::new();
        for d in descs.unwrap_or_default() {
            match sizes.iter_mut().find(|s| s.bytes == d.bytes) {
                Some(s) => s.count += 1,
                None => sizes.push(ChunkSizes {
                    bytes: d.bytes,
                    count: 1,
                }),
            }
        }
        sizes.sort_by_key(|s| std::cmp::Reverse(s.bytes));
        self.report.set_features_0d.push(SetHmbSeen {
            ehm: bits & 1 != 0,
            mr: bits & 2 != 0,
            bytes: u64::from(attrs.hsize) * PAGE,
            descriptors: attrs.entries,
            chunk_sizes: sizes,
            status: status.to_string(),
            returned,
        });
    }

    pub(crate) fn note_vendor_feature(&mut self, fid: u8, set: bool, status: Status) {
        self.report.vendor_feature_commands += 1;
        self.report.c0h_received |= fid == 0xC0;
        if self.report.vendor_features.len() < KEEP_COMMANDS {
            self.report.vendor_features.push(VendorFeatureSeen {
                fid,
                set,
                status: status.to_string(),
            });
        }
    }

    /// The HMB was just enabled. `defer`: the controller declares the trace contract and
    /// waits for the advert before it claims a fresh buffer.
    pub(crate) fn enabled(&mut self, hmb: &HostMemoryBuffer, defer: bool) {
        self.report.enables += 1;
        let pages = (hmb.len() / PAGE) as usize;
        if hmb.returned() && self.owned.len() == pages {
            self.report.mr_reenables += 1;
            self.check(hmb, AuditPhase::WhileReleased);
            return;
        }
        // A fresh buffer: the host owned it while released and says nothing was kept.
        self.owned = vec![None; pages];
        self.shared = None;
        self.pending = defer;
        if !defer {
            self.claim_rest(hmb);
        }
    }

    /// The controller is about to stop touching the HMB.
    pub(crate) fn losing(&mut self, hmb: &HostMemoryBuffer) {
        self.check(hmb, AuditPhase::WhileEnabled);
    }

    /// Is a claim waiting for the advert?
    pub(crate) fn pending(&self) -> bool {
        self.pending
    }

    /// A command other than the advert arrived while the claim waited: no slice is shared,
    /// the whole HMB is the controller's.
    pub(crate) fn no_advert(&mut self, hmb: &HostMemoryBuffer) {
        if self.pending {
            self.pending = false;
            self.claim_rest(hmb);
        }
    }

    /// The outcome of an advert (Set Features of the contract's FID with the HMB enabled):
    /// `adopted` = the slice now shared, if it succeeded with one; `refused` = it failed.
    pub(crate) fn advert(&mut self, hmb: &HostMemoryBuffer, refused: bool, adopted: Option<(u64, u64)>) {
        if refused {
            // At probe the host may retry; later the slice is dead: the controller's now.
            if !self.pending {
                if let Some((offset, len)) = self.shared.take() {
                    self.take_as_is(hmb, offset, len);
                }
            }
            return;
        }
        let Some((offset, len)) = adopted else {
            return; // a withdrawal: the slice stays the host's
        };
        if !self.pending {
            // Pages the controller owned that the slice now covers: the host wrote the
            // header there before the advert, so check them before letting go.
            if page_range(offset, len, self.owned.len()).any(|p| self.owned[p].is_some()) {
                self.check_range(hmb, offset, len, AuditPhase::WhileEnabled);
            }
            for p in page_range(offset, len, self.owned.len()) {
                self.owned[p] = None;
            }
        }
        self.shared = Some((offset, len));
        if self.pending {
            self.pending = false;
            self.claim_rest(hmb);
        }
    }

    /// The map cache (map_cache.rs) wrote its page at `offset`, whose hash is now `hash`
    /// (hmb-ftl's `page_checksum` is this module's `hash_page`): the baseline follows, so
    /// the controller's own writes are never violations.
    pub(crate) fn rebaseline(&mut self, offset: u64, hash: u64) {
        if let Some(Some(h)) = self.owned.get_mut((offset / PAGE) as usize) {
            *h = hash;
        }
    }

    /// A host write the map cache found at a use of its page (`hash`: what the page holds
    /// now, the new baseline, so the check at the loss does not count it again).
    pub(crate) fn cache_violation(&mut self, offset: u64, hash: u64) {
        self.rebaseline(offset, hash);
        self.report.violations += 1;
        if self.report.first_violations.len() < KEEP_VIOLATIONS {
            self.report.first_violations.push(HmbViolation {
                offset,
                phase: AuditPhase::WhileEnabled,
            });
        }
        log::warn!("nvme: the host changed the map cache page at HMB offset {offset:#x}: host-write violation");
    }

    /// Offsets of the first `max` pages the controller owns: the HMB's cache part.
    pub(crate) fn owned_pages(&self, max: usize) -> Vec<u64> {
        (0..self.owned.len())
            .filter(|&p| self.owned[p].is_some())
            .take(max)
            .map(|p| p as u64 * PAGE)
            .collect()
    }

    fn is_shared(&self, page: usize) -> bool {
        let at = page as u64 * PAGE;
        self.shared.is_some_and(|(o, l)| at + PAGE > o && at < o + l)
    }

    /// Write the pattern into every page that is neither owned nor shared, and own it.
    fn claim_rest(&mut self, hmb: &HostMemoryBuffer) {
        let mut buf = [0u8; PAGE as usize];
        for p in 0..self.owned.len() {
            if self.owned[p].is_some() || self.is_shared(p) {
                continue;
            }
            fill_page(p as u64, &mut buf);
            if hmb.write_at(p as u64 * PAGE, &buf).is_ok() {
                self.owned[p] = Some(hash_page(&buf));
            } else {
                self.report.unreadable_pages += 1;
            }
        }
    }

    /// Own the pages of [offset, offset+len) with the contents they have now.
    fn take_as_is(&mut self, hmb: &HostMemoryBuffer, offset: u64, len: u64) {
        let mut buf = [0u8; PAGE as usize];
        for p in page_range(offset, len, self.owned.len()) {
            if hmb.read_at(p as u64 * PAGE, &mut buf).is_ok() {
                self.owned[p] = Some(hash_page(&buf));
            } else {
                self.report.unreadable_pages += 1;
            }
        }
    }

    fn check(&mut self, hmb: &HostMemoryBuffer, phase: AuditPhase) {
        self.check_range(hmb, 0, self.owned.len() as u64 * PAGE, phase);
    }

    fn check_range(&mut self, hmb: &HostMemoryBuffer, offset: u64, len: u64, phase: AuditPhase) {
        let mut buf = [0u8; PAGE as usize];
        let (mut checked, mut changed, mut first) = (0u64, 0u64, None);
        for p in page_range(offset, len, self.owned.len()) {
            let Some(want) = self.owned[p] else { continue };
            let at = p as u64 * PAGE;
            if hmb.read_at(at, &mut buf).is_err() {
                self.report.unreadable_pages += 1;
                continue;
            }
            checked += 1;
            if hash_page(&buf) == want {
                continue;
            }
            changed += 1;
            first.get_or_insert(at);
            if self.report.first_violations.len() < KEEP_VIOLATIONS {
                self.report.first_violations.push(HmbViolation { offset: at, phase });
            }
            // The new contents become the baseline, so each host write is counted once and
            // what the host wrote stays visible to tests (a firmware with real map pages
            // would drop this one and re-read it from NAND, issue 27).
            self.owned[p] = Some(hash_page(&buf));
        }
        self.report.checks += 1;
        self.report.pages_checked += checked;
        self.report.violations += changed;
        let when = match phase {
            AuditPhase::WhileEnabled => "losing the HMB",
            AuditPhase::WhileReleased => "at the MR=1 re-enable",
        };
        match first {
            Some(at) => log::warn!(
                "nvme: HMB audit {when}: the host changed {changed} of {checked} controller-private pages \
                 (first at HMB offset {at:#x}): host-write violation"
            ),
            None => log::info!("nvme: HMB audit {when}: {checked} controller-private pages unchanged"),
        }
    }
}

/// Page indexes (below `pages`) that [offset, offset+len) touches.
fn page_range(offset: u64, len: u64, pages: usize) -> std::ops::Range<usize> {
    let first = (offset / PAGE).min(pages as u64) as usize;
    let end = offset.saturating_add(len).div_ceil(PAGE).min(pages as u64) as usize;
    first..end.max(first)
}

/// The controller's private data in page `page` of the HMB view: pseudo-L2P entries, a
/// different 8-byte value in every word of every page (so a host write of almost anything
/// changes the page).
pub(crate) fn fill_page(page: u64, buf: &mut [u8; PAGE as usize]) {
    let mut x = page.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x4c32_5020_6d61_7021;
    for w in buf.chunks_exact_mut(8) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        w.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
}

/// hmb-ftl's map-page checksum (FNV-1a in lanes): one function, so the audit's baseline of
/// a map-cache slot is the cache's own checksum. A change in one word always changes it.
pub(crate) fn hash_page(buf: &[u8; PAGE as usize]) -> u64 {
    hmb_ftl::page_checksum(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_changed_byte_changes_the_hash_and_pages_differ() {
        let mut a = [0u8; 4096];
        fill_page(7, &mut a);
        let h = hash_page(&a);
        for at in [0usize, 1, 2047, 4095] {
            let mut b = a;
            b[at] ^= 1;
            assert_ne!(hash_page(&b), h, "byte {at}");
        }
        let mut other = [0u8; 4096];
        fill_page(8, &mut other);
        assert_ne!(other, a);
        assert_ne!(hash_page(&[0u8; 4096]), hash_page(&a));
    }

    #[test]
    fn page_ranges_cover_partial_pages_and_stop_at_the_end() {
        assert_eq!(page_range(0, 4096, 10), 0..1);
        assert_eq!(page_range(4095, 2, 10), 0..2);
        assert_eq!(page_range(8 * 4096, 8 * 4096, 10), 8..10);
        assert_eq!(page_range(u64::MAX - 5, 100, 10), 10..10);
        assert_eq!(page_range(4096, 0, 10), 1..1);
    }
}
