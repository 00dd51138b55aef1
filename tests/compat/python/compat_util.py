"""Helpers shared by the Python compatibility tests (not a test module)."""

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def unique(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def admin(bootstrap):
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap, name, partitions, config=None, timeout=30):
    """Create a topic through the admin API and wait until every partition
    has a leader in the metadata."""
    a = admin(bootstrap)
    fs = a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                   config=config or {})], operation_timeout=timeout)
    fs[name].result(timeout=timeout)
    wait_for_partitions(a, name, partitions, timeout)
    return name


def wait_for_partitions(a, topic, partitions, timeout=30):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = a.list_topics(topic=topic, timeout=5)
        t = md.topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 and p.error is None for p in t.partitions.values()):
            return md
        last = t
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready with {partitions} partitions: {last}")


def produce_and_consume_check(bootstrap, label="sanity"):
    """The broker still serves a normal client: produce one record with an
    idempotent producer and read it back."""
    topic = unique(f"{label}-check")
    create_topic(bootstrap, topic, 1)
    value = uuid.uuid4().hex.encode()
    reports = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "message.timeout.ms": 20000})
    p.produce(topic, value=value, key=b"k",
              on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert p.flush(25) == 0, "sanity produce did not complete"
    assert reports and reports[0][0] is None, f"sanity produce failed: {reports}"
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("sanity"),
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            assert m.value() == value and m.offset() == reports[0][1]
            return
        raise AssertionError("sanity consume did not return the record")
    finally:
        c.close()


# ---------------------------------------------------------------------------
# CRC-32C (Castagnoli), used by Kafka RecordBatch v2. Table-driven, pure Python.
_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _CRC32C_TABLE
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


_RETRIABLE = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
              KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
              KafkaError.LEADER_NOT_AVAILABLE, KafkaError._TRANSPORT}


def retry(fn, timeout=30):
    """fn() again while it fails with a retriable error (the group coordinator
    is still loading on a fresh broker, a new partition has no leader yet, ...)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except KafkaException as e:
            err = e.args[0]
            if time.monotonic() > deadline or not (err.retriable() or err.code() in _RETRIABLE):
                raise
            time.sleep(0.2)


def eventually(check, timeout=15, interval=0.1):
    """Call check() until it stops raising AssertionError (Kafka applies some
    admin changes, e.g. topic configs, asynchronously: a describe right after
    an alter can still show the old value)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(interval)


def check_exactly_once(bootstrap, topic, partitions, acked, timeout=120):
    """Reads every partition of `topic` from the start (a fresh consumer, no group offsets) and
    checks that each acknowledged (partition, offset, value) is there and that no value was
    read twice."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("exactly-once-check"),
                  "enable.auto.commit": False})
    ends = {i: c.get_watermark_offsets(TopicPartition(topic, i), timeout=30)[1]
            for i in range(partitions)}
    c.assign([TopicPartition(topic, i, 0) for i in range(partitions)])
    read = {}
    deadline = time.monotonic() + timeout
    while len(read) < sum(ends.values()):
        assert time.monotonic() < deadline, "read-back timed out"
        for m in c.consume(num_messages=2000, timeout=1.0):
            if m.error() is None:
                read[(m.partition(), m.offset())] = m.value()
    c.close()
    for part, off, value in acked:
        assert read.get((part, off)) == value, f"{value!r} acknowledged at {part}/{off}"
    values = list(read.values())
    assert len(values) == len(set(values)), \
        f"{len(values) - len(set(values))} records read more than once"


def metric(broker, name, labels=""):
    """The value of metric `name` (with `labels`, e.g. '{goal="count"}'; without, its first
    series) on a Weir broker's /metrics."""
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{broker.aux_port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + labels + " ") or (not labels and line.startswith(name + "{")):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"metric {name}{labels} not found")
