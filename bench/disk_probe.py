#!/usr/bin/env python3
"""How the disk itself answers synced writes, with no broker running.

    python3 bench/disk_probe.py [DIR] [SECONDS]

Writes 64 KiB with O_DIRECT and syncs it (fdatasync), about 500 times a second, into a
preallocated and already written 256 MiB file under DIR (default target/), which is what the
`file` WAL does at a steady produce rate: a plain overwrite and a device flush. Prints the
latency percentiles and the writes slower than 20 ms. A durable broker (Weir acknowledges a
record once its WAL write synced) cannot answer faster than its disk; Kafka, which acknowledges
from the page cache, never waits for it. bench/producer_perf.py runs this beside Weir's
fixed-rate run, so a tail in its table can be told apart from the disk's own.
"""

import mmap
import os
import shutil
import sys
import tempfile
import time

WRITE = 64 << 10
FILE = 256 << 20
INTERVAL = 0.002


def probe(directory, seconds):
    """Synced direct writes for `seconds` in a temporary file under `directory`; a dict of
    figures in ms (p50, p99, p999, max), `n` writes and `over_20ms` of them, or None where the
    filesystem refuses O_DIRECT (tmpfs)."""
    os.makedirs(directory, exist_ok=True)
    d = tempfile.mkdtemp(prefix="disk-probe-", dir=directory)
    try:
        try:
            fd = os.open(os.path.join(d, "probe"), os.O_RDWR | os.O_CREAT | os.O_DIRECT)
        except OSError:
            return None
        try:
            # An anonymous map is page-aligned, as O_DIRECT needs.
            buf = mmap.mmap(-1, WRITE)
            buf.write(b"w" * WRITE)
            os.posix_fallocate(fd, 0, FILE)
            # Written once, so later writes are overwrites (no extent conversion, no journal
            # commit in the sync): the WAL formats its file the same way.
            for off in range(0, FILE, WRITE):
                os.pwrite(fd, buf, off)
            os.fsync(fd)
            lat = []
            off = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                a = time.monotonic()
                os.pwrite(fd, buf, off)
                os.fdatasync(fd)
                took = time.monotonic() - a
                lat.append(took)
                off = (off + WRITE) % FILE
                time.sleep(max(0.0, INTERVAL - took))
        finally:
            os.close(fd)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    lat.sort()
    n = len(lat)
    return {"n": n, "p50": lat[n // 2] * 1e3, "p99": lat[int(n * 0.99)] * 1e3,
            "p999": lat[int(n * 0.999)] * 1e3, "max": lat[-1] * 1e3,
            "over_20ms": sum(1 for x in lat if x > 0.020)}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    directory = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "target")
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 30.0
    r = probe(directory, seconds)
    if r is None:
        sys.exit(f"disk_probe.py: {directory} does not take O_DIRECT writes")
    print(f"synced 64 KiB direct writes, {r['n']} in {seconds:.0f} s: p50 {r['p50']:.2f} ms, "
          f"p99 {r['p99']:.2f}, p99.9 {r['p999']:.2f}, max {r['max']:.1f}; "
          f"{r['over_20ms']} over 20 ms")


if __name__ == "__main__":
    main()
