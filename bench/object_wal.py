#!/usr/bin/env python3
"""The object WAL beside the file WAL and Apache Kafka, on this machine (`make bench-object-wal`;
`make bench` runs it too, as its last section).

    WEIR_BIN=target/release/weir bench/object_wal.py

Each configuration gets a fresh single broker and runs the same `weir perf` workload: one topic
of BENCH_OW_PARTITIONS partitions, one idempotent producer (acks=all, linger.ms=5, five requests
in flight: the Java client's defaults) at BENCH_OW_RATE records/s of 1 KiB, one consumer group;
BENCH_OW_WARMUP of warm-up, BENCH_OW_DURATION measured.

  kafka             Apache Kafka 4.1, single node (tools/kafka/kafka.sh)
  weir-file         `weir serve`, file WAL, objects on s3s-fs
  weir-object       `weir serve --` with WEIR_WAL_KIND=object (no WAL file), objects on s3s-fs
  weir-object-100ms the same with 100 ms added to every PUT (object_store.fault_put_latency_ms)

Weir's objects go to s3s-fs (a real S3-protocol server) whose root is in /dev/shm when that has
room; its metadata is SQLite in the data dir. Then the same rate with Kafka's Java producer
(ProducerPerformance from kafka-clients 4.1), tuned for object storage (linger.ms=20,
batch.size=256 KiB) on every configuration and with its defaults on Kafka and on the object WAL
with 100 ms PUTs (BENCH_OW_JAVA_SECONDS of records). Then one producer with default settings as
fast as it can go, one partition, on the object WAL with 100 ms PUTs (librdkafka for
BENCH_OW_DURATION, Java for BENCH_OW_MAX_RECORDS records): the question is whether the PUT's
latency caps it at a few requests per second (Little's law: throughput = data in flight /
latency). Then librdkafka (confluent-kafka) with its defaults (acks=all) at BENCH_OW_RATE on
BENCH_OW_RDKAFKA_PARTITIONS partitions, without and with idempotence, on Kafka and on the
object WAL with 100 ms PUTs: it sends one partition per request, so its latency shows how many
requests of one connection the broker keeps in flight.

Per configuration it prints produce latency p50/p99/p99.9 and end-to-end latency p50/p99 (from
`weir perf`), and from the broker's /metrics: PUTs and bytes written to object storage per GiB
produced (all of them, and the object WAL's alone, before compaction), produce requests per
second, and objects per partition at the end. Writes bench/results/object-wal-YYYY-MM-DD-HHMM.md
(and appends the section to BENCH_OW_APPEND_TO when set, as `make bench` does).

Environment (defaults in brackets):
  WEIR_BIN                 the weir binary (required)
  BENCH_OW_RATE [5000]     records/s of the fixed-rate workload (1 KiB records)
  BENCH_OW_PARTITIONS [16]
  BENCH_OW_WARMUP [10s]  BENCH_OW_DURATION [30s]   (the maximum: the same)
  BENCH_OW_CONFIGS ["kafka weir-file weir-object weir-object-100ms"]
  BENCH_OW_MAX [1]         0: leave out the default producer's maximum
  BENCH_OW_RDKAFKA [1]     0: leave out librdkafka's defaults at a fixed rate
  BENCH_OW_RDKAFKA_PARTITIONS ["8 16"]
  BENCH_OW_JAVA_SECONDS [15]  BENCH_OW_MAX_RECORDS [20000]
  BENCH_OW_DIR [target/bench-object-wal]   data dirs and logs (emptied first)
  BENCH_OW_RESULTS [bench/results]
  S3S_FS                   as for the cluster tests
"""

import datetime
import json
import os
import re
import shutil
import sqlite3
import subprocess
import threading
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402  (the harness: Broker, S3sFs)

RATE = int(os.environ.get("BENCH_OW_RATE", "5000"))
PARTITIONS = int(os.environ.get("BENCH_OW_PARTITIONS", "16"))
WARMUP = os.environ.get("BENCH_OW_WARMUP", "10s")
DURATION = os.environ.get("BENCH_OW_DURATION", "30s")
CONFIGS = os.environ.get("BENCH_OW_CONFIGS",
                         "kafka weir-file weir-object weir-object-100ms").split()
MAX = os.environ.get("BENCH_OW_MAX", "1") == "1"
RDKAFKA = os.environ.get("BENCH_OW_RDKAFKA", "1") == "1"
RDKAFKA_PARTITIONS = [int(p) for p in os.environ.get("BENCH_OW_RDKAFKA_PARTITIONS",
                                                     "8 16").split()]
SAMPLE_SECONDS = 5
JAVA_SECONDS = int(os.environ.get("BENCH_OW_JAVA_SECONDS", "15"))
MAX_RECORDS = int(os.environ.get("BENCH_OW_MAX_RECORDS", "20000"))
WORK = os.path.abspath(os.environ.get("BENCH_OW_DIR", os.path.join(REPO, "target",
                                                                    "bench-object-wal")))
RESULTS = os.path.abspath(os.environ.get("BENCH_OW_RESULTS", os.path.join(REPO, "bench",
                                                                          "results")))
PRODUCER = ["enable.idempotence=true", "acks=all", "linger.ms=5",
            "max.in.flight.requests.per.connection=5"]
GIB = float(1 << 30)


def s3_root():
    shm = "/dev/shm"
    try:
        st = os.statvfs(shm)
        if st.f_bavail * st.f_frsize >= (8 << 30):
            return os.path.join(shm, "weir-bench-object-wal-s3")
    except OSError:
        pass
    return os.path.join(WORK, "s3")


def metrics(broker):
    """The broker's /metrics as {series: value}; a cluster's, summed over its brokers."""
    if isinstance(broker, weir_harness.Cluster):
        out = {}
        for b in broker.brokers:
            for k, v in metrics(b).items():
                out[k] = out.get(k, 0.0) + v
        return out
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.aux_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        try:
            out[name] = float(value)
        except ValueError:
            pass
    return out


def start(config, root):
    """A fresh broker for `config`; returns (broker, s3 or None)."""
    os.makedirs(root, exist_ok=True)
    if config == "weir-cluster-pg":
        # Three brokers on a private PostgreSQL and one s3s-fs (the harness's cluster).
        c = weir_harness.Cluster("bench", root, env={"WEIR_WAL_CAPACITY": str(256 << 20)})
        c.kind = "weir"
        c.launch()
        return c, None
    if config == "kafka":
        b = weir_harness.Broker(config, root)
        b.kind = "kafka"
        b.start()
        return b, None
    s3 = weir_harness.S3sFs(s3_root())
    shutil.rmtree(s3.root, ignore_errors=True)
    os.makedirs(s3.root)
    s3.log_path = os.path.join(root, "s3s-fs.log")
    s3.start()
    env = {**s3.env(), "WEIR_WAL_CAPACITY": str(1 << 30)}
    if config.startswith("weir-object"):
        env["WEIR_WAL_KIND"] = "object"
    if config.endswith("-100ms"):
        env["WEIR_OBJECT_STORE_FAULT_PUT_LATENCY_MS"] = "100"
    b = weir_harness.Broker(config, root, env=env,
                        args=["--object-store-url", f"s3://{weir_harness.S3_BUCKET}/weir"])
    b.kind = "weir"
    b.start()
    return b, s3


def stop(b, s3):
    """Stops a broker (or cluster) from `start` and its s3s-fs, whose files go."""
    if isinstance(b, weir_harness.Cluster):
        b.cleanup()
        return
    b.stop()
    if s3 is not None:
        s3.kill()
        shutil.rmtree(s3.root, ignore_errors=True)


def perf(broker, out_json, rate, partitions, groups=1):
    cmd = [os.environ["WEIR_BIN"], "perf", "--bootstrap-servers", broker.bootstrap,
           "--partitions", str(partitions), "--producers", "1", "--groups", str(groups),
           "--consumers", "1", "--record-size", "1024", "--rate", str(rate),
           "--warmup", WARMUP, "--duration", DURATION, "--quiet", "--output", out_json]
    for c in PRODUCER:
        cmd += ["--producer-config", c]
    print("bench: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out_json) as f:
        return json.load(f)["summary"], " ".join(cmd[1:])


class Sampler(threading.Thread):
    """Every SAMPLE_SECONDS, from the broker's SQLite metadata (read-only): ranges per partition
    (mean and max) and live objects. Compaction merges a stream's small ranges, so the mean
    should level off instead of growing with time."""

    def __init__(self, broker):
        super().__init__(daemon=True)
        self.path = os.path.join(broker.data_dir, "meta.sqlite")
        self.samples = []  # (seconds, mean ranges per partition, max, live objects)
        self.halt = threading.Event()

    def run(self):
        t0 = time.monotonic()
        while not self.halt.wait(SAMPLE_SECONDS):
            try:
                db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=1)
                try:
                    per = [n for (n,) in db.execute(
                        "SELECT count(*) FROM ranges GROUP BY stream_id")]
                    (live,) = db.execute(
                        "SELECT count(*) FROM objects WHERE state = 'live'").fetchone()
                finally:
                    db.close()
            except sqlite3.Error:
                continue
            if per:
                self.samples.append((time.monotonic() - t0, sum(per) / len(per), max(per), live))


def run(config, partitions, rate, tag):
    root = os.path.join(WORK, f"{config}-{tag}")
    b, s3 = start(config, root)
    sampler = Sampler(b) if b.kind == "weir" else None
    try:
        before = metrics(b) if b.kind == "weir" else {}
        if sampler:
            sampler.start()
        t0 = time.monotonic()
        summary, cmd = perf(b, os.path.join(root, "perf.json"), rate, partitions,
                            groups=1 if tag == "fixed" else 0)
        elapsed = time.monotonic() - t0
        after = metrics(b) if b.kind == "weir" else {}
    finally:
        if sampler:
            sampler.halt.set()
        stop(b, s3)
    return {"config": config, "summary": summary, "cmd": cmd, "before": before, "after": after,
            "elapsed": elapsed, "samples": sampler.samples if sampler else []}


JAVA_LINE = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), "
                       r"([\d.]+) ms avg latency, ([\d.]+) ms max latency, (\d+) ms 50th, "
                       r"(\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def kafka_tool(*args, timeout=300):
    cmd = [os.path.join(REPO, "tools", "kafka", "kafka.sh"), "tool", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def java_run(config, partitions, records, throughput, props, tag):
    """Kafka's own ProducerPerformance (kafka-clients 4.1) against a fresh broker."""
    root = os.path.join(WORK, f"{config}-{tag}")
    b, s3 = start(config, root)
    try:
        r = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b.bootstrap,
                       "--create", "--topic", "pp", "--partitions", str(partitions),
                       "--replication-factor", "1")
        if r.returncode != 0:
            raise RuntimeError(f"creating the topic failed: {r.stderr[-500:]}")
        before = metrics(b) if b.kind == "weir" else {}
        args = ["producer-perf", "--topic", "pp", "--num-records", str(records),
                "--record-size", "1024", "--throughput", str(throughput),
                "--producer-props", f"bootstrap.servers={b.bootstrap}", *props]
        print("bench: kafka.sh tool " + " ".join(args), flush=True)
        t0 = time.monotonic()
        r = kafka_tool(*args)
        elapsed = time.monotonic() - t0
        after = metrics(b) if b.kind == "weir" else {}
    finally:
        stop(b, s3)
    m = None
    for line in r.stdout.splitlines():
        m = JAVA_LINE.search(line) or m
    if m is None:
        raise RuntimeError(f"ProducerPerformance printed no summary: {r.stdout[-500:]}"
                           f"{r.stderr[-500:]}")
    g = [float(x) for x in m.groups()]
    return {"config": config, "records_per_sec": g[1], "mib_per_sec": g[2] / 1.048576,
            "p50": g[5], "p95": g[6], "p99": g[7], "p999": g[8], "before": before,
            "after": after, "elapsed": elapsed, "cmd": "kafka.sh tool " + " ".join(args)}


def delta(r, name):
    return r["after"].get(name, 0.0) - r["before"].get(name, 0.0)


def fmt(v, digits=1):
    if v is None:
        return "-"
    if isinstance(v, float) and v >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def row(r):
    s = r["summary"]
    lat, e2e = s.get("produce_latency_ms", {}), s.get("e2e_latency_ms", {})
    produced = s["produce"]["mib_per_sec"] * (1 << 20)
    cells = [r["config"], fmt(s["produce"]["mib_per_sec"]), fmt(lat.get("p50")),
             fmt(lat.get("p99")), fmt(lat.get("p99.9")), fmt(e2e.get("p50")), fmt(e2e.get("p99"))]
    if r["after"]:
        # Counters over the whole run (warm-up too) against the bytes the broker took in.
        taken = delta(r, "weir_object_wal_bytes_total") or None
        if not taken:
            # The file WAL: what the uploader wrote per byte produced over the run.
            taken = produced * r["elapsed"]
        puts = delta(r, 'weir_object_requests_total{kind="put"}')
        put_bytes = delta(r, 'weir_object_bytes_total{kind="put"}')
        wal_bytes = delta(r, "weir_object_wal_object_bytes_total")
        objects = delta(r, "weir_object_wal_objects_total")
        requests = delta(r, 'weir_requests_total{api_key="0"}')
        cells += [fmt(puts / (taken / GIB), 0), fmt(put_bytes / taken, 2),
                  fmt(wal_bytes / taken, 2) if wal_bytes else "-",
                  fmt(objects / r["elapsed"], 1) if objects else "-",
                  fmt(requests / r["elapsed"], 0)]
    else:
        cells += ["-", "-", "-", "-", "-"]
    return "| " + " | ".join(cells) + " |"


def rdkafka_run(config, partitions, idempotent):
    """librdkafka (confluent-kafka) with its defaults but acks=all (and idempotence if asked)
    at RATE records/s of 1 KiB, round robin over `partitions`, for the warm-up and the
    measured time; latency from produce() to the delivery report, the warm-up's left out."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = f"rdkafka-{partitions}-{'idem' if idempotent else 'default'}"
    root = os.path.join(WORK, f"{config}-{tag}")
    b, s3 = start(config, root)
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("rd", partitions)])["rd"].result(60)
        conf = {"bootstrap.servers": b.bootstrap, "acks": "all"}
        if idempotent:
            conf["enable.idempotence"] = True
        producer = Producer(conf)
        before = metrics(b) if b.kind == "weir" else {}
        warmup, duration = seconds(WARMUP), seconds(DURATION)
        latencies = []
        payload = os.urandom(1024)
        t0 = time.monotonic()
        sent = 0

        def report(err, _msg, at):
            if err is None and at - t0 >= warmup:
                latencies.append(time.monotonic() - at)

        while (now := time.monotonic()) - t0 < warmup + duration:
            while sent < int((now - t0) * RATE):
                at = time.monotonic()
                producer.produce("rd", payload, partition=sent % partitions,
                                 on_delivery=lambda e, m, at=at: report(e, m, at))
                sent += 1
            producer.poll(0.001)
        producer.flush(120)
        elapsed = time.monotonic() - t0
        after = metrics(b) if b.kind == "weir" else {}
    finally:
        stop(b, s3)
    latencies.sort()

    def q(x):
        return latencies[min(len(latencies) - 1, int(x * len(latencies)))] * 1000

    return {"config": config, "partitions": partitions, "idempotent": idempotent,
            "records": len(latencies), "p50": q(0.5), "p99": q(0.99), "p999": q(0.999),
            "before": before, "after": after, "elapsed": elapsed}


def seconds(text):
    return float(text[:-1]) if text.endswith("s") else float(text)


def rdkafka_section(runs):
    lines = ["", "## librdkafka's defaults at a fixed rate", "",
             f"confluent-kafka (librdkafka) with its defaults but acks=all: one partition per "
             f"produce request, up to 1,000,000 requests in flight (5 with idempotence), "
             f"linger.ms=5; {RATE:,} records/s of 1 KiB round robin over the partitions, "
             f"{WARMUP} warm-up, {DURATION} measured (delivery reports). The goal on the object "
             "WAL with 100 ms PUTs: a p99 at most 2.5 PUTs (250 ms) at 16 partitions with the "
             "defaults.", "",
             "| broker | partitions | idempotent | produce p50 ms | p99 ms | p99.9 ms | p99 / PUT "
             "| object WAL objects/s | produce requests/s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        objects = delta(r, "weir_object_wal_objects_total") if r["after"] else 0
        reqs = delta(r, 'weir_requests_total{api_key="0"}') if r["after"] else 0
        ratio = (f"{r['p99'] / 100:.2f}x" if r["config"].endswith("-100ms") else "-")
        lines.append(f"| {r['config']} | {r['partitions']} | "
                     f"{'yes' if r['idempotent'] else 'no'} | {fmt(r['p50'], 0)} | "
                     f"{fmt(r['p99'], 0)} | {fmt(r['p999'], 0)} | {ratio} | "
                     f"{fmt(objects / r['elapsed'], 1) if objects else '-'} | "
                     f"{fmt(reqs / r['elapsed'], 0) if reqs else '-'} |")
    return lines


def main():
    if not os.environ.get("WEIR_BIN"):
        raise SystemExit("object_wal.py: set WEIR_BIN to the weir binary")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    fixed = [run(c, PARTITIONS, RATE, "fixed") for c in CONFIGS]
    # Kafka's Java producer, at the same rate: once tuned for object storage (linger.ms=20,
    # batch.size=256 KiB: a request every 20 ms per connection, so that its five in flight
    # cover a PUT), once with its defaults (linger.ms=5, batch.size=16 KiB).
    java_records = RATE * JAVA_SECONDS
    tuned = ["acks=all", "linger.ms=20", "batch.size=262144"]
    java = [java_run(c, PARTITIONS, java_records, RATE, tuned, "java-tuned")
            for c in CONFIGS]
    java += [java_run(c, PARTITIONS, java_records, RATE, ["acks=all"], "java-default")
             for c in CONFIGS if c in ("kafka", "weir-object-100ms")]
    java[len(CONFIGS):] = [dict(r, config=r["config"] + " (defaults)")
                           for r in java[len(CONFIGS):]]
    # One default producer as fast as it goes, one partition, 100 ms PUTs: librdkafka and Java.
    most = run("weir-object-100ms", 1, 0, "max") if MAX else None
    java_most = (java_run("weir-object-100ms", 1, MAX_RECORDS, -1, ["acks=all"], "java-max")
                 if MAX else None)
    rdkafka = ([rdkafka_run(c, n, idem) for c in ("kafka", "weir-object-100ms")
                for n in RDKAFKA_PARTITIONS for idem in (False, True)] if RDKAFKA else [])

    head = ("| broker | produce MiB/s | produce p50 ms | p99 ms | p99.9 ms | end-to-end p50 ms "
            "| p99 ms | PUTs per GiB | bytes written per byte produced | object WAL bytes per "
            "byte produced (before compaction) | object WAL objects/s | produce requests/s |")
    lines = [f"# The object WAL beside the file WAL and Kafka ({stamp})", "",
             f"One idempotent producer (acks=all, linger.ms=5, 5 requests in flight), "
             f"{RATE:,} records/s of 1 KiB over {PARTITIONS} partitions, one consumer group; "
             f"{WARMUP} warm-up, {DURATION} measured. Weir on s3s-fs (root {s3_root()}), "
             "SQLite metadata; 'PUTs per GiB' and 'bytes written' count every PUT of the run "
             "(warm-up, uploads, compaction) against the bytes produced.", "",
             head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [row(r) for r in fixed]
    sampled = [r for r in fixed if r["samples"]]
    if sampled:
        lines += ["", "## Ranges per partition over time (weir perf runs above)", "",
                  "Every 5 s from the broker's metadata: ranges per partition, mean / max, and "
                  "live objects. Each object of the object WAL adds a range to every partition "
                  "it holds data of; compaction (every 10 s, once a partition has 8 small "
                  "ranges) merges them into stream objects.", "",
                  "| s | " + " | ".join(r["config"] for r in sampled) + " |",
                  "|---:|" + "---:|" * len(sampled)]
        steps = max(len(r["samples"]) for r in sampled)
        for i in range(steps):
            cells = []
            for r in sampled:
                if i < len(r["samples"]):
                    _t, mean, most_, live = r["samples"][i]
                    cells.append(f"{mean:.1f} / {most_} ({live} objects)")
                else:
                    cells.append("-")
            lines.append(f"| {(i + 1) * SAMPLE_SECONDS} | " + " | ".join(cells) + " |")
    lines += ["", "## Kafka's Java producer (ProducerPerformance) at the same rate", "",
              "| broker (producer settings) | records/s | produce p50 ms | p95 ms | p99 ms "
              "| p99.9 ms | object WAL objects/s | produce requests/s |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in java:
        objects = delta(r, "weir_object_wal_objects_total") if r["after"] else 0
        reqs = delta(r, 'weir_requests_total{api_key="0"}') if r["after"] else 0
        name = r["config"] if "(defaults)" in r["config"] else r["config"] + " (tuned)"
        lines.append(f"| {name} | {fmt(r['records_per_sec'], 0)} | {fmt(r['p50'], 0)} | "
                     f"{fmt(r['p95'], 0)} | {fmt(r['p99'], 0)} | {fmt(r['p999'], 0)} | "
                     f"{fmt(objects / r['elapsed'], 1) if objects else '-'} | "
                     f"{fmt(reqs / r['elapsed'], 0) if reqs else '-'} |")
    lines += ["", "Tuned: linger.ms=20, batch.size=262144; defaults: linger.ms=5, "
              "batch.size=16384 (both idempotent, acks=all, 5 requests in flight)."]
    if most:
        s = most["summary"]
        reqs = delta(most, 'weir_requests_total{api_key="0"}') / most["elapsed"]
        lines += ["", "## One default producer's maximum on the object WAL with 100 ms PUTs", "",
                  "One partition, as fast as the producer goes.", "",
                  "| producer | records/s | MiB/s | produce requests/s | produce p50 ms | p99 ms |",
                  "|---|---:|---:|---:|---:|---:|",
                  f"| librdkafka (weir perf: idempotent, linger.ms=5) | "
                  f"{fmt(s['produce']['records_per_sec'], 0)} | "
                  f"{fmt(s['produce']['mib_per_sec'])} | {fmt(reqs, 0)} | "
                  f"{fmt(s['produce_latency_ms'].get('p50'))} | "
                  f"{fmt(s['produce_latency_ms'].get('p99'))} |"]
        if java_most:
            jr = delta(java_most, 'weir_requests_total{api_key="0"}') / java_most["elapsed"]
            lines.append(f"| Java (ProducerPerformance, defaults) | "
                         f"{fmt(java_most['records_per_sec'], 0)} | "
                         f"{fmt(java_most['mib_per_sec'])} | {fmt(jr, 0)} | "
                         f"{fmt(java_most['p50'], 0)} | {fmt(java_most['p99'], 0)} |")
        lines += ["", "Inkless (KIP-1150's diskless topics) reports about 3 requests per second "
                  "for a default producer on its object WAL. (Latencies here include the time "
                  "records queue in the producer, which grows while it runs at its maximum.)"]
    if rdkafka:
        lines += rdkafka_section(rdkafka)
    lines += ["", "Reproduce: `WEIR_BIN=target/release/weir python3 bench/object_wal.py` "
              "(make bench-object-wal). Commands:", ""]
    lines += [f"- {r['config']}: `{r['cmd']}`"
              for r in fixed + java + [x for x in (most, java_most) if x]]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"object-wal-{stamp}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")
    extra = os.environ.get("BENCH_OW_APPEND_TO")
    if extra:
        with open(extra, "a") as f:
            f.write("\n" + text.replace("# The object WAL", "## The object WAL", 1))


if __name__ == "__main__":
    main()
