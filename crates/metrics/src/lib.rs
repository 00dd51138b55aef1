//! Meters shared by Weir's crates.
//!
//! Each crate owns plain structs of [`Counter`]s and [`Histogram`]s and exposes them; the
//! broker's admin endpoint renders them in Prometheus' text format. Everything here is atomic
//! and allocation-free on the hot path, so meters can sit on the produce path without a lock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonically increasing count.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self) {
        self.add(1);
    }

    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Number of buckets: bucket `i` counts values in `[2^(i-1), 2^i)` microseconds, bucket 0
/// counts values below 1 µs, and the last bucket everything from about 2^38 µs (76 hours) up.
pub const BUCKETS: usize = 40;

/// A latency histogram with power-of-two microsecond buckets.
///
/// Coarse (a factor of two per bucket) but lock-free; precise percentiles come from the
/// benchmark programs, which keep HDR histograms of their own.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; BUCKETS],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }
}

/// A point-in-time copy of a [`Histogram`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistogramSnapshot {
    pub buckets: [u64; BUCKETS],
    pub sum_micros: u64,
    pub count: u64,
}

impl Histogram {
    pub fn record(&self, d: Duration) {
        self.record_micros(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn record_micros(&self, micros: u64) {
        let idx = (64 - micros.leading_zeros() as usize).min(BUCKETS - 1);
        self.buckets[idx].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            buckets: std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed)),
            sum_micros: self.sum_micros.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
        }
    }
}

impl HistogramSnapshot {
    /// Upper bound, in microseconds, of bucket `i`.
    pub fn bucket_upper_micros(i: usize) -> u64 {
        if i == 0 {
            1
        } else {
            1u64 << i.min(63)
        }
    }

    /// The upper bound of the bucket holding quantile `q` (0.0..=1.0), in microseconds.
    pub fn quantile_upper_micros(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Self::bucket_upper_micros(i);
            }
        }
        Self::bucket_upper_micros(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_powers_of_two() {
        let h = Histogram::default();
        h.record_micros(0);
        h.record_micros(1);
        h.record_micros(3);
        h.record_micros(1000);
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], 1);
        assert_eq!(s.buckets[1], 1);
        assert_eq!(s.buckets[2], 1);
        assert_eq!(s.buckets[10], 1); // 512 <= 1000 < 1024
        assert_eq!(s.quantile_upper_micros(0.5), 2);
        assert_eq!(s.quantile_upper_micros(1.0), 1024);
    }

    #[test]
    fn counter_adds() {
        let c = Counter::default();
        c.add(5);
        c.inc();
        assert_eq!(c.get(), 6);
    }
}
