//! Load measurement for the balancer: each broker samples the byte counters of the partitions
//! it leads and its process's CPU time, turns them into rates, and reports them to the metadata
//! store every `balancer.interval`, where the controller reads every broker's last report.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weir_meta::{BrokerLoad, PartitionLoad};
use weir_metrics::{Counter, Gauge, Registry};

use crate::Cluster;

/// One partition led here, with its byte counters since it opened here.
#[derive(Debug, Clone)]
pub struct PartitionCounters {
    pub stream_id: u64,
    pub topic: String,
    pub partition: u32,
    /// Bytes produced to it (record batches appended).
    pub bytes_in: u64,
    /// Bytes fetched from it (record batches returned to consumers).
    pub bytes_out: u64,
    /// Produce and fetch requests served for it.
    pub requests: u64,
}

/// Where the broker's partitions' counters come from (the partition layer, above this crate).
pub trait LoadSource: Send + Sync + 'static {
    fn partitions(&self) -> Vec<PartitionCounters>;
}

/// One partition's rates, as last measured here (for the `weir_partition_*` metrics).
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionRate {
    pub topic: String,
    pub partition: u32,
    pub bytes_in: f64,
    pub bytes_out: f64,
    pub requests: f64,
}

/// What the load reporter and the balancer count, for `/metrics`.
#[derive(Debug, Default)]
pub struct BalancerMeters {
    /// Rounds the balancer ran (on the controller).
    pub rounds: Counter,
    /// Moves it asked for, by goal.
    pub moves_capacity: Counter,
    pub moves_bytes_in: Counter,
    pub moves_bytes_out: Counter,
    pub moves_count: Counter,
    pub moves_zones: Counter,
    /// Set by the controller: the largest deviation of a broker's bytes in (and out) from the
    /// mean, in thousandths of the mean.
    pub imbalance_in_permille: Gauge,
    pub imbalance_out_permille: Gauge,
    /// Set by the controller: the cluster's bytes in plus out per second, and that against the
    /// configured capacity of its brokers, in thousandths (0 without a capacity): the gauge for
    /// autoscalers.
    pub cluster_bytes_per_sec: Gauge,
    pub cluster_load_permille: Gauge,
    /// This broker's last measured rates (bytes per second, CPU in thousandths of a core).
    pub bytes_in_per_sec: Gauge,
    pub bytes_out_per_sec: Gauge,
    pub requests_per_sec: Gauge,
    pub cpu_permille: Gauge,
    /// This broker's partitions' last measured rates.
    pub partitions: Mutex<Vec<PartitionRate>>,
}

impl BalancerMeters {
    pub fn partition_rates(&self) -> Vec<PartitionRate> {
        self.partitions
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Declares the balancer's and the load reporter's meters.
    pub fn register(self: &Arc<Self>, r: &mut Registry) {
        r.counters(
            "balancer_moves",
            "Partition moves the balancer asked for (on the controller), by goal.",
            "goal",
            &[
                ("capacity", &self.moves_capacity),
                ("bytes_in", &self.moves_bytes_in),
                ("bytes_out", &self.moves_bytes_out),
                ("count", &self.moves_count),
                ("zones", &self.moves_zones),
            ],
        );
        r.counter(
            "balancer_rounds",
            "Balancing rounds run (on the controller).",
            &self.rounds,
        );
        let m = Arc::clone(self);
        r.gauges_read(
            "balancer_imbalance",
            "Controller: the largest deviation of a broker's bytes from the mean, relative to the mean, by direction.",
            move || {
                [("in", &m.imbalance_in_permille), ("out", &m.imbalance_out_permille)]
                    .into_iter()
                    .map(|(d, g)| (vec![("direction", d.to_string())], ratio(g)))
                    .collect()
            },
        );
        r.gauge(
            "cluster_bytes_per_sec",
            "Controller: bytes in plus out per second of the brokers that take partitions.",
            &self.cluster_bytes_per_sec,
        );
        let load = self.cluster_load_permille.clone();
        r.gauge_read(
            "cluster_load_ratio",
            "Controller: the cluster's bytes in plus out against the capacity of its brokers (balancer.capacity_bytes_per_sec each; 0 without one): scale out above about 0.8, in below about 0.3.",
            move || ratio(&load),
        );
        r.gauge(
            "broker_bytes_in_per_sec",
            "This broker's produce bytes per second, as last reported to the balancer.",
            &self.bytes_in_per_sec,
        );
        r.gauge(
            "broker_bytes_out_per_sec",
            "This broker's fetch bytes per second, as last reported to the balancer.",
            &self.bytes_out_per_sec,
        );
        r.gauge(
            "broker_requests_per_sec",
            "This broker's produce and fetch requests per second (per partition served), as last reported to the balancer.",
            &self.requests_per_sec,
        );
        let cpu = self.cpu_permille.clone();
        r.gauge_read(
            "broker_cpu",
            "This broker's CPU seconds per second, as last reported.",
            move || ratio(&cpu),
        );
        self.register_partitions(r);
    }

    fn register_partitions(self: &Arc<Self>, r: &mut Registry) {
        let at = |p: &PartitionRate| {
            vec![
                ("topic", p.topic.clone()),
                ("partition", p.partition.to_string()),
            ]
        };
        let m = Arc::clone(self);
        r.gauges_read(
            "partition_bytes_per_sec",
            "Bytes per second of each partition led here, by direction, as last reported.",
            move || {
                let mut out = Vec::new();
                for p in m.partition_rates() {
                    for (dir, v) in [("in", p.bytes_in), ("out", p.bytes_out)] {
                        let mut labels = at(&p);
                        labels.push(("direction", dir.to_string()));
                        out.push((labels, v.round()));
                    }
                }
                out
            },
        );
        let m = Arc::clone(self);
        r.gauges_read(
            "partition_requests_per_sec",
            "Produce and fetch requests per second of each partition led here, as last reported.",
            move || {
                m.partition_rates()
                    .iter()
                    .map(|p| (at(p), (p.requests * 10.0).round() / 10.0))
                    .collect()
            },
        );
    }
}

/// A gauge kept in thousandths, as a ratio.
fn ratio(g: &Gauge) -> f64 {
    g.load(Ordering::Relaxed) as f64 / 1000.0
}

/// CPU seconds this process has used (user and system).
fn cpu_seconds() -> f64 {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given; it is zeroed and of the right type.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: getrusage returned 0, so the struct is initialised.
    let u = unsafe { u.assume_init() };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(u.ru_utime) + secs(u.ru_stime)
}

/// Rates from cumulative counters: the change over the last interval, smoothed with the rates
/// before (a quarter for the new interval: about four intervals' memory), so that neither one
/// burst nor the noise of librdkafka's sticky partitioner (a partition per batch) moves
/// partitions, while a sustained change shows within a few intervals. A partition's first
/// sample here has no rate and is left out of the report (see [`Rates::sample`]).
#[derive(Default)]
pub(crate) struct Rates {
    last: HashMap<u64, (u64, u64, u64)>,
    smoothed: HashMap<u64, (f64, f64, f64)>,
    last_cpu: f64,
    cpu: Option<f64>,
    at: Option<Instant>,
}

/// The weight of the newest interval in a smoothed rate.
const NEW_WEIGHT: f64 = 0.25;

impl Rates {
    /// The partitions' rates now. A partition without one yet (it just opened here: one sample)
    /// is left out, so that the controller keeps the rate its previous leader measured rather
    /// than seeing an idle partition and piling more onto this broker.
    pub(crate) fn sample(
        &mut self,
        parts: &[PartitionCounters],
        cpu_seconds: f64,
        now: Instant,
    ) -> Vec<PartitionLoad> {
        let elapsed = self
            .at
            .map(|t| now.duration_since(t).as_secs_f64())
            .filter(|&e| e > 0.0);
        let mut out = Vec::with_capacity(parts.len());
        let mut last = HashMap::with_capacity(parts.len());
        let mut smoothed = HashMap::with_capacity(parts.len());
        for p in parts {
            let rate = match (elapsed, self.last.get(&p.stream_id)) {
                // Counters start over when a partition opens again here.
                (Some(e), Some(&(i, o, r)))
                    if p.bytes_in >= i && p.bytes_out >= o && p.requests >= r =>
                {
                    let now = (
                        (p.bytes_in - i) as f64 / e,
                        (p.bytes_out - o) as f64 / e,
                        (p.requests - r) as f64 / e,
                    );
                    let mix = |old: f64, new: f64| old + NEW_WEIGHT * (new - old);
                    match self.smoothed.get(&p.stream_id) {
                        Some(&(si, so, sr)) => (mix(si, now.0), mix(so, now.1), mix(sr, now.2)),
                        None => now,
                    }
                }
                // No rate yet (one sample, or the counters started over).
                _ => {
                    last.insert(p.stream_id, (p.bytes_in, p.bytes_out, p.requests));
                    continue;
                }
            };
            last.insert(p.stream_id, (p.bytes_in, p.bytes_out, p.requests));
            smoothed.insert(p.stream_id, rate);
            out.push(PartitionLoad {
                stream_id: p.stream_id,
                bytes_in: rate.0,
                bytes_out: rate.1,
                requests: rate.2,
            });
        }
        if let Some(e) = elapsed {
            let now = ((cpu_seconds - self.last_cpu) / e).max(0.0);
            self.cpu = Some(self.cpu.map_or(now, |c| c + NEW_WEIGHT * (now - c)));
        }
        self.last_cpu = cpu_seconds;
        self.last = last;
        self.smoothed = smoothed;
        self.at = Some(now);
        out
    }

    pub(crate) fn cpu(&self) -> f64 {
        self.cpu.unwrap_or(0.0)
    }
}

impl Cluster {
    /// Starts reporting this broker's load to the store every `balancer.interval`, from the
    /// partitions `source` names. Reports also without a balancer: they are what an operator
    /// or an autoscaler reads.
    pub fn start_load_reports(self: &Arc<Self>, source: Arc<dyn LoadSource>) {
        let task = tokio::spawn(Arc::clone(self).load_loop(source));
        self.tasks().push(("load reports", task));
    }

    async fn load_loop(self: Arc<Self>, source: Arc<dyn LoadSource>) {
        let mut stop = self.stop.subscribe();
        let mut rates = Rates::default();
        let mut reports = Reports::default();
        let interval = self
            .config
            .balancer
            .interval
            .max(Duration::from_millis(100));
        loop {
            let parts = source.partitions();
            let loads = rates.sample(&parts, cpu_seconds(), Instant::now());
            let m = &self.balancer_meters;
            let (sum_in, sum_out, sum_req) = loads.iter().fold((0.0, 0.0, 0.0), |(i, o, r), l| {
                (i + l.bytes_in, o + l.bytes_out, r + l.requests)
            });
            m.bytes_in_per_sec.store(sum_in as u64, Ordering::Relaxed);
            m.bytes_out_per_sec.store(sum_out as u64, Ordering::Relaxed);
            m.requests_per_sec.store(sum_req as u64, Ordering::Relaxed);
            m.cpu_permille
                .store((rates.cpu() * 1000.0) as u64, Ordering::Relaxed);
            let by_stream: HashMap<u64, &PartitionLoad> =
                loads.iter().map(|l| (l.stream_id, l)).collect();
            *m.partitions.lock().unwrap_or_else(|e| e.into_inner()) = parts
                .iter()
                .filter_map(|p| {
                    let l = by_stream.get(&p.stream_id)?;
                    Some(PartitionRate {
                        topic: p.topic.clone(),
                        partition: p.partition,
                        bytes_in: l.bytes_in,
                        bytes_out: l.bytes_out,
                        requests: l.requests,
                    })
                })
                .collect();
            let report = BrokerLoad {
                node_id: self.node_id,
                age_ms: 0,
                cpu: rates.cpu(),
                partitions: loads,
            };
            if reports.due(&report, self.config.balancer.stale_after) {
                match self.meta.report_load(self.incarnation(), report).await {
                    Ok(()) => reports.made(),
                    Err(e) => {
                        tracing::debug!(error = %e, "reporting the load failed; next interval")
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.changed() => return,
            }
        }
    }
}

/// Which load reports are written: every interval while any partition is busy; an idle
/// broker's report (every rate zero, the same partitions as the last) only often enough that it
/// never goes stale. With 10,000 idle partitions each report was a 1.7 ms INSERT every 2 s, for
/// nothing the balancer did not know.
#[derive(Debug, Default)]
struct Reports {
    /// When the last report was made, and the idle partitions it showed (`None`: not idle).
    last: Option<(Instant, Option<Vec<u64>>)>,
    /// The report being made.
    pending: Option<Vec<u64>>,
}

impl Reports {
    fn due(&mut self, report: &BrokerLoad, stale_after: Duration) -> bool {
        let idle = report
            .partitions
            .iter()
            .all(|l| l.bytes_in == 0.0 && l.bytes_out == 0.0 && l.requests == 0.0);
        let ids = idle.then(|| report.partitions.iter().map(|l| l.stream_id).collect());
        let same = match (&self.last, &ids) {
            (Some((at, Some(before))), Some(now)) => {
                before == now && at.elapsed() < stale_after / 2
            }
            _ => false,
        };
        self.pending = ids;
        !same
    }

    fn made(&mut self) {
        self.last = Some((Instant::now(), self.pending.take()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(loads: &[(u64, f64)]) -> BrokerLoad {
        BrokerLoad {
            node_id: 1,
            age_ms: 0,
            cpu: 0.01,
            partitions: loads
                .iter()
                .map(|&(stream_id, bytes_in)| PartitionLoad {
                    stream_id,
                    bytes_in,
                    bytes_out: 0.0,
                    requests: 0.0,
                })
                .collect(),
        }
    }

    #[test]
    fn an_idle_brokers_load_is_reported_again_only_before_it_goes_stale() {
        let stale = Duration::from_secs(20);
        let mut r = Reports::default();
        let idle = report(&[(1, 0.0), (2, 0.0)]);
        assert!(r.due(&idle, stale), "the first report is made");
        r.made();
        assert!(!r.due(&idle, stale), "the same idle partitions: not again");
        assert!(
            r.due(&report(&[(1, 0.0), (2, 0.0), (3, 0.0)]), stale),
            "a new partition"
        );
        r.made();
        assert!(
            r.due(&report(&[(1, 10.0), (2, 0.0), (3, 0.0)]), stale),
            "busy"
        );
        r.made();
        assert!(
            r.due(&report(&[(1, 10.0), (2, 0.0), (3, 0.0)]), stale),
            "busy again"
        );
        r.made();
        let idle = report(&[(1, 0.0), (2, 0.0), (3, 0.0)]);
        assert!(r.due(&idle, stale), "idle after busy: reported once");
        r.made();
        assert!(!r.due(&idle, stale));
        assert!(
            r.due(&idle, Duration::ZERO),
            "reported before it goes stale"
        );
    }

    fn part(stream_id: u64, bytes_in: u64, bytes_out: u64) -> PartitionCounters {
        PartitionCounters {
            stream_id,
            topic: "t".into(),
            partition: stream_id as u32,
            bytes_in,
            bytes_out,
            requests: bytes_in / 100,
        }
    }

    #[test]
    fn rates_are_deltas_over_time_smoothed_and_restart_with_the_counters() {
        let mut r = Rates::default();
        let t0 = Instant::now();
        let s = r.sample(&[part(1, 0, 0)], 0.0, t0);
        assert!(s.is_empty(), "no rate from one sample: not reported");
        let s = r.sample(&[part(1, 1000, 4000)], 0.5, t0 + Duration::from_secs(1));
        assert_eq!((s[0].bytes_in, s[0].bytes_out), (1000.0, 4000.0));
        assert_eq!(s[0].requests, 10.0);
        assert!((r.cpu() - 0.5).abs() < 1e-9);
        // Three quarters of the rate before and a quarter of the new one.
        let s = r.sample(&[part(1, 6000, 4000)], 0.5, t0 + Duration::from_secs(2));
        assert_eq!((s[0].bytes_in, s[0].bytes_out), (2000.0, 3000.0));
        // The partition opened again here: its counters start over; no rate (and no negative
        // one) until the next sample.
        let s = r.sample(&[part(1, 10, 10)], 0.5, t0 + Duration::from_secs(3));
        assert!(s.is_empty());
        // A partition that arrives has no rate until its second sample.
        let s = r.sample(
            &[part(1, 20, 10), part(2, 500, 0)],
            0.5,
            t0 + Duration::from_secs(4),
        );
        assert_eq!(s.len(), 1);
        assert_eq!((s[0].stream_id, s[0].bytes_in), (1, 10.0));
        let s = r.sample(
            &[part(1, 20, 10), part(2, 600, 0)],
            0.5,
            t0 + Duration::from_secs(5),
        );
        assert_eq!((s[1].stream_id, s[1].bytes_in), (2, 100.0));
        assert!(cpu_seconds() > 0.0);
    }
}
