"""Restart tests on a broker of their own.

Clean restart: data, committed group offsets, topic configs and the log start
offset survive a SIGTERM and a restart with the same data dir.

Kill test: idempotent producers keep writing while the broker is SIGKILLed
and restarted several times; afterwards every acknowledged record is in the
log exactly once, at the offset it was acknowledged at, and per partition each
producer's records are in sequence order with no duplicate at all.

Knobs (environment): WEIR_KILL_COUNT (default 5; 3 against Kafka), WEIR_KILL_SEED
(default: random, printed), WEIR_KILL_PRODUCERS (default 3).
"""

import collections
import os
import random
import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

try:
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # pragma: no cover
    from confluent_kafka.admin import ConsumerGroupTopicPartitions

from compat_util import admin, create_topic, eventually, metric, retry, unique

# These tests stop, SIGKILL and restart the broker process, or start it with WAL faults.
pytestmark = pytest.mark.single_broker("stops, kills and restarts one broker process "
                                       "(or starts it with WAL fault settings)")

PARTITIONS = 4
# Kafka needs 5-15 s per restart here (JVM start, log recovery), Weir well
# under a second: 3 kills are enough to validate the test against Kafka.
KILLS = int(os.environ.get("WEIR_KILL_COUNT",
                           "3" if os.environ.get("WEIR_TEST_BROKER") == "kafka" else "5"))
PRODUCERS = int(os.environ.get("WEIR_KILL_PRODUCERS", "3"))
RATE_PER_PRODUCER = 400  # records/s each, paced
PAYLOAD = b"x" * 64


class NumberedProducer(threading.Thread):
    """Sends records keyed "P<id>-<seq>" (value "P<id>-<seq>-payload") as fast
    as the pacing allows, until stopped; records every delivery report."""

    def __init__(self, pid, bootstrap, topic):
        super().__init__(name=f"producer-{pid}", daemon=True)
        self.pid, self.topic = pid, topic
        self.acked = {}  # seq -> (partition, offset)
        self.failed = {}  # seq -> error
        self.errors = []  # error_cb: (fatal, KafkaError)
        self.sent = 0
        self.halt = threading.Event()
        self.lock = threading.Lock()
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "client.id": f"kill-producer-{pid}",
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            # Ride out the broker being down: retry for up to 2 minutes.
            "message.timeout.ms": 120000,
            "request.timeout.ms": 15000,
            "retry.backoff.ms": 100,
            "retry.backoff.max.ms": 1000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000,
            "queue.buffering.max.messages": 200000,
            "error_cb": self._on_error,
        })

    def _on_error(self, err):
        with self.lock:
            self.errors.append((err.fatal(), err))

    def _on_delivery(self, err, msg):
        seq = int(msg.key().decode().split("-")[1])
        with self.lock:
            if err is None:
                assert seq not in self.acked, f"P{self.pid}-{seq} acknowledged twice"
                self.acked[seq] = (msg.partition(), msg.offset())
            else:
                self.failed[seq] = err

    def run(self):
        interval = 0.02
        per_tick = max(1, int(RATE_PER_PRODUCER * interval))
        next_tick = time.monotonic()
        while not self.halt.is_set():
            for _ in range(per_tick):
                key = f"P{self.pid}-{self.sent}".encode()
                try:
                    self.producer.produce(self.topic, key=key, value=key + b"-" + PAYLOAD,
                                          on_delivery=self._on_delivery)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0)
            next_tick += interval
            delay = next_tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_tick = time.monotonic()

    def finish(self, timeout):
        """Stop sending and wait for every outstanding delivery report."""
        self.halt.set()
        self.join(timeout=10)
        remaining = self.producer.flush(timeout)
        return remaining

    def acked_count(self):
        with self.lock:
            return len(self.acked)


def _read_everything(bootstrap, topic, partitions, timeout=60, from_start=None):
    """Every record of every partition, from the beginning to the end offset.
    from_start: {partition: expected low watermark} (default 0)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("kill-verify"),
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.max.bytes": 8 * 1024 * 1024})
    try:
        ends, lows = {}, {}
        for p in range(partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            assert lo == (from_start or {}).get(p, 0), f"partition {p} low watermark {lo}"
            ends[p], lows[p] = hi, lo
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = collections.defaultdict(list)  # partition -> [(offset, key, value)]
        done = {p for p, hi in ends.items() if hi == lows[p]}
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            assert time.monotonic() < deadline, (
                f"could not read back everything: {[(p, len(out[p]), ends[p]) for p in ends]}")
            for m in c.consume(num_messages=5000, timeout=1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out[m.partition()].append((m.offset(), m.key(), m.value()))
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
        return out, ends
    finally:
        c.close()


def _assert_eq(a, b):
    assert a == b, f"{a!r} != {b!r}"


@pytest.fixture(scope="module")
def kill_broker(broker_factory):
    b = broker_factory.new("kill")
    try:
        yield b
    finally:
        broker_factory.close(b)


def test_clean_restart_keeps_data_offsets_and_configs(kill_broker):
    b = kill_broker
    bs = b.bootstrap
    topic = create_topic(bs, unique("restart"), 2)
    group = unique("restart-grp")
    base = int(time.time() * 1000) - 600_000
    reports = []
    p = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "acks": "all"})
    try:
        for i in range(300):
            p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2,
                      timestamp=base + i * 10,
                      on_delivery=lambda err, msg: reports.append(
                          (err, msg.partition(), msg.offset(), msg.key(), msg.value())))
        assert p.flush(30) == 0
    finally:
        p.close()
    assert len(reports) == 300 and all(r[0] is None for r in reports)

    a = admin(bs)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "86400000", incremental_operation=AlterConfigOpType.SET)])
    a.incremental_alter_configs([res])[res].result(timeout=30)
    (fut,) = a.delete_records([TopicPartition(topic, 1, 20)], operation_timeout=30).values()
    assert fut.result(timeout=30).low_watermark == 20
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        retry(lambda: c.commit(offsets=[TopicPartition(topic, 0, 100), TopicPartition(topic, 1, 120)],
                               asynchronous=False))
    finally:
        c.close()

    b.stop()
    b.start()

    a = admin(bs)
    cres = ConfigResource(ResourceType.TOPIC, topic)
    # Kafka applies the config change asynchronously; it may also not have
    # reached the broker before the stop, so poll.
    eventually(lambda: _assert_eq(
        a.describe_configs([cres])[cres].result(timeout=30)["retention.ms"].value, "86400000"))
    # The consumer's OffsetFetch first: librdkafka retries it while the group
    # coordinator is still loading after the restart. (Its admin
    # ListConsumerGroupOffsets does not retry COORDINATOR_LOAD_IN_PROGRESS, and
    # confluent-kafka 2.16.1 was seen to segfault on that error path.)
    c = Consumer({"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False})
    try:
        committed = retry(lambda: c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                              timeout=30))
        assert [tp.offset for tp in committed] == [100, 120]
    finally:
        c.close()
    got = retry(lambda: a.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)])[group].result(30))
    assert {tp.partition: tp.offset for tp in got.topic_partitions} == {0: 100, 1: 120}
    c = Consumer({"bootstrap.servers": bs, "group.id": unique("restart-check"),
                  "enable.auto.commit": False})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 150)
        assert c.get_watermark_offsets(TopicPartition(topic, 1), timeout=30) == (20, 150)
        (tp,) = c.offsets_for_times([TopicPartition(topic, 0, base + 1005)], timeout=30)
        assert tp.offset == 51  # record i = 2 * offset; first with ts >= base + 1005 is i = 102
    finally:
        c.close()
    log, ends = _read_everything(bs, topic, 2, from_start={1: 20})
    assert ends == {0: 150, 1: 150}
    want = {(p_, o): (k, v) for _e, p_, o, k, v in reports}
    assert sorted(want.values()) == sorted((b"k%d" % i, b"v%d" % i) for i in range(300))
    for part, recs in log.items():
        for o, k, v in recs:
            assert want[(part, o)] == (k, v)
    assert [o for o, _k, _v in log[0]] == list(range(150))
    assert [o for o, _k, _v in log[1]] == list(range(20, 150))


def test_kill_restart_under_idempotent_load(kill_broker):
    broker = kill_broker
    seed = int(os.environ.get("WEIR_KILL_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    print(f"kill test seed {seed} (WEIR_KILL_SEED), {KILLS} kills, {PRODUCERS} producers")
    producers = []
    try:
        topic = create_topic(broker.bootstrap, unique("kill"), PARTITIONS)
        producers = [NumberedProducer(i, broker.bootstrap, topic) for i in range(PRODUCERS)]
        for p in producers:
            p.start()
        # Warm up until every producer has acknowledgements.
        deadline = time.monotonic() + 30
        while not all(p.acked_count() for p in producers):
            assert time.monotonic() < deadline, "producers got no acknowledgement before any kill"
            time.sleep(0.1)

        marks = []
        for k in range(KILLS):
            time.sleep(rng.uniform(1.0, 3.0))
            before = [p.acked_count() for p in producers]
            broker.kill()
            down = rng.uniform(0.0, 1.0)
            time.sleep(down)
            t0 = time.monotonic()
            broker.start()
            print(f"kill {k + 1}: acked before {sum(before)}, down {down:.2f}s + "
                  f"restart {time.monotonic() - t0:.1f}s")
            marks.append(before)

        # After the last restart every producer must make progress again.
        last = [p.acked_count() for p in producers]
        deadline = time.monotonic() + 60
        while not all(p.acked_count() > n + 50 for p, n in zip(producers, last)):
            assert time.monotonic() < deadline, (
                f"producers stalled after the last restart: {last} -> "
                f"{[p.acked_count() for p in producers]}, errors {[p.errors[-3:] for p in producers]}")
            time.sleep(0.1)
        for p in producers:
            remaining = p.finish(timeout=90)
            assert remaining == 0, f"producer {p.pid}: {remaining} records without a delivery report"
    finally:
        for p in producers:
            p.halt.set()
        for p in producers:
            try:
                p.producer.purge()
                p.producer.flush(0)
                p.producer.close()
            except Exception:  # noqa: BLE001
                pass

    _verify(broker, topic, producers)


def _verify(broker, topic, producers, partitions=PARTITIONS):
    """Every acknowledged record is in the log exactly once, at its acknowledged offset; per
    partition each producer's records are in sequence order; offsets are dense."""
    for p in producers:
        fatal = [e for f, e in p.errors if f]
        assert not fatal, f"producer {p.pid} hit fatal errors: {fatal}"

    log, ends = _read_everything(broker.bootstrap, topic, partitions)

    total_acked = sum(len(p.acked) for p in producers)
    total_failed = sum(len(p.failed) for p in producers)
    total_sent = sum(p.sent for p in producers)
    print(f"sent {total_sent}, acknowledged {total_acked}, failed {total_failed}, "
          f"log {sum(len(v) for v in log.values())} records, end offsets {ends}")
    assert total_acked > 0

    # Dense offsets, every record well-formed.
    where = collections.defaultdict(list)  # (pid, seq) -> [(partition, offset)]
    for part, recs in log.items():
        offsets = [o for o, _k, _v in recs]
        assert offsets == list(range(ends[part])), f"partition {part}: offsets not dense"
        last_seq = {}
        for o, k, v in recs:
            pid_s, seq_s = k.decode().split("-")
            pid, seq = int(pid_s[1:]), int(seq_s)
            assert v == k + b"-" + PAYLOAD, f"record {part}/{o} has a corrupt value"
            where[(pid, seq)].append((part, o))
            # Per partition, each producer's sequence strictly increases.
            assert seq > last_seq.get(pid, -1), (
                f"partition {part} offset {o}: P{pid}-{seq} after P{pid}-{last_seq[pid]}")
            last_seq[pid] = seq

    dups = {k: v for k, v in where.items() if len(v) > 1}
    assert not dups, f"{len(dups)} records in the log more than once, e.g. {list(dups.items())[:5]}"

    for p in producers:
        missing = [s for s in p.acked if (p.pid, s) not in where]
        assert not missing, (f"producer {p.pid}: {len(missing)} acknowledged records lost, "
                             f"e.g. seqs {sorted(missing)[:10]}")
        moved = [(s, p.acked[s], where[(p.pid, s)][0]) for s in p.acked
                 if p.acked[s][1] >= 0 and where[(p.pid, s)][0] != p.acked[s]]
        assert not moved, f"producer {p.pid}: records not at their acknowledged offset: {moved[:5]}"
        # Nothing the producer never sent shows up.
        extra = [s for (pid, s) in where if pid == p.pid and s >= p.sent]
        assert not extra, f"producer {p.pid}: unknown seqs in the log {extra[:5]}"


WAL_FAULT_SECONDS = float(os.environ.get("WEIR_WAL_FAULT_SECONDS", "8"))


@pytest.fixture
def faulty_wal_broker(broker_factory):
    if os.environ.get("WEIR_TEST_BROKER", "weir") != "weir":
        pytest.skip("the WAL fault switch is Weir's")
    b = broker_factory.new("walfaults", env={
        "WEIR_WAL_FAULT_WRITE_ERROR_RATE": "0.03",
        "WEIR_WAL_FAULT_SYNC_ERROR_RATE": "0.03",
    })
    try:
        yield b
    finally:
        broker_factory.close(b)


def test_idempotent_producers_through_wal_write_and_sync_errors(faulty_wal_broker):
    """WAL writes and syncs fail now and then (the fault switch, in the real file WAL): each
    failure fails the appends in and behind it, rewinds their partitions and the producer
    state, and the producers retry. One producer is cut off mid-run (its connection and
    queue gone, as a crashed client). Every acknowledged record ends up exactly once, in order,
    at its acknowledged offset."""
    broker = faulty_wal_broker
    topic = create_topic(broker.bootstrap, unique("walfaults"), PARTITIONS)
    producers = [NumberedProducer(i, broker.bootstrap, topic) for i in range(PRODUCERS + 1)]
    cut = producers[-1]
    try:
        for p in producers:
            p.start()
        time.sleep(WAL_FAULT_SECONDS / 2)
        # A client that goes away mid-failure: no flush, its queue purged.
        cut.halt.set()
        cut.join(timeout=10)
        cut.producer.purge()
        cut.producer.flush(0)
        time.sleep(WAL_FAULT_SECONDS / 2)
        for p in producers[:-1]:
            remaining = p.finish(timeout=90)
            assert remaining == 0, f"producer {p.pid}: {remaining} records without a delivery report"
    finally:
        for p in producers:
            p.halt.set()
        for p in producers:
            try:
                p.producer.purge()
                p.producer.flush(0)
            except Exception:  # noqa: BLE001
                pass
    errors = _metric(broker, "weir_wal_write_errors_total")
    print(f"WAL write errors: {errors}")
    assert errors > 0, "the fault switch injected no WAL error"
    assert all(p.acked_count() > 0 for p in producers), "a producer got nothing acknowledged"
    _verify(broker, topic, producers)


def _metric(broker, name):
    return metric(broker, name)
