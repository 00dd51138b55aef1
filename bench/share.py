#!/usr/bin/env python3
"""Share groups (KIP-932) beside Apache Kafka 4.4, on this machine (`make bench-share`).

    WEIR_BIN=target/release/weir bench/share.py

A fresh single broker of each configuration (`kafka`: Apache Kafka 4.4 from tools/kafka;
`weir-file`: `weir serve`, file WAL, objects on s3s-fs), a topic of 4 partitions holding
BENCH_SHARE_RECORDS records of 1 KiB (Kafka's ProducerPerformance), then for 1, 8 and 32 share
consumers a fresh share group (share.auto.offset.reset=earliest) reads every record once:
tools/kafka/ShareBench.java, explicit acknowledgement, each poll's records accepted and
committed with commitSync. Reported per run: records/s, the commitSync latency (the
acknowledgement's round trip, which waits for the share-partition's state to be stored) p50 and
p99, records delivered more than once, and the broker's CPU seconds per GiB delivered. The load
generator shares the two cores with the broker: compare ratios, not absolute rates. Writes
bench/results/share-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                          the weir binary (required)
  BENCH_SHARE_RECORDS [100000]
  BENCH_SHARE_CONSUMERS ["1 8 32"]
  BENCH_SHARE_CONFIGS ["kafka weir-file"]
  BENCH_SHARE_WARMUP [20000]        records a warm-up share group reads first, not measured
"""

import datetime
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import object_wal as ow  # noqa: E402  (brokers, kafka.sh tools)

REPO = os.path.dirname(HERE)
RECORDS = int(os.environ.get("BENCH_SHARE_RECORDS", "100000"))
CONSUMERS = [int(x) for x in os.environ.get("BENCH_SHARE_CONSUMERS", "1 8 32").split()]
CONFIGS = os.environ.get("BENCH_SHARE_CONFIGS", "kafka weir-file").split()
WARMUP = int(os.environ.get("BENCH_SHARE_WARMUP", "20000"))
PARTITIONS = 4
GIB = float(1 << 30)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def classpath():
    return subprocess.run([os.path.join(REPO, "tools", "kafka", "kafka.sh"), "classpath"],
                          capture_output=True, text=True, check=True).stdout.strip()


def set_earliest(b, group):
    r = ow.kafka_tool("configs", "--bootstrap-server", b.bootstrap, "--alter",
                      "--entity-type", "groups", "--entity-name", group,
                      "--add-config", "share.auto.offset.reset=earliest")
    if r.returncode != 0:
        raise RuntimeError(f"kafka-configs failed: {r.stdout[-400:]}{r.stderr[-400:]}")


def run_config(config, cp):
    root = os.path.join(ow.WORK, f"{config}-share")
    shutil.rmtree(root, ignore_errors=True)
    b, s3 = ow.start(config, root)
    rows = []
    try:
        r = ow.kafka_tool("topics", "--bootstrap-server", b.bootstrap, "--create", "--topic",
                          "share", "--partitions", str(PARTITIONS), "--replication-factor", "1")
        if r.returncode != 0:
            raise RuntimeError(f"creating the topic failed: {r.stderr[-500:]}")
        r = ow.kafka_tool("producer-perf", "--topic", "share", "--num-records", str(RECORDS),
                          "--record-size", "1024", "--throughput", "-1", "--producer-props",
                          f"bootstrap.servers={b.bootstrap}", "acks=all", "linger.ms=5")
        if r.returncode != 0:
            raise RuntimeError(f"producing failed: {r.stderr[-500:]}")
        # Warm-up, not measured: a share group reads the first WARMUP records (Kafka creates its
        # share-state topic and compiles its hot paths; Weir fills its log cache).
        warm = f"bench-{config}-warmup"
        set_earliest(b, warm)
        subprocess.run(["java", "-Xmx1g", "-cp", cp, os.path.join(REPO, "tools", "kafka",
                        "ShareBench.java"), b.bootstrap, "share", warm, "4", str(WARMUP)],
                       capture_output=True, text=True, timeout=600)
        for n in CONSUMERS:
            group = f"bench-{config}-{n}"
            set_earliest(b, group)
            cmd = ["java", "-Xmx1g", "-cp", cp, os.path.join(REPO, "tools", "kafka",
                   "ShareBench.java"), b.bootstrap, "share", group, str(n), str(RECORDS)]
            cpu0 = cpu_seconds(b.pid)
            t0 = time.monotonic()
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            wall = time.monotonic() - t0
            cpu = cpu_seconds(b.pid) - cpu0
            line = next((l for l in out.stdout.splitlines() if l.startswith("{")), None)
            if line is None:
                raise RuntimeError(f"ShareBench printed nothing: {out.stdout[-500:]}"
                                   f"{out.stderr[-1500:]}")
            res = json.loads(line)
            res.update(config=config, consumers=n, cpu=cpu, wall=wall,
                       cpu_per_gib=cpu / (res["records"] * 1024 / GIB) if res["records"] else 0)
            print(f"bench: {config} x{n}: {res}", flush=True)
            rows.append(res)
    finally:
        b.stop()
        if s3 is not None:
            s3.kill()
            shutil.rmtree(s3.root, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
    return rows


def main():
    if not os.environ.get("WEIR_BIN"):
        sys.exit("bench/share.py: set WEIR_BIN")
    cp = classpath()
    rows = []
    for config in CONFIGS:
        rows += run_config(config, cp)
    base = {r["consumers"]: r for r in rows if r["config"] == "kafka"}
    lines = [f"# Share groups, {datetime.datetime.now():%Y-%m-%d %H:%M}", "",
             f"{RECORDS} records of 1 KiB on {PARTITIONS} partitions, read once by a fresh share "
             "group of N consumers (KafkaShareConsumer 4.4, explicit acknowledgement, commitSync "
             f"after each poll; a warm-up group reads {WARMUP} records first); the broker's CPU "
             "over the read. "
             "`WEIR_BIN=target/release/weir bench/share.py`", "",
             "| config | consumers | records/s | vs Kafka | commitSync p50 ms | p99 ms | "
             "delivered again | broker CPU s/GiB | vs Kafka |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        k = base.get(r["consumers"])
        ratio = f"{r['records_per_sec'] / k['records_per_sec']:.2f}x" if k else "-"
        cratio = f"{r['cpu_per_gib'] / k['cpu_per_gib']:.2f}x" if k and k["cpu_per_gib"] else "-"
        lines.append(f"| {r['config']} | {r['consumers']} | {r['records_per_sec']:.0f} | {ratio} | "
                     f"{r['commit_p50_ms']:.1f} | {r['commit_p99_ms']:.1f} | "
                     f"{r['delivered_again']} | {r['cpu_per_gib']:.1f} | {cratio} |")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(ow.RESULTS, exist_ok=True)
    path = os.path.join(ow.RESULTS, f"share-{datetime.datetime.now():%Y-%m-%d-%H%M}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"bench: wrote {path}")


if __name__ == "__main__":
    main()
