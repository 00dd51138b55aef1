#!/usr/bin/env python3
"""The disk's own latency for what Weir's WAL does: a small O_DIRECT write, then fdatasync.

    bench/sync_latency.py [DIR [SYNCS [BYTES]]]     (defaults: target, 40000, 16384)

Formats a 256 MiB file in DIR (as the WAL formats its ring: plain overwrites afterwards, no
extent conversions), then writes BYTES at consecutive offsets SYNCS times, each followed by
fdatasync, with nothing else on the disk from this program. Prints p50 / p99 / p99.9 / max and
every sync over 16 ms with its time from the start. It is the floor under any acks=all produce
latency a broker that syncs before it acknowledges can show on that disk.
"""
import mmap
import os
import sys
import time

directory = sys.argv[1] if len(sys.argv) > 1 else "target"
syncs = int(sys.argv[2]) if len(sys.argv) > 2 else 40000
size = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
os.makedirs(directory, exist_ok=True)
path = os.path.join(directory, "sync-latency.dat")
capacity = 256 << 20
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
try:
    chunk = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT needs
    chunk.write(b"x" * (1 << 20))
    for off in range(0, capacity, 1 << 20):
        os.pwrite(fd, chunk, off)
    os.fsync(fd)
    buf = mmap.mmap(-1, size)
    buf.write(b"y" * size)
    lat, slow, off = [], [], 0
    t0 = time.perf_counter()
    for _ in range(syncs):
        s = time.perf_counter()
        os.pwrite(fd, buf, off)
        os.fdatasync(fd)
        d = time.perf_counter() - s
        lat.append(d)
        if d > 0.016:
            slow.append((round(s - t0, 2), round(d * 1000, 1)))
        off = (off + size) % capacity
    elapsed = time.perf_counter() - t0
finally:
    os.close(fd)
    os.unlink(path)
lat.sort()
q = lambda p: lat[max(0, int(p * len(lat)) - 1)] * 1000
print(f"{syncs} writes of {size} bytes + fdatasync in {elapsed:.1f} s: p50 {q(.5):.2f} ms, "
      f"p99 {q(.99):.2f}, p99.9 {q(.999):.2f}, max {lat[-1] * 1000:.1f}")
print(f"syncs over 16 ms: {len(slow)} (at s, ms): {slow[:30]}")
