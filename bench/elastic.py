#!/usr/bin/env python3
"""Elasticity benchmark, modelled on AutoMQ's: one broker under steady load on a topic of many
partitions, then two more brokers join; how long until every broker carries its share.

    WEIR_BIN=target/release/weir bench/elastic.py        (or: make bench-elastic)

Starts a one-broker Weir cluster on this machine (private PostgreSQL and s3s-fs: the `Cluster`
of tests/harness/weir_harness), runs `weir perf` on a topic of BENCH_EL_PARTITIONS
partitions (one idempotent producer at BENCH_EL_MIB MiB/s of 1 KiB records, acks=all, and one
consumer group), and after BENCH_EL_BEFORE seconds of measured load starts two more brokers.
Every 0.5 s it reads each broker's `weir_produce_bytes_total` and `weir_fetch_bytes_total` (its
bytes in and out, as rates over the last 5 s) and the partitions' leaders. It prints:

- from the join until every broker's bytes in and out are first within 10 % of the mean, and
  until they stay so (the goal: under 30 s), and until the balancer's last move: the load
  itself fluctuates (librdkafka's sticky partitioner picks a partition per batch), so "for
  good" also measures the noise of 5-second windows, which no move can fix;
- moves: partition moves from the join to the end (leader changes seen);
- produce latency p99 before the join, during the rebalance (join to balanced) and after, from
  `weir perf`'s per-second timeline (the median and the worst of the per-second p99s);
- the drain of one broker under load (`weir drain`, 20 s before the end), timed;

beside AutoMQ's published figures (its balancer took 90 s, scaling out 4 minutes in all). No
assertions: it prints figures, and writes bench/results/elastic-YYYY-MM-DD-HHMM.md.

Environment (defaults in brackets):
  WEIR_BIN                       the weir binary (make bench-elastic: target/release/weir)
  BENCH_EL_PARTITIONS [100]      partitions of the topic
  BENCH_EL_MIB [6]               produce MiB/s (1 KiB records; consumed once too)
  BENCH_EL_BEFORE [20]           seconds of measured load before the brokers join
  BENCH_EL_AFTER [70]            seconds after the join; 20 s before the end the last broker that
                                 joined is drained under load (`weir drain`), and timed
  BENCH_EL_INTERVAL_MS [2000]    the brokers' balancer.interval_ms
  BENCH_EL_DIR [target/bench-elastic]   data dirs, PostgreSQL, logs (emptied first)
  BENCH_EL_RESULTS [bench/results]
"""

import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402  (the harness: Cluster)

PARTITIONS = int(os.environ.get("BENCH_EL_PARTITIONS", "100"))
MIB = float(os.environ.get("BENCH_EL_MIB", "6"))
BEFORE = int(os.environ.get("BENCH_EL_BEFORE", "20"))
AFTER = int(os.environ.get("BENCH_EL_AFTER", "70"))
INTERVAL_MS = os.environ.get("BENCH_EL_INTERVAL_MS", "2000")
WORK = os.path.abspath(os.environ.get("BENCH_EL_DIR", os.path.join(REPO, "target", "bench-elastic")))
RESULTS = os.path.abspath(os.environ.get("BENCH_EL_RESULTS", os.path.join(REPO, "bench", "results")))
WARMUP = 10
RESULTS_SAMPLES = WORK
TOLERANCE = 0.10
AUTOMQ = ("AutoMQ (white paper, 0 to 1 GiB/s by adding brokers): its balancer took 90 s, "
          "scaling out 4 minutes in all.")


IN, OUT = "weir_produce_bytes_total", "weir_fetch_bytes_total"
WINDOW = 5.0  # seconds over which a broker's bytes in and out are measured


def metrics(port):
    out = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            for name in (IN, OUT):
                if line.startswith(name + " "):
                    out[name] = float(line.split()[-1])
    return out


def rates(history, t):
    """Each broker's bytes in and out per second over the WINDOW before `t`, from the counter
    samples in `history` ([(t, [counters per broker])]); None before a full window."""
    old = [h for h in history if h[0] <= t - WINDOW]
    if not old:
        return None
    t0, c0 = old[-1]
    t1, c1 = [h for h in history if h[0] <= t][-1]
    out = []
    for i, now in enumerate(c1):
        before = c0[i] if i < len(c0) else {}
        out.append({k: (now.get(k, 0.0) - before.get(k, 0.0)) / (t1 - t0) for k in (IN, OUT)})
    return out


def leaders(cluster, topic):
    for b in cluster.brokers:
        try:
            status, body = b.admin("GET", "/v1/partitions", timeout=2)
        except OSError:
            continue
        if status == 200:
            return {p["partition"]: p["leader"] for p in body if p["topic"] == topic}
    return {}


def within(loads):
    for key in (IN, OUT):
        xs = [l.get(key, 0.0) for l in loads]
        mean = sum(xs) / len(xs)
        if mean <= 0 or any(abs(x - mean) / mean > TOLERANCE for x in xs):
            return False
    return True


def p99s(timeline, start, end):
    # The timeline's seconds count from the start of the warm-up.
    xs = [t["produce_latency_ms"]["p99"] for t in timeline
          if t.get("produce_latency_ms") and start <= t["end_s"] - WARMUP < end]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.1f} / {max(xs):.1f}"


def main():
    if os.path.exists(WORK):
        shutil.rmtree(WORK)
    os.makedirs(WORK)
    env = {"WEIR_WAL_CAPACITY": str(1 << 30), "WEIR_BALANCER_INTERVAL_MS": INTERVAL_MS}
    cluster = weir_harness.Cluster("bench-elastic", WORK, size=1, env=env)
    cluster.launch()
    topic = "elastic-0"
    out = os.path.join(WORK, "perf.json")
    duration = BEFORE + AFTER
    cmd = [os.environ["WEIR_BIN"], "perf", "--bootstrap-servers", cluster.bootstrap,
           "--topic-prefix", "elastic", "--partitions", str(PARTITIONS), "--producers", "1",
           "--groups", "1", "--consumers", "1", "--record-size", "1024",
           "--throughput-mib", str(MIB), "--warmup", f"{WARMUP}s", "--duration", f"{duration}s",
           "--quiet", "--output", out, "--producer-config", "enable.idempotence=true",
           "--producer-config", "linger.ms=5"]
    print("bench: " + " ".join(cmd), flush=True)
    perf = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        time.sleep(WARMUP + BEFORE)
        joined = time.monotonic() - t0 - WARMUP
        cluster.add_broker()
        cluster.add_broker()
        samples = []
        history = []
        last_move = None
        before = leaders(cluster, topic)
        moves = 0
        last = dict(before)
        drained = None
        drain_at = joined + AFTER - 20
        while perf.poll() is None and time.monotonic() - t0 < WARMUP + duration:
            if drained is None and time.monotonic() - t0 - WARMUP >= drain_at:
                # Scale in under load: drain the last broker that joined.
                d0 = time.monotonic()
                r = subprocess.run([os.environ["WEIR_BIN"], "drain", "3", "--admin",
                                    f"127.0.0.1:{cluster.brokers[0].aux_port}"],
                                   capture_output=True, text=True, timeout=120)
                drained = (time.monotonic() - d0, r.returncode, r.stdout.strip()[-200:])
            t = time.monotonic() - t0 - WARMUP
            try:
                history.append((t, [metrics(b.aux_port) for b in cluster.brokers]))
            except OSError:
                pass
            loads = rates(history, t)
            now = leaders(cluster, topic)
            changed = sum(1 for p, l in now.items() if last.get(p) not in (None, l))
            if changed and drained is None:
                last_move = t
            moves += changed
            last = now or last
            samples.append((t, loads is not None and within(loads), loads))
            time.sleep(0.5)
        perf.wait(120)
    finally:
        if perf.poll() is None:
            perf.kill()
        cluster.cleanup()
    with open(os.path.join(RESULTS_SAMPLES, "elastic-samples.json"), "w") as f:
        json.dump({"joined": joined, "drain_at": drain_at, "samples": samples}, f)
    with open(out) as f:
        timeline = json.load(f).get("timeline", [])
    # Balanced for good before the drain (the drain unbalances it on purpose).
    balanced_at = None
    for t, ok, _ in samples:
        if t >= drain_at:
            break
        if ok and balanced_at is None:
            balanced_at = t
        elif not ok:
            balanced_at = None
    end = balanced_at if balanced_at is not None else drain_at
    first = next((t for t, ok, _ in samples if ok and t >= joined), None)
    # How far brokers stay from the mean once the balancer is done (5-second windows): the
    # load's own noise, which no move can fix.
    devs = sorted(
        max(abs(l[k] - sum(x[k] for x in loads) / len(loads)) / (sum(x[k] for x in loads) / len(loads))
            for l in loads)
        for t, _, loads in samples
        if loads and last_move is not None and last_move + WINDOW <= t < drain_at
        for k in (IN, OUT) if sum(x[k] for x in loads) > 0)
    after = [loads for t, _, loads in samples
             if loads and last_move is not None and last_move + WINDOW <= t < drain_at]
    systematic = "-"
    if after:
        worst = 0.0
        for k in (IN, OUT):
            avg = [sum(r[i][k] for r in after) / len(after) for i in range(len(after[0]))]
            m = sum(avg) / len(avg)
            if m > 0:
                worst = max(worst, max(abs(a - m) / m for a in avg))
        systematic = f"{worst * 100:.1f} %"
    noise = (f"{devs[len(devs) // 2] * 100:.1f} / {devs[int(len(devs) * 0.9)] * 100:.1f} / "
             f"{devs[-1] * 100:.1f} %; within 10 % in "
             f"{100 * sum(1 for d in devs if d <= TOLERANCE) / len(devs):.0f} % of windows"
             if devs else "-")
    final = samples[-1][2] if samples and samples[-1][2] else []
    counts = {}
    for l in last.values():
        counts[l] = counts.get(l, 0) + 1
    rows = [
        ("first within 10 % of the mean, in and out (from the join)",
         f"{first - joined:.1f} s" if first is not None else "never"),
        ("last partition move before the drain (from the join)",
         f"{last_move - joined:.1f} s" if last_move is not None else "none"),
        ("within 10 % for good, until the drain (from the join)",
         f"{balanced_at - joined:.1f} s" if balanced_at is not None else "no"),
        ("after the last move: each broker's average bytes in and out, furthest from the mean",
         systematic),
        ("after the last move, in 5-second windows: largest deviation from the mean, "
         "median / p90 / max (the load's own noise)", noise),
        ("partition moves (the drain's included)", str(moves)),
        ("partitions per broker at the end", json.dumps(dict(sorted(counts.items())))),
        ("bytes in per broker at the end (B/s, last 5 s)",
         ", ".join(f"{l.get(IN, 0):.0f}" for l in final)),
        ("produce p99 ms before the join (median / worst second)", p99s(timeline, 0, joined)),
        ("produce p99 ms during the rebalance", p99s(timeline, joined, end)),
        ("produce p99 ms after, until the drain", p99s(timeline, end, drain_at)),
        ("drain of broker 3 under load (weir drain)",
         f"{drained[0]:.1f} s (exit {drained[1]})" if drained else "not run"),
        ("produce p99 ms during and after the drain", p99s(timeline, drain_at, BEFORE + AFTER)),
    ]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    lines = [f"# Elasticity: 1 broker, then 2 more join ({stamp})", "",
             f"{PARTITIONS} partitions, {MIB:g} MiB/s of 1 KiB records produced and consumed "
             f"(weir perf, idempotent, acks=all, linger.ms=5), balancer.interval_ms "
             f"{INTERVAL_MS}; brokers join {BEFORE} s into the measured load.", "",
             "| figure | Weir |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    lines += ["", AUTOMQ, "", "Reproduce: `make bench-elastic` (settings: BENCH_EL_*, "
              "bench/elastic.py)."]
    text = "\n".join(lines) + "\n"
    print("\n" + text)
    os.makedirs(RESULTS, exist_ok=True)
    path = os.path.join(RESULTS, f"elastic-{stamp}.md")
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
