//! OpenMessaging Benchmark workload files (`weir perf --workload FILE`): the published
//! workloads of the systems Weir is compared with run as they are written, scaled to the
//! machine with `--workload-scale` (rates and backlog) and `--workload-time-scale` (warm-up and
//! test durations).
//!
//! A workload file is a flat YAML map (OMB's `Workload` class): `name`, `topics`,
//! `partitionsPerTopic`, `messageSize`, `payloadFile`, `producersPerTopic`,
//! `subscriptionsPerTopic`, `consumerPerSubscription`, `producerRate` (records/s in all),
//! `consumerBacklogSizeGB`, `warmupDurationMinutes`, `testDurationMinutes`, `keyDistributor`.
//! Anything nested, or a key OMB does not have, is refused with the line it is on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::args::PerfArgs;

/// A workload as its file says, before scaling.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    pub name: String,
    pub topics: usize,
    pub partitions_per_topic: i32,
    pub message_size: usize,
    pub payload_file: Option<String>,
    pub producers_per_topic: usize,
    pub subscriptions_per_topic: usize,
    pub consumer_per_subscription: usize,
    /// Records per second over all producers; 0 or less: as fast as possible.
    pub producer_rate: f64,
    pub consumer_backlog_size_gb: f64,
    pub warmup_minutes: f64,
    pub test_minutes: f64,
    pub key_distributor: String,
}

/// Keys OMB's workloads have that `weir perf` reads, and those it accepts and leaves alone
/// (its payloads are the payload file's bytes or random ones either way).
const KNOWN: &[&str] = &[
    "name",
    "topics",
    "partitionsPerTopic",
    "messageSize",
    "payloadFile",
    "producersPerTopic",
    "subscriptionsPerTopic",
    "consumerPerSubscription",
    "producerRate",
    "consumerBacklogSizeGB",
    "warmupDurationMinutes",
    "testDurationMinutes",
    "keyDistributor",
    "useRandomizedPayloads",
    "randomBytesRatio",
    "randomizedPayloadPoolSize",
];

/// A flat YAML map: `key: value` lines, `#` comments, values optionally quoted.
fn flat_map(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split(" #").next().unwrap_or("").trim_end();
        if line.trim().is_empty() || line.trim_start().starts_with('#') || line.trim() == "---" {
            continue;
        }
        if line.starts_with(char::is_whitespace) || line.trim_start().starts_with('-') {
            bail!(
                "line {}: nested values are not part of a workload: {raw:?}",
                n + 1
            );
        }
        let Some((key, value)) = line.split_once(':') else {
            bail!("line {}: expected `key: value`, got {raw:?}", n + 1);
        };
        let key = key.trim();
        if !KNOWN.contains(&key) {
            bail!(
                "line {}: {key:?} is not a key of OpenMessaging Benchmark workloads (known: {})",
                n + 1,
                KNOWN.join(", ")
            );
        }
        let value = value
            .trim()
            .trim_matches('"')
            .trim_matches('\'')
            .to_string();
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

impl Workload {
    pub fn parse(text: &str) -> anyhow::Result<Workload> {
        let map = flat_map(text)?;
        let num = |key: &str, default: f64| -> anyhow::Result<f64> {
            match map.get(key) {
                None => Ok(default),
                Some(v) => v
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .with_context(|| format!("{key}: {v:?} is not a number")),
            }
        };
        let count = |key: &str, default: f64| -> anyhow::Result<usize> {
            let v = num(key, default)?;
            if v < 0.0 || v.fract() != 0.0 || v > 1e6 {
                bail!("{key}: {v} is not a count");
            }
            Ok(v as usize)
        };
        let w = Workload {
            name: map.get("name").cloned().unwrap_or_default(),
            topics: count("topics", 1.0)?,
            partitions_per_topic: i32::try_from(count("partitionsPerTopic", 1.0)?)
                .context("partitionsPerTopic")?,
            message_size: count("messageSize", 1024.0)?,
            payload_file: map.get("payloadFile").filter(|s| !s.is_empty()).cloned(),
            producers_per_topic: count("producersPerTopic", 1.0)?,
            subscriptions_per_topic: count("subscriptionsPerTopic", 1.0)?,
            consumer_per_subscription: count("consumerPerSubscription", 1.0)?,
            producer_rate: num("producerRate", 0.0)?,
            consumer_backlog_size_gb: num("consumerBacklogSizeGB", 0.0)?,
            // OMB warms up for a minute unless told otherwise.
            warmup_minutes: num("warmupDurationMinutes", 1.0)?,
            test_minutes: num("testDurationMinutes", 15.0)?,
            key_distributor: map
                .get("keyDistributor")
                .cloned()
                .unwrap_or_else(|| "NO_KEY".into()),
        };
        if w.topics == 0 || w.partitions_per_topic == 0 || w.producers_per_topic == 0 {
            bail!("topics, partitionsPerTopic and producersPerTopic must be at least 1");
        }
        if w.message_size < 8 {
            bail!("messageSize must be at least 8 (the send timestamp)");
        }
        if w.test_minutes <= 0.0 || w.warmup_minutes < 0.0 || w.consumer_backlog_size_gb < 0.0 {
            bail!("testDurationMinutes must be positive; warm-up and backlog not negative");
        }
        if w.consumer_backlog_size_gb > 0.0 && w.producer_rate <= 0.0 {
            bail!("consumerBacklogSizeGB needs a producerRate (the backlog is built at that rate)");
        }
        Ok(w)
    }

    pub fn load(path: &Path) -> anyhow::Result<Workload> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the workload {}", path.display()))?;
        Workload::parse(&text).with_context(|| format!("workload {}", path.display()))
    }

    /// Sets `args` as the workload says, rates and backlog times `scale`, durations times
    /// `time_scale`. The payload file is looked for as given, then beside the workload file.
    pub fn apply(
        &self,
        args: &mut PerfArgs,
        workload_path: &Path,
        scale: f64,
        time_scale: f64,
    ) -> anyhow::Result<()> {
        args.topics = self.topics;
        args.partitions = self.partitions_per_topic;
        args.producers = self.producers_per_topic;
        args.groups = self.subscriptions_per_topic;
        args.consumers = self.consumer_per_subscription.max(1);
        args.record_size = self.message_size;
        args.throughput_mib = None;
        args.rate = Some(if self.producer_rate > 0.0 {
            self.producer_rate * scale
        } else {
            0.0
        });
        let minutes = |m: f64| Duration::from_secs_f64((m * 60.0 * time_scale).max(0.0));
        args.warmup = minutes(self.warmup_minutes);
        args.duration = minutes(self.test_minutes).max(Duration::from_secs(1));
        args.backlog = if self.consumer_backlog_size_gb > 0.0 {
            let bytes = self.consumer_backlog_size_gb * scale * (1u64 << 30) as f64;
            let per_sec = self.producer_rate * scale * self.message_size as f64;
            Duration::from_secs_f64((bytes / per_sec).max(1.0))
        } else {
            Duration::ZERO
        };
        if let Some(file) = &self.payload_file {
            let given = PathBuf::from(file);
            let beside = workload_path
                .parent()
                .map(|d| d.join(file))
                .unwrap_or_else(|| given.clone());
            let path = if given.exists() { given } else { beside };
            let bytes = std::fs::read(&path)
                .with_context(|| format!("reading the payload file {}", path.display()))?;
            if bytes.is_empty() {
                bail!("the payload file {} is empty", path.display());
            }
            args.payload = Some(bytes);
        }
        Ok(())
    }

    /// What the run does, in the workload's terms and `weir perf`'s.
    pub fn describe(&self, args: &PerfArgs) -> String {
        let keys = if self.key_distributor == "NO_KEY" {
            String::new()
        } else {
            format!(
                "; keyDistributor {} is not followed: records carry no key",
                self.key_distributor
            )
        };
        format!(
            "workload {:?}: {} topic(s) x {} partitions, {} B messages, {} producer(s) and {} subscription(s) of {} consumer(s) per topic, {} msg/s, backlog {:.1} s, warm-up {:.0} s, test {:.0} s{keys}",
            self.name,
            args.topics,
            args.partitions,
            args.record_size,
            args.producers,
            args.groups,
            args.consumers,
            args.rate.map_or("max".into(), |r| if r > 0.0 { format!("{r:.0}") } else { "max".into() }),
            args.backlog.as_secs_f64(),
            args.warmup.as_secs_f64(),
            args.duration.as_secs_f64(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: PerfArgs,
    }

    /// AutoMQ's published 1,000-partition workload, as OMB writes it.
    const SEED: &str = r#"
name: 1-topic-1000-partitions-4kb-4p4c-1000k
# comments and blank lines are fine

topics: 1
partitionsPerTopic: 1000
messageSize: 4096
payloadFile: "payload/payload-4Kb.data"
subscriptionsPerTopic: 1
consumerPerSubscription: 4
producersPerTopic: 4
producerRate: 1000000
consumerBacklogSizeGB: 0
warmupDurationMinutes: 1
testDurationMinutes: 15
keyDistributor: "NO_KEY"
"#;

    #[test]
    fn a_published_workload_sets_the_run_scaled_to_the_machine() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("payload")).unwrap();
        std::fs::write(dir.path().join("payload/payload-4Kb.data"), vec![7u8; 4096]).unwrap();
        let file = dir.path().join("w.yaml");
        std::fs::write(&file, SEED).unwrap();
        let w = Workload::load(&file).unwrap();
        assert_eq!(w.partitions_per_topic, 1000);
        let mut args = Cli::parse_from(["perf"]).a;
        w.apply(&mut args, &file, 0.01, 1.0 / 60.0).unwrap();
        assert_eq!(
            (
                args.topics,
                args.partitions,
                args.producers,
                args.groups,
                args.consumers
            ),
            (1, 1000, 4, 1, 4)
        );
        assert_eq!(args.record_size, 4096);
        assert_eq!(args.rate, Some(10_000.0));
        assert_eq!(args.warmup, Duration::from_secs(1));
        assert_eq!(args.duration, Duration::from_secs(15));
        assert_eq!(args.backlog, Duration::ZERO);
        assert_eq!(args.payload.as_deref().map(<[u8]>::len), Some(4096));
        args.validate().unwrap();
    }

    #[test]
    fn a_backlog_in_gib_becomes_seconds_of_production() {
        let w = Workload::parse(
            "topics: 1\npartitionsPerTopic: 16\nmessageSize: 1024\nproducerRate: 1024\nconsumerBacklogSizeGB: 1\n",
        )
        .unwrap();
        let mut args = Cli::parse_from(["perf"]).a;
        w.apply(&mut args, Path::new("w.yaml"), 1.0, 1.0).unwrap();
        // 1 GiB at 1 MiB/s.
        assert_eq!(args.backlog, Duration::from_secs(1024));
        assert_eq!(args.warmup, Duration::from_secs(60));
        assert_eq!(args.duration, Duration::from_secs(900));
    }

    #[test]
    fn what_is_not_a_workload_is_refused_with_its_line() {
        let e = Workload::parse("topics: 1\npartitionsPerTopc: 3\n").unwrap_err();
        assert!(format!("{e:#}").contains("line 2"), "{e:#}");
        let e = Workload::parse("topics:\n  - 1\n").unwrap_err();
        assert!(format!("{e:#}").contains("nested"), "{e:#}");
        let e = Workload::parse("topics: many\n").unwrap_err();
        assert!(format!("{e:#}").contains("not a number"), "{e:#}");
        let e = Workload::parse("consumerBacklogSizeGB: 1\n").unwrap_err();
        assert!(format!("{e:#}").contains("producerRate"), "{e:#}");
    }
}
