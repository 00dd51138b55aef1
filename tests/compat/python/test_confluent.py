"""Client compatibility: confluent-kafka (librdkafka).

Admin (create/describe/list/delete topics, configs, groups, offsets,
DeleteRecords), the idempotent producer, a two-member consumer group with
manual commits and a resumed member, ListOffsets by timestamp.
"""

import collections
import time

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TIMESTAMP_CREATE_TIME, TopicCollection, TopicPartition)
from confluent_kafka.admin import (AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                   NewTopic, OffsetSpec, ResourceType)

try:  # confluent-kafka >= 2.0
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions
except ImportError:  # pragma: no cover
    from confluent_kafka.admin import ConsumerGroupState, ConsumerGroupTopicPartitions

from compat_util import admin, create_topic, eventually, unique, wait_for_partitions

PARTITIONS = 4
KEYS = 40


def _error_code(exc):
    assert isinstance(exc, KafkaException), f"expected KafkaException, got {exc!r}"
    return exc.args[0].code()


def _idempotent_producer(clients, bootstrap, **extra):
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "message.timeout.ms": 30000}
    conf.update(extra)
    return clients.add(Producer(conf))


def _commit(consumer):
    """Synchronous commit of the consumed positions; nothing consumed since the
    last commit is not an error."""
    try:
        consumer.commit(asynchronous=False)
    except KafkaException as e:
        if e.args[0].code() != KafkaError._NO_OFFSET:
            raise


def _produce(producer, topic, records, reports):
    """records: iterable of (key, value[, partition[, timestamp]])."""
    def cb(err, msg):
        reports.append((err, msg.key(), msg.value(), msg.partition(), msg.offset()))

    for rec in records:
        key, value = rec[0], rec[1]
        kw = {}
        if len(rec) > 2 and rec[2] is not None:
            kw["partition"] = rec[2]
        if len(rec) > 3:
            kw["timestamp"] = rec[3]
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=cb, **kw)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    remaining = producer.flush(60)
    assert remaining == 0, f"{remaining} records still undelivered after flush"


# --------------------------------------------------------------------- topics
def test_create_topic_twice_gives_topic_already_exists(broker):
    a = admin(broker.bootstrap)
    topic = unique("create")
    fs = a.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                         operation_timeout=30)
    assert fs[topic].result(timeout=30) is None
    wait_for_partitions(a, topic, PARTITIONS)

    fs = a.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)],
                         operation_timeout=30)
    with pytest.raises(KafkaException) as ei:
        fs[topic].result(timeout=30)
    assert _error_code(ei.value) == KafkaError.TOPIC_ALREADY_EXISTS

    # The failed second create did not change the topic.
    md = a.list_topics(topic=topic, timeout=10)
    assert len(md.topics[topic].partitions) == PARTITIONS

    # Invalid requests are rejected with their own errors.
    bad = unique("bad")
    fs = a.create_topics([NewTopic(bad, num_partitions=0, replication_factor=1)])
    with pytest.raises(KafkaException) as ei:
        fs[bad].result(timeout=30)
    assert _error_code(ei.value) == KafkaError.INVALID_PARTITIONS


def test_describe_list_and_delete_topic(broker):
    a = admin(broker.bootstrap)
    topic = create_topic(broker.bootstrap, unique("describe"), PARTITIONS)

    md = a.list_topics(timeout=10)
    assert topic in md.topics
    # Every broker of the target (one, or a cluster's three), each at the address it
    # listens on.
    assert {(n.host, n.port) for n in md.brokers.values()} == broker.addresses, md.brokers
    t = md.topics[topic]
    assert sorted(t.partitions) == list(range(PARTITIONS))
    for p in t.partitions.values():
        assert p.leader in md.brokers
        assert list(p.replicas) == [p.leader]
        assert list(p.isrs) == [p.leader]

    desc = a.describe_topics(TopicCollection([topic]))[topic].result(timeout=30)
    assert desc.name == topic
    assert not desc.is_internal
    # Kafka >= 2.8 gives every topic a non-zero id (Fetch v13+ uses it).
    assert desc.topic_id is not None and str(desc.topic_id) != "AAAAAAAAAAAAAAAAAAAAAA"
    assert [p.id for p in desc.partitions] == list(range(PARTITIONS))
    for p in desc.partitions:
        leader = t.partitions[p.id].leader
        assert p.leader.id == leader
        assert [r.id for r in p.replicas] == [leader]
        assert [r.id for r in p.isr] == [leader]

    missing = unique("missing")
    with pytest.raises(KafkaException) as ei:
        a.describe_topics(TopicCollection([missing]))[missing].result(timeout=30)
    assert _error_code(ei.value) == KafkaError.UNKNOWN_TOPIC_OR_PART

    # DeleteTopics: the topic disappears from the metadata.
    a.delete_topics([topic], operation_timeout=30)[topic].result(timeout=30)
    deadline = time.monotonic() + 30
    while topic in a.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "deleted topic still listed after 30s"
        time.sleep(0.2)


def _topic_configs(a, topic):
    res = ConfigResource(ResourceType.TOPIC, topic)
    return a.describe_configs([res])[res].result(timeout=30)


def test_alter_and_describe_topic_config(broker):
    a = admin(broker.bootstrap)
    topic = create_topic(broker.bootstrap, unique("config"), 2)

    cfg = _topic_configs(a, topic)
    assert cfg["retention.ms"].value == "604800000"  # Kafka's default: 7 days
    assert cfg["retention.ms"].is_default
    assert "cleanup.policy" in cfg and cfg["cleanup.policy"].value == "delete"

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(timeout=30)

    def altered():
        cfg = _topic_configs(a, topic)
        assert cfg["retention.ms"].value == "3600000"
        assert not cfg["retention.ms"].is_default
        assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    eventually(altered)

    # A topic created with a config shows it.
    topic2 = create_topic(broker.bootstrap, unique("config2"), 1, config={"retention.ms": "7200000"})

    def created():
        assert _topic_configs(a, topic2)["retention.ms"].value == "7200000"
    eventually(created)

    # A value that is not a number is rejected with INVALID_CONFIG.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "not-a-number", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as ei:
        a.incremental_alter_configs([res])[res].result(timeout=30)
    assert _error_code(ei.value) == KafkaError.INVALID_CONFIG
    assert _topic_configs(a, topic)["retention.ms"].value == "3600000"

    # DELETE returns to the default.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    a.incremental_alter_configs([res])[res].result(timeout=30)

    def deleted():
        cfg = _topic_configs(a, topic)
        assert cfg["retention.ms"].value == "604800000" and cfg["retention.ms"].is_default
    eventually(deleted)


# ---------------------------------------------------- producer + consumer group
class Member:
    """One consumer-group member driven from the test thread. It records every
    record it is handed, and commits its position synchronously when
    partitions are revoked (the usual at-least-once pattern), unless
    commit_on_revoke is turned off (to simulate a member that dies with
    uncommitted work)."""

    def __init__(self, clients, bootstrap, group, topic, name, log, run):
        self.name = name
        self.log = log
        self.run = run
        self.commit_on_revoke = True
        self.revoke_errors = []
        self.c = clients.add(Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }))
        self.c.subscribe([topic], on_revoke=self._on_revoke)

    def _on_revoke(self, consumer, partitions):
        if not self.commit_on_revoke:
            return
        try:
            _commit(consumer)
        except KafkaException as e:
            self.revoke_errors.append(e.args[0])

    def poll(self, timeout=0.05, limit=None):
        got = 0
        while limit is None or got < limit:
            m = self.c.poll(timeout)
            if m is None:
                return got
            if m.error():
                raise KafkaException(m.error())
            self.log.append((self.run, self.name, m.partition(), m.offset(), m.key(), m.value()))
            got += 1
            timeout = 0
        return got

    def assignment(self):
        return frozenset(tp.partition for tp in self.c.assignment())


def _wait_stable_split(members, partitions, timeout=60, settle=1.5, extra=None):
    """Poll every member until each holds a non-empty, disjoint share of the
    partitions that together cover them all, and nothing changed for
    `settle` seconds. Returns the assignments."""
    deadline = time.monotonic() + timeout
    last, since = None, None
    while time.monotonic() < deadline:
        for m in members:
            m.poll(0.05)
        asg = [m.assignment() for m in members]
        ok = (all(asg) and sum(len(x) for x in asg) == partitions
              and frozenset().union(*asg) == frozenset(range(partitions)))
        if ok and asg == last:
            if time.monotonic() - since >= settle and (extra is None or extra()):
                return asg
        else:
            since = time.monotonic()
        last = asg if ok else None
    raise AssertionError(f"no stable split of {partitions} partitions among "
                         f"{[m.name for m in members]}: {last or asg}")


def _consumed_positions(log, run=None):
    seen = collections.defaultdict(set)
    for r, _name, p, o, _k, _v in log:
        if run is None or r == run:
            seen[p].add(o)
    return seen


def test_idempotent_produce_consumer_group_commit_and_resume(broker, clients):
    bs = broker.bootstrap
    a = admin(bs)
    topic = create_topic(bs, unique("group"), PARTITIONS)
    group = unique("grp")
    log = []  # (run, member, partition, offset, key, value)

    # Two members split the partitions before any data exists.
    c1 = Member(clients, bs, group, topic, "c1", log, 1)
    c2 = Member(clients, bs, group, topic, "c2", log, 1)
    a1, a2 = _wait_stable_split([c1, c2], PARTITIONS)
    assert a1.isdisjoint(a2) and a1 | a2 == set(range(PARTITIONS))

    # The group as the admin API sees it.
    listed = a.list_consumer_groups().result(timeout=30)
    assert group in {g.group_id for g in listed.valid}, listed.valid
    desc = a.describe_consumer_groups([group])[group].result(timeout=30)
    assert desc.state == ConsumerGroupState.STABLE
    assert not desc.is_simple_consumer_group
    assert desc.partition_assignor == "range"
    assert sorted(m.client_id for m in desc.members) == ["c1", "c2"]
    by_client = {m.client_id: frozenset(tp.partition for tp in m.assignment.topic_partitions)
                 for m in desc.members}
    assert by_client == {"c1": a1, "c2": a2}

    # Idempotent, keyed produce: 2000 records, delivery reports checked.
    n1 = 2000
    producer = _idempotent_producer(clients, bs)
    reports = []
    _produce(producer, topic, [(f"key-{i % KEYS}".encode(), f"{i}".encode()) for i in range(n1)],
             reports)
    assert len(reports) == n1
    errors = [r for r in reports if r[0] is not None]
    assert not errors, f"delivery errors: {errors[:5]}"
    produced = {}  # (partition, offset) -> (key, value)
    for _err, k, v, p, o in reports:
        assert (p, o) not in produced, f"offset {p}/{o} reported twice"
        produced[(p, o)] = (k, v)
    hw1 = collections.Counter(p for p, _o in produced)
    assert set(hw1) == set(range(PARTITIONS)), f"keys did not spread over partitions: {hw1}"
    for p, n in hw1.items():  # offsets are dense from 0 in each partition
        assert sorted(o for q, o in produced if q == p) == list(range(n))
    key_partition = {}
    for (p, _o), (k, _v) in produced.items():
        assert key_partition.setdefault(k, p) == p, f"key {k} in two partitions"

    # Run 1: each member consumes its own partitions to the end, then commits.
    deadline = time.monotonic() + 60
    while True:
        c1.poll(0.05, limit=500)
        c2.poll(0.05, limit=500)
        seen = _consumed_positions(log)
        if all(len(seen[p]) >= hw1[p] for p in range(PARTITIONS)):
            break
        assert time.monotonic() < deadline, f"run 1 incomplete: { {p: len(s) for p, s in seen.items()} }"
    for _r, name, p, _o, _k, _v in log:
        assert p in (a1 if name == "c1" else a2), f"{name} got a record of partition {p}"
    assert c1.assignment() == a1 and c2.assignment() == a2, "unexpected rebalance during run 1"
    for m, asg in ((c1, a1), (c2, a2)):
        _commit(m.c)
        committed = m.c.committed([TopicPartition(topic, p) for p in asg], timeout=30)
        assert {tp.partition: tp.offset for tp in committed} == {p: hw1[p] for p in asg}

    # Phase 2: 1000 more records; c1 consumes 100 of them and dies without committing.
    n2 = 1000
    _produce(producer, topic,
             [(f"key-{i % KEYS}".encode(), f"{i}".encode()) for i in range(n1, n1 + n2)], reports)
    assert all(r[0] is None for r in reports), "delivery errors in phase 2"
    assert len(reports) == n1 + n2
    for _err, k, v, p, o in reports[n1:]:
        assert (p, o) not in produced
        produced[(p, o)] = (k, v)
        assert key_partition.setdefault(k, p) == p
    hw2 = collections.Counter(p for p, _o in produced)

    start = len(log)
    deadline = time.monotonic() + 30
    while len(log) - start < 100:
        c1.poll(0.1, limit=100 - (len(log) - start))
        assert time.monotonic() < deadline, "c1 could not read 100 records of phase 2"
    uncommitted = {(p, o) for _r, _n, p, o, _k, _v in log[start:]}
    assert len(uncommitted) == 100
    c1.commit_on_revoke = False
    c1.c.close()

    # Run 2: a restarted c1 joins; the group splits again and resumes from the
    # committed offsets.
    c1b = Member(clients, bs, group, topic, "c1-restarted", log, 2)
    c2.run = 2

    def complete():
        seen = _consumed_positions(log, run=2)
        return all(seen[p] >= set(range(hw1[p], hw2[p])) for p in range(PARTITIONS))

    b1, b2 = _wait_stable_split([c1b, c2], PARTITIONS, timeout=90, extra=complete)
    assert b1.isdisjoint(b2) and b1 | b2 == set(range(PARTITIONS))
    assert not c2.revoke_errors, f"commits on revoke failed: {c2.revoke_errors}"

    desc = a.describe_consumer_groups([group])[group].result(timeout=30)
    assert desc.state == ConsumerGroupState.STABLE
    assert sorted(m.client_id for m in desc.members) == ["c1-restarted", "c2"]

    for m in (c1b, c2):
        _commit(m.c)
    got = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    committed = {tp.partition: tp.offset for tp in got.topic_partitions if tp.topic == topic}
    assert committed == dict(hw2), f"committed {committed} != end offsets {dict(hw2)}"
    c1b.c.close()
    c2.c.close()

    # Every record was consumed; it was what was produced there; the only
    # records consumed twice are the ones c1 read but never committed.
    counts = collections.Counter((p, o) for _r, _n, p, o, _k, _v in log)
    assert set(counts) == set(produced), (
        f"missing {sorted(set(produced) - set(counts))[:10]}, "
        f"unexpected {sorted(set(counts) - set(produced))[:10]}")
    for _r, _n, p, o, k, v in log:
        assert produced[(p, o)] == (k, v), f"record at {p}/{o} differs from what was produced"
    twice = {po for po, n in counts.items() if n > 1}
    assert twice == uncommitted, (
        f"consumed twice but committed: {sorted(twice - uncommitted)[:10]}; "
        f"uncommitted but not redelivered: {sorted(uncommitted - twice)[:10]}")
    assert max(counts.values()) == 2
    for r, _n, p, o, _k, _v in log:
        if r == 2:
            assert o >= hw1[p], f"run 2 re-read committed offset {p}/{o}"

    # Per key: one partition, produce order (sequence numbers grow with offsets).
    per_key = collections.defaultdict(list)
    for (p, o), (k, v) in sorted(produced.items()):
        per_key[k].append((p, o, int(v)))
    for k, recs in per_key.items():
        assert len({p for p, _o, _s in recs}) == 1
        seqs = [s for _p, _o, s in recs]
        assert seqs == sorted(seqs), f"key {k}: records out of produce order"
        assert seqs == [s for s in range(n1 + n2) if f"key-{s % KEYS}".encode() == k]


# ------------------------------------------------------ ListOffsets by time
def test_offsets_for_times(broker, clients):
    bs = broker.bootstrap
    topic = create_topic(bs, unique("times"), 1)
    base = int(time.time() * 1000) - 3_600_000
    producer = _idempotent_producer(clients, bs, **{"linger.ms": 200})
    reports = []
    # Records 0-9 in one batch, 10-19 in a batch each; timestamps base + i s.
    _produce(producer, topic, [(b"k", f"{i}".encode(), 0, base + i * 1000) for i in range(10)],
             reports)
    for i in range(10, 20):
        _produce(producer, topic, [(b"k", f"{i}".encode(), 0, base + i * 1000)], reports)
    assert [r[4] for r in reports] == list(range(20)) and all(r[0] is None for r in reports)

    c = clients.add(Consumer({"bootstrap.servers": bs, "group.id": unique("times"),
                              "enable.auto.commit": False}))
    try:
        queries = {
            base - 60_000: 0,         # before everything: the first record
            base: 0,                  # exact first timestamp
            base + 3_500: 4,          # inside the first batch
            base + 5_000: 5,          # exact, inside the first batch
            base + 9_999: 10,         # first record of the second batch
            base + 12_500: 13,        # between single-record batches
            base + 19_000: 19,        # exact last
            base + 19_001: -1,        # after everything: no offset (-1)
        }
        for ts, want in queries.items():
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=30)
            assert tp.error is None
            assert tp.offset == want, f"offsets_for_times({ts - base:+d}ms) = {tp.offset}, want {want}"

        # The consumer sees the explicit timestamps.
        c.assign([TopicPartition(topic, 0, 0)])
        msgs = []
        deadline = time.monotonic() + 30
        while len(msgs) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                msgs.append(m)
        assert [m.timestamp() for m in msgs] == [(TIMESTAMP_CREATE_TIME, base + i * 1000)
                                                 for i in range(20)]
    finally:
        c.close()

    # The same through the admin API's ListOffsets.
    a = admin(bs)
    tp = TopicPartition(topic, 0)
    for spec, want in ((OffsetSpec.earliest(), 0), (OffsetSpec.latest(), 20),
                       (OffsetSpec.for_timestamp(base + 3_500), 4),
                       (OffsetSpec.max_timestamp(), 19)):
        res = a.list_offsets({tp: spec})[tp].result(timeout=30)
        assert res.offset == want, f"list_offsets({spec}) = {res.offset}, want {want}"
    res = a.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    assert res.timestamp == base + 19_000


# ------------------------------------------------------------- DeleteRecords
def test_delete_records_moves_low_watermark(broker, clients):
    bs = broker.bootstrap
    topic = create_topic(bs, unique("delrec"), 2)
    producer = _idempotent_producer(clients, bs)
    reports = []
    _produce(producer, topic, [(None, f"{p}-{i}".encode(), p) for p in (0, 1) for i in range(100)],
             reports)
    assert all(r[0] is None for r in reports)

    a = admin(bs)
    tp0 = TopicPartition(topic, 0, 40)
    res = a.delete_records([tp0], operation_timeout=30)
    (fut,) = res.values()
    assert fut.result(timeout=30).low_watermark == 40

    c = clients.add(Consumer({"bootstrap.servers": bs, "group.id": unique("delrec"),
                              "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (40, 100)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=30) == (0, 100)
        earliest = a.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
        assert list(earliest.values())[0].result(timeout=30).offset == 40

        # A consumer from the beginning starts at the new low watermark.
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        first = _first_message(c)
        assert (first.offset(), first.value()) == (40, b"0-40")

        # Fetching below the low watermark is out of range: auto.offset.reset=earliest -> 40.
        c.unassign()
        c.assign([TopicPartition(topic, 0, 10)])
        first = _first_message(c)
        assert first.offset() == 40
    finally:
        c.close()

    # Deleting past the high watermark is OFFSET_OUT_OF_RANGE.
    res = a.delete_records([TopicPartition(topic, 1, 1000)], operation_timeout=30)
    with pytest.raises(KafkaException) as ei:
        list(res.values())[0].result(timeout=30)
    assert _error_code(ei.value) == KafkaError.OFFSET_OUT_OF_RANGE


def _first_message(c, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                continue
            raise KafkaException(m.error())
        return m
    raise AssertionError("no message")
