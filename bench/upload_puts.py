#!/usr/bin/env python3
"""Object requests per GiB on the file WAL with the default settings, and what leaving data in
stream-set objects costs in storage when topics keep it for different times.

    WEIR_BIN=target/release/weir bench/upload_puts.py
    WEIR_BIN=new/weir BENCH_UP_BASE_BIN=old/weir bench/upload_puts.py   # both, old first

1. Writes: `weir perf` produces BENCH_UP_MIB MiB/s (1 KiB records, acks=all, 16 partitions, no
   consumer) for BENCH_UP_SECONDS, then waits BENCH_UP_AFTER_S for uploads and compaction to
   follow. PUT-class requests (PUTs, multipart parts and starts) per GiB produced, from the
   broker's `weir_object_requests_total`.
2. A catch-up: a consumer (librdkafka) reads the whole topic from the start, most of it from
   objects (the log cache keeps the last 512 MiB). GETs per GiB read.
3. Mixed retention (BENCH_UP_MIXED=0 skips it): 40 MiB/s to a topic kept 30 s and 10 MiB/s to
   one kept forever, for BENCH_UP_SECONDS, maintenance every 2 s (a reclaim round every 60 s);
   then the bytes in the objects directory against those the long-kept topic holds, every 10 s
   for BENCH_UP_MIXED_AFTER_S.

A single broker (`weir serve`, objects in its data directory, a 2 GiB WAL; with BENCH_UP_S3=1,
phases 1 and 2 on an s3s-fs server instead). Prints figures; asserts nothing.

Environment: WEIR_BIN, BENCH_UP_BASE_BIN, BENCH_UP_MIB [50], BENCH_UP_SECONDS [60],
BENCH_UP_AFTER_S [35], BENCH_UP_MIXED [1], BENCH_UP_MIXED_AFTER_S [120], BENCH_UP_S3 [0].
"""

import os
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))

import weir_harness  # noqa: E402  (the harness: Broker)

MIB = float(os.environ.get("BENCH_UP_MIB", "50"))
SECONDS = int(os.environ.get("BENCH_UP_SECONDS", "60"))
AFTER_S = int(os.environ.get("BENCH_UP_AFTER_S", "35"))
MIXED = os.environ.get("BENCH_UP_MIXED", "1") == "1"
MIXED_AFTER_S = int(os.environ.get("BENCH_UP_MIXED_AFTER_S", "120"))
S3 = os.environ.get("BENCH_UP_S3") == "1"
GIB = float(1 << 30)


def scrape(b):
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics").read().decode()
    m = {}
    for line in text.splitlines():
        if line.startswith(("weir_object_requests_total", "weir_produce_bytes_total",
                            "weir_object_bytes_total", "weir_fetch_bytes_total",
                            "weir_compactions_total", "weir_object_errors_total")):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


def delta(before, after):
    return {k: after[k] - before.get(k, 0.0) for k in after}


def put_class(d):
    return sum(v for k, v in d.items()
               if k.startswith("weir_object_requests_total") and ("put" in k or "multipart" in k))


def perf(weir, b, prefix, mib, seconds):
    args = [weir, "perf", "--bootstrap-servers", b.bootstrap, "--partitions", "16",
            "--topic-prefix", prefix, "--throughput-mib", f"{mib:g}", "--warmup", "5s",
            "--duration", f"{seconds}s", "--groups", "0", "--quiet"]
    return subprocess.Popen(args)


def create_topic(b, name, configs):
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic(name, 16, 1, config=configs)])[name].result(30)


def consume_all(b, topic):
    """Reads `topic` from the start to its end; the bytes of the values read."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "upload-puts-catchup",
                  "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                  "max.partition.fetch.bytes": 8 << 20, "queued.max.messages.kbytes": 262144})
    try:
        parts = [TopicPartition(topic, p) for p in range(16)]
        ends = {p.partition: c.get_watermark_offsets(p, timeout=30)[1] for p in parts}
        c.assign([TopicPartition(topic, p, 0) for p in range(16)])
        left = {p for p, end in ends.items() if end > 0}
        got = 0
        deadline = time.time() + 600
        while left and time.time() < deadline:
            for m in c.consume(10000, 1.0):
                if m.error():
                    continue
                got += len(m.value() or b"")
                if m.offset() + 1 >= ends[m.partition()]:
                    left.discard(m.partition())
        if left:
            raise SystemExit(f"catch-up: partitions {sorted(left)} not read to their end")
        return got
    finally:
        c.close()


def writes_and_catchup(weir, root):
    """Phases 1 and 2 on one broker: the meters' deltas of each."""
    env, args, s3 = {"WEIR_WAL_CAPACITY": str(2 << 30)}, None, None
    if S3:
        s3 = weir_harness.S3sFs(os.path.join(root, "s3"))
        s3.start()
        env.update(s3.env())
        args = ["--object-store-url", f"s3://{weir_harness.S3_BUCKET}/weir"]
    b = weir_harness.Broker("upload-puts", root, env=env, args=args)
    b.binary = weir
    b.start()
    try:
        m0 = scrape(b)
        p = perf(weir, b, "upload-puts", MIB, SECONDS)
        if p.wait() != 0:
            raise SystemExit("weir perf failed")
        time.sleep(AFTER_S)
        m1 = scrape(b)
        read = consume_all(b, "upload-puts-0")
        m2 = scrape(b)
        return delta(m0, m1), delta(m1, m2), read
    finally:
        b.cleanup()
        if s3 is not None:
            s3.kill()


def du(path):
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            try:
                total += os.path.getsize(os.path.join(d, n))
            except OSError:
                pass
    return total


def mixed_retention(weir, root):
    """Phase 3: (seconds after production, bytes in objects / bytes of the long-kept topic)."""
    b = weir_harness.Broker("upload-mixed", root, env={
        "WEIR_WAL_CAPACITY": str(2 << 30), "WEIR_STORAGE_MAINTENANCE_INTERVAL_MS": "2000"})
    b.binary = weir
    b.start()
    try:
        create_topic(b, "short-0", {"retention.ms": "30000"})
        create_topic(b, "long-0", {"retention.ms": "-1"})
        m0 = scrape(b)
        short = perf(weir, b, "short", MIB * 0.8, SECONDS)
        long_ = perf(weir, b, "long", MIB * 0.2, SECONDS)
        if short.wait() != 0 or long_.wait() != 0:
            raise SystemExit("weir perf failed")
        # What the long-kept topic holds: its share of what was produced, fixed by the rates
        # asked (both producers kept them).
        produced = scrape(b)["weir_produce_bytes_total"] - m0.get("weir_produce_bytes_total", 0)
        objects = os.path.join(b.data_dir, "objects")
        samples = []
        for t in range(0, MIXED_AFTER_S + 1, 10):
            samples.append((t, du(objects)))
            time.sleep(10)
        m1 = scrape(b)
        return produced, samples, delta(m0, m1)
    finally:
        b.cleanup()


def run(label, weir):
    print(f"## {label}: {weir}")
    with weir_harness.work_dir("weir-upload-puts-") as root:
        w, r, read = writes_and_catchup(weir, root)
    gib = w.get("weir_produce_bytes_total", 0.0) / GIB
    for k in sorted(w):
        if w[k] and k.startswith("weir_object_requests_total"):
            print(f"  writes: {k}: {w[k]:,.0f} ({w[k] / gib:.1f} per GiB)")
    puts = put_class(w)
    print(f"  writes: {MIB:g} MiB/s for {SECONDS} s: {gib:.2f} GiB produced, {puts:,.0f} "
          f"PUT-class requests, {puts / gib:.1f} per GiB, "
          f"{w.get('weir_object_errors_total', 0.0):,.0f} object-store errors")
    gets = r.get('weir_object_requests_total{kind="get"}', 0.0)
    got = r.get('weir_object_bytes_total{kind="get"}', 0.0)
    print(f"  catch-up: {read / GIB:.2f} GiB read, {got / GIB:.2f} GiB from objects in "
          f"{gets:,.0f} GETs: {gets / (read / GIB):.0f} GETs per GiB read")
    out = {"puts_per_gib": puts / gib, "gets_per_gib": gets / (read / GIB)}
    if MIXED:
        with weir_harness.work_dir("weir-upload-mixed-") as root:
            produced, samples, d = mixed_retention(weir, root)
        kept = produced * 0.2
        line = ", ".join(f"{t} s: {size / kept:.2f}" for t, size in samples)
        print(f"  mixed retention: {produced / GIB:.2f} GiB produced, 20% kept forever; "
              f"bytes in objects / bytes kept, after production: {line}")
        mgib = produced / GIB
        print(f"  mixed retention: {put_class(d) / mgib:.1f} PUT-class requests per GiB produced "
              f"(to the end of sampling)")
        out["mixed_final"] = samples[-1][1] / kept
        out["mixed_puts_per_gib"] = put_class(d) / mgib
    return out


def main():
    weir = os.environ.get("WEIR_BIN")
    if not weir:
        raise SystemExit("bench/upload_puts.py: set WEIR_BIN to the weir binary")
    base = os.environ.get("BENCH_UP_BASE_BIN")
    results = []
    if base:
        results.append(("before", run("before", base)))
    label = "after" if base else "this build"
    results.append((label, run(label, weir)))
    print("\n| | " + " | ".join(label for label, _ in results) + " |")
    print("|---|" + "---:|" * len(results))
    rows = [("PUT-class requests per GiB produced", "puts_per_gib", "{:.1f}"),
            ("GETs per GiB read in a catch-up", "gets_per_gib", "{:.0f}")]
    if MIXED:
        rows += [("mixed retention: bytes in objects / bytes kept, at the end", "mixed_final",
                  "{:.2f}"),
                 ("mixed retention: PUT-class requests per GiB produced", "mixed_puts_per_gib",
                  "{:.1f}")]
    for title, key, fmt in rows:
        print(f"| {title} | " + " | ".join(fmt.format(r[key]) for _, r in results) + " |")


if __name__ == "__main__":
    main()
