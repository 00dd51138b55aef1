#!/usr/bin/env python3
"""The disk's own latency for what Weir's WAL does: a small O_DIRECT write, then fdatasync.

    bench/sync_latency.py [DIR [SYNCS [BYTES]]]     (defaults: target, 40000, 16384)

Formats a 256 MiB file in DIR (as the WAL formats its ring: plain overwrites afterwards, no
extent conversions), then writes BYTES at consecutive offsets SYNCS times, each followed by
fdatasync, with nothing else on the disk from this program. Prints p50 / p99 / p99.9 / max and
every sync over 16 ms with its time from the start. It is the floor under any acks=all produce
latency a broker that syncs before it acknowledges can show on that disk; Kafka, which
acknowledges from its page cache, never waits for it.

bench/producer_perf.py calls `measure` for 30 s before Weir's fixed-rate run, so that its table
shows the disk's stalls of the same minutes beside the broker's.
"""
import mmap
import os
import sys
import time

CAPACITY = 256 << 20


def measure(directory, syncs=None, size=16384, seconds=None, interval=0.0):
    """`syncs` synced writes of `size` bytes (or as many as fit in `seconds`), one every
    `interval` seconds at most, in a file formatted under `directory` and removed after.
    Returns p50 / p99 / p999 / max in ms, `n`, `elapsed` (s), `slow` (the writes over 16 ms, as
    (s from the start, ms)) and `over_16ms`; None where the filesystem refuses O_DIRECT."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"sync-latency-{os.getpid()}.dat")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return None
    try:
        chunk = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT needs
        chunk.write(b"x" * (1 << 20))
        for off in range(0, CAPACITY, 1 << 20):
            os.pwrite(fd, chunk, off)
        os.fsync(fd)
        buf = mmap.mmap(-1, size)
        buf.write(b"y" * size)
        lat, slow, off = [], [], 0
        t0 = time.perf_counter()
        while (syncs is None or len(lat) < syncs) and \
                (seconds is None or time.perf_counter() - t0 < seconds):
            s = time.perf_counter()
            os.pwrite(fd, buf, off)
            os.fdatasync(fd)
            d = time.perf_counter() - s
            lat.append(d)
            if d > 0.016:
                slow.append((round(s - t0, 2), round(d * 1000, 1)))
            off = (off + size) % CAPACITY
            if interval > d:
                time.sleep(interval - d)
        elapsed = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    lat.sort()

    def q(p):
        return lat[max(0, int(p * len(lat)) - 1)] * 1000

    return {"n": len(lat), "elapsed": elapsed, "p50": q(.5), "p99": q(.99), "p999": q(.999),
            "max": lat[-1] * 1000, "slow": slow, "over_16ms": len(slow)}


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "target"
    syncs = int(sys.argv[2]) if len(sys.argv) > 2 else 40000
    size = int(sys.argv[3]) if len(sys.argv) > 3 else 16384
    r = measure(directory, syncs=syncs, size=size)
    if r is None:
        sys.exit(f"sync_latency.py: {directory} does not take O_DIRECT writes")
    print(f"{r['n']} writes of {size} bytes + fdatasync in {r['elapsed']:.1f} s: "
          f"p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f}, p99.9 {r['p999']:.2f}, max {r['max']:.1f}")
    print(f"syncs over 16 ms: {r['over_16ms']} (at s, ms): {r['slow'][:30]}")


if __name__ == "__main__":
    main()
