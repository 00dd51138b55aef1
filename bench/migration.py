#!/usr/bin/env python3
"""A migration from Apache Kafka 4.1 into Weir, rehearsed twice on this machine: through a
cluster link, and through MirrorMaker 2 (`bench/mm2.py`), the same steps and the same load.

    WEIR_BIN=target/release/weir python3 bench/migration.py

The steps are the runbook's (docs/links.md): an idempotent producer writes to the source
throughout; HISTORY records are there before the mirror starts; the consumer group reads
on the source, committing after every poll, until it has read as many as the history holds
(a fifth of it deleted first, as retention would have), then stops;
the mirror is checked until the group's committed offsets are on Weir for every partition (the
link: equal to the source's; MirrorMaker 2: present and unchanged for 3 s, since they are
translated and never equal); the consumer resumes on Weir while the producer still writes to
the source; then the producer stops, the cutover (the link: `promote`; MirrorMaker 2: waiting
until Weir holds as many records as the source, then stopping it) is timed, and a producer
writes AFTER more records to Weir. The consumer reads until it has every value once.

Figures per way: records read twice and never read across the move, the group's committed
offsets on Weir against the source's at the move (summed over partitions), how many records
the consumer read on Weir sit at the offset they have at the source, how long the group's
offsets took to arrive, and how long the cutover took.

Writes bench/results/migration-YYYY-MM-DD-HHMM.md.
"""

import collections
import datetime
import json
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "harness"))
sys.path.insert(0, HERE)

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from confluent_kafka import ConsumerGroupTopicPartitions  # noqa: E402

from mm2 import MirrorMaker  # noqa: E402
from weir_harness import Broker  # noqa: E402

PARTITIONS = int(os.environ.get("BENCH_MIGRATION_PARTITIONS", "4"))
HISTORY = int(os.environ.get("BENCH_MIGRATION_HISTORY", "10000"))
RATE = int(os.environ.get("BENCH_MIGRATION_RATE", "1000"))  # records/s while live
AFTER = 1000


def create_topic(bootstrap, name):
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)


def committed(bootstrap, group):
    a = AdminClient({"bootstrap.servers": bootstrap})
    f = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    res = f[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def positions(bootstrap, topic):
    """value -> (partition, offset) of every record of `topic`, read from the start."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    out, done = {}, set()
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 120
    while len(done) < PARTITIONS and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            done.add(m.partition())
            continue
        out[m.value()] = (m.partition(), m.offset())
    c.close()
    return out


def ends(bootstrap, topic):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(PARTITIONS)]
    finally:
        c.close()


class Writer:
    """An idempotent producer writing `prefix-i` values at RATE records/s until stopped."""

    def __init__(self, bootstrap, topic, prefix):
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "linger.ms": 5, "compression.type": "lz4"})
        self.topic, self.prefix, self.n = topic, prefix, 0
        self.stop_flag = threading.Event()
        self.t = None

    def write(self, n):
        for _ in range(n):
            self.p.produce(self.topic, value=f"{self.prefix}-{self.n}".encode(),
                           partition=self.n % PARTITIONS)
            self.n += 1
            if self.n % 1000 == 0:
                self.p.poll(0)
        self.p.flush(60)

    def run(self):
        while not self.stop_flag.is_set():
            self.write(RATE // 20)
            time.sleep(0.05)

    def start(self):
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def stop(self):
        self.stop_flag.set()
        self.t.join(60)
        self.p.flush(60)


def consume(bootstrap, topic, group, read, until):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        while not until():
            msgs = c.consume(200, 0.5)
            for m in msgs:
                if m.error() is None:
                    read.append((bootstrap, m.partition(), m.offset(), m.value()))
            if msgs:
                c.commit(asynchronous=False)
    finally:
        c.close()


def rehearse(way, source, weir, root):
    topic, group = f"orders-{way}", f"app-{way}"
    create_topic(source.bootstrap, topic)
    w = Writer(source.bootstrap, topic, way)
    w.write(HISTORY)
    # Retention has run on any topic worth migrating: its first records are gone, so its log
    # starts past offset 0 (here a fifth of the history, with Kafka's DeleteRecords).
    a = AdminClient({"bootstrap.servers": source.bootstrap})
    cut = HISTORY // 5 // PARTITIONS
    for f in a.delete_records([TopicPartition(topic, p, cut) for p in range(PARTITIONS)]).values():
        f.result(30)
    mm2 = None
    if way == "link":
        status, body = weir.admin("POST", "/v1/links", {
            "name": way, "bootstrap.servers": source.bootstrap, "topics": [topic],
            "groups": [group], "metadata.refresh.ms": 1000, "groups.sync.ms": 500}, timeout=60)
        assert status == 201, body
    else:
        mm2 = MirrorMaker(os.path.join(root, "mm2"), source.bootstrap, weir.bootstrap,
                          topic, group).start()
    w.start()
    read = []
    consume(source.bootstrap, topic, group, read, lambda: len(read) >= HISTORY - cut * PARTITIONS)
    on_source = committed(source.bootstrap, group)
    # The consumers move once the group's offsets are on Weir.
    t0 = time.monotonic()
    last, stable_since = None, None
    while time.monotonic() - t0 < 300:
        try:
            here = committed(weir.bootstrap, group)
        except Exception:  # noqa: BLE001 - the group is not there yet
            here = {}
        if way == "link" and here == on_source:
            break
        if way == "mm2" and len(here) == PARTITIONS:
            if here != last:
                last, stable_since = here, time.monotonic()
            elif time.monotonic() - stable_since >= 3:
                break
        time.sleep(0.2)
    offsets_wait = time.monotonic() - t0
    on_weir = committed(weir.bootstrap, group)
    moved_at = len(read)
    done = threading.Event()
    reader = threading.Thread(target=consume, args=(weir.bootstrap, topic, group, read,
                                                    done.is_set), daemon=True)
    reader.start()
    time.sleep(5)
    # The producers move: stop writing to the source, cut over, write to Weir.
    w.stop()
    produced = w.n
    t0 = time.monotonic()
    if way == "link":
        status, body = weir.admin("POST", f"/v1/links/{way}/promote",
                                  {"topics": [topic], "timeout_ms": 120000}, timeout=60)
        assert status == 202, body
        while True:
            _, body = weir.admin("GET", f"/v1/links/{way}")
            state = body["topics"][topic]["state"]
            if state == "promoted":
                break
            assert state in ("mirroring", "promoting"), body
            time.sleep(0.05)
    else:
        # MirrorMaker 2 copies from the source's log start: what retention left.
        while sum(hi - lo for lo, hi in ends(weir.bootstrap, topic)) < produced - cut * PARTITIONS:
            time.sleep(0.05)
        mm2.stop()
    cutover = time.monotonic() - t0
    after = Writer(weir.bootstrap, topic, way)
    after.n = produced
    after.write(AFTER)
    # What the source still held when the mirror began, and everything after.
    want = {f"{way}-{i}".encode() for i in range(cut * PARTITIONS, produced + AFTER)}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if want <= {v for _, _, _, v in read}:
            break
        time.sleep(0.2)
    time.sleep(2)
    done.set()
    reader.join(60)
    if mm2:
        mm2.stop()
    counts = collections.Counter(v for _, _, _, v in read)
    at_source = positions(source.bootstrap, topic)
    mirrored_reads = [(p, o, v) for b, p, o, v in read[moved_at:] if v in at_source]
    same = sum(1 for p, o, v in mirrored_reads if at_source[v] == (p, o))
    return {
        "records produced (source, then Weir after the cutover)": f"{produced} + {AFTER}",
        "read by the group on the source before the move": moved_at,
        "records read twice": sum(1 for c in counts.values() if c > 1),
        "records never read": len(want - set(counts)),
        "committed offsets at the move, summed: on Weir / on the source":
            f"{sum(on_weir.values())} / {sum(on_source.values())}",
        "records read on Weir at their source offset": f"{same} of {len(mirrored_reads)}",
        "group offsets on Weir after the consumers stopped, s": f"{offsets_wait:.1f}",
        "producers stopped to Weir writable with every record, s": f"{cutover:.2f}",
    }


def main():
    root = tempfile.mkdtemp(prefix="bench-migration-")
    source = Broker("source", os.path.join(root, "kafka"))
    source.kind = "kafka"
    weir = Broker("weir", os.path.join(root, "weir"), env={"WEIR_WAL_CAPACITY": str(256 << 20)})
    source.start()
    weir.start()
    results = {}
    try:
        for way in ("link", "mm2"):
            results[way] = rehearse(way, source, weir, os.path.join(root, way))
            print(way, json.dumps(results[way], indent=1))
    finally:
        weir.stop()
        source.stop()
        import shutil
        shutil.rmtree(root, ignore_errors=True)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    lines = [f"# A migration from Apache Kafka 4.1 into Weir, link beside MirrorMaker 2, {stamp}",
             "",
             "The same steps and load both ways (bench/migration.py's docstring): "
             f"{PARTITIONS} partitions, {HISTORY} records before the mirror starts, an "
             f"idempotent producer at {RATE} records/s on the source throughout, the group "
             "moved first, then the producer. One Kafka broker, one Weir broker, MirrorMaker 2 "
             "(dedicated mode, IdentityReplicationPolicy, checkpoints and offset syncs every "
             "second) and the clients on this 2-core machine. Reproduce: "
             f"`BENCH_MIGRATION_PARTITIONS={PARTITIONS} BENCH_MIGRATION_HISTORY={HISTORY} "
             f"BENCH_MIGRATION_RATE={RATE} WEIR_BIN=<release build> python3 bench/migration.py`.",
             "", "| figure | cluster link | MirrorMaker 2 |", "|---|---|---|"]
    for k in results["link"]:
        lines.append(f"| {k} | {results['link'][k]} | {results['mm2'][k]} |")
    lines.append("")
    path = os.path.join(HERE, "results", f"migration-{stamp}.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print(f"written to {path}")


if __name__ == "__main__":
    main()
