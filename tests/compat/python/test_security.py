"""Security as Kafka users configure it: several listeners (PLAINTEXT, SASL_PLAINTEXT,
SASL_SSL, SSL with client certificates), SCRAM users made with the admin API, SASL/SCRAM and
PLAIN with confluent-kafka (librdkafka) and kafka-python, mTLS, re-authentication (KIP-368),
certificates renewed without a restart, and what bad input gets: a wrong password, an unknown
mechanism, a request before authenticating, garbage instead of a TLS handshake, a certificate
from another CA, failures from one address (which never lock a right password out).

Weir only (Kafka would need its own JAAS and keystore setup); single broker processes of their
own, started with `[security]` settings. The TLS material comes from tests/compat/tls/make-certs.sh.
"""

import hmac
import json
import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kproto as kp
from compat_util import create_topic, eventually, metric, unique
from conftest import KIND, REPO, free_port

pytestmark = [
    pytest.mark.skipif(KIND != "weir", reason="Weir's security settings (Kafka needs JAAS)"),
    pytest.mark.single_broker("starts brokers of its own with listeners and TLS files"),
]

MAKE_CERTS = os.path.join(REPO, "tests", "compat", "tls", "make-certs.sh")
# carol is the user the failure tests get wrong: failures of a user from one address lock that
# user out there for a minute, and alice and bob are needed by the other tests.
USERS = {"alice": ("alice-secret", ScramMechanism.SCRAM_SHA_256),
         "bob": ("bob-secret", ScramMechanism.SCRAM_SHA_512),
         "carol": ("carol-secret", ScramMechanism.SCRAM_SHA_256)}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("certs"))
    subprocess.run(["bash", MAKE_CERTS, d], check=True, timeout=120)
    return d


class Secure:
    """A broker with a PLAINTEXT listener (the harness's port, for admin work) and
    SASL_PLAINTEXT, SASL_SSL and SSL (client certificates required) listeners."""

    def __init__(self, factory, name, certs, env=None):
        self.certs = certs
        self.ports = {"SASL_PLAINTEXT": free_port(), "SASL_SSL": free_port(), "SSL": free_port()}
        self.broker = factory.new(name, start=False, env={
            "WEIR_SECURITY_SASL_ENABLED_MECHANISMS": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "WEIR_SECURITY_SSL_KEYSTORE_LOCATION": os.path.join(certs, "server.pem"),
            "WEIR_SECURITY_SSL_TRUSTSTORE_LOCATION": os.path.join(certs, "ca.pem"),
            "WEIR_SECURITY_SSL_CLIENT_AUTH": "required",
            **(env or {})})
        listeners = [f"PLAINTEXT://127.0.0.1:{self.broker.port}"] + [
            f"{name}://127.0.0.1:{port}" for name, port in self.ports.items()]
        self.broker.env["WEIR_SECURITY_LISTENERS"] = ",".join(listeners)
        self.broker.start()
        self.admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        upserts = [UserScramCredentialUpsertion(u, ScramCredentialInfo(m, 4096), pw.encode())
                   for u, (pw, m) in USERS.items()]
        for user, f in self.admin.alter_user_scram_credentials(upserts).items():
            f.result(timeout=20)

    def conf(self, listener, user=None, password=None, mechanism=None, cert="client"):
        c = {"bootstrap.servers": f"127.0.0.1:{self.ports[listener]}",
             "security.protocol": listener}
        if listener.endswith("SSL"):
            c["ssl.ca.location"] = os.path.join(self.certs, "ca.pem")
        if listener == "SSL" and cert:
            c["ssl.certificate.location"] = os.path.join(self.certs, f"{cert}.pem")
            c["ssl.key.location"] = os.path.join(self.certs, f"{cert}.key")
        if listener.startswith("SASL"):
            pw, m = USERS.get(user, (None, ScramMechanism.SCRAM_SHA_256))
            c["sasl.mechanism"] = mechanism or ("SCRAM-SHA-256" if m == ScramMechanism.SCRAM_SHA_256
                                                else "SCRAM-SHA-512")
            c["sasl.username"] = user
            c["sasl.password"] = password if password is not None else pw
        return c


@pytest.fixture(scope="module")
def secure(broker_factory, certs):
    s = Secure(broker_factory, "secure", certs, env={"WEIR_SECURITY_SSL_RELOAD_INTERVAL_MS": "200"})
    try:
        yield s
    finally:
        broker_factory.close(s.broker)


def round_trip(conf, topic, n=50, clients=None):
    """Produces n records (idempotent, acks=all) and reads them back in a group; returns the
    brokers the producer's metadata names."""
    p = Producer({**conf, "enable.idempotence": True, "acks": "all", "message.timeout.ms": 20000})
    if clients is not None:
        clients.add(p)
    errors = []
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), key=str(i).encode(),
                  on_delivery=lambda e, m: errors.append(e) if e else None)
    assert p.flush(30) == 0 and not errors, errors
    brokers = {(b.host, b.port) for b in p.list_topics(timeout=10).brokers.values()}
    c = Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    if clients is not None:
        clients.add(c)
    c.subscribe([topic])
    seen = set()
    deadline = time.monotonic() + 30
    while len(seen) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen.add(m.value())
    c.close()
    assert seen == {f"v{i}".encode() for i in range(n)}
    return brokers


@pytest.mark.parametrize("listener,user,mechanism", [
    ("SASL_SSL", "alice", "SCRAM-SHA-256"),
    ("SASL_SSL", "bob", "SCRAM-SHA-512"),
    ("SASL_SSL", "bob", "PLAIN"),
    ("SASL_PLAINTEXT", "alice", "SCRAM-SHA-256"),
])
def test_confluent_produces_and_consumes_over_sasl(secure, clients, listener, user, mechanism):
    topic = create_topic(secure.broker.bootstrap, unique("sasl"), 2)
    brokers = round_trip(secure.conf(listener, user, mechanism=mechanism), topic, clients=clients)
    # Metadata on a listener names every broker's endpoint of that listener.
    assert brokers == {("127.0.0.1", secure.ports[listener])}


def test_kafka_python_produces_and_consumes_over_sasl_ssl_with_scram(secure):
    from kafka import KafkaConsumer, KafkaProducer
    topic = create_topic(secure.broker.bootstrap, unique("kpy-sasl"), 1)
    common = dict(bootstrap_servers=f"127.0.0.1:{secure.ports['SASL_SSL']}",
                  security_protocol="SASL_SSL", ssl_cafile=os.path.join(secure.certs, "ca.pem"),
                  sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob",
                  sasl_plain_password="bob-secret")
    p = KafkaProducer(acks="all", **common)
    try:
        for i in range(20):
            p.send(topic, f"k{i}".encode()).get(timeout=20)
    finally:
        p.close()
    c = KafkaConsumer(topic, group_id=unique("kpy"), auto_offset_reset="earliest",
                      consumer_timeout_ms=15000, **common)
    try:
        got = set()
        for m in c:
            got.add(m.value)
            if len(got) == 20:
                break
    finally:
        c.close()
    assert got == {f"k{i}".encode() for i in range(20)}


def _auth_errors(conf, seconds=10):
    """Errors a producer with `conf` reports while trying to send for `seconds`."""
    seen = []
    p = Producer({**conf, "message.timeout.ms": seconds * 1000,
                  "error_cb": lambda e: seen.append(e)})
    delivered = []
    p.produce("never-created", b"x", on_delivery=lambda e, m: delivered.append(e))
    p.flush(seconds + 5)
    p.purge()
    return seen, delivered


@pytest.mark.parametrize("user,password", [("carol", "wrong"), ("mallory", "whatever")])
def test_wrong_credentials_fail_with_an_authentication_error(secure, user, password):
    errors, delivered = _auth_errors(secure.conf("SASL_SSL", user, password, "SCRAM-SHA-256"), 6)
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, f"no authentication error, only {errors}"
    assert "invalid credentials" in auth[0].str(), auth[0].str()
    assert delivered and delivered[0] is not None, "nothing is delivered"
    # The broker goes on serving a client with the right password.
    topic = create_topic(secure.broker.bootstrap, unique("after-fail"), 1)
    round_trip(secure.conf("SASL_SSL", "alice"), topic, n=5)


def test_raw_exchanges_get_kafkas_error_codes_and_closed_connections(secure):
    port = secure.ports["SASL_PLAINTEXT"]
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM, with the ones on offer.
    with kp.connect("127.0.0.1", port) as s:
        err, offered = kp.sasl_handshake(s, "GSSAPI")
        assert err == kp.ERR_UNSUPPORTED_SASL_MECHANISM
        assert sorted(offered) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    # A request other than ApiVersions before authenticating closes the connection...
    with kp.connect("127.0.0.1", port) as s:
        kp.api_versions(s, version=3)
        s.sendall(kp.frame(kp.request_header_v1(kp.API_METADATA, 1, 9) + kp.i32(-1)))
        assert kp.wait_closed_or_response(s, 5)[0] == "closed"
    # ...a wrong proof is SASL_AUTHENTICATION_FAILED, and then the connection is closed...
    with kp.connect("127.0.0.1", port) as s:
        err, message, _, _ = kp.scram_login(s, "SCRAM-SHA-256", "nobody", "wrong")
        assert err == kp.ERR_SASL_AUTHENTICATION_FAILED
        assert "invalid credentials" in message
        assert kp.wait_closed_or_response(s, 5)[0] == "closed"
    # ...and the right one serves Metadata, naming the SASL_PLAINTEXT endpoint.
    with kp.connect("127.0.0.1", port) as s:
        err, message, server_final, _ = kp.scram_login(s, "SCRAM-SHA-512", "bob", "bob-secret")
        assert err == kp.ERR_NONE, message
        assert server_final.startswith(b"v=")
        assert kp.metadata_v1(s) == {1: ("127.0.0.1", port)}
    # PLAIN, raw.
    with kp.connect("127.0.0.1", port) as s:
        assert kp.sasl_handshake(s, "PLAIN")[0] == kp.ERR_NONE
        assert kp.sasl_authenticate(s, b"\0alice\0alice-secret")[0] == kp.ERR_NONE
        assert kp.metadata_v1(s)


def test_mtls_admits_clients_with_a_certificate_of_the_ca_only(secure, clients):
    topic = create_topic(secure.broker.bootstrap, unique("mtls"), 1)
    round_trip(secure.conf("SSL", cert="client"), topic, n=10, clients=clients)
    before = metric(secure.broker, "weir_tls_handshake_failures_total")
    for cert in (None, "other-client"):
        errors, delivered = _auth_errors(secure.conf("SSL", cert=cert), 5)
        assert delivered and delivered[0] is not None, f"{cert}: a record was delivered"
        assert errors, f"{cert}: no error reported"
    assert metric(secure.broker, "weir_tls_handshake_failures_total") > before


def test_garbage_and_stalled_tls_handshakes_hold_up_no_one(secure, clients):
    socks = []
    try:
        for i in range(10):
            s = socket.create_connection(("127.0.0.1", secure.ports["SASL_SSL"]), timeout=5)
            socks.append(s)
            if i % 2 == 0:
                s.sendall(os.urandom(1024))  # not a ClientHello
            # the others send nothing: a handshake that never starts
        for s in socks[::2]:
            assert _closed_within(s, 5), "garbage instead of a ClientHello left the connection open"
        topic = create_topic(secure.broker.bootstrap, unique("garbage"), 1)
        round_trip(secure.conf("SASL_SSL", "alice"), topic, n=5, clients=clients)
    finally:
        for s in socks:
            s.close()


def _closed_within(sock, timeout):
    """Whether the peer closes the connection within `timeout` s (whatever it sends first,
    such as a TLS alert)."""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            if not sock.recv(4096):
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False
    return False


def _served_certificate(port):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw) as s:
            return s.getpeercert(binary_form=True)


def test_a_renewed_certificate_is_served_without_a_restart(secure, clients, tmp_path):
    port = secure.ports["SASL_SSL"]
    old = _served_certificate(port)
    # A new certificate and key of the same CA, written in place (as a renewal does).
    fresh = str(tmp_path / "fresh")
    shutil.copytree(secure.certs, fresh)
    for f in ("server.pem", "server.key", "server-cert.pem"):
        os.remove(os.path.join(fresh, f))
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    os.path.join(fresh, "new.key"), "-out", os.path.join(fresh, "new.csr"),
                    "-subj", "/CN=renewed"], check=True, capture_output=True)
    ext = os.path.join(fresh, "new.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
    subprocess.run(["openssl", "x509", "-req", "-in", os.path.join(fresh, "new.csr"), "-CA",
                    os.path.join(fresh, "ca.pem"), "-CAkey", os.path.join(fresh, "ca.key"),
                    "-CAcreateserial", "-days", "30", "-extfile", ext, "-out",
                    os.path.join(fresh, "new.pem")], check=True, capture_output=True)
    target = os.path.join(secure.certs, "server.pem")
    with open(os.path.join(fresh, "new.pem")) as c, open(os.path.join(fresh, "new.key")) as k:
        pem = c.read() + k.read()
    with open(target + ".tmp", "w") as f:
        f.write(pem)
    os.replace(target + ".tmp", target)
    deadline = time.monotonic() + 10
    new = old
    while new == old and time.monotonic() < deadline:
        time.sleep(0.2)
        new = _served_certificate(port)
    assert new != old, "the renewed certificate was not served within 10 s"
    topic = create_topic(secure.broker.bootstrap, unique("renewed"), 1)
    round_trip(secure.conf("SASL_SSL", "alice"), topic, n=5, clients=clients)


def test_sessions_end_and_clients_reauthenticate(broker_factory, certs, clients):
    s = Secure(broker_factory, "reauth", certs,
               env={"WEIR_SECURITY_CONNECTIONS_MAX_REAUTH_MS": "1500"})
    try:
        port = s.ports["SASL_PLAINTEXT"]
        # A raw client is told its session's lifetime, is served within it, and is closed
        # once it is over.
        with kp.connect("127.0.0.1", port) as sock:
            err, _, _, lifetime = kp.scram_login(sock, "SCRAM-SHA-256", "alice", "alice-secret")
            assert err == kp.ERR_NONE and lifetime == 1500
            assert kp.metadata_v1(sock)
            time.sleep(2)
            sock.sendall(kp.frame(kp.request_header_v1(kp.API_METADATA, 1, 9) + kp.i32(-1)))
            assert kp.wait_closed_or_response(sock, 5)[0] == "closed"
        # librdkafka re-authenticates on its connections before their sessions end: a
        # producer that keeps sending for 6 s sees no error.
        topic = create_topic(s.broker.bootstrap, unique("reauth"), 1)
        before = metric(s.broker, "weir_sasl_authentications_succeeded_total")
        errors = []
        p = clients.add(Producer({**s.conf("SASL_SSL", "bob"), "acks": "all",
                                  "enable.idempotence": True, "message.timeout.ms": 20000,
                                  "error_cb": lambda e: errors.append(e)}))
        acked = []
        end = time.monotonic() + 6
        i = 0
        while time.monotonic() < end:
            p.produce(topic, f"r{i}".encode(),
                      on_delivery=lambda e, m: acked.append(e))
            p.poll(0.05)
            i += 1
        assert p.flush(20) == 0
        assert len(acked) == i and all(e is None for e in acked), [e for e in acked if e][:3]
        assert not [e for e in errors if e.code() == KafkaError._AUTHENTICATION], errors
        reauths = metric(s.broker, "weir_sasl_authentications_succeeded_total") - before
        assert reauths >= 4, f"only {reauths} authentications in 6 s of 1.5 s sessions"
    finally:
        broker_factory.close(s.broker)


def test_failures_from_an_address_never_lock_out_a_right_password(broker_factory, certs):
    # A password rotation: a client with the old password keeps failing from this address;
    # the right password still gets in (a lockout by address and user refused it before).
    s = Secure(broker_factory, "ratelimit", certs)
    try:
        port = s.ports["SASL_PLAINTEXT"]
        for _ in range(15):
            with kp.connect("127.0.0.1", port) as sock:
                err = kp.scram_login(sock, "SCRAM-SHA-256", "alice", "guess")[0]
                assert err == kp.ERR_SASL_AUTHENTICATION_FAILED
        with kp.connect("127.0.0.1", port) as sock:
            err, message, _, _ = kp.scram_login(sock, "SCRAM-SHA-256", "alice", "alice-secret")
        assert err == kp.ERR_NONE, message
        assert metric(s.broker, "weir_sasl_authentications_refused_total") == 0
        assert metric(s.broker, "weir_sasl_authentications_failed_total") == 15
        # SCRAM checks cost the broker no PBKDF2: none counted.
        assert metric(s.broker, "weir_sasl_password_checks_total") == 0
    finally:
        broker_factory.close(s.broker)


# ------------------------------------------------------------------- ACLs
@pytest.fixture(scope="module")
def acl_broker(broker_factory, certs):
    """ACLs enforced; the PLAINTEXT listener's ANONYMOUS is a super user (the tests' admin)."""
    s = Secure(broker_factory, "acl", certs, env={
        "WEIR_SECURITY_AUTHORIZER": "acl",
        "WEIR_SECURITY_SUPER_USERS": "User:ANONYMOUS;User:admin"})
    try:
        yield s
    finally:
        broker_factory.close(s.broker)


def _acl(kind, name, principal, op, permission="ALLOW", pattern="LITERAL"):
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    return AclBinding(getattr(ResourceType, kind), name, getattr(ResourcePatternType, pattern),
                      principal, "*", getattr(AclOperation, op),
                      getattr(AclPermissionType, permission))


def _create_acls(admin_client, *bindings):
    for b, f in admin_client.create_acls(list(bindings)).items():
        assert f.result(timeout=20) is None, b


def _produce_errors(conf, topic, n=3):
    p = Producer({**conf, "message.timeout.ms": 8000})
    errors = []
    for i in range(n):
        p.produce(topic, f"x{i}".encode(), on_delivery=lambda e, m: errors.append(e))
    p.flush(12)
    return errors


def test_acls_decide_who_produces_consumes_and_sees_what(acl_broker, clients):
    s = acl_broker
    orders = create_topic(s.broker.bootstrap, unique("orders"), 1)
    payments = create_topic(s.broker.bootstrap, unique("payments"), 1)
    group = unique("orders-app")
    _create_acls(s.admin,
                 _acl("TOPIC", orders, "User:alice", "WRITE"),
                 _acl("TOPIC", orders, "User:alice", "READ"),
                 _acl("GROUP", group, "User:alice", "READ"))
    alice = s.conf("SASL_PLAINTEXT", "alice")
    # Allowed: produce and consume orders in her group.
    assert _produce_errors(alice, orders) == [None] * 3
    c = clients.add(Consumer({**alice, "group.id": group, "auto.offset.reset": "earliest"}))
    c.subscribe([orders])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    assert sorted(got) == [b"x0", b"x1", b"x2"]
    c.commit(asynchronous=False)
    # Denied: another topic, another group, another user.
    errors = _produce_errors(alice, payments)
    assert errors and all(e is not None and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
                          for e in errors), errors
    bob = s.conf("SASL_PLAINTEXT", "bob")
    errors = _produce_errors(bob, orders)
    assert errors and errors[0] is not None and \
        errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
    other = clients.add(Consumer({**alice, "group.id": unique("other-group"),
                                  "auto.offset.reset": "earliest"}))
    other.subscribe([orders])
    seen = None
    deadline = time.monotonic() + 15
    while seen is None and time.monotonic() < deadline:
        m = other.poll(0.5)
        if m is not None and m.error() is not None:
            seen = m.error()
    assert seen is not None and seen.code() == KafkaError.GROUP_AUTHORIZATION_FAILED, seen
    # Metadata of every topic names only what alice may describe.
    listed = set(Producer(alice).list_topics(timeout=10).topics)
    assert orders in listed and payments not in listed, listed
    assert payments in set(s.admin.list_topics(timeout=10).topics)


def test_deny_wins_prefixes_apply_and_revocation_is_seen(acl_broker):
    s = acl_broker
    prefix = unique("logs") + "-"
    app, audit = create_topic(s.broker.bootstrap, prefix + "app", 1), \
        create_topic(s.broker.bootstrap, prefix + "audit", 1)
    allow = _acl("TOPIC", prefix, "User:bob", "WRITE", pattern="PREFIXED")
    deny = _acl("TOPIC", audit, "User:bob", "WRITE", permission="DENY")
    _create_acls(s.admin, allow, deny)
    bob = s.conf("SASL_PLAINTEXT", "bob")
    assert _produce_errors(bob, app) == [None] * 3
    errors = _produce_errors(bob, audit)
    assert errors[0] is not None and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    # DescribeAcls with a MATCH filter finds both bindings that apply to the audit topic.
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    match = AclBindingFilter(ResourceType.TOPIC, audit, ResourcePatternType.MATCH, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    found = s.admin.describe_acls(match).result(timeout=20)
    assert {(b.name, b.permission_type) for b in found} == {
        (prefix, AclPermissionType.ALLOW), (audit, AclPermissionType.DENY)}
    # Deleting the DENY opens the topic.
    exact = AclBindingFilter(ResourceType.TOPIC, audit, ResourcePatternType.LITERAL, "User:bob",
                             None, AclOperation.WRITE, AclPermissionType.DENY)
    deleted = list(s.admin.delete_acls([exact]).values())[0].result(timeout=20)
    assert len(deleted) == 1
    assert _produce_errors(bob, audit) == [None] * 3


def test_admin_apis_need_cluster_permissions(acl_broker):
    s = acl_broker
    alice_admin = AdminClient({k: v for k, v in s.conf("SASL_PLAINTEXT", "alice").items()})
    with pytest.raises(Exception) as e:
        _create_acls(alice_admin, _acl("TOPIC", "x", "User:alice", "ALL"))
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(e.value) or "authoriz" in str(e.value).lower(), e.value
    from confluent_kafka.admin import NewTopic
    name = unique("alice-new")
    f = alice_admin.create_topics([NewTopic(name, 1, 1)])[name]
    with pytest.raises(Exception) as e:
        f.result(timeout=20)
    assert "TOPIC_AUTHORIZATION_FAILED" in str(e.value), e.value
    # CREATE on a topic prefix is enough to create one.
    _create_acls(s.admin, _acl("TOPIC", "alice-", "User:alice", "CREATE", pattern="PREFIXED"))
    name = unique("alice-new")
    alice_admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=20)


def test_kafka_python_sees_authorization_errors(acl_broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError
    s = acl_broker
    topic = create_topic(s.broker.bootstrap, unique("kpy-denied"), 1)
    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{s.ports['SASL_PLAINTEXT']}",
                      security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256",
                      sasl_plain_username="alice", sasl_plain_password="alice-secret",
                      max_block_ms=10000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            p.send(topic, b"x").get(timeout=15)
    finally:
        p.close()


# ----------------------------------------------------------------- quotas
def _produce_rate(conf, topic, seconds, measure_from):
    """Produces 1 KiB records as fast as the client goes for `seconds`; the acknowledged bytes
    per second after `measure_from` seconds."""
    p = Producer({**conf, "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                  "queue.buffering.max.kbytes": 64})
    acked = []
    start = time.monotonic()
    value = b"q" * 1024
    while time.monotonic() - start < seconds:
        try:
            p.produce(topic, value, on_delivery=lambda e, m: acked.append(
                (time.monotonic(), e is None)))
        except BufferError:
            p.poll(0.01)
        p.poll(0)
    p.flush(60)
    window = [t for t, ok in acked if ok and measure_from <= t - start <= seconds]
    return len(window) * 1024 / (seconds - measure_from)


def test_a_producer_over_its_byte_rate_quota_is_throttled_to_it(broker_factory, certs):
    # A short quota window (2 samples of 1 s; Kafka's default is 11) so that the rate settles
    # within the test: the rate is measured over at least the window less one sample, so the
    # first second may burst.
    s = Secure(broker_factory, "quota", certs, env={"WEIR_SECURITY_QUOTA_WINDOW_NUM": "2"})
    quota = 200 * 1024
    try:
        with kp.connect("127.0.0.1", s.broker.port) as sock:
            err, msg = kp.alter_client_quotas(sock, {"user": "alice"},
                                              [("producer_byte_rate", quota)])
            assert err == 0, msg
            err, msg = kp.alter_client_quotas(sock, {"user": "bob"}, [("no_such_quota", 1.0)])
            assert err == 42, (err, msg)  # INVALID_REQUEST
        topic = create_topic(s.broker.bootstrap, unique("quota"), 1)
        alice = _produce_rate(s.conf("SASL_PLAINTEXT", "alice"), topic, 10, 3)
        bob = _produce_rate(s.conf("SASL_PLAINTEXT", "bob"), topic, 5, 1)
        print(f"quota {quota / 1024:.0f} KiB/s: alice {alice / 1024:.0f} KiB/s, "
              f"bob (no quota) {bob / 1024:.0f} KiB/s")
        assert alice <= quota * 1.3, f"alice produced {alice / 1024:.0f} KiB/s"
        assert alice >= quota * 0.5, f"alice was held far below her quota: {alice / 1024:.0f}"
        assert bob >= quota * 3, f"bob, without a quota, produced only {bob / 1024:.0f} KiB/s"
        assert metric(s.broker, "weir_quota_produce_throttled_total") > 0
        # Removed, the quota no longer holds alice back.
        with kp.connect("127.0.0.1", s.broker.port) as sock:
            assert kp.alter_client_quotas(sock, {"user": "alice"},
                                          [("producer_byte_rate", None)])[0] == 0
        time.sleep(1)
        freed = _produce_rate(s.conf("SASL_PLAINTEXT", "alice"), topic, 4, 1)
        assert freed >= quota * 3, f"alice after the quota's removal: {freed / 1024:.0f} KiB/s"
    finally:
        broker_factory.close(s.broker)


# ----------------------------------------------------- broker-to-broker calls
def _hello(node_id, zone, timestamp_ms, proof):
    body = kp.i32(node_id) + kp.string(zone) + kp.i64(timestamp_ms) + kp.i16(len(proof)) + proof
    return kp.i16(1003) + kp.i16(0) + kp.i32(0) + body  # HELLO: key, version, correlation


def test_brokers_prove_the_internal_secret_to_each_other(broker_factory, clients):
    # Two zones: a produce to a partition led in the other zone is forwarded over the internal
    # listener, so the cluster works only if its brokers admit each other.
    c = broker_factory.cluster("secret", size=2, zones=["az1", "az2"],
                               env={"WEIR_CLUSTER_INTERNAL_SECRET": "s3cret-of-the-cluster"})
    try:
        topic = create_topic(c.bootstrap, unique("internal"), 4)
        for b in c.brokers:
            conf = {"bootstrap.servers": b.bootstrap, "client.id": f"app,weir_az={b.zone}"}
            round_trip(conf, topic, n=40, clients=clients)
        status, cluster = c.brokers[0].admin("GET", "/v1/cluster")
        assert status == 200, cluster
        host, port = next(x["internal"] for x in cluster["brokers"]).rsplit(":", 1)
        # Anything before a hello, a hello without a proof or with a wrong one: closed.
        now_ms = int(time.time() * 1000)
        for first in (kp.request_header_v1(kp.API_METADATA, 1, 9) + kp.i32(-1),
                      _hello(99, "az1", now_ms, b""),
                      _hello(99, "az1", now_ms, b"\x00" * 32)):
            with kp.connect(host, int(port)) as s:
                s.sendall(kp.frame(first))
                s.sendall(kp.frame(kp.request_header_v1(kp.API_METADATA, 1, 10) + kp.i32(-1)))
                assert _closed_within(s, 5), first[:16]
        # A hello signed with the secret but answering no challenge, as earlier versions sent
        # it (and as anyone who saw one on the wire could send it again): closed.
        secret = b"s3cret-of-the-cluster"
        legacy = hmac.new(secret, f"weir-peer-hello\n99\naz1\n{now_ms}".encode(), "sha256").digest()
        with kp.connect(host, int(port)) as s:
            s.sendall(kp.frame(_hello(99, "az1", now_ms, legacy)))
            s.sendall(kp.frame(kp.request_header_v1(kp.API_METADATA, 1, 10) + kp.i32(-1)))
            assert _closed_within(s, 5), "a hello without a challenge was admitted"
        # Challenged: admitted on its connection, and worth nothing on another one.
        with kp.connect(host, int(port)) as s:
            nonce = _challenge(s)
            proof = hmac.new(secret, b"weir-peer-hello-2\n99\naz1\n" + nonce, "sha256").digest()
            s.sendall(kp.frame(_hello(99, "az1", now_ms, proof)))
            # Admitted: the next request is answered (the internal listener advertises no
            # broker to a Metadata request), not the connection closed.
            assert kp.metadata_v1(s, correlation_id=11) is not None
        with kp.connect(host, int(port)) as s:
            assert _challenge(s) != nonce
            s.sendall(kp.frame(_hello(99, "az1", now_ms, proof)))
            s.sendall(kp.frame(kp.request_header_v1(kp.API_METADATA, 1, 10) + kp.i32(-1)))
            assert _closed_within(s, 5), "a hello replayed on another connection was admitted"
    finally:
        broker_factory.close(c)


def _challenge(sock):
    """HELLO_CHALLENGE (internal key 1006): the listener's nonce for this connection."""
    sock.sendall(kp.frame(kp.i16(1006) + kp.i16(0) + kp.i32(7)))
    answer = kp.recv_frame(sock)
    assert answer[:4] == kp.i32(7), answer[:4]
    assert len(answer) == 4 + 32, len(answer)
    return answer[4:]


# ------------------------------------------------------------- OAUTHBEARER
def _b64url(b):
    import base64
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


class _Idp:
    """An identity provider of the test: an RSA key, its JWKS file, and RS256 tokens."""

    def __init__(self, path):
        from cryptography.hazmat.primitives.asymmetric import rsa
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        n = self.key.public_key().public_numbers()
        as_bytes = lambda i: i.to_bytes((i.bit_length() + 7) // 8, "big")  # noqa: E731
        self.path = path
        with open(path, "w") as f:
            json.dump({"keys": [{"kty": "RSA", "kid": "k1", "use": "sig", "alg": "RS256",
                                 "n": _b64url(as_bytes(n.n)), "e": _b64url(as_bytes(n.e))}]}, f)

    def token(self, sub, lifetime=3600, aud="weir", iss="https://idp.test", key=None):
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
        now = int(time.time())
        head = _b64url(json.dumps({"alg": "RS256", "kid": "k1", "typ": "JWT"}).encode())
        body = _b64url(json.dumps({"sub": sub, "iat": now, "exp": now + lifetime, "aud": aud,
                                   "iss": iss}).encode())
        signed = f"{head}.{body}".encode()
        sig = (key or self.key).sign(signed, padding.PKCS1v15(), hashes.SHA256())
        return f"{head}.{body}.{_b64url(sig)}", now + lifetime


def test_oauthbearer_tokens_signed_by_the_jwks_keys_authenticate(broker_factory, certs, clients,
                                                                  tmp_path):
    idp = _Idp(str(tmp_path / "jwks.json"))
    s = Secure(broker_factory, "oauth", certs, env={
        "WEIR_SECURITY_SASL_ENABLED_MECHANISMS": "OAUTHBEARER,SCRAM-SHA-256",
        "WEIR_SECURITY_SASL_OAUTHBEARER_JWKS_ENDPOINT_URL": f"file://{idp.path}",
        "WEIR_SECURITY_SASL_OAUTHBEARER_EXPECTED_AUDIENCE": "weir",
        "WEIR_SECURITY_SASL_OAUTHBEARER_EXPECTED_ISSUER": "https://idp.test"})
    try:
        base = {"bootstrap.servers": f"127.0.0.1:{s.ports['SASL_SSL']}",
                "security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER",
                "ssl.ca.location": os.path.join(certs, "ca.pem")}
        topic = create_topic(s.broker.bootstrap, unique("oauth"), 1)
        good = {**base, "oauth_cb": lambda _: idp.token("svc-orders")}
        round_trip(good, topic, n=10, clients=clients)
        from cryptography.hazmat.primitives.asymmetric import rsa
        stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for label, make in [
            ("another key", lambda _: idp.token("svc", key=stranger)),
            ("expired", lambda _: (idp.token("svc", lifetime=-120)[0], time.time() + 60)),
            ("another audience", lambda _: idp.token("svc", aud="web")),
            ("another issuer", lambda _: idp.token("svc", iss="https://evil.test")),
        ]:
            errors, delivered = _auth_errors({**base, "oauth_cb": make}, 3)
            auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
            assert auth, f"{label}: no authentication error, only {errors}"
            assert "Invalid OAuth token" in auth[0].str(), f"{label}: {auth[0].str()}"
            assert delivered and delivered[0] is not None, label
    finally:
        broker_factory.close(s.broker)


def test_a_client_over_its_request_percentage_is_slowed_down(broker_factory, certs):
    s = Secure(broker_factory, "reqquota", certs, env={"WEIR_SECURITY_QUOTA_WINDOW_NUM": "2"})
    try:
        with kp.connect("127.0.0.1", s.broker.port) as sock:
            # 0.2% of one thread: 2 ms of handling a second.
            err, msg = kp.alter_client_quotas(sock, {"user": "alice"},
                                              [("request_percentage", 0.2)])
            assert err == 0, msg

        def metadata_rate(user, password, seconds=4):
            with kp.connect("127.0.0.1", s.ports["SASL_PLAINTEXT"]) as sock:
                assert kp.scram_login(sock, "SCRAM-SHA-256", user, password)[0] == 0
                n, start = 0, time.monotonic()
                while time.monotonic() - start < seconds:
                    kp.metadata_v1(sock, correlation_id=100 + n % 1000)
                    n += 1
                return n / seconds

        slowed = metadata_rate("alice", "alice-secret")
        free = metadata_rate("carol", "carol-secret")
        print(f"Metadata requests/s: alice (0.2%) {slowed:.0f}, carol (no quota) {free:.0f}")
        assert slowed * 3 < free, (slowed, free)
        assert metric(s.broker, "weir_quota_request_throttled_total") > 0
    finally:
        broker_factory.close(s.broker)


def test_a_consumer_group_member_cannot_subscribe_to_topics_it_may_not_describe(acl_broker,
                                                                               clients):
    s = acl_broker
    hidden = create_topic(s.broker.bootstrap, unique("hidden"), 1)
    group = unique("kip848")
    _create_acls(s.admin, _acl("GROUP", group, "User:alice", "READ"))
    c = clients.add(Consumer({**s.conf("SASL_PLAINTEXT", "alice"), "group.id": group,
                              "group.protocol": "consumer", "auto.offset.reset": "earliest"}))
    c.subscribe([hidden])
    seen = None
    deadline = time.monotonic() + 15
    while seen is None and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is not None:
            seen = m.error()
    assert seen is not None and seen.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, seen


def _metadata_topic_names(port):
    """Metadata v1 of every topic, asked of the broker at `port` itself: the topic names."""
    with kp.connect("127.0.0.1", port) as sock:
        r = kp.Reader(kp.roundtrip(sock, kp.request_header_v1(kp.API_METADATA, 1, 7) + kp.i32(-1)))
        assert r.i32() == 7
        for _ in range(r.i32()):
            r.i32(), r.string(), r.i32(), r.string()
        r.i32()  # controller
        names = set()
        for _ in range(r.i32()):
            r.i16()
            names.add(r.string())
            r.take(1)  # is_internal
            for _ in range(r.i32()):
                r.i16(), r.i32(), r.i32()
                for _ in range(2):
                    for _ in range(r.i32()):
                        r.i32()
        return names


def test_every_broker_of_a_cluster_enforces_the_same_acls(broker_factory):
    # No super user: with allow_everyone_if_no_acl_found, ANONYMOUS (PLAINTEXT) may create ACLs
    # while the cluster resource has none, and is then held to the ones it made.
    c = broker_factory.cluster("acls", size=2, env={
        "WEIR_SECURITY_AUTHORIZER": "acl",
        "WEIR_SECURITY_ALLOW_EVERYONE_IF_NO_ACL_FOUND": "true"})
    try:
        first = c.brokers[0]
        secret = create_topic(first.bootstrap, unique("secret"), 1)
        public = create_topic(first.bootstrap, unique("public"), 1)
        for b in c.brokers:
            # The other broker learns of new topics from the store's notification (or its next
            # re-read, within a second): asynchronously, as Kafka's brokers do.
            def sees_both(b=b):
                assert {secret, public} <= _metadata_topic_names(b.port), b.name
            eventually(sees_both)
        # A DENY made through the first broker...
        _create_acls(AdminClient({"bootstrap.servers": first.bootstrap}),
                     _acl("TOPIC", secret, "User:ANONYMOUS", "DESCRIBE", permission="DENY"))
        # ...hides the topic on the second one too, within its refresh interval.
        second = c.brokers[1]
        deadline = time.monotonic() + 10
        while secret in _metadata_topic_names(second.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        names = _metadata_topic_names(second.port)
        assert secret not in names and public in names, names
    finally:
        broker_factory.close(c)


def test_a_link_reaches_its_source_over_sasl_ssl_with_scram(secure, broker):
    """A cluster link's source client speaks TLS and SCRAM: the source here is this secured Weir
    broker (any Kafka-protocol cluster will do), the target the shared broker."""
    topic = unique("linked")
    create_topic(secure.broker.bootstrap, topic, 2)
    p = Producer({"bootstrap.servers": secure.broker.bootstrap, "enable.idempotence": True})
    for i in range(200):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    conf = secure.conf("SASL_SSL", "bob")
    definition = {"name": unique("secure-link"), "bootstrap.servers": conf["bootstrap.servers"],
                  "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                  "sasl.username": "bob", "sasl.password": "bob-secret",
                  "ssl.ca.location": conf["ssl.ca.location"], "topics": [topic],
                  "metadata.refresh.ms": 500}
    status, body = broker.admin("POST", "/v1/links", {**definition, "sasl.password": "wrong",
                                                      "name": unique("refused")}, timeout=60)
    assert status == 502 and "authenticat" in body["error"].lower(), body
    status, body = broker.admin("POST", "/v1/links", definition, timeout=60)
    assert status == 201, body
    assert body["spec"]["sasl.password"] == "[hidden]", body
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    seen = set()
    try:
        # The controller creates the mirror topic at its first look at the source (asking for
        # its metadata before could create an ordinary topic of that name).
        def mirrored():
            status, body = broker.admin("GET", f"/v1/links/{definition['name']}")
            assert status == 200 and body["topics"].get(topic, {}).get("state") == "mirroring", body

        eventually(mirrored, timeout=30)
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(seen) < 200 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.add((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    assert len(seen) == 200, f"{len(seen)} of 200 mirrored over SASL_SSL"
