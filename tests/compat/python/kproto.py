"""A tiny hand-written Kafka wire-protocol codec for raw-socket tests.

Only what test_bad_input.py needs: request framing (header v1 / v2),
ApiVersions (v0 and v3 responses), Produce v7 (request and response) and
RecordBatch v2 encoding with CRC-32C.
"""

import socket
import struct
import time

from compat_util import crc32c

API_PRODUCE = 0
API_METADATA = 3
API_API_VERSIONS = 18

ERR_NONE = 0
ERR_CORRUPT_MESSAGE = 2
ERR_UNKNOWN_TOPIC_OR_PARTITION = 3
ERR_UNSUPPORTED_VERSION = 35


# --------------------------------------------------------------- primitives
def i8(v):
    return struct.pack(">b", v)


def i16(v):
    return struct.pack(">h", v)


def i32(v):
    return struct.pack(">i", v)


def i64(v):
    return struct.pack(">q", v)


def string(s):
    if s is None:
        return i16(-1)
    b = s.encode()
    return i16(len(b)) + b


def bytes_(b):
    if b is None:
        return i32(-1)
    return i32(len(b)) + b


def uvarint(v):
    out = bytearray()
    while True:
        byte = v & 0x7F
        v >>= 7
        if v:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(v):
    """Zig-zag signed varint (used for varint and varlong in records)."""
    return uvarint((v << 1) ^ (v >> 63))


def compact_string(s):
    b = s.encode()
    return uvarint(len(b) + 1) + b


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"truncated: need {n} bytes at {self.pos}, have {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def string(self):
        n = self.i16()
        return None if n < 0 else self.take(n).decode()

    def uvarint(self):
        shift = 0
        result = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def tagged_fields(self):
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())

    def remaining(self):
        return len(self.data) - self.pos


# ------------------------------------------------------------------ framing
def request_header_v1(api_key, version, correlation_id, client_id="weir-compat-raw"):
    return i16(api_key) + i16(version) + i32(correlation_id) + string(client_id)


def request_header_v2(api_key, version, correlation_id, client_id="weir-compat-raw"):
    return request_header_v1(api_key, version, correlation_id, client_id) + uvarint(0)


def frame(payload):
    return i32(len(payload)) + payload


def connect(host, port, timeout=10.0):
    s = socket.create_connection((host, port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recv_frame(sock):
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    if size < 4 or size > 64 * 1024 * 1024:
        raise ValueError(f"implausible response size {size}")
    return recv_exact(sock, size)


def roundtrip(sock, payload):
    sock.sendall(frame(payload))
    return recv_frame(sock)


def wait_closed_or_response(sock, timeout):
    """After sending bad input: returns ('closed', None) if the peer closed or
    reset the connection, ('response', bytes) if it answered with a frame,
    ('open', None) if neither happened within `timeout` seconds."""
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        head = b""
        while len(head) < 4:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(4 - len(head))
            if not chunk:
                return "closed", None
            head += chunk
        (size,) = struct.unpack(">i", head)
        if size < 4 or size > 64 * 1024 * 1024:
            return "response", head
        sock.settimeout(max(0.5, deadline - time.monotonic()))
        return "response", recv_exact(sock, size)
    except (ConnectionResetError, BrokenPipeError, ConnectionError):
        return "closed", None
    except socket.timeout:
        return "open", None


# -------------------------------------------------------------- ApiVersions
def api_versions_request(version, correlation_id):
    if version >= 3:
        # Flexible: header v2; body = client_software_name, client_software_version, tags.
        body = compact_string("weir-compat") + compact_string("1.0") + uvarint(0)
        return request_header_v2(API_API_VERSIONS, version, correlation_id) + body
    return request_header_v1(API_API_VERSIONS, version, correlation_id)


def parse_api_versions_response(payload, version):
    """ApiVersions responses always use response header v0 (no tagged fields),
    whatever the request version. Returns (correlation_id, error_code,
    {api_key: (min, max)})."""
    r = Reader(payload)
    corr = r.i32()
    err = r.i16()
    apis = {}
    if version >= 3:
        n = r.uvarint() - 1
        for _ in range(max(n, 0)):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            r.tagged_fields()
            apis[k] = (lo, hi)
    else:
        n = r.i32()
        for _ in range(max(n, 0)):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            apis[k] = (lo, hi)
    return corr, err, apis


def api_versions(sock, version=3, correlation_id=1):
    payload = roundtrip(sock, api_versions_request(version, correlation_id))
    return parse_api_versions_response(payload, version)


# ------------------------------------------------------------ RecordBatch v2
def record(offset_delta, timestamp_delta, key, value):
    body = (i8(0) + varint(timestamp_delta) + varint(offset_delta)
            + (varint(-1) if key is None else varint(len(key)) + key)
            + (varint(-1) if value is None else varint(len(value)) + value)
            + uvarint(0))  # headers: count 0 (varint 0 == zig-zag 0)
    return varint(len(body)) + body


def record_batch(records, base_timestamp=None, producer_id=-1, producer_epoch=-1,
                 base_sequence=-1):
    """records: list of (key, value). Returns the v2 RecordBatch bytes with a
    correct CRC-32C."""
    if base_timestamp is None:
        base_timestamp = int(time.time() * 1000)
    recs = b"".join(record(i, 0, k, v) for i, (k, v) in enumerate(records))
    after_crc = (i16(0)  # attributes: no compression, CreateTime, not transactional
                 + i32(len(records) - 1)  # lastOffsetDelta
                 + i64(base_timestamp) + i64(base_timestamp)
                 + i64(producer_id) + i16(producer_epoch) + i32(base_sequence)
                 + i32(len(records)) + recs)
    crc = crc32c(after_crc)
    after_length = i32(0) + i8(2) + struct.pack(">I", crc) + after_crc  # leader epoch, magic
    return i64(0) + i32(len(after_length)) + after_length


def corrupt_payload(batch):
    """Flip a byte in the last record's value: the CRC no longer matches, while
    every length and count still parses."""
    b = bytearray(batch)
    b[-2] ^= 0xFF
    return bytes(b)


# ----------------------------------------------------------------- Produce v7
def produce_request_v7(correlation_id, topics, acks=-1, timeout_ms=10000):
    """topics: {topic: {partition: batch_bytes}}"""
    body = string(None) + i16(acks) + i32(timeout_ms) + i32(len(topics))
    for topic, parts in topics.items():
        body += string(topic) + i32(len(parts))
        for p, batch in parts.items():
            body += i32(p) + bytes_(batch)
    return request_header_v1(API_PRODUCE, 7, correlation_id) + body


def parse_produce_response_v7(payload):
    """Returns (correlation_id, {(topic, partition): (error_code, base_offset, log_start)})."""
    r = Reader(payload)
    corr = r.i32()
    out = {}
    for _ in range(r.i32()):
        topic = r.string()
        for _ in range(r.i32()):
            p = r.i32()
            err = r.i16()
            base = r.i64()
            r.i64()  # log_append_time
            log_start = r.i64()
            out[(topic, p)] = (err, base, log_start)
    r.i32()  # throttle_time_ms
    return corr, out


def produce_v7(sock, correlation_id, topics, acks=-1):
    payload = roundtrip(sock, produce_request_v7(correlation_id, topics, acks=acks))
    return parse_produce_response_v7(payload)


# --------------------------------------------------------------------- SASL
API_SASL_HANDSHAKE = 17
API_SASL_AUTHENTICATE = 36

ERR_UNSUPPORTED_SASL_MECHANISM = 33
ERR_ILLEGAL_SASL_STATE = 34
ERR_SASL_AUTHENTICATION_FAILED = 58


def sasl_handshake(sock, mechanism, correlation_id=1):
    """SaslHandshake v1. Returns (error_code, [mechanisms])."""
    payload = roundtrip(sock, request_header_v1(API_SASL_HANDSHAKE, 1, correlation_id)
                        + string(mechanism))
    r = Reader(payload)
    assert r.i32() == correlation_id
    err = r.i16()
    return err, [r.string() for _ in range(r.i32())]


def sasl_authenticate(sock, auth_bytes, correlation_id=2):
    """SaslAuthenticate v1. Returns (error_code, error_message, auth_bytes,
    session_lifetime_ms)."""
    payload = roundtrip(sock, request_header_v1(API_SASL_AUTHENTICATE, 1, correlation_id)
                        + bytes_(auth_bytes))
    r = Reader(payload)
    assert r.i32() == correlation_id
    err = r.i16()
    message = r.string()
    n = r.i32()
    data = r.take(n) if n >= 0 else None
    return err, message, data, r.i64()


def metadata_v1(sock, correlation_id=3):
    """Metadata v1 for every topic. Returns {node_id: (host, port)}."""
    payload = roundtrip(sock, request_header_v1(API_METADATA, 1, correlation_id) + i32(-1))
    r = Reader(payload)
    assert r.i32() == correlation_id
    brokers = {}
    for _ in range(r.i32()):
        node, host, port = r.i32(), r.string(), r.i32()
        r.string()  # rack
        brokers[node] = (host, port)
    return brokers


class ScramClient:
    """The client side of SCRAM-SHA-256/512 (RFC 5802), for raw-socket tests."""

    def __init__(self, mechanism, user, password, nonce="rawtestnonce"):
        import hashlib
        self.hash = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
        self.hashlib = hashlib
        self.user, self.password, self.nonce = user, password, nonce

    def first(self):
        return f"n,,n={self.user},r={self.nonce}".encode()

    def final(self, server_first):
        import base64
        import hmac
        fields = dict(f.split("=", 1) for f in server_first.decode().split(","))
        salt, iterations, nonce = base64.b64decode(fields["s"]), int(fields["i"]), fields["r"]
        salted = self.hashlib.pbkdf2_hmac(self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", self.hash).digest()
        stored_key = self.hashlib.new(self.hash, client_key).digest()
        without_proof = f"c=biws,r={nonce}"
        auth = f"n={self.user},r={self.nonce},{server_first.decode()},{without_proof}".encode()
        signature = hmac.new(stored_key, auth, self.hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


def scram_login(sock, mechanism, user, password):
    """A whole SCRAM exchange on `sock`. Returns the last SaslAuthenticate's
    (error_code, error_message, auth_bytes, session_lifetime_ms)."""
    err, _ = sasl_handshake(sock, mechanism)
    assert err == ERR_NONE, f"SaslHandshake {mechanism}: error {err}"
    c = ScramClient(mechanism, user, password)
    first = sasl_authenticate(sock, c.first(), correlation_id=4)
    if first[0] != ERR_NONE:
        return first
    return sasl_authenticate(sock, c.final(first[2]), correlation_id=5)


# ------------------------------------------------------------ client quotas
API_ALTER_CLIENT_QUOTAS = 49


def alter_client_quotas(sock, entity, ops, correlation_id=11):
    """AlterClientQuotas v0 for one entity ({type: name or None for the default}) with ops
    [(key, value or None to remove)]. Returns the entry's (error_code, error_message)."""
    body = i32(1) + i32(len(entity))
    for t, n in entity.items():
        body += string(t) + string(n)
    body += i32(len(ops))
    for key, value in ops:
        body += string(key) + struct.pack(">d", value or 0.0) + (b"\x01" if value is None else b"\x00")
    body += b"\x00"  # validate_only
    payload = roundtrip(sock, request_header_v1(API_ALTER_CLIENT_QUOTAS, 0, correlation_id) + body)
    r = Reader(payload)
    assert r.i32() == correlation_id
    r.i32()  # throttle_time_ms
    assert r.i32() == 1
    return r.i16(), r.string()
