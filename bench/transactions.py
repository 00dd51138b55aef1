#!/usr/bin/env python3
"""Transactional produce beside Apache Kafka, on this machine (`make bench-transactions`).

    WEIR_BIN=target/release/weir bench/transactions.py

Two loads, each against a fresh broker of every configuration: `kafka` (Apache Kafka 4.4,
single node, tools/kafka/kafka.sh), `weir-file` (`weir serve`, file WAL, SQLite metadata,
objects on s3s-fs) and `weir-cluster-pg` (three brokers on a private PostgreSQL and s3s-fs).
Every broker finalizes `transaction.version` 2, so the producers use Transactions V2 (KIP-890
part 2: an epoch bump per transaction, partitions added by the produce itself).

1. As fast as it goes: Kafka's own ProducerPerformance with a transactional id, committing
   BENCH_TX_DURATION_MS after each transaction began, 1 KiB records, acks=all. Records/s, MiB/s
   and latency percentiles; for Weir, the transactions committed per second of producing and
   EndTxn's p50/p99 (its /metrics).
2. On a clock: one librdkafka producer (confluent-kafka) at BENCH_TX_RATE records/s of 1 KiB
   that commits every BENCH_TX_DURATION_MS by the clock (a commit that overruns its slot is
   followed by the next at once), for BENCH_TX_SECONDS. Commits per second (asked:
   1000 / BENCH_TX_DURATION_MS), commit_transaction()'s latency as the application sees it
   (the flush of the transaction's records, then EndTxn), and for Weir EndTxn's p50/p99 and
   the markers' (`weir_transaction_completion_seconds`), from /metrics.

Writes bench/results/transactions-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                      the weir binary (required)
  BENCH_TX_RECORDS [300000]     records per configuration (load 1)
  BENCH_TX_PARTITIONS [8]
  BENCH_TX_DURATION_MS [100]    the commit interval
  BENCH_TX_RATE [5000]          records/s (load 2)
  BENCH_TX_SECONDS [30]         seconds (load 2)
  BENCH_TX_LOADS ["max clock"]
  BENCH_TX_CONFIGS ["kafka weir-file weir-cluster-pg"]
"""

import datetime
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import object_wal as ow  # noqa: E402  (brokers, ProducerPerformance, /metrics)

RECORDS = int(os.environ.get("BENCH_TX_RECORDS", "300000"))
PARTITIONS = int(os.environ.get("BENCH_TX_PARTITIONS", "8"))
DURATION_MS = int(os.environ.get("BENCH_TX_DURATION_MS", "100"))
RATE = int(os.environ.get("BENCH_TX_RATE", "5000"))
SECONDS = float(os.environ.get("BENCH_TX_SECONDS", "30"))
LOADS = os.environ.get("BENCH_TX_LOADS", "max clock").split()
CONFIGS = os.environ.get("BENCH_TX_CONFIGS", "kafka weir-file weir-cluster-pg").split()


def committed(m):
    return sum(v for k, v in m.items()
               if k.startswith("weir_transactions_total") and 'event="committed"' in k)


def end_latency(before, after, q, name="weir_transaction_end_seconds"):
    """The q-quantile in ms over the run of a latency histogram (EndTxn's by default), from the
    upper bounds of its buckets (power-of-two microseconds), or None."""
    prefix = name + '_bucket{le="'
    buckets = []
    for k, v in after.items():
        if k.startswith(prefix):
            le = k[len(prefix):].split('"')[0]
            bound = float("inf") if le == "+Inf" else float(le)
            buckets.append((bound, v - before.get(k, 0.0)))
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    for bound, n in buckets:
        if n >= q * total:
            return bound * 1000
    return None


def max_load():
    """Load 1: ProducerPerformance as fast as it goes; the report's lines."""
    rows = []
    for config in CONFIGS:
        # A fresh broker each run (Kafka refuses a data dir formatted with other ports).
        shutil.rmtree(os.path.join(ow.WORK, f"{config}-tx"), ignore_errors=True)
        # ProducerPerformance's own flags go after the producer properties.
        props = ["acks=all", "linger.ms=5", "--transactional-id", f"bench-{config}",
                 "--transaction-duration-ms", str(DURATION_MS)]
        r = ow.java_run(config, PARTITIONS, RECORDS, -1, props, "tx")
        # Its data (GiBs) goes once the figures are read.
        shutil.rmtree(os.path.join(ow.WORK, f"{config}-tx"), ignore_errors=True)
        if r["before"]:
            txns = committed(r["after"]) - committed(r["before"])
            producing = RECORDS / r["records_per_sec"] if r["records_per_sec"] > 0 else 0
            r["txn_per_sec"] = txns / producing if producing > 0 else 0
            r["end_p50"] = end_latency(r["before"], r["after"], 0.5)
            r["end_p99"] = end_latency(r["before"], r["after"], 0.99)
        rows.append(r)
        print(f"bench: {config}: {r['records_per_sec']:.0f} records/s, "
              f"{r['mib_per_sec']:.1f} MiB/s, p50 {r['p50']:.0f} ms, p99 {r['p99']:.0f} ms",
              flush=True)
    base = next((r for r in rows if r["config"] == "kafka"), None)
    lines = ["## As fast as it goes", "",
             f"ProducerPerformance (kafka-clients 4.4), {RECORDS} records of 1 KiB, "
             f"{PARTITIONS} partitions, acks=all, linger.ms=5, a commit {DURATION_MS} ms after "
             "each transaction began.", "",
             "| config | records/s | MiB/s | vs Kafka | p50 ms | p99 ms | p99.9 ms | "
             "commits/s (Weir's count) | EndTxn p50 / p99 ms (Weir's histogram: bucket bounds) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['records_per_sec'] / base['records_per_sec']:.2f}x" if base else "-"
        tps = f"{r['txn_per_sec']:.1f}" if "txn_per_sec" in r else "-"
        end = (f"{r['end_p50']:.1f} / {r['end_p99']:.1f}" if r.get("end_p99") is not None
               else "-")
        lines.append(f"| {r['config']} | {r['records_per_sec']:.0f} | {r['mib_per_sec']:.1f} | "
                     f"{ratio} | {r['p50']:.0f} | {r['p99']:.0f} | {r['p999']:.0f} | {tps} | "
                     f"{end} |")
    lines += ["", "Commands:", ""] + [f"- {r['config']}: `{r['cmd']}`" for r in rows]
    return lines


def percentile(values, q):
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))] * 1000 if v else float("nan")


def clock_producer(bootstrap, tid):
    """Produces RATE records/s for SECONDS in transactions committed every DURATION_MS by the
    clock; (each commit's latency in s, records produced, seconds taken)."""
    from confluent_kafka import Producer  # the compat suite's requirements

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "acks": "all",
                  "linger.ms": 5})
    p.init_transactions(60)
    payload = b"x" * 1024
    interval = DURATION_MS / 1000
    latencies, sent = [], 0
    t0 = time.monotonic()
    tick = t0 + interval
    p.begin_transaction()
    while True:
        now = time.monotonic()
        if now - t0 >= SECONDS:
            break
        due = min(int((now - t0) * RATE), sent + RATE // 10)
        while sent < due:
            p.produce("tx-clock", payload, partition=sent % PARTITIONS)
            sent += 1
        p.poll(0)
        if now >= tick:
            c0 = time.monotonic()
            p.commit_transaction(60)
            latencies.append(time.monotonic() - c0)
            p.begin_transaction()
            # The next slot; a commit that overran its own is followed at once, not twice.
            tick = max(tick + interval, time.monotonic())
        time.sleep(max(0.0, min(0.001, tick - time.monotonic())))
    p.commit_transaction(60)
    return latencies, sent, time.monotonic() - t0


def clock_load():
    """Load 2: one librdkafka producer committing on a clock; the report's lines."""
    lines = ["## Committing on a clock", "",
             f"One librdkafka producer (confluent-kafka), {RATE} records/s of 1 KiB on "
             f"{PARTITIONS} partitions, acks=all, linger.ms=5, a commit every {DURATION_MS} ms "
             f"by the clock, {SECONDS:g} s; asked: {1000 / DURATION_MS:g} commits/s. Commit "
             "latency: `commit_transaction()` as the application sees it (flush, then EndTxn). "
             "EndTxn and markers: Weir's histograms (bucket bounds).", "",
             "| config | commits/s | records/s | commit p50 / p99 / max ms | "
             "EndTxn p50 / p99 ms | markers p50 / p99 ms |", "|---|---|---|---|---|---|"]
    for config in CONFIGS:
        root = os.path.join(ow.WORK, f"{config}-txclock")
        shutil.rmtree(root, ignore_errors=True)
        b, s3 = ow.start(config, root)
        try:
            r = ow.kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server",
                              b.bootstrap, "--create", "--topic", "tx-clock", "--partitions",
                              str(PARTITIONS), "--replication-factor", "1")
            if r.returncode != 0:
                raise RuntimeError(f"creating the topic failed: {r.stderr[-500:]}")
            before = ow.metrics(b) if b.kind == "weir" else {}
            lat, sent, wall = clock_producer(b.bootstrap, f"clock-{config}")
            after = ow.metrics(b) if b.kind == "weir" else {}
        finally:
            ow.stop(b, s3)
            shutil.rmtree(root, ignore_errors=True)
        hist = "-"
        markers = "-"
        if after:
            e50, e99 = end_latency(before, after, 0.5), end_latency(before, after, 0.99)
            hist = f"{e50:.1f} / {e99:.1f}" if e99 is not None else "-"
            name = "weir_transaction_completion_seconds"
            m50, m99 = (end_latency(before, after, 0.5, name),
                        end_latency(before, after, 0.99, name))
            markers = f"{m50:.1f} / {m99:.1f}" if m99 is not None else "-"
        row = (f"| {config} | {len(lat) / wall:.1f} | {sent / wall:,.0f} | "
               f"{percentile(lat, 0.5):.1f} / {percentile(lat, 0.99):.1f} / "
               f"{max(lat) * 1000 if lat else float('nan'):.1f} | {hist} | {markers} |")
        print(f"bench: {row}", flush=True)
        lines.append(row)
    return lines


def main():
    lines = [f"# Transactional produce, {datetime.datetime.now():%Y-%m-%d %H:%M}", "",
             f"`BENCH_TX_CONFIGS=\"{' '.join(CONFIGS)}\" BENCH_TX_LOADS=\"{' '.join(LOADS)}\" "
             "WEIR_BIN=target/release/weir bench/transactions.py`", ""]
    if "max" in LOADS:
        lines += max_load() + [""]
    if "clock" in LOADS:
        lines += clock_load() + [""]
    text = "\n".join(lines)
    print(text)
    os.makedirs(ow.RESULTS, exist_ok=True)
    path = os.path.join(ow.RESULTS, f"transactions-{datetime.datetime.now():%Y-%m-%d-%H%M}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"bench: wrote {path}")


if __name__ == "__main__":
    main()
