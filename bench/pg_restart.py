#!/usr/bin/env python3
"""PostgreSQL under a Weir cluster: metadata commits under load, and a PostgreSQL restart.

    WEIR_BIN=target/release/weir bench/pg_restart.py        (or: make bench-pg)

Starts a three-broker Weir cluster on this machine (one private PostgreSQL, one s3s-fs, three
`weir serve`: the `Cluster` of tests/harness/weir_harness), then:

1. Commits under load. `weir perf` at full speed (1 KiB records, acks=all, linger.ms=1, one
   producer and one consumer group, BENCH_PG_PARTITIONS partitions), as `make bench`'s workload
   b. From every broker's /metrics at the start and the end of the measured period: metadata
   commits per second (weir_metadata_commit_seconds_count), their latency (the histogram's
   power-of-two buckets: a percentile is the upper bound of its bucket), produce requests per
   commit (PostgreSQL is touched per upload, not per request) and the produce rate.

2. A restart under load. An idempotent producer (acks=all) sends BENCH_PG_RATE records/s
   round-robin over the partitions of a new topic, and a consumer group reads them and commits
   its offsets every second. After BENCH_PG_BEFORE seconds PostgreSQL is stopped (`pg_ctl -m
   fast`: clients are disconnected), kept down BENCH_PG_DOWN seconds and started again on its
   port; the load goes on BENCH_PG_AFTER seconds more. Reports the longest gap between
   acknowledgements (any partition, and the worst single partition) before, during and after
   the outage; what the clients saw (delivery failures, producer and consumer errors, failed
   offset commits); when each broker's uploads committed again; the WAL's peak use; broker log
   lines about the outage; and the read-back: every acknowledged record read once, at the
   offset it was acknowledged with.

No assertions: it prints figures, and writes them to bench/results/pg-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                      the weir binary (make bench-pg: target/release/weir)
  BENCH_PG_PARTITIONS [16]      partitions of both topics
  BENCH_PG_LOAD_SECS [20]       measured period of part 1 (after 5 s of warm-up)
  BENCH_PG_RATE [4000]          part 2's produce rate, records/s of BENCH_PG_RECORD_BYTES
  BENCH_PG_RECORD_BYTES [1024]
  BENCH_PG_BEFORE [10]  BENCH_PG_DOWN [10]  BENCH_PG_AFTER [15]   part 2's phases, seconds
  BENCH_PG_WAL_CAPACITY [1GiB]  each broker's WEIR_WAL_CAPACITY
  BENCH_PG_UPLOAD_INTERVAL_MS [2000]  part 2's brokers' WEIR_STORAGE_UPLOAD_INTERVAL_MS (part 1
                                keeps the default, 30 s or 128 MiB)
  BENCH_PG_DIR [target/bench-pg] brokers' data dirs, PostgreSQL, s3s-fs, logs (emptied first)
  BENCH_PG_RESULTS [bench/results]
  BENCH_PG_KEEP [0]             1: keep BENCH_PG_DIR afterwards
  S3S_FS, WEIR_PG_BIN           as for the cluster tests (tests/harness/weir_harness)
"""

import datetime
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, HERE)

from move import fmt_size, longest_gap, machine, parse_size  # noqa: E402

SEQ = struct.Struct(">Q")


class Settings:
    def __init__(self):
        e = os.environ.get
        self.partitions = int(e("BENCH_PG_PARTITIONS", "16"))
        self.load_secs = float(e("BENCH_PG_LOAD_SECS", "20"))
        self.rate = float(e("BENCH_PG_RATE", "4000"))
        self.record_bytes = int(e("BENCH_PG_RECORD_BYTES", "1024"))
        self.before = float(e("BENCH_PG_BEFORE", "10"))
        self.down = float(e("BENCH_PG_DOWN", "10"))
        self.after = float(e("BENCH_PG_AFTER", "15"))
        self.wal_capacity = parse_size(e("BENCH_PG_WAL_CAPACITY", "1GiB"))
        self.upload_interval_ms = int(e("BENCH_PG_UPLOAD_INTERVAL_MS", "2000"))
        self.dir = os.path.abspath(e("BENCH_PG_DIR", os.path.join(REPO, "target", "bench-pg")))
        self.results = os.path.abspath(e("BENCH_PG_RESULTS", os.path.join(HERE, "results")))
        self.keep = e("BENCH_PG_KEEP", "0") == "1"
        if self.record_bytes < SEQ.size:
            raise SystemExit("bench/pg_restart.py: records must be at least 8 bytes")


# ------------------------------------------------------------------ metrics
METRIC = re.compile(r'^([a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$')


def scrape(port):
    """{name or name{labels}: value} of a broker's /metrics, or {} if it does not answer."""
    out = {}
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                m = METRIC.match(line)
                if m:
                    out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    except (OSError, ValueError):
        pass
    return out


def buckets(m, name):
    """[(upper bound in seconds, cumulative count)] of histogram `name`, +Inf last."""
    out = []
    for k, v in m.items():
        if k.startswith(name + "_bucket{le=\""):
            le = k[len(name) + 12:-2]
            out.append((float("inf") if le == "+Inf" else float(le), v))
    return sorted(out)


def percentile(before, after, name, q):
    """Upper bound (ms) of the bucket holding quantile q of what `name` recorded between two
    scrapes, summed over brokers: lists of per-broker scrapes."""
    total = {}
    for b, a in zip(before, after):
        prev = dict(buckets(b, name))
        for le, n in buckets(a, name):
            total[le] = total.get(le, 0) + n - prev.get(le, 0)
    if not total:
        return None
    count = total[float("inf")]
    if count <= 0:
        return None
    for le in sorted(total):
        if total[le] >= q * count:
            return le * 1000
    return None


def delta(before, after, key):
    return sum(a.get(key, 0) - b.get(key, 0) for b, a in zip(before, after))


# ------------------------------------------------------------------ part 1
def commits_under_load(s, cluster):
    weir = os.environ["WEIR_BIN"]
    warmup = 5
    out = os.path.join(s.dir, "perf.json")
    cmd = [weir, "perf", "--bootstrap-servers", cluster.bootstrap, "--partitions",
           str(s.partitions), "--producers", "1", "--groups", "1", "--consumers", "1",
           "--record-size", "1024", "--rate", "0", "--producer-config", "acks=all",
           "--producer-config", "linger.ms=1", "--warmup", f"{warmup}s",
           "--duration", f"{s.load_secs:g}s", "--quiet", "--output", out]
    ports = [b.aux_port for b in cluster.brokers]
    scrapes = {}

    def sample():
        time.sleep(warmup + 0.5)
        scrapes["before"] = ([scrape(p) for p in ports], time.monotonic())
        time.sleep(max(1.0, s.load_secs - 1.0))
        scrapes["after"] = ([scrape(p) for p in ports], time.monotonic())

    t = threading.Thread(target=sample)
    print(f"part 1: {' '.join(cmd[1:])}", flush=True)
    t.start()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode
    t.join()
    if rc != 0 or "after" not in scrapes:
        raise RuntimeError(f"weir perf failed (exit {rc})")
    (b, t0), (a, t1) = scrapes["before"], scrapes["after"]
    secs = t1 - t0
    name = "weir_metadata_commit_seconds"
    commits = delta(b, a, name + "_count")
    commit_secs = delta(b, a, name + "_sum")
    produces = delta(b, a, 'weir_requests_total{api_key="0"}')
    produced = delta(b, a, "weir_produce_bytes_total")
    r = {"secs": secs, "commits": commits, "commits_per_s": commits / secs,
         "mean_ms": commit_secs / commits * 1000 if commits else None,
         "p50": percentile(b, a, name, 0.5), "p99": percentile(b, a, name, 0.99),
         "max": percentile(b, a, name, 1.0),
         "produce_requests_per_s": produces / secs,
         "produce_mib_s": produced / secs / (1 << 20),
         "requests_per_commit": produces / commits if commits else None,
         "uploads": delta(b, a, "weir_uploads_total"),
         "cmd": " ".join(["weir", *cmd[1:]])}
    try:
        with open(out) as f:
            r["perf"] = json.load(f)
    except (OSError, ValueError):
        r["perf"] = None
    return r


# ------------------------------------------------------------------ part 2
def producer_main(bootstrap, topic, partitions, rate, record_bytes, stop, out):
    from confluent_kafka import Producer

    errors = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2, "error_cb": lambda e: errors.append((time.monotonic(), str(e)))})
    pad = b"\0" * (record_bytes - SEQ.size)
    acks, failures = [], []

    def delivered(seq):
        def cb(err, msg):
            now = time.monotonic()
            if err is not None:
                failures.append((now, seq, str(err)))
            else:
                acks.append((now, seq, msg.partition(), msg.offset()))
        return cb

    seq = 0
    t0 = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - t0) * rate)
        while seq < due:
            try:
                p.produce(topic, value=SEQ.pack(seq) + pad, partition=seq % partitions,
                          on_delivery=delivered(seq))
            except BufferError:
                break
            seq += 1
        p.poll(0.001)
    left = p.flush(180)
    out.put({"acks": acks, "failures": failures, "errors": errors, "sent": seq,
             "unflushed": left})


def group_main(bootstrap, topic, stop, out):
    """A consumer group member committing its offsets every second; reports commit outcomes
    and errors."""
    from confluent_kafka import Consumer

    errors, commits = [], []

    def on_commit(err, _partitions):
        commits.append((time.monotonic(), None if err is None else str(err)))

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-pg-{topic}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "on_commit": on_commit,
                  "error_cb": lambda e: errors.append((time.monotonic(), str(e)))})
    c.subscribe([topic])
    read = 0
    last_commit = time.monotonic()
    stop_at = None
    while True:
        m = c.poll(0.05)
        now = time.monotonic()
        if m is not None and m.error():
            errors.append((now, str(m.error())))
        elif m is not None:
            read += 1
        if now - last_commit >= 1.0 and read:
            try:
                c.commit(asynchronous=True)
            except Exception as e:  # noqa: BLE001 - "no offset to commit" and the like
                commits.append((now, str(e)))
            last_commit = now
        if stop.is_set():
            stop_at = stop_at or now
            if now - stop_at > 5:
                break
    try:
        c.commit(asynchronous=False)
        commits.append((time.monotonic(), None))
    except Exception as e:  # noqa: BLE001
        commits.append((time.monotonic(), str(e)))
    c.close()
    out.put({"read": read, "errors": errors, "commits": commits})


def read_back(bootstrap, topic, partitions):
    """{(partition, offset): seq} of every record of `topic`."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-pg-check-{topic}",
                  "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)}
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = {}
    deadline = time.monotonic() + 300
    while any(sum(1 for (q, _) in got if q == p) < ends[p] for p in ends):
        if time.monotonic() > deadline:
            break
        for m in c.consume(1000, 1.0):
            if m.error():
                continue
            got[(m.partition(), m.offset())] = SEQ.unpack(m.value()[:SEQ.size])[0]
    c.close()
    return got


def create_topic(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([NewTopic(topic, num_partitions=partitions,
                                       replication_factor=1)]).values():
        f.result(30)


def restart_under_load(s, cluster):
    topic = "pg-restart"
    create_topic(cluster.bootstrap, topic, s.partitions)
    time.sleep(1)
    ports = [b.aux_port for b in cluster.brokers]
    series = []  # (time, [scrape per broker])
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            series.append((time.monotonic(), [scrape(p) for p in ports]))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    ctx = mp.get_context("spawn")
    stop, pout, gout = ctx.Event(), ctx.Queue(), ctx.Queue()
    producer = ctx.Process(target=producer_main, args=(cluster.bootstrap, topic, s.partitions,
                                                      s.rate, s.record_bytes, stop, pout))
    group = ctx.Process(target=group_main, args=(cluster.bootstrap, topic, stop, gout))
    producer.start()
    group.start()
    print(f"part 2: {s.rate:g} records/s over {s.partitions} partitions; PostgreSQL stops in "
          f"{s.before:g} s for {s.down:g} s", flush=True)
    time.sleep(s.before)
    t_stop, t_down, t_start, t_up = cluster.pg.restart(s.down)
    print(f"PostgreSQL stopped in {t_down - t_stop:.1f} s, down {t_start - t_down:.1f} s, "
          f"started in {t_up - t_start:.1f} s", flush=True)
    time.sleep(s.after)
    stop.set()
    p = pout.get(timeout=300)
    g = gout.get(timeout=120)
    producer.join(30)
    group.join(30)
    sampling.set()
    sampler.join(5)

    # Gaps between acknowledgements, all partitions together and per partition.
    def phase_gaps(a, b):
        every = longest_gap(sorted(t for t, *_ in p["acks"]), a, b)[0]
        worst = 0.0
        for part in range(s.partitions):
            g_ms = longest_gap(sorted(t for t, _, q, _ in p["acks"] if q == part), a, b)[0]
            worst = max(worst, g_ms or 0.0)
        acked = sum(1 for t, *_ in p["acks"] if a <= t <= b)
        return every, worst, acked

    phases = {"before": phase_gaps(t_stop - s.before + 1, t_stop),
              "outage": phase_gaps(t_stop, t_up),
              "after": phase_gaps(t_up, t_up + s.after - 1)}

    # When each broker committed an upload again after PostgreSQL came back.
    name = "weir_metadata_commit_seconds_count"
    resumed = []
    for i in range(len(ports)):
        at_up = next((m[i].get(name, 0) for t, m in series if t >= t_up), None)
        first = next((t for t, m in series if t >= t_up and at_up is not None
                      and m[i].get(name, 0) > at_up), None)
        resumed.append(None if first is None else (first - t_up) * 1000)
    wal_peak = [max((m[i].get("weir_wal_used_bytes", 0) for t, m in series
                     if t_stop <= t <= t_up + s.after), default=0) for i in range(len(ports))]

    got = read_back(cluster.bootstrap, topic, s.partitions)
    missing = sum(1 for _, seq, q, off in p["acks"] if got.get((q, off)) != seq)
    seen = {}
    for key, seq in got.items():
        seen[seq] = seen.get(seq, 0) + 1
    twice = sum(1 for n in seen.values() if n > 1)
    # Within a partition, offsets follow send order.
    order_ok = True
    for part in range(s.partitions):
        seqs = [got[k] for k in sorted(k for k in got if k[0] == part)]
        order_ok = order_ok and all(x < y for x, y in zip(seqs, seqs[1:]))
    return {"topic": topic, "pg": (t_down - t_stop, t_start - t_down, t_up - t_start),
            "phases": phases, "resumed_ms": resumed, "wal_peak": wal_peak,
            "sent": p["sent"], "acked": len(p["acks"]), "failures": p["failures"],
            "producer_errors": p["errors"], "unflushed": p["unflushed"],
            "group_read": g["read"], "group_errors": g["errors"],
            "failed_commits": [(t, e) for t, e in g["commits"] if e is not None
                               and t_stop - 1 <= t],
            "ok_commits": sum(1 for _, e in g["commits"] if e is None),
            "read": len(got), "missing": missing, "twice": twice, "order_ok": order_ok,
            "t_stop": t_stop, "t_up": t_up}


LOG_LINES = re.compile(r"fenced|registering again|controller round failed|upload failed|"
                       r"renewing the broker session failed|reading the cluster failed|"
                       r"is now the controller|listener", re.IGNORECASE)
def outage_log(cluster):
    """Counts of broker log lines about the outage: ((broker, line with numbers folded to N),
    count), the line from its level on and cut at 110 characters."""
    counts = {}
    for i, b in enumerate(cluster.brokers):
        for line in b.log_lines():
            if not LOG_LINES.search(line):
                continue
            text = re.sub(r"\d+", "N", re.sub(r"^.*?(WARN|ERROR|INFO)", r"\1", line))
            key = (i + 1, re.sub(r"\s+", " ", text).strip()[:110])
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts.items())


# ------------------------------------------------------------------ report
def ms(v):
    return "-" if v is None else f"{v:,.0f}"


def report(s, load, restart, logs, stamp, cmd):
    r = restart
    lines = [f"# PostgreSQL under a Weir cluster: {stamp}", "",
             "## Metadata commits under load", "",
             f"`{load['cmd']}` on three brokers with the default settings; figures from the brokers' /metrics over "
             f"{load['secs']:.1f} s of the measured period.", "",
             "| produced MiB/s | produce requests/s | metadata commits/s | produce requests "
             "per commit | commit mean ms | commit p50 ms (bucket) | commit p99 ms (bucket) "
             "| commit max ms (bucket) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|",
             f"| {load['produce_mib_s']:.1f} | {load['produce_requests_per_s']:,.0f} "
             f"| {load['commits_per_s']:.1f} | {ms(load['requests_per_commit'])} "
             f"| {load['mean_ms']:.1f} | {ms(load['p50'])} | {ms(load['p99'])} "
             f"| {ms(load['max'])} |" if load["commits"] else "| (no commits) |", "",
             "Percentiles are the upper bounds of power-of-two buckets "
             "(weir_metadata_commit_seconds); the mean is exact.", "",
             "## PostgreSQL restarted under produce and consume load", "",
             f"A fresh cluster whose brokers upload every {s.upload_interval_ms} ms "
             "(WEIR_STORAGE_UPLOAD_INTERVAL_MS), so that the outage hits uploads that are due. "
             f"{s.rate:g} records/s of {s.record_bytes} B (confluent-kafka idempotent producer, "
             f"acks=all, linger.ms=2) round-robin over {s.partitions} partitions; one consumer "
             "group member committing offsets every second. PostgreSQL: `pg_ctl stop -m fast` "
             f"took {r['pg'][0]:.1f} s, down {r['pg'][1]:.1f} s, `pg_ctl start` took "
             f"{r['pg'][2]:.1f} s.", "",
             "| phase | acks | longest gap between acks, any partition (ms) | longest gap on "
             "one partition (ms) |", "|---|---:|---:|---:|"]
    for name, label in (("before", "before (steady)"), ("outage", "PostgreSQL down"),
                        ("after", "after it is back")):
        every, worst, acked = r["phases"][name]
        lines.append(f"| {label} | {acked:,} | {ms(every)} | {ms(worst)} |")
    lines += ["",
              f"- sent {r['sent']:,}, acknowledged {r['acked']:,}, delivery failures "
              f"{len(r['failures'])}, unflushed at the end {r['unflushed']}",
              f"- read back {r['read']:,}; acknowledged records missing or at another offset: "
              f"{r['missing']}; records read twice: {r['twice']}; per-partition order kept: "
              f"{'yes' if r['order_ok'] else 'NO'}",
              f"- consumer group: read {r['group_read']:,} records; offset commits that "
              f"succeeded {r['ok_commits']}, failed from the outage on "
              f"{len(r['failed_commits'])}",
              "- first upload committed after PostgreSQL was back, per broker (ms): "
              + ", ".join(ms(x) for x in r["resumed_ms"]),
              "- peak WAL use per broker during and after the outage: "
              + ", ".join(fmt_size(int(x)) for x in r["wal_peak"]), ""]
    errs = ([f"producer (+{t - r['t_stop']:.1f} s): {e}" for t, e in r["producer_errors"]]
            + [f"consumer (+{t - r['t_stop']:.1f} s): {e}" for t, e in r["group_errors"]]
            + [f"offset commit (+{t - r['t_stop']:.1f} s): {e}" for t, e in r["failed_commits"]]
            + [f"delivery of #{q}: {e}" for _, q, e in r["failures"]])
    lines += [f"What the clients saw (first 30; +s: seconds after PostgreSQL began to stop; it "
              f"was back at +{r['t_up'] - r['t_stop']:.1f} s):", "", "```"]
    lines += errs[:30] or ["(nothing)"]
    lines += ["```", "", "Broker log lines about the outage (numbers folded to N):", "",
              "| broker | line | count |", "|---:|---|---:|"]
    lines += [f"| {b} | `{t}` | {n} |" for (b, t), n in logs] or ["| - | (none) | 0 |"]
    lines += ["", "## Settings", "",
              f"- three brokers (`weir serve`, {os.environ.get('WEIR_BIN')}) on one PostgreSQL 15 "
              f"(fsync=off) and one s3s-fs, all on this machine; WEIR_WAL_CAPACITY="
              f"{s.wal_capacity}, everything else default",
              f"- machine: {machine()}",
              f"- command: `{cmd}`", ""]
    return "\n".join(lines)


def main():
    if not os.environ.get("WEIR_BIN"):
        raise SystemExit("bench/pg_restart.py: set WEIR_BIN to the weir binary "
                         "(make bench-pg does)")
    s = Settings()
    import weir_harness  # the test cluster

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    shutil.rmtree(s.dir, ignore_errors=True)
    os.makedirs(s.dir)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    cmd = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ)
                   if k.startswith("BENCH_PG_") or k == "WEIR_BIN") + " bench/pg_restart.py"
    failed = True
    text = None
    clusters = []
    try:
        # The restart on brokers that upload every BENCH_PG_UPLOAD_INTERVAL_MS, so that the
        # outage hits uploads due and the figures show when they commit again.
        env = {"WEIR_WAL_CAPACITY": str(s.wal_capacity),
               "WEIR_STORAGE_UPLOAD_INTERVAL_MS": str(s.upload_interval_ms)}
        os.makedirs(os.path.join(s.dir, "restart"))
        c = weir_harness.Cluster("bench-pg-restart", os.path.join(s.dir, "restart"), env=env)
        clusters.append(c)
        c.launch()
        restart = restart_under_load(s, c)
        logs = outage_log(c)
        c.cleanup()
        # The commit rate on brokers with the default settings.
        os.makedirs(os.path.join(s.dir, "load"))
        c = weir_harness.Cluster("bench-pg-load", os.path.join(s.dir, "load"),
                             env={"WEIR_WAL_CAPACITY": str(s.wal_capacity)})
        clusters.append(c)
        c.launch()
        load = commits_under_load(s, c)
        text = report(s, load, restart, logs, stamp, cmd.strip())
        failed = False
    finally:
        try:
            for c in clusters:
                c.cleanup()
        finally:
            if text:
                os.makedirs(s.results, exist_ok=True)
                path = os.path.join(s.results, f"pg-{stamp}.md")
                with open(path, "w") as f:
                    f.write(text)
                print("\n" + text + f"\nwrote {path}")
            if s.keep or failed:
                print(f"kept data and logs in {s.dir}")
            else:
                shutil.rmtree(s.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
