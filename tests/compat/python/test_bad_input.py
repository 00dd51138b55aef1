"""Bad input over raw sockets: the broker refuses it the way Kafka does and
keeps serving everybody else.

After every case, a normal client (idempotent confluent-kafka producer and a
consumer) must still produce and consume on the same broker.
"""

import os
import random
import struct
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

import kproto as kp
from compat_util import (admin, create_topic, produce_and_consume_check, unique,
                         wait_for_partitions)


@pytest.fixture(scope="module")
def bad_broker(broker_factory):
    # A broker of its own, or a cluster of its own with WEIR_COMPAT_TARGET=cluster (raw
    # connections then go to its first broker, raw Produce requests to the partition's leader).
    b = broker_factory.target("badinput")
    try:
        yield b
    finally:
        broker_factory.close(b)


def _api_versions_ok(sock, correlation_id=7):
    corr, err, apis = kp.api_versions(sock, version=3, correlation_id=correlation_id)
    assert corr == correlation_id and err == kp.ERR_NONE
    assert kp.API_PRODUCE in apis and kp.API_API_VERSIONS in apis
    return apis


def _still_serving(broker, witness=None):
    """A connection opened before the bad input still works, a new one too,
    and a normal client produces and consumes."""
    if witness is not None:
        _api_versions_ok(witness, correlation_id=11)
    with kp.connect(broker.host, broker.port) as s:
        _api_versions_ok(s, correlation_id=12)
    produce_and_consume_check(broker.bootstrap, "bad-input")
    assert broker.alive(), "broker process died"


# ------------------------------------------------------------------- framing
def test_oversized_length_prefix_closes_connection(bad_broker):
    b = bad_broker
    with kp.connect(b.host, b.port) as witness, kp.connect(b.host, b.port) as s:
        _api_versions_ok(witness)
        # 200 MiB > socket.request.max.bytes (Kafka: 100 MiB); send a little
        # of the "body" and nothing more.
        s.sendall(struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 64)
        outcome, _ = kp.wait_closed_or_response(s, timeout=15)
        assert outcome == "closed", f"oversized frame: connection {outcome}, expected closed"
        _still_serving(b, witness)


@pytest.mark.parametrize("prefix", [-1, -2147483648], ids=["minus1", "int_min"])
def test_negative_length_prefix_closes_connection(bad_broker, prefix):
    b = bad_broker
    with kp.connect(b.host, b.port) as witness, kp.connect(b.host, b.port) as s:
        _api_versions_ok(witness)
        s.sendall(struct.pack(">i", prefix) + b"\x00" * 16)
        outcome, _ = kp.wait_closed_or_response(s, timeout=15)
        assert outcome == "closed", f"negative length: connection {outcome}, expected closed"
        _still_serving(b, witness)


def _garbage_cases():
    rng = random.Random(20240607)
    cases = []
    for i in range(3):  # random bytes, header included
        cases.append((f"random{i}", bytes(rng.randrange(256) for _ in range(64 + 50 * i))))
    # Real header of known APIs, garbage body.
    cases.append(("metadata_v12_garbage",
                  kp.request_header_v2(kp.API_METADATA, 12, 5) + bytes(rng.randrange(256) for _ in range(40))))
    cases.append(("produce_v7_garbage",
                  kp.request_header_v1(kp.API_PRODUCE, 7, 6) + b"\xff\xff\x00\x01" + b"\x7f" * 40))
    # A header cut short, and an empty frame.
    cases.append(("short_header", b"\x00\x03\x00"))
    cases.append(("empty_frame", b""))
    # Unknown API key with a well-formed header.
    cases.append(("unknown_api_key", kp.request_header_v1(9999, 0, 8)))
    return cases


@pytest.mark.parametrize("name,payload", _garbage_cases(), ids=[c[0] for c in _garbage_cases()])
def test_garbage_frame_is_refused(bad_broker, name, payload):
    """A frame with a valid length and a body that is not a valid request is
    answered with an error or the connection is closed; the broker neither
    hangs the connection nor stops serving."""
    b = bad_broker
    with kp.connect(b.host, b.port) as witness, kp.connect(b.host, b.port) as s:
        _api_versions_ok(witness)
        s.sendall(kp.frame(payload))
        outcome, resp = kp.wait_closed_or_response(s, timeout=15)
        assert outcome in ("closed", "response"), (
            f"{name}: no answer and connection left open after 15s")
        if outcome == "response":
            # An answer must at least be a well-formed frame; then the
            # connection must be closed or still usable.
            assert resp is not None and len(resp) >= 4
        _still_serving(b, witness)


# ---------------------------------------------------------------- ApiVersions
def test_api_versions_unsupported_version_gets_v0_error_and_list(bad_broker):
    b = bad_broker
    with kp.connect(b.host, b.port) as s:
        payload = kp.roundtrip(s, kp.api_versions_request(99, correlation_id=4242))
        corr, err, apis = kp.parse_api_versions_response(payload, version=0)
        assert corr == 4242
        assert err == kp.ERR_UNSUPPORTED_VERSION
        # Kafka lists only ApiVersions' own range here (KIP-511: enough for the
        # client to retry with a version both sides know); listing every API
        # is allowed too.
        assert kp.API_API_VERSIONS in apis, f"ApiVersions missing from the list: {apis}"
        lo, hi = apis[kp.API_API_VERSIONS]
        assert lo == 0 and 3 <= hi < 99
        # The same connection keeps working with a supported version.
        apis3 = _api_versions_ok(s, correlation_id=4243)
        assert apis3[kp.API_API_VERSIONS] == (lo, hi)
        for key, (klo, khi) in apis.items():
            assert apis3.get(key) == (klo, khi)
        for key in (kp.API_PRODUCE, 1, kp.API_METADATA):  # Produce, Fetch, Metadata
            assert key in apis3, f"api key {key} missing from the version list"
            assert apis3[key][0] <= apis3[key][1]
        # v0 request, v0 response, the same list.
        corr, err, apis0 = kp.api_versions(s, version=0, correlation_id=4244)
        assert (corr, err) == (4244, kp.ERR_NONE) and apis0 == apis3
    _still_serving(b)


# ------------------------------------------------------------------- Produce
def _hwm(broker, topic, partition):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("hwm")})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        c.close()


def _leader(broker, topic, partition):
    """(host, port) of the partition's leader (the broker itself unless it is a cluster).
    Waits until the broker asked knows it: in a cluster each broker's view follows the store
    within a second, so one may still say -1 just after another showed the leader."""
    a = admin(broker.bootstrap)
    md = wait_for_partitions(a, topic, len(a.list_topics(topic, timeout=30).topics[topic].partitions))
    node = md.brokers[md.topics[topic].partitions[partition].leader]
    return node.host, node.port


def _warm_up(s, topic, partitions, timeout=15):
    """Produce one record to each partition, retrying while a just-created
    partition is not served yet (Kafka can answer NOT_LEADER_OR_FOLLOWER for a
    moment after the metadata shows a leader; clients retry that)."""
    deadline = time.monotonic() + timeout
    for p in partitions:
        while True:
            _corr, res = kp.produce_v7(s, 9, {topic: {p: kp.record_batch([(b"warm", b"up")])}})
            err, base, _ls = res[(topic, p)]
            if err == kp.ERR_NONE:
                assert base == 0
                break
            assert err in (5, 6) and time.monotonic() < deadline, f"warm-up produce: error {err}"
            time.sleep(0.1)


def test_produce_to_missing_partition_and_topic(bad_broker):
    b = bad_broker
    topic = create_topic(b.bootstrap, unique("raw-missing"), 2)
    missing_topic = unique("raw-nosuch")
    batch = kp.record_batch([(b"k", b"v")])
    with kp.connect(*_leader(b, topic, 0)) as s:
        _warm_up(s, topic, [0])
        corr, res = kp.produce_v7(s, 31, {topic: {0: batch, 5: batch}, missing_topic: {0: batch}})
        assert corr == 31
        assert res[(topic, 0)][0] == kp.ERR_NONE and res[(topic, 0)][1] == 1
        assert res[(topic, 5)][0] == kp.ERR_UNKNOWN_TOPIC_OR_PARTITION
        assert res[(missing_topic, 0)][0] == kp.ERR_UNKNOWN_TOPIC_OR_PARTITION
        # The connection stays usable after per-partition errors.
        _api_versions_ok(s)
    assert _hwm(b, topic, 0) == (0, 2)
    assert _hwm(b, topic, 1) == (0, 0)
    _still_serving(b)


def test_corrupt_crc_gets_corrupt_message(bad_broker):
    b = bad_broker
    topic = create_topic(b.bootstrap, unique("raw-crc"), 1)
    good = kp.record_batch([(b"key-%d" % i, b"value-%d" % i) for i in range(5)])
    bad = kp.corrupt_payload(kp.record_batch([(b"key-x", b"value-x")]))
    with kp.connect(*_leader(b, topic, 0)) as s:
        _warm_up(s, topic, [0])
        # A hand-made batch with the right CRC is accepted ...
        corr, res = kp.produce_v7(s, 41, {topic: {0: good}})
        assert corr == 41 and res[(topic, 0)][:2] == (kp.ERR_NONE, 1)
        # ... the same with one flipped byte is CORRUPT_MESSAGE, and nothing is appended.
        corr, res = kp.produce_v7(s, 42, {topic: {0: bad}})
        assert corr == 42 and res[(topic, 0)][0] == kp.ERR_CORRUPT_MESSAGE
        corr, res = kp.produce_v7(s, 43, {topic: {0: good}})
        assert corr == 43 and res[(topic, 0)][:2] == (kp.ERR_NONE, 6)
    assert _hwm(b, topic, 0) == (0, 11)
    _still_serving(b)


def test_pipelined_requests_answered_in_order(bad_broker):
    """Several requests written back to back on one connection before reading
    any answer: every one is answered, in order (Kafka's ordering guarantee)."""
    b = bad_broker
    topic = create_topic(b.bootstrap, unique("raw-pipe"), 1)
    with kp.connect(*_leader(b, topic, 0)) as s:
        _warm_up(s, topic, [0])
        reqs = []
        for i in range(20):
            if i % 2:
                reqs.append(kp.api_versions_request(3, 100 + i))
            else:
                reqs.append(kp.produce_request_v7(100 + i, {topic: {0: kp.record_batch([(None, b"%d" % i)])}}))
        s.sendall(b"".join(kp.frame(r) for r in reqs))
        for i in range(20):
            payload = kp.recv_frame(s)
            if i % 2:
                corr, err, _ = kp.parse_api_versions_response(payload, 3)
                assert (corr, err) == (100 + i, 0)
            else:
                corr, res = kp.parse_produce_response_v7(payload)
                assert corr == 100 + i and res[(topic, 0)][:2] == (0, 1 + i // 2)
    assert _hwm(b, topic, 0) == (0, 11)
