//! Command-line options of `weir perf` and their parsers.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::Serialize;

/// Options of `weir perf`. Flag names are stable: scripts rely on them.
#[derive(clap::Args, Debug, Clone, Serialize)]
#[command(about = "Load generator: produce and consume against any Kafka-compatible broker")]
pub struct PerfArgs {
    /// Kafka bootstrap servers, host:port[,host:port...].
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_servers: String,

    /// Number of topics.
    #[arg(long, default_value_t = 1)]
    pub topics: usize,

    /// Topic names are PREFIX-0, PREFIX-1, ...; by default a fresh random prefix, so every run
    /// starts on empty topics (backlog and end-to-end figures assume that).
    #[arg(long)]
    pub topic_prefix: Option<String>,

    /// Partitions per topic.
    #[arg(long, default_value_t = 16)]
    pub partitions: i32,

    /// Replication factor of created topics; -1 is the broker's default.
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub replication_factor: i32,

    /// Producers per topic.
    #[arg(long, default_value_t = 1)]
    pub producers: usize,

    /// Consumer groups per topic (0: produce only).
    #[arg(long, default_value_t = 1)]
    pub groups: usize,

    /// Consumers per group.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,

    /// Record value size in bytes (the first 8 carry the send timestamp).
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,

    /// Frame every value in the schema registry's wire format with this schema id: magic byte
    /// 0, the id, then an Avro datum of `{"type":"record","name":"PerfRecord","fields":[{"name":
    /// "sent","type":{"type":"fixed","name":"Sent","size":8}},{"name":"data","type":"bytes"}]}`
    /// (the send timestamp, then the rest of --record-size): for topics with schema validation.
    #[arg(long)]
    pub schema_id: Option<u32>,

    /// Total send rate in records/s over all producers; 0 for as fast as possible.
    /// Default 1000 unless --throughput-mib is given.
    #[arg(long, conflicts_with = "throughput_mib")]
    pub rate: Option<f64>,

    /// Total send rate in MiB/s over all producers; 0 for as fast as possible.
    #[arg(long)]
    pub throughput_mib: Option<f64>,

    /// Producer client setting (librdkafka names), repeatable: --producer-config linger.ms=5.
    /// Defaults: acks=all, linger.ms=1.
    #[arg(long = "producer-config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub producer_config: Vec<(String, String)>,

    /// Consumer client setting (librdkafka names), repeatable.
    /// Defaults: auto.offset.reset=earliest.
    #[arg(long = "consumer-config", value_name = "KEY=VALUE", value_parser = parse_key_value)]
    pub consumer_config: Vec<(String, String)>,

    /// Warm-up before measuring (reported, not counted in the results), e.g. 10s, 1m, 500ms.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub warmup: Duration,

    /// After the warm-up, wait up to this long for every consumer group to catch up (records
    /// read from every partition written to, and a backlog of at most a second of production)
    /// before measuring; how long it took is reported. For consumers slow to start: a new
    /// librdkafka consumer looks up each partition's first offset with a request of its own,
    /// and at 10,000 partitions sends some thousands of them seconds to a minute late.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub settle: Duration,

    /// Measured duration.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub duration: Duration,

    /// Catch-up mode: produce this long with no consumers (after the warm-up), then start the
    /// consumers from the earliest offset while producing goes on, and measure for --duration.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub backlog: Duration,

    /// How often a line of figures is printed.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    #[serde(serialize_with = "ser_duration")]
    pub report_interval: Duration,

    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    pub output: Option<PathBuf>,

    /// Write a chart of latency percentiles and throughput over time (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub chart: Option<PathBuf>,

    /// Delete the topics at the end of the run.
    #[arg(long)]
    pub delete_topics: bool,

    /// No progress line on the terminal.
    #[arg(long)]
    pub quiet: bool,

    /// Run an OpenMessaging Benchmark workload file (YAML): it sets the topics, partitions,
    /// message size and payload, producers, subscriptions and consumers, rate, backlog, warm-up
    /// and duration, and OMB's figures are printed at the end (`weir_perf::workload`).
    #[arg(long, value_name = "FILE.yaml")]
    pub workload: Option<PathBuf>,

    /// With --workload: times the workload's producer rate and backlog size (scale a published
    /// workload to this machine, e.g. 0.01).
    #[arg(long, default_value_t = 1.0)]
    pub workload_scale: f64,

    /// With --workload: times its warm-up and test durations (e.g. 0.1: a 15-minute test runs
    /// 90 s).
    #[arg(long, default_value_t = 1.0)]
    pub workload_time_scale: f64,

    /// Record values: these bytes (a workload's payload file), with the send timestamp over
    /// their first 8; random bytes when `None`.
    #[arg(skip)]
    #[serde(skip)]
    pub payload: Option<Vec<u8>>,
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl PerfArgs {
    /// Total target rate in records/s; `None` is as fast as possible.
    pub fn target_rate(&self) -> Option<f64> {
        let rate = match (self.rate, self.throughput_mib) {
            (Some(r), _) => r,
            (None, Some(mib)) => mib * 1024.0 * 1024.0 / self.record_size.max(1) as f64,
            (None, None) => 1000.0,
        };
        (rate > 0.0).then_some(rate)
    }

    pub fn validate(&self) -> anyhow::Result<()> {
        if self.topics == 0 || self.producers == 0 {
            bail!("--topics and --producers must be at least 1");
        }
        if self.partitions < 1 {
            bail!("--partitions must be at least 1");
        }
        if self.groups > 0 && self.consumers == 0 {
            bail!("--consumers must be at least 1 when there are consumer groups");
        }
        if self.duration.is_zero() {
            bail!("--duration must be more than 0");
        }
        if !self.settle.is_zero() && (self.groups == 0 || !self.backlog.is_zero()) {
            bail!("--settle needs consumer groups (--groups) and no --backlog (catch-up mode measures the catch-up itself)");
        }
        if !self.settle.is_zero() && self.partitions as usize > crate::stats::PartitionSet::CAPACITY
        {
            bail!(
                "--settle follows at most {} partitions per topic",
                crate::stats::PartitionSet::CAPACITY
            );
        }
        if self.report_interval.is_zero() {
            bail!("--report-interval must be more than 0");
        }
        for (flag, v) in [
            ("--rate", self.rate),
            ("--throughput-mib", self.throughput_mib),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v < 0.0 {
                    bail!("{flag} must be a number >= 0");
                }
            }
        }
        if !self.backlog.is_zero() && self.groups == 0 {
            bail!("--backlog needs consumer groups (--groups >= 1)");
        }
        if let Some(chart) = &self.chart {
            let ext = chart.extension().and_then(|e| e.to_str()).unwrap_or("");
            if !ext.eq_ignore_ascii_case("svg") {
                bail!("--chart writes SVG: give a file name ending in .svg");
            }
        }
        Ok(())
    }
}

/// `key=value`.
pub fn parse_key_value(s: &str) -> anyhow::Result<(String, String)> {
    let (k, v) = s
        .split_once('=')
        .with_context(|| format!("{s:?} is not key=value"))?;
    let k = k.trim();
    if k.is_empty() {
        bail!("{s:?}: empty key");
    }
    Ok((k.to_string(), v.trim().to_string()))
}

/// `90`, `90s`, `1m30s`, `500ms`, `2h`, `1.5s`: a bare number is seconds.
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    if s.is_empty() {
        bail!("empty duration");
    }
    if let Ok(secs) = s.parse::<f64>() {
        return secs_to_duration(secs, s);
    }
    let mut total = 0.0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .with_context(|| format!("{s:?}: a number needs a unit (ms, s, m, h)"))?;
        if num_len == 0 {
            bail!("{s:?} is not a duration (e.g. 10s, 1m30s, 500ms)");
        }
        let n: f64 = rest[..num_len]
            .parse()
            .with_context(|| format!("{s:?} is not a duration"))?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let factor = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            u => bail!("{s:?}: unknown unit {u:?} (ms, s, m, h)"),
        };
        total += n * factor;
        rest = &rest[unit_len..];
    }
    secs_to_duration(total, s)
}

fn secs_to_duration(secs: f64, s: &str) -> anyhow::Result<Duration> {
    if !secs.is_finite() || secs < 0.0 {
        bail!("{s:?} is not a duration >= 0");
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: PerfArgs,
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn key_values() {
        assert_eq!(
            parse_key_value("linger.ms=5").unwrap(),
            ("linger.ms".into(), "5".into())
        );
        assert_eq!(
            parse_key_value("client.id=a=b").unwrap(),
            ("client.id".into(), "a=b".into())
        );
        assert!(parse_key_value("linger.ms").is_err());
        assert!(parse_key_value("=5").is_err());
    }

    #[test]
    fn defaults_are_a_one_minute_run() {
        let cli = Cli::try_parse_from(["perf", "--bootstrap-servers", "h:1"]).unwrap();
        let a = cli.args;
        a.validate().unwrap();
        assert_eq!(a.bootstrap_servers, "h:1");
        assert_eq!(a.duration, Duration::from_secs(60));
        assert_eq!(a.warmup, Duration::from_secs(10));
        assert!(a.backlog.is_zero());
        assert_eq!(a.target_rate(), Some(1000.0));
    }

    #[test]
    fn all_flags_parse() {
        let cli = Cli::try_parse_from([
            "perf",
            "--bootstrap-servers",
            "h:1",
            "--topics",
            "2",
            "--partitions",
            "4",
            "--producers",
            "3",
            "--groups",
            "2",
            "--consumers",
            "2",
            "--record-size",
            "65536",
            "--throughput-mib",
            "64",
            "--producer-config",
            "acks=1",
            "--producer-config",
            "linger.ms=0",
            "--consumer-config",
            "fetch.wait.max.ms=100",
            "--warmup",
            "5s",
            "--duration",
            "1m",
            "--backlog",
            "60s",
            "--output",
            "r.json",
            "--chart",
            "r.svg",
        ])
        .unwrap();
        let a = cli.args;
        a.validate().unwrap();
        assert_eq!(a.target_rate(), Some(1024.0));
        assert_eq!(a.producer_config.len(), 2);
        assert_eq!(a.backlog, Duration::from_secs(60));
        let zero = Cli::try_parse_from(["perf", "--rate", "0"]).unwrap().args;
        assert_eq!(zero.target_rate(), None);
        assert!(Cli::try_parse_from(["perf", "--rate", "1", "--throughput-mib", "1"]).is_err());
        let png = Cli::try_parse_from(["perf", "--chart", "x.png"])
            .unwrap()
            .args;
        assert!(png.validate().is_err());
    }

    #[test]
    fn settle_needs_consumers_and_no_backlog() {
        let parse = |extra: &[&str]| {
            let mut argv = vec!["perf", "--settle", "2m"];
            argv.extend_from_slice(extra);
            Cli::try_parse_from(argv).unwrap().args
        };
        let a = parse(&[]);
        a.validate().unwrap();
        assert_eq!(a.settle, Duration::from_secs(120));
        assert!(parse(&["--groups", "0"]).validate().is_err());
        assert!(parse(&["--backlog", "10s"]).validate().is_err());
        // The partitions it follows: up to PartitionSet::CAPACITY per topic.
        assert!(parse(&["--partitions", "65536"]).validate().is_ok());
        let over = parse(&["--partitions", "65537"]).validate().unwrap_err();
        assert!(
            over.to_string().contains("at most 65536 partitions"),
            "{over}"
        );
    }
}
