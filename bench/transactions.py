#!/usr/bin/env python3
"""Transactional produce beside Apache Kafka, on this machine (`make bench-transactions`).

    WEIR_BIN=target/release/weir bench/transactions.py

Kafka's own ProducerPerformance (kafka-clients 4.1) with a transactional id, committing every
BENCH_TX_DURATION_MS, 1 KiB records, acks=all, as fast as it goes, against a fresh single
broker of each configuration: `kafka` (Apache Kafka 4.1, tools/kafka/kafka.sh) and `weir-file`
(`weir serve`, file WAL, objects on s3s-fs). Both brokers finalize `transaction.version` 2, so
the producer uses Transactions V2 (KIP-890 part 2: an epoch bump per transaction, partitions
added by the produce itself). Prints records/s, MiB/s and latency percentiles per
configuration, and for Weir the transactions committed per second of producing (its
/metrics count over the run's records / records per second); writes
bench/results/transactions-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                      the weir binary (required)
  BENCH_TX_RECORDS [300000]     records per configuration
  BENCH_TX_PARTITIONS [8]
  BENCH_TX_DURATION_MS [100]    transaction.duration.ms of ProducerPerformance
  BENCH_TX_CONFIGS ["kafka weir-file"]
"""

import datetime
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import object_wal as ow  # noqa: E402  (brokers, ProducerPerformance, /metrics)

RECORDS = int(os.environ.get("BENCH_TX_RECORDS", "300000"))
PARTITIONS = int(os.environ.get("BENCH_TX_PARTITIONS", "8"))
DURATION_MS = int(os.environ.get("BENCH_TX_DURATION_MS", "100"))
CONFIGS = os.environ.get("BENCH_TX_CONFIGS", "kafka weir-file").split()


def committed(m):
    return sum(v for k, v in m.items()
               if k.startswith("weir_transactions_total") and 'event="committed"' in k)


def end_latency(before, after, q):
    """The q-quantile of EndTxn's latency in ms over the run, from the upper bounds of
    weir_transaction_end_seconds' buckets (power-of-two microseconds), or None."""
    prefix = 'weir_transaction_end_seconds_bucket{le="'
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


def main():
    rows = []
    for config in CONFIGS:
        # A fresh broker each run (Kafka refuses a data dir formatted with other ports).
        shutil.rmtree(os.path.join(ow.WORK, f"{config}-tx"), ignore_errors=True)
        # ProducerPerformance's own flags go after the producer properties.
        props = ["acks=all", "linger.ms=5", "--transactional-id", f"bench-{config}",
                 "--transaction-duration-ms", str(DURATION_MS)]
        r = ow.java_run(config, PARTITIONS, RECORDS, -1, props, "tx")
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
    lines = [f"# Transactional produce, {datetime.datetime.now():%Y-%m-%d %H:%M}", "",
             f"ProducerPerformance (kafka-clients 4.1), {RECORDS} records of 1 KiB, "
             f"{PARTITIONS} partitions, acks=all, linger.ms=5, a commit every {DURATION_MS} ms "
             "(Transactions V2 on both). `WEIR_BIN=target/release/weir bench/transactions.py`",
             "", "| config | records/s | MiB/s | vs Kafka | p50 ms | p99 ms | p99.9 ms | "
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
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(ow.RESULTS, exist_ok=True)
    path = os.path.join(ow.RESULTS, f"transactions-{datetime.datetime.now():%Y-%m-%d-%H%M}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"bench: wrote {path}")


if __name__ == "__main__":
    main()
