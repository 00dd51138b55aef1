#!/usr/bin/env python3
"""A single broker's data directory, written by an early build, taken over by this build with no
hand step:

    WEIR_BIN=target/debug/weir tests/upgrade/data_dir.py OLD_WEIR_BINARY      (make test-upgrade)

OLD_WEIR_BINARY is an early build's `weir` (tools/build-release.sh 08a96a9: a WAL of format 1,
SQLite metadata, objects in a local directory, the defaults of `weir serve`). Two data
directories, each a broker of the early build given RECORDS idempotent records (acks=all) on a
topic of four partitions and a group's committed offsets:

  clean    the early broker stopped with SIGTERM (everything uploaded), then this build started
           on the directory: its WAL of format 1 is rewritten in the current format by itself;
  crashed  the early broker killed with SIGKILL with every record still only in its WAL (uploads
           held back), then this build started on it: it recovers the records from the format-1
           WAL.

In both, this build must start (no refusal), read every acknowledged record back once, in order,
at its acknowledged offset, find the group's offsets unchanged, take more records, and start
again on the directory it rewrote. Exit status 0 when all of that holds, 1 otherwise.
"""

import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))

import weir_harness  # noqa: E402 - the test cluster's package

RECORDS = int(os.environ.get("UPGRADE_RECORDS", "20000"))
TOPIC, GROUP, PARTITIONS = "early", "early-group", 4
# Only settings the early build knows (it refuses unknown keys); a small WAL, as every test's.
EARLY_ENV = {"WEIR_WAL_CAPACITY": str(64 << 20)}
# Uploads held back: a crashed broker's records are in its WAL only.
HOLD_UPLOADS = {"WEIR_STORAGE_UPLOAD_INTERVAL_MS": "600000",
                "WEIR_STORAGE_UPLOAD_BYTES": str(1 << 30)}
V1_MAGIC = (0x5745_4952_5741_4C31).to_bytes(8, "little")  # "WEIRWAL1" as the file holds it
V2_MAGIC = (0x5745_4952_5741_4C32).to_bytes(8, "little")


class Failed(Exception):
    pass


def produce(bootstrap, n, first):
    """n idempotent records, values "r<i>" from `first`, round-robin over the partitions;
    returns {value: (partition, offset)} of the acknowledged ones."""
    from confluent_kafka import Producer

    acked, errors = {}, []

    def on_delivery(err, msg):
        if err is None:
            acked[msg.value().decode()] = (msg.partition(), msg.offset())
        else:
            errors.append(str(err))

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5})
    for i in range(first, first + n):
        while True:
            try:
                p.produce(TOPIC, value=f"r{i}".encode(), partition=i % PARTITIONS,
                          on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    left = p.flush(60)
    if left or errors or len(acked) != n:
        raise Failed(f"produce: {len(acked)} of {n} acknowledged, {left} left, errors "
                     f"{errors[:3]}")
    return acked


def commit_offsets(bootstrap, offsets):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
             asynchronous=False)
    c.close()


def committed(bootstrap):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    got = c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    c.close()
    return {tp.partition: tp.offset for tp in got}


def read_all(bootstrap, want):
    """Every record from the start of each partition: {value: (partition, offset)}; fails on a
    value read twice or out of order within its partition."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{time.time_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got, last = {}, {}
    deadline = time.monotonic() + 60
    while len(got) < want and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            raise Failed(f"read back: {m.error()}")
        v = m.value().decode()
        if v in got:
            raise Failed(f"read back: {v} read twice ({got[v]} and {m.offset()})")
        n = int(v[1:])
        if n <= last.get(m.partition(), -1):
            raise Failed(f"read back: {v} after r{last[m.partition()]} in partition "
                         f"{m.partition()}")
        last[m.partition()] = n
        got[v] = (m.partition(), m.offset())
    c.close()
    return got


def check_read_back(bootstrap, acked, what):
    got = read_all(bootstrap, len(acked))
    lost = [v for v, at in acked.items() if got.get(v) != at]
    extra = [v for v in got if v not in acked]
    if lost or extra:
        raise Failed(f"{what}: {len(lost)} acknowledged records not read back at their offsets "
                     f"(first {lost[:3]}), {len(extra)} never acknowledged")
    print(f"  {what}: {len(got):,} records read back once, in order, at their offsets")


def create_topic(bootstrap):
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS,
                              replication_factor=1)])[TOPIC].result(30)


def wal_format(broker):
    """The format of the WAL's superblocks (two slots of 4 KiB, written in turn)."""
    with open(os.path.join(broker.data_dir, "wal"), "rb") as f:
        slots = f.read(8192)
    magics = {slots[0:8], slots[4096:4104]} - {bytes(8)}
    formats = {{V1_MAGIC: 1, V2_MAGIC: 2}.get(m, f"unknown {m!r}") for m in magics}
    return formats.pop() if len(formats) == 1 else f"unclear {sorted(map(str, formats))}"


def scenario(name, old, root):
    print(f"{name}:")
    b = weir_harness.Broker(f"early-{name}", os.path.join(root, name))
    b.binary = old
    b.env = dict(EARLY_ENV, **(HOLD_UPLOADS if name == "crashed" else {}))
    b.start()
    create_topic(b.bootstrap)
    acked = produce(b.bootstrap, RECORDS, 0)
    offsets = {p: 1000 + 17 * p for p in range(PARTITIONS)}
    commit_offsets(b.bootstrap, offsets)
    if name == "clean":
        status = b.stop()
        if status != 0:
            raise Failed(f"the early broker exited with {status} on SIGTERM")
    else:
        b.kill()
    fmt = wal_format(b)
    print(f"  the early build ({old}) acknowledged {len(acked):,} records, committed {GROUP}'s "
          f"offsets, was {'stopped' if name == 'clean' else 'killed'}; its WAL is of format "
          f"{fmt}")
    if fmt != 1:
        raise Failed(f"the early build's WAL is of format {fmt}, not 1: not the case under test")
    b.binary = None  # WEIR_BIN
    b.env = dict(EARLY_ENV)
    t = time.monotonic()
    b.start()
    print(f"  this build started on it in {time.monotonic() - t:.1f} s; its WAL is now of format "
          f"{wal_format(b)}")
    said = [ln for ln in b.log_lines() if "rewritten in the current format" in ln]
    if not said:
        raise Failed("this build's log does not say it rewrote the format-1 WAL")
    m = re.search(r"records=(\d+)", said[0])
    kept = int(m.group(1)) if m else None
    print(f"  the rewritten WAL kept {kept} records (batches) not yet trimmed")
    if name == "crashed" and not kept:
        raise Failed("the killed early broker's WAL held no records: not the case under test")
    check_read_back(b.bootstrap, acked, "after the upgrade")
    got = committed(b.bootstrap)
    if got != offsets:
        raise Failed(f"{GROUP}'s offsets are {got}, {offsets} were committed")
    print(f"  {GROUP}'s {len(offsets)} committed offsets unchanged")
    acked.update(produce(b.bootstrap, 1000, RECORDS))
    b.stop()
    b.start()
    check_read_back(b.bootstrap, acked, "after 1,000 more and a restart of this build")
    b.stop()


def main():
    if len(sys.argv) != 2 or not os.environ.get("WEIR_BIN"):
        sys.exit("usage: WEIR_BIN=<this build> tests/upgrade/data_dir.py <early build's weir>")
    old = os.path.abspath(sys.argv[1])
    root = tempfile.mkdtemp(prefix="weir-upgrade-")
    try:
        for name in ("clean", "crashed"):
            scenario(name, old, root)
    except (Failed, RuntimeError) as e:
        print(f"UPGRADE OF A DATA DIRECTORY FAILED: {e}\ndata directories and logs kept in {root}")
        return 1
    shutil.rmtree(root, ignore_errors=True)
    print("upgrade of a data directory passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
