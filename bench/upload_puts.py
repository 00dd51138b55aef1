#!/usr/bin/env python3
"""Object requests per GiB produced on the file WAL, with the default settings: PUTs, multipart
parts and GETs counted by the broker (`weir_object_requests_total`) while `weir perf` produces
BENCH_UP_MIB MiB/s (1 KiB records, acks=all, 16 partitions, no consumer) for BENCH_UP_SECONDS,
and BENCH_UP_AFTER_S more for the uploads and compaction to follow.

    WEIR_BIN=target/release/weir bench/upload_puts.py

A single broker (`weir serve`, objects in its data directory, a 2 GiB WAL). Prints the counts
and the PUT-class requests (PUTs and multipart parts) per GiB; asserts nothing.

Environment: WEIR_BIN, BENCH_UP_MIB [50], BENCH_UP_SECONDS [60], BENCH_UP_AFTER_S [35].
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


def scrape(b):
    text = urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics").read().decode()
    m = {}
    for line in text.splitlines():
        if line.startswith(("weir_object_requests_total", "weir_produce_bytes_total")):
            k, v = line.rsplit(" ", 1)
            m[k] = float(v)
    return m


def measure(weir, root):
    """The broker's meters before and after `weir perf` at MIB MiB/s, and AFTER_S to upload."""
    b = weir_harness.Broker("upload-puts", root, env={"WEIR_WAL_CAPACITY": str(2 << 30)})
    b.start()
    try:
        before = scrape(b)
        subprocess.run([weir, "perf", "--bootstrap-servers", b.bootstrap, "--partitions", "16",
                        "--throughput-mib", f"{MIB:g}", "--warmup", "5s",
                        "--duration", f"{SECONDS}s", "--groups", "0", "--quiet"], check=True)
        time.sleep(AFTER_S)
        return before, scrape(b)
    finally:
        b.cleanup()


def main():
    weir = os.environ.get("WEIR_BIN")
    if not weir:
        raise SystemExit("bench/upload_puts.py: set WEIR_BIN to the weir binary")
    with weir_harness.work_dir("weir-upload-puts-") as root:
        before, after = measure(weir, root)
    delta = {k: after[k] - before.get(k, 0.0) for k in after}
    gib = delta.get("weir_produce_bytes_total", 0.0) / (1 << 30)
    for k in sorted(delta):
        if delta[k] and k.startswith("weir_object_requests_total"):
            print(f"{k}: {delta[k]:,.0f} ({delta[k] / gib:.1f} per GiB)")
    puts = sum(v for k, v in delta.items()
               if k.startswith("weir_object_requests_total") and ("put" in k or "multipart" in k))
    print(f"{MIB:g} MiB/s for {SECONDS} s: {gib:.2f} GiB produced, {puts:,.0f} PUT-class "
          f"requests, {puts / gib:.1f} per GiB")


if __name__ == "__main__":
    main()
