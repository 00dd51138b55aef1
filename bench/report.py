#!/usr/bin/env python3
"""Builds the benchmark table from the `weir perf` JSON files of one run of bench/run.sh.

    report.py RUN_DIR OUT.md

RUN_DIR holds {kafka,weir}-{a,b,c,d}.json, machine.txt, commands.txt and maybe failures.txt.
Prints the table and writes it, with the machine description, to OUT.md.
"""

import json
import os
import sys

BROKERS = ("kafka", "weir")


def load(run_dir, broker, w):
    path = os.path.join(run_dir, f"{broker}-{w}.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def get(d, *path):
    for p in path:
        if d is None:
            return None
        d = d.get(p) if isinstance(d, dict) else None
    return d


def fmt(v, digits=2):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}f}"


def ratio(k, w):
    if k is None or w is None or isinstance(k, str) or isinstance(w, str) or k == 0:
        return "-"
    return f"{w / k:.2f}x"


def main():
    run_dir, out_md = sys.argv[1], sys.argv[2]
    data = {(b, w): load(run_dir, b, w) for b in BROKERS for w in "abcd"}
    rows = []  # (workload, figure, kafka, weir)

    def add(w, label, *path, scale=1.0):
        vals = []
        for b in BROKERS:
            v = get(data[(b, w)], *path)
            vals.append(v * scale if isinstance(v, (int, float)) else v)
        rows.append((w, label, vals[0], vals[1]))

    def rate_desc(w):
        d = data[("kafka", w)] or data[("weir", w)]
        if d is None:
            return ""
        args = d["args"]
        rate = d.get("target_rate_records_per_sec")
        size = args["record_size"]
        if rate is None:
            return f"{size // 1024} KiB records, as fast as possible"
        return f"{size // 1024} KiB records at {rate:,.0f}/s ({rate * size / 2**20:.1f} MiB/s)"

    pcts = [("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("p99.9", "p99.9"), ("max", "max")]
    titles = {}

    titles["a"] = f"(a) {rate_desc('a')}, acks=all, linger.ms=1"
    add("a", "produce MiB/s", "summary", "produce", "mib_per_sec")
    for label, key in pcts:
        add("a", f"produce latency {label} ms", "summary", "produce_latency_ms", key)
    for label, key in pcts:
        add("a", f"end-to-end latency {label} ms", "summary", "e2e_latency_ms", key)

    titles["b"] = f"(b) maximum throughput, {rate_desc('b')}, acks=all"
    add("b", "produce MiB/s", "summary", "produce", "mib_per_sec")
    add("b", "produce records/s", "summary", "produce", "records_per_sec")
    add("b", "consume MiB/s", "summary", "consume", "mib_per_sec")
    add("b", "produce latency p50 ms", "summary", "produce_latency_ms", "p50")
    add("b", "produce latency p99 ms", "summary", "produce_latency_ms", "p99")

    titles["c"] = f"(c) {rate_desc('c')}, acks=all, linger.ms=1"
    add("c", "produce MiB/s", "summary", "produce", "mib_per_sec")
    for label, key in pcts:
        add("c", f"produce latency {label} ms", "summary", "produce_latency_ms", key)
    for label, key in pcts:
        add("c", f"end-to-end latency {label} ms", "summary", "e2e_latency_ms", key)

    d_any = data[("kafka", "d")] or data[("weir", "d")]
    backlog_desc = ""
    if d_any:
        a = d_any["args"]
        backlog_desc = (
            f", backlog built for {a['backlog']:.0f} s at {a.get('throughput_mib') or 0:g} MiB/s"
        )
    titles["d"] = f"(d) catch-up: {rate_desc('d')}{backlog_desc}"
    add("d", "backlog GiB", "catch_up", "backlog_at_start_mib", scale=1 / 1024)
    add("d", "catch-up read MiB/s (from the first record on)", "catch_up", "read_mib_per_sec")
    add("d", "consumer start to first record s", "catch_up", "first_record_after_s")
    secs = []
    for b in BROKERS:
        c = get(data[(b, "d")], "catch_up")
        if c is None:
            secs.append(None)
        elif c["caught_up"]:
            secs.append(c["seconds"])
        else:
            secs.append(f"not caught up in {c['seconds']:.0f}")
    rows.append(("d", "catch-up time s", *secs))
    for label, key in pcts:
        add("d", f"produce latency {label} ms, during catch-up", "catch_up",
            "produce_latency_ms", key)
    add("d", "produce latency p99 ms, before (no consumer)", "catch_up",
        "produce_latency_before_ms", "p99")

    lines = ["| workload | figure | Kafka | Weir | Weir/Kafka |", "|---|---|---:|---:|---:|"]
    last = None
    for w, label, k, wv in rows:
        if all(data[(b, w)] is None for b in BROKERS):
            continue
        head = titles[w] if w != last else ""
        last = w
        lines.append(f"| {head} | {label} | {fmt(k)} | {fmt(wv)} | {ratio(k, wv)} |")
    table = "\n".join(lines)

    notes = [
        "Kafka acknowledges before its data reaches the disk: by default it does not fsync "
        "(`log.flush.interval.messages` is unset; durability comes from replication, and here "
        "there is one replica), so an acknowledged write sits in the page cache. Weir's WAL "
        "writes with O_DIRECT and syncs (fdatasync) before it acknowledges.",
        "Weir/Kafka: for latencies, below 1 is better for Weir; for throughput, above 1.",
        "Latencies: produce = send() to delivery report; end-to-end = timestamp in the record "
        "to receipt by the consumer. HDR histograms over the measured period (after warm-up).",
        "The load generator (librdkafka) runs on the same machine and shares its cores with "
        "the broker; each workload starts a fresh broker on an empty data dir.",
        "(a) and (c) run at half of Kafka's (b) rate (in records/s for (a), in MiB/s for (c)), "
        "unless BENCH_A_RATE / BENCH_C_RATE were set. 1 topic, one producer, one consumer "
        "group of one consumer; partitions as in the commands below.",
    ]

    machine = []
    try:
        with open(os.path.join(run_dir, "machine.txt")) as f:
            for line in f:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    machine.append(f"- {k}: {v}")
    except OSError:
        pass
    commands = []
    try:
        with open(os.path.join(run_dir, "commands.txt")) as f:
            for line in f:
                parts = line.split(maxsplit=2)
                if len(parts) == 3:
                    commands.append(f"- {parts[0]} ({parts[1]}): `weir perf --bootstrap-servers "
                                    f"HOST:PORT {parts[2].strip()}`")
    except OSError:
        pass
    failures = []
    try:
        with open(os.path.join(run_dir, "failures.txt")) as f:
            failures = [f"- {line.strip()}" for line in f if line.strip()]
    except OSError:
        pass

    name = os.path.basename(os.path.normpath(run_dir))
    md = [f"# Weir vs Apache Kafka 4.1: {name}", "", table, ""]
    md += [f"- {n}" for n in notes]
    if failures:
        md += ["", "## Failures", ""] + failures
    md += ["", "## Machine", ""] + machine
    md += ["", "## Commands", ""] + commands
    md += ["", f"JSON of every run: `bench/results/{name}/`.", ""]
    with open(out_md, "w") as f:
        f.write("\n".join(md))
    print()
    print(table)
    print()
    for n in notes[:1]:
        print(n)
    if failures:
        print("Failures:")
        print("\n".join(failures))


if __name__ == "__main__":
    main()
