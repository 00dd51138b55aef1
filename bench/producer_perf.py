#!/usr/bin/env python3
"""Kafka's own load generator against Weir and Apache Kafka, on this machine
(`make bench-producer-perf`; `make bench` runs it too).

    WEIR_BIN=target/release/weir bench/producer_perf.py

ProducerPerformance from kafka-clients 4.1 (tools/kafka/kafka.sh tool producer-perf), 1 KiB
records, acks=all, linger.ms=1, one partition, each run on a fresh single broker (Kafka 4.1;
`weir serve` with its objects in a local directory):

  max     as fast as it goes, BENCH_PP_MAX_RECORDS [2000000] records: the maximum durable
          produce throughput (Kafka acknowledges from its page cache, Weir once its WAL synced)
  max16   the same on a topic of BENCH_PP_PARTITIONS [16] partitions: on one partition the
          Java producer itself stops near 100,000 records/s in front of either broker
  30k     BENCH_PP_RATE [30000] records/s for BENCH_PP_SECONDS [30] s: produce latency
          percentiles at a fixed rate

Each measured run comes after a warm-up in the same JVM (tools/kafka/WarmProducerPerformance.java:
BENCH_PP_WARMUP_MAX_RECORDS [500000] records at full speed before "max", BENCH_PP_WARMUP_SECONDS
[50] s at the rate before "30k"), so the JVM's start is not in the percentiles (after 10 s at the
rate, the pinned JVM still compiled for another 15 s and sent below the rate meanwhile); plus the broker's
CPU seconds per GiB and resident memory (largest), from /proc every second of the measured run.
With BENCH_PIN=1 each broker runs on the cores BENCH_BROKER_CPUS [1] only and the producer on
BENCH_CLIENT_CPUS [0] (taskset): equal hardware for both brokers, none of it shared with the
load generator.
Writes bench/results/producer-perf-YYYY-MM-DD-HHMM.md (and appends the section to
BENCH_PP_APPEND_TO when set, as `make bench` does).

Environment (defaults in brackets): WEIR_BIN (required), BENCH_PP_BROKERS ["kafka weir"],
BENCH_PP_RUNS ["max 30k"],
BENCH_PP_MAX_RECORDS, BENCH_PP_RATE, BENCH_PP_SECONDS, BENCH_PP_DIR [target/bench-producer-perf],
BENCH_PP_RESULTS [bench/results].
"""

import datetime
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402  (the harness: Broker)
from sync_latency import measure as sync_latency  # noqa: E402  (the disk's own syncs)
from object_wal import JAVA_LINE, metrics  # noqa: E402  (the summary line; /metrics)
from pg_restart import buckets  # noqa: E402  (a histogram's buckets from /metrics)
from partitions import Sampler, create_topic, write_results  # noqa: E402

BROKERS = os.environ.get("BENCH_PP_BROKERS", "kafka weir").split()
MAX_RECORDS = int(os.environ.get("BENCH_PP_MAX_RECORDS", "2000000"))
RATE = int(os.environ.get("BENCH_PP_RATE", "30000"))
SECONDS = int(os.environ.get("BENCH_PP_SECONDS", "30"))
WORK = os.path.abspath(os.environ.get("BENCH_PP_DIR",
                                      os.path.join(REPO, "target", "bench-producer-perf")))
RESULTS = os.path.abspath(os.environ.get("BENCH_PP_RESULTS",
                                         os.path.join(REPO, "bench", "results")))
# Records sent before the measured run, in the same JVM: "max" at full speed, "30k" at the rate.
RUNS = os.environ.get("BENCH_PP_RUNS", "max max16 30k").split()
# Partitions of the topic in the "max16" run.
MANY = int(os.environ.get("BENCH_PP_PARTITIONS", "16"))
WARMUP_MAX = int(os.environ.get("BENCH_PP_WARMUP_MAX_RECORDS", "500000"))
WARMUP_SECONDS = int(os.environ.get("BENCH_PP_WARMUP_SECONDS", "50"))
PIN = os.environ.get("BENCH_PIN") == "1"
BROKER_CPUS = os.environ.get("BENCH_BROKER_CPUS", "1")
CLIENT_CPUS = os.environ.get("BENCH_CLIENT_CPUS", "0")
# Seconds of bench/sync_latency.py before Weir's fixed-rate run; 0: none.
PROBE_SECONDS = float(os.environ.get("BENCH_PP_DISK_PROBE_SECONDS", "30"))
PROPS = ["acks=all", "linger.ms=1"]
KAFKA_SH = os.path.join(REPO, "tools", "kafka", "kafka.sh")
WARM = os.path.join(REPO, "tools", "kafka", "WarmProducerPerformance.java")
TOOL_TIMEOUT = 600


def pin(pid, cpus):
    """All threads of a running process onto `cpus` (threads it makes later inherit it)."""
    subprocess.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], check=True,
                   stdout=subprocess.DEVNULL)


def run(kind, tag, records, throughput, warmup, partitions=1):
    root = os.path.join(WORK, f"{kind}-{tag}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    disk = None
    if kind == "weir" and throughput > 0 and PROBE_SECONDS > 0:
        # The disk alone, just before: its stalls are random, and a broker that syncs waits
        # for every one of them.
        disk = sync_latency(root, size=16384, seconds=PROBE_SECONDS, interval=0.001)
    b = weir_harness.Broker(kind, root, env={"WEIR_WAL_CAPACITY": str(1 << 30)})
    b.kind = kind
    b.start()
    try:
        if PIN:
            pin(b.pid, BROKER_CPUS)
        r = measure(b, tag, records, throughput, warmup=warmup, partitions=partitions)
        if disk:
            r.update({f"disk_{k}": v for k, v in disk.items()})
        return r
    finally:
        b.stop()
        # A broker's data dir holds GiBs after a run.
        shutil.rmtree(root, ignore_errors=True)


def measure(b, tag, records, throughput, bootstrap=None, extra=(), warmup=0, partitions=1,
            payload_file=None, topic_configs=None):
    """ProducerPerformance with PROPS against the running broker b, on a topic "pp" of one
    partition created over b.bootstrap; the producer bootstraps from `bootstrap` (default
    b.bootstrap), with `extra` arguments after its properties (bench/tls.py: a
    --producer.config). With `warmup`, that many records are sent first in the same JVM
    (tools/kafka/WarmProducerPerformance.java) and only the run after them is measured. The
    broker's CPU and memory are sampled while the measured run goes on. With `payload_file`
    the records are its lines (--payload-file) instead of 1 KiB of random bytes, and the topic
    is created with `topic_configs`."""
    # Created first, and the load started once the partition has a leader (a client
    # that starts before waits for the leader, which would count as produce latency).
    create_topic(b.bootstrap, "pp", partitions, topic_configs)
    size = ["--payload-file", payload_file] if payload_file else ["--record-size", "1024"]
    args = ["--topic", "pp", "--num-records", str(records),
            *size, "--throughput", str(throughput),
            "--producer-props", f"bootstrap.servers={bootstrap or b.bootstrap}", *PROPS, *extra]
    tool = ["producer-perf", *args] if not warmup else [WARM, str(warmup), *args]
    cmd = [*(["taskset", "-c", CLIENT_CPUS] if PIN else []), KAFKA_SH, "tool", *tool]
    print("bench: " + " ".join(cmd), flush=True)
    sampler = Sampler(b.pid)
    scrapes = []
    if not warmup:
        sampler.start()
        scrapes.append(scrape(b))
    out = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    killer = threading.Timer(TOOL_TIMEOUT, proc.kill)
    killer.start()
    try:
        for line in proc.stdout:
            out.append(line)
            if warmup and line.strip() == "warm-up done":
                sampler.start()
                scrapes.append(scrape(b))
        proc.wait()
        scrapes.append(scrape(b))
    finally:
        killer.cancel()
        if sampler.is_alive():
            sampler.halt.set()
            sampler.join()
    r = subprocess.CompletedProcess(cmd, proc.returncode, "".join(out), "")
    m = None
    for line in r.stdout.splitlines():
        m = JAVA_LINE.search(line) or m
    if m is None:
        raise RuntimeError(f"no summary from ProducerPerformance: {r.stdout[-300:]}"
                           f"{r.stderr[-300:]}")
    g = [float(x) for x in m.groups()]
    gib = g[0] * 1024 / (1 << 30)
    s = sampler.summary()
    broker = {}
    if len(scrapes) == 2 and all(scrapes):
        for name, key in [("wal_sync_latency", "wal_sync"), ("produce_latency", "produce")]:
            over, slowest = slow(scrapes[0], scrapes[1], name, 0.016)
            broker[f"{key}_over_16ms"] = over
            broker[f"{key}_slowest_ms"] = slowest
    return {**broker, "kind": b.kind, "tag": tag, "records_per_sec": g[1], "mb_per_sec": g[2],
            "avg": g[3], "p50": g[5], "p95": g[6], "p99": g[7], "p999": g[8], "max": g[4],
            "cpu_s_per_gib": s["cpu_s"] / gib if s and gib else None,
            "rss_max_mib": s.get("rss_max_mib"),
            "cmd": " ".join(["kafka.sh", "tool", *tool])
            .replace(WARM, "tools/kafka/WarmProducerPerformance.java")
            .replace(b.bootstrap, "HOST:PORT")}


def scrape(b):
    """Weir's /metrics, or None (Kafka, or no answer)."""
    if b.kind != "weir":
        return None
    try:
        return metrics(b)
    except OSError:
        return None


def slow(before, after, name, over):
    """From the histogram `name` between two scrapes: how many observations were above `over`
    seconds, and the upper bound (ms) of the highest bucket that gained any."""
    a = dict(buckets(before, f"weir_{name}_seconds"))
    b = buckets(after, f"weir_{name}_seconds")
    if not b:
        return None, None
    diff = [(le, n - a.get(le, 0)) for le, n in b]
    total = diff[-1][1]
    under = max((c for le, c in diff if le <= over), default=0)
    prev, slowest = 0, None
    for le, c in diff:
        if c > prev:
            slowest = le * 1e3
        prev = c
    return total - under, slowest


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.1f}"


def ratio(k, w):
    if not isinstance(k, (int, float)) or not isinstance(w, (int, float)) or not k:
        return "-"
    return f"{w / k:.2f}"


def report(results, stamp, elapsed):
    rows = [
        ("max", "records/s", "records_per_sec"), ("max", "MB/s", "mb_per_sec"),
        ("max", "latency p50 ms", "p50"), ("max", "latency p99 ms", "p99"),
        ("max", "broker CPU s per GiB", "cpu_s_per_gib"),
        ("max", "broker RSS MiB, largest", "rss_max_mib"),
        ("max16", "records/s", "records_per_sec"), ("max16", "MB/s", "mb_per_sec"),
        ("max16", "latency p50 ms", "p50"), ("max16", "latency p99 ms", "p99"),
        ("max16", "broker CPU s per GiB", "cpu_s_per_gib"),
        ("max16", "broker RSS MiB, largest", "rss_max_mib"),
        ("30k", "records/s", "records_per_sec"), ("30k", "latency p50 ms", "p50"),
        ("30k", "latency p99 ms", "p99"), ("30k", "latency p99.9 ms", "p999"),
        ("30k", "latency max ms", "max"),
        ("30k", "broker: WAL syncs over 16 ms", "wal_sync_over_16ms"),
        ("30k", "broker: slowest WAL sync, ms (bucket)", "wal_sync_slowest_ms"),
        ("30k", "broker: produce requests over 16 ms", "produce_over_16ms"),
        ("30k", "the disk alone before it: synced writes over 16 ms", "disk_over_16ms"),
        ("30k", "the disk alone before it: slowest synced write, ms", "disk_max"),
        ("30k", "the disk alone before it: p99.9 ms", "disk_p999"),
        ("30k", "broker CPU s per GiB", "cpu_s_per_gib"),
        ("30k", "broker RSS MiB, largest", "rss_max_mib"),
    ]
    titles = {"max": f"maximum ({MAX_RECORDS:,} records as fast as they go)",
              "max16": f"maximum on {MANY} partitions ({MAX_RECORDS:,} records)",
              "30k": f"{RATE:,} records/s for {SECONDS} s"}
    lines = [f"## Kafka's ProducerPerformance ({stamp})", "",
             "kafka-clients 4.1's ProducerPerformance, 1 KiB records, acks=all, linger.ms=1, one "
             f"partition ({MANY} in the second maximum), a fresh single broker per run (Weir: objects in a local directory). "
             "Kafka acknowledges from its page cache (no fsync), Weir once its WAL has synced "
             "the record. Goals for Weir: maximum at least 2x Kafka's; p99 at most 5 ms at "
             "30,000 records/s. Measured after a warm-up in the same JVM ("
             f"{WARMUP_MAX:,} records before the maximum, {WARMUP_SECONDS} s at the rate before "
             "the fixed rate). "
             + (f"Brokers pinned to core(s) {BROKER_CPUS}, the producer to {CLIENT_CPUS} "
                "(BENCH_PIN=1)." if PIN else "Brokers and producer share all cores.")
             + " The rows marked \"broker\" are Weir's own histograms over the measured run; "
             "\"the disk alone\" is bench/sync_latency.py in the broker's data dir for "
             f"{PROBE_SECONDS:.0f} s just before Weir's fixed-rate run (16 KiB direct writes, "
             "each synced, up to 1,000 a second, no broker running): the stalls of the disk "
             "itself, which every acknowledgement of a broker that syncs waits for.", "",
             "| run | figure | Kafka | Weir | Weir/Kafka |", "|---|---|---:|---:|---:|"]
    last = None
    for tag, label, key in rows:
        k, w = results.get(("kafka", tag)), results.get(("weir", tag))
        kv = k.get(key) if isinstance(k, dict) else k
        wv = w.get(key) if isinstance(w, dict) else w
        head = titles[tag] if tag != last else ""
        last = tag
        lines.append(f"| {head} | {label} | {fmt(kv)} | {fmt(wv)} | {ratio(kv, wv)} |")
    lines += ["", "Commands:", ""]
    for (kind, tag), r in sorted(results.items()):
        lines.append(f"- {kind} ({tag}): " + (f"`{r['cmd']}`" if isinstance(r, dict)
                                              else f"failed: {r}"))
    lines += ["", "Reproduce: `WEIR_BIN=target/release/weir bench/producer_perf.py`; this run "
              f"took {elapsed:.0f} s.", ""]
    return "\n".join(lines)


def main():
    if "WEIR_BIN" not in os.environ:
        sys.exit("producer_perf.py: set WEIR_BIN to the weir binary")
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    t0 = time.monotonic()
    results = {}
    for tag, records, throughput, warmup, partitions in [
            ("max", MAX_RECORDS, -1, WARMUP_MAX, 1),
            ("max16", MAX_RECORDS, -1, WARMUP_MAX, MANY),
            ("30k", RATE * SECONDS, RATE, RATE * WARMUP_SECONDS, 1)]:
        if tag not in RUNS:
            continue
        for kind in BROKERS:
            try:
                results[(kind, tag)] = run(kind, tag, records, throughput, warmup, partitions)
            except Exception as e:  # one failure must not lose the other runs
                print(f"bench: {kind} ({tag}) failed: {e}", flush=True)
                results[(kind, tag)] = (str(e).splitlines() or [repr(e)])[0][:200]
    text = report(results, stamp, time.monotonic() - t0)
    write_results(RESULTS, f"producer-perf-{stamp}", text, results,
                  os.environ.get("BENCH_PP_APPEND_TO"))


if __name__ == "__main__":
    main()
