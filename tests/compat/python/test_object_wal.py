"""The object WAL: brokers with no WAL file, and the WAL chosen per topic.

- A broker started with WEIR_WAL_KIND=object, its objects on s3s-fs, creates no WAL file;
  confluent-kafka and kafka-python produce and consume through it (franz-go does too: the Go
  suite's object-WAL cluster run in tests/compat/run-all.sh); every acknowledgement is an object already
  committed (the broker's object WAL meters count them).
- One broker with the default file WAL serves one topic on each kind: `weir.wal.kind` is
  accepted by CreateTopics and IncrementalAlterConfigs, shown by DescribeConfigs, refused when
  it names no kind, and a topic moved to the object WAL while producers write keeps every
  record in order.
- kill -9 under idempotent load on a broker without a WAL file: every acknowledged record is
  read back once, in order, at its offset (nothing to recover: what was acknowledged was in
  object storage and committed).

Cluster behaviour (failover without recovery, a paused broker refused after replacement) is in
the chaos suite's object-WAL run (tests/chaos, `--wal-kind object`).
"""

import os
import tempfile
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import KafkaConsumer, KafkaProducer

from compat_util import admin, create_topic, unique
from conftest import S3_BUCKET, S3sFs
from test_kill import PARTITIONS, NumberedProducer, _metric, _read_everything, _verify

pytestmark = pytest.mark.single_broker("starts brokers of its own with WAL settings")

WEIR_ONLY = pytest.mark.skipif(os.environ.get("WEIR_TEST_BROKER", "weir") != "weir",
                               reason="the object WAL is Weir's")

# A small WAL file (unused by object-WAL topics) and a short linger, as tests want.
SMALL = {"WEIR_WAL_CAPACITY": str(32 << 20), "WEIR_WAL_FORMAT": "false"}


@pytest.fixture(scope="module")
def diskless(broker_factory):
    """A broker without a WAL file, its objects on s3s-fs (a real S3-protocol server)."""
    if os.environ.get("WEIR_TEST_BROKER", "weir") != "weir":
        pytest.skip("the object WAL is Weir's")
    root = tempfile.mkdtemp(prefix="diskless-s3-", dir=broker_factory.base)
    s3 = S3sFs(root)
    s3.start()
    b = broker_factory.new("diskless", start=False,
                           env={**SMALL, **s3.env(), "WEIR_WAL_KIND": "object"})
    b.args = ["--object-store-url", f"s3://{S3_BUCKET}/weir"]
    try:
        b.start()
        yield b
    finally:
        broker_factory.close(b)
        s3.kill()


@pytest.fixture(scope="module")
def mixed(broker_factory):
    b = broker_factory.new("mixed", env=SMALL)
    try:
        yield b
    finally:
        broker_factory.close(b)


def _produce(bootstrap, topic, n, prefix, partitions=1):
    reports = []
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 2})
    try:
        for i in range(n):
            p.produce(topic, key=b"%s-%d" % (prefix, i), value=b"v%d" % i,
                      partition=i % partitions,
                      on_delivery=lambda err, msg: reports.append((err, msg.partition(),
                                                                   msg.offset(), msg.key())))
        assert p.flush(60) == 0
    finally:
        p.close()
    errors = [r for r in reports if r[0] is not None]
    assert not errors, errors[:5]
    assert len(reports) == n
    return reports


def _describe(bootstrap, topic):
    a = admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    return a.describe_configs([res])[res].result(timeout=30)


@WEIR_ONLY
def test_a_broker_without_a_wal_file_serves_two_clients(diskless):
    bs = diskless.bootstrap
    assert not os.path.exists(os.path.join(diskless.data_dir, "wal")), "a WAL file was created"
    topic = create_topic(bs, unique("objwal"), 2)
    reports = _produce(bs, topic, 400, b"ck", partitions=2)
    # kafka-python, a second client implementation, on the same topic.
    kp = KafkaProducer(bootstrap_servers=bs, acks="all", linger_ms=2)
    try:
        futures = [kp.send(topic, key=b"kp-%d" % i, value=b"w%d" % i, partition=i % 2)
                   for i in range(200)]
        kp.flush(60)
        metas = [f.get(timeout=60) for f in futures]
    finally:
        kp.close()
    assert len(metas) == 200
    # Read back with both clients.
    log, ends = _read_everything(bs, topic, 2)
    assert sum(ends.values()) == 600
    keys = [k for p in range(2) for _o, k, _v in log[p]]
    assert sorted(keys) == sorted([b"ck-%d" % i for i in range(400)]
                                  + [b"kp-%d" % i for i in range(200)])
    for _e, part, off, key in reports:
        assert log[part][off][1] == key, f"{key!r} not at its acknowledged offset {part}/{off}"
    kc = KafkaConsumer(bootstrap_servers=bs, auto_offset_reset="earliest",
                       enable_auto_commit=False, consumer_timeout_ms=10000)
    try:
        kc.assign([__import__("kafka").TopicPartition(topic, p) for p in range(2)])
        got = [m.key for m in kc]
    finally:
        kc.close()
    assert sorted(got) == sorted(keys)
    # Every acknowledgement came from a committed object.
    assert _metric(diskless, "weir_object_wal_objects_total") > 0
    assert _metric(diskless, "weir_object_wal_failures_total") == 0
    assert _describe(bs, topic)["weir.wal.kind"].value == "object"


@WEIR_ONLY
def test_one_broker_one_topic_on_each_wal_kind(mixed):
    bs = mixed.bootstrap
    on_file = create_topic(bs, unique("filewal"), 1)
    on_object = create_topic(bs, unique("objectwal"), 1, config={"weir.wal.kind": "object"})
    before = _metric(mixed, "weir_object_wal_objects_total")
    _produce(bs, on_file, 200, b"f")
    assert _metric(mixed, "weir_object_wal_objects_total") == before, \
        "a file-WAL topic went through the object WAL"
    _produce(bs, on_object, 200, b"o")
    assert _metric(mixed, "weir_object_wal_objects_total") > before
    assert _describe(bs, on_file)["weir.wal.kind"].value == "file"
    assert _describe(bs, on_file)["weir.wal.kind"].is_default
    assert _describe(bs, on_object)["weir.wal.kind"].value == "object"
    assert not _describe(bs, on_object)["weir.wal.kind"].is_default

    # A value that names no WAL kind is refused with INVALID_CONFIG.
    a = admin(bs)
    bad = ConfigResource(ResourceType.TOPIC, on_file, incremental_configs=[
        ConfigEntry("weir.wal.kind", "tape", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as e:
        a.incremental_alter_configs([bad])[bad].result(timeout=30)
    assert "INVALID_CONFIG" in str(e.value) or "InvalidConfig" in str(e.value), e.value

    # The file-WAL topic moves to the object WAL while a producer writes.
    producer = NumberedProducer(0, bs, on_file)
    producer.start()
    try:
        time.sleep(1.0)
        move = ConfigResource(ResourceType.TOPIC, on_file, incremental_configs=[
            ConfigEntry("weir.wal.kind", "object", incremental_operation=AlterConfigOpType.SET)])
        a.incremental_alter_configs([move])[move].result(timeout=30)
        moved_at = _metric(mixed, "weir_object_wal_objects_total")
        time.sleep(1.5)
        assert producer.finish(timeout=60) == 0
    finally:
        producer.halt.set()
        producer.producer.close()
    assert _metric(mixed, "weir_object_wal_objects_total") > moved_at, \
        "the altered topic's appends did not go through the object WAL"
    assert _describe(bs, on_file)["weir.wal.kind"].value == "object"
    log, ends = _read_everything(bs, on_file, 1)
    assert [o for o, _k, _v in log[0]] == list(range(ends[0]))
    numbered = [k for _o, k, _v in log[0] if k.startswith(b"P0-")]
    assert numbered == [b"P0-%d" % s for s in sorted(producer.acked)]


@WEIR_ONLY
def test_kill_under_idempotent_load_on_a_broker_without_a_wal_file(diskless):
    topic = create_topic(diskless.bootstrap, unique("objkill"), PARTITIONS)
    producers = [NumberedProducer(i, diskless.bootstrap, topic) for i in range(3)]
    try:
        for p in producers:
            p.start()
        deadline = time.monotonic() + 30
        while not all(p.acked_count() for p in producers):
            assert time.monotonic() < deadline, "no acknowledgement before the first kill"
            time.sleep(0.1)
        for k in range(3):
            time.sleep(1.5)
            diskless.kill()
            time.sleep(0.3)
            diskless.start()
            print(f"kill {k + 1}: acked {sum(p.acked_count() for p in producers)}")
        last = [p.acked_count() for p in producers]
        deadline = time.monotonic() + 60
        while not all(p.acked_count() > n + 50 for p, n in zip(producers, last)):
            assert time.monotonic() < deadline, "producers stalled after the last restart"
            time.sleep(0.1)
        for p in producers:
            assert p.finish(timeout=90) == 0
    finally:
        for p in producers:
            p.halt.set()
            try:
                p.producer.purge()
                p.producer.flush(0)
            except Exception:  # noqa: BLE001
                pass
    _verify(diskless, topic, producers)
    assert not os.path.exists(os.path.join(diskless.data_dir, "wal"))
