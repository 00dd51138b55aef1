"""Client compatibility: kafka-python (pure Python, its own protocol code).

kafka-python 3.0.x covers everything the suite needs: KafkaAdminClient
(create/describe/list topics, describe/alter configs over both
IncrementalAlterConfigs and the legacy AlterConfigs, groups, group offsets,
delete_records), the idempotent KafkaProducer, KafkaConsumer groups with
a rebalance listener, offsets_for_times. ListOffsets with max_timestamp
(KIP-734) is covered in test_confluent.py only.
"""

import collections
import queue
import sys
import threading
import time
import traceback

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.coordinator.assignors.range import RangePartitionAssignor
import kafka.errors as Errors

from compat_util import admin, eventually, unique, wait_for_partitions

PARTITIONS = 4
KEYS = 40


@pytest.fixture
def kadmin(broker, clients):
    return clients.add(KafkaAdminClient(bootstrap_servers=broker.bootstrap,
                                        client_id="compat-admin", request_timeout_ms=30000))


def _create(kadmin, topic, partitions, configs=None):
    spec = {"num_partitions": partitions, "replication_factor": 1}
    if configs:
        spec["configs"] = configs
    res = kadmin.create_topics({topic: spec}, wait_for_metadata=True)
    (t,) = res["topics"]
    assert t["name"] == topic and t["error_code"] == 0
    return topic


def _producer(clients, bootstrap, **extra):
    conf = dict(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5,
                client_id="compat-kp-producer", request_timeout_ms=30000)
    conf.update(extra)
    return clients.add(KafkaProducer(**conf))


def _send_all(producer, topic, records):
    """records: (key, value[, partition[, timestamp_ms]]); returns the
    RecordMetadata of each, in order (every send must succeed)."""
    futures = []
    for rec in records:
        kw = {}
        if len(rec) > 2 and rec[2] is not None:
            kw["partition"] = rec[2]
        if len(rec) > 3:
            kw["timestamp_ms"] = rec[3]
        futures.append(producer.send(topic, key=rec[0], value=rec[1], **kw))
    producer.flush(timeout=60)
    return [f.get(timeout=30) for f in futures]


# --------------------------------------------------------------------- topics
def test_create_topic_twice_gives_topic_already_exists(broker, kadmin):
    topic = _create(kadmin, unique("kp-create"), PARTITIONS)
    assert topic in kadmin.list_topics()
    with pytest.raises(Errors.TopicAlreadyExistsError):
        kadmin.create_topics({topic: {"num_partitions": PARTITIONS, "replication_factor": 1}})
    res = kadmin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                               raise_errors=False)
    assert res["topics"][0]["error_code"] == Errors.TopicAlreadyExistsError.errno  # 36

    (desc,) = kadmin.describe_topics([topic])
    assert desc["error_code"] == 0 and desc["name"] == topic and not desc["is_internal"]
    assert desc["topic_id"] is not None
    parts = sorted(desc["partitions"], key=lambda p: p["partition_index"])
    assert [p["partition_index"] for p in parts] == list(range(PARTITIONS))
    cluster = kadmin.describe_cluster()
    # Every broker of the target (one, or a cluster's three), each at the address it listens on.
    assert {(n["host"], n["port"]) for n in cluster["brokers"]} == broker.addresses
    ids = {n["broker_id"] for n in cluster["brokers"]}
    for p in parts:
        assert p["error_code"] == 0
        assert p["leader_id"] in ids
        assert p["replica_nodes"] == [p["leader_id"]]
        assert p["isr_nodes"] == [p["leader_id"]]


def _retention(kadmin, topic):
    res = kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                  config_filter="all")
    return res["topic"][topic]["retention.ms"]


def test_alter_and_describe_topic_config(kadmin):
    topic = _create(kadmin, unique("kp-config"), 1)
    r = _retention(kadmin, topic)
    assert (r["value"], r["config_source"]) == ("604800000", "DEFAULT_CONFIG")

    # IncrementalAlterConfigs (KIP-339), what kafka-python uses when the broker has it.
    res = kadmin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                               configs={"retention.ms": "3600000"})],
                               incremental=True)
    assert res == {"topic": {topic: "OK"}}

    def altered():
        r = _retention(kadmin, topic)
        assert (r["value"], r["config_source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    eventually(altered)

    # The legacy AlterConfigs API (older clients, Sarama, librdkafka's alter_configs).
    res = kadmin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                               configs={"retention.ms": "7200000"})],
                               incremental=False)
    assert res == {"topic": {topic: "OK"}}

    def legacy():
        assert _retention(kadmin, topic)["value"] == "7200000"
        # Only modified configs by default.
        res = kadmin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        assert set(res["topic"][topic]) == {"retention.ms"}
    eventually(legacy)


# ---------------------------------------------------- producer + consumer group
class Member(threading.Thread):
    """A KafkaConsumer group member on its own thread (KafkaConsumer is not
    thread-safe, and a member must keep polling to take part in rebalances).

    It records every record it is handed into the shared log and, while
    commit_batches is on, commits synchronously after each batch it took
    (kafka-python 3 runs rebalance listeners on its IO loop, where a blocking
    commit() is refused, so commit-after-batch replaces commit-on-revoke).
    Records of a batch whose commit failed may legitimately come again and are
    collected in `allowed_dups`. `quota` limits how many records it still
    takes (None: no limit; 0: it stops fetching but keeps serving commands)."""

    def __init__(self, bootstrap, group, topic, name, log, lock, phase):
        super().__init__(name=f"member-{name}", daemon=True)
        self.bootstrap, self.group, self.topic, self.member_name = bootstrap, group, topic, name
        self.log, self.lock, self.phase = log, lock, phase
        self.commit_batches = True
        self.commit_errors = []
        self.allowed_dups = set()
        self.quota = None
        self.assigned = frozenset()
        self.error = None
        self.cmds = queue.Queue()
        self.consumer = None
        self._halt = threading.Event()
        self.start()

    def run(self):
        try:
            self.consumer = KafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=self.group, client_id=self.member_name,
                enable_auto_commit=False, auto_offset_reset="earliest",
                session_timeout_ms=10000, heartbeat_interval_ms=500,
                partition_assignment_strategy=[RangePartitionAssignor],
                request_timeout_ms=30000)
            self.consumer.subscribe([self.topic])
            while True:
                self._run_commands()
                if self._halt.is_set():
                    break
                if self.quota == 0:
                    time.sleep(0.02)
                    continue
                quota = self.quota
                limit = 500 if quota is None else min(500, quota)
                # A long poll: kafka-python 3.0.12 can lose a rejoin that outlasts one poll().
                # When its leader rejoins because its metadata changed (it assigned before its
                # metadata had the topic), the next poll() finds need_rejoin() false (the snapshot
                # it compares was cleared for the rejoin) and never completes the join: the
                # member stops heartbeating with an empty assignment, although the broker
                # answered its SyncGroup. A rejoin here waits for the other member's next
                # heartbeat (500 ms), so one poll of 2 s covers it. (Short polls while counting
                # records against a quota, which the test sets between polls.)
                batch = self.consumer.poll(timeout_ms=2000 if quota is None else 50,
                                           max_records=limit)
                self.assigned = frozenset(tp.partition for tp in self.consumer.assignment())
                taken = set()
                with self.lock:
                    for tp, recs in batch.items():
                        for r in recs:
                            self.log.append((self.phase[0], self.member_name, tp.partition,
                                             r.offset, r.key, r.value))
                            taken.add((tp.partition, r.offset))
                            if quota is not None:
                                self.quota -= 1
                if taken and self.commit_batches:
                    try:
                        self.consumer.commit()
                    except Errors.KafkaError as e:
                        self.commit_errors.append(e)
                        self.allowed_dups |= taken
        except Exception as e:  # noqa: BLE001 - surfaced by call()/check()
            self.error = e
        finally:
            self._run_commands()

    def _run_commands(self):
        while True:
            try:
                fn, out = self.cmds.get_nowait()
            except queue.Empty:
                return
            try:
                out.put((True, fn(self.consumer)))
            except Exception as e:  # noqa: BLE001
                out.put((False, e))

    def call(self, fn, timeout=60):
        """Run fn(consumer) on the member's thread and return its result."""
        out = queue.Queue()
        self.cmds.put((fn, out))
        ok, val = out.get(timeout=timeout)
        if not ok:
            raise val
        return val

    def close(self):
        def do(c):
            c.close(autocommit=False)
            self._halt.set()

        if self.is_alive():
            self.call(do)
        self._halt.set()
        self.join(timeout=30)

    def check(self):
        assert self.error is None, f"{self.member_name} failed: {self.error!r}"


def _wait_stable_split(members, partitions, timeout=60, settle=1.5, extra=None):
    deadline = time.monotonic() + timeout
    last, since, asg = None, None, None
    while time.monotonic() < deadline:
        for m in members:
            m.check()
        asg = [m.assigned for m in members]
        ok = (all(asg) and sum(len(x) for x in asg) == partitions
              and frozenset().union(*asg) == frozenset(range(partitions)))
        if ok and asg == last:
            if time.monotonic() - since >= settle and (extra is None or extra()):
                return asg
        else:
            since = time.monotonic()
        last = asg if ok else None
        time.sleep(0.05)
    frames = sys._current_frames()
    names = {t.ident: t.name for t in threading.enumerate()}
    stacks = "\n".join(f"--- {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(f))
                       for ident, f in frames.items())
    raise AssertionError(f"no stable split of {partitions} partitions: {asg}\n{stacks}")


def _commit(member, attempts=20):
    """Commits the member's positions, again after a rebalance that got in the way:
    kafka-python 3's leader rejoins by itself when a metadata refresh changes its snapshot, even
    with the same members, and a commit during that rejoin fails with REBALANCE_IN_PROGRESS."""
    for attempt in range(attempts):
        try:
            return member.call(lambda c: c.commit())
        except (Errors.RebalanceInProgressError, Errors.CommitFailedError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.5)


def test_idempotent_produce_consumer_group_commit_and_resume(broker, kadmin, clients):
    bs = broker.bootstrap
    topic = _create(kadmin, unique("kp-group"), PARTITIONS)
    # Every broker must know the topic's partitions before the members join: a member whose
    # metadata came from a broker that had not yet heard of the new topic assigns nothing, and
    # kafka-python's members then rebalance over and over (once left one member stranded with an
    # empty assignment against the three-broker cluster).
    for host, port in sorted(getattr(broker, "addresses", {(broker.host, broker.port)})):
        wait_for_partitions(admin(f"{host}:{port}"), topic, PARTITIONS)
    group = unique("kp-grp")
    log, lock, phase = [], threading.Lock(), [1]
    members = []
    try:
        c1 = Member(bs, group, topic, "c1", log, lock, phase)
        c2 = Member(bs, group, topic, "c2", log, lock, phase)
        members += [c1, c2]
        # kafka-python's leader rejoins once more when a metadata refresh after the first
        # assignment changes its snapshot (seen against the three-broker cluster about 2 s
        # after the split): wait out more than that before taking the split as settled.
        a1, a2 = _wait_stable_split([c1, c2], PARTITIONS, settle=3.0)
        assert a1.isdisjoint(a2) and a1 | a2 == set(range(PARTITIONS))

        assert group in {g["group_id"] for g in kadmin.list_groups()}
        g = kadmin.describe_groups([group])[group]
        assert g["group_state"] == "Stable" and g["protocol_type"] == "consumer"
        assert g["protocol_data"] == "range"
        shares = {}
        for m in g["members"]:
            (ap,) = m["member_assignment"]["assigned_partitions"]
            assert ap["topic"] == topic
            shares[m["client_id"]] = frozenset(ap["partitions"])
        assert shares == {"c1": a1, "c2": a2}

        # Idempotent keyed produce, every send acknowledged.
        n1, n2 = 2000, 1000
        producer = _producer(clients, bs)
        mds = _send_all(producer, topic,
                        [(f"key-{i % KEYS}".encode(), f"{i}".encode()) for i in range(n1)])
        produced = {}
        for i, md in enumerate(mds):
            assert md.topic == topic and md.offset >= 0
            assert (md.partition, md.offset) not in produced
            produced[(md.partition, md.offset)] = (f"key-{i % KEYS}".encode(), f"{i}".encode())
        hw1 = collections.Counter(p for p, _o in produced)
        assert set(hw1) == set(range(PARTITIONS))
        for p, n in hw1.items():
            assert sorted(o for q, o in produced if q == p) == list(range(n))

        def consumed(run=None):
            with lock:
                seen = collections.defaultdict(set)
                for r, _n, p, o, _k, _v in log:
                    if run is None or r == run:
                        seen[p].add(o)
                return seen

        deadline = time.monotonic() + 60
        while not all(len(consumed()[p]) >= hw1[p] for p in range(PARTITIONS)):
            c1.check(), c2.check()
            assert time.monotonic() < deadline, "run 1 incomplete"
            time.sleep(0.05)
        with lock:
            for _r, name, p, _o, _k, _v in log:
                assert p in (a1 if name == "c1" else a2), f"{name} got partition {p}"
        assert (c1.assigned, c2.assigned) == (a1, a2), "unexpected rebalance in run 1"
        for m, asg in ((c1, a1), (c2, a2)):
            _commit(m)
            for p in asg:
                assert m.call(lambda c, p=p: c.committed(TopicPartition(topic, p))) == hw1[p]

        # c1 takes exactly 100 records of phase 2 and leaves without committing.
        c1.quota = 0
        c1.commit_batches = False
        time.sleep(2.5)  # past c1's current poll (up to 2 s)
        mds = _send_all(producer, topic, [(f"key-{i % KEYS}".encode(), f"{i}".encode())
                                          for i in range(n1, n1 + n2)])
        for i, md in zip(range(n1, n1 + n2), mds):
            assert (md.partition, md.offset) not in produced
            produced[(md.partition, md.offset)] = (f"key-{i % KEYS}".encode(), f"{i}".encode())
        hw2 = collections.Counter(p for p, _o in produced)
        with lock:
            start = len(log)
        c1.quota = 100
        deadline = time.monotonic() + 30
        while c1.quota:
            c1.check()
            assert time.monotonic() < deadline, "c1 could not take 100 records"
            time.sleep(0.02)
        with lock:
            uncommitted = {(p, o) for _r, n, p, o, _k, _v in log[start:] if n == "c1"}
        assert len(uncommitted) == 100
        c1.close()
        phase[0] = 2

        c1b = Member(bs, group, topic, "c1-restarted", log, lock, phase)
        members.append(c1b)

        def complete():
            # Everything consumed at least once, and c1's uncommitted records again.
            with lock:
                counts = collections.Counter((p, o) for _r, _n, p, o, _k, _v in log)
            return (all(counts[po] for po in produced)
                    and all(counts[po] >= 2 for po in uncommitted))

        b1, b2 = _wait_stable_split([c1b, c2], PARTITIONS, timeout=90, extra=complete)
        assert b1.isdisjoint(b2) and b1 | b2 == set(range(PARTITIONS))
        g = kadmin.describe_groups([group])[group]
        assert g["group_state"] == "Stable"
        assert sorted(m["client_id"] for m in g["members"]) == ["c1-restarted", "c2"]

        for m in (c1b, c2):
            _commit(m)
        offs = kadmin.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items() if tp.topic == topic} == dict(hw2)
        for m in (c1b, c2):
            m.close()
            m.check()
    finally:
        for m in members:
            m._halt.set()
        for m in members:
            m.join(timeout=30)
            if m.consumer is not None:
                try:
                    m.consumer.close(autocommit=False)
                except Exception:  # noqa: BLE001
                    pass

    counts = collections.Counter((p, o) for _r, _n, p, o, _k, _v in log)
    assert set(counts) == set(produced), (
        f"missing {sorted(set(produced) - set(counts))[:10]}, "
        f"unexpected {sorted(set(counts) - set(produced))[:10]}")
    for _r, _n, p, o, k, v in log:
        assert produced[(p, o)] == (k, v), f"record at {p}/{o} differs from what was produced"
    twice = {po for po, n in counts.items() if n > 1}
    allowed = uncommitted.union(*(m.allowed_dups for m in members))
    assert uncommitted <= twice, f"uncommitted but not redelivered: {sorted(uncommitted - twice)[:10]}"
    assert twice <= allowed, (f"consumed twice though committed: {sorted(twice - allowed)[:10]} "
                              f"(commit errors: {[m.commit_errors for m in members]})")
    assert max(counts.values()) == 2
    for r, _n, p, o, _k, _v in log:
        if r == 2:
            assert o >= hw1[p], f"run 2 re-read committed offset {p}/{o}"

    per_key = collections.defaultdict(list)
    for (p, o), (k, v) in sorted(produced.items()):
        per_key[k].append((p, int(v)))
    for k, recs in per_key.items():
        assert len({p for p, _s in recs}) == 1, f"key {k} in several partitions"
        seqs = [s for _p, s in recs]
        assert seqs == [s for s in range(n1 + n2) if f"key-{s % KEYS}".encode() == k]


# ------------------------------------------------------ ListOffsets by time
def test_offsets_for_times(broker, kadmin, clients):
    bs = broker.bootstrap
    topic = _create(kadmin, unique("kp-times"), 1)
    base = int(time.time() * 1000) - 3_600_000
    producer = _producer(clients, bs, linger_ms=200)
    mds = _send_all(producer, topic, [(b"k", f"{i}".encode(), 0, base + i * 1000) for i in range(10)])
    for i in range(10, 20):
        mds += _send_all(producer, topic, [(b"k", f"{i}".encode(), 0, base + i * 1000)])
    assert [md.offset for md in mds] == list(range(20))

    c = clients.add(KafkaConsumer(bootstrap_servers=bs, group_id=unique("kp-times"),
                                  enable_auto_commit=False))
    tp = TopicPartition(topic, 0)
    for ts, want in {base - 60_000: 0, base: 0, base + 3_500: 4, base + 5_000: 5,
                     base + 9_999: 10, base + 12_500: 13, base + 19_000: 19}.items():
        got = c.offsets_for_times({tp: ts})[tp]
        assert got is not None and got.offset == want, f"{ts - base:+d}ms -> {got}, want {want}"
        assert got.timestamp == base + want * 1000
    assert c.offsets_for_times({tp: base + 19_001})[tp] is None
    assert c.beginning_offsets([tp]) == {tp: 0}
    assert c.end_offsets([tp]) == {tp: 20}

    # Seek to the offset found by time and read the records with their timestamps.
    c.assign([tp])
    c.seek(tp, c.offsets_for_times({tp: base + 15_000})[tp].offset)
    recs = []
    deadline = time.monotonic() + 30
    while len(recs) < 5 and time.monotonic() < deadline:
        for rs in c.poll(timeout_ms=500).values():
            recs += rs
    assert [(r.offset, r.timestamp, r.value) for r in recs] == [
        (i, base + i * 1000, f"{i}".encode()) for i in range(15, 20)]


# ------------------------------------------------------------- DeleteRecords
def test_delete_records_moves_low_watermark(broker, kadmin, clients):
    bs = broker.bootstrap
    topic = _create(kadmin, unique("kp-delrec"), 2)
    producer = _producer(clients, bs)
    _send_all(producer, topic, [(None, f"{p}-{i}".encode(), p) for p in (0, 1) for i in range(100)])
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)

    res = kadmin.delete_records({tp0: 40})
    assert res[tp0]["low_watermark"] == 40 and res[tp0]["error_code"] == 0

    c = clients.add(KafkaConsumer(bootstrap_servers=bs, group_id=unique("kp-delrec"),
                                  enable_auto_commit=False, auto_offset_reset="earliest"))
    assert c.beginning_offsets([tp0, tp1]) == {tp0: 40, tp1: 0}
    assert c.end_offsets([tp0, tp1]) == {tp0: 100, tp1: 100}
    c.assign([tp0])
    c.seek_to_beginning(tp0)
    first = _first_record(c)
    assert (first.offset, first.value) == (40, b"0-40")

    # Below the low watermark: out of range, reset to earliest (40).
    c.seek(tp0, 10)
    assert _first_record(c).offset == 40

    with pytest.raises(Errors.OffsetOutOfRangeError):
        kadmin.delete_records({tp1: 1000})


def _first_record(c, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for rs in c.poll(timeout_ms=500, max_records=1).values():
            if rs:
                return rs[0]
    raise AssertionError("no record")
