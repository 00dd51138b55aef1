#!/usr/bin/env python3
"""Partition-move benchmark: how long a partition is unavailable while it moves between brokers.

    WEIR_BIN=target/release/weir bench/move.py        (or: make bench-move)

Starts a three-broker Weir cluster on this machine (one private PostgreSQL, one s3s-fs, three
`weir serve`: the `Cluster` of tests/harness/weir_harness). For each backlog size it creates
a topic of one partition, fills it with that many bytes (a bulk producer), then runs a steady
load on it: an idempotent producer (acks=all) at a fixed rate, with the time of every
acknowledgement, and a consumer reading from where the steady load starts, with the time every
record arrived. After a warm-up it moves the partition to the next broker (POST /v1/reassignments)
BENCH_MOVE_MOVES times, BENCH_MOVE_INTERVAL seconds apart, and reports for each move:

- produce gap: the longest time between consecutive acknowledgements in the move's window
  (from 1 s before the request to BENCH_MOVE_WINDOW seconds later): the produce unavailability;
- consumer gap: the same for records arriving at the consumer;
- the longest ack latency in the window (what the unluckiest record waited);
- new leader: from the request until GET /v1/partitions shows the target as leader, no move left;
- the broker's own timings from its log ("handed the partition over ms=", "leading the
  partition ms=");

and per size the baseline: the same gaps in a window of the same length just before the first
move (the noise floor), and the count check (every acknowledged record read back, none twice).
No assertions: it prints figures. Prints the table and writes it to
bench/results/move-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                       the weir binary (make bench-move: target/release/weir)
  BENCH_MOVE_SIZES [0,100MiB,1GiB]   backlog sizes (B, KiB, MiB, GiB)
  BENCH_MOVE_MOVES [3]           moves per size (each to the next broker: 1 -> 2 -> 3 -> 1)
  BENCH_MOVE_RATE [2000]         steady load, records/s
  BENCH_MOVE_RECORD_BYTES [1024] record size of the steady load
  BENCH_MOVE_FILL_RECORD_BYTES [16384]  record size of the bulk fill
  BENCH_MOVE_WARMUP [6]          seconds of steady load before the first move (>= WINDOW + 2)
  BENCH_MOVE_INTERVAL [5]        seconds between moves, and after the last one
  BENCH_MOVE_WINDOW [4]          seconds measured per move (from 1 s before the request)
  BENCH_MOVE_WAL_CAPACITY [1GiB] each broker's WEIR_WAL_CAPACITY
  BENCH_MOVE_LINGER_MS [2]       the steady producer's linger.ms
  BENCH_MOVE_PRODUCER_CONFIG, BENCH_MOVE_CONSUMER_CONFIG   extra librdkafka settings, "k=v k=v"
  BENCH_MOVE_DIR [target/bench-move]   brokers' data dirs, PostgreSQL, logs (emptied first)
  BENCH_MOVE_S3_DIR [/dev/shm/weir-bench-move-s3 if /dev/shm has room, else BENCH_MOVE_DIR/s3]
  BENCH_MOVE_RESULTS [bench/results]   where the report goes
  BENCH_MOVE_KEEP [0]            1: keep BENCH_MOVE_DIR and the s3s-fs root afterwards
  S3S_FS, WEIR_PG_BIN            as for the cluster tests (tests/harness/weir_harness)
"""

import datetime
import json
import multiprocessing as mp
import os
import platform
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

AUTOMQ = "AutoMQ published: 1500-2200 ms"
SEQ = struct.Struct(">Q")


# ------------------------------------------------------------------ settings
def parse_size(s):
    s = s.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMG]?)(?:i?B)?", s, re.IGNORECASE)
    if not m:
        raise SystemExit(f"bench/move.py: not a size: {s!r} (e.g. 0, 100MiB, 1GiB)")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def fmt_size(n):
    for unit, mult in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= mult:
            v = n / mult
            return f"{v:g} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} B" if n else "empty"


def kv_config(s):
    out = {}
    for item in (s or "").split():
        k, sep, v = item.partition("=")
        if not sep:
            raise SystemExit(f"bench/move.py: expected k=v, not {item!r}")
        out[k.strip()] = v.strip()
    return out


def env_float(name, default):
    return float(os.environ.get(name, default))


class Settings:
    def __init__(self):
        self.sizes = [parse_size(s) for s in
                      os.environ.get("BENCH_MOVE_SIZES", "0,100MiB,1GiB").split(",") if s.strip()]
        self.moves = int(os.environ.get("BENCH_MOVE_MOVES", "3"))
        self.rate = env_float("BENCH_MOVE_RATE", 2000)
        self.record_bytes = int(os.environ.get("BENCH_MOVE_RECORD_BYTES", "1024"))
        self.fill_record_bytes = int(os.environ.get("BENCH_MOVE_FILL_RECORD_BYTES", "16384"))
        self.window = env_float("BENCH_MOVE_WINDOW", 4)
        self.warmup = max(env_float("BENCH_MOVE_WARMUP", 6), self.window + 2)
        self.interval = max(env_float("BENCH_MOVE_INTERVAL", 5), self.window)
        self.wal_capacity = parse_size(os.environ.get("BENCH_MOVE_WAL_CAPACITY", "1GiB"))
        self.linger_ms = os.environ.get("BENCH_MOVE_LINGER_MS", "2")
        self.producer_config = kv_config(os.environ.get("BENCH_MOVE_PRODUCER_CONFIG"))
        self.consumer_config = kv_config(os.environ.get("BENCH_MOVE_CONSUMER_CONFIG"))
        self.dir = os.path.abspath(os.environ.get("BENCH_MOVE_DIR",
                                                  os.path.join(REPO, "target", "bench-move")))
        self.results = os.path.abspath(os.environ.get("BENCH_MOVE_RESULTS",
                                                      os.path.join(HERE, "results")))
        self.keep = os.environ.get("BENCH_MOVE_KEEP", "0") == "1"
        s3 = os.environ.get("BENCH_MOVE_S3_DIR")
        if not s3:
            need = sum(self.sizes) + (4 << 30)
            try:
                st = os.statvfs("/dev/shm")
                room = st.f_bavail * st.f_frsize
            except OSError:
                room = 0
            s3 = "/dev/shm/weir-bench-move-s3" if room >= need else os.path.join(self.dir, "s3")
        self.s3_dir = os.path.abspath(s3)
        if self.record_bytes < SEQ.size or self.fill_record_bytes < 1:
            raise SystemExit("bench/move.py: records must be at least 8 bytes")


# ------------------------------------------------------------- child processes
def producer_main(bootstrap, topic, rate, record_bytes, config, stop, out):
    """The steady load: `rate` records/s to partition 0 of `topic`, each carrying its sequence
    number. Sends back (acks, failures, errors): acks are (ack time, seq, offset, latency)."""
    from confluent_kafka import Producer

    errors = []
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "error_cb": lambda e: errors.append((time.monotonic(), str(e))), **config}
    p = Producer(conf)
    pad = b"\0" * (record_bytes - SEQ.size)
    acks, failures = [], []

    def delivered(t, seq):
        def cb(err, msg):
            if err is not None:
                failures.append((time.monotonic(), seq, str(err)))
                return
            lat = msg.latency()
            if lat is None:
                lat = time.monotonic() - t
            acks.append((t + lat, seq, msg.offset(), lat))
        return cb

    seq = 0
    t0 = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - t0) * rate)
        while seq < due:
            t = time.monotonic()
            try:
                p.produce(topic, value=SEQ.pack(seq) + pad, partition=0,
                          on_delivery=delivered(t, seq))
            except BufferError:
                break
            seq += 1
        p.poll(0.001)
    left = p.flush(120)
    out.put({"acks": acks, "failures": failures, "errors": errors, "sent": seq,
             "unflushed": left})


def consumer_main(bootstrap, topic, start, config, stop, end, out):
    """Reads partition 0 of `topic` from offset `start`; stops once `stop` is set and it has
    read up to `end` (or 60 s after `stop`). Sends back (arrival time, seq, offset) of each
    record."""
    from confluent_kafka import Consumer, TopicPartition

    errors = []
    conf = {"bootstrap.servers": bootstrap, "group.id": f"bench-move-{topic}",
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "error_cb": lambda e: errors.append((time.monotonic(), str(e))), **config}
    c = Consumer(conf)
    c.assign([TopicPartition(topic, 0, start)])
    recv = []
    last = start - 1
    stopped_at = None
    while True:
        # poll, not consume(n, timeout): consume waits for n records or the whole timeout, which
        # would time arrivals in steps of the timeout.
        m = c.poll(0.05)
        now = time.monotonic()
        if m is not None and m.error():
            errors.append((now, str(m.error())))
        elif m is not None:
            v = m.value()
            recv.append((now, SEQ.unpack_from(v)[0] if v and len(v) >= SEQ.size else -1,
                         m.offset()))
            last = max(last, m.offset())
        if stop.is_set():
            stopped_at = stopped_at or now
            if (end.value >= 0 and last >= end.value - 1) or now - stopped_at > 60:
                break
    c.close()
    out.put({"recv": recv, "errors": errors})


# ------------------------------------------------------------------ the cluster
def http(port, method, path, body=None, timeout=10):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wal_used(port):
    """The broker's weir_wal_used_bytes (WAL bytes not yet uploaded and trimmed), or None."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("weir_wal_used_bytes "):
                    return int(float(line.split()[1]))
    except (OSError, ValueError):
        pass
    return None


def partition_state(port, topic):
    for p in http(port, "GET", "/v1/partitions"):
        if p["topic"] == topic and p["partition"] == 0:
            return p
    return None


def wait_placed(cluster, topic, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = partition_state(cluster.brokers[0].aux_port, topic)
        if p and p["leader"] is not None and p["target"] is None:
            return p
        time.sleep(0.05)
    raise RuntimeError(f"{topic}/0 has no leader after {timeout}s:\n" + cluster.log_tail(30))


def create_topic(bootstrap, topic):
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    for f in a.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)]).values():
        f.result(30)


def fill(bootstrap, topic, size, record_bytes):
    """Bulk produce `size` bytes of values; returns (records, seconds, end offset)."""
    from confluent_kafka import Producer

    if size <= 0:
        return 0, 0.0, 0
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 20, "batch.size": 1 << 20, "message.max.bytes": 2 << 20})
    n = -(-size // record_bytes)
    value = b"f" * record_bytes
    state = {"failed": 0, "end": 0}

    def cb(err, msg):
        if err is not None:
            state["failed"] += 1
        else:
            state["end"] = max(state["end"], msg.offset() + 1)

    t0 = time.monotonic()
    i = 0
    while i < n:
        try:
            p.produce(topic, value=value, partition=0, on_delivery=cb)
            i += 1
        except BufferError:
            p.poll(0.05)
        else:
            if i % 1000 == 0:
                p.poll(0)
    left = p.flush(600)
    if left or state["failed"]:
        raise RuntimeError(f"fill of {topic}: {state['failed']} records failed, {left} unsent")
    return n, time.monotonic() - t0, state["end"]


def end_offset(bootstrap, topic):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-move-offsets"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        return high
    finally:
        c.close()


def move(cluster, topic, to, timeout=60):
    """Requests the move and polls /v1/partitions (on the requested broker) until `to` leads
    with no move pending at a higher leader epoch (the hand-over names the new leader before it
    has opened the partition; the epoch moves when it has). Returns (request time, ms until
    then, epoch)."""
    port = cluster.brokers[0].aux_port
    before = partition_state(port, topic)["leader_epoch"]
    t = time.monotonic()
    r = http(port, "POST", "/v1/reassignments",
             {"partitions": [{"topic": topic, "partition": 0, "broker": to}]})
    err = r["partitions"][0]["error"]
    if err:
        raise RuntimeError(f"move of {topic}/0 to {to} refused: {err}")
    while time.monotonic() - t < timeout:
        p = partition_state(port, topic)
        if p and p["leader"] == to and p["target"] is None and p["leader_epoch"] > before:
            return t, (time.monotonic() - t) * 1000, p["leader_epoch"]
        time.sleep(0.005)
    return t, None, None


# ------------------------------------------------------------------ analysis
def longest_gap(times, start, end):
    """The longest interval between consecutive times that overlaps [start, end] (an outage
    that runs past the window still counts whole); (ms, gap start) or (None, None)."""
    best, at = None, None
    prev = None
    for t in times:
        if prev is not None and prev < end and t > start:
            g = t - prev
            if best is None or g > best:
                best, at = g, prev
        prev = t
        if t > end:
            break
    return (None, None) if best is None else (best * 1000, at)


EVENTS = ("handed the partition over", "leading the partition",
          "closing the partition for a move failed", "handing the partition over failed",
          "opening the partition failed")


def broker_events(cluster, topic):
    """The brokers' log lines about `topic` (hand-overs, opens, failures), oldest first:
    (wall time, node id, message, fields, raw line)."""
    out = []
    for b in cluster.brokers:
        for line in b.log_lines():
            if f"topic={topic} " not in line + " ":
                continue
            what = next((e for e in EVENTS if e in line), None)
            if what is None:
                continue
            fields = dict(re.findall(r"(\w+)=(\S+)", line.split(what, 1)[1]))
            out.append((line.split(None, 1)[0], b.node_id, what, fields,
                        f"[broker {b.node_id}] {line.strip()}"))
    out.sort(key=lambda e: e[0])
    return out


def wall(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def fmt_mib(v):
    return "-" if v is None else f"{v / (1 << 20):.1f}"


def fmt_ms(v):
    return "-" if v is None else f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


# ------------------------------------------------------------------ one size
def run_size(s, cluster, size, index):
    bootstrap = cluster.bootstrap
    topic = f"move-{index}-{size}"
    print(f"\n== backlog {fmt_size(size)}: topic {topic}", flush=True)
    create_topic(bootstrap, topic)
    placed = wait_placed(cluster, topic)
    n, secs, _ = fill(bootstrap, topic, size, s.fill_record_bytes)
    if n:
        print(f"   filled {n:,} records of {s.fill_record_bytes} B in {secs:.1f}s "
              f"({size / (1 << 20) / max(secs, 1e-9):.0f} MiB/s)", flush=True)
    start = end_offset(bootstrap, topic)

    ctx = mp.get_context("spawn")
    stop_p, stop_c = ctx.Event(), ctx.Event()
    end = ctx.Value("q", -1)
    q_p, q_c = ctx.Queue(), ctx.Queue()
    pconf = {"linger.ms": s.linger_ms, **s.producer_config}
    procs = [ctx.Process(target=consumer_main,
                         args=(bootstrap, topic, start, s.consumer_config, stop_c, end, q_c)),
             ctx.Process(target=producer_main,
                         args=(bootstrap, topic, s.rate, s.record_bytes, pconf, stop_p, q_p))]
    try:
        for p in procs:
            p.start()
        t_load = time.monotonic()
        time.sleep(s.warmup)
        moves = []
        leader = placed["leader"]
        ids = sorted(b.node_id for b in cluster.brokers)
        for i in range(s.moves):
            to = ids[(ids.index(leader) + 1) % len(ids)]
            held = wal_used(next(b.aux_port for b in cluster.brokers if b.node_id == leader))
            t, ms, epoch = move(cluster, topic, to)
            moves.append({"n": i + 1, "from": leader, "to": to, "t": t, "leader_ms": ms,
                          "epoch": epoch, "wal_used": held})
            print(f"   move {i + 1}: broker {leader} -> {to} (its WAL holds "
                  f"{fmt_mib(held)} MiB): new leader shown after {fmt_ms(ms)} ms "
                  f"(epoch {epoch})", flush=True)
            if ms is not None:
                leader = to
            time.sleep(max(0.0, t + s.interval - time.monotonic()))
        stop_p.set()
        prod = q_p.get(timeout=300)
        acked_offsets = [a[2] for a in prod["acks"]]
        end.value = max(acked_offsets) + 1 if acked_offsets else start
        stop_c.set()
        cons = q_c.get(timeout=300)
    finally:
        stop_p.set()
        stop_c.set()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join()

    ack_times = sorted(a[0] for a in prod["acks"])
    recv_times = [r[0] for r in cons["recv"]]
    for m in moves:
        ws, we = m["t"] - 1.0, m["t"] - 1.0 + s.window
        m["produce_gap"], at = longest_gap(ack_times, ws, we)
        m["produce_gap_at"] = None if at is None else (at - m["t"]) * 1000
        m["consumer_gap"], at = longest_gap(recv_times, ws, we)
        m["consumer_gap_at"] = None if at is None else (at - m["t"]) * 1000
        lats = [a[3] for a in prod["acks"] if ws <= a[0] - a[3] <= we]
        m["max_latency"] = max(lats) * 1000 if lats else None
    be = moves[0]["t"] - 1.0 if moves else time.monotonic()
    bs = max(t_load + 1.0, be - s.window)
    base_p, _ = longest_gap(ack_times, bs, be)
    base_c, _ = longest_gap(recv_times, bs, be)
    base_lat = [a[3] for a in prod["acks"] if bs <= a[0] - a[3] <= be]

    # The brokers' own timings: hand-overs and opens of this topic in order; the first open
    # is the topic's placement, not a move.
    events = broker_events(cluster, topic)
    handed = [e for e in events if e[2] == "handed the partition over"]
    opened = [e for e in events if e[2] == "leading the partition"][1:]
    for i, m in enumerate(moves):
        h = handed[i] if i < len(handed) else None
        o = opened[i] if i < len(opened) else None
        m["handover_log_ms"] = int(h[3]["ms"]) if h else None
        m["flush_log_ms"] = int(h[3]["flush_ms"]) if h and "flush_ms" in h[3] else None
        m["open_log_ms"] = int(o[3]["ms"]) if o else None
        # From the moment the old leader began closing the partition (its hand-over line's time
        # less its ms) until the new leader's "leading" line: the time no broker took writes.
        m["dark_log_ms"] = None
        if h and o:
            try:
                stop_t = wall(h[0]) - int(h[3]["ms"]) / 1000
                m["dark_log_ms"] = (wall(o[0]) - stop_t) * 1000
            except (ValueError, KeyError):
                pass

    acked = {a[1] for a in prod["acks"]}
    seen = {}
    for _, seq, _ in cons["recv"]:
        seen[seq] = seen.get(seq, 0) + 1
    result = {
        "size": size, "topic": topic, "moves": moves,
        "fill_s": secs, "fill_records": n, "start_offset": start,
        "baseline_produce_gap": base_p, "baseline_consumer_gap": base_c,
        "baseline_max_latency": max(base_lat) * 1000 if base_lat else None,
        "sent": prod["sent"], "acked": len(acked), "failed": len(prod["failures"]),
        "failures": prod["failures"][:5], "unflushed": prod["unflushed"],
        "read": len(seen), "missing": len(acked - set(seen)),
        "duplicates": sum(c - 1 for c in seen.values() if c > 1),
        "producer_errors": prod["errors"][:10], "consumer_errors": cons["errors"][:10],
        "log": [e[4] for e in events],
    }
    for m in moves:
        print(f"   move {m['n']}: produce gap {fmt_ms(m['produce_gap'])} ms, consumer gap "
              f"{fmt_ms(m['consumer_gap'])} ms, max ack latency {fmt_ms(m['max_latency'])} ms "
              f"(broker log: hand-over {fmt_ms(m['handover_log_ms'])} ms, "
              f"open {fmt_ms(m['open_log_ms'])} ms, no leader {fmt_ms(m['dark_log_ms'])} ms)", flush=True)
    print(f"   baseline: produce gap {fmt_ms(base_p)} ms, consumer gap {fmt_ms(base_c)} ms; "
          f"acked {result['acked']:,}, read back {result['read']:,}, missing "
          f"{result['missing']}, duplicates {result['duplicates']}, failed {result['failed']}",
          flush=True)
    return result


# ------------------------------------------------------------------ report
def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / (1 << 20):.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem} RAM, {platform.platform()}, "
            f"load average {os.getloadavg()[0]:.2f} at the end; weir at {commit or '?'}")


def table(results):
    head = ("| backlog | move | brokers | produce gap ms | consumer gap ms | max ack latency ms "
            "| baseline produce gap ms | baseline consumer gap ms | new leader shown ms "
            "| pre-flush ms (log) | hand-over ms (log) | open ms (log) | no leader ms (log) "
            "| old leader's WAL MiB |")
    rows = [head, "|" + "---|" * 2 + "---|" + "---:|" * 11]
    for r in results:
        for m in r["moves"]:
            rows.append(
                f"| {fmt_size(r['size'])} | {m['n']} | {m['from']} -> {m['to']} "
                f"| {fmt_ms(m['produce_gap'])} | {fmt_ms(m['consumer_gap'])} "
                f"| {fmt_ms(m['max_latency'])} | {fmt_ms(r['baseline_produce_gap'])} "
                f"| {fmt_ms(r['baseline_consumer_gap'])} | {fmt_ms(m['leader_ms'])} "
                f"| {fmt_ms(m['flush_log_ms'])} "
                f"| {fmt_ms(m['handover_log_ms'])} | {fmt_ms(m['open_log_ms'])} "
                f"| {fmt_ms(m['dark_log_ms'])} | {fmt_mib(m['wal_used'])} |")
    return "\n".join(rows)


def report(s, results, stamp, cmd):
    lines = [f"# Partition moves: {stamp}", "",
             f"{AUTOMQ} (partition reassignment unavailability). Goal: under 300 ms per move "
             "whatever the partition's size.", "",
             table(results), "",
             "Produce gap: the longest time between consecutive acknowledgements in the move's "
             f"window (1 s before the request to {s.window - 1:g} s after it; a gap that runs "
             "past the window counts whole). Consumer gap: the same for records arriving at the "
             "consumer. Baseline: the same in a window of the same length just before the first "
             "move of that backlog (the noise floor). New leader shown: from the POST "
             "/v1/reassignments until GET /v1/partitions names the target as leader at a higher "
             "leader epoch. Pre-flush: the old leader uploading the partition's WAL data while "
             "it still takes writes (\"handed the partition over flush_ms=\"). Hand-over "
             "and open: the old and new leader's own log (\"handed the partition over ms=\", "
             "\"leading the partition ms=\"); no leader: from the old leader's start of closing "
             "(its hand-over line's time less its ms) to the new leader's \"leading\" line, "
             "the time no broker took writes (the rest of the produce gap is the client "
             "finding the new leader). Old leader's WAL: its weir_wal_used_bytes just before "
             "the request (WAL bytes not yet uploaded, of every partition it leads; closing the "
             "partition uploads them).", "",
             "## Every acknowledged record read back", "",
             "| backlog | sent | acked | read back | missing | read twice | failed deliveries |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {fmt_size(r['size'])} | {r['sent']:,} | {r['acked']:,} | "
                     f"{r['read']:,} | {r['missing']} | {r['duplicates']} | {r['failed']} |")
    lines += ["", "## Settings", "",
              f"- three brokers (`weir serve`, {os.environ.get('WEIR_BIN')}) on one PostgreSQL 15 and one "
              f"s3s-fs (root {s.s3_dir}), all on this machine; WEIR_WAL_CAPACITY="
              f"{s.wal_capacity}, WEIR_WAL_FORMAT=false, everything else default",
              f"- steady load: {s.rate:g} records/s of {s.record_bytes} B, confluent-kafka "
              f"(librdkafka) idempotent producer, acks=all, linger.ms={s.linger_ms}"
              + (f", {s.producer_config}" if s.producer_config else "")
              + "; one consumer (assign, librdkafka defaults"
              + (f", {s.consumer_config}" if s.consumer_config else "") + ") from the first "
              "offset of the steady load",
              f"- fill: {s.fill_record_bytes} B records, linger.ms=20, before the steady load",
              f"- {s.warmup:g} s of steady load before the first move, then {s.moves} moves "
              f"{s.interval:g} s apart (each to the next broker), then {s.interval:g} s more",
              f"- machine: {machine()}",
              f"- command: `{cmd}`", ""]
    for r in results:
        if r["fill_records"]:
            lines.append(f"Fill of {fmt_size(r['size'])}: {r['fill_records']:,} records in "
                         f"{r['fill_s']:.1f} s.")
    lines += ["", "## Broker log lines", ""]
    for r in results:
        lines += [f"{fmt_size(r['size'])} (topic {r['topic']}):", "", "```"]
        lines += r["log"] or ["(none)"]
        lines += ["```", ""]
        errs = r["producer_errors"] + r["consumer_errors"]
        if errs or r["failures"]:
            lines += ["Client errors (first ones):", "", "```"]
            lines += [f"producer: {e}" for _, e in r["producer_errors"]]
            lines += [f"consumer: {e}" for _, e in r["consumer_errors"]]
            lines += [f"failed delivery of #{q}: {e}" for _, q, e in r["failures"]]
            lines += ["```", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ main
def main():
    if not os.environ.get("WEIR_BIN"):
        raise SystemExit("bench/move.py: set WEIR_BIN to the weir binary (make bench-move does)")
    s = Settings()
    import weir_harness  # the test cluster

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)

    shutil.rmtree(s.dir, ignore_errors=True)
    shutil.rmtree(s.s3_dir, ignore_errors=True)
    os.makedirs(s.dir)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    cmd = " ".join(f"{k}={os.environ[k]}" for k in sorted(os.environ)
                   if k.startswith("BENCH_MOVE_") or k == "WEIR_BIN") + " bench/move.py"
    print(f"partition-move benchmark: sizes {', '.join(fmt_size(x) for x in s.sizes)}; "
          f"{s.moves} moves each; {s.rate:g} records/s of {s.record_bytes} B; "
          f"{os.environ['WEIR_BIN']}", flush=True)

    cluster = weir_harness.Cluster("bench-move", s.dir, env={"WEIR_WAL_CAPACITY": str(s.wal_capacity)})
    cluster.s3 = weir_harness.S3sFs(s.s3_dir)
    results = []
    failed = True
    try:
        cluster.launch()
        for i, size in enumerate(s.sizes):
            results.append(run_size(s, cluster, size, i))
        failed = False
    finally:
        try:
            cluster.cleanup()
        finally:
            if not (s.keep or failed):
                shutil.rmtree(s.s3_dir, ignore_errors=True)
        if results:
            text = report(s, results, stamp, cmd.strip())
            os.makedirs(s.results, exist_ok=True)
            path = os.path.join(s.results, f"move-{stamp}.md")
            with open(path, "w") as f:
                f.write(text)
            print("\n" + AUTOMQ + "\n\n" + table(results))
            print(f"\nwrote {path}")
        if s.keep or failed:
            print(f"kept data and logs in {s.dir} (s3s-fs root {s.s3_dir})")
        else:
            shutil.rmtree(s.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
