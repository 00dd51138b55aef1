#!/usr/bin/env python3
"""OpenMessaging Benchmark workloads against Weir and Kafka, side by side, scaled to this machine.

    WEIR_BIN=target/release/weir bench/omb.py        (or: make bench-omb; a section of make bench)

For each workload file (BENCH_OMB_WORKLOADS, OMB's YAML format; by default the two in
bench/workloads/) and each broker (BENCH_OMB_BROKERS, "kafka weir"): a fresh single broker
(Weir: `weir serve`, objects in its data directory, WEIR_WAL_CAPACITY 1 GiB; Kafka: the
harness's KRaft node), then `weir perf --workload FILE --workload-scale S --workload-time-scale T`
(librdkafka clients on the same two cores), and the broker's CPU over the measured run. Prints
and writes OMB's figures: publish rate, publish latency p50 to p99.99, end-to-end latency, the
catch-up's time, and the broker CPU seconds per GiB moved (produced + consumed).

Environment: WEIR_BIN, BENCH_OMB_WORKLOADS, BENCH_OMB_BROKERS ["kafka weir"], BENCH_OMB_SCALE
[0.1] (times the rate and the backlog), BENCH_OMB_TIME_SCALE [0.1] (times warm-up and test),
BENCH_OMB_OUT (the report; by default bench/results/omb-DATE.md), BENCH_OMB_APPEND_TO (a report
to append the section to: make bench's).
"""

import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402  (the harness: Broker)
import partitions  # noqa: E402  (proc_sample)

WORKLOADS = os.environ.get("BENCH_OMB_WORKLOADS", "").split() or sorted(
    glob.glob(os.path.join(HERE, "workloads", "*.yaml")))
BROKERS = os.environ.get("BENCH_OMB_BROKERS", "kafka weir").split()
SCALE = float(os.environ.get("BENCH_OMB_SCALE", "0.1"))
TIME_SCALE = float(os.environ.get("BENCH_OMB_TIME_SCALE", "0.1"))


def run(weir, kind, workload):
    with weir_harness.work_dir(f"weir-omb-{kind}-") as root:
        b = weir_harness.Broker(kind, root, env={"WEIR_WAL_CAPACITY": str(1 << 30)})
        b.kind = kind
        b.start()
        out = os.path.join(root, "perf.json")
        try:
            c0, t0 = partitions.proc_sample(b.pid)[0], time.monotonic()
            subprocess.run([weir, "perf", "--bootstrap-servers", b.bootstrap,
                            "--workload", workload, "--workload-scale", str(SCALE),
                            "--workload-time-scale", str(TIME_SCALE), "--report-interval", "30s",
                            "--quiet", "--output", out], check=True, timeout=3600)
            cpu, wall = partitions.proc_sample(b.pid)[0] - c0, time.monotonic() - t0
            with open(out) as f:
                d = json.load(f)
            moved = sum(p["produce"]["bytes"] + p["consume"]["bytes"] for p in d["phases"])
            d["broker_cpu_s_per_gib"] = cpu / (moved / (1 << 30)) if moved else float("nan")
            d["wall_s"] = wall
            return d
        finally:
            b.cleanup()


def fmt(s, keys=("p50", "p99", "p99.9", "p99.99", "max")):
    return " / ".join(f"{s[k]:.1f}" for k in keys) if s else "-"


def row(kind, d):
    s = d["summary"]
    c = d.get("catch_up")
    caught = f"{c['seconds']:.1f} s" if c and c["caught_up"] else ("not in time" if c else "")
    return (f"| {kind} | {s['produce']['records_per_sec']:,.0f} | {s['produce']['mib_per_sec']:.1f} | "
            f"{fmt(s.get('produce_latency_ms'))} | {fmt(s.get('e2e_latency_ms'))} | {caught} | "
            f"{d['broker_cpu_s_per_gib']:.2f} |")


def main():
    weir = os.environ.get("WEIR_BIN")
    if not weir:
        raise SystemExit("bench/omb.py: set WEIR_BIN to the weir binary")
    stamp = time.strftime("%Y-%m-%d-%H%M")
    out = os.environ.get("BENCH_OMB_OUT", os.path.join(HERE, "results", f"omb-{stamp}.md"))
    lines = [f"## OpenMessaging Benchmark workloads ({stamp})", "",
             f"`BENCH_OMB_SCALE={SCALE:g} BENCH_OMB_TIME_SCALE={TIME_SCALE:g} bench/omb.py`: each "
             "workload file run by `weir perf --workload` (librdkafka clients on the same two "
             "cores) against a fresh single broker of each kind; rates and backlog times "
             f"{SCALE:g}, warm-up and test times {TIME_SCALE:g}. Latencies in ms, "
             "p50 / p99 / p99.9 / p99.99 / max; broker CPU per GiB produced + consumed.", ""]
    for workload in WORKLOADS:
        lines += [f"### {os.path.basename(workload)}", "",
                  "| broker | publish msg/s | MiB/s | publish latency | end-to-end latency | "
                  "caught up in | broker CPU s/GiB |", "|---|---:|---:|---|---|---|---:|"]
        for kind in BROKERS:
            d = run(weir, kind, workload)
            r = row(kind, d)
            print(r, flush=True)
            lines.append(r)
        lines.append("")
    text = "\n".join(lines)
    with open(out, "w") as f:
        f.write(text + "\n")
    if os.environ.get("BENCH_OMB_APPEND_TO"):
        with open(os.environ["BENCH_OMB_APPEND_TO"], "a") as f:
            f.write("\n" + text + "\n")
    print(f"report: {out}")


if __name__ == "__main__":
    main()
