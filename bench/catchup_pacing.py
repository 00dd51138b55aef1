#!/usr/bin/env python3
"""Paced catch-up: producers' latency while a consumer group reads a backlog from object storage,
with the broker's catch-up read rate unlimited and paced (`storage.catchup_bytes_per_sec`).

    WEIR_BIN=target/release/weir bench/catchup_pacing.py        (or: make bench-catchup-pacing)

For each pace (BENCH_CP_PACES, multiples of the produce rate; 0: unlimited) a fresh broker
(`weir serve`, objects in its data directory, WEIR_WAL_CAPACITY 1 GiB, a 64 MiB log cache so that
the backlog is read from objects) and one `weir perf` run: BENCH_CP_MIB MiB/s of 1 KiB records
(acks=all) on 16 partitions, BENCH_CP_BACKLOG_S of backlog with no consumer, then one consumer
group from the earliest offset for BENCH_CP_DURATION_S while producing goes on. `weir perf`
reports the produce latency while the backlog was built (the comparison) and while the group
caught up; the ratio of their p99s is the figure.

Environment: WEIR_BIN, BENCH_CP_MIB [10], BENCH_CP_PACES ["0 3"], BENCH_CP_BACKLOG_S [60],
BENCH_CP_DURATION_S [60], BENCH_CP_OUT (by default bench/results/catchup-pacing-DATE.md).
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))

import weir_harness  # noqa: E402  (the harness: Broker)

MIB = float(os.environ.get("BENCH_CP_MIB", "10"))
PACES = [float(p) for p in os.environ.get("BENCH_CP_PACES", "0 3").split()]
BACKLOG_S = int(os.environ.get("BENCH_CP_BACKLOG_S", "60"))
DURATION_S = int(os.environ.get("BENCH_CP_DURATION_S", "60"))


def run(weir, pace):
    with weir_harness.work_dir("weir-catchup-pacing-") as root:
        limit = int(pace * MIB * (1 << 20))
        b = weir_harness.Broker("catchup", root, env={
            "WEIR_WAL_CAPACITY": str(1 << 30),
            "WEIR_STORAGE_LOG_CACHE_BYTES": str(64 << 20),
            "WEIR_STORAGE_CATCHUP_BYTES_PER_SEC": str(limit),
        })
        b.start()
        out = os.path.join(root, "perf.json")
        try:
            subprocess.run([weir, "perf", "--bootstrap-servers", b.bootstrap, "--partitions", "16",
                            "--throughput-mib", str(MIB), "--warmup", "10s",
                            "--backlog", f"{BACKLOG_S}s", "--duration", f"{DURATION_S}s",
                            "--report-interval", "10s", "--output", out], check=True,
                           timeout=BACKLOG_S + DURATION_S + 300)
            with open(out) as f:
                return json.load(f)
        finally:
            b.cleanup()


def main():
    weir = os.environ.get("WEIR_BIN")
    if not weir:
        raise SystemExit("bench/catchup_pacing.py: set WEIR_BIN to the weir binary")
    stamp = time.strftime("%Y-%m-%d-%H%M")
    out = os.environ.get("BENCH_CP_OUT",
                         os.path.join(HERE, "results", f"catchup-pacing-{stamp}.md"))
    rows = []
    for pace in PACES:
        d = run(weir, pace)
        c = d["catch_up"]
        before = (c.get("produce_latency_before_ms") or {}).get("p99")
        during = (c.get("produce_latency_ms") or {}).get("p99")
        ratio = during / before if before and during else float("nan")
        label = "unlimited" if pace == 0 else f"{pace:g}x the produce rate ({pace * MIB:g} MiB/s)"
        row = (f"| {label} | {c['backlog_at_start_mib']:.0f} | {c['read_mib_per_sec']:.1f} | "
               f"{'yes' if c['caught_up'] else 'no'} in {c['seconds']:.1f} s | {before:.1f} | "
               f"{during:.1f} | {ratio:.2f}x |")
        print(row, flush=True)
        rows.append(row)
    lines = [f"# Paced catch-up ({stamp})", "",
             f"`BENCH_CP_MIB={MIB:g} BENCH_CP_PACES=\"{' '.join(f'{p:g}' for p in PACES)}\" "
             f"BENCH_CP_BACKLOG_S={BACKLOG_S} BENCH_CP_DURATION_S={DURATION_S} WEIR_BIN={weir} "
             "bench/catchup_pacing.py`: one broker (objects in its data directory, 64 MiB log "
             f"cache), {MIB:g} MiB/s of 1 KiB records on 16 partitions, acks=all; the load "
             "generator on the same two cores.", "",
             "| catch-up pace (`storage.catchup_bytes_per_sec`) | backlog MiB | read MiB/s | "
             "caught up | produce p99 before, ms | produce p99 during, ms | during / before |",
             "|---|---:|---:|---|---:|---:|---:|", *rows, ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print(f"report: {out}")


if __name__ == "__main__":
    main()
