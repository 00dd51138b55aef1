"""The balancer on real brokers (cluster mode only: PostgreSQL, s3s-fs, `weir serve` processes),
under idempotent load throughout: load skewed onto one broker is spread, a broker that joins is
given partitions, a drained broker ends with none, and every acknowledged record is read back
exactly once.
"""

import os
import subprocess
import threading
import time

import pytest

from compat_util import check_exactly_once, create_topic, metric

pytestmark = pytest.mark.skipif(
    os.environ.get("WEIR_COMPAT_TARGET", "").strip().lower() != "cluster",
    reason="balancing needs a cluster (WEIR_COMPAT_TARGET=cluster)")

TOPIC = "balanced"
PARTITIONS = 8
# Fast rounds, short cooldowns and a low noise floor so that a test-sized load counts.
ENV = {
    "WEIR_BALANCER_INTERVAL_MS": "1000",
    "WEIR_BALANCER_COOLDOWN_MS": "3000",
    "WEIR_BALANCER_MIN_BYTES_PER_SEC": "20000",
    "WEIR_BALANCER_TOLERANCE_PERCENT": "10",
}


def _leaders(c):
    """{partition: leader} once no partition is moving, else None."""
    for b in c.brokers:
        try:
            status, body = b.admin("GET", "/v1/partitions", timeout=2)
        except OSError:
            continue
        if status == 200:
            mine = [p for p in body if p["topic"] == TOPIC]
            if any(p["target"] is not None or p["leader"] is None for p in mine):
                return None
            return {p["partition"]: p["leader"] for p in mine}
    return None


def _wait(what, cond, timeout):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return time.monotonic() - t0, v
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {timeout} s")


class Load:
    """An idempotent producer writing ~300 KiB/s evenly over the partitions, and a consumer
    reading them, so that every partition carries bytes in and out."""

    def __init__(self, bootstrap):
        from confluent_kafka import Consumer, Producer
        self.acked, self.failed = [], []
        self.stop = threading.Event()
        self.p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                           "acks": "all", "linger.ms": 5, "message.timeout.ms": 120000})
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "balanced-readers",
                           "auto.offset.reset": "earliest"})
        self.c.subscribe([TOPIC])
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True)]
        for t in self.threads:
            t.start()

    def _on_delivery(self, err, msg):
        if err is not None:
            self.failed.append(str(err))
        else:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))

    def _produce(self):
        n = 0
        pad = b"x" * 1000
        while not self.stop.is_set():
            for _ in range(30):
                self.p.produce(TOPIC, value=b"%d." % n + pad, partition=n % PARTITIONS,
                               on_delivery=self._on_delivery)
                n += 1
            self.p.poll(0.1)
        self.p.flush(120)

    def _consume(self):
        while not self.stop.is_set():
            self.c.consume(num_messages=1000, timeout=0.5)
        self.c.close()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(150)


def test_skew_is_spread_a_joining_broker_takes_a_share_and_a_drained_one_ends_empty(broker_factory):
    c = broker_factory.cluster("balancer", size=2, env=ENV)
    create_topic(c.bootstrap, TOPIC, partitions=PARTITIONS)
    load = Load(c.bootstrap)
    try:
        # Skew: every partition onto broker 1.
        status, body = c.brokers[0].admin(
            "POST", "/v1/reassignments",
            {"partitions": [{"topic": TOPIC, "partition": i, "broker": 1}
                            for i in range(PARTITIONS)]})
        assert status == 200, body
        _wait("all partitions on broker 1",
              lambda: (lambda l: l and set(l.values()) == {1})(_leaders(c)), 30)
        took, spread = _wait(
            "the skewed load spread over both brokers",
            lambda: (lambda l: l and sorted(list(l.values()).count(b) for b in (1, 2)) == [4, 4]
                     and l)(_leaders(c)), 45)
        print(f"skew spread in {took:.1f} s: {spread}")
        moves = sum(metric(b, "weir_balancer_moves_total", f'{{goal="{g}"}}')
                    for b in c.brokers for g in ("bytes_in", "bytes_out", "count"))
        assert moves >= 4, f"the balancer made the moves ({moves})"

        # A third broker joins: it is given partitions.
        c.add_broker()
        took, after = _wait(
            "the new broker leading partitions",
            lambda: (lambda l: l and list(l.values()).count(3) >= 2 and l)(_leaders(c)), 45)
        print(f"broker 3 took partitions in {took:.1f} s: {after}")

        # Broker 1 is drained with `weir drain`, which returns once it leads nothing; the
        # balancer gives it nothing back.
        t0 = time.monotonic()
        out = subprocess.run([os.environ["WEIR_BIN"], "drain", "1", "--admin",
                              f"127.0.0.1:{c.brokers[1].aux_port}", "--timeout-secs", "30"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "broker 1 leads no partition" in out.stdout, out.stdout
        print(f"broker 1 drained in {time.monotonic() - t0:.1f} s: {out.stdout.strip()}")
        time.sleep(4)  # four balancing rounds
        l = _leaders(c) or {}
        assert l and 1 not in l.values(), l
        time.sleep(4)
        l = _leaders(c) or {}
        assert 1 not in l.values(), f"the balancer gave the drained broker partitions: {l}"
    finally:
        load.finish()
    assert not load.failed, load.failed[:5]
    assert len(load.acked) > 1000, len(load.acked)
    check_exactly_once(c.bootstrap, TOPIC, PARTITIONS, load.acked)
