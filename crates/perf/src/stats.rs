//! Measurements: what the workers count, and how samples add up to periods and phases.
//!
//! Workers (producer delivery callbacks, consumer threads) bump monotonic atomic counters and
//! record latencies into a [`Histogram`] behind a mutex that only the worker and the sampler
//! touch. Once a second (and at every phase change) the sampler reads the counters' deltas and
//! drains the histograms into a [`Sample`]; samples merge into report periods and phases.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

/// Latencies are recorded in microseconds, from 1 µs to one hour, with 3 significant digits.
const MAX_LATENCY_US: u64 = 3_600_000_000;

pub type Hist = hdrhistogram::Histogram<u64>;

pub fn new_hist() -> Hist {
    // The bounds are constants that hdrhistogram accepts; this cannot fail.
    Hist::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

/// A histogram shared between one worker thread and the sampler.
pub struct SharedHist(Mutex<Hist>);

impl Default for SharedHist {
    fn default() -> Self {
        SharedHist(Mutex::new(new_hist()))
    }
}

impl SharedHist {
    pub fn record_us(&self, us: u64) {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        h.saturating_record(us.clamp(1, MAX_LATENCY_US));
    }

    /// Adds everything recorded since the last drain to `into`, and resets.
    pub fn drain_into(&self, into: &mut Hist) {
        let mut h = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Same bounds on both sides: `add` cannot fail.
        let _ = into.add(&*h);
        h.reset();
    }
}

/// Counters of one producer. Updated by its sending thread (sent, send errors) and its delivery
/// callback (acknowledged, errors, latency).
#[derive(Default)]
pub struct ProducerStats {
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub acked_bytes: AtomicU64,
    pub errors: AtomicU64,
    pub latency: SharedHist,
    /// Partitions a record was acknowledged on (librdkafka's sticky partitioner leaves
    /// partitions without records for a while when there are many).
    pub acked_partitions: PartitionSet,
}

/// A set of partition numbers below [`PartitionSet::CAPACITY`] that any thread may add to.
pub struct PartitionSet(Vec<AtomicU64>);

impl Default for PartitionSet {
    fn default() -> Self {
        PartitionSet(
            (0..Self::CAPACITY / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
        )
    }
}

impl PartitionSet {
    /// Partitions tracked; others are ignored (`--settle` refuses topics with more).
    pub const CAPACITY: usize = 1 << 16;

    pub fn insert(&self, partition: i32) {
        if let Some(word) = usize::try_from(partition)
            .ok()
            .and_then(|p| self.0.get(p / 64))
        {
            let bit = 1u64 << (partition as usize % 64);
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Relaxed);
            }
        }
    }

    /// Adds this set's members to `into` (a bitmap of [`PartitionSet::CAPACITY`] bits).
    pub fn add_to(&self, into: &mut [u64]) {
        for (i, w) in into.iter_mut().zip(&self.0) {
            *i |= w.load(Ordering::Relaxed);
        }
    }
}

/// Whether every member of bitmap `a` is in bitmap `b`.
pub fn is_subset(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).all(|(a, b)| a & !b == 0)
}

/// Counters of one consumer.
#[derive(Default)]
pub struct ConsumerStats {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    /// Partitions currently assigned to this consumer.
    pub assigned: AtomicUsize,
    /// Partitions this consumer has received a record of.
    pub partitions_read: PartitionSet,
    pub e2e: SharedHist,
}

/// Monotonic totals read from all workers at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    pub sent: u64,
    pub produced: u64,
    pub produced_bytes: u64,
    pub produce_errors: u64,
    pub consumed: u64,
    pub consumed_bytes: u64,
    pub consume_errors: u64,
    pub backlog: u64,
}

impl Totals {
    pub fn delta(&self, earlier: &Totals) -> Totals {
        Totals {
            sent: self.sent.saturating_sub(earlier.sent),
            produced: self.produced.saturating_sub(earlier.produced),
            produced_bytes: self.produced_bytes.saturating_sub(earlier.produced_bytes),
            produce_errors: self.produce_errors.saturating_sub(earlier.produce_errors),
            consumed: self.consumed.saturating_sub(earlier.consumed),
            consumed_bytes: self.consumed_bytes.saturating_sub(earlier.consumed_bytes),
            consume_errors: self.consume_errors.saturating_sub(earlier.consume_errors),
            // A level, not a counter: the value at the end of the interval.
            backlog: self.backlog,
        }
    }
}

/// What happened over one interval (a second, a report period or a phase).
#[derive(Clone)]
pub struct Sample {
    /// Seconds since the start of the run.
    pub start: f64,
    pub end: f64,
    pub counts: Totals,
    pub produce_latency: Hist,
    pub e2e_latency: Hist,
}

impl Sample {
    pub fn empty(at: f64) -> Sample {
        Sample {
            start: at,
            end: at,
            counts: Totals::default(),
            produce_latency: new_hist(),
            e2e_latency: new_hist(),
        }
    }

    pub fn seconds(&self) -> f64 {
        self.end - self.start
    }

    /// Appends a later sample: counters add up, the backlog is the later one's.
    pub fn merge(&mut self, later: &Sample) {
        if self.seconds() == 0.0 && self.counts == Totals::default() {
            self.start = later.start;
        }
        self.end = later.end;
        let c = &mut self.counts;
        let l = &later.counts;
        c.sent += l.sent;
        c.produced += l.produced;
        c.produced_bytes += l.produced_bytes;
        c.produce_errors += l.produce_errors;
        c.consumed += l.consumed;
        c.consumed_bytes += l.consumed_bytes;
        c.consume_errors += l.consume_errors;
        c.backlog = l.backlog;
        let _ = self.produce_latency.add(&later.produce_latency);
        let _ = self.e2e_latency.add(&later.e2e_latency);
    }

    pub fn report(&self) -> IntervalReport {
        let secs = self.seconds();
        let per_sec = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        let c = &self.counts;
        IntervalReport {
            start_s: round3(self.start),
            end_s: round3(self.end),
            seconds: round3(secs),
            produce: Throughput {
                records: c.produced,
                bytes: c.produced_bytes,
                records_per_sec: round3(per_sec(c.produced)),
                mib_per_sec: round3(per_sec(c.produced_bytes) / MIB),
                errors: c.produce_errors,
            },
            consume: Throughput {
                records: c.consumed,
                bytes: c.consumed_bytes,
                records_per_sec: round3(per_sec(c.consumed)),
                mib_per_sec: round3(per_sec(c.consumed_bytes) / MIB),
                errors: c.consume_errors,
            },
            backlog_records: c.backlog,
            produce_latency_ms: LatencySummary::of(&self.produce_latency),
            e2e_latency_ms: LatencySummary::of(&self.e2e_latency),
        }
    }
}

pub const MIB: f64 = 1024.0 * 1024.0;

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    pub records: u64,
    pub bytes: u64,
    pub records_per_sec: f64,
    pub mib_per_sec: f64,
    pub errors: u64,
}

/// The figures printed and written for an interval.
#[derive(Clone, Debug, Serialize)]
pub struct IntervalReport {
    pub start_s: f64,
    pub end_s: f64,
    pub seconds: f64,
    pub produce: Throughput,
    pub consume: Throughput,
    /// Records acknowledged but not yet consumed, summed over consumer groups, at the end.
    pub backlog_records: u64,
    /// Send to acknowledgement.
    pub produce_latency_ms: Option<LatencySummary>,
    /// Send (timestamp in the record) to receipt by a consumer.
    pub e2e_latency_ms: Option<LatencySummary>,
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub avg: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p999: f64,
    /// The OpenMessaging Benchmark's last percentile (`--workload` prints it).
    #[serde(rename = "p99.99")]
    pub p9999: f64,
    pub max: f64,
}

impl LatencySummary {
    /// `None` when nothing was recorded.
    pub fn of(h: &Hist) -> Option<LatencySummary> {
        if h.is_empty() {
            return None;
        }
        let ms = |us: u64| round3(us as f64 / 1000.0);
        Some(LatencySummary {
            count: h.len(),
            avg: round3(h.mean() / 1000.0),
            p50: ms(h.value_at_quantile(0.50)),
            p75: ms(h.value_at_quantile(0.75)),
            p90: ms(h.value_at_quantile(0.90)),
            p95: ms(h.value_at_quantile(0.95)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            p9999: ms(h.value_at_quantile(0.9999)),
            max: ms(h.max()),
        })
    }

    /// The eight figures in the order of [`LatencySummary::HEADERS`].
    pub fn figures(&self) -> [f64; 8] {
        [
            self.avg, self.p50, self.p75, self.p90, self.p95, self.p99, self.p999, self.max,
        ]
    }

    pub const HEADERS: [&'static str; 8] =
        ["avg", "p50", "p75", "p90", "p95", "p99", "p99.9", "max"];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_known_values() {
        let mut h = new_hist();
        for us in 1..=1000u64 {
            h.record(us * 1000).unwrap();
        }
        let s = LatencySummary::of(&h).unwrap();
        assert_eq!(s.count, 1000);
        assert!((s.p50 - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99 - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.max - 1000.0).abs() < 1.0, "{s:?}");
        assert!((s.avg - 500.5).abs() < 1.0, "{s:?}");
        assert!(LatencySummary::of(&new_hist()).is_none());
    }

    #[test]
    fn samples_merge_counts_and_keep_last_backlog() {
        let mut a = Sample::empty(0.0);
        let mut s1 = Sample::empty(0.0);
        s1.end = 1.0;
        s1.counts.produced = 10;
        s1.counts.produced_bytes = 10 * 1024 * 1024;
        s1.counts.backlog = 7;
        s1.produce_latency.record(1000).unwrap();
        let mut s2 = Sample::empty(1.0);
        s2.end = 2.0;
        s2.counts.produced = 30;
        s2.counts.backlog = 3;
        a.merge(&s1);
        a.merge(&s2);
        assert_eq!(a.start, 0.0);
        assert_eq!(a.end, 2.0);
        assert_eq!(a.counts.produced, 40);
        assert_eq!(a.counts.backlog, 3);
        let r = a.report();
        assert_eq!(r.produce.records_per_sec, 20.0);
        assert_eq!(r.produce.mib_per_sec, 5.0);
        assert_eq!(r.produce_latency_ms.unwrap().count, 1);
        assert!(r.e2e_latency_ms.is_none());
    }

    #[test]
    fn partition_sets_union_and_compare() {
        let acked = PartitionSet::default();
        let read_a = PartitionSet::default();
        let read_b = PartitionSet::default();
        for p in [0, 63, 64, 9_999] {
            acked.insert(p);
        }
        acked.insert(-1); // out of range: ignored
        acked.insert(PartitionSet::CAPACITY as i32);
        read_a.insert(0);
        read_a.insert(64);
        read_b.insert(63);
        let words = PartitionSet::CAPACITY / 64;
        let (mut a, mut r) = (vec![0u64; words], vec![0u64; words]);
        acked.add_to(&mut a);
        read_a.add_to(&mut r);
        read_b.add_to(&mut r);
        assert!(!is_subset(&a, &r), "9,999 was not read");
        read_b.insert(9_999);
        read_b.add_to(&mut r);
        assert!(is_subset(&a, &r));
        assert!(is_subset(&vec![0u64; words], &a));
    }

    #[test]
    fn shared_hist_drains() {
        let s = SharedHist::default();
        s.record_us(5);
        s.record_us(0); // clamped to 1 µs
        let mut into = new_hist();
        s.drain_into(&mut into);
        assert_eq!(into.len(), 2);
        let mut again = new_hist();
        s.drain_into(&mut again);
        assert!(again.is_empty());
    }
}
