//! `weir perf`: a load generator for Kafka-compatible brokers, in the spirit of the
//! OpenMessaging Benchmark and AutoMQ's perf tool. It measures the broker, not itself: the
//! clients are librdkafka (through the `rdkafka` crate), the same library many production
//! clients use.
//!
//! How the parts fit:
//!
//! - [`args`]: the command-line options ([`PerfArgs`]); the flag names are stable.
//! - [`clients`]: topic creation and deletion, producer threads that pace records to the
//!   target rate and stamp each with its send time, and consumer threads in consumer groups.
//! - [`stats`]: counters and HDR histograms the clients record into, and the arithmetic that
//!   turns them into per-second samples, report periods and phases.
//! - `runner` (private): the timeline of a run (warm-up, optional backlog build, measurement,
//!   catch-up detection), the once-a-second sampler, the progress line and the printed
//!   figures, and the JSON results.
//! - [`chart`]: an SVG chart of latency percentiles and throughput over time, written by hand.
//! - [`workload`]: OpenMessaging Benchmark workload files (`--workload`), turned into options,
//!   and OMB's figures printed at the end.
//!
//! A run: create fresh topics; start the consumers and wait for their partitions (unless in
//! backlog mode); start the producers; warm up; in backlog mode, produce for `--backlog` with
//! no consumer, then start the consumers at the earliest offset; measure for `--duration`.
//! Produce latency runs from `send()` to the delivery report; end-to-end latency from the
//! timestamp in the record value to its receipt by a consumer (same machine, same clock).

pub mod args;
pub mod chart;
pub mod clients;
mod runner;
pub mod stats;
pub mod workload;

pub use args::PerfArgs;

/// Runs `weir perf` with these options: prints figures as it goes and a summary at the end,
/// and writes the JSON results and the chart if asked.
pub fn run(args: PerfArgs) -> anyhow::Result<()> {
    runner::run(args)
}
