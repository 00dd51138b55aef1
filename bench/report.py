#!/usr/bin/env python3
"""Builds the benchmark table from the `weir perf` JSON files of one run of bench/run.sh.

    report.py RUN_DIR OUT.md

RUN_DIR holds {kafka,weir,weir-s3}-{a,b,c,d}.json, machine.txt, commands.txt and maybe
failures.txt; for Weir, {weir,weir-s3}-W.metrics (its /metrics at the end of the workload); and
maybe weir-s3-a.cost.txt and cost-automq.txt (`weir cost` outputs). Prints the tables and writes
them, with the machine description, to OUT.md.
"""

import json
import os
import re
import sys

BROKERS = ("kafka", "weir", "weir-s3")
WEIRS = ("weir", "weir-s3")
NAMES = {"kafka": "Kafka", "weir": "Weir", "weir-s3": "Weir (S3)"}
# AutoMQ's published monthly bills for its comparison workload (1 GiB/s in and out, 3 days):
# AutoMQ open source (S3 WAL), AutoMQ with an FSx WAL, and Apache Kafka.
AUTOMQ_S3_WAL = 12_899
AUTOMQ_FSX = 17_850
AUTOMQ_KAFKA = 226_700


def load(run_dir, broker, w):
    path = os.path.join(run_dir, f"{broker}-{w}.json")
    try:
        with open(path) as f:
            d = json.load(f)
    except (OSError, ValueError):
        return None
    proc = load_proc(os.path.join(run_dir, f"{broker}-{w}.proc"), d)
    if proc:
        d["proc"] = proc
    return d


def load_proc(path, d):
    """The broker's CPU and memory over a run, from its .proc samples ("seconds ticks rss-KiB",
    one a second, the first before the load started) and the run's timeline (bytes produced and
    consumed): CPU seconds per GiB moved, idle and largest resident memory."""
    try:
        with open(path) as f:
            samples = [tuple(float(x) for x in line.split()) for line in f if len(line.split()) == 3]
    except (OSError, ValueError):
        return None
    if len(samples) < 2:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    moved = sum(t["produce"]["bytes"] + t["consume"]["bytes"] for t in d.get("timeline", []))
    cpu = (samples[-1][1] - samples[0][1]) / tick
    wall = samples[-1][0] - samples[0][0]
    return {
        "cpu_s_per_gib": cpu / (moved / 2**30) if moved else None,
        "cpu_cores": cpu / wall if wall > 0 else None,
        "rss_idle_mib": samples[0][2] / 1024,
        "rss_max_mib": max(s[2] for s in samples) / 1024,
    }


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


def read_text(run_dir, name):
    try:
        with open(os.path.join(run_dir, name)) as f:
            return f.read()
    except OSError:
        return None


def parse_metrics(text):
    """Prometheus text -> {name or name{labels}: value}."""
    m = {}
    for line in (text or "").splitlines():
        if not line or line.startswith("#"):
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2:
            continue
        try:
            m[parts[0]] = float(parts[1])
        except ValueError:
            pass
    return m


def object_row(broker, w, m):
    """The "Object storage requests" row of one run, from its end-of-run /metrics."""
    gib = 2**30
    c = lambda k: m.get(k)  # noqa: E731
    produced, fetched = c("weir_produce_bytes_total"), c("weir_fetch_bytes_total")
    put, parts = c('weir_object_requests_total{kind="put"}'), c(
        'weir_object_requests_total{kind="multipart_part"}')
    # Counted since the meter exists; 0 for builds without it.
    starts = c('weir_object_requests_total{kind="multipart_start"}') or 0
    gets = c('weir_object_requests_total{kind="get"}')
    obj_put, obj_get = c('weir_object_bytes_total{kind="put"}'), c(
        'weir_object_bytes_total{kind="get"}')
    errors = c("weir_object_errors_total")
    background = c("weir_background_get_bytes_total")
    delivered = c("weir_object_read_bytes_total")
    consumers = obj_get - background if obj_get is not None and background is not None else None
    puts = put + parts + starts if put is not None and parts is not None else None
    count = lambda n: None if n is None else f"{int(n):,}"  # noqa: E731

    def per(n, b):
        if n is None or not b:
            return None
        return n / (b / gib)

    def div(a, b):
        return a / b if a is not None and b else None

    return [
        NAMES[broker], w,
        fmt(div(produced, gib)), fmt(count(puts)), fmt(per(puts, produced)),
        fmt(div(fetched, gib)), fmt(count(gets)), fmt(per(gets, fetched)),
        fmt(div(obj_get, gib)), fmt(per(gets, obj_get)),
        fmt(div(background, gib)), fmt(div(consumers, delivered)),
        fmt(div(obj_put, produced)), fmt(count(errors)),
    ]


def cost_totals(text):
    """The two "total per month" figures of `weir cost` (Weir's, then Kafka's), or None."""
    totals = re.findall(r"total per month\s+\$([0-9,.]+)", text or "")
    if len(totals) != 2:
        return None
    return [float(t.replace(",", "")) for t in totals]


def main():
    run_dir, out_md = sys.argv[1], sys.argv[2]
    data = {(b, w): load(run_dir, b, w) for b in BROKERS for w in "abpcd"}
    rows = []  # (workload, figure, kafka, weir)

    def add(w, label, *path, scale=1.0):
        vals = []
        for b in BROKERS:
            v = get(data[(b, w)], *path)
            vals.append(v * scale if isinstance(v, (int, float)) else v)
        rows.append((w, label, *vals))

    def rate_desc(w):
        d = data[("kafka", w)] or data[("weir", w)] or data[("weir-s3", w)]
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

    titles["p"] = (f"(p) maximum produce throughput, producer only, {rate_desc('p')}, acks=all, "
                   "linger.ms=1")
    add("p", "produce MiB/s", "summary", "produce", "mib_per_sec")
    add("p", "produce records/s", "summary", "produce", "records_per_sec")
    add("p", "produce latency p50 ms", "summary", "produce_latency_ms", "p50")
    add("p", "produce latency p99 ms", "summary", "produce_latency_ms", "p99")

    titles["c"] = f"(c) {rate_desc('c')}, acks=all, linger.ms=1"
    add("c", "produce MiB/s", "summary", "produce", "mib_per_sec")
    for label, key in pcts:
        add("c", f"produce latency {label} ms", "summary", "produce_latency_ms", key)
    for label, key in pcts:
        add("c", f"end-to-end latency {label} ms", "summary", "e2e_latency_ms", key)

    d_any = data[("kafka", "d")] or data[("weir", "d")] or data[("weir-s3", "d")]
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

    for w in "abpcd":
        add(w, "broker CPU s per GiB produced + consumed", "proc", "cpu_s_per_gib")
        add(w, "broker CPU, cores (average over the run)", "proc", "cpu_cores")
        add(w, "broker resident memory MiB, idle (before the load)", "proc", "rss_idle_mib")
        add(w, "broker resident memory MiB, largest", "proc", "rss_max_mib")
    rows.sort(key=lambda r: "abpcd".index(r[0]) if r[0] in "abpcd" else 9)

    # Weir (S3)'s columns only when it ran (earlier runs' tables stay as they were).
    s3 = any(data[("weir-s3", w)] is not None for w in "abpcd")
    if s3:
        lines = ["| workload | figure | Kafka | Weir | Weir/Kafka | Weir (S3) | Weir (S3)/Kafka |",
                 "|---|---|---:|---:|---:|---:|---:|"]
    else:
        lines = ["| workload | figure | Kafka | Weir | Weir/Kafka |", "|---|---|---:|---:|---:|"]
    last = None
    for w, label, k, wv, sv in rows:
        if all(data[(b, w)] is None for b in BROKERS):
            continue
        head = titles[w] if w != last else ""
        last = w
        line = f"| {head} | {label} | {fmt(k)} | {fmt(wv)} | {ratio(k, wv)} |"
        if s3:
            line += f" {fmt(sv)} | {ratio(k, sv)} |"
        lines.append(line)
    table = "\n".join(lines)

    obj_lines = []
    for b in WEIRS:
        for w in "bpacd":
            text = read_text(run_dir, f"{b}-{w}.metrics")
            if text is None:
                continue
            if not obj_lines:
                obj_lines = [
                    "| broker | workload | GiB produced | PUTs | PUTs per GiB produced "
                    "| GiB fetched | GETs | GETs per GiB fetched | GiB read from objects "
                    "| GETs per GiB read from objects | of which compaction GiB "
                    "| bytes read per byte delivered from objects "
                    "| object bytes written / produced | request errors |",
                    "|---|---|" + "---:|" * 12,
                ]
            obj_lines.append("| " + " | ".join(object_row(b, w, parse_metrics(text))) + " |")
    obj_table = "\n".join(obj_lines)

    notes = [
        "Kafka acknowledges before its data reaches the disk: by default it does not fsync "
        "(`log.flush.interval.messages` is unset; durability comes from replication, and here "
        "there is one replica), so an acknowledged write sits in the page cache. Weir's WAL "
        "writes with O_DIRECT and syncs (fdatasync) before it acknowledges.",
        "Weir/Kafka: for latencies, below 1 is better for Weir; for throughput, above 1.",
        "Latencies: produce = send() to delivery report; end-to-end = timestamp in the record "
        "to receipt by the consumer. HDR histograms over the measured period (after warm-up).",
        ("The load generator (librdkafka) runs on the same machine, on cores of its own: each "
         "broker runs on the cores named under Machine (cpus) and nothing else runs there, so "
         "Kafka and Weir have equal hardware; each workload starts a fresh broker on an empty "
         "data dir." if os.environ.get("BENCH_PIN") == "1" else
         "The load generator (librdkafka) runs on the same machine and shares its cores with "
         "the broker; each workload starts a fresh broker on an empty data dir."),
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

    s3_line = next((m for m in machine if m.startswith("- s3: ")), "")
    root = re.search(r"root (\S+) \((\w+)\)", s3_line)
    if s3:
        where = "its root "
        if root and root.group(2) == "tmpfs":
            where += (f"was {root.group(1)}, in memory (tmpfs): in production S3 is across the "
                      "network and does not share the broker's disk, so here it does not share "
                      "the WAL's disk either")
        elif root:
            where += (f"was {root.group(1)} ({root.group(2)}), on a disk the WAL may share "
                      "(/dev/shm had less than 16 GiB free, or BENCH_S3_DIR said so); in "
                      "production S3 is across the network and does not share the broker's disk")
        else:
            where += "is listed under Machine"
        notes.append(
            "Weir (S3): `weir serve --object-store-url s3://...` on s3s-fs, a real S3-protocol "
            f"server on this machine, sharing its cores; {where}. Its requests are loopback "
            "HTTP, without the round-trip time of a network. It runs the workloads of "
            "BENCH_S3_WORKLOADS only (\"-\" for the others)."
        )

    obj_notes = [
        "From Weir's /metrics at the end of each workload: counters since the broker started "
        "(warm-up, backlog and measured period), read before the shutdown, so data still only "
        "in the WAL (up to one upload's worth: by default 128 MiB or 30 s) is not yet in \"object bytes "
        "written\".",
        "PUTs = `weir_object_requests_total` of kind put (whole objects and completed multipart "
        "uploads) + multipart_part + multipart_start (the CreateMultipartUpload that starts a "
        "multipart object, also billed as a PUT); GETs = kind get (ranged GETs); GiB produced / fetched = "
        "`weir_produce_bytes_total` / `weir_fetch_bytes_total` (fetches of all consumers, from "
        "the log cache or from objects); GiB read from objects = `weir_object_bytes_total"
        "{kind=\"get\"}`; of which compaction = `weir_background_get_bytes_total` (compaction "
        "and the cleaner, which do not fill the block cache); bytes read per byte delivered = "
        "(GiB read from objects - compaction's) / `weir_object_read_bytes_total` (the payload "
        "consumers got from objects, through the block cache and the read-ahead): above 1 when "
        "blocks are fetched and not read (evicted first, or read ahead past the end of a read), "
        "or fetched twice; object bytes written / produced = `weir_object_bytes_total"
        "{kind=\"put\"}` / `weir_produce_bytes_total` (uploads and compaction's rewrites).",
        "Weir writes its objects to a local directory (file://), Weir (S3) to s3s-fs; the "
        "requests are the same kinds.",
    ]

    cost_md = []
    live = read_text(run_dir, "weir-s3-a.cost.txt")
    automq = read_text(run_dir, "cost-automq.txt")
    if live is not None or automq is not None:
        cost_md = ["", "## Cost", ""]
    if live is not None:
        cmd = "weir cost --metrics-url http://127.0.0.1:ADMIN/metrics --window ..."
        if live.startswith("$ "):
            first, _, live = live.partition("\n")
            cmd = first[2:].strip()
        cost_md += [
            f"`{cmd.split('   #')[0].strip()}` during the measured period of Weir (S3)'s (a): "
            "the monthly bill at the rates of produce, consume and object requests it measured "
            "between two scrapes of /metrics, on AWS list prices.",
            "",
            "```",
            live.rstrip("\n"),
            "```",
            "",
        ]
    if automq is not None:
        cost_md += [
            "`weir cost --write-mib-s 1024 --read-mib-s 1024 --retention-days 3`: AutoMQ's "
            "comparison workload (1 GiB/s in, 1 GiB/s out, 3 days retention), from its "
            "article comparing AutoMQ on FSx and S3 with Apache Kafka.",
            "",
            "```",
            automq.rstrip("\n"),
            "```",
            "",
        ]
        totals = cost_totals(automq)
        cost_md += [
            "| per month | `weir cost` | AutoMQ's published figure |",
            "|---|---:|---:|",
            f"| Weir / AutoMQ open source (S3 WAL) | "
            f"{'$' + format(totals[0], ',.0f') if totals else '-'} | ${AUTOMQ_S3_WAL:,} |",
            f"| Weir / AutoMQ with an FSx WAL | "
            f"{'$' + format(totals[0], ',.0f') if totals else '-'} | ${AUTOMQ_FSX:,} |",
            f"| Apache Kafka, 3 replicas in 3 zones | "
            f"{'$' + format(totals[1], ',.0f') if totals else '-'} | ${AUTOMQ_KAFKA:,} |",
            "",
            "- `weir cost` sizes compute from CPU seconds per GiB: r6in.large brokers (AutoMQ's "
            "comparison's, $0.17433/h) at half their vCPUs, at least three; Weir's and Kafka's "
            "CPU per GiB from `make bench`'s workload (a) (the file `weir cost` names), Kafka "
            "moving each produced byte five times with three replicas. AutoMQ's figures are its "
            "own estimates of whole deployments, quoted as published, not recomputed here.",
        ]

    name = os.path.basename(os.path.normpath(run_dir))
    md = [f"# Weir vs Apache Kafka 4.1: {name}", "", table, ""]
    md += [f"- {n}" for n in notes]
    if obj_table:
        md += ["", "## Object storage requests", "", obj_table, ""]
        md += [f"- {n}" for n in obj_notes]
    md += cost_md
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
    if obj_table:
        print(obj_table)
        print()
    for n in notes[:1]:
        print(n)
    if failures:
        print("Failures:")
        print("\n".join(failures))


if __name__ == "__main__":
    main()
