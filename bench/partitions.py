#!/usr/bin/env python3
"""Many partitions: Weir beside Apache Kafka as one topic grows from 16 to 1,000 to 10,000
partitions, on this machine (`make bench-partitions`; `make bench` runs it too).

    WEIR_BIN=target/release/weir bench/partitions.py

For each partition count and each broker (a fresh single broker every time: Kafka 4.1 from
tools/kafka/kafka.sh, and `weir serve` with its objects in a local directory), `weir perf`
creates one topic of that many partitions and runs one producer (acks=all, linger.ms=5) at
BENCH_P_MIB MiB/s of 1 KiB records with one consumer group of one consumer; BENCH_P_WARMUP of
warm-up, then up to BENCH_P_SETTLE for the consumer to catch up (`weir perf --settle`), then
BENCH_P_DURATION measured. The question: do consumers keep up (end-to-end p99 within 2x of
produce p99, nothing left behind), and how do latency, CPU and memory grow with the partition
count? The topic is created first with Kafka's kafka-topics, with at most 5,000 partitions and
then grown (Kafka's controller refuses 10,000 partitions in one request).

The wait for the consumer to catch up is there because of how a new librdkafka consumer starts:
it asks for each partition's first offset with a ListOffsets request of its own, and at 10,000
partitions some thousands of those requests leave the client only seconds to tens of seconds
after the others, while the partitions already started are fetched: 6 to 11 s against Weir in
the runs we traced; against Kafka, whose answers to those requests take up to 5 s, none in one
run and 66 s for a few hundred partitions in another. (Against Weir it looked like tens of
seconds until session 27: the partitions started late were behind, their data had left the log
cache, and their reads thrashed the block cache; see docs/architecture.md, "A fetch's GETs fit
in what it carries".) The table shows that start ("consumer caught up after": warm-up plus the
wait), and the measured period is the steady state that follows.

Per run: produce and end-to-end latency p50/p99 (`weir perf`), the share of produced records
consumed in the measured period and the backlog at the end, the broker's CPU (average cores and
seconds per GiB produced + consumed) and resident memory (idle before the load and largest),
sampled from /proc every second, and the load generator's CPU (librdkafka's producer and
consumer share the machine's two cores with the broker). Writes
bench/results/partitions-YYYY-MM-DD-HHMM.md (and appends the section to BENCH_P_APPEND_TO when
set, as `make bench` does).

Environment (defaults in brackets):
  WEIR_BIN                     the weir binary (required)
  BENCH_PERF_BIN [WEIR_BIN]    the binary whose `weir perf` is the load generator (to compare
                               an older broker build under the same load generator)
  BENCH_P_COUNTS ["16 1000 10000"]
  BENCH_P_BROKERS ["kafka weir"]
  BENCH_P_MIB [20]             MiB/s of 1 KiB records
  BENCH_P_WARMUP [10s]  BENCH_P_SETTLE [120s]  BENCH_P_DURATION [30s]
  BENCH_P_DIR [target/bench-partitions]   data dirs and logs (emptied first)
  BENCH_P_RESULTS [bench/results]
  BENCH_P_FLAME [0]            1: record each broker with `perf` (bench/flame.py) and write a
                               flame graph of its measured period beside the results
                               (flame-STAMP-BROKER-PARTITIONS.svg), with a table of where its
                               time went; `make bench-cpu` sets it
"""

import datetime
import json
import os
import shutil
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402  (the harness: Broker)

sys.path.insert(0, HERE)
import flame  # noqa: E402  (perf record, flame graphs)

COUNTS = [int(x) for x in os.environ.get("BENCH_P_COUNTS", "16 1000 10000").split()]
BROKERS = os.environ.get("BENCH_P_BROKERS", "kafka weir").split()
MIB = float(os.environ.get("BENCH_P_MIB", "20"))
WARMUP = os.environ.get("BENCH_P_WARMUP", "10s")
SETTLE = os.environ.get("BENCH_P_SETTLE", "120s")
DURATION = os.environ.get("BENCH_P_DURATION", "30s")
WORK = os.path.abspath(os.environ.get("BENCH_P_DIR",
                                      os.path.join(REPO, "target", "bench-partitions")))
RESULTS = os.path.abspath(os.environ.get("BENCH_P_RESULTS",
                                         os.path.join(REPO, "bench", "results")))
FLAME = os.environ.get("BENCH_P_FLAME", "0") == "1"
STAMP = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
TICK = os.sysconf("SC_CLK_TCK")
GIB = float(1 << 30)


def proc_sample(pid):
    """(CPU seconds, RSS MiB) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
        with open(f"/proc/{pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return cpu, rss / 1024.0
    except (OSError, StopIteration, IndexError, ValueError):
        return None


class Sampler(threading.Thread):
    """Every second: the process's CPU seconds and resident memory."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.samples = []  # (monotonic, cpu s, rss MiB)
        self.halt = threading.Event()

    def run(self):
        while True:
            s = proc_sample(self.pid)
            if s is None:
                return
            self.samples.append((time.monotonic(), *s))
            if self.halt.wait(1):
                # One more at the halt: the measured period ends just before it.
                s = proc_sample(self.pid)
                if s is not None:
                    self.samples.append((time.monotonic(), *s))
                return

    def cpu_between(self, t0, t1):
        """CPU seconds between two monotonic times, from the samples either side."""
        def at(t):
            before = [s for s in self.samples if s[0] <= t]
            after = [s for s in self.samples if s[0] >= t]
            if not before or not after:
                return None
            (ta, ca, _), (tb, cb, _) = before[-1], after[0]
            return ca if tb == ta else ca + (cb - ca) * (t - ta) / (tb - ta)
        a, b = at(t0), at(t1)
        return b - a if a is not None and b is not None else None

    def summary(self):
        if len(self.samples) < 2:
            return {}
        (t0, c0, _), (t1, c1, _) = self.samples[0], self.samples[-1]
        return {"cpu_s": c1 - c0, "cores": (c1 - c0) / max(t1 - t0, 1e-9),
                "rss_max_mib": max(r for _, _, r in self.samples)}


TOPIC = "many"
# Kafka's controller refuses a request of more than 10,000 metadata records
# (QuorumController.MAX_RECORDS_PER_USER_OP): a topic of 10,000 partitions is created with
# fewer, then grown (CreatePartitions), on both brokers alike.
CREATE_AT_MOST = 5000


def kafka_tool(*args, timeout=600):
    cmd = [os.path.join(REPO, "tools", "kafka", "kafka.sh"), "tool",
           "org.apache.kafka.tools.TopicCommand", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"kafka-topics {' '.join(args[2:4])} failed: {r.stderr[-300:]}")


def create_topic(bootstrap, name, partitions, configs=None):
    kafka_tool("--bootstrap-server", bootstrap, "--create", "--topic", name, "--partitions",
               str(min(partitions, CREATE_AT_MOST)), "--replication-factor", "1")
    if configs:
        # Set after: kafka-topics refuses config names Apache Kafka does not know (Confluent's
        # and Weir's own), before it asks the broker.
        from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
        admin = AdminClient({"bootstrap.servers": bootstrap})
        resource = ConfigResource(ResourceType.TOPIC, name, set_config=dict(configs))
        admin.alter_configs([resource])[resource].result(timeout=60)
    if partitions > CREATE_AT_MOST:
        kafka_tool("--bootstrap-server", bootstrap, "--alter", "--topic", name, "--partitions",
                   str(partitions))
    # The new partitions show in Metadata, with their leaders, a little after the request
    # returns: the load starts once every partition has a leader.
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 180
    while True:
        md = admin.list_topics(topic=name, timeout=30).topics.get(name)
        if (md is not None and md.error is None and len(md.partitions) == partitions
                and all(p.leader >= 0 for p in md.partitions.values())):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} does not show {partitions} partitions with leaders "
                               "after 180 s")
        time.sleep(1)


def run(kind, partitions):
    root = os.path.join(WORK, f"{kind}-{partitions}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    b = weir_harness.Broker(kind, root, env={"WEIR_WAL_CAPACITY": str(1 << 30)})
    b.kind = kind
    if FLAME and kind == "kafka":
        os.environ["KAFKA_JVM_OPTS"] = flame.JVM_FLAME_OPTS
    try:
        b.start()
    finally:
        os.environ.pop("KAFKA_JVM_OPTS", None)
    perf_data = os.path.join(WORK, f"{kind}-{partitions}.perf.data")
    rec = flame.Recorder(b.pid, perf_data, jvm=kind == "kafka") if FLAME else None
    pid = b.pid
    # weir perf says when it started by the wall clock; the samples are on the monotonic one.
    wall_minus_mono = time.time() - time.monotonic()
    try:
        time.sleep(3)
        idle = proc_sample(b.pid)
        broker = Sampler(b.pid)
        broker.start()
        create_topic(b.bootstrap, TOPIC + "-0", partitions)
        out_json = os.path.join(root, "perf.json")
        cmd = [os.environ.get("BENCH_PERF_BIN", os.environ["WEIR_BIN"]), "perf", "--bootstrap-servers", b.bootstrap,
               "--topic-prefix", TOPIC, "--partitions", str(partitions), "--producers", "1", "--groups", "1",
               "--consumers", "1", "--record-size", "1024", "--throughput-mib", f"{MIB:g}",
               "--producer-config", "acks=all", "--producer-config", "linger.ms=5",
               "--warmup", WARMUP, "--settle", SETTLE, "--duration", DURATION, "--quiet"]
        print("bench: " + " ".join(cmd), flush=True)
        gen = subprocess.Popen(cmd + ["--output", out_json], stdout=subprocess.DEVNULL)
        client = Sampler(gen.pid)
        client.start()
        rc = gen.wait()
        broker.halt.set()
        client.halt.set()
        broker.join()
        client.join()
        if rc != 0:
            raise RuntimeError(f"weir perf exited with {rc}")
        with open(out_json) as f:
            perf = json.load(f)
    finally:
        if rec:
            rec.stop()
        b.stop()
        # A broker's data dir holds GiBs after a run: gone once its figures are read.
        shutil.rmtree(root, ignore_errors=True)
    s = perf["summary"]
    # The consumer's start: the warm-up and the wait for it to catch up.
    settle = perf.get("settle") or {}
    # The measured period on the monotonic clock: after the warm-up and the settling.
    m0 = (perf["started_at_unix_ms"] / 1000 - wall_minus_mono + perf["args"]["warmup"]
          + settle.get("seconds", 0.0))
    m1 = m0 + s["seconds"]
    measured_cpu = broker.cpu_between(m0, m1)
    where = None
    if rec:
        folded = flame.collapse(perf_data, m0, m1)
        svg = f"flame-{STAMP}-{kind}-{partitions}.svg"
        flame.write_svg(folded, f"{kind}, {partitions:,} partitions, {MIB:g} MiB/s, measured "
                        "period", os.path.join(RESULTS, svg))
        focus = "kafka" if kind == "kafka" else "weir_"
        where = f"[{svg}]({svg})\n\n" + flame.table(folded, focus=focus)
        flame.write_folded(folded, perf_data.replace(".perf.data", ".folded"))
        os.remove(perf_data)
        if kind == "kafka":
            # The JIT's symbol map the JVM wrote at exit (DumpPerfMapAtExit).
            try:
                os.remove(f"/tmp/perf-{pid}.map")
            except OSError:
                pass
    caught_up = (perf["args"]["warmup"] + settle["seconds"]
                 if settle.get("caught_up") else None)
    moved = (s["produce"]["mib_per_sec"] + s["consume"]["mib_per_sec"]) * s["seconds"] / 1024
    bs = broker.summary()
    return {
        "kind": kind, "partitions": partitions, "summary": s, "caught_up_s": caught_up,
        "cmd": "weir " + " ".join(cmd[1:]).replace(b.bootstrap, "HOST:PORT"),
        "rss_idle_mib": idle[1] if idle else None,
        "broker_cores": bs.get("cores"), "rss_max_mib": bs.get("rss_max_mib"),
        # Over the whole run (warm-up included), per GiB moved in the measured period.
        "cpu_s_per_gib": bs["cpu_s"] / moved if bs and moved > 0 else None,
        # The measured period's alone: the steady state, without the topic's creation.
        "measured_cpu_s_per_gib": (measured_cpu / moved if measured_cpu is not None and moved > 0
                                   else None),
        "where": where,
        "client_cores": client.summary().get("cores"),
    }


def fmt(v, digits=1):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def ratio(k, w):
    if not isinstance(k, (int, float)) or not isinstance(w, (int, float)) or k == 0:
        return "-"
    return f"{w / k:.2f}"


def figures(r):
    s = r["summary"]
    p, e = s["produce_latency_ms"], s.get("e2e_latency_ms") or {}
    produced = s["produce"]["records"]
    consumed = s["consume"]["records"]
    return [
        ("produce p50 ms", p.get("p50")),
        ("produce p99 ms", p.get("p99")),
        ("end-to-end p50 ms", e.get("p50")),
        ("end-to-end p99 ms", e.get("p99")),
        ("end-to-end p99 / produce p99", e["p99"] / p["p99"] if e.get("p99") and p.get("p99")
         else None),
        ("consumed / produced (measured period)", consumed / produced if produced else None),
        ("backlog at the end, records", s.get("backlog_records")),
        ("consumer caught up after, s (warm-up included)", r.get("caught_up_s") or "no"),
        ("broker CPU, cores", r["broker_cores"]),
        ("broker CPU s per GiB produced + consumed, whole run (topic creation too)",
         r["cpu_s_per_gib"]),
        ("broker CPU s per GiB, measured period only", r.get("measured_cpu_s_per_gib")),
        ("broker RSS MiB, idle", r["rss_idle_mib"]),
        ("broker RSS MiB, largest", r["rss_max_mib"]),
        ("load generator CPU, cores", r["client_cores"]),
    ]


def report(results, stamp, elapsed):
    lines = [f"## Many partitions ({stamp})", "",
             f"One topic, one producer (acks=all, linger.ms=5) at {MIB:g} MiB/s of 1 KiB "
             f"records, one consumer group of one consumer; {WARMUP} warm-up, then up to "
             f"{SETTLE} for the consumer to catch up, then {DURATION} measured; a fresh "
             "single broker per run (Weir: objects in a local directory). "
             "Goal for Weir: consumers keep up (end-to-end p99 within 2x of produce p99, "
             "everything produced consumed) and memory within its cache budgets (log cache "
             "512 MiB + block cache 256 MiB by default). The load generator shares the "
             "machine's two cores with the broker. \"Consumer caught up after\": from the start "
             "of the load until the consumer had read from every partition written to and its "
             "backlog was within a second of production; at 10,000 "
             "partitions that is mostly a new librdkafka consumer looking up each partition's "
             "first offset (bench/partitions.py says how).", "",
             "| partitions | figure | Kafka | Weir | Weir/Kafka |", "|---:|---|---:|---:|---:|"]
    for n in COUNTS:
        k = results.get(("kafka", n))
        w = results.get(("weir", n))
        kf = figures(k) if isinstance(k, dict) else None
        wf = figures(w) if isinstance(w, dict) else None
        base = kf or wf
        if base is None:
            lines.append(f"| {n:,} | failed: kafka {k}, weir {w} | | | |")
            continue
        for i, (label, _) in enumerate(base):
            kv = kf[i][1] if kf else ("failed" if i == 0 else None)
            wv = wf[i][1] if wf else ("failed" if i == 0 else None)
            head = f"{n:,}" if i == 0 else ""
            digits = 2 if "/" in label else 1
            lines.append(f"| {head} | {label} | {fmt(kv, digits)} | {fmt(wv, digits)} | "
                         f"{ratio(kv, wv)} |")
    for key in sorted(results, key=lambda k: (k[1], k[0])):
        r = results[key]
        if isinstance(r, dict) and r.get("where"):
            lines += ["", f"### Where {key[0]}'s time went, {key[1]:,} partitions (measured "
                      "period, `perf` at 199 Hz)", "", r["where"]]
    lines += ["", "Commands:", ""]
    for key in sorted(results, key=lambda k: (k[1], k[0])):
        r = results[key]
        if isinstance(r, dict):
            lines.append(f"- {key[0]}, {key[1]:,} partitions: `{r['cmd']}`")
        else:
            lines.append(f"- {key[0]}, {key[1]:,} partitions: failed: {r}")
    lines += ["", f"Reproduce: `WEIR_BIN=target/release/weir bench/partitions.py` "
              f"(BENCH_P_COUNTS=\"{' '.join(map(str, COUNTS))}\"); this run took "
              f"{elapsed:.0f} s.", ""]
    return "\n".join(lines)


def main():
    if "WEIR_BIN" not in os.environ:
        sys.exit("partitions.py: set WEIR_BIN to the weir binary")
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = STAMP
    t0 = time.monotonic()
    results = {}
    for n in COUNTS:
        for kind in BROKERS:
            try:
                results[(kind, n)] = run(kind, n)
            except Exception as e:  # one failure must not lose the other runs
                print(f"bench: {kind} with {n} partitions failed: {e}", flush=True)
                results[(kind, n)] = str(e).splitlines()[0][:200] if str(e) else repr(e)
    text = report(results, stamp, time.monotonic() - t0)
    write_results(RESULTS, f"partitions-{stamp}", text, results,
                  os.environ.get("BENCH_P_APPEND_TO"))


def write_results(where, name, text, results, append_to=None):
    """Prints the section, writes it as WHERE/NAME.md and its runs (keyed (broker, run)) as
    NAME.json, and appends it to `append_to` (the report of `make bench`) if given."""
    print(text)
    # Names are stamped to the minute: a run started in the same minute as an earlier one
    # must not overwrite its results.
    base, n = name, 1
    while os.path.exists(os.path.join(where, f"{name}.md")):
        n += 1
        name = f"{base}-{n}"
    out = os.path.join(where, f"{name}.md")
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.join(where, f"{name}.json"), "w") as f:
        json.dump({f"{k[0]}-{k[1]}": v for k, v in results.items()}, f, indent=1)
    print(f"bench: wrote {out}")
    if append_to:
        with open(append_to, "a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
