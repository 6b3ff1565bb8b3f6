//! A distribution of durations in bounded memory, for the percentile lines of `INFO lock`
//! (`lock_wait_usec`, `lock_hold_usec`), printed as the server prints `INFO latencystats`.
//!
//! Log-linear buckets, as HdrHistogram keeps them: every value below `SUB` has a bucket
//! of its own, and each power of two above is cut into `SUB` buckets of equal width, so a
//! percentile is off by at most 1/`SUB` (1.6%) of its value. Values past `MAX` (about 12.7
//! days in microseconds) count in the last bucket. The buckets are atomics so that a
//! sample may come from any thread (the server may free a lock value on its lazy-free
//! thread); each record is one relaxed add.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits of precision below the leading one: each power of two has `SUB` buckets.
const SUB_BITS: u32 = 6;
/// Buckets per power of two, and the values kept exactly.
const SUB: u64 = 1 << SUB_BITS;
/// The largest power of two a bucket starts below: larger values count as `MAX`.
const TOP_BIT: u32 = 40;
/// The largest value told apart.
pub const MAX: u64 = (1 << TOP_BIT) - 1;
/// How many buckets: the exact ones, then `SUB` for each power of two from `SUB` up.
const BUCKETS: usize = (SUB + (TOP_BIT - SUB_BITS) as u64 * SUB) as usize;

/// A distribution of values (microseconds), safe to record into from any thread.
#[derive(Debug)]
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::new()
    }
}

/// The bucket of `value`.
fn bucket_of(value: u64) -> usize {
    let value = value.min(MAX);
    if value < SUB {
        return value as usize;
    }
    let top = 63 - value.leading_zeros(); // SUB_BITS ..= TOP_BIT - 1
    let shift = top - SUB_BITS;
    let sub = (value >> shift) - SUB; // 0 ..= SUB - 1
    (SUB + u64::from(shift) * SUB + sub) as usize
}

/// The value a bucket stands for: the middle of the values it holds (exact below `SUB`).
fn value_of(bucket: usize) -> f64 {
    let bucket = bucket as u64;
    if bucket < SUB {
        return bucket as f64;
    }
    let shift = (bucket - SUB) / SUB;
    let sub = (bucket - SUB) % SUB;
    let low = (SUB + sub) << shift;
    let width = 1u64 << shift;
    low as f64 + (width - 1) as f64 / 2.0
}

impl Histogram {
    /// An empty distribution (its buckets take `heap_bytes()`, allocated here).
    pub fn new() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one value.
    #[inline]
    pub fn record(&self, value: u64) {
        self.buckets[bucket_of(value)].fetch_add(1, Ordering::Relaxed);
    }

    /// Forgets every value (`CONFIG RESETSTAT`).
    pub fn reset(&self) {
        for bucket in self.buckets.iter() {
            bucket.store(0, Ordering::Relaxed);
        }
    }

    /// How many values it holds.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// The values at each of `percentiles` (0 to 100, ascending), as the smallest value
    /// that that share of the values is at or below; 0 for each while it holds none.
    pub fn percentiles<const N: usize>(&self, percentiles: [f64; N]) -> [f64; N] {
        let counts: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        let mut found = [0.0; N];
        if total == 0 {
            return found;
        }
        let mut next = 0;
        let mut seen = 0u64;
        for (bucket, &count) in counts.iter().enumerate() {
            seen += count;
            while next < N && seen >= rank(percentiles[next], total) {
                found[next] = value_of(bucket);
                next += 1;
            }
            if next == N {
                break;
            }
        }
        found
    }

    /// The bytes its buckets take on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.buckets.len() * size_of::<AtomicU64>()
    }
}

/// How many of `total` values lie at or below the `percentile`th: at least one. (A hair
/// below the exact product before rounding up, so that 99.9% of 1,000 is 999 whatever
/// the binary fraction of 99.9.)
fn rank(percentile: f64, total: u64) -> u64 {
    ((percentile * total as f64 / 100.0 - 1e-9).ceil() as u64).clamp(1, total)
}

/// `p50=..,p99=..,p99.9=..` of `histogram`, three decimals each, as the server prints
/// `INFO latencystats`; `p50=0,p99=0,p99.9=0` while it holds no value (the contract's
/// words for a distribution without a sample).
pub fn latency_line(histogram: &Histogram) -> String {
    if histogram.count() == 0 {
        return "p50=0,p99=0,p99.9=0".to_string();
    }
    let [p50, p99, p999] = histogram.percentiles([50.0, 99.0, 99.9]);
    format!("p50={p50:.3},p99={p99:.3},p99.9={p999:.3}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_distribution_prints_zeroes() {
        let h = Histogram::new();
        assert_eq!(latency_line(&h), "p50=0,p99=0,p99.9=0");
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn small_values_are_exact() {
        let h = Histogram::new();
        for v in 1..=63 {
            h.record(v);
        }
        let [p50, p100] = h.percentiles([50.0, 100.0]);
        assert_eq!(p50, 32.0);
        assert_eq!(p100, 63.0);
    }

    #[test]
    fn every_value_lands_within_its_precision() {
        for value in [64, 65, 100, 1_000, 12_345, 999_999, 1 << 30, MAX] {
            let h = Histogram::new();
            h.record(value);
            let [p] = h.percentiles([50.0]);
            let error = (p - value as f64).abs() / value as f64;
            assert!(error <= 1.0 / SUB as f64, "{value} read back as {p}");
        }
    }

    #[test]
    fn buckets_are_ordered_and_within_bounds() {
        let mut last = 0;
        for value in (0..20_000).chain([MAX - 1, MAX, MAX + 1, u64::MAX]) {
            let bucket = bucket_of(value);
            assert!(bucket < BUCKETS, "{value} -> {bucket}");
            assert!(bucket >= last || value > MAX, "{value} went back");
            last = bucket;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn percentiles_follow_the_ranks() {
        let h = Histogram::new();
        // 990 fast values, 9 slow, 1 slowest: p50 fast, p99 fast, p99.9 slow.
        for _ in 0..990 {
            h.record(10);
        }
        for _ in 0..9 {
            h.record(5_000);
        }
        h.record(900_000);
        let [p50, p99, p999, p100] = h.percentiles([50.0, 99.0, 99.9, 100.0]);
        assert_eq!((p50, p99), (10.0, 10.0));
        assert!((p999 - 5_000.0).abs() < 5_000.0 / 64.0, "{p999}");
        assert!((p100 - 900_000.0).abs() < 900_000.0 / 64.0, "{p100}");
        assert_eq!(h.count(), 1_000);
    }

    #[test]
    fn reset_forgets_everything() {
        let h = Histogram::new();
        h.record(7);
        h.reset();
        assert_eq!(h.count(), 0);
        assert_eq!(latency_line(&h), "p50=0,p99=0,p99.9=0");
        h.record(1);
        assert_eq!(latency_line(&h), "p50=1.000,p99=1.000,p99.9=1.000");
    }

    #[test]
    fn memory_is_bounded() {
        assert_eq!(Histogram::new().heap_bytes(), BUCKETS * 8);
        const { assert!(BUCKETS * 8 <= 20 * 1024) };
    }
}
