//! Statistics the reports use: nearest-rank percentiles over samples, integer
//! histograms, and log2 histograms (the shape quaverd's timing statistics come in).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The nearest-rank percentile of **sorted** samples: the smallest sample such that at
/// least `p` percent of all samples are ≤ it (`p` in 0..=100; 0 gives the minimum).
/// `None` for no samples.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    let rank = ((p.clamp(0.0, 100.0) / 100.0) * n as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// Minimum, mean, percentiles and maximum of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Smallest sample.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// 99.9th percentile (nearest rank).
    pub p999: f64,
    /// Largest sample.
    pub max: f64,
}

impl Summary {
    /// Summarizes `samples` (any order); `None` when there are none. NaNs are ignored.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut v: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        Some(Summary {
            n,
            min: v[0],
            mean: v.iter().sum::<f64>() / n as f64,
            p50: percentile(&v, 50.0)?,
            p99: percentile(&v, 99.0)?,
            p999: percentile(&v, 99.9)?,
            max: v[n - 1],
        })
    }

    /// Every statistic multiplied by `k` (unit conversion).
    pub fn scaled(&self, k: f64) -> Summary {
        Summary {
            n: self.n,
            min: self.min * k,
            mean: self.mean * k,
            p50: self.p50 * k,
            p99: self.p99 * k,
            p999: self.p999 * k,
            max: self.max * k,
        }
    }
}

/// A histogram of integer values (e.g. latencies in frames): value → count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntHist(pub BTreeMap<i64, u64>);

impl IntHist {
    /// Counts every value of `samples`.
    pub fn of(samples: impl IntoIterator<Item = i64>) -> IntHist {
        let mut h = IntHist::default();
        for s in samples {
            *h.0.entry(s).or_default() += 1;
        }
        h
    }

    /// Total count.
    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// The most frequent value (the smallest of equally frequent ones).
    pub fn mode(&self) -> Option<i64> {
        let mut best: Option<(i64, u64)> = None;
        for (&v, &c) in &self.0 {
            if best.is_none_or(|(_, bc)| c > bc) {
                best = Some((v, c));
            }
        }
        best.map(|b| b.0)
    }

    /// Bins the values into `width`-wide bins starting at multiples of `width`
    /// (for plotting wide distributions); returns (bin start, count).
    pub fn binned(&self, width: i64) -> Vec<(i64, u64)> {
        let width = width.max(1);
        let mut out: BTreeMap<i64, u64> = BTreeMap::new();
        for (&v, &c) in &self.0 {
            *out.entry(v.div_euclid(width) * width).or_default() += c;
        }
        out.into_iter().collect()
    }
}

/// Number of log2 buckets quaverd keeps (the last takes everything from 2^31 ns on).
pub const LOG2_BUCKETS: usize = 32;

/// A log2 histogram of durations in ns: bucket `i` counts `[2^i, 2^(i+1))` ns, bucket
/// 0 also counts 0, and the last of [`LOG2_BUCKETS`] counts everything longer. This is
/// the layout of quaverd's `timing` reply (trailing empty buckets may be omitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Log2Hist {
    /// Counts per bucket.
    pub counts: Vec<u64>,
}

/// Where a percentile of a [`Log2Hist`] lies: within `[lower, upper)` ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// Inclusive lower bound, ns.
    pub lower: u64,
    /// Exclusive upper bound, ns (`u64::MAX` for the open last bucket).
    pub upper: u64,
}

impl Log2Hist {
    /// The bucket of a duration.
    pub fn bucket(ns: u64) -> usize {
        ((u64::BITS - ns.leading_zeros()) as usize)
            .saturating_sub(1)
            .min(LOG2_BUCKETS - 1)
    }

    /// Lower and upper bound of bucket `i`.
    pub fn bucket_bounds(i: usize) -> Bounds {
        let lower = if i == 0 { 0 } else { 1u64 << i };
        let upper = if i >= LOG2_BUCKETS - 1 {
            u64::MAX
        } else {
            1u64 << (i + 1)
        };
        Bounds { lower, upper }
    }

    /// A histogram from counts as quaverd sends them.
    pub fn from_counts(counts: &[u64]) -> Log2Hist {
        Log2Hist {
            counts: counts.to_vec(),
        }
    }

    /// Counts one duration.
    pub fn add(&mut self, ns: u64) {
        self.add_n(ns, 1);
    }

    /// Counts a duration `n` times.
    pub fn add_n(&mut self, ns: u64, n: u64) {
        let b = Self::bucket(ns);
        if self.counts.len() <= b {
            self.counts.resize(b + 1, 0);
        }
        self.counts[b] += n;
    }

    /// Total count.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `self − earlier`, bucket by bucket (both cumulative since the same start):
    /// what happened between two snapshots.
    pub fn since(&self, earlier: &Log2Hist) -> Log2Hist {
        let counts = self
            .counts
            .iter()
            .enumerate()
            .map(|(i, &c)| c.saturating_sub(earlier.counts.get(i).copied().unwrap_or(0)))
            .collect();
        Log2Hist { counts }
    }

    /// The bucket holding the nearest-rank `p`-th percentile; `None` if empty.
    pub fn percentile(&self, p: f64) -> Option<Bounds> {
        let total = self.total();
        if total == 0 {
            return None;
        }
        let rank = (((p.clamp(0.0, 100.0) / 100.0) * total as f64).ceil() as u64).max(1);
        let mut acc = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= rank {
                return Some(Self::bucket_bounds(i));
            }
        }
        None
    }

    /// The bucket of the largest event; `None` if empty.
    pub fn max_bucket(&self) -> Option<Bounds> {
        self.counts
            .iter()
            .rposition(|&c| c > 0)
            .map(Self::bucket_bounds)
    }

    /// Events at or above `threshold_ns`, as a range: `(surely, at_most)` — the bucket
    /// holding the threshold may hold events on either side of it.
    pub fn count_at_least(&self, threshold_ns: u64) -> (u64, u64) {
        let mut surely = 0;
        let mut maybe = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            let b = Self::bucket_bounds(i);
            if b.lower >= threshold_ns {
                surely += c;
            } else if b.upper > threshold_ns {
                maybe += c;
            }
        }
        (surely, surely + maybe)
    }

    /// Converts a histogram with 1 µs bins (cyclictest's `-h`) to log2 ns buckets:
    /// an event in bin `v` lies in `[v, v+1)` µs and is counted at `v µs + 500 ns`.
    pub fn from_us_bins(bins: &[(u64, u64)]) -> Log2Hist {
        let mut h = Log2Hist::default();
        for &(us, n) in bins {
            if n > 0 {
                h.add_n(us * 1000 + 500, n);
            }
        }
        h
    }
}

/// Counters read twice: what happened in between (`self − earlier`).
pub trait Since {
    /// `self − earlier`.
    fn since(&self, earlier: &Self) -> Self;
}

impl Since for u64 {
    fn since(&self, earlier: &u64) -> u64 {
        self - earlier
    }
}

impl Since for Log2Hist {
    fn since(&self, earlier: &Log2Hist) -> Log2Hist {
        Log2Hist::since(self, earlier)
    }
}

/// Implements [`Since`] for a struct of counters, field by field.
macro_rules! since_by_field {
    ($t:ty { $($f:ident),* $(,)? }) => {
        impl $crate::report::stats::Since for $t {
            fn since(&self, earlier: &Self) -> Self {
                Self {
                    $($f: $crate::report::stats::Since::since(&self.$f, &earlier.$f)),*
                }
            }
        }
    };
}
pub(crate) use since_by_field;

/// The median: nearest rank, so the lower middle of an even count (the `p50` of
/// [`Summary`]); NaNs ignored, `None` for no samples.
pub fn median(v: &[f64]) -> Option<f64> {
    Summary::of(v).map(|s| s.p50)
}

/// The median of a few rates: the middle one, or the mean of the middle two (with two
/// windows a nearest-rank median would just be the smaller); non-finite values ignored.
pub fn midpoint_median(rates: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = rates.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// Formats nanoseconds for humans: `850 ns`, `12.3 µs`, `4.10 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return "∞".into();
    }
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Formats a log2 bucket as `< upper` (its exclusive upper bound).
pub fn fmt_bounds(b: Option<Bounds>) -> String {
    match b {
        None => "–".into(),
        Some(b) if b.upper == u64::MAX => format!("≥ {}", fmt_ns(b.lower as f64)),
        Some(b) => format!("< {}", fmt_ns(b.upper as f64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 99.9), Some(100.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 50.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
        // Four samples: the median is the 2nd (at least half are ≤ it).
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 50.0), Some(2.0));
    }

    #[test]
    fn summary_ignores_order_and_nan() {
        let s = Summary::of(&[3.0, f64::NAN, 1.0, 2.0]).unwrap();
        assert_eq!((s.n, s.min, s.p50, s.max), (3, 1.0, 2.0, 3.0));
        assert_eq!(s.mean, 2.0);
        assert!(Summary::of(&[]).is_none());
        let ms = s.scaled(1000.0);
        assert_eq!(ms.max, 3000.0);
    }

    #[test]
    fn int_hist_mode_and_bins() {
        let h = IntHist::of([5, 5, 6, 7, 7, 7, -3]);
        assert_eq!(h.total(), 7);
        assert_eq!(h.mode(), Some(7));
        assert_eq!(h.binned(4), vec![(-4, 1), (4, 6)]);
        assert_eq!(IntHist::of([1, 2]).mode(), Some(1));
        assert_eq!(IntHist::default().mode(), None);
    }

    #[test]
    fn log2_buckets_match_quaverd() {
        assert_eq!(Log2Hist::bucket(0), 0);
        assert_eq!(Log2Hist::bucket(1), 0);
        assert_eq!(Log2Hist::bucket(2), 1);
        assert_eq!(Log2Hist::bucket(1023), 9);
        assert_eq!(Log2Hist::bucket(1024), 10);
        assert_eq!(Log2Hist::bucket(u64::MAX), 31);
        assert_eq!(
            Log2Hist::bucket_bounds(10),
            Bounds {
                lower: 1024,
                upper: 2048
            }
        );
        assert_eq!(Log2Hist::bucket_bounds(0).lower, 0);
        assert_eq!(Log2Hist::bucket_bounds(31).upper, u64::MAX);
    }

    #[test]
    fn log2_percentiles_and_deltas() {
        let mut h = Log2Hist::default();
        for _ in 0..98 {
            h.add(1500); // bucket 10
        }
        h.add(5000); // bucket 12
        h.add(70_000); // bucket 16
        assert_eq!(h.total(), 100);
        assert_eq!(h.percentile(50.0).unwrap().upper, 2048);
        assert_eq!(h.percentile(99.0).unwrap().upper, 8192);
        assert_eq!(h.percentile(100.0).unwrap().upper, 131_072);
        assert_eq!(h.max_bucket().unwrap().lower, 65_536);
        let before = Log2Hist::from_counts(&[0; 11]);
        let mut later = h.clone();
        later.add(1500);
        let d = later.since(&h);
        assert_eq!(d.total(), 1);
        assert_eq!(h.since(&before), h);
        assert_eq!(Log2Hist::default().percentile(50.0), None);
        // Threshold inside bucket 12 [4096, 8192): the 5000 ns event may or may not
        // count; the 70 µs one surely does.
        assert_eq!(h.count_at_least(6000), (1, 2));
        assert_eq!(h.count_at_least(4096), (2, 2));
    }

    #[test]
    fn cyclictest_bins_convert() {
        let h = Log2Hist::from_us_bins(&[(0, 1), (3, 2), (20, 5), (21, 0)]);
        // 0 µs → 500 ns (bucket 8); 3 µs → 3500 ns (bucket 11); 20 µs → 20500 (bucket 14).
        assert_eq!(h.counts[8], 1);
        assert_eq!(h.counts[11], 2);
        assert_eq!(h.counts[14], 5);
        assert_eq!(h.total(), 8);
    }

    #[test]
    fn formats_durations() {
        assert_eq!(fmt_ns(850.0), "850 ns");
        assert_eq!(fmt_ns(12_345.0), "12.3 µs");
        assert_eq!(fmt_ns(4_100_000.0), "4.10 ms");
        assert_eq!(fmt_ns(1.2e9), "1.20 s");
        assert_eq!(fmt_bounds(None), "–");
        assert_eq!(fmt_bounds(Some(Log2Hist::bucket_bounds(10))), "< 2.0 µs");
        assert_eq!(fmt_bounds(Some(Log2Hist::bucket_bounds(31))), "≥ 2.15 s");
    }
}
