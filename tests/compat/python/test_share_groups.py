"""Share groups (KIP-932) with librdkafka's share consumer (confluent-kafka's ShareConsumer, a
preview in 2.15+), against Weir or, with WEIR_TEST_BROKER=kafka, Apache Kafka 4.4:

- three share consumers of one group on a two-partition topic: every record is delivered to
  one of them, once, and accepted (commit_sync); a fourth consumer then gets nothing;
- explicit acknowledgements: RELEASE hands a record back (delivered again, delivery count 2),
  REJECT archives it;
- a consumer that closes without acknowledging (librdkafka sends no acknowledgement on close):
  its records go to the next consumer at once, delivered a second time.

Each group starts at the earliest offset: share.auto.offset.reset=earliest, set with the admin
client's incremental_alter_configs on a GROUP resource.
"""

import collections
import threading
import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)

from compat_util import admin, create_topic, unique


def _earliest(bootstrap, group):
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    a = admin(bootstrap)  # kept alive until the result is in
    a.incremental_alter_configs([r])[r].result(timeout=30)


def _produce(bootstrap, topic, partitions, n):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def _consumer(bootstrap, group, explicit=False):
    conf = {"bootstrap.servers": bootstrap, "group.id": group}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(conf)


def _poll(c, timeout=1.0):
    return [m for m in (c.poll(timeout) or []) if m.error() is None]


def test_share_consumers_split_records_and_accept_each_once(broker):
    topic, group = unique("share-py"), unique("sg-py")
    create_topic(broker.bootstrap, topic, 2)
    _earliest(broker.bootstrap, group)
    n = 3000
    seen = collections.defaultdict(list)
    lock = threading.Lock()
    stop = threading.Event()
    joined = threading.Barrier(4)
    errors = []

    def run(name):
        try:
            c = _consumer(broker.bootstrap, group)
            c.subscribe([topic])
            # Every member in the group before there are records, so that they compete for
            # them (a member alone would take them all).
            _poll(c, 1.0)
            joined.wait(60)
            deadline = time.monotonic() + 90
            while not stop.is_set() and time.monotonic() < deadline:
                for m in _poll(c, 0.5):
                    with lock:
                        seen[(m.partition(), m.offset())].append((name, m.delivery_count()))
                        if len(seen) >= n:
                            stop.set()
            c.commit_sync()
            c.close()
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(f"c{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    joined.wait(60)
    _produce(broker.bootstrap, topic, 2, n)
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert len(seen) == n, f"{len(seen)} of {n} records delivered"
    twice = {k: v for k, v in seen.items() if len(v) != 1}
    assert not twice, f"delivered more than once: {dict(list(twice.items())[:5])}"
    consumers = {v[0][0] for v in seen.values()}
    assert len(consumers) >= 2, f"records reached only {consumers}"
    # Everything was accepted: a new member of the group gets nothing.
    c = _consumer(broker.bootstrap, group)
    c.subscribe([topic])
    more = []
    for _ in range(6):
        more += _poll(c, 0.5)
    c.close()
    assert more == [], f"{len(more)} records delivered again"


def test_release_and_reject(broker):
    topic, group = unique("share-ack-py"), unique("sg-ack-py")
    create_topic(broker.bootstrap, topic, 1)
    _earliest(broker.bootstrap, group)
    _produce(broker.bootstrap, topic, 1, 12)
    deliveries = collections.defaultdict(list)
    c = _consumer(broker.bootstrap, group, explicit=True)
    c.subscribe([topic])
    done = set()
    deadline = time.monotonic() + 60
    while len(done) < 12 and time.monotonic() < deadline:
        for m in _poll(c, 0.5):
            deliveries[m.offset()].append(m.delivery_count())
            if m.offset() % 3 == 0 and m.delivery_count() == 1:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            elif m.offset() % 3 == 1:
                c.acknowledge(m, AcknowledgeType.REJECT)
                done.add(m.offset())
            else:
                c.acknowledge(m, AcknowledgeType.ACCEPT)
                done.add(m.offset())
        c.commit_sync()
    for _ in range(4):
        for m in _poll(c, 0.5):
            deliveries[m.offset()].append(m.delivery_count())
            c.acknowledge(m, AcknowledgeType.ACCEPT)
    c.commit_sync()
    c.close()
    for o in range(12):
        want = [1, 2] if o % 3 == 0 else [1]
        assert deliveries[o] == want, f"offset {o}: deliveries {deliveries[o]}"


def test_records_of_a_consumer_gone_without_acknowledging_come_again(broker):
    topic, group = unique("share-gone-py"), unique("sg-gone-py")
    create_topic(broker.bootstrap, topic, 1)
    _earliest(broker.bootstrap, group)
    _produce(broker.bootstrap, topic, 1, 20)
    a = _consumer(broker.bootstrap, group, explicit=True)
    a.subscribe([topic])
    held = []
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        held = _poll(a, 0.5)
    assert held, "a got nothing"
    a.close()
    closed = time.monotonic()
    b = _consumer(broker.bootstrap, group)
    b.subscribe([topic])
    again = {}
    while len(again) < len(held) and time.monotonic() - closed < 20:
        for m in _poll(b, 0.5):
            again[m.offset()] = m.delivery_count()
    b.commit_sync()
    b.close()
    took = time.monotonic() - closed
    assert sorted(again) == sorted(m.offset() for m in held), \
        f"after {took:.1f}s: {sorted(again)}"
    assert set(again.values()) == {2}, again
    # Well before the 30 s the locks would have lasted.
    assert took < 20
