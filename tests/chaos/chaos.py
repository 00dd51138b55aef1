#!/usr/bin/env python3
"""Chaos suite: faults injected in turn into a three-broker Weir cluster under idempotent and
transactional load; afterwards every acknowledged record must be read back exactly once, at its
acknowledged offset, in order, and read_committed must see every committed transaction whole,
once, and nothing of an aborted one.

    WEIR_BIN=target/debug/weir tests/chaos/chaos.py                 # short (make test)
    WEIR_BIN=target/release/weir tests/chaos/chaos.py --mode long   # make chaos
    WEIR_BIN=target/release/weir tests/chaos/chaos.py --mode bench  # make bench-failover

The cluster is the `Cluster` of tests/harness/weir_harness: one private PostgreSQL, one
s3s-fs and three `weir serve`, each with a small WAL (CHAOS_WAL_CAPACITY), the fault switch on
(WEIR_BROKER_FAULT_SWITCH=true), uploads every CHAOS_UPLOAD_INTERVAL_MS (so that object-store
faults hit uploads, and a killed broker's WAL holds un-uploaded records), and the cluster timings
WEIR_CLUSTER_SESSION_TIMEOUT_MS [3000], WEIR_CLUSTER_HEARTBEAT_INTERVAL_MS [500],
WEIR_CLUSTER_CLOCK_DRIFT_MARGIN_MS [250] (taken from the environment when set there).

Workload: CHAOS_PRODUCERS processes, each an idempotent confluent-kafka producer (acks=all,
enable.idempotence=true) writing unique values "<producer>.<incarnation>.<sequence>." to one
topic of CHAOS_PARTITIONS partitions (round-robin by sequence), CHAOS_RATE records/s in all,
recording every acknowledgement (time, partition, offset, value); CHAOS_CONSUMERS consumers in
one consumer group read throughout (their counts and errors are reported). A producer that hits
a fatal error is replaced by a new instance (the next incarnation), and the fatal error fails the
run.

Transactions: CHAOS_TXN_PRODUCERS processes, each a transactional confluent-kafka producer
(transactional.id chaos-txn-<producer>, the same for all its incarnations; acks=all) writing to a
second topic, chaos-txn (CHAOS_PARTITIONS partitions), CHAOS_TXN_RATE transactions/s in all, each
of 2 to 6 records spread over 2 to 4 partitions, values "<producer>.<incarnation>.<txn>.<i>."
(unique). About CHAOS_TXN_ABORT of them (drawn from the seed) are aborted on purpose
(abort_transaction after the records are flushed and acknowledged, so aborted records are in the
log). Errors are handled as librdkafka documents: a retriable error of commit_transaction or
abort_transaction retries it; an abortable one (txn_requires_abort) aborts the transaction (it
counts as aborted once abort_transaction succeeds); a fatal one (fenced, say) or an outcome left
unknown (retries spent) records the transaction as unknown and starts the next incarnation (a
new producer with the same transactional.id: init_transactions fences the old one, aborting its
open transaction or completing a decided one). Each transaction is logged with its outcome
(committed, aborted, unknown) and its values with their acknowledged offsets. Fatal errors of
transactional producers do not fail the run (fencing during faults is legitimate): the outcome of
their transactions is checked; they are counted and reported. The idempotent topic's partitions
and chaos-txn's are both rebalanced after faults; the faults' victims are chosen by the idempotent
topic's partitions.

Faults, in an order drawn from the seed (printed; a failure prints the command to replay):

  kill      `kill -9` of a broker that leads partitions; restarted once its partitions are
            led elsewhere and acknowledged again, or after CHAOS_RESTART_BOUND seconds
  pause     SIGSTOP of a leader for longer than its session timeout plus the drift margin (the
            zombie), then SIGCONT: it must acknowledge nothing after being replaced, and it
            restarts itself in-process, empty, on the same ports (the process stays alive)
  pg        PostgreSQL stopped (`pg_ctl -m fast`) for a few seconds and started again
  objstore  object-store errors and latency on every broker for a few seconds (PUT /v1/faults)
  wal       WAL write and sync errors on one leader for a few seconds (PUT /v1/faults)
  walpath   a leader killed with its WAL file (<data_dir>/wal) renamed away: its partitions must
            wait (no broker may lead them meanwhile); after a few seconds the file is renamed
            back (a peer then recovers it, retried every few seconds) and the broker restarted
  pgcut     the cut broker (the second) cut off from PostgreSQL while its clients and peers still
            reach it: its connections through the suite's proxy become a black hole (open,
            nothing forwarded, new ones held) for a few seconds, then are closed
  s3cut     the same between the cut broker and the object store
  peercut   the same between the other brokers and the cut broker's internal listener
  clientcut the same between the clients and the cut broker's Kafka listener
  clock     the cut broker's wall clock jumped forward 30 to 90 s, and back after a few seconds
            (libfaketime, Debian's faketime package; skipped with a note without it)
  move      (soak) a third of each topic's partitions moved to the next broker
  restart   (soak) the last broker stopped with SIGTERM (its partitions handed over) and started
            again
  upgrade   (upgrade) the next broker still on the old binary (CHAOS_UPGRADE_FROM) stopped with
            SIGTERM and started on WEIR_BIN; the group offsets are checked after each

Brokers restarted after a fault are given their share of the partitions back (POST
/v1/reassignments) when CHAOS_REBALANCE=1 (default), so that every kill hits about a third of
them. Where the fault switch answers 404 (a binary without it), objstore and wal are skipped with
a note; where the binary does not fail over, a kill shows as a long unavailability (the broker's
restart ends it), not as a crash.

Afterwards: the faults are cleared, producers flush, and a fresh consumer (not the group) reads
every partition from the start. Per fault kind it prints: faults injected, records acknowledged
during that kind's windows (a fault's window runs from its injection to the next fault's), lost
(acknowledged but not read back at the acknowledged offset), duplicated (a value read more than
once), reordered (a value of one producer instance after a later one of the same instance in a
partition), and the longest produce unavailability (the longest time without an acknowledgement
on a partition the fault affected - the victim's partitions, or all for pg and objstore - within
its window), and the transactions that ended in the windows (committed / aborted / unknown, and
violations of the checks below). For kills it also prints the failover time: from the kill to
the first acknowledgement, at a leader epoch above the one at the kill, on each partition the
victim led.

chaos-txn is read back once no transaction is open in it (ListOffsets read_committed equal to
read_uncommitted on every partition, waited for up to a minute; a partition still held back then
is a hanging transaction and fails the run), by a fresh read_committed consumer and a fresh
read_uncommitted one, each from the start to the end offsets. Violations: lost (a value of a
committed transaction not read by read_committed, or read elsewhere than acknowledged), aborted
visible (a value of an aborted transaction read by read_committed), partial (a transaction of
unknown outcome of which read_committed read some values but not all: not atomic), duplicated (a
value read twice by either reader), unexpected (a value no transaction produced, malformed, or
out of order within a producer instance in a partition), aborted absent (a value of an aborted
transaction acknowledged at an offset, not in the log there for read_uncommitted: the abort was
not of records really written, or acknowledged records went missing).

Exit code: 0 when nothing was lost, duplicated or reordered, no transactional check was
violated and the cluster held (no broker process died unexpectedly, no "panicked" in a broker
log, no idempotent producer fatal error, no partition led elsewhere while its WAL was
unreachable, no transaction left hanging); 1 otherwise; 2 when the run could not be made.

Modes (--mode or CHAOS_MODE):
  short  one fault of each kind (about a minute and a half with start-up and read-back): the
         form `make test` runs (tests/compat/run-all.sh; WEIR_CHAOS=0 skips it)
  long   CHAOS_FAULTS [102] faults, the kinds shuffled in rounds (make chaos); writes
         bench/results/chaos-YYYY-MM-DD-HHMM.md
  bench  only kill -9 of a leader, CHAOS_FAULTS [10] kills; prints each kill's failover time
         and min/median/max over all kills beside AutoMQ's (make bench-failover); writes
         bench/results/failover-YYYY-MM-DD-HHMM.md
  soak   CHAOS_SOAK_SECONDS [7200] of the load (both group protocols: one consumer reads in a
         KIP-848 group, CHAOS_SOAK_CONSUMER_PROTOCOL), with a partition move and a SIGTERM restart
         of the last broker every CHAOS_SOAK_EVERY [180] seconds (kinds `move` and `restart`,
         soak's only); the other brokers run throughout and their resident memory, open files,
         threads and live tasks (/metrics) are sampled every CHAOS_SOAK_SAMPLE [15] seconds.
         Fails, beside the checks above, if any of those grew without bound (the median of the
         last fifth of the run above the median of the first fifth after the warm-up by more than
         half, plus a slack: 64 MiB, 64 files, 16 threads, 500 tasks; memory counted without
         the log, block and index caches, bounded by their settings) or if any broker ever had a
         stuck request (weir_stuck_requests_total). make soak; writes
         bench/results/soak-YYYY-MM-DD-HHMM.md
  upgrade  a rolling upgrade: the cluster starts on the binary of --upgrade-from (the previous
         release, built by tools/build-release.sh; make test-upgrade), then its brokers are
         upgraded to WEIR_BIN one at a time (kind `upgrade`, one per broker, in node order) under
         the same load, with the usual checks. Groups keep their offsets: before the first
         upgrade a group of its own (upgrade-sentinel) is given an offset on every partition
         (AlterConsumerGroupOffsets), which must read back unchanged after each upgrade and at
         the end; the consumers' group (chaos-group) must keep an offset on every partition that
         had one (one below an earlier one is noted). Each broker's version and commit (weir_build_info) before and after its
         upgrade are printed.

Flags (each also an environment variable, flags win):
  --mode [short]               CHAOS_MODE
  --seed [random]              CHAOS_SEED
  --faults                     CHAOS_FAULTS (short: one per kind)
  --kinds [all]                CHAOS_KINDS, comma-separated subset of the kinds above
  --upgrade-from               CHAOS_UPGRADE_FROM: the old binary (--mode upgrade only)
  --wal-kind [file]            CHAOS_WAL_KIND: `object` runs the brokers without a WAL file
                               (WEIR_WAL_KIND=object): every acknowledgement waits for its
                               object's PUT and commit, a dead or paused broker's partitions move
                               without any recovery; wal and walpath do not apply and are left out
  --keep                       CHAOS_KEEP=1: keep the data dirs and logs (kept anyway on failure)
Environment only (defaults in brackets):
  WEIR_BIN                     the weir binary (required)
  CHAOS_DIR [target/chaos-MODE] data dirs, PostgreSQL, s3s-fs root, logs (emptied first)
  CHAOS_RESULTS [bench/results] where long and bench write their report
  CHAOS_PRODUCERS [3]  CHAOS_CONSUMERS [2]  CHAOS_PARTITIONS [12]
  CHAOS_RATE [600]             records/s over all producers
  CHAOS_TXN_PRODUCERS [2]      transactional producers (0: none, chaos-txn not checked)
  CHAOS_TXN_RATE [10]          transactions/s over all transactional producers (at most: each
                               producer runs its transactions one after the other)
  CHAOS_TXN_ABORT [0.2]        the share of transactions aborted on purpose
  CHAOS_RECORD_BYTES [128]
  CHAOS_WAL_CAPACITY [134217728]  CHAOS_UPLOAD_INTERVAL_MS [2000]
  CHAOS_RESTART_BOUND [20]     seconds a killed broker stays down at most
  CHAOS_REBALANCE [1]
  CHAOS_CLIENT_DEBUG           librdkafka debug contexts for the producers, transactional
                               ones included (e.g. eos,msg)
  S3S_FS, WEIR_PG_BIN          as for the cluster tests (tests/harness/weir_harness)
"""

import argparse
import bisect
import collections
import datetime
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import statistics
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "harness"))
sys.path.insert(0, os.path.join(REPO, "bench"))

KINDS = ("kill", "pause", "pg", "objstore", "wal", "walpath", "pgcut", "s3cut", "peercut",
         "clientcut", "clock")
# The broker whose links go through the suite's proxies (pgcut, s3cut, peercut, clientcut) and
# whose clock is libfaketime's (clock).
CUT = 1
FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
# The soak's kinds (not in the others' defaults; --kinds may name them anywhere).
SOAK_KINDS = ("move", "restart")
# The rolling upgrade's kind (--mode upgrade only).
UPGRADE_KINDS = ("upgrade",)
SENTINEL_GROUP = "upgrade-sentinel"
TOPIC = "chaos"
TXN_TOPIC = "chaos-txn"
GROUP = "chaos-group"
AUTOMQ = ("AutoMQ's open-source edition starts a failover at least 69 s after a kill: the "
          "broker session timeout (9 s), then a one-minute wait before a fenced node's WAL is "
          "failed over (DONT_FAILOVER_AFTER_NEW_EPOCH_MS in "
          "kafka/automq/failover/NodeRuntimeMetadata.java).")

# Per mode: fault durations (seconds, drawn uniformly from the ranges) and defaults.
MODES = {
    "short": {"faults": None, "warmup": 3.0, "settle": (1.5, 2.5), "hold": (3.0, 4.0),
              "pg_down": (2.0, 3.0), "pause_extra": (1.0, 2.0), "walpath_hold": (4.5, 5.5)},
    "long": {"faults": 102, "warmup": 5.0, "settle": (2.0, 5.0), "hold": (3.0, 8.0),
             "pg_down": (1.0, 6.0), "pause_extra": (0.5, 4.0), "walpath_hold": (4.0, 10.0)},
    "bench": {"faults": 10, "warmup": 5.0, "settle": (3.0, 4.0), "hold": (3.0, 4.0),
              "pg_down": (2.0, 3.0), "pause_extra": (1.0, 2.0), "walpath_hold": (4.5, 5.5)},
    # settle: half of CHAOS_SOAK_EVERY, set in Settings (a move, then a restart, per period).
    "soak": {"faults": None, "warmup": 10.0, "settle": None, "hold": (3.0, 4.0),
             "pg_down": (2.0, 3.0), "pause_extra": (1.0, 2.0), "walpath_hold": (4.5, 5.5)},
    # One upgrade per broker (faults: the cluster's size).
    "upgrade": {"faults": None, "warmup": 5.0, "settle": (4.0, 5.0), "hold": (3.0, 4.0),
                "pg_down": (2.0, 3.0), "pause_extra": (1.0, 2.0), "walpath_hold": (4.5, 5.5)},
}


def env_int(name, default):
    return int(os.environ.get(name, default))


def env_float(name, default):
    return float(os.environ.get(name, default))


class Settings:
    def __init__(self, argv):
        ap = argparse.ArgumentParser(description="Weir chaos suite (see the module docstring)")
        ap.add_argument("--mode", default=os.environ.get("CHAOS_MODE", "short"),
                        choices=sorted(MODES))
        ap.add_argument("--seed", type=int, default=os.environ.get("CHAOS_SEED"))
        ap.add_argument("--faults", type=int, default=os.environ.get("CHAOS_FAULTS"))
        ap.add_argument("--kinds", default=os.environ.get("CHAOS_KINDS", ""))
        ap.add_argument("--keep", action="store_true",
                        default=os.environ.get("CHAOS_KEEP", "0") == "1")
        ap.add_argument("--wal-kind", default=os.environ.get("CHAOS_WAL_KIND", "file"),
                        choices=("file", "object"))
        ap.add_argument("--upgrade-from", default=os.environ.get("CHAOS_UPGRADE_FROM"))
        a = ap.parse_args(argv)
        self.upgrade_from = a.upgrade_from and os.path.abspath(a.upgrade_from)
        if (a.mode == "upgrade") != bool(self.upgrade_from):
            raise SystemExit("chaos.py: --mode upgrade takes --upgrade-from (the old binary), "
                             "and only it does")
        if self.upgrade_from and not os.access(self.upgrade_from, os.X_OK):
            raise SystemExit(f"chaos.py: --upgrade-from {self.upgrade_from}: not an executable")
        self.wal_kind = a.wal_kind
        # Faults of the WAL file: there is none on the object WAL.
        applicable = [k for k in KINDS + SOAK_KINDS + (UPGRADE_KINDS if self.upgrade_from else ())
                      if a.wal_kind == "file" or k not in ("wal", "walpath")]
        self.mode = a.mode
        m = MODES[a.mode]
        self.seed = a.seed if a.seed is not None else random.randrange(1 << 31)
        default = (["kill"] if a.mode == "bench" else list(SOAK_KINDS) if a.mode == "soak"
                   else list(UPGRADE_KINDS) if a.mode == "upgrade"
                   else [k for k in applicable if k not in SOAK_KINDS + UPGRADE_KINDS])
        self.kinds = [k.strip() for k in a.kinds.split(",") if k.strip()] or default
        for k in self.kinds:
            if k not in applicable:
                raise SystemExit(f"chaos.py: fault kind {k!r} does not apply (kinds with "
                                 f"--wal-kind {a.wal_kind}: {', '.join(applicable)})")
        if a.mode == "bench" and self.kinds != ["kill"]:
            raise SystemExit("chaos.py: --mode bench injects kill faults only")
        self.faults = a.faults if a.faults is not None else m["faults"]
        self.keep = a.keep
        if a.mode == "upgrade" and self.faults is None:
            self.faults = 3  # the cluster's brokers, one upgrade each
        self.args = {"mode": a.mode, "seed": self.seed, "faults": a.faults,
                     "kinds": a.kinds or None, "wal_kind": a.wal_kind}
        self.warmup = m["warmup"]
        self.settle = m["settle"]
        self.hold = m["hold"]
        self.pg_down = m["pg_down"]
        self.pause_extra = m["pause_extra"]
        self.walpath_hold = m["walpath_hold"]
        self.soak_seconds = env_float("CHAOS_SOAK_SECONDS", 7200)
        self.soak_every = env_float("CHAOS_SOAK_EVERY", 180)
        self.soak_sample = env_float("CHAOS_SOAK_SAMPLE", 15)
        self.soak_consumer_protocol = os.environ.get("CHAOS_SOAK_CONSUMER_PROTOCOL", "consumer")
        if a.mode == "soak":
            self.settle = (self.soak_every / 2, self.soak_every / 2)
            if self.faults is None:
                self.faults = max(2, int(self.soak_seconds / (self.soak_every / 2)))
        self.producers = env_int("CHAOS_PRODUCERS", 3)
        self.consumers = env_int("CHAOS_CONSUMERS", 2)
        self.partitions = env_int("CHAOS_PARTITIONS", 12)
        self.rate = env_float("CHAOS_RATE", 600)
        self.txn_producers = env_int("CHAOS_TXN_PRODUCERS", 2)
        self.txn_rate = env_float("CHAOS_TXN_RATE", 10)
        self.txn_abort = env_float("CHAOS_TXN_ABORT", 0.2)
        self.record_bytes = max(env_int("CHAOS_RECORD_BYTES", 128), 32)
        self.wal_capacity = env_int("CHAOS_WAL_CAPACITY", 128 << 20)
        self.upload_interval_ms = env_int("CHAOS_UPLOAD_INTERVAL_MS", 2000)
        self.restart_bound = env_float("CHAOS_RESTART_BOUND", 20)
        self.rebalance = os.environ.get("CHAOS_REBALANCE", "1") == "1"
        self.dir = os.path.abspath(os.environ.get(
            "CHAOS_DIR", os.path.join(REPO, "target", f"chaos-{a.mode}"
                         + ("" if a.wal_kind == "file" else f"-{a.wal_kind}"))))
        self.results = os.path.abspath(os.environ.get("CHAOS_RESULTS",
                                                      os.path.join(REPO, "bench", "results")))
        # The cluster timings: the environment's when set (the brokers would read them anyway),
        # else the defaults the issue asks for.
        self.session_ms = env_int("WEIR_CLUSTER_SESSION_TIMEOUT_MS", 3000)
        self.heartbeat_ms = env_int("WEIR_CLUSTER_HEARTBEAT_INTERVAL_MS", 500)
        self.drift_ms = env_int("WEIR_CLUSTER_CLOCK_DRIFT_MARGIN_MS", 250)

    def broker_env(self):
        env = {"WEIR_WAL_CAPACITY": str(self.wal_capacity),
               "WEIR_BROKER_FAULT_SWITCH": "true",
               "WEIR_STORAGE_UPLOAD_INTERVAL_MS": str(self.upload_interval_ms),
               "WEIR_CLUSTER_SESSION_TIMEOUT_MS": str(self.session_ms),
               "WEIR_CLUSTER_HEARTBEAT_INTERVAL_MS": str(self.heartbeat_ms),
               "WEIR_CLUSTER_CLOCK_DRIFT_MARGIN_MS": str(self.drift_ms)}
        if self.wal_kind != "file":
            env["WEIR_WAL_KIND"] = self.wal_kind
        # An older binary refuses settings it does not know (its config has no such field):
        # leave out those it lacks, so that older builds can be put through the same faults.
        return {k: v for k, v in env.items() if k not in self.unknown_keys()}

    def unknown_keys(self):
        if not hasattr(self, "_unknown"):
            self._unknown = set()
            # Both binaries of an upgrade must accept every setting.
            for path in (os.environ.get("WEIR_BIN"), self.upgrade_from):
                try:
                    with open(path, "rb") as f:
                        binary = f.read()
                except (OSError, TypeError):
                    continue
                for key, field in (("WEIR_BROKER_FAULT_SWITCH", b"fault_switch"),
                                   ("WEIR_CLUSTER_CLOCK_DRIFT_MARGIN_MS",
                                    b"clock_drift_margin_ms")):
                    if field not in binary:
                        self._unknown.add(key)
        return self._unknown

    def replay(self):
        """The command that replays this run's faults (same kinds, order and parameters)."""
        parts = [f"WEIR_BIN={os.environ.get('WEIR_BIN', '...')}"]
        parts += [f"{k}={os.environ[k]}" for k in sorted(os.environ)
                  if k.startswith("CHAOS_") and k not in ("CHAOS_MODE", "CHAOS_SEED",
                                                          "CHAOS_FAULTS", "CHAOS_KINDS")]
        parts += ["python3", "tests/chaos/chaos.py", f"--mode {self.mode}", f"--seed {self.seed}"]
        if self.args["faults"] is not None:
            parts.append(f"--faults {self.faults}")
        if self.args["kinds"]:
            parts.append(f"--kinds {','.join(self.kinds)}")
        if self.wal_kind != "file":
            parts.append(f"--wal-kind {self.wal_kind}")
        if self.upgrade_from:
            parts.append(f"--upgrade-from {self.upgrade_from}")
        return " ".join(parts)


# ------------------------------------------------------------- child processes
def client_logger(out_dir, name):
    """librdkafka's log lines (connection failures and the like, many during faults) go to
    <name>.log in the clients' directory, not to the terminal; errors reach error_cb too."""
    import logging

    log = logging.getLogger(name)
    log.propagate = False
    h = logging.FileHandler(os.path.join(out_dir, f"{name}.log"))
    h.setFormatter(logging.Formatter("%(created).3f %(message)s"))
    log.addHandler(h)
    # librdkafka's debug trace (CHAOS_CLIENT_DEBUG) comes at DEBUG level.
    log.setLevel(logging.DEBUG if os.environ.get("CHAOS_CLIENT_DEBUG") else logging.INFO)
    return log


def producer_main(idx, bootstrap, topic, partitions, rate, record_bytes, out_dir, stop):
    """One idempotent producer: `rate` records/s, value "<idx>.<incarnation>.<seq>." padded,
    to partition seq % partitions. Appends "time partition offset incarnation seq" to
    acks-<idx>.txt for every acknowledgement (time: when the broker's answer arrived, from the
    record's latency), failed deliveries to failed-<idx>.txt, and a summary to
    producer-<idx>.json at the end."""
    from confluent_kafka import Producer

    logger = client_logger(out_dir, f"producer-{idx}")
    state = {"fatal": None}
    errors = collections.Counter()
    fatal = []
    acks_f = open(os.path.join(out_dir, f"acks-{idx}.txt"), "w")
    fail_f = open(os.path.join(out_dir, f"failed-{idx}.txt"), "w")

    def on_error(err):
        errors[str(err)] += 1
        if err.fatal():
            state["fatal"] = str(err)

    def make():
        extra = {}
        if os.environ.get("CHAOS_CLIENT_DEBUG"):
            # librdkafka's own trace (e.g. "eos,msg,protocol") in the producer's log
            extra["debug"] = os.environ["CHAOS_CLIENT_DEBUG"]
        return Producer({
            **extra,
            "bootstrap.servers": bootstrap, "client.id": f"chaos-producer-{idx}",
            "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            # Ride out every fault: a record fails only after 5 minutes.
            "message.timeout.ms": 300000,
            # A paused broker holds its connections open: give up on a request after 5 s (the
            # default, 30 s, would hide the failover behind the client's own timeout).
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000,
            "queue.buffering.max.messages": 500000,
            "error_cb": on_error, "logger": logger})

    pad_to = record_bytes
    counts = {"acked": 0, "failed": 0}

    def delivered(t, inc, seq):
        def cb(err, msg):
            if err is not None:
                counts["failed"] += 1
                fail_f.write(f"{time.monotonic():.6f} {inc} {seq} {err.str()}\n")
                return
            lat = msg.latency()
            at = t + lat if lat is not None else time.monotonic()
            counts["acked"] += 1
            acks_f.write(f"{at:.6f} {msg.partition()} {msg.offset()} {inc} {seq}\n")
        return cb

    p = make()
    inc = 0
    seq = 0
    t0 = time.monotonic()
    last_flush = t0
    while not stop.is_set():
        if state["fatal"] is not None:
            # The idempotent producer cannot go on: fail what it holds, start a new instance
            # (a new producer id) once every record of the old one has its outcome.
            fatal.append((time.monotonic(), inc, state["fatal"]))
            state["fatal"] = None
            try:
                p.purge()
            except Exception:  # noqa: BLE001 - purge of a fatal producer may refuse
                pass
            p.flush(30)
            p = make()
            inc += 1
        now = time.monotonic()
        due = int((now - t0) * rate)
        if due - seq > rate:  # more than a second behind (a full queue): do not burst
            t0 = now - seq / rate
            due = seq
        while seq < due:
            t = time.monotonic()
            value = f"{idx}.{inc}.{seq}.".encode()
            value += b"x" * max(0, pad_to - len(value))
            try:
                p.produce(topic, value=value, partition=seq % partitions,
                          on_delivery=delivered(t, inc, seq))
            except BufferError:
                break
            seq += 1
        p.poll(0.005)
        if now - last_flush > 0.2:
            acks_f.flush()
            fail_f.flush()
            last_flush = now
    left = p.flush(120)
    acks_f.close()
    fail_f.close()
    with open(os.path.join(out_dir, f"producer-{idx}.json"), "w") as f:
        json.dump({"sent": seq, "acked": counts["acked"], "failed": counts["failed"],
                   "unflushed": left, "incarnations": inc + 1, "fatal": fatal,
                   "errors": errors.most_common(20), "error_count": sum(errors.values())}, f)


def consumer_main(idx, bootstrap, topic, out_dir, stop, protocol="classic"):
    """A consumer group member reading throughout, committing every second; writes
    consumer-<idx>.json: records read, longest gap between records, errors, commits. With
    protocol "consumer", a member of a KIP-848 group of its own (GROUP-848)."""
    from confluent_kafka import Consumer

    logger = client_logger(out_dir, f"consumer-{idx}")
    errors = collections.Counter()
    commits = {"ok": 0, "failed": 0}

    def on_commit(err, _partitions):
        commits["ok" if err is None else "failed"] += 1

    conf = {"bootstrap.servers": bootstrap, "group.id": GROUP,
            "client.id": f"chaos-consumer-{idx}", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "on_commit": on_commit,
            "error_cb": lambda e: errors.__setitem__(str(e), errors[str(e)] + 1),
            "logger": logger}
    if protocol == "consumer":
        conf.update({"group.id": GROUP + "-848", "group.protocol": "consumer"})
    c = Consumer(conf)
    c.subscribe([topic])
    read = 0
    first = last = None
    gap = 0.0
    last_commit = time.monotonic()
    stopped = None
    while True:
        m = c.poll(0.1)
        now = time.monotonic()
        if m is not None and m.error():
            errors[str(m.error())] += 1
        elif m is not None:
            read += 1
            if last is not None:
                gap = max(gap, now - last)
            first = first or now
            last = now
        if now - last_commit >= 1.0 and read:
            try:
                c.commit(asynchronous=True)
            except Exception as e:  # noqa: BLE001 - nothing to commit yet, coordinator moving
                errors[f"commit: {e}"] += 1
            last_commit = now
        if stop.is_set():
            if stopped is None:
                stopped = now
                # Records stopped coming long before the load did: a stall, not a gap.
                if last is not None:
                    gap = max(gap, now - last)
            if now - stopped > 3:
                break
    c.close()
    with open(os.path.join(out_dir, f"consumer-{idx}.json"), "w") as f:
        json.dump({"read": read, "longest_gap_ms": gap * 1000, "first": first, "last": last,
                   "commits": commits, "errors": errors.most_common(10),
                   "error_count": sum(errors.values())}, f)


def txn_producer_main(idx, bootstrap, topic, partitions, rate, record_bytes, seed, abort_share,
                      out_dir, stop):
    """One transactional producer (transactional.id chaos-txn-<idx> for every incarnation): `rate`
    transactions/s at most, one after the other, each of 2 to 6 records over 2 to 4 partitions,
    values "<idx>.<incarnation>.<txn>.<i>." padded; about `abort_share` of them aborted on purpose
    once their records are acknowledged. The plan (sizes, partitions, which to abort) is drawn
    from `seed`. Appends to txns-<idx>.jsonl, per transaction, a line before it produces (its
    values: if the process dies, its outcome is unknown) and one with its outcome; a summary to
    txn-producer-<idx>.json at the end."""
    from confluent_kafka import KafkaException, Producer

    logger = client_logger(out_dir, f"txn-producer-{idx}")
    rng = random.Random(f"{seed}/txn/{idx}")
    errors = collections.Counter()
    fatal = []  # (time, incarnation, transaction or None, error): each ends an incarnation
    counts = collections.Counter()
    log_f = open(os.path.join(out_dir, f"txns-{idx}.jsonl"), "w")

    def on_error(err):
        errors[str(err)] += 1

    def make():
        extra = {}
        if os.environ.get("CHAOS_CLIENT_DEBUG"):
            extra["debug"] = os.environ["CHAOS_CLIENT_DEBUG"]
        return Producer({
            **extra,
            "bootstrap.servers": bootstrap, "client.id": f"chaos-txn-producer-{idx}",
            "transactional.id": f"chaos-txn-{idx}", "acks": "all", "linger.ms": 5,
            # A transaction open longer than this is aborted by the broker (and its producer
            # fenced); a record not acknowledged within it fails (the transaction must abort).
            "transaction.timeout.ms": 30000, "message.timeout.ms": 30000,
            "request.timeout.ms": 5000,
            "retry.backoff.ms": 100, "retry.backoff.max.ms": 1000,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 1000,
            "socket.connection.setup.timeout.ms": 5000,
            "error_cb": on_error, "logger": logger})

    def start():
        """A new instance, initialised: InitProducerId with the transactional.id fences the
        previous incarnation (the broker aborts its open transaction, or completes a decided
        one, before answering). Retriable errors retry; others make a new instance."""
        deadline = time.monotonic() + 120
        while True:
            p = make()
            while True:
                try:
                    p.init_transactions(30)
                    return p
                except KafkaException as e:
                    err = e.args[0]
                    errors[f"init_transactions: {err}"] += 1
                    if time.monotonic() > deadline:
                        raise
                    if not err.retriable():
                        break
                    time.sleep(0.2)

    def finish(p, commit):
        """commit_transaction (or abort_transaction) as librdkafka documents: retriable errors
        retry the call; an abortable error on commit aborts. (outcome, error, restart): outcome
        committed or aborted when the call succeeded, else unknown, and then a new incarnation
        must take over."""
        deadline = time.monotonic() + 60
        last = None
        while True:
            try:
                if commit:
                    p.commit_transaction(30)
                    return "committed", last, False
                p.abort_transaction(30)
                return "aborted", last, False
            except KafkaException as e:
                err = e.args[0]
                last = f"{'commit' if commit else 'abort'}_transaction: {err}"
                errors[last] += 1
                if err.fatal():
                    return "unknown", last, True
                if commit and err.txn_requires_abort():
                    commit = False
                    continue
                if err.retriable() and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                return "unknown", last, True

    def run_txn(p, recs, abort):
        """(outcome, error, restart, acks {value: [partition, offset or None, error or None]},
        values enqueued)."""
        acks = {}
        produced = []

        def delivered(value):
            def cb(err, msg):
                acks[value] = [msg.partition(), msg.offset() if err is None else None,
                               None if err is None else str(err)]
            return cb

        try:
            p.begin_transaction()
            for part, value in recs:
                payload = value.encode()
                payload += b"x" * max(0, record_bytes - len(payload))
                while True:
                    try:
                        p.produce(topic, value=payload, partition=part,
                                  on_delivery=delivered(value))
                        break
                    except BufferError:
                        p.poll(0.05)
                produced.append(value)
            # Every record acknowledged (or failed) before the end: an aborted transaction's
            # records are then really in the log.
            p.flush(45)
            outcome, error, restart = finish(p, not abort)
        except (KafkaException, SystemError) as e:
            # confluent-kafka 2.x can raise a fatal error (a fenced producer) from flush() as
            # a SystemError whose cause is the KafkaException: the process died on it once.
            if isinstance(e, SystemError):
                if not isinstance(e.__cause__, KafkaException):
                    raise
                e = e.__cause__
            err = e.args[0]
            error = f"in the transaction: {err}"
            errors[error] += 1
            if err.fatal():
                outcome, restart = "unknown", True
            else:  # abortable (or an unexpected state): abort it
                outcome, error2, restart = finish(p, False)
                error = error if error2 is None else f"{error}; {error2}"
        try:
            p.poll(0)
        except KafkaException:  # poll raises a fatal error (the next incarnation follows)
            pass
        return outcome, error, restart, acks, produced

    def restart_after(p):
        """The next instance after a failed one (which the caller then drops): its
        init_transactions fences the old one."""
        try:
            p.purge()
        except Exception:  # noqa: BLE001 - a fatal producer may refuse
            pass
        return start()

    p = start()
    inc = 0
    n = 0
    next_at = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now < next_at:
            try:
                p.poll(min(0.05, next_at - now))
            except KafkaException as e:  # fatal between transactions
                fatal.append((time.monotonic(), inc, None, f"poll: {e.args[0]}"))
                errors[f"poll: {e.args[0]}"] += 1
                p = restart_after(p)
                inc += 1
            continue
        next_at += 1 / rate
        if next_at < now - 1:  # more than a second behind: do not burst
            next_at = now
        # The same draws whatever happens, so a seed plans the same transactions.
        k = rng.randint(2, 6)
        parts = rng.sample(range(partitions), min(partitions, rng.randint(2, 4)))
        abort = rng.random() < abort_share
        recs = [(parts[i % len(parts)], f"{idx}.{inc}.{n}.{i}.") for i in range(k)]
        tid = f"{idx}.{inc}.{n}"
        log_f.write(json.dumps({"id": tid, "producer": idx, "inc": inc, "n": n, "open": True,
                                "planned": "abort" if abort else "commit",
                                "values": [[part, v, None] for part, v in recs]}) + "\n")
        log_f.flush()
        t_begin = time.monotonic()
        outcome, error, restart, acks, produced = run_txn(p, recs, abort)
        t_end = time.monotonic()
        values = [[acks.get(v, [part])[0], v, acks.get(v, [None, None])[1]]
                  for part, v in recs if v in produced]
        log_f.write(json.dumps({"id": tid, "producer": idx, "inc": inc, "n": n,
                                "planned": "abort" if abort else "commit", "outcome": outcome,
                                "t_begin": t_begin, "t_end": t_end, "error": error,
                                "failed": sorted({e for _, _, e in acks.values() if e}),
                                "values": values}) + "\n")
        log_f.flush()
        counts[outcome] += 1
        n += 1
        if restart:
            fatal.append((t_end, inc, tid, error))
            p = restart_after(p)
            inc += 1
    log_f.close()
    with open(os.path.join(out_dir, f"txn-producer-{idx}.json"), "w") as f:
        json.dump({"transactions": n, "outcomes": dict(counts), "incarnations": inc + 1,
                   "fatal": fatal, "errors": errors.most_common(20),
                   "error_count": sum(errors.values())}, f)


# ------------------------------------------------------------------ the run
class AckTail:
    """Reads the producers' ack files as they grow: the latest acknowledgement per partition
    (the fault loop waits on it)."""

    def __init__(self, out_dir, producers):
        self.paths = [os.path.join(out_dir, f"acks-{i}.txt") for i in range(producers)]
        self.pos = [0] * producers
        self.rest = [b""] * producers
        self.last = {}
        self.count = 0

    def poll(self):
        for i, path in enumerate(self.paths):
            try:
                with open(path, "rb") as f:
                    f.seek(self.pos[i])
                    data = f.read()
            except OSError:
                continue
            self.pos[i] += len(data)
            data = self.rest[i] + data
            lines = data.split(b"\n")
            self.rest[i] = lines.pop()
            for line in lines:
                parts = line.split()
                if len(parts) != 5:
                    continue
                t, part = float(parts[0]), int(parts[1])
                self.count += 1
                if t > self.last.get(part, 0.0):
                    self.last[part] = t

    def acked_since(self, partitions, t):
        return all(self.last.get(p, 0.0) > t for p in partitions)


class Proxy:
    """A TCP proxy the suite controls: forwards to (host, port) until cut(); then a black hole
    (connections stay open, nothing is forwarded, new ones are accepted and held), as a network
    partition looks to both ends, until heal() closes every connection that was forwarded (the
    ends reconnect). A connection accepted during the cut is held for good, never answered nor
    closed, as by a load balancer whose backend is gone: the caller must give up on it itself
    (this found the metadata store's connect waiting for ever on its startup)."""

    def __init__(self, host, port):
        import socket
        import threading
        self.target = (host, port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.blackhole = threading.Event()
        self.lock = threading.Lock()
        self.conns = set()
        self.held = set()
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        import threading
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                if self.blackhole.is_set():
                    self.held.add(c)  # never forwarded, never closed before close()
                    continue
                self.conns.add(c)
            try:
                u = socket.create_connection(self.target, timeout=5)
                u.settimeout(None)
            except OSError:
                self._close(c)
                continue
            with self.lock:
                self.conns.add(u)
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b):
        # Once bytes were dropped, nothing more goes through: the stream would be corrupt.
        dropped = False
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                dropped = dropped or self.blackhole.is_set()
                if not dropped:
                    b.sendall(data)
        except OSError:
            pass
        self._close(a)
        self._close(b)

    def _close(self, c):
        import socket
        with self.lock:
            self.conns.discard(c)
        try:
            c.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        c.close()

    def cut(self):
        self.blackhole.set()

    def heal(self):
        # Under the lock, so that no connection is accepted into the black hole after the
        # forwarded ones are closed.
        with self.lock:
            self.blackhole.clear()
            conns = list(self.conns)
        for c in conns:
            self._close(c)

    def close(self):
        self.closed = True
        self.heal()
        with self.lock:
            held, self.held = list(self.held), set()
        for c in held:
            try:
                c.close()
            except OSError:
                pass
        self.sock.close()


def interpose(cluster, i, out_dir):
    """Restarts broker i with its links to PostgreSQL, the object store, its peers and its
    clients through Proxies, and its wall clock libfaketime's when that is installed. Returns
    ({link: Proxy}, the faketime file or None)."""
    import weir_harness
    b = cluster.brokers[i]
    internal = weir_harness.free_port()
    proxies = {"pg": Proxy("127.0.0.1", cluster.pg.port),
               "s3": Proxy("127.0.0.1", cluster.s3.port),
               "peer": Proxy("127.0.0.1", internal),
               "client": Proxy(b.host, b.port)}
    b.stop()
    args = list(b.args)
    args[args.index("--metadata-url") + 1] = cluster.metadata_url.replace(
        f":{cluster.pg.port}/", f":{proxies['pg'].port}/")
    args[args.index("--advertised") + 1] = f"127.0.0.1:{proxies['client'].port}"
    b.args = args
    b.env = {**b.env,
             "AWS_ENDPOINT": f"http://127.0.0.1:{proxies['s3'].port}",
             "WEIR_CLUSTER_INTERNAL_LISTEN": f"127.0.0.1:{internal}",
             "WEIR_CLUSTER_INTERNAL_ADVERTISED": f"127.0.0.1:{proxies['peer'].port}"}
    clock = None
    if os.path.exists(FAKETIME):
        clock = os.path.join(out_dir, "faketime")
        with open(clock, "w") as f:
            f.write("+0\n")
        b.env.update({"LD_PRELOAD": FAKETIME, "FAKETIME_TIMESTAMP_FILE": clock,
                      "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    b.start()
    return proxies, clock


class Fault:
    def __init__(self, n, kind):
        self.n, self.kind = n, kind
        self.t0 = self.t1 = self.end = None
        self.broker = None  # node id of the victim
        self.affected = None  # the victim's partitions; None: all
        self.epochs = {}  # partition -> leader epoch at injection
        self.params = {}
        self.notes = []
        self.moved_ms = {}  # partition -> ms from injection until led by another broker
        self.txn_affected = []  # the victim's partitions of TXN_TOPIC
        self.txn_epochs = {}  # their leader epochs at injection
        self.wall0 = None
        self.skipped = False
        self.restarted = None  # zombie: restarted in-process (log line seen)
        self.controller = False  # the victim was the controller

    def describe(self):
        who = f" broker {self.broker}" if self.broker is not None else ""
        who += " (the controller)" if self.controller else ""
        ps = "" if self.affected is None else f" ({len(self.affected)} partitions" + (
            f", {len(self.txn_affected)} of {TXN_TOPIC}" if self.txn_affected else "") + ")"
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"#{self.n} {self.kind}{who}{ps}{': ' + params if params else ''}"


class Chaos:
    def __init__(self, s, cluster, rng, out_dir):
        self.s, self.c, self.rng = s, cluster, rng
        self.t_start = time.monotonic()
        self.down = set()  # indexes of brokers this program stopped on purpose
        self.gone = set()  # indexes of brokers that could not be started again
        self.failures = []  # what broke the cluster (beyond lost/duplicated/reordered)
        self.notes = []
        self.view = {}  # TOPIC's {partition: (leader, epoch)}
        self.txn_view = {}  # TXN_TOPIC's, when there are transactional producers
        self.txn = s.txn_producers > 0
        self.acks = AckTail(out_dir, s.producers)
        self.switch = None  # fault switch answers (None: not probed yet)
        self.watch = None  # callback on each leader poll during a fault (walpath)
        self.proxies, self.clock = {}, None  # the cut broker's (interpose)
        # Every CHAOS_SOAK_SAMPLE s: (t, node, {measure: value}) of each live broker.
        self.samples = []
        self.last_sample = 0.0
        self.stuck_seen = set()  # nodes that reported a stuck request

    def rel(self, t=None):
        return (time.monotonic() if t is None else t) - self.t_start

    def say(self, text):
        print(f"[{self.rel():7.1f}s] {text}", flush=True)

    def fail(self, text):
        self.failures.append(f"+{self.rel():.1f}s: {text}")
        self.say("FAILURE: " + text)

    # ----------------------------------------------------------- observation
    def live(self):
        """Indexes of brokers that should answer: running and not paused."""
        return [i for i, b in enumerate(self.c.brokers)
                if i not in self.down and i not in self.gone and not b.paused]

    def node(self, i):
        return self.c.brokers[i].node_id

    def index_of(self, node_id):
        return next(i for i, b in enumerate(self.c.brokers) if b.node_id == node_id)

    def leaders(self):
        """{topic: {partition: (leader, epoch)}} of the topics from the first live broker that
        answers, or None."""
        for i in self.live():
            try:
                status, body = self.c.brokers[i].admin("GET", "/v1/partitions", timeout=2)
            except OSError:
                continue
            if status == 200 and isinstance(body, list):
                out = {TOPIC: {}, TXN_TOPIC: {}}
                for p in body:
                    if p["topic"] in out:
                        out[p["topic"]][p["partition"]] = (p["leader"], p["leader_epoch"])
                return out
        return None

    def check_processes(self):
        for i, b in enumerate(self.c.brokers):
            if i in self.down or i in self.gone:
                continue
            if b.proc is None or b.proc.poll() is not None:
                code = None if b.proc is None else b.proc.returncode
                self.fail(f"broker {b.node_id} exited unexpectedly (exit code {code})")
                b.proc = None
                self.start_broker(i)

    def start_broker(self, i):
        b = self.c.brokers[i]
        try:
            b.start()
        except Exception as e:  # noqa: BLE001 - recorded; the run goes on without it
            self.fail(f"broker {b.node_id} did not start again: {e}")
            self.gone.add(i)
            return False
        self.down.discard(i)
        return True

    def observe(self):
        self.acks.poll()
        self.check_processes()
        if time.monotonic() - self.last_sample >= self.s.soak_sample:
            self.last_sample = time.monotonic()
            self.sample()
        views = self.leaders()
        v = None
        if views is not None:
            v = self.view = views[TOPIC]
            self.txn_view = views[TXN_TOPIC]
        if self.watch is not None and v is not None:
            self.watch(v)

    def wait(self, secs, until=None, step=0.1):
        """Sleeps `secs`, observing the cluster every `step`; returns early (True) once
        `until()` holds."""
        deadline = time.monotonic() + secs
        while True:
            self.observe()
            if until is not None and until():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(step, left))

    def ready(self, i):
        try:
            return self.c.brokers[i].admin("GET", "/readyz", timeout=1)[0] == 200
        except OSError:
            return False

    def healthy(self):
        live = {self.node(i) for i in self.live()}
        views = [self.view] + ([self.txn_view] if self.txn else [])
        return (all(len(v) == self.s.partitions
                    and all(leader in live for leader, _ in v.values()) for v in views)
                and all(self.ready(i) for i in self.live()))

    def controller(self):
        """The controller's node id, from the first live broker that answers, or None."""
        for i in self.live():
            try:
                status, body = self.c.brokers[i].admin("GET", "/v1/cluster", timeout=2)
            except OSError:
                continue
            if status == 200 and isinstance(body, dict):
                return (body.get("controller") or {}).get("node_id")
        return None

    def led_by(self, node_id, view=None):
        view = self.view if view is None else view
        return sorted(p for p, (leader, _) in view.items() if leader == node_id)

    def pick_victim(self, draw):
        """A live broker that leads partitions, chosen by `draw` (0..1)."""
        cands = sorted(self.node(i) for i in self.live() if self.led_by(self.node(i)))
        if not cands:
            return None
        return self.index_of(cands[min(int(draw * len(cands)), len(cands) - 1)])

    def moved(self, f, v):
        """Records when each of the victim's partitions got another leader."""
        for p in f.affected or []:
            leader, epoch = v.get(p, (None, None))
            if p not in f.moved_ms and leader is not None and leader != f.broker \
                    and epoch is not None and epoch > f.epochs.get(p, -1):
                f.moved_ms[p] = (time.monotonic() - f.t0) * 1000

    def all_moved(self, f):
        return all(p in f.moved_ms for p in f.affected or [])

    # ----------------------------------------------------------- resources
    SAMPLED = ("process_resident_memory_bytes", "process_open_fds", "process_threads",
               "weir_runtime_tasks_alive", "weir_stuck_requests_total", "weir_requests_stuck",
               "weir_log_cache_bytes", "weir_block_cache_bytes", "weir_object_index_cache_bytes",
               "weir_allocator_allocated_bytes", "weir_allocator_resident_bytes")

    def sample(self):
        """Each live broker's process figures and stuck requests (/metrics); a broker that
        reports a stuck request fails the run (it wedged)."""
        for i in self.live():
            b = self.c.brokers[i]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{b.aux_port}/metrics",
                                            timeout=2) as r:
                    text = r.read().decode()
            except OSError:
                continue
            got = {}
            for line in text.splitlines():
                name, _, value = line.partition(" ")
                if name in self.SAMPLED:
                    try:
                        got[name] = float(value)
                    except ValueError:
                        pass
            self.samples.append((self.rel(), b.node_id, b.starts, got))
            if got.get("weir_stuck_requests_total", 0) > 0 and b.node_id not in self.stuck_seen:
                self.stuck_seen.add(b.node_id)
                self.fail(f"broker {b.node_id} reports "
                          f"{got['weir_stuck_requests_total']:.0f} stuck requests "
                          "(weir_stuck_requests_total): a request waited past its bound")

    # ----------------------------------------------------------- fault switch
    def put_faults(self, i, body):
        """PUT /v1/faults on broker i: True when applied, False when the switch is off (404)."""
        status, answer = self.c.brokers[i].admin("PUT", "/v1/faults", body, timeout=5)
        if status == 404:
            return False
        if status != 200:
            raise RuntimeError(f"PUT /v1/faults on broker {self.node(i)}: {status} {answer}")
        return True

    def probe_switch(self):
        try:
            status, _ = self.c.brokers[0].admin("GET", "/v1/faults", timeout=5)
        except OSError:
            status = None
        self.switch = status == 200
        if not self.switch:
            self.note(f"the fault switch does not answer (GET /v1/faults: {status}): "
                      "objstore and wal faults are skipped")

    def clear_faults(self):
        if not self.switch:
            return
        for i in self.live():
            try:
                self.put_faults(i, {"wal": {}, "object_store": {}})
            except (OSError, RuntimeError) as e:
                self.note(f"clearing the faults of broker {self.node(i)} failed: {e}")

    def note(self, text):
        self.notes.append(text)
        self.say("note: " + text)

    # ----------------------------------------------------------- balance
    def rebalance(self):
        """Moves partitions from the brokers leading the most to those leading the fewest,
        until they differ by one at most; waits (bounded) for the moves."""
        if not self.s.rebalance:
            return
        self.observe()
        live = [self.node(i) for i in self.live()]
        if len(live) < 2 or len(self.view) < self.s.partitions:
            return
        moves = []
        # Each topic on its own: the transactional topic's partitions are balanced too.
        for topic, view in ((TOPIC, self.view),) + (((TXN_TOPIC, self.txn_view),)
                                                     if self.txn else ()):
            if len(view) < self.s.partitions:
                continue
            led = {n: self.led_by(n, view) for n in live}
            while True:
                most = max(live, key=lambda n: (len(led[n]), n))
                least = min(live, key=lambda n: (len(led[n]), n))
                if len(led[most]) - len(led[least]) <= 1:
                    break
                p = led[most].pop()
                led[least].append(p)
                moves.append({"topic": topic, "partition": p, "broker": least})
        if not moves:
            return
        i = self.live()[0]
        try:
            status, body = self.c.brokers[i].admin("POST", "/v1/reassignments",
                                                   {"partitions": moves}, timeout=10)
        except OSError as e:
            self.note(f"rebalance request failed: {e}")
            return
        if status != 200:
            self.note(f"rebalance refused: {status} {body}")
            return
        # Each move is answered on its own: wait only for those started (one is refused when,
        # say, the broker asked has not renewed its session since a PostgreSQL outage).
        refused = {(x.get("topic"), x.get("partition")): x["error"]
                   for x in (body.get("partitions") or [] if isinstance(body, dict) else [])
                   if x.get("error")}
        want = {(m["topic"], m["partition"]): m["broker"] for m in moves
                if (m["topic"], m["partition"]) not in refused}
        ok = self.wait(30, lambda: all(
            (self.view if t == TOPIC else self.txn_view).get(p, (None,))[0] == n
            for (t, p), n in want.items()))
        self.say(f"rebalanced {len(want)} partitions" + ("" if ok else " (not all moved in 30 s)")
                 + (f"; {len(refused)} moves refused ({next(iter(refused.values()))})"
                    if refused else ""))

    # ----------------------------------------------------------- the faults
    def begin(self, f, victim=None):
        """Records what the fault hits; the caller injects it right after."""
        self.observe()
        if victim is not None:
            f.broker = self.node(victim)
            f.affected = self.led_by(f.broker)
            f.epochs = {p: self.view[p][1] for p in f.affected}
            f.txn_affected = self.led_by(f.broker, self.txn_view)
            f.txn_epochs = {p: self.txn_view[p][1] for p in f.txn_affected}
            # Killing or pausing the controller also waits for its lease to pass.
            f.controller = self.controller() == f.broker
        self.say("fault " + f.describe())
        f.t0 = time.monotonic()
        f.wall0 = time.time()  # to place the brokers' log lines

    def kill(self, f, draw):
        i = self.pick_victim(draw)
        if i is None:
            return self.skip(f, "no broker leads partitions")
        b = self.c.brokers[i]
        self.begin(f, i)
        self.down.add(i)
        b.kill()
        self.watch = lambda v: self.moved(f, v)
        # Until its partitions are led elsewhere and acknowledged there, or the bound.
        done = self.wait(self.s.restart_bound,
                         lambda: self.all_moved(f) and self.acks.acked_since(f.affected, f.t0))
        self.watch = None
        if not done:
            f.notes.append(f"partitions not all led elsewhere and acknowledged within "
                           f"{self.s.restart_bound:g} s")
        t = time.monotonic()
        if self.start_broker(i):
            f.params["restart_s"] = round(time.monotonic() - t, 1)
        f.t1 = time.monotonic()

    def pause(self, f, draw, extra):
        i = self.pick_victim(draw)
        if i is None:
            return self.skip(f, "no broker leads partitions")
        b = self.c.brokers[i]
        hold = (self.s.session_ms + self.s.drift_ms) / 1000 + extra
        f.params["paused_s"] = round(hold, 1)
        before = log_count(b, "starting again after being replaced")
        self.begin(f, i)
        b.pause()
        self.watch = lambda v: self.moved(f, v)
        self.wait(hold)
        b.resume()
        self.say(f"broker {f.broker} resumed (SIGCONT) after {hold:.1f} s")
        replaced = self.all_moved(f) and bool(f.affected)
        # Replaced: it must notice, restart in-process and serve again; else just go on.
        self.wait(30, lambda: (not replaced or log_count(b, "starting again after being "
                                                            "replaced") > before)
                  and self.ready(i))
        self.watch = None
        f.restarted = log_count(b, "starting again after being replaced") > before
        if replaced and not f.restarted:
            f.notes.append("its partitions were led elsewhere but it did not restart itself "
                           "within 30 s")
        if not self.ready(i):
            f.notes.append("not ready 30 s after SIGCONT")
        f.t1 = time.monotonic()

    def pg(self, f, down):
        f.params["down_s"] = round(down, 1)
        self.begin(f)
        self.c.pg.restart(down)
        f.t1 = time.monotonic()

    def objstore(self, f, put, get, latency, hold):
        if not self.switch:
            return self.skip(f, "no fault switch")
        f.params.update({"put_error_rate": round(put, 2), "get_error_rate": round(get, 2),
                         "latency_ms": latency, "secs": round(hold, 1)})
        self.begin(f)
        body = {"object_store": {"put_error_rate": round(put, 3),
                                 "get_error_rate": round(get, 3), "latency_ms": latency}}
        for i in self.live():
            self.put_faults(i, body)
        self.wait(hold)
        for i in self.live():
            self.put_faults(i, {"object_store": {}})
        f.t1 = time.monotonic()

    def wal(self, f, draw, write, sync, latency, seed, hold):
        if not self.switch:
            return self.skip(f, "no fault switch")
        i = self.pick_victim(draw)
        if i is None:
            return self.skip(f, "no broker leads partitions")
        f.params.update({"write_error_rate": round(write, 2), "sync_error_rate": round(sync, 2),
                         "latency_ms": latency, "secs": round(hold, 1)})
        self.begin(f, i)
        self.put_faults(i, {"wal": {"write_error_rate": round(write, 3),
                                    "sync_error_rate": round(sync, 3),
                                    "latency_ms": latency, "seed": seed}})
        self.wait(hold)
        if i in self.live():
            self.put_faults(i, {"wal": {}})
        f.t1 = time.monotonic()

    def walpath(self, f, draw, hold):
        i = self.pick_victim(draw)
        if i is None:
            return self.skip(f, "no broker leads partitions")
        b = self.c.brokers[i]
        path = os.path.join(b.data_dir, "wal")
        away = path + ".unreachable"
        f.params["unreachable_s"] = round(hold, 1)
        self.begin(f, i)
        self.down.add(i)
        b.kill()
        os.rename(path, away)
        wrong = set()

        def still_waiting(v):
            # Led elsewhere: by another broker at an epoch above the one at injection. (A broker
            # whose view lags may still name the previous leader, at a lower epoch, of a
            # partition the victim had just taken over when it was killed.)
            for topic, view, parts, epochs in ((TOPIC, v, f.affected, f.epochs),
                                               (TXN_TOPIC, self.txn_view, f.txn_affected,
                                                f.txn_epochs)):
                for p in parts:
                    leader, epoch = view.get(p, (None, None))
                    if leader is not None and leader != f.broker and (topic, p) not in wrong \
                            and epoch is not None and epoch > epochs.get(p, -1):
                        wrong.add((topic, p))
                        self.fail(f"partition {topic}/{p} is led by broker {leader} (epoch "
                                  f"{epoch}) while broker {f.broker}'s WAL is unreachable")

        self.watch = still_waiting
        self.wait(hold)
        os.rename(away, path)
        self.say(f"broker {f.broker}'s WAL is back")
        # A peer recovers it (the controller retries every few seconds); then the broker comes
        # back, empty. Bounded: it claims its WAL back itself if no peer did.
        t_back = time.monotonic()
        self.watch = lambda v: self.moved(f, v)
        recovered = self.wait(self.s.restart_bound, lambda: self.all_moved(f))
        self.watch = None
        f.params["recovered_after_s"] = (round(time.monotonic() - t_back, 1) if recovered
                                         else None)
        if not recovered:
            f.notes.append(f"no peer recovered the WAL within {self.s.restart_bound:g} s of its "
                           "return; the broker claims it back")
        self.start_broker(i)
        f.t1 = time.monotonic()

    def skip(self, f, why):
        f.skipped = True
        f.notes.append(why)
        f.t0 = f.t1 = time.monotonic()
        self.say(f"fault #{f.n} {f.kind} skipped: {why}")

    # ----------------------------------------------------------- cut links, the clock
    def cut(self, f, link, hold):
        """One of the cut broker's links a black hole for `hold` s, then closed."""
        proxy = self.proxies.get(link)
        if proxy is None or CUT not in self.live():
            return self.skip(f, "the cut broker does not run through the suite's proxies")
        f.params["secs"] = round(hold, 1)
        self.begin(f, CUT)
        proxy.cut()
        self.watch = lambda v: self.moved(f, v)
        self.wait(hold)
        proxy.heal()
        self.say(f"broker {f.broker}: its {link} link is back")
        self.wait(30, lambda: self.ready(CUT))
        self.watch = None
        if not self.ready(CUT):
            f.notes.append("not ready 30 s after its link came back")
        f.t1 = time.monotonic()

    def jump(self, f, ahead, hold):
        """The cut broker's wall clock `ahead` s forward for `hold` s, then back."""
        if self.clock is None or CUT not in self.live():
            return self.skip(f, f"no libfaketime ({FAKETIME}: apt-get install faketime)")
        f.params.update({"ahead_s": round(ahead), "secs": round(hold, 1)})
        self.begin(f, CUT)
        with open(self.clock, "w") as fh:
            fh.write(f"+{int(ahead)}s\n")
        self.watch = lambda v: self.moved(f, v)
        self.wait(hold)
        with open(self.clock, "w") as fh:
            fh.write("+0\n")
        self.say(f"broker {f.broker}: its clock is back")
        self.wait(30, lambda: self.ready(CUT))
        self.watch = None
        if not self.ready(CUT):
            f.notes.append("not ready 30 s after its clock came back")
        f.t1 = time.monotonic()

    # ----------------------------------------------------------- the soak's events
    def move(self, f, draw):
        """A third of each topic's partitions, every third from a drawn start, to the broker
        after their leader."""
        self.begin(f)
        live = sorted(self.node(i) for i in self.live())
        if len(live) < 2:
            return self.skip(f, "fewer than two live brokers")
        start = int(draw * 3)
        moves = []
        for topic, view in ((TOPIC, self.view),) + (((TXN_TOPIC, self.txn_view),)
                                                     if self.txn else ()):
            for p, (leader, _) in sorted(view.items()):
                if p % 3 == start % 3 and leader in live:
                    to = live[(live.index(leader) + 1) % len(live)]
                    moves.append({"topic": topic, "partition": p, "broker": to})
        f.params["partitions"] = len(moves)
        try:
            status, body = self.c.brokers[self.live()[0]].admin(
                "POST", "/v1/reassignments", {"partitions": moves}, timeout=10)
        except OSError as e:
            f.notes.append(f"the move request failed: {e}")
            status = None
        if status is not None and status != 200:
            f.notes.append(f"the move was refused: {status} {body}")
        want = {(m["topic"], m["partition"]): m["broker"] for m in moves}
        if not self.wait(30, lambda: all(
                (self.view if t == TOPIC else self.txn_view).get(p, (None,))[0] == n
                for (t, p), n in want.items())):
            f.notes.append("not every partition moved within 30 s")
        f.t1 = time.monotonic()

    def restart(self, f, i=None, upgrade=False):
        """SIGTERM of the last broker (or of broker i; its partitions handed over), then started
        again: on the new binary (WEIR_BIN) when `upgrade`."""
        i = len(self.c.brokers) - 1 if i is None else i
        if i not in self.live():
            return self.skip(f, f"broker {self.node(i)} is not running")
        self.begin(f, i)
        if upgrade:
            f.params["from"] = self.version(i)
            self.c.brokers[i].binary = None  # the next start: WEIR_BIN
        self.down.add(i)
        t = time.monotonic()
        try:
            self.c.brokers[i].stop(timeout=150)
        except RuntimeError as e:
            self.fail(f"broker {f.broker}: {e}")
        f.params["stop_s"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        if self.start_broker(i):
            f.params["restart_s"] = round(time.monotonic() - t, 1)
            if upgrade:
                f.params["to"] = self.version(i)
                if f.params["to"] == f.params["from"] or f.params["to"].startswith("?"):
                    self.fail(f"broker {f.broker} runs {f.params['to']} after its upgrade from "
                              f"{f.params['from']}: not another build")
        f.t1 = time.monotonic()

    def upgrade(self, f):
        """The next broker still on the old binary, stopped and started on the new one."""
        old = [i for i, b in enumerate(self.c.brokers) if b.binary is not None]
        if not old:
            return self.skip(f, "every broker runs the new binary already")
        self.restart(f, old[0], upgrade=True)

    def version(self, i):
        """Broker i's "version (commit)" from weir_build_info, or what went wrong."""
        b = self.c.brokers[i]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics",
                                        timeout=5) as r:
                text = r.read().decode()
        except OSError as e:
            return f"? ({e})"
        m = re.search(r'weir_build_info\{[^}]*version="([^"]*)"[^}]*commit="([^"]*)"', text)
        return f"{m.group(1)} ({m.group(2)})" if m else "? (no weir_build_info)"

    # ----------------------------------------------------------- group offsets (upgrade)
    def group_offsets(self, group):
        """{partition: committed offset} of `group` on TOPIC (AdminClient), or None on error."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient

        a = AdminClient({"bootstrap.servers": self.c.bootstrap})
        req = ConsumerGroupTopicPartitions(
            group, [TopicPartition(TOPIC, p) for p in range(self.s.partitions)])
        try:
            got = a.list_consumer_group_offsets([req])[group].result(30)
        except Exception as e:  # noqa: BLE001 - reported by the caller
            self.say(f"listing {group}'s offsets failed: {e}")
            return None
        return {tp.partition: tp.offset for tp in got.topic_partitions if tp.offset >= 0}

    def set_sentinel(self):
        """Gives SENTINEL_GROUP (no members) an offset on every partition; returns them."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient

        want = {p: 1000 + 7 * p for p in range(self.s.partitions)}
        a = AdminClient({"bootstrap.servers": self.c.bootstrap})
        req = ConsumerGroupTopicPartitions(
            SENTINEL_GROUP, [TopicPartition(TOPIC, p, o) for p, o in want.items()])
        a.alter_consumer_group_offsets([req])[SENTINEL_GROUP].result(30)
        return want

    def check_groups(self, sentinel, floor, when):
        """The sentinel's offsets unchanged and chaos-group's at or above `floor` (updated in
        place to what is read now)."""
        got = self.group_offsets(SENTINEL_GROUP)
        if got != sentinel:
            self.fail(f"{when}: {SENTINEL_GROUP}'s committed offsets changed: {got}, "
                      f"{sentinel} were set")
        now = self.group_offsets(GROUP)
        if now is None:
            self.fail(f"{when}: {GROUP}'s committed offsets could not be read")
            return
        lost = sorted(set(floor) - set(now))
        if lost:
            self.fail(f"{when}: {GROUP} has no committed offset any more on partitions {lost}")
        # A member's commit may legitimately land after a newer one of the partition's next
        # owner (Kafka does not order them either): noted, not a failure.
        back = {p: (o, now[p]) for p, o in floor.items() if p in now and now[p] < o}
        if back:
            self.note(f"{when}: {GROUP}'s committed offsets went back (partition: (before, "
                      f"now)): {back}")
        floor.update(now)
        self.say(f"{when}: {SENTINEL_GROUP}'s {len(sentinel)} offsets unchanged; {GROUP} has "
                 f"{len(now)} committed offsets ({len(back)} below one seen before)")

    def inject(self, f):
        """Draws every parameter first (the same number of draws whatever the cluster's state,
        so a seed replays the same faults), then injects."""
        r = self.rng
        draw = r.random()
        hold = r.uniform(*self.s.hold)
        if f.kind == "kill":
            self.kill(f, draw)
        elif f.kind == "pause":
            self.pause(f, draw, r.uniform(*self.s.pause_extra))
        elif f.kind == "pg":
            self.pg(f, r.uniform(*self.s.pg_down))
        elif f.kind == "objstore":
            put, get, latency = r.uniform(0.1, 0.5), r.uniform(0.1, 0.5), r.choice([0, 20, 50,
                                                                                     200])
            self.objstore(f, put, get, latency, hold)
        elif f.kind == "wal":
            write, sync, latency = r.uniform(0.05, 0.3), r.uniform(0.0, 0.1), r.choice([0, 0, 5,
                                                                                        20])
            self.wal(f, draw, write, sync, latency, r.randrange(1, 1 << 31), hold)
        elif f.kind == "walpath":
            self.walpath(f, draw, r.uniform(*self.s.walpath_hold))
        elif f.kind in ("pgcut", "s3cut", "peercut", "clientcut"):
            self.cut(f, f.kind[:-3], hold)
        elif f.kind == "clock":
            self.jump(f, r.uniform(30, 90), hold)
        elif f.kind == "move":
            self.move(f, draw)
        elif f.kind == "restart":
            self.restart(f)
        elif f.kind == "upgrade":
            self.upgrade(f)
        for note in f.notes:
            self.say(f"  #{f.n}: {note}")


def log_count(b, needle):
    try:
        with open(b.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace").count(needle)
    except OSError:
        return 0


def plan(s, rng):
    """The kinds in order: short, one of each; long, shuffled rounds of all kinds; bench, kills."""
    kinds = list(s.kinds)
    if s.mode in ("soak", "upgrade"):
        return [kinds[i % len(kinds)] for i in range(s.faults)]
    if s.faults is None:
        rng.shuffle(kinds)
        return kinds
    out = []
    while len(out) < s.faults:
        rnd = list(kinds)
        rng.shuffle(rnd)
        out += rnd
    return out[:s.faults]


def create_topic(bootstrap, partitions, out_dir, topics=(TOPIC,)):
    from confluent_kafka.admin import AdminClient, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap,
                     "logger": client_logger(out_dir, "admin")})
    for f in a.create_topics([NewTopic(t, num_partitions=partitions, replication_factor=1)
                              for t in topics]).values():
        f.result(30)


# ------------------------------------------------------------------ checking
def load_acks(out_dir, producers):
    """[(time, partition, offset, producer, incarnation, seq)] sorted by time. The offset is None
    where the client reported a delivery without one: librdkafka acknowledges a failed batch
    implicitly once a later batch of the producer succeeds."""
    acks = []
    for i in range(producers):
        try:
            with open(os.path.join(out_dir, f"acks-{i}.txt")) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 5:
                        off = None if parts[2] in ("None", "-1") else int(parts[2])
                        acks.append((float(parts[0]), int(parts[1]), off, i,
                                     int(parts[3]), int(parts[4])))
        except OSError:
            pass
    acks.sort(key=lambda a: (a[0], a[1], -1 if a[2] is None else a[2], a[3:]))
    return acks


def read_back(bootstrap, partitions, out_dir, timeout=300):
    """{partition: [(offset, value key (producer, incarnation, seq) or None, leader epoch)]}
    of every record from the start, and the end offsets."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-check-{os.getpid()}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "fetch.max.bytes": 8 << 20, "logger": client_logger(out_dir, "read-back")})
    try:
        ends = {}
        for p in range(partitions):
            for attempt in range(10):
                try:
                    ends[p] = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
                    break
                except Exception:  # noqa: BLE001 - a leader still opening: retry
                    if attempt == 9:
                        raise
                    time.sleep(1)
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        nxt = {p: 0 for p in range(partitions)}
        deadline = time.monotonic() + timeout
        while any(nxt[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=1.0):
                if m.error():
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        print(f"read-back: {m.error()}")
                    continue
                v = m.value() or b""
                parts = v.split(b".", 3)
                try:
                    key = (int(parts[0]), int(parts[1]), int(parts[2]))
                except (ValueError, IndexError):
                    key = None
                epoch = m.leader_epoch()
                out[m.partition()].append((m.offset(), key, -1 if epoch is None else epoch))
                nxt[m.partition()] = m.offset() + 1
        return out, ends
    finally:
        c.close()


def check(acks, log, ends):
    """Lost, duplicated and reordered records, each as (time or None, description); the read
    map {(partition, offset): (key, epoch)}; offset gaps; malformed records."""
    at = {}
    where = collections.defaultdict(list)
    malformed = []
    gaps = 0
    for p, recs in log.items():
        prev = None
        for off, key, epoch in recs:
            at[(p, off)] = (key, epoch)
            if key is None:
                malformed.append((p, off))
            else:
                where[key].append((p, off))
            if prev is not None and off != prev + 1:
                gaps += 1
            prev = off
    ack_time = {}
    lost = []
    for t, p, off, prod, inc, seq in acks:
        key = (prod, inc, seq)
        ack_time[key] = t
        if off is None:
            # Acknowledged without an offset: it must be in that partition, wherever.
            if not any(wp == p for wp, _ in where.get(key, [])):
                lost.append((t, f"{prod}.{inc}.{seq} acknowledged (no offset) in partition {p}: "
                                + f"not read back there (read at {where.get(key, [])})"))
            continue
        got = at.get((p, off))
        if got is None or got[0] != key:
            elsewhere = where.get(key)
            lost.append((t, f"{prod}.{inc}.{seq} acknowledged at {p}/{off}: "
                            + (f"read at {elsewhere}" if elsewhere else "not read back")
                            + (f"; {p}/{off} holds {got[0]}" if got else "")))
    dups = []
    for key, places in where.items():
        if len(places) > 1:
            for extra in places[1:]:
                dups.append((ack_time.get(key), f"{key[0]}.{key[1]}.{key[2]} read at {places}"))
    reordered = []
    for p, recs in log.items():
        last = {}
        for off, key, _ in recs:
            if key is None:
                continue
            inst, seq = key[:2], key[2]
            if inst in last and seq < last[inst][0]:
                reordered.append((ack_time.get(key),
                                  f"partition {p}: {key[0]}.{key[1]}.{seq} at offset {off} after "
                                  f"{key[0]}.{key[1]}.{last[inst][0]} at offset {last[inst][1]}"))
            else:
                last[inst] = (seq, off)
    return lost, dups, reordered, at, gaps, malformed


def txn_offsets(bootstrap, partitions, out_dir, settle=60):
    """Waits (up to `settle` s) until no transaction is open in TXN_TOPIC: ListOffsets latest
    under read_committed (the last stable offset) equal to read_uncommitted (the high watermark)
    on every partition. Returns (high watermarks, {partition: (last stable offset, high
    watermark)} of the partitions still held back)."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    a = AdminClient({"bootstrap.servers": bootstrap,
                     "logger": client_logger(out_dir, "txn-offsets")})

    def latest(isolation):
        tps = {TopicPartition(TXN_TOPIC, p): OffsetSpec.latest() for p in range(partitions)}
        res = a.list_offsets(tps, isolation_level=isolation, request_timeout=10)
        return {tp.partition: f.result(timeout=30).offset for tp, f in res.items()}

    deadline = time.monotonic() + settle
    held = None
    while True:
        try:
            lso = latest(IsolationLevel.READ_COMMITTED)
            hw = latest(IsolationLevel.READ_UNCOMMITTED)
            held = {p: (lso[p], hw[p]) for p in hw if lso.get(p) != hw[p]}
            if not held:
                return hw, {}
        except Exception:  # noqa: BLE001 - a leader still opening: retry
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            return hw, held
        time.sleep(0.5)


def read_txn_topic(bootstrap, partitions, ends, isolation, out_dir, timeout=120):
    """({partition: [(offset, value)]} of TXN_TOPIC from the start, as an `isolation` consumer
    gets it, until it reaches `ends` in every partition (its end-of-partition event); the
    partitions it did not reach the end of)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap,
                  "group.id": f"chaos-txn-check-{isolation}-{os.getpid()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "enable.partition.eof": True, "fetch.max.bytes": 8 << 20,
                  "logger": client_logger(out_dir, f"read-back-{isolation}")})
    try:
        c.assign([TopicPartition(TXN_TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        done = set()
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for m in c.consume(num_messages=5000, timeout=1.0):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        if m.offset() >= ends.get(m.partition(), 0):
                            done.add(m.partition())
                    else:
                        print(f"read-back {TXN_TOPIC} ({isolation}): {m.error()}")
                    continue
                out[m.partition()].append((m.offset(), (m.value() or b"").decode("utf-8",
                                                                                   "replace")))
        return out, sorted(set(range(partitions)) - done)
    finally:
        c.close()


def txn_value(value):
    """The value's name "<producer>.<incarnation>.<txn>.<i>" and its key (the four numbers), or
    (None, None) when malformed."""
    parts = value.split(".", 4)
    try:
        key = tuple(int(x) for x in parts[:4])
    except ValueError:
        return None, None
    if len(key) != 4:
        return None, None
    return ".".join(parts[:4]) + ".", key


def load_txns(out_dir, producers):
    """{transaction id: record}, the last line of each in txns-<i>.jsonl: an "open" line alone
    (the process died in the transaction) counts as outcome unknown."""
    txns = {}
    for i in range(producers):
        try:
            with open(os.path.join(out_dir, f"txns-{i}.jsonl")) as f:
                for line in f:
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("open"):
                        rec.update(outcome="unknown", t_end=None,
                                   error="the producer process ended in the transaction")
                    txns[rec["id"]] = rec
        except OSError:
            pass
    return txns


def check_txn(txns, committed, uncommitted):
    """The transactional checks on what the read_committed (`committed`) and read_uncommitted
    readers got: {violation: [(time or None, description)]}, and how the transactions of
    unknown outcome turned out {"committed": n, "aborted": n}."""
    owner = {}  # value -> (transaction, partition, acknowledged offset or None)
    for t in txns.values():
        for part, v, off in t["values"]:
            owner[v] = (t, part, off)
    bad = {k: [] for k in ("lost", "aborted_visible", "partial", "dup", "unexpected",
                           "aborted_absent")}

    def index(log, who):
        where = collections.defaultdict(list)
        for p, recs in log.items():
            last = {}  # producer instance -> ((txn, i), offset)
            for off, value in recs:
                name, key = txn_value(value)
                if name is None:
                    bad["unexpected"].append((None, f"{who}: malformed record at {p}/{off}: "
                                                    f"{value[:40]!r}"))
                    continue
                where[name].append((p, off))
                t = owner.get(name)
                if t is None:
                    bad["unexpected"].append((None, f"{who}: {name} at {p}/{off}: no "
                                                    "transaction produced it"))
                inst, pos = key[:2], key[2:]
                if inst in last and pos < last[inst][0]:
                    bad["unexpected"].append((t[0].get("t_end") if t else None,
                                              f"{who}: partition {p}: {name} at offset {off} "
                                              f"after {inst[0]}.{inst[1]}.{last[inst][0][0]}."
                                              f"{last[inst][0][1]}. at offset {last[inst][1]}"))
                else:
                    last[inst] = (pos, off)
        for name, places in where.items():
            if len(places) > 1:
                t = owner.get(name)
                bad["dup"].append((t[0].get("t_end") if t else None,
                                   f"{who}: {name} read at {places}"))
        return where

    rc = index(committed, "read_committed")
    ru = index(uncommitted, "read_uncommitted")
    resolved = collections.Counter()
    for t in sorted(txns.values(), key=lambda t: (t["producer"], t["n"])):
        vals = t["values"]
        seen = [v for _, v, _ in vals if v in rc]
        desc = (f"transaction {t['id']} ({t['outcome']}, planned {t['planned']}"
                + (f"; {t['error']}" if t.get("error") else "") + ")")
        when = t.get("t_end")
        if t["outcome"] == "committed":
            for part, v, off in vals:
                places = rc.get(v, [])
                if not places:
                    bad["lost"].append((when, f"{v} of {desc} acknowledged at {part}/{off}: "
                                              "not read by read_committed (read_uncommitted: "
                                              f"{ru.get(v, [])})"))
                elif off is not None and (part, off) not in places or \
                        off is None and all(p != part for p, _ in places):
                    bad["lost"].append((when, f"{v} of {desc} acknowledged at {part}/{off}: "
                                              f"read at {places}"))
        elif t["outcome"] == "aborted":
            for part, v, off in vals:
                if v in rc:
                    bad["aborted_visible"].append((when, f"{v} of {desc}: read by "
                                                         f"read_committed at {rc[v]}"))
                if off is not None and (part, off) not in ru.get(v, []):
                    bad["aborted_absent"].append((when, f"{v} of {desc} acknowledged at "
                                                        f"{part}/{off}: read_uncommitted read it "
                                                        f"at {ru.get(v, [])}"))
        else:
            if seen and len(seen) < len(vals):
                bad["partial"].append((when, f"{desc}: read_committed read {len(seen)} of its "
                                             f"{len(vals)} values: "
                                             f"{[(v, rc[v]) for v in seen]}; not read: "
                                             f"{[(v, p, o) for p, v, o in vals if v not in rc]}"))
            else:
                resolved["committed" if seen else "aborted"] += 1
    return bad, resolved


def longest_gap(times, start, end):
    """The longest interval without a time in it, within [start, end] (ms): gaps between
    consecutive times, clipped to the window, so that an outage running into the next fault's
    window is not counted whole in both."""
    best = None
    prev = None
    for t in times:
        if prev is not None and prev < end and t > start:
            g = min(t, end) - max(prev, start)
            if best is None or g > best:
                best = g
        prev = t
        if t > end:
            break
    return None if best is None else best * 1000


def failover_times(f, acks_by_part, at):
    """{partition: ms from the kill to the first acknowledgement there by a later leader}: at a
    leader epoch above the one at the kill where the read-back knows it, else the first after
    the kill."""
    out = {}
    for p in f.affected or []:
        for t, off in acks_by_part.get(p, []):
            if t <= f.t0:
                continue
            epoch = at.get((p, off), (None, -1))[1]
            if epoch is not None and epoch >= 0 and epoch <= f.epochs.get(p, -1):
                continue  # answered by the killed broker before it died
            out[p] = (t - f.t0) * 1000
            break
    return out


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def ms(v):
    return "-" if v is None else f"{v:,.0f}"


# ------------------------------------------------------------------ main
def run(s):
    import weir_harness  # the test cluster

    rng = random.Random(s.seed)
    kinds = plan(s, rng)
    print(f"chaos ({s.mode}, {s.wal_kind} WAL): seed {s.seed}; {len(kinds)} faults: "
          f"{' '.join(kinds)}", flush=True)
    print(f"replay: {s.replay()}", flush=True)
    shutil.rmtree(s.dir, ignore_errors=True)
    os.makedirs(s.dir)
    out_dir = os.path.join(s.dir, "clients")
    os.makedirs(out_dir)
    cluster = weir_harness.Cluster("chaos", s.dir, env=s.broker_env(), binary=s.upgrade_from)
    ctx = mp.get_context("spawn")
    stop_p, stop_c = ctx.Event(), ctx.Event()
    procs = []
    result = {"settings": s, "faults": [], "failures": [], "notes": []}
    chaos = None
    proxies, clock = {}, None
    try:
        cluster.launch()
        if any(k in ("pgcut", "s3cut", "peercut", "clientcut", "clock") for k in kinds):
            proxies, clock = interpose(cluster, CUT, out_dir)
        create_topic(cluster.bootstrap, s.partitions, out_dir,
                     (TOPIC, TXN_TOPIC) if s.txn_producers else (TOPIC,))
        chaos = Chaos(s, cluster, rng, out_dir)
        chaos.proxies, chaos.clock = proxies, clock
        for key in sorted(s.unknown_keys()):
            chaos.note(f"{os.environ['WEIR_BIN']} does not know {key}: left out")
        views = [lambda: chaos.view] + ([lambda: chaos.txn_view] if s.txn_producers else [])
        if not chaos.wait(30, lambda: all(len(v()) == s.partitions and all(
                leader is not None for leader, _ in v().values()) for v in views)):
            raise RuntimeError(f"{TOPIC}: not every partition has a leader after 30 s:\n"
                               + cluster.log_tail(30))
        chaos.probe_switch()
        procs = [ctx.Process(target=producer_main,
                             args=(i, cluster.bootstrap, TOPIC, s.partitions,
                                   s.rate / s.producers, s.record_bytes, out_dir, stop_p))
                 for i in range(s.producers)]
        procs += [ctx.Process(target=txn_producer_main,
                              args=(i, cluster.bootstrap, TXN_TOPIC, s.partitions,
                                    s.txn_rate / s.txn_producers, s.record_bytes, s.seed,
                                    s.txn_abort, out_dir, stop_p))
                  for i in range(s.txn_producers)]
        n_producers = s.producers + s.txn_producers
        procs += [ctx.Process(target=consumer_main,
                              args=(i, cluster.bootstrap, TOPIC, out_dir, stop_c))
                  for i in range(s.consumers)]
        if s.mode == "soak":
            # Both group protocols: one more consumer, in a KIP-848 group of its own.
            procs.append(ctx.Process(target=consumer_main,
                                     args=(s.consumers, cluster.bootstrap, TOPIC, out_dir,
                                           stop_c, s.soak_consumer_protocol)))
        for p in procs:
            p.start()
        chaos.say(f"load: {s.producers} idempotent producers, {s.rate:g} records/s of "
                  f"{s.record_bytes} B over {s.partitions} partitions; {s.consumers} consumers "
                  f"in group {GROUP}"
                  + (f"; {s.txn_producers} transactional producers, {s.txn_rate:g} "
                     f"transactions/s to {TXN_TOPIC}" if s.txn_producers else ""))
        chaos.wait(s.warmup)
        if not chaos.wait(60, lambda: chaos.acks.acked_since(range(s.partitions),
                                                             chaos.t_start)):
            raise RuntimeError("the producers got no acknowledgement on some partitions in 60 s")
        faults, skipped = [], []
        if s.mode == "upgrade":
            sentinel, floor = chaos.set_sentinel(), {}
            chaos.wait(3)  # the consumers' first commits
            chaos.check_groups(sentinel, floor, "before the upgrade")
            for i in range(len(cluster.brokers)):
                chaos.say(f"broker {chaos.node(i)} runs {chaos.version(i)}")
        for n, kind in enumerate(kinds, 1):
            if not chaos.wait(60, chaos.healthy):
                chaos.note(f"before fault #{n}: the cluster is not whole after 60 s "
                           f"(leaders {chaos.view})")
            f = Fault(n, kind)
            chaos.inject(f)
            if f.skipped:
                skipped.append(f)
            else:
                # A fault's window runs until the next fault is injected.
                if faults:
                    faults[-1].end = f.t0
                faults.append(f)
            chaos.rebalance()
            chaos.wait(rng.uniform(*s.settle))
            if kind == "upgrade":
                chaos.check_groups(sentinel, floor, f"after upgrade #{n}")
        chaos.clear_faults()
        chaos.wait(30, chaos.healthy)
        chaos.wait(2)
        t_load_end = time.monotonic()
        if faults:
            faults[-1].end = t_load_end
        chaos.say("stopping the load; producers flush")
        stop_p.set()
        for p in procs[:n_producers]:
            p.join(180)
        stop_c.set()
        for p in procs[n_producers:]:
            p.join(60)
        t_flushed = time.monotonic()
        chaos.check_processes()
        if s.mode == "upgrade":
            chaos.check_groups(sentinel, floor, "after the load")
        chaos.say("reading every partition back")
        log, ends = read_back(cluster.bootstrap, s.partitions, out_dir)
        if s.txn_producers:
            chaos.say(f"reading {TXN_TOPIC} back (read_committed, read_uncommitted)")
            txn_ends, held = txn_offsets(cluster.bootstrap, s.partitions, out_dir)
            for p, (lso, hw) in sorted(held.items()):
                chaos.fail(f"{TXN_TOPIC}/{p}: a transaction still open a minute after the load "
                           f"(last stable offset {lso}, high watermark {hw}): hanging")
            ends_rc = {p: held.get(p, (hw, hw))[0] for p, hw in txn_ends.items()}
            result["txn_log"] = {}
            for isolation, e in (("read_committed", ends_rc), ("read_uncommitted", txn_ends)):
                got, short = read_txn_topic(cluster.bootstrap, s.partitions, e, isolation,
                                            out_dir)
                if short:
                    chaos.fail(f"{TXN_TOPIC}: the {isolation} read-back did not reach the end "
                               f"offsets {e} of partitions {short}")
                result["txn_log"][isolation] = got
            result["txn_ends"] = txn_ends
        chaos.sample()
        result["samples"] = chaos.samples
        result.update(faults=sorted(faults + skipped, key=lambda f: f.n), failures=chaos.failures, notes=chaos.notes,
                      t_start=chaos.t_start, t_load_end=t_load_end, t_flushed=t_flushed,
                      log=log, ends=ends)
    finally:
        stop_p.set()
        stop_c.set()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        if chaos is not None:
            try:
                chaos.clear_faults()
            except Exception:  # noqa: BLE001 - the cluster is going away anyway
                pass
        logs = {b.node_id: b.log_lines() for b in cluster.brokers}
        result["panics"] = [f"broker {n}: {ln.strip()[:300]}" for n, lines in logs.items()
                            for ln in lines if "panicked" in ln]
        result["logs"] = broker_lines(logs)
        result["recoveries"] = recovery_lines(logs)
        cluster.cleanup()
        for p in proxies.values():
            p.close()
    result["acks"] = load_acks(out_dir, s.producers)
    result["producers"] = [read_json(os.path.join(out_dir, f"producer-{i}.json"))
                           for i in range(s.producers)]
    result["consumers"] = [read_json(os.path.join(out_dir, f"consumer-{i}.json"))
                           for i in range(s.consumers + (1 if s.mode == "soak" else 0))]
    result["txn_producers"] = [read_json(os.path.join(out_dir, f"txn-producer-{i}.json"))
                               for i in range(s.txn_producers)]
    result["txns"] = load_txns(out_dir, s.txn_producers)
    return result


# What a soak allows a measure to grow by: (factor, slack) over its early median. Resident
# memory is judged without the caches, which fill up to their configured sizes (log cache
# 512 MiB, block cache 256 MiB) over a soak: a 50-minute soak saw resident memory go from 100
# to 250 MB while they filled.
GROWTH = {"memory_outside_caches": (1.5, 64 << 20), "process_open_fds": (1.5, 64),
          "process_threads": (1.5, 16), "weir_runtime_tasks_alive": (1.5, 500)}
CACHES = ("weir_log_cache_bytes", "weir_block_cache_bytes", "weir_object_index_cache_bytes")


def soak_section(r):
    """The soak's resource table, for brokers that ran the whole time, and what grew."""
    by_node = collections.defaultdict(list)
    starts = collections.defaultdict(set)
    for t, node, n_start, got in r.get("samples", []):
        if "process_resident_memory_bytes" in got:
            got = {**got, "memory_outside_caches": got["process_resident_memory_bytes"]
                   - sum(got.get(c, 0) for c in CACHES)}
        by_node[node].append((t, got))
        starts[node].add(n_start)
    lines = ["", "## Resources of the brokers that ran throughout", "",
             "Medians of /metrics samples: early (the first fifth after the first tenth of the "
             "run) and late (the last fifth); the limit is early x factor + slack.", "",
             "| broker | measure | samples | early | late | limit | |",
             "|---:|---|---:|---:|---:|---:|---|"]
    grew = []
    for node in sorted(by_node):
        if len(starts[node]) != 1:
            continue  # restarted: its process did not run the whole time
        xs = sorted(by_node[node], key=lambda x: x[0])
        n = len(xs)
        for m, (factor, slack) in list(GROWTH.items()) + [
                ("process_resident_memory_bytes", (None, None)),
                ("weir_allocator_allocated_bytes", (None, None)),
                ("weir_allocator_resident_bytes", (None, None)),
                ("weir_log_cache_bytes", (None, None)), ("weir_block_cache_bytes", (None, None))]:
            vals = [g[m] for _, g in xs if m in g]
            if len(vals) < 10:
                lines.append(f"| {node} | {m} | {len(vals)} | - | - | - | too few samples |")
                continue
            k = len(vals)
            early = statistics.median(vals[k // 10: max(k // 10 + 1, k * 3 // 10)])
            late = statistics.median(vals[k * 4 // 5:])
            if factor is None:  # shown, bounded by configuration rather than judged
                lines.append(f"| {node} | {m} | {n} | {early:,.0f} | {late:,.0f} | - | shown |")
                continue
            limit = early * factor + slack
            ok = late <= limit
            lines.append(f"| {node} | {m} | {n} | {early:,.0f} | {late:,.0f} | {limit:,.0f} "
                         f"| {'ok' if ok else 'GREW'} |")
            if not ok:
                grew.append(f"broker {node}: {m} grew from {early:,.0f} to {late:,.0f} "
                            f"(limit {limit:,.0f})")
    lines += memory_curve(by_node, starts)
    return lines, grew


def memory_curve(by_node, starts):
    """Memory of each broker that ran throughout at each tenth of the run (medians of the
    samples in it): whether it levels off or keeps growing, and whether the allocator's live
    bytes grow with the resident ones."""
    measures = ("process_resident_memory_bytes", "memory_outside_caches",
                "weir_allocator_allocated_bytes", "weir_allocator_resident_bytes")
    lines = ["", "Memory (MB) by tenth of the run, medians: resident / outside the caches / "
             "allocated (live) / the allocator's resident.", "",
             "| broker | " + " | ".join(str(i + 1) for i in range(10)) + " |",
             "|---:|" + "---:|" * 10]
    for node in sorted(by_node):
        if len(starts[node]) != 1:
            continue
        xs = sorted(by_node[node], key=lambda x: x[0])
        if len(xs) < 20:
            continue
        cells = []
        for i in range(10):
            part = xs[len(xs) * i // 10: len(xs) * (i + 1) // 10]
            vals = []
            for m in measures:
                v = [g[m] for _, g in part if m in g]
                vals.append(f"{statistics.median(v) / 1e6:.0f}" if v else "-")
            cells.append("/".join(vals))
        lines.append(f"| {node} | " + " | ".join(cells) + " |")
    return lines


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


LOG_EVENTS = ("recovered the WAL of a fenced broker", "no live broker can open this fenced",
              "cannot open a fenced broker's WAL", "starting again after being replaced",
              "a peer recovered this broker's WAL", "recovering a fenced broker's WAL failed",
              "finishing a WAL recovery failed", "panicked")


def broker_lines(logs):
    """Counts of the brokers' failover log lines, per broker and event; `logs`: {node id:
    lines}."""
    counts = collections.Counter()
    for node_id, lines in logs.items():
        for line in lines:
            for e in LOG_EVENTS:
                if e in line:
                    counts[(node_id, e)] += 1
    return sorted(counts.items())


def recovery_lines(logs):
    """[(wall time, event, owner node id, ms or None)] of the brokers' WAL recovery lines:
    event "began" (a peer starts recovering the owner's WAL) or "done"; `logs`: {node id:
    lines}."""
    out = []
    for lines in logs.values():
        for line in lines:
            for needle, event in (("recovering the WAL of a fenced broker", "began"),
                                  ("recovered the WAL of a fenced broker", "done")):
                if needle not in line:
                    continue
                fields = dict(re.findall(r"(\w+)=(\S+)", line.split(needle, 1)[1]))
                try:
                    stamp = datetime.datetime.fromisoformat(
                        line.split(None, 1)[0].replace("Z", "+00:00")).timestamp()
                    owner = int(fields["owner"])
                except (ValueError, KeyError, IndexError):
                    continue
                ms_ = fields.get("ms")
                out.append((stamp, event, owner, int(ms_) if ms_ and ms_.isdigit() else None))
    out.sort()
    return out


def recovery_of(f, recoveries):
    """(ms from the kill until a peer began recovering the victim's WAL, the recovery's own ms)
    from the brokers' log lines, or Nones."""
    began = next((t for t, e, o, _ in recoveries if e == "began" and o == f.broker
                  and t >= f.wall0), None)
    done = next((m for t, e, o, m in recoveries if e == "done" and o == f.broker
                 and t >= f.wall0), None)
    return (None if began is None else (began - f.wall0) * 1000), done


def analyse(r):
    s = r["settings"]
    faults = [f for f in r["faults"]]
    acks = r["acks"]
    lost, dups, reordered, at, gaps, malformed = check(acks, r["log"], r["ends"])
    by_part = collections.defaultdict(list)
    for t, p, off, *_ in acks:
        if off is not None:
            by_part[p].append((t, off))
    times_by_part = {p: [t for t, _ in v] + [r["t_flushed"]] for p, v in by_part.items()}
    windows = sorted((f.t0, f.end or r["t_load_end"], f) for f in faults if not f.skipped)
    starts = [w[0] for w in windows]

    def kind_at(t):
        if t is None:
            return "-"
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and windows[i][0] <= t < windows[i][1]:
            return windows[i][2].kind
        return "none"

    rows = collections.OrderedDict((k, {"faults": 0, "skipped": 0, "acked": 0, "lost": 0,
                                        "dup": 0, "reordered": 0, "unavail": None,
                                        "txn": collections.Counter(), "txn_bad": 0})
                                   for k in list(dict.fromkeys(f.kind for f in faults))
                                   + ["none", "-"])
    for f in faults:
        row = rows[f.kind]
        if f.skipped:
            row["skipped"] += 1
            continue
        row["faults"] += 1
        end = f.end or r["t_load_end"]
        parts = f.affected if f.affected is not None else range(s.partitions)
        worst = None
        for p in parts:
            g = longest_gap(times_by_part.get(p, [r["t_flushed"]]), f.t0, end)
            if g is not None and (worst is None or g > worst):
                worst = g
        f.unavailable_ms = worst
        if worst is not None and (row["unavail"] is None or worst > row["unavail"]):
            row["unavail"] = worst
        if f.kind in ("kill",):
            f.failover = failover_times(f, by_part, at)
    for t, *_ in acks:
        rows[kind_at(t)]["acked"] += 1
    for name, items in (("lost", lost), ("dup", dups), ("reordered", reordered)):
        for t, _ in items:
            rows[kind_at(t)][name] += 1
    txn_bad, resolved = {}, collections.Counter()
    if "txn_log" in r:
        txn_bad, resolved = check_txn(r["txns"], r["txn_log"]["read_committed"],
                                      r["txn_log"]["read_uncommitted"])
        for t in r["txns"].values():
            rows[kind_at(t.get("t_end"))]["txn"][t["outcome"]] += 1
        for items in txn_bad.values():
            for t, _ in items:
                rows[kind_at(t)]["txn_bad"] += 1
    return {"lost": lost, "dups": dups, "reordered": reordered, "gaps": gaps,
            "malformed": malformed, "rows": rows, "txn_bad": txn_bad, "resolved": resolved}


TXN_CHECKS = (("lost", "lost committed"), ("aborted_visible", "aborted visible"),
              ("partial", "partial (unknown outcome, not atomic)"), ("dup", "duplicated"),
              ("unexpected", "unexpected"),
              ("aborted_absent", "aborted absent (acknowledged, not in the log)"))


def txn_violations(a):
    return sum(len(v) for v in a["txn_bad"].values())


def kill_table(faults, recoveries):
    lines = ["| kill | broker | partitions | WAL recovery began ms (log) | WAL recovery took ms "
             "(log) | led elsewhere after ms (max) | failover ms: min | median | max (all its "
             "partitions acknowledged again) | broker restart s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    per_kill, per_part = [], []
    for f in faults:
        if f.kind != "kill" or f.skipped:
            continue
        fo = getattr(f, "failover", {}) or {}
        vals = list(fo.values())
        missing = len(f.affected or []) - len(vals)
        worst = max(vals) if vals and not missing else None
        if worst is not None:
            per_kill.append((worst, f.controller))
        per_part += vals
        moved = max(f.moved_ms.values()) if f.moved_ms and len(f.moved_ms) == len(
            f.affected or []) else None
        began, took = recovery_of(f, recoveries)
        lines.append(f"| {f.n} | {f.broker}{' (controller)' if f.controller else ''} "
                     f"| {len(f.affected or [])} | {ms(began)} | {ms(took)} "
                     f"| {ms(moved)} "
                     f"| {ms(min(vals) if vals else None)} "
                     f"| {ms(statistics.median(vals) if vals else None)} "
                     f"| {ms(worst)}{f' ({missing} never acknowledged)' if missing else ''} "
                     f"| {f.params.get('restart_s', '-')} |")
    return lines, per_kill, per_part


def summary(r, a):
    txn = "txn_log" in r
    out = []
    out.append("| fault | injected | acknowledged in its windows | lost | duplicated | reordered "
               "| longest produce unavailability ms |"
               + (" transactions ended in its windows: committed / aborted / unknown "
                  "| transactional violations |" if txn else ""))
    out.append("|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if txn else ""))
    for k, row in a["rows"].items():
        if k == "-" and not (row["lost"] or row["dup"] or row["reordered"] or row["txn"]
                             or row["txn_bad"]):
            continue
        label = {"none": "(no fault: warm-up, settling, drain)",
                 "-": "(records never acknowledged; transactions never ended)"}.get(k, k)
        inj = "-" if k in ("none", "-") else str(row["faults"]) + (
            f" (+{row['skipped']} skipped)" if row["skipped"] else "")
        c = row["txn"]
        out.append(f"| {label} | {inj} | {row['acked']:,} | {row['lost']} | {row['dup']} "
                   f"| {row['reordered']} | {ms(row['unavail'])} |"
                   + (f" {c['committed']} / {c['aborted']} / {c['unknown']} | {row['txn_bad']} |"
                      if txn else ""))
    return out


def report(r, a, stamp):
    s = r["settings"]
    faults = r["faults"]
    acks = r["acks"]
    lines = []
    title = "Failover after kill -9" if s.mode == "bench" else f"Chaos suite ({s.mode})"
    lines += [f"# {title}: {stamp}", ""]
    kl, per_kill, per_part = kill_table(faults, r.get("recoveries", []))
    if s.mode == "bench" or per_kill:
        lines += ["Failover time: from `kill -9` of a broker to the first acknowledgement on each "
                  "partition it led, by the new leader (a record at a higher leader epoch). Per "
                  "kill, the longest over its partitions (when every partition it led takes "
                  "writes again). From the brokers' logs: when a peer began recovering the "
                  "killed broker's WAL (after the session timeout, the drift margin and the "
                  "controller's fencing) and how long the recovery took; led elsewhere: when "
                  "GET /v1/partitions first named other leaders at a higher epoch (polled "
                  "every 100 ms).", ""]
        lines += kl + [""]

        def row(label, xs):
            return (f"| {label} | {len(xs)} | {ms(pct(xs, 0))} "
                    f"| {ms(statistics.median(xs) if xs else None)} | {ms(pct(xs, 1))} |")

        kills = [w for w, _ in per_kill]
        lines += ["| failover ms | count | min | median | max |", "|---|---:|---:|---:|---:|",
                  row("Weir, per kill (all its partitions back)", kills)]
        ctl = [w for w, c in per_kill if c]
        if ctl and len(ctl) < len(kills):
            lines += [row("... of those, the controller killed", ctl),
                      row("... of those, another broker killed", [w for w, c in per_kill
                                                                 if not c])]
        lines += [f"| Weir, per partition | {len(per_part)} | {ms(pct(per_part, 0))} "
                  f"| {ms(statistics.median(per_part) if per_part else None)} "
                  f"| {ms(pct(per_part, 1))} |",
                  "| AutoMQ (session timeout 9 s + one-minute wait before failover starts) "
                  "| - | > 69,000 | > 69,000 | > 69,000 |", "",
                  AUTOMQ + " Goal: under 5,000 ms at the median.", ""]
    lines += summary(r, a) + [""]
    total_acked = len(acks)
    prod = [p for p in r["producers"] if p]
    cons = [c for c in r["consumers"] if c]
    lines += [f"- acknowledged {total_acked:,} records of {sum(p['sent'] for p in prod):,} sent "
              f"({sum(p['failed'] for p in prod)} delivery failures, "
              f"{sum(p['unflushed'] for p in prod)} without an outcome at the end); read back "
              f"{sum(len(v) for v in r['log'].values()):,} records "
              f"(end offsets {sum(r['ends'].values()):,})",
              f"- lost {len(a['lost'])}, duplicated {len(a['dups'])}, reordered "
              f"{len(a['reordered'])}; offset gaps in the log {a['gaps']}; malformed records "
              f"{len(a['malformed'])}",
              f"- producer fatal errors: {sum(len(p['fatal']) for p in prod)}; producer "
              f"instances: {sum(p['incarnations'] for p in prod)}",
              f"- consumer group: read {sum(c['read'] for c in cons):,} records; longest gap "
              f"between records at one member {ms(max((c['longest_gap_ms'] for c in cons), default=None))} ms; "
              f"offset commits ok {sum(c['commits']['ok'] for c in cons)}, failed "
              f"{sum(c['commits']['failed'] for c in cons)}; errors "
              f"{sum(c['error_count'] for c in cons)}"]
    lines += txn_lines(r, a) + [""]
    for i, c in enumerate(r["consumers"]):
        if c is None:
            lines.append(f"- WARNING: consumer {i} did not report (it died?)")
        elif c["read"] == 0:
            lines.append(f"- WARNING: consumer group member {i} read nothing (see "
                         "clients/consumer-*.log and the brokers' group lines)")
        elif c["longest_gap_ms"] > 30000:
            lines.append(f"- WARNING: consumer group member {i} read {c['read']:,} records and went "
                         f"{c['longest_gap_ms'] / 1000:.0f} s without one while the load ran (a "
                         "stall; see clients/consumer-*.log and the brokers' group lines)")
    if lines[-1] != "":
        lines.append("")
    lines += ["## Faults", "", "| # | fault | +s | lasted s | window s | longest unavailability ms "
              "| notes |", "|---:|---|---:|---:|---:|---:|---|"]
    for f in faults:
        if f.skipped:
            lines.append(f"| {f.n} | {f.kind} | - | - | - | - | skipped: {'; '.join(f.notes)} |")
            continue
        notes = list(f.notes)
        if f.affected and f.kind in ("kill", "pause", "walpath"):
            if len(f.moved_ms) == len(f.affected):
                notes.append(f"led elsewhere after {ms(max(f.moved_ms.values()))} ms")
            else:
                notes.append(f"{len(f.affected) - len(f.moved_ms)} partitions not led elsewhere")
        if f.kind == "pause":
            notes.append("restarted itself in-process" if f.restarted else "did not restart")
        if f.kind == "kill":
            fo = getattr(f, "failover", {}) or {}
            if fo:
                notes.append(f"failover {ms(max(fo.values()))} ms")
        lines.append(f"| {f.n} | {f.describe()[len(str(f.n)) + 2:]} | {f.t0 - r['t_start']:.1f} "
                     f"| {f.t1 - f.t0:.1f} | {(f.end or r['t_load_end']) - f.t0:.1f} "
                     f"| {ms(getattr(f, 'unavailable_ms', None))} | {'; '.join(notes)} |")
    lines += ["", "## What broke", ""]
    broke = (r["failures"] + [f"panic: {p}" for p in r["panics"]]
             + [f"producer {i} fatal error: {e}" for i, p in enumerate(r["producers"]) if p
                for _, _, e in p["fatal"]]
             + [f"producer {i} did not report (it died?)" for i, p in enumerate(r["producers"])
                if p is None]
             + [f"transactional producer {i} did not report (it died?)"
                for i, p in enumerate(r.get("txn_producers", [])) if p is None])
    lines += [f"- {x}" for x in broke] or ["nothing"]
    for name, items in (("Lost", a["lost"]), ("Duplicated", a["dups"]),
                        ("Reordered", a["reordered"])):
        if items:
            lines += ["", f"{name} (first 20):", "", "```"]
            lines += [d for _, d in items[:20]] + ["```"]
    for key, name in TXN_CHECKS:
        items = a["txn_bad"].get(key)
        if items:
            lines += ["", f"{TXN_TOPIC}, {name} (first 20):", "", "```"]
            lines += [d for _, d in items[:20]] + ["```"]
    if r["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    lines += ["", "## Broker log lines about failover", "", "| broker | line | count |",
              "|---:|---|---:|"]
    lines += [f"| {b} | {e} | {n} |" for (b, e), n in r["logs"]] or ["| - | (none) | 0 |"]
    # Numbers folded (ports, timings, counts), so that the same error on different brokers
    # counts once.
    errs = collections.Counter()
    for who, reports in (("producer", prod), ("consumer", cons),
                         ("transactional producer", [p for p in r.get("txn_producers", [])
                                                     if p])):
        for rep in reports:
            for e, n in rep["errors"]:
                errs[f"{who}: " + re.sub(r"\d+", "N", e)] += n
    if errs:
        lines += ["", "Client errors (most frequent):", "", "```"]
        lines += [f"{n:6d} x {e[:200]}" for e, n in errs.most_common(15)] + ["```"]
    lines += ["", "## Settings", "",
              f"- three brokers (`weir serve`, {os.environ.get('WEIR_BIN')}) on one PostgreSQL 15 "
              "(fsync=off) and one s3s-fs, all on this machine; "
              + ", ".join(f"{k}={v}" for k, v in s.broker_env().items()),
              f"- load: {s.producers} confluent-kafka idempotent producers (acks=all, "
              f"linger.ms=5, request.timeout.ms=5000), {s.rate:g} records/s of {s.record_bytes} B "
              f"in all over {s.partitions} partitions; {s.consumers} consumers in one group"
              + (f" and one in a KIP-848 group (group.protocol={s.soak_consumer_protocol})"
                 if s.mode == "soak" else "")
              + (f"; {s.txn_producers} confluent-kafka transactional producers "
                 f"(transaction.timeout.ms=30000, request.timeout.ms=5000), at most "
                 f"{s.txn_rate:g} transactions/s in all of 2 to 6 records over 2 to 4 of "
                 f"{TXN_TOPIC}'s {s.partitions} partitions, {s.txn_abort:g} of them aborted on "
                 "purpose" if s.txn_producers else ""),
              f"- seed {s.seed}; replay: `{s.replay()}`",
              f"- machine: {machine()}", ""]
    return "\n".join(lines), broke


def txn_lines(r, a):
    """The report's lines about the transactions (none without transactional producers)."""
    if "txn_log" not in r:
        return []
    txns = r["txns"].values()
    outcomes = collections.Counter(t["outcome"] for t in txns)
    on_purpose = sum(1 for t in txns if t["outcome"] == "aborted" and t["planned"] == "abort")
    reps = [p for p in r["txn_producers"] if p]
    committed_values = sum(len(t["values"]) for t in txns if t["outcome"] == "committed")
    aborted_acked = [(part, v, off) for t in txns if t["outcome"] == "aborted"
                     for part, v, off in t["values"] if off is not None]
    rc = r["txn_log"]["read_committed"]
    ru = r["txn_log"]["read_uncommitted"]
    bad = a["txn_bad"]
    return [
        f"- transactions ({TXN_TOPIC}): {len(txns):,}, committed {outcomes['committed']:,}, "
        f"aborted {outcomes['aborted']:,} ({on_purpose:,} on purpose, "
        f"{outcomes['aborted'] - on_purpose} after an abortable error), unknown "
        f"{outcomes['unknown']} (as read back: {a['resolved']['committed']} committed, "
        f"{a['resolved']['aborted']} aborted, {len(bad['partial'])} partial); records of "
        f"committed transactions {committed_values:,}; read_committed read "
        f"{sum(len(v) for v in rc.values()):,} records, read_uncommitted "
        f"{sum(len(v) for v in ru.values()):,} (end offsets "
        f"{sum(r['txn_ends'].values()):,}, markers included)",
        "- transactional checks: " + ", ".join(f"{name} {len(bad[k])}"
                                                for k, name in TXN_CHECKS)
        + f"; acknowledged records of aborted transactions in the log (read_uncommitted): "
          f"{len(aborted_acked) - len(bad['aborted_absent']):,} of {len(aborted_acked):,}",
        f"- transactional producers: fatal errors (or outcomes left unknown after retries) "
        f"{sum(len(p['fatal']) for p in reps)}, each followed by a new instance (instances "
        f"{sum(p['incarnations'] for p in reps)}; the transactions then of unknown outcome are "
        f"checked above); errors {sum(p['error_count'] for p in reps)}"]


def machine():
    try:
        from move import machine as m  # bench/move.py's description of the machine
        return m()
    except Exception:  # noqa: BLE001
        return f"{os.cpu_count()} CPUs"


def main(argv=None):
    if not os.environ.get("WEIR_BIN"):
        print("chaos.py: set WEIR_BIN to the weir binary", file=sys.stderr)
        return 2
    s = Settings(sys.argv[1:] if argv is None else argv)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    stamp = datetime.datetime.now().strftime("%Y-%m-%d-%H%M")
    try:
        r = run(s)
    except Exception as e:  # noqa: BLE001 - the run could not be made: say so and how to replay
        print(f"\nchaos: the run failed: {e!r}\nseed {s.seed}; replay: {s.replay()}\n"
              f"data and logs kept in {s.dir}", flush=True)
        return 2
    if "log" not in r:
        print(f"chaos: the run ended early; seed {s.seed}; replay: {s.replay()}")
        return 2
    a = analyse(r)
    text, broke = report(r, a, stamp)
    if s.mode == "soak":
        extra, grew = soak_section(r)
        text += "\n".join(extra) + "\n"
        broke = list(broke) + grew
    print("\n" + text, flush=True)
    if s.mode in ("long", "bench", "soak"):
        os.makedirs(s.results, exist_ok=True)
        name = {"bench": "failover", "soak": "soak"}.get(s.mode, "chaos")
        if s.wal_kind != "file":
            name += f"-{s.wal_kind}-wal"
        path = os.path.join(s.results, f"{name}-{stamp}.md")
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}")
    bad = (a["lost"] or a["dups"] or a["reordered"] or a["malformed"] or broke
           or txn_violations(a))
    if bad:
        print(f"\nCHAOS FAILED: lost {len(a['lost'])}, duplicated {len(a['dups'])}, reordered "
              f"{len(a['reordered'])}, malformed {len(a['malformed'])}, broken {len(broke)}"
              + (f", transactional violations {txn_violations(a)} ("
                 + ", ".join(f"{name} {len(a['txn_bad'][k])}" for k, name in TXN_CHECKS) + ")"
                 if a["txn_bad"] else "") + "\n"
              f"seed {s.seed}; replay: {s.replay()}\ndata and logs kept in {s.dir}", flush=True)
        return 1
    if s.keep:
        print(f"kept data and logs in {s.dir}")
    else:
        shutil.rmtree(s.dir, ignore_errors=True)
    print(f"chaos passed (seed {s.seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
