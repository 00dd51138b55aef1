//! The timeline of a run, the sampler, what is printed, and the JSON results.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::args::PerfArgs;
use crate::chart::{self, ChartPhase, ChartPoint};
use crate::clients::{self, ClientErrors, ConsumerHandle, ConsumerSpec, ProducerHandle};
use crate::stats::{
    is_subset, ConsumerStats, IntervalReport, LatencySummary, PartitionSet, ProducerStats, Sample,
    Totals, MIB,
};

const TICK: Duration = Duration::from_secs(1);
const CHECK: Duration = Duration::from_millis(100);
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
const ASSIGNMENT_TIMEOUT: Duration = Duration::from_secs(60);

// Phase names, as printed and written.
const WARMUP: &str = "warmup";
const BACKLOG: &str = "backlog";
const CATCH_UP: &str = "catch-up";
const CAUGHT_UP: &str = "caught-up";
const MEASURE: &str = "measure";
const SETTLE: &str = "settle";

/// When a phase ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    /// After its length.
    Time,
    /// When every group is within a second of production (or after its length).
    CaughtUp,
    /// As `CaughtUp`, once every group has also read from every partition that had records
    /// acknowledged a tick before.
    Settled,
}

// ---------------------------------------------------------------- workers

struct Group {
    topic: usize,
    consumers: Vec<ConsumerHandle>,
}

/// Every thread the run started; stopped and joined on drop, also when the run fails.
struct Workers {
    go: Arc<AtomicBool>,
    stop_producers: Arc<AtomicBool>,
    stop_consumers: Arc<AtomicBool>,
    /// (topic index, producer)
    producers: Vec<(usize, ProducerHandle)>,
    groups: Vec<Group>,
}

impl Workers {
    fn stop(&mut self) {
        self.stop_producers.store(true, Ordering::Release);
        for (_, p) in self.producers.drain(..) {
            p.join();
        }
        self.stop_consumers.store(true, Ordering::Release);
        for g in self.groups.drain(..) {
            for c in g.consumers {
                c.join();
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.stop();
    }
}

fn start_groups(
    args: &PerfArgs,
    topics: &[String],
    errors: &Arc<ClientErrors>,
    workers: &mut Workers,
) -> anyhow::Result<()> {
    for (t, topic) in topics.iter().enumerate() {
        for g in 0..args.groups {
            let group = format!("{topic}-group-{g}");
            let mut consumers = Vec::new();
            for c in 0..args.consumers {
                let spec = ConsumerSpec {
                    bootstrap: args.bootstrap_servers.clone(),
                    topic: topic.clone(),
                    group: group.clone(),
                    config: args.consumer_config.clone(),
                    client_id: format!("weir-perf-c{t}-{g}-{c}"),
                    timestamp_at: if args.schema_id.is_some() {
                        clients::SCHEMA_PREFIX_BYTES
                    } else {
                        0
                    },
                };
                consumers.push(clients::start_consumer(
                    spec,
                    errors.clone(),
                    workers.stop_consumers.clone(),
                )?);
            }
            workers.groups.push(Group {
                topic: t,
                consumers,
            });
        }
    }
    Ok(())
}

/// Waits until every group has all partitions assigned (or gives up with a warning).
fn wait_for_assignment(groups: &[Group], partitions: i32) -> bool {
    let deadline = Instant::now() + ASSIGNMENT_TIMEOUT;
    loop {
        let ready = groups.iter().all(|g| {
            let n: usize = g
                .consumers
                .iter()
                .map(|c| c.stats.assigned.load(Ordering::Acquire))
                .sum();
            n >= partitions as usize
        });
        if ready {
            return true;
        }
        if Instant::now() > deadline {
            eprintln!(
                "weir perf: warning: consumer groups not fully assigned after {} s; going on",
                ASSIGNMENT_TIMEOUT.as_secs()
            );
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------- sampler

/// Reads the workers' counters and drains their histograms.
struct Sampler {
    /// Time 0 of the report.
    t0: Instant,
    topics: usize,
    producers: Vec<(usize, Arc<ProducerStats>)>,
    groups: Vec<(usize, Vec<Arc<ConsumerStats>>)>,
    last: Totals,
    last_at: f64,
    last_topic_acked: Vec<u64>,
    /// Records acknowledged per second, per topic, over the last sample.
    topic_rate: Vec<f64>,
}

impl Sampler {
    fn new(t0: Instant, topics: usize, producers: &[(usize, ProducerHandle)]) -> Sampler {
        Sampler {
            t0,
            topics,
            producers: producers
                .iter()
                .map(|(t, p)| (*t, p.stats.clone()))
                .collect(),
            groups: Vec::new(),
            last: Totals::default(),
            last_at: 0.0,
            last_topic_acked: vec![0; topics],
            topic_rate: vec![0.0; topics],
        }
    }

    fn add_groups(&mut self, groups: &[Group]) {
        for g in groups {
            self.groups.push((
                g.topic,
                g.consumers.iter().map(|c| c.stats.clone()).collect(),
            ));
        }
    }

    fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    fn topic_acked(&self) -> Vec<u64> {
        let mut acked = vec![0u64; self.topics];
        for (t, p) in &self.producers {
            acked[*t] += p.acked.load(Ordering::Relaxed);
        }
        acked
    }

    /// Per group: (topic, records acknowledged on its topic and not yet consumed by it).
    fn group_backlogs(&self, acked: &[u64]) -> Vec<(usize, u64)> {
        self.groups
            .iter()
            .map(|(t, cs)| {
                let consumed: u64 = cs.iter().map(|c| c.records.load(Ordering::Relaxed)).sum();
                (*t, acked[*t].saturating_sub(consumed))
            })
            .collect()
    }

    fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for (_, p) in &self.producers {
            t.sent += p.sent.load(Ordering::Relaxed);
            t.produced += p.acked.load(Ordering::Relaxed);
            t.produced_bytes += p.acked_bytes.load(Ordering::Relaxed);
            t.produce_errors += p.errors.load(Ordering::Relaxed);
        }
        for (_, cs) in &self.groups {
            for c in cs {
                t.consumed += c.records.load(Ordering::Relaxed);
                t.consumed_bytes += c.bytes.load(Ordering::Relaxed);
                t.consume_errors += c.errors.load(Ordering::Relaxed);
            }
        }
        let acked = self.topic_acked();
        t.backlog = self.group_backlogs(&acked).iter().map(|(_, b)| b).sum();
        t
    }

    fn sample(&mut self) -> Sample {
        let at = self.now();
        let totals = self.totals();
        let mut s = Sample::empty(self.last_at);
        s.end = at;
        s.counts = totals.delta(&self.last);
        for (_, p) in &self.producers {
            p.latency.drain_into(&mut s.produce_latency);
        }
        for (_, cs) in &self.groups {
            for c in cs {
                c.e2e.drain_into(&mut s.e2e_latency);
            }
        }
        let acked = self.topic_acked();
        let secs = at - self.last_at;
        if secs > 0.2 {
            for (t, a) in acked.iter().enumerate() {
                self.topic_rate[t] = a.saturating_sub(self.last_topic_acked[t]) as f64 / secs;
            }
        }
        self.last_topic_acked = acked;
        self.last = totals;
        self.last_at = at;
        s
    }

    /// Per topic, the partitions a record was acknowledged on (bitmaps).
    fn acked_partitions(&self) -> Vec<Vec<u64>> {
        let mut out = vec![vec![0u64; PartitionSet::CAPACITY / 64]; self.topics];
        for (t, p) in &self.producers {
            p.acked_partitions.add_to(&mut out[*t]);
        }
        out
    }

    /// Every group has read from each partition of `acked` (its topic's, from
    /// [`Sampler::acked_partitions`]): a consumer whose start left some partitions behind can be
    /// within a second of production while those are not read at all.
    fn read_all_of(&self, acked: &[Vec<u64>]) -> bool {
        self.groups.iter().all(|(t, cs)| {
            let mut read = vec![0u64; PartitionSet::CAPACITY / 64];
            for c in cs {
                c.partitions_read.add_to(&mut read);
            }
            is_subset(&acked[*t], &read)
        })
    }

    /// Every group's backlog is at most a second of its topic's production (and at least
    /// 100 records, so that a slow producer does not make the test meaningless).
    fn caught_up(&self) -> bool {
        if self.groups.is_empty() {
            return false;
        }
        let acked = self.topic_acked();
        self.group_backlogs(&acked)
            .iter()
            .all(|(t, b)| (*b as f64) <= self.topic_rate[*t].max(100.0))
    }
}

// ---------------------------------------------------------------- output

#[derive(Serialize)]
struct PhaseReport {
    phase: String,
    #[serde(flatten)]
    figures: IntervalReport,
}

/// The wait after the warm-up for the consumers to catch up (`--settle`).
#[derive(Serialize)]
struct SettleReport {
    /// Whether they did within --settle.
    caught_up: bool,
    seconds: f64,
}

#[derive(Serialize)]
struct CatchUpReport {
    /// Whether the consumers caught up (backlog within a second of production) in --duration.
    caught_up: bool,
    backlog_at_start_records: u64,
    backlog_at_start_mib: f64,
    /// From the start of the consumers to catching up (or to the end of the run).
    seconds: f64,
    /// From the start of the consumers to the first record they received (group join, first
    /// fetch), resolution 0.1 s. The read rates below count from then on.
    first_record_after_s: f64,
    read_records: u64,
    read_mib: f64,
    read_records_per_sec: f64,
    read_mib_per_sec: f64,
    produce_mib_per_sec: f64,
    /// Produce latency while the consumers catch up.
    produce_latency_ms: Option<LatencySummary>,
    /// Produce latency while the backlog was built, with no consumer: the comparison.
    produce_latency_before_ms: Option<LatencySummary>,
}

#[derive(Serialize)]
struct Results<'a> {
    tool: &'static str,
    version: &'static str,
    librdkafka: String,
    started_at_unix_ms: u64,
    bootstrap_servers: &'a str,
    topics: &'a [String],
    target_rate_records_per_sec: Option<f64>,
    args: &'a PerfArgs,
    /// The measured part: everything after the warm-up and the backlog build.
    summary: IntervalReport,
    catch_up: Option<CatchUpReport>,
    settle: Option<SettleReport>,
    phases: Vec<PhaseReport>,
    /// Client-level errors (connections, metadata), not tied to one record.
    client_errors: u64,
    /// One entry per second.
    timeline: Vec<PhaseReport>,
}

fn fmt_ms(s: &Option<LatencySummary>) -> String {
    match s {
        Some(s) => format!("p50 {:>7.2} p99 {:>7.2} max {:>8.2}", s.p50, s.p99, s.max),
        None => format!("{:>37}", "-"),
    }
}

fn period_line(phase: &str, r: &IntervalReport) -> String {
    format!(
        "{:>7.1}s {:<9} | prod {:>8.0}/s {:>7.2} MiB/s err {:<3} | cons {:>8.0}/s {:>7.2} MiB/s err {:<3} | backlog {:>9} | prod ms {} | e2e ms {}",
        r.end_s,
        phase,
        r.produce.records_per_sec,
        r.produce.mib_per_sec,
        r.produce.errors,
        r.consume.records_per_sec,
        r.consume.mib_per_sec,
        r.consume.errors,
        r.backlog_records,
        fmt_ms(&r.produce_latency_ms),
        fmt_ms(&r.e2e_latency_ms),
    )
}

/// The measured period in the OpenMessaging Benchmark's terms: its aggregated lines.
fn omb_figures(r: &IntervalReport) -> String {
    let lat = |s: &Option<LatencySummary>| {
        match s {
        Some(s) => format!(
            "avg: {:.3} - 50%: {:.3} - 75%: {:.3} - 95%: {:.3} - 99%: {:.3} - 99.9%: {:.3} - 99.99%: {:.3} - Max: {:.3}",
            s.avg, s.p50, s.p75, s.p95, s.p99, s.p999, s.p9999, s.max
        ),
        None => "-".into(),
    }
    };
    format!(
        "OpenMessaging Benchmark figures ({:.1} s measured):\n  Pub rate {:.1} msg/s / {:.2} MB/s | Cons rate {:.1} msg/s / {:.2} MB/s | Backlog: {:.1} K\n  Aggregated Pub Latency (ms) {}\n  Aggregated E2E Latency (ms) {}",
        r.seconds,
        r.produce.records_per_sec,
        r.produce.mib_per_sec,
        r.consume.records_per_sec,
        r.consume.mib_per_sec,
        r.backlog_records as f64 / 1000.0,
        lat(&r.produce_latency_ms),
        lat(&r.e2e_latency_ms),
    )
}

fn summary_text(title: &str, r: &IntervalReport) -> String {
    let mut out = format!("{title} ({:.1} s)\n", r.seconds);
    out += &format!(
        "  {:<12} {:>12} {:>10} {:>12} {:>8}\n",
        "", "records/s", "MiB/s", "records", "errors"
    );
    for (name, t) in [("produce", &r.produce), ("consume", &r.consume)] {
        out += &format!(
            "  {:<12} {:>12.1} {:>10.2} {:>12} {:>8}\n",
            name, t.records_per_sec, t.mib_per_sec, t.records, t.errors
        );
    }
    out += &format!("  backlog at the end: {} records\n", r.backlog_records);
    out += &format!("  {:<12}", "latency ms");
    for h in LatencySummary::HEADERS {
        out += &format!(" {h:>9}");
    }
    out.push('\n');
    for (name, s) in [
        ("produce", &r.produce_latency_ms),
        ("end-to-end", &r.e2e_latency_ms),
    ] {
        out += &format!("  {name:<12}");
        match s {
            Some(s) => {
                for f in s.figures() {
                    out += &format!(" {f:>9.2}");
                }
            }
            None => out += &format!(" {:>9}", "-"),
        }
        out.push('\n');
    }
    out
}

struct PhaseEnd {
    caught_up: bool,
    /// When the first record was consumed in the phase (seconds since the start).
    first_read: Option<f64>,
}

struct Progress {
    last_at: Instant,
    last: Totals,
    shown: bool,
}

// ---------------------------------------------------------------- the run

struct Run<'a> {
    args: &'a PerfArgs,
    sampler: Sampler,
    phases: Vec<(String, Sample)>,
    timeline: Vec<PhaseReport>,
    chart_points: Vec<ChartPoint>,
    period: Sample,
    progress: Option<Progress>,
}

impl Run<'_> {
    fn clear_progress(&mut self) {
        if let Some(p) = &mut self.progress {
            if p.shown {
                eprint!("\r\x1b[2K");
                p.shown = false;
            }
        }
    }

    fn show_progress(&mut self, phase: &str, since: Instant, length: Duration) {
        match &self.progress {
            Some(p) if p.last_at.elapsed() >= PROGRESS_EVERY => {}
            _ => return,
        }
        let totals = self.sampler.totals();
        let Some(p) = &mut self.progress else { return };
        let secs = p.last_at.elapsed().as_secs_f64();
        let d = totals.delta(&p.last);
        eprint!(
            "\r\x1b[2K{phase} {:.0}/{:.0} s | produce {:.0} rec/s {:.1} MiB/s | consume {:.0} rec/s {:.1} MiB/s | backlog {} | errors {}",
            since.elapsed().as_secs_f64(),
            length.as_secs_f64(),
            d.produced as f64 / secs,
            d.produced_bytes as f64 / secs / MIB,
            d.consumed as f64 / secs,
            d.consumed_bytes as f64 / secs / MIB,
            totals.backlog,
            totals.produce_errors + totals.consume_errors,
        );
        let _ = std::io::stderr().flush();
        p.shown = true;
        p.last = totals;
        p.last_at = Instant::now();
    }

    fn tick(&mut self, phase: &str, acc: &mut Sample) {
        let s = self.sampler.sample();
        acc.merge(&s);
        let r = s.report();
        self.chart_points.push(ChartPoint {
            t: r.end_s,
            produce: r.produce_latency_ms,
            e2e: r.e2e_latency_ms,
            produce_mib: r.produce.mib_per_sec,
            consume_mib: r.consume.mib_per_sec,
        });
        self.timeline.push(PhaseReport {
            phase: phase.to_string(),
            figures: r,
        });
        self.period.merge(&s);
        if self.period.seconds() + 0.05 >= self.args.report_interval.as_secs_f64() {
            self.print_period(phase);
        }
    }

    fn print_period(&mut self, phase: &str) {
        if self.period.seconds() > 0.05 {
            let line = period_line(phase, &self.period.report());
            self.clear_progress();
            println!("{line}");
        }
        let at = self.period.end;
        self.period = Sample::empty(at);
    }

    /// Runs one phase for `length`; `until` other than [`Until::Time`] ends it early when the
    /// consumers have caught up (and have read from every partition written to, for
    /// [`Until::Settled`]), and says so.
    fn phase(&mut self, name: &str, length: Duration, until: Until) -> PhaseEnd {
        let start = Instant::now();
        let end = start + length;
        let mut acc = Sample::empty(self.sampler.now());
        let mut next_tick = start + TICK;
        let mut out = PhaseEnd {
            caught_up: false,
            first_read: None,
        };
        let consumed_before = self.sampler.totals().consumed;
        // `Settled`: the partitions acknowledged on as of the last tick, which every group
        // must have read from by now.
        let settling = until == Until::Settled;
        let mut acked_at_tick = if settling {
            self.sampler.acked_partitions()
        } else {
            Vec::new()
        };
        loop {
            let now = Instant::now();
            if now >= end {
                break;
            }
            if until != Until::Time {
                if out.first_read.is_none() && self.sampler.totals().consumed > consumed_before {
                    out.first_read = Some(self.sampler.now());
                }
                let settled = !settling || self.sampler.read_all_of(&acked_at_tick);
                if settled && self.sampler.caught_up() {
                    out.caught_up = true;
                    break;
                }
            }
            if now >= next_tick {
                self.tick(name, &mut acc);
                next_tick += TICK;
                if settling {
                    acked_at_tick = self.sampler.acked_partitions();
                }
            }
            self.show_progress(name, start, length);
            let wake = end.min(next_tick).min(now + CHECK);
            std::thread::sleep(wake.saturating_duration_since(Instant::now()));
        }
        self.tick(name, &mut acc);
        self.print_period(name);
        self.phases.push((name.to_string(), acc));
        out
    }

    fn merged(&self, names: &[&str]) -> Sample {
        let mut out = Sample::empty(0.0);
        for (n, s) in &self.phases {
            if names.contains(&n.as_str()) {
                out.merge(s);
            }
        }
        out
    }
}

fn random_prefix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64 ^ d.as_secs())
        .unwrap_or(0);
    let mix = (nanos ^ ((std::process::id() as u64) << 20)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("weir-perf-{:06x}", mix >> 40)
}

fn describe_rate(rate: Option<f64>, record_size: usize) -> String {
    match rate {
        None => "as fast as possible".to_string(),
        Some(r) => format!(
            "{r:.0} records/s ({:.2} MiB/s)",
            r * record_size as f64 / MIB
        ),
    }
}

pub fn run(mut args: PerfArgs) -> anyhow::Result<()> {
    let workload = match args.workload.clone() {
        Some(path) => {
            let w = crate::workload::Workload::load(&path)?;
            let (scale, time_scale) = (args.workload_scale, args.workload_time_scale);
            if !(scale > 0.0 && scale.is_finite() && time_scale > 0.0 && time_scale.is_finite()) {
                bail!("--workload-scale and --workload-time-scale must be positive");
            }
            w.apply(&mut args, &path, scale, time_scale)?;
            println!("{}", w.describe(&args));
            Some(w)
        }
        None => None,
    };
    args.validate()?;
    let prefix = args.topic_prefix.clone().unwrap_or_else(random_prefix);
    let topics: Vec<String> = (0..args.topics).map(|i| format!("{prefix}-{i}")).collect();
    let rate = args.target_rate();
    let started_at_unix_ms = clients::now_micros() / 1000;
    let backlog_mode = !args.backlog.is_zero();

    println!(
        "weir perf -> {}: {} topic(s) {prefix}-N of {} partitions; per topic {} producer(s), {} group(s) of {} consumer(s); {} B records at {}",
        args.bootstrap_servers,
        args.topics,
        args.partitions,
        args.producers,
        args.groups,
        args.consumers,
        args.record_size,
        describe_rate(rate, args.record_size),
    );
    clients::create_topics(
        &args.bootstrap_servers,
        &topics,
        args.partitions,
        args.replication_factor,
    )?;

    let errors = Arc::new(ClientErrors::default());
    let mut workers = Workers::new();
    start_producers(&args, &topics, rate, &errors, &mut workers)?;
    if !backlog_mode && args.groups > 0 {
        start_groups(&args, &topics, &errors, &mut workers)?;
        wait_for_assignment(&workers.groups, args.partitions);
    }

    let mut run = Run::new(&args, &workers);
    run.sampler.add_groups(&workers.groups);
    run.sampler.sample();
    workers.go.store(true, Ordering::Release);

    if !args.warmup.is_zero() {
        run.phase(WARMUP, args.warmup, Until::Time);
    }
    // `validate` refuses --settle without consumer groups or with --backlog.
    let settle = (!args.settle.is_zero()).then(|| {
        let t0 = Instant::now();
        let ended = run.phase(SETTLE, args.settle, Until::Settled);
        SettleReport {
            caught_up: ended.caught_up,
            seconds: t0.elapsed().as_secs_f64(),
        }
    });
    let mut measured = vec![MEASURE];
    let mut catch_up = None;
    if backlog_mode {
        measured = vec![CATCH_UP, CAUGHT_UP];
        catch_up = Some(run_catch_up(&mut run, &topics, &errors, &mut workers)?);
    } else {
        run.phase(MEASURE, args.duration, Until::Time);
    }
    run.clear_progress();

    let summary = run.merged(&measured).report();
    let Finished {
        phases,
        chart_phases,
        timeline,
        chart_points,
    } = run.finish();
    // Stop the clients before printing and writing: the figures are final.
    workers.stop();
    drop(workers);

    print_results(&args, &summary, settle.as_ref(), catch_up.as_ref());
    if workload.is_some() {
        println!("{}", omb_figures(&summary));
    }
    let client_errors = errors.count.load(Ordering::Relaxed);
    if client_errors > 0 {
        println!("Client errors (connections, metadata, ...): {client_errors}");
    }

    if args.delete_topics {
        if let Err(e) = clients::delete_topics(&args.bootstrap_servers, &topics) {
            eprintln!("weir perf: warning: deleting the topics: {e:#}");
        }
    }

    let results = Results {
        tool: "weir perf",
        version: env!("CARGO_PKG_VERSION"),
        librdkafka: rdkafka::util::get_rdkafka_version().1,
        started_at_unix_ms,
        bootstrap_servers: &args.bootstrap_servers,
        topics: &topics,
        target_rate_records_per_sec: rate,
        args: &args,
        summary,
        catch_up,
        settle,
        phases,
        client_errors,
        timeline,
    };
    write_outputs(&results, &chart_points, &chart_phases)?;
    if results.summary.produce.records == 0 {
        bail!("no record was acknowledged during the measurement");
    }
    Ok(())
}

/// Starts `--producers` producers per topic, each at its share of the target rate; they send once
/// `workers.go` is set.
fn start_producers(
    args: &PerfArgs,
    topics: &[String],
    rate: Option<f64>,
    errors: &Arc<ClientErrors>,
    workers: &mut Workers,
) -> anyhow::Result<()> {
    let n_producers = args.topics * args.producers;
    let epoch = Instant::now();
    for (t, topic) in topics.iter().enumerate() {
        for p in 0..args.producers {
            let spec = clients::ProducerSpec {
                bootstrap: args.bootstrap_servers.clone(),
                topic: topic.clone(),
                record_size: args.record_size,
                rate: rate.map(|r| r / n_producers as f64),
                config: args.producer_config.clone(),
                client_id: format!("weir-perf-p{t}-{p}"),
                seed: 0x5EED_0000 + (t * 1000 + p) as u64,
                schema_id: args.schema_id,
                payload: args.payload.clone().map(Arc::new),
            };
            let handle = clients::start_producer(
                spec,
                epoch,
                errors.clone(),
                workers.go.clone(),
                workers.stop_producers.clone(),
            )?;
            workers.producers.push((t, handle));
        }
    }
    Ok(())
}

/// The backlog phase (producers only), then the consumer groups started and the catch-up phase
/// (with what is left of `--duration` after they caught up).
fn run_catch_up(
    run: &mut Run<'_>,
    topics: &[String],
    errors: &Arc<ClientErrors>,
    workers: &mut Workers,
) -> anyhow::Result<CatchUpReport> {
    let args = run.args;
    run.phase(BACKLOG, args.backlog, Until::Time);
    let before = run.sampler.totals();
    let backlog_at_start = before.produced;
    let backlog_bytes = before.produced_bytes;
    let groups_from = workers.groups.len();
    start_groups(args, topics, errors, workers)?;
    run.sampler.add_groups(&workers.groups[groups_from..]);
    let t0 = Instant::now();
    let ended = run.phase(CATCH_UP, args.duration, Until::CaughtUp);
    let rest = args.duration.saturating_sub(t0.elapsed());
    if ended.caught_up && !rest.is_zero() {
        run.phase(CAUGHT_UP, rest, Until::Time);
    }
    let c = run.merged(&[CATCH_UP]).report();
    let before_phase = run.merged(&[BACKLOG]);
    let first_read = ended.first_read.unwrap_or(c.end_s);
    let reading = (c.end_s - first_read).max(0.001);
    Ok(CatchUpReport {
        caught_up: ended.caught_up,
        backlog_at_start_records: backlog_at_start * args.groups as u64,
        backlog_at_start_mib: backlog_bytes as f64 * args.groups as f64 / MIB,
        seconds: c.seconds,
        first_record_after_s: (first_read - c.start_s).max(0.0),
        read_records: c.consume.records,
        read_mib: c.consume.bytes as f64 / MIB,
        read_records_per_sec: c.consume.records as f64 / reading,
        read_mib_per_sec: c.consume.bytes as f64 / MIB / reading,
        produce_mib_per_sec: c.produce.mib_per_sec,
        produce_latency_ms: c.produce_latency_ms,
        produce_latency_before_ms: LatencySummary::of(&before_phase.produce_latency),
    })
}

/// Prints the measured figures, the consumers' settling and the catch-up.
fn print_results(
    args: &PerfArgs,
    summary: &IntervalReport,
    settle: Option<&SettleReport>,
    catch_up: Option<&CatchUpReport>,
) {
    println!();
    if args.warmup.is_zero() {
        print!("{}", summary_text("Results", summary));
    } else {
        print!(
            "{}",
            summary_text(
                &format!(
                    "Results, after {:.0} s of warm-up{}",
                    args.warmup.as_secs_f64(),
                    settle.map_or(String::new(), |s| format!(
                        " and {:.1} s waiting for the consumers",
                        s.seconds
                    ))
                ),
                summary
            )
        );
    }
    if let Some(s) = settle {
        println!(
            "Consumers {} after the warm-up in {:.1} s (--settle {} s)",
            if s.caught_up {
                "caught up"
            } else {
                "did NOT catch up"
            },
            s.seconds,
            args.settle.as_secs_f64()
        );
    }
    if let Some(c) = catch_up {
        println!(
            "Catch-up: {} records ({:.0} MiB) of backlog; {} in {:.1} s (first record after {:.1} s), reading {:.1} MiB/s ({:.0} records/s) while producing {:.1} MiB/s",
            c.backlog_at_start_records,
            c.backlog_at_start_mib,
            if c.caught_up { "caught up" } else { "NOT caught up" },
            c.seconds,
            c.first_record_after_s,
            c.read_mib_per_sec,
            c.read_records_per_sec,
            c.produce_mib_per_sec
        );
        let p = |s: &Option<LatencySummary>| {
            s.map_or("-".to_string(), |s| {
                format!(
                    "p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}",
                    s.p50, s.p99, s.p999, s.max
                )
            })
        };
        println!(
            "  produce latency ms during catch-up: {}\n  produce latency ms before (no consumers): {}",
            p(&c.produce_latency_ms),
            p(&c.produce_latency_before_ms)
        );
    }
}

/// Writes the results as JSON (`--output`) and the chart (`--chart`).
fn write_outputs(
    results: &Results<'_>,
    chart_points: &[ChartPoint],
    chart_phases: &[ChartPhase],
) -> anyhow::Result<()> {
    let args = results.args;
    let rate = results.target_rate_records_per_sec;
    if let Some(path) = &args.output {
        let json = serde_json::to_string_pretty(results).context("encoding the results")?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("Results written to {}", path.display());
    }
    if let Some(path) = &args.chart {
        let title = format!(
            "weir perf -> {}: {} B records at {}",
            args.bootstrap_servers,
            args.record_size,
            describe_rate(rate, args.record_size)
        );
        let svg = chart::svg(&title, chart_points, chart_phases);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
        println!("Chart written to {}", path.display());
    }
    Ok(())
}

impl Workers {
    fn new() -> Workers {
        Workers {
            go: Arc::new(AtomicBool::new(false)),
            stop_producers: Arc::new(AtomicBool::new(false)),
            stop_consumers: Arc::new(AtomicBool::new(false)),
            producers: Vec::new(),
            groups: Vec::new(),
        }
    }
}

/// What a run leaves for the report once its phases are over.
struct Finished {
    phases: Vec<PhaseReport>,
    chart_phases: Vec<ChartPhase>,
    timeline: Vec<PhaseReport>,
    chart_points: Vec<ChartPoint>,
}

impl<'a> Run<'a> {
    /// A run whose time 0 is now, the start of sending.
    fn new(args: &'a PerfArgs, workers: &Workers) -> Run<'a> {
        Run {
            args,
            sampler: Sampler::new(Instant::now(), args.topics, &workers.producers),
            phases: Vec::new(),
            timeline: Vec::new(),
            chart_points: Vec::new(),
            period: Sample::empty(0.0),
            progress: (!args.quiet && std::io::stderr().is_terminal()).then(|| Progress {
                last_at: Instant::now(),
                last: Totals::default(),
                shown: false,
            }),
        }
    }

    /// Each phase's figures, the chart's phases and points, and the timeline.
    fn finish(self) -> Finished {
        let phases = self
            .phases
            .iter()
            .map(|(n, s)| PhaseReport {
                phase: n.clone(),
                figures: s.report(),
            })
            .collect();
        let chart_phases = self
            .phases
            .iter()
            .map(|(n, s)| ChartPhase {
                name: n.clone(),
                start: s.start,
                end: s.end,
            })
            .collect();
        Finished {
            phases,
            chart_phases,
            timeline: self.timeline,
            chart_points: self.chart_points,
        }
    }
}
