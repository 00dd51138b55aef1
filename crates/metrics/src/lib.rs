//! Meters of Weir's crates, and the registry that `/metrics` encodes.
//!
//! Each crate declares its meters where it counts them: a struct of [`Counter`]s, [`Gauge`]s and
//! [`Histogram`]s, and beside it a `register` function that gives each one its name, help and
//! labels in a [`Registry`]. The broker builds one registry at start from every component and
//! `/metrics` encodes it (Prometheus' text format, through `prometheus-client`): a meter that is
//! registered cannot be left out of the page. Counting stays atomic and allocation-free on the
//! hot path: a meter is a shared atomic, and the registry keeps a handle to it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::{EncodeGaugeValue, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

/// A monotonically increasing count. Clones share the count.
#[derive(Debug, Default, Clone)]
pub struct Counter(Arc<AtomicU64>);

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

impl EncodeMetric for Counter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// A value that goes up and down, set where it changes. It dereferences to its atomic (`load`,
/// `store`, `fetch_add`); clones share the value.
#[derive(Debug, Default, Clone)]
pub struct Gauge(Arc<AtomicU64>);

impl std::ops::Deref for Gauge {
    type Target = AtomicU64;

    fn deref(&self) -> &AtomicU64 {
        &self.0
    }
}

/// Number of buckets: bucket `i` counts values in `[2^(i-1), 2^i)` microseconds, bucket 0
/// counts values below 1 µs, and the last bucket everything from about 2^38 µs (76 hours) up.
pub const BUCKETS: usize = 40;

/// A latency histogram with power-of-two microsecond buckets, exported in seconds. Clones share
/// the counts.
///
/// Coarse (a factor of two per bucket) but lock-free; precise percentiles come from the
/// benchmark programs, which keep HDR histograms of their own.
#[derive(Debug, Default, Clone)]
pub struct Histogram(Arc<HistogramCounts>);

#[derive(Debug)]
struct HistogramCounts {
    buckets: [AtomicU64; BUCKETS],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Default for HistogramCounts {
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
        let h = &self.0;
        h.buckets[idx].fetch_add(1, Ordering::Relaxed);
        h.sum_micros.fetch_add(micros, Ordering::Relaxed);
        h.count.fetch_add(1, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let h = &self.0;
        HistogramSnapshot {
            buckets: std::array::from_fn(|i| h.buckets[i].load(Ordering::Relaxed)),
            sum_micros: h.sum_micros.load(Ordering::Relaxed),
            count: h.count.load(Ordering::Relaxed),
        }
    }
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        let s = self.snapshot();
        // The last bucket has no upper bound: the encoder adds it as `+Inf` (the count).
        let buckets: Vec<(f64, u64)> = (0..BUCKETS - 1)
            .map(|i| {
                let le = HistogramSnapshot::bucket_upper_micros(i) as f64 / 1e6;
                (le, s.buckets[i])
            })
            .collect();
        encoder.encode_histogram::<NoLabelSet>(s.sum_micros as f64 / 1e6, s.count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
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

/// Labels of one member of a family: `(name, value)` pairs.
pub type Labels = Vec<(&'static str, String)>;

/// A family of values read when `/metrics` is scraped (one per label set), or one value.
struct Read<F>(F, MetricType);

impl<F> fmt::Debug for Read<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Read")
    }
}

/// A gauge family read at scrape time.
impl<F, V> EncodeMetric for Read<F>
where
    F: Fn() -> Vec<(Labels, V)> + Send + Sync + 'static,
    V: EncodeGaugeValue,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        for (labels, v) in (self.0)() {
            if labels.is_empty() {
                encoder.encode_gauge(&v)?;
            } else {
                encoder.encode_family(&labels)?.encode_gauge(&v)?;
            }
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        self.1
    }
}

/// Counters of one family, told apart by one label.
#[derive(Debug)]
struct CounterSet {
    label: &'static str,
    members: Vec<(String, Counter)>,
}

impl EncodeMetric for CounterSet {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        for (value, c) in &self.members {
            let labels = [(self.label, value.as_str())];
            encoder
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&c.get(), None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// Counters of one family whose label sets are known only when scraped.
struct CounterRead<F>(F);

impl<F> fmt::Debug for CounterRead<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CounterRead")
    }
}

impl<F> EncodeMetric for CounterRead<F>
where
    F: Fn() -> Vec<(Labels, u64)> + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        for (labels, v) in (self.0)() {
            encoder
                .encode_family(&labels)?
                .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// One unlabelled fractional counter read at scrape time (nothing when the read fails).
struct FloatCounterRead<F>(F);

impl<F> fmt::Debug for FloatCounterRead<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FloatCounterRead")
    }
}

impl<F> EncodeMetric for FloatCounterRead<F>
where
    F: Fn() -> Option<f64> + Send + Sync + 'static,
{
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), fmt::Error> {
        if let Some(v) = (self.0)() {
            encoder.encode_counter::<NoLabelSet, _, f64>(&v, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Counter
    }
}

/// What a meter is, for the list of meters (`GET /v1/meters`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MeterInfo {
    /// The name as exported (`weir_wal_appends_total`).
    pub name: String,
    pub kind: &'static str,
    pub help: String,
}

/// Every meter of a broker: each component registers its own at start.
pub struct Registry {
    weir: prometheus_client::registry::Registry,
    /// Meters named by convention outside the `weir_` prefix (`process_*`).
    bare: prometheus_client::registry::Registry,
    meters: Vec<MeterInfo>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            weir: prometheus_client::registry::Registry::with_prefix("weir"),
            bare: prometheus_client::registry::Registry::default(),
            meters: Vec::new(),
        }
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Registry({} meters)", self.meters.len())
    }
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// `weir_<name>_total`: a count.
    pub fn counter(&mut self, name: &str, help: &str, c: &Counter) {
        self.note(format!("weir_{name}_total"), "counter", help);
        self.weir.register(name, trim(help), c.clone());
    }

    /// `weir_<name>_total{<label>="..."}`: counts of one thing told apart by one label.
    pub fn counters(
        &mut self,
        name: &str,
        help: &str,
        label: &'static str,
        members: &[(&str, &Counter)],
    ) {
        self.note(format!("weir_{name}_total"), "counter", help);
        let members = members
            .iter()
            .map(|(v, c)| (v.to_string(), (*c).clone()))
            .collect();
        self.weir
            .register(name, trim(help), CounterSet { label, members });
    }

    /// `weir_<name>_total{...}`: counts whose label sets are known only when scraped.
    pub fn counters_read<F>(&mut self, name: &str, help: &str, read: F)
    where
        F: Fn() -> Vec<(Labels, u64)> + Send + Sync + 'static,
    {
        self.note(format!("weir_{name}_total"), "counter", help);
        self.weir.register(name, trim(help), CounterRead(read));
    }

    /// `weir_<name>_seconds`: a latency histogram.
    pub fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.note(format!("weir_{name}_seconds"), "histogram", help);
        self.weir
            .register_with_unit(name, trim(help), Unit::Seconds, h.clone());
    }

    /// `weir_<name>`: a gauge set where it changes.
    pub fn gauge(&mut self, name: &str, help: &str, g: &Gauge) {
        let g = g.clone();
        self.gauge_read(name, help, move || g.load(Ordering::Relaxed));
    }

    /// `weir_<name>`: a gauge read when scraped.
    pub fn gauge_read<F, V>(&mut self, name: &str, help: &str, read: F)
    where
        F: Fn() -> V + Send + Sync + 'static,
        V: EncodeGaugeValue + 'static,
    {
        self.gauges_read(name, help, move || vec![(Vec::new(), read())]);
    }

    /// `weir_<name>{...}`: gauges whose label sets are known only when scraped.
    pub fn gauges_read<F, V>(&mut self, name: &str, help: &str, read: F)
    where
        F: Fn() -> Vec<(Labels, V)> + Send + Sync + 'static,
        V: EncodeGaugeValue + 'static,
    {
        self.note(format!("weir_{name}"), "gauge", help);
        self.weir
            .register(name, trim(help), Read(read, MetricType::Gauge));
    }

    /// `<name>` without the `weir_` prefix: the process meters every exporter names alike.
    pub fn process_gauge<F, V>(&mut self, name: &str, help: &str, read: F)
    where
        F: Fn() -> Option<V> + Send + Sync + 'static,
        V: EncodeGaugeValue + 'static,
    {
        self.note(name.to_string(), "gauge", help);
        let read = move || {
            read()
                .map(|v| (Vec::new(), v))
                .into_iter()
                .collect::<Vec<_>>()
        };
        self.bare
            .register(name, trim(help), Read(read, MetricType::Gauge));
    }

    /// `<name>_total` without Weir's prefix (the process's meters, named as Prometheus's
    /// client libraries name them): a count in seconds or other fractional units, read when
    /// scraped.
    pub fn process_counter<F>(&mut self, name: &str, help: &str, read: F)
    where
        F: Fn() -> Option<f64> + Send + Sync + 'static,
    {
        self.note(format!("{name}_total"), "counter", help);
        self.bare.register(name, trim(help), FloatCounterRead(read));
    }

    /// Every meter registered, in the order registered.
    pub fn meters(&self) -> &[MeterInfo] {
        &self.meters
    }

    /// The page `/metrics` serves (Prometheus text format 0.0.4).
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(32 << 10);
        // Writing to a String does not fail; a meter that fails to encode would end the page
        // early, which the every-meter test catches.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.weir);
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.bare);
        out
    }

    fn note(&mut self, name: String, kind: &'static str, help: &str) {
        assert!(
            !self.meters.iter().any(|m| m.name == name),
            "meter {name} registered twice"
        );
        self.meters.push(MeterInfo {
            name,
            kind,
            help: help.to_string(),
        });
    }
}

/// prometheus-client ends every help text with a period: ours already do.
fn trim(help: &str) -> &str {
    help.strip_suffix('.').unwrap_or(help)
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
    fn counter_adds_and_clones_share_it() {
        let c = Counter::default();
        let seen = c.clone();
        c.add(5);
        c.inc();
        assert_eq!(seen.get(), 6);
    }

    #[test]
    fn the_page_has_every_meter_registered_in_the_text_format() {
        let mut r = Registry::new();
        let (c, g, h) = (Counter::default(), Gauge::default(), Histogram::default());
        let (put, get) = (Counter::default(), Counter::default());
        r.counter("appends", "Records appended.", &c);
        r.gauge("used_bytes", "Bytes used.", &g);
        r.histogram("sync_latency", "Time of a sync.", &h);
        r.counters(
            "requests",
            "Requests by kind.",
            "kind",
            &[("put", &put), ("get", &get)],
        );
        r.gauges_read("rate", "Rates.", || {
            vec![(
                vec![("topic", "t".to_string()), ("partition", "0".to_string())],
                1.5,
            )]
        });
        r.process_gauge("process_threads", "Threads.", || Some(7u64));
        r.process_counter("process_cpu_seconds", "CPU.", || Some(1.5));
        c.add(3);
        g.store(9, Ordering::Relaxed);
        h.record_micros(1000);
        put.inc();
        let page = r.encode();
        for line in [
            "# HELP weir_appends_total Records appended.\n# TYPE weir_appends_total counter\nweir_appends_total 3\n",
            "# TYPE weir_used_bytes gauge\nweir_used_bytes 9\n",
            "# TYPE weir_sync_latency_seconds histogram\n",
            "weir_sync_latency_seconds_bucket{le=\"0.001024\"} 1\n",
            "weir_sync_latency_seconds_bucket{le=\"+Inf\"} 1\n",
            "weir_sync_latency_seconds_sum 0.001\n",
            "weir_requests_total{kind=\"put\"} 1\nweir_requests_total{kind=\"get\"} 0\n",
            "weir_rate{topic=\"t\",partition=\"0\"} 1.5\n",
            "# TYPE process_threads gauge\nprocess_threads 7\n",
            "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1.5\n",
        ] {
            assert!(page.contains(line), "{line:?} not in\n{page}");
        }
        for m in r.meters() {
            assert!(
                page.contains(&format!("# TYPE {} {}\n", m.name, m.kind)),
                "{} missing",
                m.name
            );
        }
        assert_eq!(r.meters().len(), 7);
    }

    #[test]
    #[should_panic(expected = "registered twice")]
    fn a_name_is_registered_once() {
        let mut r = Registry::new();
        r.counter("appends", "Records appended.", &Counter::default());
        r.counter("appends", "Again.", &Counter::default());
    }
}
