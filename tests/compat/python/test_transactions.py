"""Client compatibility: Kafka transactions with confluent-kafka (librdkafka).

A transactional producer commits and aborts; read_committed consumers see every committed
record once and nothing aborted, read_uncommitted consumers see both; control records take one
offset each and are never handed to the application. An open transaction holds
read_committed consumers (and ListOffsets under READ_COMMITTED: the last stable offset) back
until it ends. send_offsets_to_transaction commits a group's offsets with the transaction (and
only then). A second producer with the same transactional.id fences the first and aborts its
open transaction; a transaction left open past transaction.timeout.ms is aborted by the broker.
"""

import collections
import time

import pytest
from confluent_kafka import (Consumer, IsolationLevel, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import OffsetSpec

try:  # confluent-kafka >= 2.0
    from confluent_kafka import ConsumerGroupTopicPartitions
except ImportError:  # pragma: no cover
    from confluent_kafka.admin import ConsumerGroupTopicPartitions

from compat_util import admin, create_topic, eventually, retry, unique

# Errors a fenced producer may be told (librdkafka maps the broker's PRODUCER_FENCED and
# INVALID_PRODUCER_EPOCH to its own fatal _FENCED).
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
END = b"end"  # the last record written to each partition: a reader that saw it saw everything


def _txn_producer(clients, bootstrap, txn_id, **extra):
    """A transactional producer, initialized (InitProducerId with its transactional.id)."""
    conf = {"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    conf.update(extra)
    p = clients.add(Producer(conf))
    retry(lambda: p.init_transactions(30), timeout=60)
    return p


def _plain_producer(clients, bootstrap):
    return clients.add(Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                 "acks": "all", "linger.ms": 5, "message.timeout.ms": 30000}))


def _send(producer, topic, records):
    """records: (partition, value). Produces them, flushes, and returns the delivery reports
    [(partition, offset, value)] in send order; every delivery must have succeeded."""
    reports = []

    def cb(err, msg):
        reports.append((err, msg.partition(), msg.offset(), msg.value()))

    for part, value in records:
        while True:
            try:
                producer.produce(topic, value=value, partition=part, on_delivery=cb)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0, "records still undelivered after flush"
    errors = [r for r in reports if r[0] is not None]
    assert not errors, f"delivery errors: {errors[:5]}"
    assert len(reports) == len(records)
    by_value = {r[3]: r[1:3] for r in reports}
    return [(*by_value[v], v) for _p, v in records]


def _end_markers(clients, bootstrap, topic, partitions):
    """Writes END (non-transactional) to every partition: the last record of each."""
    _send(_plain_producer(clients, bootstrap), topic, [(p, END) for p in range(partitions)])


def _consumer(clients, bootstrap, isolation, **extra):
    conf = {"bootstrap.servers": bootstrap, "group.id": unique("txn-reader"),
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "isolation.level": isolation}
    conf.update(extra)
    return clients.add(Consumer(conf))


def _read_to_end(clients, bootstrap, topic, partitions, isolation, timeout=60):
    """Every record of `topic` from offset 0 of each partition as an `isolation` consumer gets
    it, up to and including the END record of every partition: [(partition, offset, key,
    value)] in the order delivered."""
    c = _consumer(clients, bootstrap, isolation)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, ended = [], set()
    deadline = time.monotonic() + timeout
    while len(ended) < partitions:
        assert time.monotonic() < deadline, (
            f"{isolation}: END not reached in partitions {set(range(partitions)) - ended} "
            f"within {timeout}s ({len(out)} records read)")
        for m in c.consume(num_messages=1000, timeout=0.5):
            if m.error():
                raise KafkaException(m.error())
            assert m.partition() not in ended, f"a record after END in partition {m.partition()}"
            out.append((m.partition(), m.offset(), m.key(), m.value()))
            if m.value() == END:
                ended.add(m.partition())
    c.close()
    return out


def _data(records):
    """The values of what a reader got, END records left out."""
    return [v for _p, _o, _k, v in records if v != END]


def _latest(a, topic, partitions, isolation):
    """ListOffsets latest of every partition under `isolation`: {partition: offset}."""
    tps = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
    res = a.list_offsets(tps, isolation_level=isolation)
    return {tp.partition: f.result(timeout=30).offset for tp, f in res.items()}


def _settled(a, topic, partitions, want=None, timeout=30):
    """Waits until no transaction is open on any partition of `topic`: ListOffsets latest is
    the same under READ_COMMITTED (the last stable offset) and READ_UNCOMMITTED (the high
    watermark); also equal to `want` if given. (The broker writes the markers of a transaction
    after EndTxn has been answered, so this is not instantaneous.) Returns the offsets."""
    def check():
        lso = _latest(a, topic, partitions, IsolationLevel.READ_COMMITTED)
        hw = _latest(a, topic, partitions, IsolationLevel.READ_UNCOMMITTED)
        assert lso == hw, f"last stable offsets {lso} != high watermarks {hw}"
        if want is not None:
            assert hw == want, f"high watermarks {hw}, want {want}"
        return hw
    return eventually(check, timeout=timeout)


def _no_control_records(records):
    # Every record the tests produce has no key and a known value: a control record handed to
    # the application would show up with its 4-byte key (version, type).
    for p, o, k, v in records:
        assert k is None, f"record with key {k!r} (value {v!r}) at {p}/{o}: a control record?"


# ------------------------------------------------------------- commit and abort
def test_commit_and_abort_read_committed_and_uncommitted(broker, clients):
    bs = broker.bootstrap
    parts = 3
    topic = create_topic(bs, unique("txn"), parts)
    a = admin(bs)
    p = _txn_producer(clients, bs, unique("txn-id"))

    # Transaction 1, committed: 60 records per partition.
    p.begin_transaction()
    c1 = [(i % parts, f"c1-{i}".encode()) for i in range(180)]
    r1 = _send(p, topic, c1)
    p.commit_transaction(30)
    # Transaction 2, aborted: 10 per partition (written to the log before the abort).
    p.begin_transaction()
    ab = [(i % parts, f"ab-{i}".encode()) for i in range(30)]
    r2 = _send(p, topic, ab)
    p.abort_transaction(30)
    # Transaction 3, committed after the abort: 10 per partition.
    p.begin_transaction()
    c2 = [(i % parts, f"c2-{i}".encode()) for i in range(30)]
    r3 = _send(p, topic, c2)
    p.commit_transaction(30)

    # Each transaction's records are contiguous in a partition and each transaction ends with
    # one control record (its marker) taking one offset: 60 + 1, 10 + 1, 10 + 1.
    for part in range(parts):
        offs = [o for q, o, _v in r1 + r2 + r3 if q == part]
        assert offs == list(range(0, 60)) + list(range(61, 71)) + list(range(72, 82)), \
            f"partition {part}: offsets {offs}"
    _settled(a, topic, parts, want={q: 83 for q in range(parts)})
    _end_markers(clients, bs, topic, parts)

    committed = _read_to_end(clients, bs, topic, parts, "read_committed")
    uncommitted = _read_to_end(clients, bs, topic, parts, "read_uncommitted")
    _no_control_records(committed)
    _no_control_records(uncommitted)

    want_committed = [v for _p, v in c1 + c2]
    got = _data(committed)
    assert collections.Counter(got) == collections.Counter(want_committed), (
        f"read_committed: missing {sorted(set(want_committed) - set(got))[:5]}, "
        f"unexpected {sorted(set(got) - set(want_committed))[:5]}")
    assert len(got) == len(set(got)), "read_committed delivered a record twice"

    got_u = _data(uncommitted)
    want_u = [v for _p, v in c1 + ab + c2]
    assert collections.Counter(got_u) == collections.Counter(want_u), "read_uncommitted"
    # Both see every record where it was acknowledged; the markers (60, 71, 82) are skipped.
    acked = {v: (q, o) for q, o, v in r1 + r2 + r3}
    for recs in (committed, uncommitted):
        for q, o, _k, v in recs:
            if v != END:
                assert acked[v] == (q, o), f"{v!r} read at {q}/{o}, acknowledged at {acked[v]}"
            else:
                assert o == 83, f"END at {q}/{o}"
    # In offset order within each partition.
    for recs in (committed, uncommitted):
        for part in range(parts):
            offs = [o for q, o, _k, _v in recs if q == part]
            assert offs == sorted(offs), f"partition {part} out of order"


# ---------------------------------------------- an open transaction holds back
@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_open_transaction_holds_back_read_committed(broker, clients, outcome):
    bs = broker.bootstrap
    topic = create_topic(bs, unique(f"txn-open-{outcome}"), 1)
    tp = TopicPartition(topic, 0)
    a = admin(bs)
    plain = _plain_producer(clients, bs)

    before = _send(plain, topic, [(0, f"before-{i}".encode()) for i in range(10)])
    assert [o for _p, o, _v in before] == list(range(10))

    # Producer A opens a transaction (offsets 10-14) and leaves it open.
    pa = _txn_producer(clients, bs, unique("txn-open"))
    pa.begin_transaction()
    opened = _send(pa, topic, [(0, f"open-{i}".encode()) for i in range(5)])
    assert [o for _p, o, _v in opened] == list(range(10, 15))

    # Producer B commits a transaction after it (15-24, marker 25); then plain records (26-30).
    pb = _txn_producer(clients, bs, unique("txn-later"))
    pb.begin_transaction()
    later = _send(pb, topic, [(0, f"after-{i}".encode()) for i in range(10)])
    assert [o for _p, o, _v in later] == list(range(15, 25))
    pb.commit_transaction(30)
    eventually(lambda: _assert_eq(_latest(a, topic, 1, IsolationLevel.READ_UNCOMMITTED), {0: 26},
                                  "high watermark after B's marker"))
    tail = _send(plain, topic, [(0, f"plain-{i}".encode()) for i in range(5)])
    assert [o for _p, o, _v in tail] == list(range(26, 31))

    # ListOffsets: the last stable offset is A's first offset; the high watermark is the end.
    assert _latest(a, topic, 1, IsolationLevel.READ_COMMITTED) == {0: 10}
    assert _latest(a, topic, 1, IsolationLevel.READ_UNCOMMITTED) == {0: 31}

    # A read_committed consumer gets the 10 records before A's transaction, then reaches the
    # end of what it may read (EOF at the last stable offset) and gets nothing more.
    rc = _consumer(clients, bs, "read_committed", **{"enable.partition.eof": True})
    rc.assign([TopicPartition(topic, 0, 0)])
    got, eof_at = [], None
    deadline = time.monotonic() + 30
    while eof_at is None:
        assert time.monotonic() < deadline, f"read_committed: no EOF after {got}"
        m = rc.poll(0.5)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                eof_at = m.offset()
                continue
            raise KafkaException(m.error())
        got.append((m.offset(), m.value()))
    assert got == [(i, f"before-{i}".encode()) for i in range(10)]
    assert eof_at == 10, f"read_committed EOF at {eof_at}, want the last stable offset 10"
    settle = time.monotonic() + 2
    while time.monotonic() < settle:
        m = rc.poll(0.2)
        assert m is None or m.error() is not None, \
            f"read_committed got {m.value()!r} at {m.offset()} while the transaction is open"
    lo, hi = rc.get_watermark_offsets(tp, timeout=30)
    assert (lo, hi) == (0, 10), f"read_committed consumer's watermarks ({lo}, {hi}), want (0, 10)"

    # A read_uncommitted consumer gets everything written, the open transaction's too.
    ru = _read_uncommitted_until(clients, bs, topic, b"plain-4")
    assert ru == [(i, f"before-{i}".encode()) for i in range(10)] + \
        [(10 + i, f"open-{i}".encode()) for i in range(5)] + \
        [(15 + i, f"after-{i}".encode()) for i in range(10)] + \
        [(26 + i, f"plain-{i}".encode()) for i in range(5)]

    # A ends its transaction (marker at 31): the read_committed consumer moves on.
    if outcome == "commit":
        pa.commit_transaction(30)
    else:
        pa.abort_transaction(30)
    _settled(a, topic, 1, want={0: 32})
    rest = []
    deadline = time.monotonic() + 30
    while not rest or rest[-1][1] != b"plain-4":
        assert time.monotonic() < deadline, f"read_committed after {outcome}: {rest}"
        m = rc.poll(0.5)
        if m is None or (m.error() and m.error().code() == KafkaError._PARTITION_EOF):
            continue
        if m.error():
            raise KafkaException(m.error())
        rest.append((m.offset(), m.value()))
    want = [(15 + i, f"after-{i}".encode()) for i in range(10)] + \
        [(26 + i, f"plain-{i}".encode()) for i in range(5)]
    if outcome == "commit":
        want = [(10 + i, f"open-{i}".encode()) for i in range(5)] + want
    assert rest == want, f"read_committed after {outcome}: {rest}"


def _assert_eq(got, want, what):
    assert got == want, f"{what}: {got}, want {want}"


def _read_uncommitted_until(clients, bs, topic, last, timeout=30):
    c = _consumer(clients, bs, "read_uncommitted")
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + timeout
    while not out or out[-1][1] != last:
        assert time.monotonic() < deadline, f"read_uncommitted did not reach {last!r}: {out}"
        for m in c.consume(num_messages=1000, timeout=0.5):
            if m.error():
                raise KafkaException(m.error())
            out.append((m.offset(), m.value()))
    c.close()
    return out


# ---------------------------------------------------- send_offsets_to_transaction
def _group_offsets(a, group, topic, partitions, require_stable=False):
    """{partition: committed offset} of the group on partitions 0..partitions-1 of `topic`
    (partitions without one left out), and {partition: error} of those with an error."""
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p)
                                               for p in range(partitions)])]
    res = a.list_consumer_group_offsets(req, require_stable=require_stable)[group].result(30)
    offsets, errors = {}, {}
    for tp in res.topic_partitions:
        if tp.topic != topic:
            continue
        if tp.error is not None:
            errors[tp.partition] = tp.error
        elif tp.offset >= 0:
            offsets[tp.partition] = tp.offset
    return offsets, errors


def test_send_offsets_to_transaction(broker, clients):
    bs = broker.bootstrap
    parts, n, batch = 3, 300, 100
    src = create_topic(bs, unique("txn-in"), parts)
    dst = create_topic(bs, unique("txn-out"), parts)
    group = unique("txn-group")
    a = admin(bs)
    inputs = _send(_plain_producer(clients, bs), src,
                   [(i % parts, f"in-{i}".encode()) for i in range(n)])
    ends = collections.Counter(q for q, _o, _v in inputs)

    c = clients.add(Consumer({
        "bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "session.timeout.ms": 10000, "heartbeat.interval.ms": 500}))
    c.subscribe([src])
    p = _txn_producer(clients, bs, unique("txn-ctp"))
    outputs = []  # what each committed round wrote

    def take(k, timeout=60):
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < k:
            assert time.monotonic() < deadline, f"consumed {len(got)} of {k}"
            for m in c.consume(num_messages=k - len(got), timeout=0.5):
                if m.error():
                    raise KafkaException(m.error())
                got.append(m)
        return got

    def process(msgs, positions):
        """One transaction's work: the transformed records, and the group's offsets."""
        p.begin_transaction()
        _send(p, dst, [(m.partition(), b"out-" + m.value()) for m in msgs])
        for m in msgs:
            positions[m.partition()] = m.offset() + 1
        p.send_offsets_to_transaction([TopicPartition(src, q, o) for q, o in positions.items()],
                                      c.consumer_group_metadata(), 30)

    # Round 1: the group's offsets are pending until the commit, then they are the group's.
    committed = {}
    msgs = take(batch)
    pos = dict(committed)
    process(msgs, pos)
    assert _group_offsets(a, group, src, parts)[0] == {}, "offsets committed before commit_transaction"
    # Asked for stable offsets, the broker answers UNSTABLE_OFFSET_COMMIT for the partitions
    # with offsets pending in an open transaction.
    stable, errs = _group_offsets(a, group, src, parts, require_stable=True)
    assert set(errs) == set(pos) and all(
        e.code() == KafkaError.UNSTABLE_OFFSET_COMMIT for e in errs.values()), (stable, errs)
    p.commit_transaction(30)
    committed = pos
    outputs += [b"out-" + m.value() for m in msgs]
    eventually(lambda: _assert_eq(_group_offsets(a, group, src, parts)[0], committed,
                                  "group offsets after commit_transaction"))

    # Round 2, aborted: the group's offsets stay where round 1 left them.
    msgs = take(batch)
    pos = dict(committed)
    process(msgs, pos)
    assert pos != committed
    # Pending offsets over committed ones: OffsetFetch gives the committed ones, or with
    # require_stable UNSTABLE_OFFSET_COMMIT for every partition the transaction has offsets of.
    assert _group_offsets(a, group, src, parts)[0] == committed, "pending offsets visible"
    stable, errs = _group_offsets(a, group, src, parts, require_stable=True)
    assert set(errs) == set(pos) and all(
        e.code() == KafkaError.UNSTABLE_OFFSET_COMMIT for e in errs.values()), (stable, errs)
    p.abort_transaction(30)
    aborted_outputs = [b"out-" + m.value() for m in msgs]
    eventually(lambda: _assert_eq(_group_offsets(a, group, src, parts, require_stable=True)[0],
                                  committed, "group offsets after abort_transaction"))
    # The application goes back to the committed offsets (the aborted batch is redone).
    for q in range(parts):
        c.seek(TopicPartition(src, q, committed.get(q, 0)))

    # The rest, committed batch by batch.
    while committed != dict(ends):
        msgs = take(min(batch, sum(ends.values()) - sum(committed.values())))
        pos = dict(committed)
        process(msgs, pos)
        p.commit_transaction(30)
        committed = pos
        outputs += [b"out-" + m.value() for m in msgs]
    eventually(lambda: _assert_eq(_group_offsets(a, group, src, parts, require_stable=True)[0],
                                  dict(ends), "group offsets at the end"))
    c.close()

    # Every input record is in the output exactly once (read_committed); the aborted round is
    # there too for read_uncommitted.
    want = sorted(b"out-" + v for _q, _o, v in inputs)
    assert sorted(outputs) == want
    _settled(a, dst, parts)
    _end_markers(clients, bs, dst, parts)
    out = _data(_read_to_end(clients, bs, dst, parts, "read_committed"))
    assert sorted(out) == want, (
        f"read_committed output: {len(out)} records, {len(set(out))} distinct, want {len(want)}")
    out_u = _data(_read_to_end(clients, bs, dst, parts, "read_uncommitted"))
    assert sorted(out_u) == sorted(want + aborted_outputs)


# ------------------------------------------------------------------- fencing
# librdkafka's close() tries to abort the fenced producer's transaction and warns that it cannot.
@pytest.mark.filterwarnings("ignore:Producer abort_transaction failed during close")
def test_second_producer_fences_the_first(broker, clients):
    bs = broker.bootstrap
    parts = 2
    topic = create_topic(bs, unique("txn-fence"), parts)
    a = admin(bs)
    txn_id = unique("txn-fenced")

    p1 = _txn_producer(clients, bs, txn_id)
    p1.begin_transaction()
    zombie = [(i % parts, f"zombie-{i}".encode()) for i in range(10)]
    _send(p1, topic, zombie)

    # The same transactional.id again: the new producer gets a newer epoch, the open
    # transaction of the old one is aborted.
    p2 = _txn_producer(clients, bs, txn_id)

    # The old producer's next operation fails, fatally: it is fenced (the produce may already
    # refuse if the client has learned it; else the record is refused and the commit fails).
    with pytest.raises(KafkaException) as ei:
        p1.produce(topic, value=b"zombie-late", partition=0)
        p1.commit_transaction(30)
    err = ei.value.args[0]
    assert err.fatal(), f"fenced producer's commit failed with a non-fatal error: {err}"
    assert err.code() in FENCED, f"fenced producer's commit: {err}"
    with pytest.raises(KafkaException):  # and stays unusable
        p1.begin_transaction()

    p2.begin_transaction()
    fresh = [(i % parts, f"p2-{i}".encode()) for i in range(4)]
    _send(p2, topic, fresh)
    p2.commit_transaction(30)

    _settled(a, topic, parts)
    _end_markers(clients, bs, topic, parts)
    rc = _read_to_end(clients, bs, topic, parts, "read_committed")
    _no_control_records(rc)
    assert sorted(_data(rc)) == sorted(v for _p, v in fresh), \
        f"read_committed: {_data(rc)}"
    ru = _data(_read_to_end(clients, bs, topic, parts, "read_uncommitted"))
    assert set(v for _p, v in zombie) <= set(ru), "the fenced transaction's records were written"
    assert b"zombie-late" not in ru, "a fenced producer's record was appended"


# ----------------------------------------------------------- transaction timeout
# librdkafka's close() tries to abort the fenced producer's transaction and warns that it cannot.
@pytest.mark.filterwarnings("ignore:Producer abort_transaction failed during close")
def test_transaction_timeout_aborts_open_transaction(broker, clients):
    bs = broker.bootstrap
    topic = create_topic(bs, unique("txn-timeout"), 1)
    a = admin(bs)

    p = _txn_producer(clients, bs, unique("txn-stuck"), **{"transaction.timeout.ms": 5000})
    p.begin_transaction()
    stuck = _send(p, topic, [(0, f"stuck-{i}".encode()) for i in range(5)])
    assert [o for _p, o, _v in stuck] == list(range(5))
    later = _send(_plain_producer(clients, bs), topic,
                  [(0, f"later-{i}".encode()) for i in range(5)])
    assert [o for _p, o, _v in later] == list(range(5, 10))
    assert _latest(a, topic, 1, IsolationLevel.READ_COMMITTED) == {0: 0}

    # The producer never commits: the broker aborts the transaction once its timeout has
    # passed, and read_committed readers move past it (Kafka looks for timed out
    # transactions every 10 s).
    rc = _consumer(clients, bs, "read_committed")
    rc.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 90
    while not got or got[-1][1] != b"later-4":
        assert time.monotonic() < deadline, f"read_committed still held back after 90s: {got}"
        for m in rc.consume(num_messages=100, timeout=0.5):
            if m.error():
                raise KafkaException(m.error())
            got.append((m.offset(), m.value()))
    assert got == [(5 + i, f"later-{i}".encode()) for i in range(5)], got
    _settled(a, topic, 1, want={0: 11})  # the abort marker at 10

    # The broker aborted it with a new epoch: the producer is fenced, it cannot commit.
    with pytest.raises(KafkaException) as ei:
        p.commit_transaction(30)
    err = ei.value.args[0]
    assert err.fatal() and err.code() in FENCED, f"commit after the timeout: {err}"
    ru = _read_uncommitted_until(clients, bs, topic, b"later-4")
    assert [v for _o, v in ru] == [f"stuck-{i}".encode() for i in range(5)] + \
        [f"later-{i}".encode() for i in range(5)]
