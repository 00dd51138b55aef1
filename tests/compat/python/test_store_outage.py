"""An outage of the metadata store (PostgreSQL stopped for longer than a broker session) must not
change what the brokers tell clients about the cluster: every Metadata response still names every
broker, and the partitions keep their leaders.

Why it matters: when PostgreSQL comes back, every broker session in it has expired, and each
broker reads its view back before its peers have renewed. A broker that then left its peers out
of Metadata made librdkafka (2.10 and later) tear down its connections to them and fail the
produce requests in flight there as not persisted, although they were on their way to
durability; after an epoch bump (another partition's error) it sent those records again under
new sequence numbers, and the chaos suite read them twice.

Runs in cluster mode (WEIR_COMPAT_TARGET=cluster) only.
"""

import os
import struct
import threading
import time

import pytest

import kproto as kp
from compat_util import check_exactly_once, create_topic, metric

pytestmark = pytest.mark.skipif(
    os.environ.get("WEIR_COMPAT_TARGET", "").strip().lower() != "cluster",
    reason="a store outage needs the cluster's PostgreSQL (WEIR_COMPAT_TARGET=cluster)")

SESSION = {
    "WEIR_CLUSTER_SESSION_TIMEOUT_MS": "3000",
    "WEIR_CLUSTER_HEARTBEAT_INTERVAL_MS": "500",
    "WEIR_CLUSTER_CLOCK_DRIFT_MARGIN_MS": "250",
}


def _metadata(sock, corr, topic):
    """Metadata v1 for `topic`: (broker ids, {partition: leader})."""
    body = kp.i32(1) + kp.string(topic)
    payload = kp.roundtrip(sock, kp.request_header_v1(3, 1, corr) + body)
    r = kp.Reader(payload)
    assert r.i32() == corr
    brokers = []
    for _ in range(r.i32()):
        node = r.i32()
        r.string()
        r.i32()
        r.string()  # rack, nullable
        brokers.append(node)
    r.i32()  # controller
    leaders = {}
    for _ in range(r.i32()):
        r.i16()  # topic error
        r.string()
        r.i8()  # internal
        for _ in range(r.i32()):
            r.i16()
            index = r.i32()
            leaders[index] = r.i32()
            for _ in range(2):  # replicas, isr
                for _ in range(r.i32()):
                    r.i32()
    return sorted(brokers), leaders


def _poll(broker, topic, stop, seen):
    """Metadata from `broker` every 20 ms until `stop`; appends (time, brokers, leaders)."""
    corr = 0
    sock = None
    while not stop.is_set():
        try:
            if sock is None:
                sock = kp.connect(broker.host, broker.port, timeout=2)
            corr += 1
            brokers, leaders = _metadata(sock, corr, topic)
            seen.append((time.monotonic(), brokers, leaders))
        except (OSError, ValueError, AssertionError, struct.error):
            if sock is not None:
                sock.close()
            sock = None
        time.sleep(0.02)
    if sock is not None:
        sock.close()


def test_metadata_names_every_broker_through_a_store_outage(broker_factory):
    c = broker_factory.cluster("store-outage", env=SESSION)
    topic = "store-outage"
    create_topic(c.bootstrap, topic, partitions=6)
    ids = sorted(b.node_id for b in c.brokers)
    deadline = time.monotonic() + 30
    while True:
        with kp.connect(c.brokers[0].host, c.brokers[0].port) as s:
            brokers, leaders = _metadata(s, 1, topic)
        if brokers == ids and len(leaders) == 6 and all(l in ids for l in leaders.values()):
            break
        assert time.monotonic() < deadline, f"cluster not settled: {brokers} {leaders}"
        time.sleep(0.2)

    stop = threading.Event()
    seen = {b.node_id: [] for b in c.brokers}
    threads = [threading.Thread(target=_poll, args=(b, topic, stop, seen[b.node_id]), daemon=True)
               for b in c.brokers]
    for t in threads:
        t.start()
    time.sleep(1)
    # Longer than a session: every session in the store has expired when it comes back.
    _, _, _, back = c.pg.restart(4.5)
    time.sleep(5)
    stop.set()
    for t in threads:
        t.join(10)

    for node, answers in seen.items():
        after = [a for a in answers if a[0] >= back]
        assert after, f"broker {node} answered no Metadata after the store came back"
        short = [(round(t - back, 2), b) for t, b, _ in answers if b != ids]
        assert not short, (f"broker {node} left brokers out of Metadata "
                           f"(seconds after the store came back, brokers named): {short[:10]}")
        leaderless = [(round(t - back, 2), l) for t, _, l in answers
                      if any(v not in ids for v in l.values())]
        assert not leaderless, (f"broker {node} named partitions without a leader: "
                                f"{leaderless[:10]}")


def test_an_object_wal_cluster_rides_out_a_store_outage(broker_factory):
    """Brokers without a WAL file acknowledge only once PostgreSQL has the commit: during an
    outage shorter than their patience (10 s) appends wait, and none fails - a failure would
    make the idempotent producers retry and bump their epochs. Every acknowledged record is
    read back exactly once."""
    from confluent_kafka import Producer

    c = broker_factory.cluster("store-outage-object", env={**SESSION, "WEIR_WAL_KIND": "object"})
    topic = "store-outage-object"
    partitions = 6
    create_topic(c.bootstrap, topic, partitions=partitions)
    acked, failed = [], []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(str(err))
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    p = Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "request.timeout.ms": 5000, "message.timeout.ms": 120000})
    stop = threading.Event()

    def produce():
        n = 0
        while not stop.is_set():
            p.produce(topic, value=f"r{n}".encode(), partition=n % partitions,
                      on_delivery=on_delivery)
            n += 1
            p.poll(0.005)
        p.flush(120)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    time.sleep(2)
    c.pg.restart(4.5)
    time.sleep(4)
    stop.set()
    t.join(150)
    assert not t.is_alive(), "the producer did not flush"
    assert not failed, failed[:5]
    assert len(acked) > 500, len(acked)
    for b in c.brokers:
        assert metric(b, "weir_object_wal_failures_total") == 0, \
            f"broker {b.node_id}: object WAL writes failed during the outage"

    check_exactly_once(c.bootstrap, topic, partitions, acked)
