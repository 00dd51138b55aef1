"""Zones, with confluent-kafka (librdkafka) clients (runs with WEIR_COMPAT_TARGET=cluster only).

Six brokers in three zones on one PostgreSQL and one s3s-fs. In each zone an idempotent
producer (zone from its client.id tag) and a consumer group (az1, az2: client.id tag; az3:
client.rack only, KIP-392) produce and read one topic: every acknowledged record is read back
once, in order, by every zone's group, and the data bytes that cross zones, by the brokers'
own meters (weir_net_bytes_total), stay within 1% of all data bytes. A topic set to
`weir.zone.routing=leader` goes straight to its leaders instead: its bytes cross zones, and the
meters show it. A CIDR map places an untagged client. Bad internal requests close their
connection (or answer KAFKA_STORAGE_ERROR for an object that is not there) and nothing else.
The Go suite (franz-go) runs the zones through a partition move and a kill -9
(tests/compat/go/zones_test.go).
"""

import os
import re
import time
import urllib.error
import urllib.request
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from compat_util import admin, create_topic, unique

pytestmark = pytest.mark.skipif(
    os.environ.get("WEIR_COMPAT_TARGET", "").strip().lower() != "cluster",
    reason="zones run with WEIR_COMPAT_TARGET=cluster")

ZONES = ["az1", "az2", "az3"]
LINE = re.compile(r'^weir_net_bytes_total\{src_zone="([^"]*)",dst_zone="([^"]*)",kind="([^"]*)"\} (\S+)$')


def zone_bytes(brokers):
    """weir_net_bytes_total summed over brokers: {(src, dst, kind): bytes}."""
    out = defaultdict(float)
    for b in brokers:
        with urllib.request.urlopen(f"http://127.0.0.1:{b.aux_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                m = LINE.match(line)
                if m:
                    out[(m[1], m[2], m[3])] += float(m[4])
    return out


def data_ratio(before, after, kinds=("produce", "fetch")):
    """Cross-zone share of the data bytes counted between two scrapes (an unknown zone
    counts as crossing)."""
    cross = total = 0.0
    for k, v in after.items():
        if k[2] not in kinds:
            continue
        d = v - before.get(k, 0.0)
        total += d
        if k[0] != k[1] or k[0] == "unknown":
            cross += d
    return (cross / total if total else 0.0), cross, total


def counter(brokers, name):
    total = 0.0
    for b in brokers:
        with urllib.request.urlopen(f"http://127.0.0.1:{b.aux_port}/metrics", timeout=5) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    total += float(line.split()[-1])
    return total


@pytest.fixture(scope="module")
def zoned(broker_factory):
    c = broker_factory.cluster("zones", size=6, zones=ZONES)
    try:
        yield c
    finally:
        broker_factory.close(c)


def produce_from_zones(bootstrap, topic, per_zone, routing_tag=True):
    """Each zone's idempotent producer sends `per_zone` records; returns the acknowledged
    ones as {partition: {offset: value}}."""
    acked = defaultdict(dict)
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[msg.partition()][msg.offset()] = msg.value().decode()

    for z in ZONES:
        p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "client.id": f"py-producer,weir_az={z}"})
        for i in range(per_zone):
            p.produce(topic, key=f"{z}-key-{i % 24}".encode(), value=f"{z}#{i:06d}".encode(),
                      on_delivery=report)
            p.poll(0)
        assert p.flush(60) == 0, f"zone {z}: records left unacknowledged"
    assert not errors, f"{len(errors)} deliveries failed; first: {errors[0]}"
    return acked


def consume_zone(bootstrap, topic, zone, want, by_rack):
    conf = {"bootstrap.servers": bootstrap, "group.id": unique(f"py-zones-{zone}"),
            "auto.offset.reset": "earliest", "enable.auto.commit": True,
            "fetch.wait.max.ms": 200}
    if by_rack:
        conf.update({"client.id": f"py-consumer-{zone}", "client.rack": zone})
    else:
        conf["client.id"] = f"py-consumer,weir_az={zone}"
    c = Consumer(conf)
    c.subscribe([topic])
    got = defaultdict(dict)
    deadline = time.monotonic() + 90
    try:
        while sum(len(v) for v in got.values()) < want and time.monotonic() < deadline:
            for m in c.consume(500, timeout=0.5):
                if m.error():
                    raise KafkaException(m.error())
                prev = got[m.partition()].get(m.offset())
                assert prev in (None, m.value().decode()), \
                    f"zone {zone}: partition {m.partition()} offset {m.offset()} read as {prev!r} and {m.value()!r}"
                got[m.partition()][m.offset()] = m.value().decode()
    finally:
        c.close()
    return got


def test_confluent_clients_stay_in_their_zone(zoned):
    topic = unique("py-zones")
    create_topic(zoned.bootstrap, topic, 6)
    before = zone_bytes(zoned.brokers)
    forwarded0 = counter(zoned.brokers, "weir_handoff_entries_total")
    lookups0 = counter(zoned.brokers, "weir_index_lookups_total")
    remote0 = counter(zoned.brokers, "weir_zone_remote_fetches_total")
    acked = produce_from_zones(zoned.bootstrap, topic, 1500)
    want = sum(len(v) for v in acked.values())
    assert want == 3 * 1500
    for p, offs in acked.items():
        assert sorted(offs) == list(range(len(offs))), f"partition {p}: offsets have a gap"
    for z in ZONES:
        got = consume_zone(zoned.bootstrap, topic, z, want, by_rack=(z == "az3"))
        assert got == acked, f"zone {z}: read {sum(len(v) for v in got.values())} of {want}"
    ratio, cross, total = data_ratio(before, zone_bytes(zoned.brokers))
    remote = counter(zoned.brokers, "weir_zone_remote_fetches_total") - remote0
    lookups = counter(zoned.brokers, "weir_index_lookups_total") - lookups0
    print(f"confluent-kafka in three zones: cross-zone data bytes {cross:.0f} of {total:.0f} "
          f"({100 * ratio:.3f}%); partition fetches served for another zone's leader "
          f"{remote:.0f}, range look-ups in the metadata store {lookups:.0f}")
    # The leaders feed the index with the offsets: brokers serving other zones read new data
    # without asking PostgreSQL where it is (12 look-ups for 36 such fetches before).
    assert remote > 0 and lookups <= 2, f"{lookups:.0f} look-ups for {remote:.0f} remote fetches"
    assert total > 0 and ratio <= 0.01, f"{100 * ratio:.3f}% of data bytes crossed zones"
    assert counter(zoned.brokers, "weir_handoff_entries_total") > forwarded0, \
        "produces were not forwarded through object storage"


def test_transactions_stay_in_their_zone(zoned):
    """A transactional producer in each zone commits and aborts transactions through its
    zone's brokers (forwarded produces verified by the leader); read_committed consumers in
    each zone, served by brokers of their own zone with the leader's last stable offset and
    aborted transactions, read every committed record once and no aborted one, and the data
    bytes stay in their zone."""
    topic = unique("py-zones-txn")
    create_topic(zoned.bootstrap, topic, 6)
    before = zone_bytes(zoned.brokers)
    remote0 = counter(zoned.brokers, "weir_zone_remote_fetches_total")
    committed, aborted = defaultdict(dict), set()
    for z in ZONES:
        p = Producer({"bootstrap.servers": zoned.bootstrap, "linger.ms": 5,
                      "transactional.id": unique(f"py-zones-txn-{z}"),
                      "client.id": f"py-txn-producer,weir_az={z}"})
        p.init_transactions(30)
        for t in range(6):
            acked = []
            p.begin_transaction()
            for i in range(50):
                v = f"{z}#{t}#{i:03d}"
                p.produce(topic, key=f"{z}-{i % 12}".encode(), value=v.encode(),
                          on_delivery=lambda err, m, acked=acked: acked.append((err, m)))
            p.flush(60)
            assert all(err is None for err, _ in acked), [e for e, _ in acked if e]
            if t % 3 == 1:
                p.abort_transaction(30)
                aborted.update(m.value().decode() for _, m in acked)
            else:
                p.commit_transaction(30)
                for _, m in acked:
                    committed[m.partition()][m.offset()] = m.value().decode()
    want = sum(len(v) for v in committed.values())
    assert want == 3 * 4 * 50 and len(aborted) == 3 * 2 * 50
    for z in ZONES:
        c = Consumer({"bootstrap.servers": zoned.bootstrap, "group.id": unique(f"py-ztxn-{z}"),
                      "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                      "fetch.wait.max.ms": 200, "client.id": f"py-txn-consumer,weir_az={z}"})
        c.subscribe([topic])
        got = defaultdict(dict)
        deadline = time.monotonic() + 90
        try:
            while sum(len(v) for v in got.values()) < want and time.monotonic() < deadline:
                for m in c.consume(500, timeout=0.5):
                    if m.error():
                        raise KafkaException(m.error())
                    v = m.value().decode()
                    assert v not in aborted, f"zone {z}: aborted record {v} read"
                    assert m.offset() not in got[m.partition()], f"zone {z}: {v} read twice"
                    got[m.partition()][m.offset()] = v
            # Anything still to come would be an aborted record: look a moment longer.
            for m in c.consume(500, timeout=1.0):
                assert m.error() or m.value().decode() not in aborted
        finally:
            c.close()
        assert got == committed, f"zone {z}: read {sum(len(v) for v in got.values())} of {want}"
    ratio, cross, total = data_ratio(before, zone_bytes(zoned.brokers))
    remote = counter(zoned.brokers, "weir_zone_remote_fetches_total") - remote0
    print(f"transactions in three zones: cross-zone data bytes {cross:.0f} of {total:.0f} "
          f"({100 * ratio:.3f}%); fetches served for another zone's leader {remote:.0f}")
    assert remote > 0, "no read_committed fetch was served in-zone"
    assert total > 0 and ratio <= 0.01, f"{100 * ratio:.3f}% of data bytes crossed zones"


def test_leader_routing_goes_to_the_leader_and_is_metered(zoned):
    topic = unique("py-zones-leader")
    a = admin(zoned.bootstrap)
    bad = ConfigResource(ResourceType.TOPIC, topic)
    create_topic(zoned.bootstrap, topic, 6, config={"weir.zone.routing": "leader"})
    desc = a.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    entries = list(desc.values())[0].result()
    assert entries["weir.zone.routing"].value == "leader"
    # Any other value is refused with INVALID_CONFIG.
    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("weir.zone.routing", "nearby", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException, match="INVALID_CONFIG|in-zone or leader"):
        list(a.incremental_alter_configs([bad]).values())[0].result()
    before = zone_bytes(zoned.brokers)
    acked = produce_from_zones(zoned.bootstrap, topic, 1000)
    ratio, cross, total = data_ratio(before, zone_bytes(zoned.brokers), kinds=("produce",))
    print(f"weir.zone.routing=leader: cross-zone produce bytes {cross:.0f} of {total:.0f} "
          f"({100 * ratio:.1f}%)")
    # Producers in three zones, leaders spread over them: about two thirds cross.
    assert ratio > 0.3, f"only {100 * ratio:.1f}% of a leader-routed topic's bytes crossed zones"
    assert sum(len(v) for v in acked.values()) == 3 * 1000


def test_a_cidr_map_places_untagged_clients(zoned):
    """Clients that say nothing are placed by their address once the CIDR map names it: their
    bytes are metered in that zone, and cross no zone."""
    topic = unique("py-zones-cidr")
    create_topic(zoned.bootstrap, topic, 6)
    b0 = zoned.brokers[0]
    req = urllib.request.Request(f"http://127.0.0.1:{b0.aux_port}/v1/zones/cidrs",
                                 data=b"not-a-cidr az2\n", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=5)
    assert refused.value.code == 400
    req = urllib.request.Request(f"http://127.0.0.1:{b0.aux_port}/v1/zones/cidrs",
                                 data=b"# loopback is az2 here\n127.0.0.0/8 az2\n", method="PUT")
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{zoned.brokers[1].aux_port}/v1/zones/cidrs",
                                timeout=5) as r:
        assert "127.0.0.0/8 az2" in r.read().decode()
    time.sleep(6)  # every broker reloads the map within 5 s
    try:
        before = zone_bytes(zoned.brokers)
        p = Producer({"bootstrap.servers": zoned.bootstrap, "enable.idempotence": True,
                      "linger.ms": 5, "client.id": "py-untagged"})
        for i in range(600):
            p.produce(topic, key=f"k{i % 12}".encode(), value=f"v{i}".encode())
        assert p.flush(60) == 0
        after = zone_bytes(zoned.brokers)
        placed = sum(v - before.get(k, 0.0) for k, v in after.items()
                     if k[0] == "az2" and k[2] == "produce")
        unknown = sum(v - before.get(k, 0.0) for k, v in after.items()
                      if k[0] == "unknown" and k[2] == "produce")
        ratio, cross, total = data_ratio(before, after, kinds=("produce",))
        assert placed > 0 and unknown == 0, f"az2: {placed}, unknown: {unknown}"
        assert ratio <= 0.01, f"{100 * ratio:.2f}% of the placed client's produce bytes crossed"
    finally:
        req = urllib.request.Request(f"http://127.0.0.1:{b0.aux_port}/v1/zones/cidrs",
                                     data=b"", method="PUT")
        urllib.request.urlopen(req, timeout=5).close()


def test_bad_internal_requests_close_their_connection_and_nothing_else(zoned):
    """The internal API's keys are taken on the internal listener only; a malformed internal
    request closes its connection, a reference to an object that does not exist answers
    KAFKA_STORAGE_ERROR, and the broker goes on serving both listeners."""
    import json
    import struct

    import kproto as kp

    b = zoned.brokers[0]
    with urllib.request.urlopen(f"http://127.0.0.1:{b.aux_port}/v1/cluster", timeout=5) as r:
        info = json.loads(r.read())
    internal = next(x["internal"] for x in info["brokers"] if x["node_id"] == b.node_id)
    host, port = internal.rsplit(":", 1)

    def internal_frame(key, correlation, body):
        return kp.frame(struct.pack(">hhi", key, 0, correlation) + body)

    # On the Kafka listener an internal key is an unknown API: the connection closes.
    with kp.connect(b.host, b.port) as s:
        s.sendall(internal_frame(1000, 1, b""))
        assert kp.wait_closed_or_response(s, 5)[0] == "closed"
    # A ForwardProduce whose body is cut short: closed.
    with kp.connect(host, int(port)) as s:
        s.sendall(internal_frame(1000, 2, b"\x00\x10abc"))
        assert kp.wait_closed_or_response(s, 5)[0] == "closed"
    # A reference to an object that is not there: each entry answers KAFKA_STORAGE_ERROR (56).
    key = b"handoff/99/missing"
    topic = b"no-such-topic"
    body = (struct.pack(">H", len(key)) + key + struct.pack(">QI", 0, 1)
            + struct.pack(">H", len(topic)) + topic + struct.pack(">iI", 0, 10)
            + struct.pack(">H", 0))  # no transactional id
    with kp.connect(host, int(port)) as s:
        s.sendall(internal_frame(1000, 3, body))
        answer = kp.recv_frame(s)
        correlation, count, error = struct.unpack(">iIh", answer[:10])
        assert (correlation, count, error) == (3, 1, 56)
    # Both listeners still serve.
    with kp.connect(b.host, b.port) as s:
        assert kp.api_versions(s, version=3, correlation_id=9)[:2] == (9, kp.ERR_NONE)
    with kp.connect(host, int(port)) as s:
        assert kp.api_versions(s, version=3, correlation_id=10)[:2] == (10, kp.ERR_NONE)
