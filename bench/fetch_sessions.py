#!/usr/bin/env python3
"""A Java consumer of many partitions, with and without fetch sessions (KIP-227).

    WEIR_BIN=target/release/weir bench/fetch_sessions.py

librdkafka, the consumer of `weir perf` and of bench/partitions.py, has no fetch sessions:
every fetch names every partition and every answer carries every partition. The Java client
(and franz-go) use a session when the broker gives one. Here one topic of BENCH_FS_PARTITIONS
partitions gets BENCH_FS_MIB MiB/s of 1 KiB records from `weir perf` (one producer, acks=all,
linger.ms=5, no consumer of its own), and tools/kafka/EndToEndConsumer.java, a kafka-clients
4.1 consumer, reads them from the latest offsets and measures end-to-end latency (the send
time `weir perf` writes into each record, to the poll that returns it). Each configuration
gets a fresh broker: `weir` (sessions on, the default), `weir-nosessions`
(`broker.fetch_session_cache_slots` = 0: every fetch in full, as before sessions), and `kafka`
(Kafka 4.1, which gives sessions). Figures: the consumer's end-to-end p50/p99/p99.9, records
it got against records produced in its measured period, the producer's p99 (`weir perf`), the
broker's average cores and Fetch requests per second (Weir's /metrics), and the consumer's
CPU. Writes bench/results/fetch-sessions-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                          the weir binary (required)
  BENCH_FS_BROKERS ["weir weir-nosessions kafka"]
  BENCH_FS_PARTITIONS [10000]  BENCH_FS_MIB [20]
  BENCH_FS_WARMUP [40]  BENCH_FS_DURATION [30]   seconds: the consumer's warm-up (JVM start,
                                    group join, first fetches) and measured period
  BENCH_FS_DIR [target/bench-fetch-sessions]   data dirs (removed after each run) and each
                                    Weir broker's /metrics at the end of its run
"""

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402
from partitions import Sampler, create_topic, proc_sample, write_results  # noqa: E402

BROKERS = os.environ.get("BENCH_FS_BROKERS", "weir weir-nosessions kafka").split()
PARTITIONS = int(os.environ.get("BENCH_FS_PARTITIONS", "10000"))
MIB = float(os.environ.get("BENCH_FS_MIB", "20"))
WARMUP = int(os.environ.get("BENCH_FS_WARMUP", "40"))
DURATION = int(os.environ.get("BENCH_FS_DURATION", "30"))
WORK = os.path.abspath(os.environ.get("BENCH_FS_DIR",
                                      os.path.join(REPO, "target", "bench-fetch-sessions")))
RESULTS = os.path.join(REPO, "bench", "results")
KAFKA_SH = os.path.join(REPO, "tools", "kafka", "kafka.sh")
TOPIC = "fs"


def fetches(b):
    """(Fetch requests answered, of which within a session) so far (Weir's /metrics; None
    for Kafka)."""
    if b.kind != "weir":
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r'^weir_requests_total\{api_key="1"\} (\d+)', text, re.M)
    i = re.search(r'^weir_fetch_incremental_total (\d+)', text, re.M)
    return (int(m.group(1)) if m else 0, int(i.group(1)) if i else 0)


def run(kind):
    root = os.path.join(WORK, kind)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    env = {"WEIR_WAL_CAPACITY": str(1 << 30)}
    if kind == "weir-nosessions":
        env["WEIR_BROKER_FETCH_SESSION_CACHE_SLOTS"] = "0"
    b = weir_harness.Broker(kind, root, env=env)
    b.kind = "kafka" if kind == "kafka" else "weir"
    b.start()
    try:
        create_topic(b.bootstrap, TOPIC + "-0", PARTITIONS)
        # The producer runs through the consumer's warm-up and measured period.
        perf_json = os.path.join(root, "perf.json")
        perf = subprocess.Popen(
            [os.environ["WEIR_BIN"], "perf", "--bootstrap-servers", b.bootstrap,
             "--topic-prefix", TOPIC, "--partitions", str(PARTITIONS), "--groups", "0",
             "--record-size", "1024", "--throughput-mib", f"{MIB:g}",
             "--producer-config", "acks=all", "--producer-config", "linger.ms=5",
             "--warmup", f"{WARMUP}s", "--duration", f"{DURATION + 5}s", "--quiet",
             "--output", perf_json], stdout=subprocess.DEVNULL)
        time.sleep(2)
        consumer = subprocess.Popen(
            [KAFKA_SH, "tool", os.path.join(REPO, "tools", "kafka", "EndToEndConsumer.java"),
             b.bootstrap, TOPIC + "-0", str(WARMUP), str(DURATION)],
            stdout=subprocess.PIPE, text=True)
        time.sleep(WARMUP)
        broker, client = Sampler(b.pid), Sampler(consumer.pid)
        broker.start()
        client.start()
        f0, t0 = fetches(b), time.monotonic()
        out, _ = consumer.communicate(timeout=DURATION + 300)
        f1, t1 = fetches(b), time.monotonic()
        broker.halt.set()
        client.halt.set()
        if perf.wait(timeout=120) != 0:
            raise RuntimeError("weir perf failed")
        with open(perf_json) as f:
            produced = json.load(f)["summary"]
        if b.kind == "weir":
            # For a look at the broker's histograms after the run.
            with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics",
                                        timeout=5) as r:
                with open(os.path.join(WORK, f"{kind}.metrics"), "wb") as f:
                    f.write(r.read())
    finally:
        b.stop()
        shutil.rmtree(root, ignore_errors=True)
    m = re.search(r"records (\d+) polls (\d+) e2e_ms p50 ([\d.]+) p99 ([\d.]+) p99.9 ([\d.]+) "
                  r"max ([\d.]+)", out)
    if not m:
        raise RuntimeError(f"EndToEndConsumer said: {out[-500:]}")
    records, polls, p50, p99, p999, mx = m.groups()
    return {
        "kind": kind, "records": int(records), "polls": int(polls),
        "e2e_p50": float(p50), "e2e_p99": float(p99), "e2e_p999": float(p999),
        "e2e_max": float(mx),
        "produced_per_s": produced["produce"]["records_per_sec"],
        "produce_p99": (produced.get("produce_latency_ms") or {}).get("p99"),
        "broker_cores": broker.summary().get("cores"),
        "consumer_cores": client.summary().get("cores"),
        "fetches_per_s": (f1[0] - f0[0]) / (t1 - t0) if f0 and f1 else None,
        "incremental_share": ((f1[1] - f0[1]) / max(f1[0] - f0[0], 1)) if f0 and f1 else None,
    }


def fmt(v, digits=1):
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def main():
    started = time.monotonic()
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    results = {}
    for kind in BROKERS:
        print(f"bench: {kind}, {PARTITIONS} partitions", flush=True)
        results[(kind, PARTITIONS)] = run(kind)
        print(f"bench: {results[(kind, PARTITIONS)]}", flush=True)
    rows = [
        ("consumer end-to-end p50 ms", "e2e_p50", 1),
        ("consumer end-to-end p99 ms", "e2e_p99", 1),
        ("consumer end-to-end p99.9 ms", "e2e_p999", 1),
        ("records consumed / produced in the period", "got_share", 2),
        ("producer p99 ms (weir perf)", "produce_p99", 1),
        ("broker cores", "broker_cores", 2),
        ("Fetch requests / s", "fetches_per_s", 0),
        ("of which within a session", "incremental_share", 2),
        ("consumer cores (Java)", "consumer_cores", 2),
    ]
    for r in results.values():
        expect = r["produced_per_s"] * DURATION
        r["got_share"] = r["records"] / expect if expect else None
    kinds = [k for k in BROKERS]
    lines = [f"## A Java consumer of {PARTITIONS:,} partitions, fetch sessions on and off ({stamp})",
             "",
             f"One topic of {PARTITIONS:,} partitions, {MIB:g} MiB/s of 1 KiB records from `weir perf` "
             "(acks=all, linger.ms=5), read by one kafka-clients 4.1 consumer "
             "(tools/kafka/EndToEndConsumer.java) from the latest offsets; "
             f"{WARMUP} s of warm-up, {DURATION} s measured. `weir-nosessions`: "
             "`WEIR_BROKER_FETCH_SESSION_CACHE_SLOTS=0`. A fresh single broker each.",
             "",
             "| figure | " + " | ".join(kinds) + " |",
             "|---|" + "---:|" * len(kinds)]
    for label, key, digits in rows:
        lines.append(f"| {label} | " + " | ".join(
            fmt(results[(k, PARTITIONS)].get(key), digits) for k in kinds) + " |")
    lines += ["", f"Reproduce: `WEIR_BIN=target/release/weir bench/fetch_sessions.py`; this run took "
              f"{time.monotonic() - started:.0f} s.", ""]
    write_results(RESULTS, f"fetch-sessions-{stamp}", "\n".join(lines), results)


if __name__ == "__main__":
    if "WEIR_BIN" not in os.environ:
        sys.exit("WEIR_BIN is required")
    main()
