#!/usr/bin/env python3
"""What many partitions cost a broker with no load: its CPU while idle, and its CPU per
Metadata request of the whole topic, for one or more weir binaries side by side (before/after
comparisons on this noisy machine: run them in turn, twice).

    bench/metadata_cost.py target/release/weir [other/weir ...]

For each binary: a fresh `weir serve` (objects in a local directory, a 256 MiB WAL), one topic
of BENCH_M_PARTITIONS partitions made with kafka-topics (as bench/partitions.py makes it), then
the broker's CPU (from /proc) over 20 s of idling, and over 200 Metadata requests for the topic
from confluent-kafka's AdminClient, one at a time. Prints one line per binary.

Environment: BENCH_M_PARTITIONS [10000], BENCH_M_REQUESTS [200], BENCH_M_IDLE_S [20].
"""

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402  (the harness: Broker)
import partitions  # noqa: E402  (create_topic: kafka-topics, then waits for leaders)

PARTITIONS = int(os.environ.get("BENCH_M_PARTITIONS", "10000"))
REQUESTS = int(os.environ.get("BENCH_M_REQUESTS", "200"))
IDLE_S = float(os.environ.get("BENCH_M_IDLE_S", "20"))


def cpu_s(pid):
    return partitions.proc_sample(pid)[0]


def measure(binary):
    from confluent_kafka.admin import AdminClient
    root = tempfile.mkdtemp(prefix="weir-metadata-cost-")
    os.environ["WEIR_BIN"] = binary  # the harness starts $WEIR_BIN
    b = weir_harness.Broker("weir", root, env={"WEIR_WAL_CAPACITY": str(256 << 20)})
    b.kind = "weir"
    b.start()
    try:
        partitions.create_topic(b.bootstrap, "cost", PARTITIONS)
        time.sleep(5)
        c0 = cpu_s(b.pid)
        time.sleep(IDLE_S)
        idle = (cpu_s(b.pid) - c0) / IDLE_S
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.list_topics(topic="cost", timeout=30)
        c0, t0 = cpu_s(b.pid), time.monotonic()
        for _ in range(REQUESTS):
            admin.list_topics(topic="cost", timeout=30)
        wall = (time.monotonic() - t0) / REQUESTS
        per = (cpu_s(b.pid) - c0) / REQUESTS
        print(f"{binary}: {PARTITIONS:,} partitions: idle {idle:.3f} cores; Metadata of the "
              f"topic {wall * 1000:.1f} ms each (round trip), broker CPU {per * 1000:.1f} ms "
              "each (idle work included)", flush=True)
    finally:
        b.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for b in sys.argv[1:]:
        measure(os.path.abspath(b))
