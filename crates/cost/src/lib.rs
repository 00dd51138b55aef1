//! `weir cost`: what a workload costs per month on Weir, line by line (object storage, PUTs,
//! GETs, cross-zone traffic, compute), beside the same workload on Apache Kafka with three
//! replicas on block storage, with every price and assumption on the command line.
//!
//! Two sources of the workload:
//! - a broker's `/metrics` (scraped twice, `--window` apart): rates of bytes written, PUTs and
//!   GETs as the broker really made them, extrapolated to a month;
//! - a described workload (`--write-mib-s`, `--read-mib-s`, `--retention-days`, ...): the model
//!   below, which is how the request counts arise in Weir.
//!
//! The model: data reaches object storage once, in uploads of `--upload-mib` (each one PUT, as
//! the broker writes them while its WAL has room); compaction rewrites each byte
//! `--compaction-rewrites` times (a GET and a PUT per part of `--part-mib`);
//! reads of recent data come from the log cache (no GET) and catch-up reads (`--catchup-share`
//! of reads) cost one GET per `--readahead-mib`. With zone-aware clients (`weir_az=` in
//! `client.id`) no data crosses zones: object storage is regional.
//!
//! Compute ([`compute`]): brokers of `--instance` (r6in.large) at `--target-utilization` (0.5)
//! of their vCPUs for the CPU seconds each system spends per GiB it moves: Weir's from the
//! broker's own meters when scraped, else from the benchmark both systems ran
//! ([`compute::BENCH_SOURCE`]); Kafka's from that benchmark. Kafka moves each produced byte five
//! times (the produce, two followers' fetches and two followers' appends), Weir once; at least
//! three brokers each (three zones).

pub mod compute;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context};

const MONTH_SECS: f64 = 30.0 * 86_400.0;
const GIB: f64 = (1u64 << 30) as f64;
const MIB: f64 = (1u64 << 20) as f64;

#[derive(clap::Args, Debug, Clone)]
pub struct CostArgs {
    /// Scrape a broker's meters: http://HOST:PORT/metrics (the admin port).
    #[arg(long)]
    pub metrics_url: Option<String>,
    /// Time between the two scrapes.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub window: Duration,
    /// Workload: MiB/s produced (all brokers).
    #[arg(long)]
    pub write_mib_s: Option<f64>,
    /// Workload: MiB/s consumed (all consumers).
    #[arg(long, default_value_t = 0.0)]
    pub read_mib_s: f64,
    /// Days data is kept.
    #[arg(long, default_value_t = 7.0)]
    pub retention_days: f64,
    /// Share of reads that are catch-up reads of data no longer in the log cache.
    #[arg(long, default_value_t = 0.0)]
    pub catchup_share: f64,
    /// Size of an upload, MiB (`storage.upload_bytes`; one PUT each).
    #[arg(long, default_value_t = 128.0)]
    pub upload_mib: f64,
    /// Part size of compaction's writes, MiB (one PUT each).
    #[arg(long, default_value_t = 16.0)]
    pub part_mib: f64,
    /// Read-ahead of catch-up readers, MiB (one GET each).
    #[arg(long, default_value_t = 16.0)]
    pub readahead_mib: f64,
    /// Times compaction rewrites each byte.
    #[arg(long, default_value_t = 1.0)]
    pub compaction_rewrites: f64,
    /// A described workload on the object WAL (`wal.kind=object`): every broker writes its
    /// produce as WAL objects, which are the data objects (compaction then rewrites them).
    #[arg(long)]
    pub object_wal: bool,
    /// Object WAL: the brokers' `wal.object_max_puts_per_sec` (0: no budget; each broker then
    /// seals an object every `--object-wal-linger-ms` while anything is produced).
    #[arg(long, default_value_t = 0.0)]
    pub object_wal_max_puts_per_sec: f64,
    /// Object WAL: `wal.object_linger_ms`.
    #[arg(long, default_value_t = 5.0)]
    pub object_wal_linger_ms: f64,
    /// Object WAL: `wal.object_bytes`, MiB.
    #[arg(long, default_value_t = 8.0)]
    pub object_wal_mib: f64,
    /// Clients are not zone-aware: 2/3 of produce and consume traffic crosses zones (3 zones).
    #[arg(long)]
    pub not_zone_aware: bool,
    /// Brokers of each system, instead of sizing them from CPU.
    #[arg(long)]
    pub brokers: Option<u32>,
    /// Broker instance type (its vCPUs and $/hour from the table in `compute.rs`).
    #[arg(long, default_value = "r6in.large")]
    pub instance: String,
    /// Price of one broker instance, $/hour (default: the instance type's).
    #[arg(long)]
    pub instance_hourly: Option<f64>,
    /// vCPUs of one broker instance (default: the instance type's).
    #[arg(long)]
    pub instance_vcpus: Option<f64>,
    /// Share of a broker's vCPUs the sizing plans to use.
    #[arg(long, default_value_t = 0.5)]
    pub target_utilization: f64,
    /// Weir's broker CPU seconds per GiB produced + consumed (default: measured from the
    /// scraped broker, else the benchmark's).
    #[arg(long)]
    pub weir_cpu_s_per_gib: Option<f64>,
    /// Kafka's broker CPU seconds per GiB produced + consumed, one replica (default: the
    /// benchmark's).
    #[arg(long)]
    pub kafka_cpu_s_per_gib: Option<f64>,
    /// Object storage, $/GB-month.
    #[arg(long, default_value_t = 0.023)]
    pub storage_price: f64,
    /// $ per 1000 PUTs.
    #[arg(long, default_value_t = 0.005)]
    pub put_price: f64,
    /// $ per 1000 GETs.
    #[arg(long, default_value_t = 0.0004)]
    pub get_price: f64,
    /// Cross-zone traffic, $/GB (both directions together).
    #[arg(long, default_value_t = 0.02)]
    pub cross_zone_price: f64,
    /// Kafka comparison: block storage, $/GB-month (gp3).
    #[arg(long, default_value_t = 0.08)]
    pub kafka_disk_price: f64,
    /// Kafka comparison: disk kept free, as a share of the disk.
    #[arg(long, default_value_t = 0.0)]
    pub kafka_disk_headroom: f64,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (n, unit) = s.split_at(
        s.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len()),
    );
    let n: f64 = n.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in {s:?}")),
    };
    Ok(Duration::from_secs_f64(secs))
}

/// Rates of a workload, per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rates {
    pub write_bytes: f64,
    pub read_bytes: f64,
    pub puts: f64,
    pub gets: f64,
    /// Bytes that crossed zones, from the broker's meters (`weir_net_bytes_total`); `None`
    /// for a described workload, which assumes zone-aware clients (or `--not-zone-aware`).
    pub cross_zone_bytes: Option<f64>,
    /// The broker's CPU seconds per GiB produced + consumed, from its meters
    /// (`process_cpu_seconds_total`); `None` for a described workload.
    pub cpu_s_per_gib: Option<f64>,
    /// Rates described (`model`), not measured: the object WAL's PUTs depend on the brokers.
    pub described: bool,
}

/// One line of the bill.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub item: &'static str,
    pub quantity: String,
    pub dollars: f64,
}

/// The modelled rates of a described workload.
pub fn model(a: &CostArgs, write_bytes: f64) -> Rates {
    let part = a.part_mib * MIB;
    let catchup = a.read_mib_s * MIB * a.catchup_share;
    Rates {
        write_bytes,
        read_bytes: a.read_mib_s * MIB,
        puts: write_bytes / (a.upload_mib * MIB) + write_bytes / part * a.compaction_rewrites,
        gets: write_bytes / part * a.compaction_rewrites + catchup / (a.readahead_mib * MIB),
        cross_zone_bytes: None,
        cpu_s_per_gib: None,
        described: true,
    }
}

/// PUTs per second of a described workload on the object WAL, over `brokers` brokers: each
/// seals an object at its budget's rate (or every linger without one) unless objects fill
/// first, and compaction rewrites what was written.
pub fn object_wal_puts(a: &CostArgs, r: &Rates, brokers: u32) -> f64 {
    let per_broker_bytes = r.write_bytes / f64::from(brokers.max(1));
    let quiet_rate = if a.object_wal_max_puts_per_sec > 0.0 {
        a.object_wal_max_puts_per_sec
    } else {
        1000.0 / a.object_wal_linger_ms.max(0.001)
    };
    let full_rate = per_broker_bytes / (a.object_wal_mib.max(0.001) * MIB);
    let sealed = if r.write_bytes > 0.0 {
        quiet_rate.max(full_rate)
    } else {
        0.0
    };
    f64::from(brokers) * sealed + r.write_bytes / (a.part_mib * MIB) * a.compaction_rewrites
}

pub fn weir_bill(a: &CostArgs, r: &Rates) -> Vec<Line> {
    let stored_gib = r.write_bytes * a.retention_days * 86_400.0 / GIB;
    let sizing = weir_sizing(a, r);
    let puts = if a.object_wal && r.described {
        object_wal_puts(a, r, sizing.brokers)
    } else {
        r.puts
    } * MONTH_SECS;
    let gets = r.gets * MONTH_SECS;
    let cross_gib = match r.cross_zone_bytes {
        Some(measured) => measured * MONTH_SECS / GIB,
        None if a.not_zone_aware => (r.write_bytes + r.read_bytes) * 2.0 / 3.0 * MONTH_SECS / GIB,
        None => 0.0,
    };
    let mut lines = vec![
        Line {
            item: "object storage",
            quantity: format!("{stored_gib:.0} GiB stored"),
            dollars: stored_gib * a.storage_price,
        },
        Line {
            item: "PUT requests",
            quantity: format!("{:.1} M", puts / 1e6),
            dollars: puts / 1000.0 * a.put_price,
        },
        Line {
            item: "GET requests",
            quantity: format!("{:.1} M", gets / 1e6),
            dollars: gets / 1000.0 * a.get_price,
        },
        Line {
            item: "cross-zone traffic",
            quantity: format!("{cross_gib:.0} GiB"),
            dollars: cross_gib * a.cross_zone_price,
        },
    ];
    lines.push(compute_line(a, &sizing));
    lines
}

/// The instance type priced: `--instance`, with `--instance-vcpus` and `--instance-hourly`
/// over its figures (an unknown type needs both).
pub fn instance(a: &CostArgs) -> anyhow::Result<compute::Instance> {
    let known = compute::instance(&a.instance);
    let (vcpus, hourly) = match (known, a.instance_vcpus, a.instance_hourly) {
        (_, Some(v), Some(h)) => (v, h),
        (Some(i), v, h) => (v.unwrap_or(i.vcpus), h.unwrap_or(i.hourly)),
        (None, _, _) => bail!(
            "unknown instance type {:?}: give --instance-vcpus and --instance-hourly, or one of {}",
            a.instance,
            compute::INSTANCES
                .iter()
                .map(|i| i.name)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    if vcpus <= 0.0 || hourly < 0.0 {
        bail!("--instance-vcpus must be above 0 and --instance-hourly at least 0");
    }
    Ok(compute::Instance {
        name: known.map_or("custom", |i| i.name),
        vcpus,
        hourly,
    })
}

fn sized(a: &CostArgs, cpu: f64, source: String, gib_per_s: f64) -> compute::Sizing {
    // An unknown type without both overrides is refused in `run` before any bill is made.
    let vcpus = instance(a).map_or(2.0, |i| i.vcpus);
    let mut s = compute::size(
        cpu,
        source,
        gib_per_s,
        vcpus,
        a.target_utilization,
        compute::MIN_BROKERS,
    );
    if let Some(n) = a.brokers {
        (s.brokers, s.bound) = (n, "given");
    }
    s
}

/// Weir's brokers: its CPU per GiB over the bytes produced and consumed.
pub fn weir_sizing(a: &CostArgs, r: &Rates) -> compute::Sizing {
    let (cpu, source) = match (a.weir_cpu_s_per_gib, r.cpu_s_per_gib) {
        (Some(c), _) => (c, "--weir-cpu-s-per-gib".to_string()),
        (None, Some(c)) => (c, "the broker's meters".to_string()),
        (None, None) => (
            compute::WEIR_CPU_S_PER_GIB,
            compute::BENCH_SOURCE.to_string(),
        ),
    };
    let mut s = sized(a, cpu, source, (r.write_bytes + r.read_bytes) / GIB);
    // Clients' bytes, and object storage's: each byte PUT once and again per compaction
    // rewrite, read back by compaction and by catch-up reads.
    s.nic_bytes_per_s = r.write_bytes * (2.0 + 2.0 * a.compaction_rewrites)
        + r.read_bytes * (1.0 + a.catchup_share);
    s
}

/// Kafka's brokers: its CPU per GiB over the bytes it moves, each produced byte five times with
/// three replicas (the produce, two followers' fetches, two followers' appends).
pub fn kafka_sizing(a: &CostArgs, r: &Rates) -> compute::Sizing {
    let (cpu, source) = match a.kafka_cpu_s_per_gib {
        Some(c) => (c, "--kafka-cpu-s-per-gib".to_string()),
        None => (
            compute::KAFKA_CPU_S_PER_GIB,
            compute::BENCH_SOURCE.to_string(),
        ),
    };
    let mut s = sized(a, cpu, source, (5.0 * r.write_bytes + r.read_bytes) / GIB);
    // Clients' bytes, and each produced byte out of the leader twice and into followers twice.
    s.nic_bytes_per_s = 5.0 * r.write_bytes + r.read_bytes;
    s
}

fn compute_line(a: &CostArgs, s: &compute::Sizing) -> Line {
    let (name, hourly) = instance(a).map_or(("?", 0.0), |i| (i.name, i.hourly));
    Line {
        item: "compute",
        quantity: format!("{} x {name} at ${hourly}/h", s.brokers),
        dollars: f64::from(s.brokers) * hourly * 24.0 * 30.0,
    }
}

/// Apache Kafka for the same workload: three replicas on block storage, replication across
/// three zones, and clients that are not zone-aware (2/3 of their traffic crosses zones).
pub fn kafka_bill(a: &CostArgs, r: &Rates) -> Vec<Line> {
    let disk_gib = r.write_bytes * a.retention_days * 86_400.0 * 3.0
        / GIB
        / (1.0 - a.kafka_disk_headroom).max(0.01);
    let cross_gib =
        (2.0 * r.write_bytes + (r.write_bytes + r.read_bytes) * 2.0 / 3.0) * MONTH_SECS / GIB;
    vec![
        Line {
            item: "block storage (3 replicas)",
            quantity: format!("{disk_gib:.0} GiB"),
            dollars: disk_gib * a.kafka_disk_price,
        },
        Line {
            item: "cross-zone traffic",
            quantity: format!("{cross_gib:.0} GiB"),
            dollars: cross_gib * a.cross_zone_price,
        },
        compute_line(a, &kafka_sizing(a, r)),
    ]
}

pub fn total(lines: &[Line]) -> f64 {
    lines.iter().map(|l| l.dollars).sum()
}

/// Reads counters from Prometheus text: `name{labels}` -> value.
pub fn parse_metrics(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}

fn scrape(url: &str) -> anyhow::Result<HashMap<String, f64>> {
    let rest = url
        .strip_prefix("http://")
        .context("only http:// metrics URLs")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/metrics".to_string()), |(h, p)| {
            (h, format!("/{p}"))
        });
    let mut s = TcpStream::connect(host).with_context(|| format!("connecting to {host}"))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    let Some((_, text)) = body.split_once("\r\n\r\n") else {
        bail!("no HTTP body from {url}")
    };
    Ok(parse_metrics(text))
}

/// Rates from two scrapes `secs` apart.
pub fn rates_between(
    before: &HashMap<String, f64>,
    after: &HashMap<String, f64>,
    secs: f64,
) -> Rates {
    let d = |k: &str| {
        (after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0)).max(0.0)
            / secs
    };
    let moved_gib = (d("weir_produce_bytes_total") + d("weir_fetch_bytes_total")) * secs / GIB;
    let cpu = after
        .contains_key("process_cpu_seconds_total")
        .then(|| d("process_cpu_seconds_total") * secs)
        .filter(|_| moved_gib > 0.0);
    Rates {
        write_bytes: d("weir_produce_bytes_total"),
        read_bytes: d("weir_fetch_bytes_total"),
        puts: d("weir_object_requests_total{kind=\"put\"}")
            + d("weir_object_requests_total{kind=\"multipart_part\"}")
            + d("weir_object_requests_total{kind=\"multipart_start\"}"),
        gets: d("weir_object_requests_total{kind=\"get\"}"),
        cross_zone_bytes: cross_zone(after)
            .map(|a| (a - cross_zone(before).unwrap_or(0.0)).max(0.0) / secs),
        cpu_s_per_gib: cpu.map(|c| c / moved_gib),
        described: false,
    }
}

/// Bytes the broker counted between different zones (`weir_net_bytes_total` with different
/// source and destination zones; a client in no known zone is taken to cross two times in
/// three, as with three zones). `None` when the broker has no zone meters.
pub fn cross_zone(m: &HashMap<String, f64>) -> Option<f64> {
    let mut found = false;
    let mut cross = 0.0;
    for (k, v) in m {
        let Some(labels) = k.strip_prefix("weir_net_bytes_total{") else {
            continue;
        };
        found = true;
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('}').trim_end_matches('"'))
        };
        match (label("src_zone"), label("dst_zone")) {
            (Some(s), Some(d)) if s == "unknown" || d == "unknown" => cross += v * 2.0 / 3.0,
            (Some(s), Some(d)) if s != d => cross += v,
            _ => {}
        }
    }
    found.then_some(cross)
}

fn print_bill(out: &mut impl Write, title: &str, lines: &[Line]) -> std::io::Result<()> {
    writeln!(out, "{title}")?;
    for l in lines {
        writeln!(
            out,
            "  {:<28} {:>24} {:>14}",
            l.item,
            l.quantity,
            format!("${:.0}", l.dollars)
        )?;
    }
    writeln!(
        out,
        "  {:<28} {:>24} {:>14}",
        "total per month",
        "",
        format!("${:.0}", total(lines))
    )
}

/// How each system's brokers were counted.
fn print_sizing(out: &mut impl Write, system: &str, s: &compute::Sizing) -> std::io::Result<()> {
    writeln!(
        out,
        "  {system}: {:.2} CPU s/GiB ({}) x {:.2} GiB/s moved = {:.1} vCPUs busy; {} brokers ({}); \
         network in + out {:.1} Gbit/s per broker (not sized for: check the instance's)",
        s.cpu_s_per_gib,
        s.cpu_source,
        s.gib_per_s,
        s.cores,
        s.brokers,
        s.bound,
        s.nic_bytes_per_s * 8.0 / 1e9 / f64::from(s.brokers.max(1))
    )
}

pub fn run(a: CostArgs) -> anyhow::Result<()> {
    let inst = instance(&a)?;
    if !(a.target_utilization > 0.0 && a.target_utilization <= 1.0) {
        bail!("--target-utilization must be above 0 and at most 1");
    }
    let rates = if let Some(url) = &a.metrics_url {
        let before = scrape(url)?;
        std::thread::sleep(a.window);
        let after = scrape(url)?;
        let r = rates_between(&before, &after, a.window.as_secs_f64());
        if r.write_bytes == 0.0 {
            bail!(
                "no bytes were produced during the {:?} window: nothing to extrapolate",
                a.window
            );
        }
        r
    } else if let Some(w) = a.write_mib_s {
        model(&a, w * MIB)
    } else {
        bail!("give --metrics-url (a broker's /metrics) or --write-mib-s (a workload)");
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "workload: {:.1} MiB/s in, {:.1} MiB/s out, {} days retention; {:.1} PUT/s, {:.1} GET/s",
        rates.write_bytes / MIB,
        rates.read_bytes / MIB,
        a.retention_days,
        rates.puts,
        rates.gets
    )?;
    let weir = weir_bill(&a, &rates);
    let kafka = kafka_bill(&a, &rates);
    print_bill(
        &mut out,
        "Weir (object storage, zone-aware clients):",
        &weir,
    )?;
    print_bill(
        &mut out,
        "Apache Kafka (3 replicas on block storage, 3 zones):",
        &kafka,
    )?;
    writeln!(
        out,
        "Compute: {} ({} vCPUs, ${}/h) at {:.0}% of their vCPUs, at least {} brokers (three zones):",
        inst.name,
        inst.vcpus,
        inst.hourly,
        a.target_utilization * 100.0,
        compute::MIN_BROKERS
    )?;
    print_sizing(&mut out, "Weir", &weir_sizing(&a, &rates))?;
    print_sizing(
        &mut out,
        "Kafka (each produced byte moved 5 times)",
        &kafka_sizing(&a, &rates),
    )?;
    let (w, k) = (total(&weir), total(&kafka));
    if k > 0.0 {
        writeln!(
            out,
            "Weir costs {:.1}% of Kafka's bill ({:.1}x less)",
            w / k * 100.0,
            k / w.max(1e-9)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: CostArgs,
    }

    fn args(extra: &[&str]) -> CostArgs {
        Cli::parse_from(std::iter::once("cost").chain(extra.iter().copied())).a
    }

    /// The object WAL's PUTs: a quiet cluster pays its budget (or its linger) per broker, a busy
    /// one a PUT per object filled; compaction rewrites on top.
    #[test]
    fn object_wal_puts_follow_the_budget_when_quiet_and_the_size_when_busy() {
        let quiet = args(&[
            "--write-mib-s",
            "1",
            "--object-wal",
            "--object-wal-max-puts-per-sec",
            "2",
            "--compaction-rewrites",
            "0",
        ]);
        let r = model(&quiet, MIB);
        assert!((object_wal_puts(&quiet, &r, 3) - 6.0).abs() < 1e-9);
        // No budget: every linger (5 ms) on each broker.
        let linger = args(&[
            "--write-mib-s",
            "1",
            "--object-wal",
            "--compaction-rewrites",
            "0",
        ]);
        assert!((object_wal_puts(&linger, &r, 3) - 600.0).abs() < 1e-9);
        // 240 MiB/s on 3 brokers fills 10 objects of 8 MiB a second each.
        let busy = model(&quiet, 240.0 * MIB);
        assert!((object_wal_puts(&quiet, &busy, 3) - 30.0).abs() < 1e-9);
        // The bill uses them for a described workload on the object WAL.
        let bill = weir_bill(&quiet, &r);
        let puts = bill.iter().find(|l| l.item == "PUT requests").unwrap();
        assert_eq!(puts.quantity, format!("{:.1} M", 6.0 * MONTH_SECS / 1e6));
    }

    /// AutoMQ's FSx comparison workload: 1 GiB/s in and out, 3 days.
    #[test]
    fn one_gib_per_second_three_days() {
        let a = args(&[
            "--write-mib-s",
            "1024",
            "--read-mib-s",
            "1024",
            "--retention-days",
            "3",
        ]);
        let r = model(&a, 1024.0 * MIB);
        let weir = weir_bill(&a, &r);
        // 1 GiB/s for 3 days: 259,200 GiB at $0.023.
        assert!((weir[0].dollars - 259_200.0 * 0.023).abs() < 1.0);
        // 8 uploads/s of 128 MiB, and 64 parts/s of compaction: 72 PUT/s over 30 days.
        assert!((weir[1].dollars - 72.0 * MONTH_SECS / 1000.0 * 0.005).abs() < 1.0);
        assert_eq!(weir[3].dollars, 0.0, "zone-aware: nothing crosses zones");
        let kafka = kafka_bill(&a, &r);
        // Replication (2 GiB/s) and 2/3 of 2 GiB/s of client traffic cross zones.
        let cross = (2.0 + 4.0 / 3.0) * MONTH_SECS * 0.02;
        assert!((kafka[1].dollars - cross).abs() < 1.0);
        assert!(total(&kafka) > 10.0 * total(&weir));
    }

    /// Compute is sized from CPU per GiB: AutoMQ's workload moves 2 GiB/s through Weir's
    /// brokers and 6 GiB/s through Kafka's (each produced byte five times).
    #[test]
    fn brokers_sized_from_cpu_per_gib() {
        let a = args(&["--write-mib-s", "1024", "--read-mib-s", "1024"]);
        let r = model(&a, 1024.0 * MIB);
        let w = weir_sizing(&a, &r);
        assert_eq!(w.cpu_s_per_gib, compute::WEIR_CPU_S_PER_GIB);
        assert!((w.gib_per_s - 2.0).abs() < 1e-9);
        // 1.55 x 2 = 3.1 vCPUs, one per r6in.large at 50%: 4 brokers.
        assert_eq!((w.brokers, w.bound), (4, "CPU"));
        let k = kafka_sizing(&a, &r);
        // 2.62 x 6 = 15.72 vCPUs: 16 brokers.
        assert_eq!((k.brokers, k.bound), (16, "CPU"));
        let line = weir_bill(&a, &r).pop().expect("compute");
        assert_eq!(line.item, "compute");
        assert!((line.dollars - 4.0 * 0.17433 * 720.0).abs() < 1e-6);
        // A small workload still has a broker in each zone.
        let small = model(&a, 10.0 * MIB);
        assert_eq!(weir_sizing(&a, &small).bound, "minimum");
        assert_eq!(weir_sizing(&a, &small).brokers, 3);
        // Given counts and prices win.
        let a = args(&[
            "--write-mib-s",
            "1024",
            "--brokers",
            "7",
            "--instance",
            "m6i.xlarge",
            "--instance-hourly",
            "0.2",
        ]);
        let line = kafka_bill(&a, &r).pop().expect("compute");
        assert!((line.dollars - 7.0 * 0.2 * 720.0).abs() < 1e-6);
        assert_eq!(instance(&a).expect("known").vcpus, 4.0);
        assert!(instance(&args(&["--instance", "x9.huge"])).is_err());
        assert!(instance(&args(&[
            "--instance",
            "x9.huge",
            "--instance-vcpus",
            "8",
            "--instance-hourly",
            "1"
        ]))
        .is_ok());
    }

    #[test]
    fn weir_cpu_per_gib_comes_from_the_scraped_broker() {
        let before = parse_metrics(
            "weir_produce_bytes_total 0\nweir_fetch_bytes_total 0\nprocess_cpu_seconds_total 10\n",
        );
        let after = parse_metrics(&format!(
            "weir_produce_bytes_total {}\nweir_fetch_bytes_total {}\nprocess_cpu_seconds_total 13\n",
            GIB,
            GIB
        ));
        let r = rates_between(&before, &after, 10.0);
        // 3 CPU seconds for 2 GiB moved.
        assert_eq!(r.cpu_s_per_gib, Some(1.5));
        let a = args(&[]);
        assert_eq!(weir_sizing(&a, &r).cpu_source, "the broker's meters");
        // A broker without the meter: the benchmark's figure.
        let old = parse_metrics(&format!("weir_produce_bytes_total {GIB}\n"));
        assert_eq!(
            rates_between(&HashMap::new(), &old, 1.0).cpu_s_per_gib,
            None
        );
    }

    #[test]
    fn rates_from_two_scrapes() {
        let before = parse_metrics(
            "# HELP x\nweir_produce_bytes_total 1000\nweir_object_requests_total{kind=\"put\"} 1\n",
        );
        let after = parse_metrics("weir_produce_bytes_total 3000\nweir_object_requests_total{kind=\"put\"} 5\nweir_object_requests_total{kind=\"get\"} 2\n");
        let r = rates_between(&before, &after, 2.0);
        assert_eq!(
            r,
            Rates {
                write_bytes: 1000.0,
                read_bytes: 0.0,
                puts: 2.0,
                gets: 1.0,
                cross_zone_bytes: None,
                cpu_s_per_gib: None,
                described: false,
            }
        );
    }

    #[test]
    fn cross_zone_bytes_come_from_the_meters() {
        let before = parse_metrics(
            "weir_net_bytes_total{src_zone=\"a\",dst_zone=\"b\",kind=\"fetch\"} 100\n",
        );
        let after = parse_metrics(
            "weir_net_bytes_total{src_zone=\"a\",dst_zone=\"b\",kind=\"fetch\"} 1100\n\
             weir_net_bytes_total{src_zone=\"a\",dst_zone=\"a\",kind=\"produce\"} 9000\n\
             weir_net_bytes_total{src_zone=\"unknown\",dst_zone=\"a\",kind=\"produce\"} 300\n",
        );
        let r = rates_between(&before, &after, 10.0);
        assert_eq!(r.cross_zone_bytes, Some((1000.0 + 200.0) / 10.0));
        let a = args(&[]);
        let bill = weir_bill(&a, &r);
        assert!((bill[3].dollars - 120.0 * MONTH_SECS / GIB * 0.02).abs() < 1e-6);
        // No zone meters: nothing measured.
        assert_eq!(
            rates_between(&HashMap::new(), &HashMap::new(), 1.0).cross_zone_bytes,
            None
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5x").is_err());
    }
}
