"""Ordering under backpressure, with a real client (librdkafka).

Issue 9's reproduction: a non-idempotent producer (retries=0, five requests in
flight, linger.ms=0) sends records of alternating sizes (700,000 and 100 bytes)
to one partition while the WAL is full (a 64 MiB WAL, object-store PUTs slowed
by the fault-latency switch, so that uploads free room slowly). Weir used to
let a later, smaller request overtake one that waited for WAL room: all records
were acknowledged and some sat in the partition in the opposite order from the
one they were sent in. Kafka never reorders the requests of one connection that
all succeed; neither may Weir.

Knobs: WEIR_BACKPRESSURE_RECORDS (default 600), WEIR_BACKPRESSURE_LATENCY_MS
(default 2000).
"""

import os
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_util import create_topic, unique

RECORDS = int(os.environ.get("WEIR_BACKPRESSURE_RECORDS", "600"))
LATENCY_MS = os.environ.get("WEIR_BACKPRESSURE_LATENCY_MS", "2000")
LARGE, SMALL = 700_000, 100

pytestmark = pytest.mark.single_broker("starts one broker with a 64 MiB WAL and slowed "
                                       "object-store PUTs of its own")


@pytest.fixture
def full_wal_broker(broker_factory):
    if os.environ.get("WEIR_TEST_BROKER", "weir") != "weir":
        pytest.skip("the WAL and fault switches are Weir's")
    b = broker_factory.new("backpressure", env={
        "WEIR_WAL_CAPACITY": str(64 << 20),
        "WEIR_OBJECT_STORE_FAULT_LATENCY_MS": LATENCY_MS,
        "WEIR_WAL_FULL_WAIT_MS": "60000",
    })
    try:
        yield b
    finally:
        broker_factory.close(b)


def test_requests_of_one_connection_keep_their_order_when_the_wal_is_full(full_wal_broker):
    bootstrap = full_wal_broker.bootstrap
    topic = create_topic(bootstrap, unique("order"), 1)
    p = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": False,
        "retries": 0,
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 0,
        "batch.size": 400_000,
        "acks": "all",
        "message.timeout.ms": 120_000,
        "request.timeout.ms": 90_000,
    })
    acked, failed = {}, {}

    def report(err, msg):
        seq = int(msg.key())
        if err is None:
            acked[seq] = msg.offset()
        else:
            failed[seq] = err

    t0 = time.monotonic()
    for i in range(RECORDS):
        size = LARGE if i % 2 == 0 else SMALL
        while True:
            try:
                p.produce(topic, key=str(i).encode(), value=b"v" * size, on_delivery=report)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(180) == 0, "produce did not complete"
    print(f"produced {RECORDS} records in {time.monotonic() - t0:.1f}s")
    assert not failed, f"{len(failed)} records failed, e.g. {list(failed.items())[:3]}"
    assert len(acked) == RECORDS

    # Acknowledged offsets follow send order...
    by_offset = sorted(acked.items(), key=lambda kv: kv[1])
    inversions = [(a, b) for (a, _), (b, _) in zip(by_offset, by_offset[1:]) if b < a]
    assert not inversions, (f"{len(inversions)} pairs acknowledged out of order, "
                            f"e.g. {inversions[:5]}")

    # ...and so does what a consumer reads back.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("order"),
                  "enable.auto.commit": False, "fetch.max.bytes": 50 << 20})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        seen = []
        deadline = time.monotonic() + 90
        while len(seen) < RECORDS and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None or m.error():
                continue
            seen.append(int(m.key()))
    finally:
        c.close()
    assert len(seen) == RECORDS, f"read {len(seen)} of {RECORDS}"
    read_inversions = sum(1 for a, b in zip(seen, seen[1:]) if b < a)
    assert read_inversions == 0, f"{read_inversions} inversions in the partition"
    assert seen == list(range(RECORDS))
