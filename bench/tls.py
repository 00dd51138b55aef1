#!/usr/bin/env python3
"""What TLS costs: Kafka's own load generator over SASL_SSL beside PLAINTEXT, against Weir and
Apache Kafka, on this machine (`make bench-tls`; `make bench` runs it too).

    WEIR_BIN=target/release/weir bench/tls.py

ProducerPerformance from kafka-clients 4.1 with the settings of bench/producer_perf.py (1 KiB
records, acks=all, linger.ms=1, one partition), each run on a fresh single broker (Kafka 4.1;
`weir serve` with its objects in a local directory) that has two listeners: PLAINTEXT (the
topic and the SCRAM user are made there) and SASL_SSL (SCRAM-SHA-512; the server certificate
from tests/compat/tls/make-certs.sh; Kafka's controller and inter-broker listener stay
PLAINTEXT). The user `bench` is made with kafka-configs (AlterUserScramCredentials) on both
brokers alike, on every run, so that the PLAINTEXT and SASL_SSL runs differ only in the
producer's listener. Per broker and listener:

  max     as fast as it goes, BENCH_TLS_MAX_RECORDS [2000000] records: the maximum durable
          produce throughput
  rate    BENCH_TLS_RATE [30000] records/s for BENCH_TLS_SECONDS [30] s: produce latency
          percentiles at a fixed rate

plus the broker's CPU seconds per GiB (from /proc every second). Over SASL_SSL the producer
reads a producer.config file (security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-512,
sasl.jaas.config=ScramLoginModule, ssl.truststore.type=PEM with the test CA). Writes
bench/results/tls-YYYY-MM-DD-HHMM.md (and .json; appends the section to BENCH_TLS_APPEND_TO
when set, as `make bench` does).

Environment (defaults in brackets): WEIR_BIN (required), BENCH_TLS_BROKERS ["kafka weir"],
BENCH_TLS_MAX_RECORDS, BENCH_TLS_RATE, BENCH_TLS_SECONDS, BENCH_TLS_DIR [target/bench-tls],
BENCH_TLS_RESULTS [bench/results].
"""

import datetime
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, HERE)

import weir_harness  # noqa: E402  (the harness: Broker, free_port)
from object_wal import kafka_tool  # noqa: E402  (kafka.sh tool)
from partitions import write_results  # noqa: E402
from producer_perf import PROPS, fmt, measure  # noqa: E402  (ProducerPerformance, its summary)

BROKERS = os.environ.get("BENCH_TLS_BROKERS", "kafka weir").split()
MAX_RECORDS = int(os.environ.get("BENCH_TLS_MAX_RECORDS", "2000000"))
RATE = int(os.environ.get("BENCH_TLS_RATE", "30000"))
SECONDS = int(os.environ.get("BENCH_TLS_SECONDS", "30"))
WORK = os.path.abspath(os.environ.get("BENCH_TLS_DIR", os.path.join(REPO, "target", "bench-tls")))
RESULTS = os.path.abspath(os.environ.get("BENCH_TLS_RESULTS",
                                         os.path.join(REPO, "bench", "results")))
MAKE_CERTS = os.path.join(REPO, "tests", "compat", "tls", "make-certs.sh")
CERTS = os.path.join(WORK, "certs")
PROTOCOLS = ["PLAINTEXT", "SASL_SSL"]
MECHANISM = "SCRAM-SHA-512"
USER, PASSWORD = "bench", "bench-secret"
SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"


class TlsBroker(weir_harness.Broker):
    """A single broker with the harness's PLAINTEXT listener (topics, the user) and a SASL_SSL
    one (SCRAM-SHA-512; certs/server.pem, a certificate for 127.0.0.1 and its PKCS#8 key)."""

    def __init__(self, kind, root):
        self.sasl_port = weir_harness.free_port()
        super().__init__(kind, root, env={
            "WEIR_WAL_CAPACITY": str(1 << 30),
            "WEIR_SECURITY_SASL_ENABLED_MECHANISMS": MECHANISM,
            "WEIR_SECURITY_SSL_KEYSTORE_LOCATION": os.path.join(CERTS, "server.pem")})
        self.kind = kind
        self.env["WEIR_SECURITY_LISTENERS"] = (f"PLAINTEXT://127.0.0.1:{self.port},"
                                               f"SASL_SSL://127.0.0.1:{self.sasl_port}")

    @property
    def sasl_bootstrap(self):
        return f"127.0.0.1:{self.sasl_port}"

    def kafka_props(self):
        # kafka.sh writes its own listeners first; the last value of a key wins. The
        # controller and the inter-broker listener stay PLAINTEXT.
        listeners = (f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.aux_port},"
                     f"SASL_SSL://127.0.0.1:{self.sasl_port}")
        return [f"listeners={listeners}", f"advertised.listeners={listeners}",
                "listener.security.protocol.map="
                "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
                f"sasl.enabled.mechanisms={MECHANISM}",
                f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config="
                f"{SCRAM_LOGIN} required;",
                "ssl.keystore.type=PEM",
                f"ssl.keystore.location={os.path.join(CERTS, 'server.pem')}"]

    def _kafka_cmd(self, *args):
        cmd = super()._kafka_cmd(*args)
        if args[:1] == ("start",):
            for prop in self.kafka_props():
                cmd += ["--prop", prop]
        return cmd


def client_conf():
    """The producer.config of the SASL_SSL runs (Java client names)."""
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": MECHANISM,
            "sasl.jaas.config": f'{SCRAM_LOGIN} required username="{USER}" '
                                f'password="{PASSWORD}";',
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": os.path.join(CERTS, "ca.pem")}


def add_user(b):
    """The SCRAM user, made over PLAINTEXT with kafka-configs, then waited for on SASL_SSL (a
    metadata listing through librdkafka with the user's password)."""
    args = ["configs", "--bootstrap-server", b.bootstrap, "--alter",
            "--add-config", f"{MECHANISM}=[password={PASSWORD}]", "--entity-type", "users",
            "--entity-name", USER]
    r = kafka_tool(*args, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"kafka-configs failed: {(r.stdout + r.stderr)[-400:]}")
    from confluent_kafka.admin import AdminClient
    errors = []
    admin = AdminClient({"bootstrap.servers": b.sasl_bootstrap, "security.protocol": "SASL_SSL",
                         "sasl.mechanism": MECHANISM, "sasl.username": USER,
                         "sasl.password": PASSWORD,
                         "ssl.ca.location": os.path.join(CERTS, "ca.pem"),
                         "error_cb": lambda e: errors.append(e)})
    deadline = time.monotonic() + 60
    while True:
        try:
            admin.list_topics(timeout=5)
            return
        except Exception as e:  # noqa: BLE001  (not authenticated yet: retried)
            if time.monotonic() > deadline:
                raise RuntimeError(f"SASL_SSL as {USER} does not work after 60 s: {e}; "
                                   f"{errors[-3:]}") from e
            time.sleep(1)


def run(kind, protocol, tag, records, throughput):
    root = os.path.join(WORK, f"{kind}-{protocol.lower()}-{tag}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    b = TlsBroker(kind, root)
    b.start()
    try:
        # Both runs get the same broker, listeners and user; only the producer's differs.
        add_user(b)
        bootstrap, extra = None, ()
        if protocol == "SASL_SSL":
            config = os.path.join(root, "sasl-ssl.properties")
            with open(config, "w") as f:
                f.writelines(f"{k}={v}\n" for k, v in client_conf().items())
            bootstrap, extra = b.sasl_bootstrap, ("--producer.config", config)
        r = measure(b, f"{protocol}-{tag}", records, throughput, bootstrap, extra)
    finally:
        b.stop()
        # A broker's data dir holds GiBs after a run.
        shutil.rmtree(root, ignore_errors=True)
    r["protocol"] = protocol
    r["cmd"] = r["cmd"].replace(b.sasl_bootstrap, "HOST:SASL_SSL_PORT").replace(
        os.path.join(root, ""), "")
    return r


def ratio(a, b):
    """b / a, or "-" when either is missing (or a is 0: ProducerPerformance's whole ms)."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or not a:
        return "-"
    return f"{b / a:.2f}"


COLUMNS = [("max", "mb_per_sec"), ("max", "cpu_s_per_gib"),
           ("rate", "p50"), ("rate", "p99"), ("rate", "cpu_s_per_gib")]
NAMES = {"kafka": "Kafka", "weir": "Weir"}


def report(results, stamp, elapsed):
    def cell(kind, protocol, tag, key):
        r = results.get((kind, f"{protocol}-{tag}"))
        return r.get(key) if isinstance(r, dict) else None

    lines = [f"## TLS: SASL_SSL beside PLAINTEXT ({stamp})", "",
             "kafka-clients 4.1's ProducerPerformance as in the ProducerPerformance section (1 KiB "
             f"records, {', '.join(PROPS)}, one partition), over a broker's PLAINTEXT listener "
             f"and over its SASL_SSL listener ({MECHANISM}, TLS with a 2048-bit RSA server "
             "certificate from tests/compat/tls/make-certs.sh), a fresh single broker with both "
             "listeners per run (Weir: objects in a local directory). Maximum: "
             f"{MAX_RECORDS:,} records as fast as they go; latency: {RATE:,} records/s for "
             f"{SECONDS} s. CPU is the broker's, per GiB produced.", "",
             f"| broker | listener | max MB/s | CPU s/GiB at max | p50 ms at {RATE:,}/s | "
             f"p99 ms at {RATE:,}/s | CPU s/GiB at {RATE:,}/s |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for kind in BROKERS:
        name = NAMES.get(kind, kind)
        for protocol in PROTOCOLS:
            lines.append(f"| {name} | {protocol} | " + " | ".join(
                fmt(cell(kind, protocol, t, k)) for t, k in COLUMNS) + " |")
        lines.append(f"| {name} | SASL_SSL/PLAINTEXT | " + " | ".join(
            ratio(cell(kind, "PLAINTEXT", t, k), cell(kind, "SASL_SSL", t, k))
            for t, k in COLUMNS) + " |")
    if "kafka" in BROKERS and "weir" in BROKERS:
        for protocol in PROTOCOLS:
            lines.append(f"| Weir/Kafka | {protocol} | " + " | ".join(
                ratio(cell("kafka", protocol, t, k), cell("weir", protocol, t, k))
                for t, k in COLUMNS) + " |")
    lines += ["", "Commands (after a `kafka.sh tool configs --bootstrap-server "
              f"HOST:PORT --alter --add-config '{MECHANISM}=[password=...]' --entity-type users "
              f"--entity-name {USER}`; sasl-ssl.properties: "
              + ", ".join(f"{k}={v}" for k, v in client_conf().items()
                          if k not in ("sasl.jaas.config", "ssl.truststore.location"))
              + ", sasl.jaas.config with the user, ssl.truststore.location=ca.pem):", ""]
    for (kind, tag), r in sorted(results.items()):
        lines.append(f"- {kind} ({tag}): " + (f"`{r['cmd']}`" if isinstance(r, dict)
                                              else f"failed: {r}"))
    lines += ["", "Reproduce: `WEIR_BIN=target/release/weir bench/tls.py`; this run "
              f"took {elapsed:.0f} s.", ""]
    return "\n".join(lines)


def main():
    if "WEIR_BIN" not in os.environ:
        sys.exit("tls.py: set WEIR_BIN to the weir binary")
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(RESULTS, exist_ok=True)
    shutil.rmtree(CERTS, ignore_errors=True)
    subprocess.run(["bash", MAKE_CERTS, CERTS], check=True, timeout=120)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    t0 = time.monotonic()
    results = {}
    for tag, records, throughput in [("max", MAX_RECORDS, -1), ("rate", RATE * SECONDS, RATE)]:
        for kind in BROKERS:
            for protocol in PROTOCOLS:
                key = (kind, f"{protocol}-{tag}")
                try:
                    results[key] = run(kind, protocol, tag, records, throughput)
                except Exception as e:  # one failure must not lose the other runs
                    print(f"bench: {kind} {protocol} ({tag}) failed: {e}", flush=True)
                    results[key] = (str(e).splitlines() or [repr(e)])[0][:200]
    text = report(results, stamp, time.monotonic() - t0)
    write_results(RESULTS, f"tls-{stamp}", text, results, os.environ.get("BENCH_TLS_APPEND_TO"))


if __name__ == "__main__":
    main()
