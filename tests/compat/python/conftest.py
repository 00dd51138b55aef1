"""Broker fixtures for the Python client-compatibility suite.

The suite runs against Weir (default) or, to validate the tests themselves,
against Apache Kafka:

    WEIR_TEST_BROKER=weir   (default) start `$WEIR_BIN serve ...`
    WEIR_TEST_BROKER=kafka  start Kafka through tools/kafka/kafka.sh

Every broker is started on free loopback ports with a fresh temporary data
directory, and every broker that a test starts is stopped when its fixture is
finalized (and, as a last resort, at interpreter exit), even on failure.

The shared broker of the client tests is a single broker by default, or a
three-broker Weir cluster (one private PostgreSQL, one s3s-fs, three
`weir serve`, bootstrap = all three) with

    WEIR_COMPAT_TARGET=cluster

Tests that need one process of their own (they stop, kill or restart "the
broker", or start it with special settings) carry the `single_broker` marker
and are skipped in cluster mode. The `cluster` fixture gives a test a fresh
cluster of its own in either mode. Cluster mode needs s3s-fs (`$S3S_FS`,
~/.cargo/bin/s3s-fs or PATH) and the PostgreSQL 15 binaries
(`$WEIR_PG_BIN`, default /usr/lib/postgresql/15/bin).

Set WEIR_TEST_KEEP=1 to keep the data directories and broker logs.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "harness"))

# The harness itself (brokers, PostgreSQL, s3s-fs, clusters) is shared with the chaos suite and
# the benchmarks: tests/harness/weir_harness. Its names are re-exported for the tests.
from weir_harness import *  # noqa: E402,F401,F403
from weir_harness import _stop_leftovers  # noqa: E402

def pytest_configure(config):
    # If the run itself is terminated (CI time limit, kill), brokers must not
    # outlive it: SIGKILL them, then die of the signal as usual.
    def on_term(signum, _frame):
        _stop_leftovers()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_term)


class BrokerFactory:
    def __init__(self, base):
        self.base = base
        self.brokers = []

    def new(self, name, start=True, env=None):
        root = tempfile.mkdtemp(prefix=f"{name}-", dir=self.base)
        b = Broker(name, root, env)
        self.brokers.append(b)
        if start:
            b.start()
        return b

    def cluster(self, name, size=CLUSTER_SIZE, start=True, env=None, zones=None):
        """A cluster of `size` Weir brokers on a PostgreSQL and an s3s-fs of its own (spread
        over `zones`, round robin by node id, if given)."""
        root = tempfile.mkdtemp(prefix=f"{name}-", dir=self.base)
        c = Cluster(name, root, size, env, zones)
        self.brokers.append(c)
        if start:
            c.launch()
        return c

    def target(self, name):
        """What WEIR_COMPAT_TARGET asks for: a single broker, or a cluster."""
        return self.cluster(name) if CLUSTER_MODE else self.new(name)

    def close(self, broker, failed=False):
        broker.cleanup()
        if failed:
            print(f"[broker {broker.name}] log tail ({broker.log_path}):\n{broker.log_tail()}")


# Runs as a separate process: if the test process dies without running its
# finalizers (a segfault in a client library, SIGKILL), SIGKILL every broker
# and s3s-fs started under BASE (pid files: BASE/**/weir.pid,
# BASE/*/data/kafka.pid, BASE/**/s3.pid, BASE/**/iceberg-rest.pid) and stop every PostgreSQL
# (SIGQUIT to the pid in BASE/**/postmaster.pid); the process's command line
# must name BASE. Exits when BASE/.done appears or BASE is gone.
_WATCHDOG = r"""
import glob, os, signal, sys, time
parent, base = int(sys.argv[1]), sys.argv[2]
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
while alive(parent):
    if not os.path.isdir(base) or os.path.exists(os.path.join(base, ".done")):
        sys.exit(0)
    time.sleep(1)
found = [(f, signal.SIGKILL) for f in
         glob.glob(os.path.join(base, "**", "weir.pid"), recursive=True)
         + glob.glob(os.path.join(base, "*", "data", "kafka.pid"))
         + glob.glob(os.path.join(base, "**", "s3.pid"), recursive=True)
         + glob.glob(os.path.join(base, "**", "iceberg-rest.pid"), recursive=True)]
found += [(f, signal.SIGQUIT) for f in glob.glob(os.path.join(base, "**", "postmaster.pid"), recursive=True)]
for f, sig in found:
    try:
        pid = int(open(f).readline().strip())
        if base.encode() in open("/proc/%d/cmdline" % pid, "rb").read():
            os.kill(pid, sig)
            print("compat watchdog: stopped orphaned pid %d (%s)" % (pid, f), file=sys.stderr)
    except (OSError, ValueError):
        pass
if sys.argv[3] != "1":
    time.sleep(1)
    import shutil
    shutil.rmtree(base, ignore_errors=True)
"""


@pytest.fixture(scope="session")
def broker_factory():
    base = tempfile.mkdtemp(prefix="weir-compat-py-")
    if os.geteuid() == 0:
        os.chmod(base, 0o711)  # a cluster's PostgreSQL runs as `postgres` under it
    subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), base,
                      os.environ.get("WEIR_TEST_KEEP", "0")],
                     stdin=subprocess.DEVNULL, start_new_session=True)
    factory = BrokerFactory(base)
    try:
        yield factory
    finally:
        for b in factory.brokers:
            try:
                b.cleanup()
            except Exception as e:  # noqa: BLE001
                print(f"cleanup of {b} failed: {e}")
        if os.environ.get("WEIR_TEST_KEEP") == "1":
            open(os.path.join(base, ".done"), "w").close()
            print(f"kept broker data and logs in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        # Attach the broker log tail to a failed test's report.
        for name in ("broker", "kill_broker", "bad_broker", "cluster"):
            b = item.funcargs.get(name) if hasattr(item, "funcargs") else None
            if isinstance(b, (Broker, Cluster)):
                rep.sections.append((f"broker log tail ({b.log_path})", b.log_tail(80)))


def _closing(factory, b):
    try:
        yield b
    finally:
        factory.close(b)


@pytest.fixture(scope="session")
def broker(broker_factory):
    """The broker shared by the client tests (each test uses its own topics and
    groups): one broker, or with WEIR_COMPAT_TARGET=cluster a three-broker
    cluster (.bootstrap names all three). test_bad_input.py and test_kill.py
    start brokers of their own."""
    yield from _closing(broker_factory, broker_factory.target("clients"))


@pytest.fixture
def cluster(broker_factory):
    """A fresh three-broker Weir cluster for one test, in either mode."""
    if KIND != "weir":
        pytest.skip("a cluster is of Weir brokers")
    yield from _closing(broker_factory, broker_factory.cluster("cluster"))


def pytest_collection_modifyitems(config, items):
    # In cluster mode, tests that need one broker process of their own are skipped: they
    # stop, kill or restart "the broker", or start it with settings of their own.
    if not CLUSTER_MODE:
        return
    for item in items:
        m = item.get_closest_marker("single_broker")
        if m is not None:
            reason = m.args[0] if m.args else "needs a single broker process"
            item.add_marker(pytest.mark.skip(reason=f"WEIR_COMPAT_TARGET=cluster: {reason}"))


class Clients:
    """Registry of client objects a test opened; all are closed at teardown so
    a failed test leaves no client reconnecting in the background."""

    def __init__(self):
        self.objs = []

    def add(self, obj):
        self.objs.append(obj)
        return obj

    def close_all(self):
        for obj in reversed(self.objs):
            try:
                purge = getattr(obj, "purge", None)
                if purge is not None:  # confluent_kafka.Producer
                    purge()
                    obj.flush(0)
                obj.close()
            except Exception:  # noqa: BLE001 - already closed, broker gone, ...
                pass
        self.objs.clear()


@pytest.fixture
def clients():
    reg = Clients()
    try:
        yield reg
    finally:
        reg.close_all()
