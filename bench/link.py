#!/usr/bin/env python3
"""Cluster links on this machine (`make bench-link`): a Weir broker mirroring an Apache Kafka
4.1 broker, both started here, with the load generator beside them on the same cores.

    WEIR_BIN=target/release/weir python3 bench/link.py

1. Lag at a fixed rate: Kafka's ProducerPerformance writes BENCH_LINK_MIB_S MiB/s of 1 KiB
   records to BENCH_LINK_PARTITIONS partitions of the source for BENCH_LINK_SECONDS while the
   link mirrors them; Weir's /metrics is read every 0.5 s: the largest
   `weir_link_lag_seconds` and the summed `weir_link_lag_records` of each sample, their p50 /
   p99 / max; the time from the producer's end until the mirror has everything.
2. A backlog's catch-up: BENCH_LINK_BACKLOG_MIB written to a second topic with no link, then
   a link made and timed until the mirror has it all; beside it, Kafka's ConsumerPerformance
   reading the same backlog from the source (the rate the issue compares with).
3. The Weir broker's CPU seconds per GiB mirrored, from /proc, over each part.

Writes bench/results/link-YYYY-MM-DD-HHMM.md. MirrorMaker 2 beside it is still to come.
"""

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))

from weir_harness import Broker, KAFKA_SH  # noqa: E402

MIB_S = float(os.environ.get("BENCH_LINK_MIB_S", "20"))
PARTITIONS = int(os.environ.get("BENCH_LINK_PARTITIONS", "16"))
SECONDS = int(os.environ.get("BENCH_LINK_SECONDS", "60"))
BACKLOG_MIB = int(os.environ.get("BENCH_LINK_BACKLOG_MIB", "1024"))
RECORD = 1024


def tool(*args, timeout=1800):
    r = subprocess.run(["bash", KAFKA_SH, "tool", *args], capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"kafka.sh tool {args[0]} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout


def create_topic(bootstrap, name):
    tool("topics", "--bootstrap-server", bootstrap, "--create", "--topic", name,
         "--partitions", str(PARTITIONS), "--replication-factor", "1")


def produce(bootstrap, topic, records, per_sec):
    return tool("producer-perf", "--topic", topic, "--num-records", str(records),
                "--record-size", str(RECORD), "--throughput", str(per_sec),
                "--producer-props", f"bootstrap.servers={bootstrap}", "acks=all",
                "linger.ms=5", "batch.size=262144", "compression.type=lz4")


def metrics(b):
    with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics", timeout=5) as r:
        return r.read().decode()


def family(text, name):
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            out.append(float(line.rsplit(" ", 1)[1]))
    return out


class Latency:
    """A consumer of `topic` from its end that notes, for every tenth record, how long after
    its producer's timestamp it was read here: end to end at the source, or through the link."""

    def __init__(self, bootstrap, topic):
        import threading
        from confluent_kafka import Consumer
        self.values = []
        self.stop = threading.Event()
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.time_ns()}",
                           "auto.offset.reset": "latest", "enable.auto.commit": False,
                           "fetch.wait.max.ms": 50})
        self.c.subscribe([topic])
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        n = 0
        while not self.stop.is_set():
            for m in self.c.consume(500, 0.2):
                n += 1
                if m.error() is None and n % 10 == 0:
                    self.values.append(time.time() * 1000 - m.timestamp()[1])
        self.c.close()

    def done(self):
        self.stop.set()
        self.t.join(30)
        v = self.values
        return f"{pct(v, .5):.0f} / {pct(v, .99):.0f} / {max(v) if v else 0:.0f} ({len(v)} samples)"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, q):
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def link(weir, name, source, topic):
    body = json.dumps({"name": name, "bootstrap.servers": source.bootstrap, "topics": [topic],
                       "metadata.refresh.ms": 1000}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{weir.admin_port}/v1/links", data=body,
                                 method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 201


def main():
    root = tempfile.mkdtemp(prefix="bench-link-")
    source = Broker("source", os.path.join(root, "kafka"))
    source.kind = "kafka"
    weir = Broker("weir", os.path.join(root, "weir"),
                  env={"WEIR_WAL_CAPACITY": str(1 << 30)})
    os.makedirs(source.root, exist_ok=True)
    os.makedirs(weir.root, exist_ok=True)
    source.start()
    weir.start()
    rows = []
    try:
        # 1. Lag at a fixed rate.
        create_topic(source.bootstrap, "steady")
        link(weir, "steady", source, "steady")
        time.sleep(5)
        at_source, through_link = Latency(source.bootstrap, "steady"), Latency(weir.bootstrap, "steady")
        time.sleep(3)
        per_sec = int(MIB_S * (1 << 20) / RECORD)
        samples_s, samples_r = [], []
        pid = weir.pid
        cpu0, bytes0 = cpu_seconds(pid), sum(family(metrics(weir), "weir_link_mirrored_bytes_total"))
        p = subprocess.Popen(["bash", KAFKA_SH, "tool", "producer-perf", "--topic", "steady",
                              "--num-records", str(per_sec * SECONDS), "--record-size",
                              str(RECORD), "--throughput", str(per_sec), "--producer-props",
                              f"bootstrap.servers={source.bootstrap}", "acks=all",
                              "linger.ms=5", "batch.size=262144", "compression.type=lz4"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while p.poll() is None:
            text = metrics(weir)
            secs = family(text, "weir_link_lag_seconds")
            recs = family(text, "weir_link_lag_records")
            samples_s.append(max(secs) if secs else 0.0)
            samples_r.append(sum(recs))
            time.sleep(0.5)
        out = p.stdout.read()
        ended = time.monotonic()
        last = [l for l in out.splitlines() if "records sent" in l][-1]
        produced_mib = float(re.search(r"\(([\d.]+) MB/sec\)", last).group(1))
        while True:
            recs = family(metrics(weir), "weir_link_lag_records")
            if recs and max(recs) == 0:
                break
            time.sleep(0.1)
        drain_s = time.monotonic() - ended
        time.sleep(1)
        source_latency, link_latency = at_source.done(), through_link.done()
        text = metrics(weir)
        got_bytes = sum(family(text, "weir_link_mirrored_bytes_total")) - bytes0
        cpu = cpu_seconds(pid) - cpu0
        rows.append(("steady", {
            "target MiB/s": MIB_S, "produced MB/s (ProducerPerformance)": produced_mib,
            "end-to-end ms p50 / p99 / max, a consumer of the source":  source_latency,
            "end-to-end ms p50 / p99 / max, a consumer of the mirror (through the link)":
                link_latency,
            "weir_link_lag_seconds p50 / p99 / max (largest partition, every 0.5 s)":
                f"{pct(samples_s, .5):.2f} / {pct(samples_s, .99):.2f} / {max(samples_s):.2f}",
            "weir_link_lag_records p50 / p99 / max (all partitions, every 0.5 s)":
                f"{pct(samples_r, .5):.0f} / {pct(samples_r, .99):.0f} / {max(samples_r):.0f}",
            "caught up after the producer ended, s": f"{drain_s:.2f}",
            "Weir CPU s per GiB mirrored": f"{cpu / (got_bytes / (1 << 30)):.2f}",
            "last ProducerPerformance line": last.strip(),
        }))
        # 2. A backlog's catch-up, beside a Kafka consumer reading it from the source.
        create_topic(source.bootstrap, "backlog")
        produce(source.bootstrap, "backlog", BACKLOG_MIB * 1024, -1)
        t0 = time.monotonic()
        out = tool("consumer-perf", "--bootstrap-server", source.bootstrap, "--topic", "backlog",
                   "--messages", str(BACKLOG_MIB * 1024), "--timeout", "120000")
        consumer_s = time.monotonic() - t0
        cpu0 = cpu_seconds(pid)
        bytes0 = sum(family(metrics(weir), "weir_link_mirrored_bytes_total"))
        t0 = time.monotonic()
        link(weir, "backlog", source, "backlog")
        time.sleep(1)
        while True:
            recs = family(metrics(weir), "weir_link_lag_records")
            text = metrics(weir)
            if sum(family(text, "weir_link_mirrored_bytes_total")) - bytes0 > 0 and recs and \
                    max(recs) == 0 and len(recs) >= 2 * PARTITIONS:
                break
            time.sleep(0.2)
        link_s = time.monotonic() - t0
        got_bytes = sum(family(metrics(weir), "weir_link_mirrored_bytes_total")) - bytes0
        cpu = cpu_seconds(pid) - cpu0
        rows.append(("backlog", {
            "backlog MiB (1 KiB records, lz4)": BACKLOG_MIB,
            "Kafka ConsumerPerformance, s (wall, JVM start included)": f"{consumer_s:.1f}",
            "Weir link from its creation until caught up, s": f"{link_s:.1f}",
            "link / consumer time": f"{link_s / consumer_s:.2f}",
            "bytes mirrored (as stored, compressed)": int(got_bytes),
            "Weir CPU s per GiB mirrored (compressed bytes)": f"{cpu / (got_bytes / (1 << 30)):.2f}",
            "ConsumerPerformance": out.strip().splitlines()[-1],
        }))
    finally:
        weir.stop()
        source.stop()
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    lines = [f"# Cluster link: Weir mirroring Apache Kafka 4.1, {stamp}", "",
             "One Kafka broker (the source), one Weir broker (file WAL, objects on local disk) "
             "and the load generators on this 2-core machine. Reproduce: "
             f"`BENCH_LINK_MIB_S={MIB_S:g} BENCH_LINK_PARTITIONS={PARTITIONS} "
             f"BENCH_LINK_SECONDS={SECONDS} BENCH_LINK_BACKLOG_MIB={BACKLOG_MIB} "
             "WEIR_BIN=<release build> python3 bench/link.py`.", ""]
    for name, r in rows:
        lines += [f"## {name}", "", "| figure | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in r.items()]
        lines.append("")
    path = os.path.join(HERE, "results", f"link-{stamp}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
