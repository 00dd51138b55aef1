"""Client compatibility: the consumer group protocol (KIP-848) with confluent-kafka (librdkafka,
`group.protocol=consumer`).

Two members share a topic's partitions as the broker assigns them (no overlap, nothing left
out), a member that leaves hands its partitions over, offsets committed at the member epoch
are where the next member resumes, and a group read back by a restarted broker carries on with
nothing lost. The admin client lists the group as a consumer group.
"""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat_util import admin, create_topic, eventually, unique

PARTITIONS = 4


def _produce(bootstrap, topic, n, start=0):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for i in range(start, start + n):
        while True:
            try:
                p.produce(topic, value=b"v%d" % i, partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(30) == 0, "records still undelivered"


def _consumer(clients, bootstrap, group, **extra):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False}
    conf.update(extra)
    return clients.add(Consumer(conf))


def _drain(consumers, seen, until, timeout=60):
    """Polls every consumer in turn, adding (partition, offset, value) to `seen`, until
    `until(seen)` or the timeout."""
    deadline = time.monotonic() + timeout
    while not until(seen):
        assert time.monotonic() < deadline, (
            f"only {len(seen)} records seen; positions: "
            f"{[[(tp.partition, tp.offset) for tp in c.position(c.assignment())] for c in consumers]}")
        for c in consumers:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            seen.add((m.partition(), m.offset(), m.value()))


def _assigned(c):
    return {tp.partition for tp in c.assignment()}


def test_members_share_partitions_and_hand_them_over(broker, clients):
    bootstrap = broker.bootstrap
    topic = unique("cp-share")
    group = unique("cp-group")
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, 400)
    a = _consumer(clients, bootstrap, group)
    b = _consumer(clients, bootstrap, group)
    a.subscribe([topic])
    b.subscribe([topic])
    seen = set()
    _drain([a, b], seen, lambda s: len(s) >= 400)
    assert {v for _p, _o, v in seen} == {b"v%d" % i for i in range(400)}

    # Once the group settles, the broker's assignment splits the partitions 2/2, no overlap.
    def split():
        for c in (a, b):
            c.poll(0.1)
        pa, pb = _assigned(a), _assigned(b)
        return not (pa & pb) and (pa | pb) == set(range(PARTITIONS)) and len(pa) == 2
    eventually(split, timeout=30)

    # Commits carry the member epoch; the group is listed as a consumer group.
    for c in (a, b):
        c.commit(asynchronous=False)
    adm = admin(bootstrap)  # kept: a collected AdminClient fails its pending requests
    listed = adm.list_consumer_groups(request_timeout=10).result(timeout=30)
    ours = [g for g in listed.valid if g.group_id == group]
    assert len(ours) == 1, (group, [g.group_id for g in listed.valid], listed.errors)
    if hasattr(ours[0], "type"):
        assert ours[0].type.name == "CONSUMER", ours[0].type

    # a leaves: b takes its partitions and reads what is produced next, from a's commits on.
    a.close()
    _produce(bootstrap, topic, 200, start=400)
    later = set()

    def all_four(s):
        return len(s) >= 200 and _assigned(b) == set(range(PARTITIONS))
    _drain([b], later, all_four)
    values = {v for _p, _o, v in later}
    assert {b"v%d" % i for i in range(400, 600)} <= values, "records after the hand-over lost"
    assert not values & {b"v%d" % i for i in range(400)}, "read again before the commits"


def test_a_new_member_resumes_at_the_committed_offsets(broker, clients):
    bootstrap = broker.bootstrap
    topic = unique("cp-resume")
    group = unique("cp-resume-group")
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, 200)
    a = _consumer(clients, bootstrap, group)
    a.subscribe([topic])
    seen = set()
    _drain([a], seen, lambda s: len(s) >= 200)
    a.commit(asynchronous=False)
    committed = a.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=10)
    assert sum(tp.offset for tp in committed) == 200
    a.close()
    _produce(bootstrap, topic, 100, start=200)
    b = _consumer(clients, bootstrap, group)
    b.subscribe([topic])
    later = set()
    _drain([b], later, lambda s: len(s) >= 100)
    time.sleep(1)  # anything read again would show up now
    _drain([b], later, lambda s: True)
    assert {v for _p, _o, v in later} == {b"v%d" % i for i in range(200, 300)}


@pytest.mark.single_broker("restarts the broker")
def test_the_group_survives_a_broker_restart(broker_factory, clients):
    b = broker_factory.new("cp-restart")
    try:
        bootstrap = b.bootstrap
        topic = unique("cp-restart")
        group = unique("cp-restart-group")
        create_topic(bootstrap, topic, PARTITIONS)
        _produce(bootstrap, topic, 200)
        c = _consumer(clients, bootstrap, group, **{"enable.auto.commit": True,
                                                     "auto.commit.interval.ms": 200})
        c.subscribe([topic])
        seen = set()
        _drain([c], seen, lambda s: len(s) >= 200)
        c.commit(asynchronous=False)
        b.restart()
        _produce(bootstrap, topic, 200, start=200)
        _drain([c], seen, lambda s: len(s) >= 400, timeout=90)
        assert {v for _p, _o, v in seen} == {b"v%d" % i for i in range(400)}
        assert _assigned(c) == set(range(PARTITIONS))
    finally:
        clients.close_all()  # while the broker is up: a consumer's close leaves the group
        broker_factory.close(b)


def _at_end(c, end):
    """Whether `c` has each of its assigned partitions read up to offset `end`: consumed to
    there since it was assigned, or committed there before (nothing left to consume)."""
    positions = c.position(c.assignment())
    unread = [tp for tp in positions if tp.offset < 0]
    if unread:
        unread = c.committed(unread, timeout=10)
    return bool(positions) and all(tp.offset == end for tp in positions if tp.offset >= 0) \
        and all(tp.offset == end for tp in unread)


def _group_type(adm, group):
    listed = adm.list_consumer_groups(request_timeout=10).result(timeout=30)
    types = [g.type.name for g in listed.valid if g.group_id == group]
    return types[0] if types else None


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_a_classic_group_upgrades_and_downgrades_online(broker, clients, strategy):
    """A rolling upgrade: a classic member keeps consuming while a consumer-protocol member
    joins the same group (the group becomes a consumer group, the classic member stays in it),
    then leaves again (the group is classic again). Nothing is lost, no partition is held by
    both at once once they settle."""
    bootstrap = broker.bootstrap
    topic = unique("cp-migrate")
    group = unique("cp-migrate-group")
    create_topic(bootstrap, topic, PARTITIONS)
    _produce(bootstrap, topic, 400)
    adm = admin(bootstrap)
    a = _consumer(clients, bootstrap, group, **{"group.protocol": "classic",
                                                 "partition.assignment.strategy": strategy,
                                                 "session.timeout.ms": 10000,
                                                 "heartbeat.interval.ms": 500})
    a.subscribe([topic])
    seen = set()
    _drain([a], seen, lambda s: len(s) >= 100 and _assigned(a) == set(range(PARTITIONS)))
    a.commit(asynchronous=False)
    assert _group_type(adm, group) == "CLASSIC"

    b = _consumer(clients, bootstrap, group)
    b.subscribe([topic])

    def shared(s):
        pa, pb = _assigned(a), _assigned(b)
        # Each member has read its own partitions to the end: a partition handed over at the
        # last moment, not yet read by its new holder, would be committed by neither (a
        # manual commit covers what its member consumed), and read again after b leaves.
        return (len(s) >= 400 and pa and pb and not (pa & pb)
                and (pa | pb) == set(range(PARTITIONS))
                and _at_end(a, 400 // PARTITIONS) and _at_end(b, 400 // PARTITIONS))
    _drain([a, b], seen, shared, timeout=90)
    assert {v for _p, _o, v in seen} == {b"v%d" % i for i in range(400)}
    assert _group_type(adm, group) == "CONSUMER"
    for c in (a, b):
        c.commit(asynchronous=False)

    # b leaves: a is alone in a classic group again and reads everything that follows, from
    # the commits on.
    b.close()
    _produce(bootstrap, topic, 200, start=400)
    later = set()
    wanted = {b"v%d" % i for i in range(400, 600)}
    _drain([a], later, lambda s: wanted <= {v for _p, _o, v in s}
           and _assigned(a) == set(range(PARTITIONS)), timeout=90)
    again = {v for _p, _o, v in later} - wanted
    assert not again, f"read again before the commits: {sorted(again)[:10]}"
    eventually(lambda: _group_type(adm, group) == "CLASSIC", timeout=30)
