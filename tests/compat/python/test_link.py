"""Cluster links against a real Apache Kafka (tools/kafka/kafka.sh, started here): topics
mirrored at the source's offsets, as the source stored them.

- an idempotent producer and a transactional one (commits and aborts) write to the source
  before and while the link runs: every record (aborted ones and markers included) is at the
  same offset in the mirror, read_committed readers see the same records on both sides, and
  the mirror is read-only (POLICY_VIOLATION, with a message) until promoted;
- a compacted source topic, cleaned by Kafka's cleaner before the link starts: the mirror
  has the same gaps;
- new source topics matching the link's patterns are mirrored, partition counts and topic
  configs follow.

Runs against the shared target (one broker, or a three-broker cluster with
WEIR_COMPAT_TARGET=cluster: the controller creates the topics, each partition's leader mirrors
it).
"""

import os
import tempfile
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

import compat_util as cu
from conftest import KIND, Broker, free_port

pytestmark = pytest.mark.skipif(KIND != "weir", reason="cluster links are Weir's")


@pytest.fixture(scope="module")
def source(broker_factory):
    """A single-node Apache Kafka (4.4, or WEIR_KAFKA_VERSION): the link's source cluster."""
    root = tempfile.mkdtemp(prefix="link-source-", dir=broker_factory.base)
    b = Broker("link-source", root)
    b.kind = "kafka"
    broker_factory.brokers.append(b)
    b.start()
    try:
        yield b
    finally:
        broker_factory.close(b)


def until(pred, timeout, interval=0.2):
    """Whether pred() came true within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def create_link(target, name, source, topics, **extra):
    status, body = target_broker(target).admin("POST", "/v1/links", {
        "name": name,
        "bootstrap.servers": source.bootstrap,
        "topics": topics,
        "metadata.refresh.ms": 500,
        **extra,
    }, timeout=60)
    assert status == 201, body
    return body


def target_broker(target):
    """A broker of the target whose admin API answers (the first of a cluster)."""
    return target.brokers[0] if hasattr(target, "brokers") else target


def records(bootstrap, topic, partitions, committed, timeout=60):
    """Every record of `topic`: partition -> [(offset, key, value, timestamp)], read from the
    start to the end the broker reports (read_committed stops at the last stable offset)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "enable.partition.eof": True})
    try:
        ends = {}
        for p in range(partitions):
            _, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = hi
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        done = {p for p in range(partitions) if ends[p] == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions:
            assert time.monotonic() < deadline, f"{topic}: read {({p: len(v) for p, v in out.items()})}, ends {ends}"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    done.add(m.partition())
                    continue
                raise KafkaException(m.error())
            out[m.partition()].append((m.offset(), m.key(), m.value(), m.timestamp()[1]))
        return out
    finally:
        c.close()


def watermarks(bootstrap, topic, partitions):
    # read_uncommitted: the high watermark (read_committed would give the last stable offset).
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "wm",
                  "isolation.level": "read_uncommitted"})
    try:
        return [c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)]
    finally:
        c.close()


def wait_mirrored(target, source, topic, partitions, timeout=90):
    """Until the mirror's high watermarks are the source's."""
    want = watermarks(source.bootstrap, topic, partitions)
    got = None

    def same():
        nonlocal got
        try:
            got = watermarks(target.bootstrap, topic, partitions)
        except KafkaException:
            return False
        return [hi for _, hi in got] == [hi for _, hi in want]

    assert until(same, timeout), f"{topic}: mirror {got}, source {want}"


def idempotent(bootstrap):
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "linger.ms": 5, "compression.type": "lz4"})


def test_topics_are_mirrored_at_the_sources_offsets_and_read_only(broker, source):
    topic = cu.unique("orders")
    cu.create_topic(source.bootstrap, topic, 3)
    p = idempotent(source.bootstrap)
    for i in range(1500):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3)
    p.flush(30)
    t = Producer({"bootstrap.servers": source.bootstrap, "transactional.id": cu.unique("txn")})
    t.init_transactions(30)

    def transactions(first, n):
        for j in range(first, first + n):
            t.begin_transaction()
            for i in range(10):
                t.produce(topic, key=f"t{j}-{i}".encode(), value=b"x" * 100, partition=i % 3)
            if j % 3 == 2:
                t.abort_transaction(30)
            else:
                t.commit_transaction(30)

    transactions(0, 12)
    create_link(broker, cu.unique("link"), source, [topic.replace(".", "\\.")])
    # The source goes on being written while the link runs.
    for i in range(1500, 3000):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3)
    p.flush(30)
    transactions(12, 12)
    wait_mirrored(broker, source, topic, 3)
    for committed in (False, True):
        want = records(source.bootstrap, topic, 3, committed)
        got = records(broker.bootstrap, topic, 3, committed)
        for part in range(3):
            assert got[part] == want[part], (
                f"partition {part} committed={committed}: {len(got[part])} records in the "
                f"mirror, {len(want[part])} at the source; first difference at "
                f"{next((i for i, (a, b) in enumerate(zip(got[part], want[part])) if a != b), None)}")
    # Markers take offsets: the last offsets read are below the high watermark on both sides,
    # and the mirror's high watermark is the source's.
    assert sum(len(v) for v in records(broker.bootstrap, topic, 3, True).values()) == 3000 + 16 * 10
    # Read-only until promoted.
    w = Producer({"bootstrap.servers": broker.bootstrap, "message.send.max.retries": 0})
    errors = []
    w.produce(topic, value=b"nope", partition=0, on_delivery=lambda e, m: errors.append(e))
    w.flush(30)
    assert errors and errors[0] is not None and errors[0].code() == KafkaError.POLICY_VIOLATION, errors
    # Kafka's tools show which link the topic mirrors.
    a = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = a.describe_configs([res])[res].result(30)
    assert configs["weir.mirror.link"].value.startswith("link")


def test_a_compacted_topic_keeps_the_gaps_its_cleaner_left(broker, source):
    topic = cu.unique("compacted")
    cu.create_topic(source.bootstrap, topic, 1, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "min.compaction.lag.ms": "0"})
    p = idempotent(source.bootstrap)
    for rnd in range(8):
        for k in range(50):
            p.produce(topic, key=f"key{k}".encode(), value=f"r{rnd}".encode(), partition=0)
        # A key written once: it stays between removed records (gaps inside the log).
        p.produce(topic, key=f"once{rnd}".encode(), value=b"kept", partition=0)
        p.flush(30)
        time.sleep(0.3)  # each round in a segment of its own (segment.ms)

    def cleaned():
        # Kafka cleans rolled segments only: keep rolling them, and look for gaps.
        p.produce(topic, key=b"roll", value=b"x", partition=0)
        p.flush(30)
        got = records(source.bootstrap, topic, 1, False)[0]
        return len(got) < got[-1][0] + 1 - 200

    assert until(cleaned, 120, interval=1), "Kafka's cleaner did not run"
    before = records(source.bootstrap, topic, 1, False)[0]
    create_link(broker, cu.unique("link"), source, [topic.replace(".", "\\.")])
    wait_mirrored(broker, source, topic, 1)
    got = records(broker.bootstrap, topic, 1, False)[0]
    want = records(source.bootstrap, topic, 1, False)[0]
    assert got == want
    offsets = [r[0] for r in got]
    missing = offsets[-1] + 1 - len(offsets)
    gaps = sum(1 for a, b in zip([-1] + offsets, offsets) if b != a + 1)
    print(f"{len(got)} records over offsets 0..{offsets[-1]}: {missing} offsets removed by the "
          f"source's cleaner, in {gaps} gaps (before the link: {len(before)} records)")
    assert missing > 0 and gaps > 2, "the source had gaps: the mirror must keep them"


def test_new_topics_partitions_and_configs_follow_the_source(broker, source):
    prefix = cu.unique("follow")
    link = cu.unique("link")
    create_link(broker, link, source, [prefix.replace(".", "\\.") + "-.*"])
    first = f"{prefix}-a"
    cu.create_topic(source.bootstrap, first, 2, config={"retention.ms": "3600000"})
    p = idempotent(source.bootstrap)
    for i in range(100):
        p.produce(first, value=f"{i}".encode(), partition=i % 2)
    p.flush(30)
    wait_mirrored(broker, source, first, 2)
    sa = AdminClient({"bootstrap.servers": source.bootstrap})
    sa.create_partitions([NewPartitions(first, 4)])[first].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, first,
                         set_config={"retention.ms": "7200000"})
    sa.alter_configs([res])[res].result(30)
    # A producer that knows of the new partitions.
    p = idempotent(source.bootstrap)
    assert until(lambda: len(p.list_topics(first, timeout=10).topics[first].partitions) == 4, 30)
    for i in range(100):
        p.produce(first, value=f"{i}".encode(), partition=i % 4)
    p.flush(30)
    wait_mirrored(broker, source, first, 4)
    ta = AdminClient({"bootstrap.servers": broker.bootstrap})
    shown = ConfigResource(ConfigResource.Type.TOPIC, first)

    def retention():
        return ta.describe_configs([shown])[shown].result(30)["retention.ms"].value

    assert until(lambda: retention() == "7200000", 30), retention()
    # A second topic created at the source later is picked up.
    second = f"{prefix}-b"
    cu.create_topic(source.bootstrap, second, 1)
    p.produce(second, value=b"hello", partition=0)
    p.flush(30)
    wait_mirrored(broker, source, second, 1)
    assert records(broker.bootstrap, second, 1, True)[0][0][2] == b"hello"
    status, body = target_broker(broker).admin("GET", f"/v1/links/{link}")
    assert status == 200, body
    assert {t: s["state"] for t, s in body["topics"].items()} == {
        first: "mirroring", second: "mirroring"}, body


def test_bad_definitions_and_unreachable_sources_are_refused_clearly(broker, source):
    b = target_broker(broker)
    status, body = b.admin("POST", "/v1/links", {"name": "x", "bootstrap.servers": source.bootstrap})
    assert status == 400 and "topics" in body["error"], body
    dead = free_port()
    status, body = b.admin("POST", "/v1/links", {
        "name": cu.unique("dead"), "bootstrap.servers": f"127.0.0.1:{dead}", "topics": ["t"],
        "request.timeout.ms": 2000}, timeout=30)
    assert status == 502, body
    name = cu.unique("dup")
    create_link(broker, name, source, ["nothing-matches-this"])
    status, body = b.admin("POST", "/v1/links", {
        "name": name, "bootstrap.servers": source.bootstrap, "topics": ["t"]}, timeout=60)
    assert status == 409, body
    status, body = b.admin("DELETE", f"/v1/links/{name}")
    assert status == 200, body
    status, body = b.admin("GET", f"/v1/links/{name}")
    assert status == 404, body


def metrics_text(b):
    import urllib.request
    with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics", timeout=5) as r:
        return r.read().decode()


def committed_offsets(bootstrap, group):
    """partition -> committed offset of `group`, as an admin client reads them."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    a = AdminClient({"bootstrap.servers": bootstrap})
    f = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    res = f[group].result(30)
    return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}


def link_groups(target, link):
    """The link's groups as every broker of the target shows those it copies."""
    out = {}
    for b in getattr(target, "brokers", [target]):
        status, body = b.admin("GET", f"/v1/links/{link}")
        assert status == 200, body
        out.update(body["groups"])
    return out


def test_a_group_moves_from_the_source_and_reads_every_record_once(broker, source):
    import threading
    topic = cu.unique("moving")
    group = cu.unique("group")
    link = cu.unique("link")
    cu.create_topic(source.bootstrap, topic, 2)
    create_link(broker, link, source, [topic.replace(".", "\\.")], groups=[group.replace(".", "\\.")],
                **{"groups.sync.ms": 200})
    # Producers stay on the source throughout: consumers move first.
    stop = threading.Event()
    produced = [0]

    def produce():
        p = idempotent(source.bootstrap)
        while not stop.is_set():
            for _ in range(20):
                p.produce(topic, key=f"k{produced[0]}".encode(), value=f"v{produced[0]}".encode(),
                          partition=produced[0] % 2)
                produced[0] += 1
            p.poll(0)
            time.sleep(0.05)
        p.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    read = []

    def consume(bootstrap, until):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        try:
            while not until():
                msgs = c.consume(100, 0.5)
                for m in msgs:
                    if m.error() is None:
                        read.append((m.partition(), m.offset(), m.value()))
                if msgs:
                    c.commit(asynchronous=False)
        finally:
            c.close()

    try:
        t0 = time.monotonic()
        consume(source.bootstrap, lambda: time.monotonic() - t0 > 4 and len(read) > 200)
        on_source = len(read)

        # The runbook's check before moving a group: its committed offsets are the same on
        # both sides (as kafka-consumer-groups --describe shows them).
        want_offsets = committed_offsets(source.bootstrap, group)
        assert sorted(want_offsets) == [0, 1], want_offsets
        assert until(lambda: committed_offsets(broker.bootstrap, group) == want_offsets, 60), (
            committed_offsets(broker.bootstrap, group), want_offsets)
        g = link_groups(broker, link).get(group)
        assert g is not None and g["partitions"] == 2 and g["in_sync"] == 2, g
        moved_at = time.monotonic()
        writer_done = [False]

        def caught_up():
            if not writer_done[0] and time.monotonic() - moved_at > 3:
                stop.set()
                writer.join(60)
                writer_done[0] = True
            if not writer_done[0]:
                return False
            return len(read) >= produced[0]

        consume(broker.bootstrap, lambda: caught_up() or time.monotonic() - moved_at > 90)
    finally:
        stop.set()
        writer.join(60)
    want = records(source.bootstrap, topic, 2, False)
    got = {p: sorted((o, v) for q, o, v in read if q == p) for p in range(2)}
    for p in range(2):
        offsets = [o for o, _ in got[p]]
        assert len(offsets) == len(set(offsets)), f"partition {p}: records read twice across the move"
        assert got[p] == [(o, v) for o, _, v, _ in want[p]], (
            f"partition {p}: read {len(got[p])}, the source holds {len(want[p])}")
    print(f"{on_source} records read on the source, {len(read) - on_source} on Weir after the "
          f"move, {produced[0]} produced, none twice, none missing")
    assert on_source > 0 and len(read) > on_source


def test_promotion_waits_for_the_sources_end_then_the_topic_is_writable(broker, source):
    import subprocess
    topic = cu.unique("promoted")
    link = cu.unique("link")
    cu.create_topic(source.bootstrap, topic, 2)
    p = idempotent(source.bootstrap)
    for i in range(1000):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
    p.flush(30)
    t = Producer({"bootstrap.servers": source.bootstrap, "transactional.id": cu.unique("txn"),
                  "transaction.timeout.ms": 600000})
    t.init_transactions(30)
    for j in range(3):
        t.begin_transaction()
        for i in range(10):
            t.produce(topic, value=f"t{j}-{i}".encode(), partition=i % 2)
        t.commit_transaction(30)
    # A transaction its producer leaves open at the source (it crashed, say).
    t.begin_transaction()
    for i in range(10):
        t.produce(topic, value=f"open-{i}".encode(), partition=i % 2)
    t.flush(30)
    create_link(broker, link, source, [topic.replace(".", "\\.")])
    wait_mirrored(broker, source, topic, 2)
    source_ends = [hi for _, hi in watermarks(source.bootstrap, topic, 2)]
    want = records(source.bootstrap, topic, 2, False)
    # The CLI, against the first broker's admin API: it waits for the outcome.
    b = target_broker(broker)
    weir = os.environ.get("WEIR_BIN")
    r = subprocess.run([weir, "link", "promote", link, "--topic", topic, "--timeout-secs", "60",
                        "--admin", f"127.0.0.1:{b.admin_port}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "promoted" in r.stdout, r.stdout
    status, body = b.admin("GET", f"/v1/links/{link}")
    assert body["topics"][topic]["state"] == "promoted", body
    # The state is on /metrics too (the link's record is read again every second).
    state = f'weir_link_topic_state{{link="{link}",topic="{topic}",state="promoted"}} 1'
    assert until(lambda: state in metrics_text(b), 10), [
        line for line in metrics_text(b).splitlines() if "link_topic_state" in line]
    # Every record the source had is here at its offset; the transaction left open at the
    # source is aborted here (an abort marker after it), so read_committed readers go on.
    got = records(broker.bootstrap, topic, 2, False)
    for part in range(2):
        assert got[part] == want[part], f"partition {part}"
    ends = [hi for _, hi in watermarks(broker.bootstrap, topic, 2)]
    assert ends == [e + 1 for e in source_ends], (ends, source_ends)
    committed = records(broker.bootstrap, topic, 2, True)
    assert sum(len(v) for v in committed.values()) == 1000 + 30
    assert not any(v.startswith(b"open-") for part in committed.values() for _, _, v, _ in part)
    # Writable: a producer of this cluster (its producer id may be a number the source's
    # producers had) appends after the source's records.
    w = idempotent(broker.bootstrap)
    delivered = []
    for i in range(10):
        w.produce(topic, value=f"after-{i}".encode(), partition=i % 2,
                  on_delivery=lambda e, m: delivered.append((e, m.partition(), m.offset())))
    w.flush(30)
    assert all(e is None for e, _, _ in delivered), delivered
    assert sorted(o for _, part, o in delivered if part == 0)[0] == ends[0]
    t.abort_transaction(30)


def test_a_source_outage_is_retried_shown_and_resumed_without_a_gap(broker, source):
    """The source killed while mirroring: the link retries with backoff, its status shows the
    outage (source errors and the last one, with its time), and once the source is back the
    mirror goes on from where it was, every record at its source offset once."""
    topic = cu.unique("outage")
    link = cu.unique("link")
    cu.create_topic(source.bootstrap, topic, 2)
    p = idempotent(source.bootstrap)
    for i in range(500):
        p.produce(topic, value=f"before-{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    create_link(broker, link, source, [topic.replace(".", "\\.")])
    wait_mirrored(broker, source, topic, 2)

    def shown():
        errors, last = 0, None
        for b in getattr(broker, "brokers", [broker]):
            status, body = b.admin("GET", f"/v1/links/{link}")
            assert status == 200, body
            errors += body["source_errors"]
            if body["last_source_error"] is not None:
                last = body["last_source_error"]
        return errors, last

    assert shown()[0] == 0
    killed_ms = time.time() * 1000
    source.kill()
    try:
        assert until(lambda: shown()[0] > 0, 30), shown()
        errors, last = shown()
        assert last is not None and last["at_ms"] >= killed_ms - 1000 and last["error"], last
        # Backoff: a few seconds of outage is a handful of attempts per loop, not a storm.
        time.sleep(5)
        assert shown()[0] - errors < 100, shown()
    finally:
        source.start()
    p = idempotent(source.bootstrap)
    for i in range(500):
        p.produce(topic, value=f"after-{i}".encode(), partition=i % 2)
    assert p.flush(60) == 0
    wait_mirrored(broker, source, topic, 2, timeout=120)
    want = records(source.bootstrap, topic, 2, False)
    got = records(broker.bootstrap, topic, 2, False)
    for part in range(2):
        assert got[part] == want[part], f"partition {part}"
    assert sum(len(v) for v in got.values()) == 1000


def test_a_weir_broker_killed_while_mirroring_leaves_no_gap_and_no_duplicate(cluster, source):
    """The mirroring of a partition runs on its leader; the partition's end is the link's
    position, so the broker that takes it over goes on from there."""
    import threading
    topic = cu.unique("killed")
    cu.create_topic(source.bootstrap, topic, 6)
    link = cu.unique("link")
    stop = threading.Event()
    produced = [0]

    def produce():
        p = idempotent(source.bootstrap)
        while not stop.is_set():
            for _ in range(60):
                p.produce(topic, value=f"v{produced[0]}".encode() * 20, partition=produced[0] % 6)
                produced[0] += 1
            p.poll(0)
            time.sleep(0.02)
        p.flush(30)

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        create_link(cluster, link, source, [topic.replace(".", "\\.")])
        time.sleep(3)
        # The third broker leads some of the mirror's partitions (placement spreads them).
        _, parts = cluster.brokers[0].admin("GET", "/v1/partitions")
        victim = cluster.brokers[2].node_id
        led = [p["partition"] for p in parts if p["topic"] == topic and p["leader"] == victim]
        assert led, parts
        cluster.kill(2)
        time.sleep(6)
    finally:
        stop.set()
        writer.join(60)
    wait_mirrored(cluster, source, topic, 6, timeout=120)
    want = records(source.bootstrap, topic, 6, False)
    got = records(cluster.bootstrap, topic, 6, False)
    for part in range(6):
        assert got[part] == want[part], f"partition {part}: {len(got[part])} here, {len(want[part])} at the source"
    print(f"{produced[0]} records produced at the source, all mirrored once across the kill of "
          f"the leader of partitions {led}")
    cluster.start(2)


def test_a_kafka_source_over_sasl_ssl_with_scram(broker, broker_factory, tmp_path):
    """Apache Kafka as the source behind TLS and SCRAM-SHA-512 (a listener of its own beside the
    plaintext one the harness checks it on): the link mirrors through it, and a wrong password
    is refused with the source's word for it."""
    import subprocess
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    certs = str(tmp_path / "certs")
    subprocess.run(["bash", os.path.join(os.path.dirname(__file__), "..", "tls", "make-certs.sh"),
                    certs], check=True, timeout=120)
    root = tempfile.mkdtemp(prefix="link-secure-source-", dir=broker_factory.base)
    src = Broker("link-secure-source", root)
    src.kind = "kafka"
    secure_port = free_port()
    plain = f"PLAINTEXT://127.0.0.1:{src.port}"
    secured = f"SECURE://127.0.0.1:{secure_port}"
    src.kafka_props = [
        f"listeners={plain},CONTROLLER://127.0.0.1:{src.aux_port},{secured}",
        f"advertised.listeners={plain},{secured}",
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.secure.scram-sha-512.sasl.jaas.config="
        "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={certs}/server.pem",
    ]
    broker_factory.brokers.append(src)
    src.start()
    try:
        a = AdminClient({"bootstrap.servers": src.bootstrap})
        upsert = UserScramCredentialUpsertion(
            "mirror", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"mirror-secret")
        for f in a.alter_user_scram_credentials([upsert]).values():
            f.result(30)
        topic = cu.unique("secured")
        cu.create_topic(src.bootstrap, topic, 2)
        p = idempotent(src.bootstrap)
        for i in range(300):
            p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
        assert p.flush(30) == 0
        secure = {"bootstrap.servers": f"127.0.0.1:{secure_port}", "security.protocol": "SASL_SSL",
                  "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "mirror",
                  "ssl.ca.location": f"{certs}/ca.pem", "topics": [topic.replace(".", "\\.")],
                  "metadata.refresh.ms": 500}
        status, body = target_broker(broker).admin(
            "POST", "/v1/links", {**secure, "name": cu.unique("refused"), "sasl.password": "wrong"},
            timeout=60)
        assert status == 502 and "authenticat" in body["error"].lower(), body
        status, body = target_broker(broker).admin(
            "POST", "/v1/links", {**secure, "name": cu.unique("secured"),
                                  "sasl.password": "mirror-secret"}, timeout=60)
        assert status == 201, body
        wait_mirrored(broker, src, topic, 2)
        want = records(src.bootstrap, topic, 2, False)
        got = records(broker.bootstrap, topic, 2, False)
        for part in range(2):
            assert got[part] == want[part], f"partition {part}"
    finally:
        broker_factory.close(src)
