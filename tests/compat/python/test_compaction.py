"""Compacted topics (cleanup.policy=compact), checked against Kafka's rules with a real client:
the latest value of each key survives at the offset it was written at, superseded values go,
tombstones go once delete.retention.ms has passed after a clean saw them, and a read from the
beginning skips the removed offsets. Passes against Kafka 4.1 (WEIR_TEST_BROKER=kafka) too.

The part of the log that is never cleaned differs (Kafka: the active segment; Weir: the last
range in object storage): each round of writes is followed by a later round, so the rounds
checked are never the last one, and segment.ms (Kafka) rolls a segment per round."""

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from compat_util import create_topic, eventually, unique

ROUND_GAP = 1.5  # seconds between rounds: Kafka's segment.ms (1 s) rolls a segment per round


def _produce(bootstrap, topic, records):
    """Writes the records to partition 0; returns what was acknowledged: [(offset, key, value)]."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0})
    acked = []

    def report(err, msg):
        assert err is None, err
        key = msg.key().decode()
        value = msg.value().decode() if msg.value() is not None else None
        acked.append((msg.offset(), key, value))

    for k, v in records:
        p.produce(topic, key=k, value=v, partition=0, on_delivery=report)
    assert p.flush(30) == 0
    assert len(acked) == len(records)
    return acked


def _log(bootstrap, topic, timeout=30):
    """Every record of partition 0 from the start: [(offset, key, value)]."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"),
                  "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(f"reading {topic}: {m.error()}")
            key = m.key().decode() if m.key() is not None else None
            value = m.value().decode() if m.value() is not None else None
            out.append((m.offset(), key, value))
        raise AssertionError(f"reading {topic} did not reach its end in {timeout} s")
    finally:
        c.close()


def test_compaction_keeps_the_latest_value_of_each_key(broker):
    topic = unique("compacted")
    create_topic(broker.bootstrap, topic, 1, {
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
        "segment.ms": "1000",
        "delete.retention.ms": "1000",
        "min.compaction.lag.ms": "0",
    })
    # Round 1: ten keys. Round 2: new values for k0..k3, tombstones for k4 and k5.
    acked = _produce(broker.bootstrap, topic, [(f"k{i}", f"v1-{i}") for i in range(10)])
    time.sleep(ROUND_GAP)
    acked += _produce(broker.bootstrap, topic, [(f"k{i}", f"v2-{i}") for i in range(4)]
                      + [("k4", None), ("k5", None)])
    time.sleep(ROUND_GAP)
    # Round 3 makes rounds 1 and 2 cleanable.
    acked += _produce(broker.bootstrap, topic, [("k9", "v3-9")])
    time.sleep(ROUND_GAP)
    acked += _produce(broker.bootstrap, topic, [("k8", "v4-8")])
    assert sorted(o for o, _, _ in acked) == list(range(18))
    written = {o: (k, v) for o, k, v in acked}

    superseded = {0, 1, 2, 3, 4, 5}  # k0..k3 by round 2, k4 and k5 by their tombstones

    def cleaned():
        log = _log(broker.bootstrap, topic)
        left = {o for o, _, _ in log} & superseded
        assert not left, f"superseded offsets {sorted(left)} not cleaned yet"
        return log

    log = eventually(cleaned, timeout=90, interval=1.0)
    # Survivors are exactly what was written at those offsets (offsets never change), in order.
    assert all(written[o] == (k, v) for o, k, v in log), log
    assert [o for o, _, _ in log] == sorted(o for o, _, _ in log)
    latest = {}
    for o, (k, v) in sorted(written.items()):
        latest[k] = (o, v)
    for k, (o, v) in latest.items():
        if v is not None:
            assert (o, k, v) in log, f"the latest value of {k} (offset {o}) is gone"
    # Every key still has exactly its latest value in the cleaned rounds.
    survivors_1_2 = [(o, k) for o, k, _ in log if o < 16]
    assert len({k for _, k in survivors_1_2}) == len(survivors_1_2), log

    # Tombstones go once delete.retention.ms has passed after a clean saw them; a later round
    # of writes makes the cleaner pass again.
    time.sleep(1.5)
    _produce(broker.bootstrap, topic, [("k7", "v5-7")])
    time.sleep(ROUND_GAP)
    _produce(broker.bootstrap, topic, [("k6", "v6-6")])
    tombstones = {o for o, (k, v) in written.items() if v is None}
    assert tombstones == {14, 15}

    def tombstones_gone():
        log = _log(broker.bootstrap, topic)
        left = {o for o, _, _ in log} & tombstones
        assert not left, f"tombstones at {sorted(left)} still there"
        return log

    log = eventually(tombstones_gone, timeout=90, interval=1.0)
    keys = {k for _, k, _ in log}
    assert "k4" not in keys and "k5" not in keys, log
    assert ("k0", "v2-0") in {(k, v) for _, k, v in log}


def test_a_compacted_topic_refuses_records_without_a_key(broker):
    topic = unique("compacted-keyless")
    create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0,
                  "compression.type": "none", "message.send.max.retries": 0})
    errors = []
    p.produce(topic, value=b"no key", partition=0,
              on_delivery=lambda err, msg: errors.append(err))
    p.flush(30)
    assert len(errors) == 1 and errors[0] is not None, errors
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
