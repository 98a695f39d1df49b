//! The counts of one latency series: the HDR histogram's buckets
//! (`hdrhistogram`, 1 ns to [`MAX_NS`], 2 significant digits), recorded
//! into `u32` counts (half the footprint of the crate's `u64` ones: most
//! of `stats`' time was these arrays' cache misses) and turned into the
//! crate's histogram for percentiles and merges.
//!
//! Exact: a count that would pass `u32::MAX` is moved into a `u64`
//! histogram of the same layout first (`spill`), and [`Counts::to_hdr`]
//! records each bucket's count at that bucket's lowest value, which the
//! crate files in the same bucket, so the result has the same counts (and
//! so the same percentiles, maximum and iteration) as recording every value
//! into the crate's histogram.

use hdrhistogram::Histogram;

use super::MAX_NS;

/// log2 of the buckets' half size: 2 significant digits need 200 values at
/// unit resolution, so 256 sub-buckets (`hdrhistogram::Histogram::new_with_bounds`).
const HALF_MAGNITUDE: u32 = 7;
const SUB_BUCKET_MASK: u64 = (1 << (HALF_MAGNITUDE + 1)) - 1;
/// 64 − unit magnitude (0: the lowest value is 1) − sub-bucket magnitude.
const LEADING_ZERO_BASE: u32 = 64 - (HALF_MAGNITUDE + 1);
/// Buckets up to [`MAX_NS`]: the index of its value, plus one.
const LEN: usize = index_of(MAX_NS) + 1;

/// The crate's bucket index of `v` (`Histogram::index_for` for these
/// bounds): `v` in 1..=MAX_NS.
#[inline(always)]
const fn index_of(v: u64) -> usize {
    let bucket = LEADING_ZERO_BASE - (v | SUB_BUCKET_MASK).leading_zeros();
    let sub = (v >> bucket) as usize;
    ((bucket as usize + 1) << HALF_MAGNITUDE) + sub - (1 << HALF_MAGNITUDE)
}

/// The lowest value of bucket `i` (`Histogram::value_for`).
fn value_of(i: usize) -> u64 {
    let half = 1usize << HALF_MAGNITUDE;
    let bucket = (i >> HALF_MAGNITUDE) as i64 - 1;
    let sub = (i & (half - 1)) + half;
    if bucket < 0 {
        (sub - half) as u64
    } else {
        (sub as u64) << bucket
    }
}

/// The crate's histogram for these bounds.
pub(crate) fn empty_hdr() -> Histogram<u64> {
    // 1 <= 2 * 1 <= MAX_NS and 2 digits: valid bounds, cannot fail.
    Histogram::new_with_bounds(1, MAX_NS, 2).expect("valid histogram bounds")
}

#[derive(Clone)]
pub(crate) struct Counts {
    counts: Box<[u32]>,
    /// Counts moved out before they would overflow.
    spill: Option<Box<Histogram<u64>>>,
}

impl Counts {
    pub(crate) fn new() -> Self {
        Self {
            counts: vec![0u32; LEN].into_boxed_slice(),
            spill: None,
        }
    }

    /// Count `v` (already clamped to 1..=MAX_NS).
    #[inline(always)]
    pub(crate) fn record(&mut self, v: u64) {
        debug_assert!((1..=MAX_NS).contains(&v));
        let i = index_of(v);
        let Some(c) = self.counts.get_mut(i) else {
            return;
        };
        if *c == u32::MAX {
            self.spill_one(i);
            self.counts[i] = 1;
        } else {
            *c += 1;
        }
    }

    #[cold]
    fn spill_one(&mut self, i: usize) {
        let n = std::mem::take(&mut self.counts[i]);
        self.spill
            .get_or_insert_with(|| Box::new(empty_hdr()))
            .saturating_record_n(value_of(i), n as u64);
    }

    /// Add `other`'s counts.
    pub(crate) fn add(&mut self, other: &Counts) {
        // Nearly always nothing overflows: then one pass the compiler
        // vectorises (the per-bucket overflow branch below kept it from
        // doing so: 2.4 instructions per record of the bench trace went
        // into this merge).
        let overflows = self
            .counts
            .iter()
            .zip(other.counts.iter())
            .fold(false, |any, (&a, &b)| any | a.checked_add(b).is_none());
        if !overflows {
            for (a, &b) in self.counts.iter_mut().zip(other.counts.iter()) {
                *a += b;
            }
        } else {
            self.add_spilling(other);
        }
        if let Some(s) = &other.spill {
            let mine = self.spill.get_or_insert_with(|| Box::new(empty_hdr()));
            // Same bounds and precision: cannot fail.
            let _ = mine.add(&**s);
        }
    }

    /// `add`'s counts where some bucket's sum passes `u32::MAX`: that
    /// bucket's count moves to the spill first.
    #[cold]
    fn add_spilling(&mut self, other: &Counts) {
        for i in 0..LEN {
            let (sum, overflow) = self.counts[i].overflowing_add(other.counts[i]);
            if overflow {
                self.spill_one(i);
                self.counts[i] = other.counts[i];
            } else {
                self.counts[i] = sum;
            }
        }
    }

    /// The count and `Histogram::value_at_quantile` of each of `qs`
    /// (ascending, in 0..=1), read from these counts in one pass: what
    /// `to_hdr` then the crate give, without making the crate's histogram
    /// (a 36 KB array zeroed and filled per series: `stats`' output on the
    /// calling thread, ~9 M instructions on the bench trace). None once
    /// counts have spilled (then `to_hdr`).
    pub(crate) fn quantiles<const N: usize>(&self, qs: [f64; N]) -> Option<(u64, [u64; N])> {
        if self.spill.is_some() {
            return None;
        }
        let total: u64 = self.counts.iter().map(|&n| n as u64).sum();
        let mut out = [0u64; N];
        let (mut at, mut seen) = (0usize, 0u64);
        for (o, &q) in out.iter_mut().zip(&qs) {
            // The crate's target, to the float rounding.
            let q = if q > 1.0 { 1.0 } else { q };
            let target = ((q * total as f64).ceil() as u64).max(1);
            // Targets ascend: the first bucket whose running count reaches
            // this one is at or after the last one's.
            while seen < target && at < LEN {
                seen += self.counts[at] as u64;
                at += 1;
            }
            if seen < target {
                // Never reached (no counts): the crate's 0.
                continue;
            }
            let low = value_of(at - 1);
            *o = if q == 0.0 {
                low
            } else {
                low + (1u64 << ((at - 1) >> HALF_MAGNITUDE).saturating_sub(1)) - 1
            };
        }
        Some((total, out))
    }

    /// The crate's histogram with these counts.
    pub(crate) fn to_hdr(&self) -> Histogram<u64> {
        let mut h = self.spill.as_deref().cloned().unwrap_or_else(empty_hdr);
        for (i, &n) in self.counts.iter().enumerate() {
            if n > 0 {
                h.saturating_record_n(value_of(i), n as u64);
            }
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same(a: &Histogram<u64>, b: &Histogram<u64>) {
        assert_eq!(a.len(), b.len());
        assert_eq!(a.max(), b.max());
        assert_eq!(a.min_nz(), b.min_nz());
        let ra: Vec<(u64, u64)> = a
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        let rb: Vec<(u64, u64)> = b
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect();
        assert_eq!(ra, rb);
        for q in [0.0, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(a.value_at_quantile(q), b.value_at_quantile(q), "q {q}");
        }
    }

    /// Every power of two and its neighbours, every value up to 4 096, and
    /// pseudo-random values of every magnitude: the same histogram as the
    /// crate's own recording.
    #[test]
    fn same_buckets_as_the_crate() {
        let mut values: Vec<u64> = (1..=4096).collect();
        for b in 0..=40 {
            let p = 1u64 << b;
            values.extend([p.saturating_sub(1).max(1), p, (p + 1).min(MAX_NS)]);
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push((x >> (24 + x % 40)).clamp(1, MAX_NS));
        }
        let mut crate_hist = empty_hdr();
        let mut mine = Counts::new();
        for &v in &values {
            crate_hist.saturating_record(v);
            mine.record(v);
            assert_eq!(value_of(index_of(v)), crate_hist.lowest_equivalent(v), "value {v}");
        }
        same(&crate_hist, &mine.to_hdr());
        // Added to another: counts add as the crate's do.
        let mut other = Counts::new();
        other.record(MAX_NS);
        other.add(&mine);
        crate_hist.saturating_record(MAX_NS);
        same(&crate_hist, &other.to_hdr());
    }

    /// `quantiles` against the crate's `len` and `value_at_quantile` on
    /// the histogram `to_hdr` makes: empty, one value, every bucket's edges,
    /// pseudo-random values of every magnitude, at quantiles from 0 to
    /// past 1; and None once a count spilled.
    #[test]
    fn quantiles_as_the_crate() {
        const QS: [f64; 9] = [0.0, 1e-9, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0, 1.5];
        let check = |c: &Counts| {
            let h = c.to_hdr();
            let (n, got) = c.quantiles(QS).expect("no spill");
            assert_eq!(n, h.len());
            for (q, g) in QS.iter().zip(got) {
                assert_eq!(g, h.value_at_quantile(*q), "q {q}, {n} values");
            }
        };
        let mut c = Counts::new();
        check(&c);
        c.record(MAX_NS);
        check(&c);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..200u64 {
            let mut c = Counts::new();
            for i in 0..(round * 37 % 1000 + 1) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let v = if i % 5 == 0 {
                    let p = 1u64 << (x % 41);
                    [p.saturating_sub(1).max(1), p, p + 1][(x % 3) as usize].min(MAX_NS)
                } else {
                    (x >> (24 + x % 40)).clamp(1, MAX_NS)
                };
                c.record(v);
            }
            check(&c);
        }
        let mut s = Counts::new();
        s.counts[index_of(1000)] = u32::MAX;
        s.record(1000);
        assert!(s.quantiles(QS).is_none());
    }

    /// A count past `u32::MAX` is kept exactly (through the spill), both
    /// when recorded and when added.
    #[test]
    fn counts_past_u32_are_exact() {
        let mut a = Counts::new();
        a.counts[index_of(1000)] = u32::MAX - 1;
        a.record(1000);
        a.record(1000);
        a.record(1000);
        assert_eq!(a.to_hdr().count_at(1000), u32::MAX as u64 + 2);
        let mut b = Counts::new();
        b.counts[index_of(1000)] = u32::MAX;
        b.add(&a);
        assert_eq!(b.to_hdr().count_at(1000), 2 * u32::MAX as u64 + 2);
        assert_eq!(b.to_hdr().len(), 2 * u32::MAX as u64 + 2);
    }

    /// `add` without an overflow (the vectorised pass) and with one in a
    /// single bucket (the spilling pass) gives every bucket's sum.
    #[test]
    fn add_sums_every_bucket() {
        let (mut a, mut b) = (Counts::new(), Counts::new());
        for v in (1..2_000_000u64).step_by(997) {
            a.record(v);
            b.record(v / 3 + 1);
            b.record(v);
        }
        let mut want = a.to_hdr();
        want.add(b.to_hdr()).unwrap();
        let mut sum = a.clone();
        sum.add(&b);
        same(&sum.to_hdr(), &want);
        // One bucket past `u32::MAX`: it spills, the others still add.
        let big = index_of(5000);
        a.counts[big] = u32::MAX - 3;
        b.counts[big] = 10;
        let mut want = a.to_hdr();
        want.add(b.to_hdr()).unwrap();
        a.add(&b);
        same(&a.to_hdr(), &want);
        assert_eq!(a.to_hdr().count_at(5000), u32::MAX as u64 + 7);
    }
}
