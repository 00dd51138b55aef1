"""The test cluster of every suite: Weir brokers (or Apache Kafka, to check the tests
themselves) on free loopback ports with fresh data directories, a private PostgreSQL, an s3s-fs,
and clusters of N brokers on them.

Used by the Python compatibility suite (through its conftest.py), the chaos suite and the
benchmarks. Every broker and cluster it starts is stopped at interpreter exit, even on failure.

Environment: WEIR_BIN (the weir binary), WEIR_SERVE_BIN (the brokers' binary when it is another
build's, to compare builds: benchmarks; WEIR_BIN by default), WEIR_TEST_BROKER (weir or kafka),
S3S_FS, WEIR_PG_BIN, WEIR_TEST_KEEP=1 (keep data directories and logs); see
tests/compat/python/conftest.py. A broker's `binary` attribute overrides both (a rolling upgrade
starts each broker on the old binary, then on the new one).
"""

import atexit
import contextlib
import glob
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request



@contextlib.contextmanager
def work_dir(prefix):
    """A fresh directory under the system's temporary one, removed afterwards, failure or not
    (WEIR_TEST_KEEP=1 keeps it and says where). Benchmarks write gigabytes into theirs: left
    behind, they filled the disk that a later build needed."""
    root = tempfile.mkdtemp(prefix=prefix)
    try:
        yield root
    finally:
        if os.environ.get("WEIR_TEST_KEEP") == "1":
            print(f"kept {root}", flush=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


class HarnessError(RuntimeError):
    """A broker or cluster could not be started as asked (a missing binary, a bad setting)."""


HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
KIND = os.environ.get("WEIR_TEST_BROKER", "weir").strip().lower() or "weir"
KAFKA_SH = os.environ.get("WEIR_KAFKA_SH", os.path.join(REPO, "tools", "kafka", "kafka.sh"))
READY_TIMEOUT = float(os.environ.get("WEIR_TEST_READY_TIMEOUT", "90"))

# Kafka only: after a SIGKILL, the restarted node cannot register again until
# the controller expires the old incarnation's session (broker.session.timeout.ms,
# 9 s by default), which would make every restart of the kill test take 10+ s.
KAFKA_PROPS = ["broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500"]

if KIND not in ("weir", "kafka"):
    raise RuntimeError(f"WEIR_TEST_BROKER must be 'weir' or 'kafka', not {KIND!r}")

TARGET = os.environ.get("WEIR_COMPAT_TARGET", "broker").strip().lower() or "broker"
if TARGET not in ("broker", "cluster"):
    raise RuntimeError(f"WEIR_COMPAT_TARGET must be 'broker' or 'cluster', not {TARGET!r}")
CLUSTER_MODE = TARGET == "cluster"
if CLUSTER_MODE and KIND != "weir":
    raise RuntimeError("WEIR_COMPAT_TARGET=cluster starts Weir brokers: it needs WEIR_TEST_BROKER=weir")
CLUSTER_SIZE = 3
PG_BIN = os.environ.get("WEIR_PG_BIN", "/usr/lib/postgresql/15/bin")
S3_BUCKET, S3_ACCESS_KEY, S3_SECRET_KEY = "weir-test", "weir-access", "weir-secret"


# The port rule of every harness (Python, Go, Java, Rust call this one, the others through
# `python3 tests/harness/weir_harness ports N`). Ports are picked below Linux's ephemeral range
# (32768-60999 by default): no outgoing connection can take one between the pick and the
# server's bind, which bind(0) cannot promise. None is handed out twice in one run: bind(0)
# may return a port it returned a moment ago, and two brokers of one cluster were once given
# the same one. A run is this process, or every process given the same file in
# $WEIR_HARNESS_PORTS_FILE (a harness in another language and the cluster program it starts).
_PICK_LOW, _PICK_HIGH = 20000, 32000
_picked = set()
_REMEMBERED = 4000


def _pick(n, picked):
    ports = []
    for _ in range(10000):
        if len(ports) == n:
            return ports
        port = random.randrange(_PICK_LOW, _PICK_HIGH)
        if port in picked or port in ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    raise RuntimeError(f"no free port in {_PICK_LOW}-{_PICK_HIGH}")


def free_ports(n):
    """n free TCP ports on 127.0.0.1, none picked before in this run."""
    path = os.environ.get("WEIR_HARNESS_PORTS_FILE")
    if not path:
        ports = _pick(n, _picked)
        _picked.update(ports)
        return ports
    import fcntl
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        f.seek(0)
        before = [int(w) for w in f.read().split()]
        ports = _pick(n, set(before) | _picked)
        if len(before) > _REMEMBERED:
            # A port picked thousands of picks ago was bound long since, or given up: the file
            # may outlive a run (make test keeps it in target/), so it stays bounded.
            f.truncate(0)
            ports = before[-_REMEMBERED // 2:] + ports
            ports, keep = ports[-n:], ports
            f.write("".join(f"{p}\n" for p in keep))
        else:
            f.write("".join(f"{p}\n" for p in ports))
    _picked.update(ports)
    return ports


def free_port():
    """A free TCP port on 127.0.0.1, not picked before in this run."""
    return free_ports(1)[0]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _tail(path, n=60):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return "(no log)"
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[-n:])


def _wait_port(host, port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)
    return False


_LIVE = set()


# What every test broker gets unless a test says otherwise: a small WAL, not the 2 GiB default;
# consumer and streams groups heartbeat every second (they learn of new assignments at their next
# heartbeat), and a streams group member that is gone is removed after 10 s (Kafka's minimum is
# 45 s); the cleaner of compacted topics looks for work every half second (Kafka's
# log.cleaner.backoff.ms is 15 s; tools/kafka/kafka.sh sets 1 s), so that compaction tests see it
# within seconds.
TEST_BROKER_ENV = {"WEIR_WAL_CAPACITY": str(64 << 20),
                   "WEIR_BROKER_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS": "1000",
                   "WEIR_BROKER_GROUP_STREAMS_HEARTBEAT_INTERVAL_MS": "1000",
                   "WEIR_BROKER_GROUP_STREAMS_SESSION_TIMEOUT_MS": "10000",
                   "WEIR_BROKER_GROUP_STREAMS_INITIAL_REBALANCE_DELAY_MS": "1000",
                   "WEIR_BROKER_LOG_CLEANER_BACKOFF_MS": "500"}

# Per binary: the harness defaults it has no field for (read once; the bytes are not kept).
_UNKNOWN_DEFAULTS = {}


def _env_for(binary, env):
    """`env` without the harness's own defaults (TEST_BROKER_ENV) that `binary` does not know.

    A broker refuses a setting it has no field for, and the upgrade tests start older releases
    (tools/build-release.sh) with this harness: a default added after them (the streams group
    settings, say) would stop them at start. A setting a test asked for is always passed, so that
    a mistaken key still fails loudly. A field is known when its name is in the binary's bytes
    (serde keeps field names as strings); WEIR_BROKER_GROUP_X names the field `group_x`.
    """
    if binary not in _UNKNOWN_DEFAULTS:
        with open(binary, "rb") as f:
            data = f.read()
        _UNKNOWN_DEFAULTS[binary] = {
            key for key in TEST_BROKER_ENV
            if key.split("_", 2)[2].lower().encode() not in data}
    unknown = _UNKNOWN_DEFAULTS[binary]
    return {k: v for k, v in env.items()
            if not (k in unknown and TEST_BROKER_ENV.get(k) == v)}


class Broker:
    """One single-node broker (Weir or Kafka) with a fixed data dir and ports.

    start() / stop() (SIGTERM, clean) / kill() (SIGKILL) / restart();
    pause() / resume() (SIGSTOP / SIGCONT); admin(method, path, body) (Weir's
    admin API). The ports and the data directory stay the same across
    restarts, so clients can reconnect to the same bootstrap address.
    """

    def __init__(self, name, root, env=None, args=None, node_id=None):
        self.kind = KIND
        self.name = name
        self.root = root
        # Weir only: flags added to `weir serve` (a cluster's brokers: node id, metadata and
        # object-store URLs, advertised address).
        self.args = list(args or [])
        self.node_id = node_id
        # Weir only: the binary of the next start(); None: $WEIR_SERVE_BIN, else $WEIR_BIN.
        self.binary = None
        # Weir only: extra environment (WEIR_<SECTION>_<KEY> settings) over TEST_BROKER_ENV.
        self.env = {**TEST_BROKER_ENV, **(env or {})}
        self.data_dir = os.path.join(root, "data")
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = os.path.join(root, "broker.log")
        self.port = free_port()
        self.aux_port = free_port()  # Weir: admin HTTP port; Kafka: controller port
        # Weir only: the schema registry's HTTP port (schema_registry.listen); a cluster with
        # fixed ports sets it too.
        self.registry_port = free_port()
        self.proc = None  # Weir only
        self.kafka_pid = None  # Kafka only
        # Kafka only: broker settings after the harness's (a listener of its own, say).
        self.kafka_props = []
        self.starts = 0
        self.paused = False  # SIGSTOPped by pause(), until resume()

    @property
    def host(self):
        return "127.0.0.1"

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    @property
    def registry_url(self):
        """Weir's schema registry on this broker (None for Apache Kafka, which has none)."""
        if self.kind != "weir":
            return None
        return f"http://127.0.0.1:{self.registry_port}"

    @property
    def addresses(self):
        """The (host, port) every broker of the target advertises: this one."""
        return {(self.host, self.port)}

    @property
    def admin_port(self):
        """Weir: the admin HTTP port (/metrics, /readyz, the /v1 API)."""
        return self.aux_port

    @property
    def pid(self):
        """The broker's process id, or None when it does not run."""
        if self.kind == "weir":
            return self.proc.pid if self.proc is not None and self.proc.poll() is None else None
        return self.kafka_pid

    def admin(self, method, path, body=None, timeout=5):
        """Weir: one request to the admin API. Returns (HTTP status, JSON body or None); an
        error status is returned, not raised; OSError when the broker does not answer."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.aux_port}{path}", data=data,
                                     method=method, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        except http.client.HTTPException as e:  # a broker going away mid-response
            raise OSError(f"admin {method} {path}: {e!r}") from e
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    def pause(self):
        """Freezes the process (SIGSTOP), as a long GC pause, a VM freeze or a cut network
        would: it holds its sockets and state but does nothing until resume()."""
        pid = self.pid
        if pid is None:
            raise RuntimeError(f"[broker {self.name}] is not running: cannot pause it")
        os.kill(pid, signal.SIGSTOP)
        self.paused = True

    def resume(self):
        """SIGCONT after pause()."""
        pid = self.pid
        self.paused = False
        if pid is not None:
            os.kill(pid, signal.SIGCONT)

    def __repr__(self):
        return f"Broker({self.kind}, {self.bootstrap}, {self.data_dir})"

    # ---------------------------------------------------------------- start
    def start(self):
        self.starts += 1
        t0 = time.monotonic()
        if self.kind == "weir":
            self._start_weir()
        else:
            self._start_kafka()
        _LIVE.add(self)
        print(f"[broker {self.name}] started ({self.kind}, start #{self.starts}) "
              f"on {self.bootstrap} in {time.monotonic() - t0:.1f}s")

    def _start_weir(self):
        binary = self.binary or os.environ.get("WEIR_SERVE_BIN") or os.environ.get("WEIR_BIN")
        if not binary:
            raise HarnessError("WEIR_BIN is not set (path to the weir binary); "
                        "set WEIR_TEST_BROKER=kafka to run against Apache Kafka")
        if not os.access(binary, os.X_OK):
            raise HarnessError(f"{binary} (the weir binary) is not an executable file")
        cmd = [binary, "serve",
               "--data-dir", self.data_dir,
               "--listen", self.bootstrap,
               "--admin-listen", f"127.0.0.1:{self.aux_port}", *self.args]
        log = open(self.log_path, "ab")
        log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
        log.flush()
        env = {"WEIR_SCHEMA_REGISTRY_LISTEN": f"127.0.0.1:{self.registry_port}",
               **_env_for(binary, self.env)}
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     env={**os.environ, **env})
        log.close()
        with open(os.path.join(self.root, "weir.pid"), "w") as f:  # for the watchdog
            f.write(str(self.proc.pid))
        url = f"http://127.0.0.1:{self.aux_port}/readyz"
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise RuntimeError(f"weir exited with {code} before it was ready:\n"
                                   + _tail(self.log_path))
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                self._kill_weir()
                raise RuntimeError(f"weir not ready after {READY_TIMEOUT}s:\n"
                                   + _tail(self.log_path))
            time.sleep(0.05)
        # readyz says ready; the Kafka listener must accept connections too.
        if not _wait_port(self.host, self.port, 10):
            raise RuntimeError("weir /readyz is 200 but the Kafka listener does not accept:\n"
                               + _tail(self.log_path))

    def _kafka_cmd(self, *args):
        if not os.path.exists(KAFKA_SH):
            raise HarnessError(f"{KAFKA_SH} does not exist (needed for WEIR_TEST_BROKER=kafka)")
        return ["bash", KAFKA_SH, *args]

    def _start_kafka(self):
        cmd = self._kafka_cmd("start", "--data-dir", self.data_dir,
                              "--port", str(self.port), "--controller-port", str(self.aux_port))
        for prop in KAFKA_PROPS + self.kafka_props:
            cmd += ["--prop", prop]
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            r = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, timeout=READY_TIMEOUT + 60)
        self.kafka_pid = self._find_kafka_pid()
        if r.returncode != 0:
            self._kill_kafka()
            raise RuntimeError(f"kafka.sh start failed ({r.returncode}):\n" + _tail(self.log_path))
        if self.kafka_pid is None:
            raise RuntimeError("kafka.sh start returned but no Kafka process was found for "
                               + self.data_dir)
        if not _wait_port(self.host, self.port, 30):
            raise RuntimeError("Kafka started but does not accept connections:\n"
                               + _tail(self.log_path))

    def _find_kafka_pid(self):
        """The pid of the Kafka JVM that serves self.data_dir: from a pid file
        kafka.sh leaves in the data dir, else the one process whose command
        line names this (unique, temporary) data dir."""
        for name in ("kafka.pid", "pid", "broker.pid", "server.pid", ".pid"):
            p = os.path.join(self.data_dir, name)
            try:
                with open(p) as f:
                    pid = int(f.read().strip())
                if _alive(pid):
                    return pid
            except (OSError, ValueError):
                pass
        needle = self.data_dir.encode()
        found = []
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if needle in cmdline and b"java" in cmdline.split(b"\0")[0]:
                found.append(int(d))
        return found[0] if len(found) == 1 else None

    # ----------------------------------------------------------------- stop
    def stop(self, timeout=60):
        """Clean stop (SIGTERM for Weir, kafka.sh stop for Kafka). Weir: its exit status (None if
        it did not run)."""
        if self.paused:
            self.resume()
        status = None
        if self.kind == "weir":
            if self.proc is None:
                return None
            self.proc.send_signal(signal.SIGTERM)
            try:
                status = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._kill_weir()
                raise RuntimeError(f"weir did not stop within {timeout}s of SIGTERM")
            self.proc = None
        else:
            if self.kafka_pid is None:
                return
            try:
                subprocess.run(self._kafka_cmd("stop", "--data-dir", self.data_dir),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               stdin=subprocess.DEVNULL, timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
            if _wait_dead(self.kafka_pid, 30):
                self.kafka_pid = None
            else:
                self._kill_kafka()
        _LIVE.discard(self)
        return status

    def kill(self):
        """Crash the broker: SIGKILL, and wait until the process is gone."""
        self.paused = False
        if self.kind == "weir":
            self._kill_weir()
        else:
            self._kill_kafka()
        _LIVE.discard(self)

    def _kill_weir(self):
        if self.proc is None:
            return
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None

    def _kill_kafka(self):
        pid = self.kafka_pid
        if pid is None:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_dead(pid, 30)
        self.kafka_pid = None

    def restart(self):
        self.stop()
        self.start()

    def alive(self):
        if self.kind == "weir":
            return self.proc is not None and self.proc.poll() is None
        return self.kafka_pid is not None and _alive(self.kafka_pid)

    def log_tail(self, n=60):
        return _tail(self.log_path, n)

    def log_lines(self):
        """The broker's log, its colour codes removed, as lines ([] if there is none)."""
        try:
            with open(self.log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return []
        return _ANSI.sub("", text).splitlines()

    def cleanup(self):
        """Stop whatever still runs (clean stop first, SIGKILL if that fails)."""
        try:
            if self.alive():
                self.stop(timeout=30)
        except Exception as e:  # noqa: BLE001 - last resort below
            print(f"[broker {self.name}] clean stop failed: {e}; killing")
        finally:
            self.kill()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child counts as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait_dead(pid, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return not _alive(pid)


def _s3s_fs_binary():
    if os.environ.get("S3S_FS"):
        return os.environ["S3S_FS"]
    p = os.path.expanduser("~/.cargo/bin/s3s-fs")
    return p if os.access(p, os.X_OK) else (shutil.which("s3s-fs") or "s3s-fs")


def _run(cmd, what, timeout=120):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed ({r.returncode}): {' '.join(cmd)}\n"
                           + r.stdout.decode("utf-8", "replace"))


class PgServer:
    """A private PostgreSQL (initdb + pg_ctl) in `root`, on a free port, as
    weir_meta::testing::PgServer does it. initdb refuses to run as root, so as
    root the server runs as the `postgres` user (and `root` belongs to it)."""

    def __init__(self, root, options=""):
        self.root = root
        # Further server settings (`-c name=value ...`), e.g. a benchmark's statistics.
        self.options = options
        self.data = os.path.join(root, "data")
        self.log_path = os.path.join(root, "log")
        self.as_postgres = os.geteuid() == 0
        self.port = None

    def _cmd(self, name, *args):
        cmd = [os.path.join(PG_BIN, name), *args]
        return ["runuser", "-u", "postgres", "--", *cmd] if self.as_postgres else cmd

    def start(self):
        os.makedirs(self.root, exist_ok=True)
        if self.as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        if not os.access(os.path.join(PG_BIN, "initdb"), os.X_OK):
            raise RuntimeError(f"no PostgreSQL binaries in {PG_BIN} (set WEIR_PG_BIN)")
        _run(self._cmd("initdb", "-D", self.data, "-A", "trust", "-U", "weir", "--no-sync"),
             "initdb")
        # Another process may take the port between the probe and the server's bind.
        last = None
        for _ in range(5):
            port = free_port()
            opts = (f"-p {port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                    f"{self.options}")
            try:
                _run(self._cmd("pg_ctl", "-D", self.data, "-l", self.log_path, "-o", opts,
                               "-w", "start"), "pg_ctl start")
            except RuntimeError as e:
                last = e
                continue
            self.port = port
            return
        raise last

    def restart(self, down_secs):
        """An outage: a fast shutdown (clients are disconnected), `down_secs` without a server,
        then the server again on the same port. Returns the monotonic times at which the stop
        began and ended and the start began and ended."""
        opts = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                f"{self.options}")
        t0 = time.monotonic()
        _run(self._cmd("pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"), "pg_ctl stop")
        t1 = time.monotonic()
        time.sleep(down_secs)
        t2 = time.monotonic()
        _run(self._cmd("pg_ctl", "-D", self.data, "-l", self.log_path, "-o", opts, "-w", "start"),
             "pg_ctl start")
        return t0, t1, t2, time.monotonic()

    def sql(self, statements, db="weir"):
        """Rows of `statements` (psql's unaligned output, a list of fields each) in `db`."""
        cmd = self._cmd("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "weir", "-d", db,
                        "-AtF", "\t", "-c", statements)
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=60).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def create_database(self, name):
        """Creates database `name` and returns its URL."""
        _run(self._cmd("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "weir", name),
             "createdb")
        return f"postgres://weir@127.0.0.1:{self.port}/{name}"

    def stop(self):
        if self.port is None:
            return
        self.port = None
        try:
            _run(self._cmd("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"),
                 "pg_ctl stop", timeout=60)
        except Exception as e:  # noqa: BLE001 - last resort: the postmaster's pid
            print(f"[postgres {self.root}] {e}; killing the postmaster")
            self.kill()

    def kill(self):
        """SIGQUIT to the postmaster (immediate shutdown: it takes its backends along)."""
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
            os.kill(pid, signal.SIGQUIT)
            _wait_dead(pid, 30)
        except (OSError, ValueError):
            pass
        self.port = None


class S3sFs:
    """A private S3 server (s3s-fs) on a free port, serving `root` with one bucket."""

    def __init__(self, root):
        self.root = root
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(root, "s3s-fs.log")

    def start(self):
        os.makedirs(os.path.join(self.root, S3_BUCKET), exist_ok=True)
        cmd = [_s3s_fs_binary(), "--host", "127.0.0.1", "--port", str(self.port),
               "--access-key", S3_ACCESS_KEY, "--secret-key", S3_SECRET_KEY, self.root]
        with open(self.log_path, "ab") as log:
            try:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            except OSError as e:
                raise RuntimeError(f"cannot start s3s-fs ({e}); install it: cargo install "
                                   "s3s-fs@0.14.1 --features binary --locked, or set S3S_FS")
        with open(os.path.join(self.root, "s3.pid"), "w") as f:  # for the watchdog
            f.write(str(self.proc.pid))
        deadline = time.monotonic() + 20
        while not _wait_port("127.0.0.1", self.port, 0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("s3s-fs did not start:\n" + _tail(self.log_path))

    def env(self):
        """What the brokers' object_store crate reads (AmazonS3Builder::from_env)."""
        return {
            "AWS_ENDPOINT": f"http://127.0.0.1:{self.port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": S3_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": S3_SECRET_KEY,
            "AWS_REGION": "us-east-1",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
        }

    def kill(self):
        if self.proc is None:
            return
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None


ICEBERG_REST_POM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "iceberg-rest",
                                "pom.xml")


class IcebergRest:
    """Apache Iceberg's REST catalog server (RESTCatalogServer, the class behind the
    apache/iceberg-rest-fixture image) on a free port: a JDBC catalog in `root`/catalog.db,
    files under `warehouse` (a file:// URL) through Hadoop's local file system. Its jars come
    from Maven Central (tests/harness/iceberg-rest/pom.xml) into $WEIR_ICEBERG_REST_JARS or
    ~/.cache/weir/iceberg-rest, once. It takes any OAuth2 client credentials
    (/v1/oauth/tokens) and checks no token."""

    def __init__(self, root, warehouse):
        self.root = root
        self.warehouse = warehouse
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(root, "iceberg-rest.log")
        self.jars = os.environ.get("WEIR_ICEBERG_REST_JARS") or os.path.expanduser(
            "~/.cache/weir/iceberg-rest")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _fetch_jars(self):
        if glob.glob(os.path.join(self.jars, "iceberg-open-api-*-test-fixtures.jar")):
            return
        _run(["mvn", "-B", "-q", "-f", ICEBERG_REST_POM, "dependency:copy-dependencies",
              f"-DoutputDirectory={self.jars}", "-DincludeScope=runtime"],
             "fetching the Iceberg REST catalog's jars", timeout=600)

    def start(self):
        self._fetch_jars()
        os.makedirs(self.root, exist_ok=True)
        env = {**os.environ,
               "CATALOG_REST_PORT": str(self.port),
               "CATALOG_WAREHOUSE": self.warehouse,
               # A file, not the default in-memory database (one per pooled connection).
               "CATALOG_URI": f"jdbc:sqlite:{os.path.join(self.root, 'catalog.db')}"}
        # -Dweir.root names the directory in the command line, for the watchdog.
        cmd = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               f"-Dweir.root={self.root}", "-cp", os.path.join(self.jars, "*"),
               "org.apache.iceberg.rest.RESTCatalogServer"]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         env=env)
        with open(os.path.join(self.root, "iceberg-rest.pid"), "w") as f:  # for the watchdog
            f.write(str(self.proc.pid))
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/v1/config", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError, ValueError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("the Iceberg REST catalog did not start:\n"
                                   + _tail(self.log_path))
            time.sleep(0.2)

    def kill(self):
        if self.proc is None:
            return
        try:
            self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None


_LIVE_CLUSTERS = set()


class Cluster:
    """Weir brokers sharing one private PostgreSQL and one s3s-fs, each started
    with the flags a user gives (--node-id, --listen, --advertised,
    --admin-listen, --data-dir, --metadata-url, --object-store-url).

    .bootstrap names every broker; .brokers[i] is a Broker (ports and data
    dir kept across restarts); stop(i) / kill(i) / start(i) act on broker i;
    add_broker() starts one more with the next node id; cleanup() stops
    everything. .host/.port are broker 0's, for tests that talk to "a broker"
    over a raw socket.
    """

    def __init__(self, name, root, size=CLUSTER_SIZE, env=None, zones=None, base_port=None,
                 admin_base_port=None, binary=None):
        if KIND != "weir":
            raise RuntimeError("a cluster is of Weir brokers: WEIR_COMPAT_TARGET=cluster "
                               "needs WEIR_TEST_BROKER=weir")
        self.name = name
        self.root = root
        self.size = size
        # Tests' settings, then what makes the brokers a cluster.
        self.env = {"WEIR_WAL_FORMAT": "false", **(env or {})}
        if os.geteuid() == 0:
            os.chmod(root, 0o711)  # PostgreSQL runs as `postgres` under it
        self.pg = PgServer(os.path.join(root, "pg"))
        self.s3 = S3sFs(os.path.join(root, "s3"))
        self.metadata_url = None
        self.object_store_url = f"s3://{S3_BUCKET}/weir"
        self.brokers = []
        # Zones, if any: broker n is in zones[(n - 1) % len(zones)] (--zone).
        self.zones = zones or []
        # Fixed ports (`make cluster`): broker n on base_port + n - 1, its admin port on
        # admin_base_port + n - 1; otherwise free ones.
        self.base_port, self.admin_base_port = base_port, admin_base_port
        # The brokers' binary (Broker.binary) when it is not the environment's.
        self.binary = binary

    # ------------------------------------------------------------- lifecycle
    def launch(self):
        """Starts PostgreSQL, s3s-fs and `size` brokers (each ready when this returns)."""
        _LIVE_CLUSTERS.add(self)
        t0 = time.monotonic()
        try:
            self.pg.start()
            self.metadata_url = self.pg.create_database("weir")
            self.s3.start()
            for _ in range(self.size):
                self.add_broker()
        except BaseException:
            self.cleanup()
            raise
        print(f"[cluster {self.name}] {len(self.brokers)} brokers on {self.bootstrap} "
              f"(PostgreSQL :{self.pg.port}, s3s-fs :{self.s3.port}) "
              f"in {time.monotonic() - t0:.1f}s")

    def add_broker(self):
        """Starts a broker with the next node id; returns it."""
        node_id = max((b.node_id for b in self.brokers), default=0) + 1
        root = os.path.join(self.root, f"node-{node_id}")
        os.makedirs(root, exist_ok=True)
        b = Broker(f"{self.name}-{node_id}", root, {**self.env, **self.s3.env()},
                   node_id=node_id)
        b.binary = self.binary
        if self.base_port:
            b.port = self.base_port + node_id - 1
        if self.admin_base_port:
            b.aux_port = self.admin_base_port + node_id - 1
        if self.base_port:
            # Confluent's port for the first broker's registry, the next ones after it.
            b.registry_port = 8081 + node_id - 1
        b.args = ["--node-id", str(node_id), "--advertised", b.bootstrap,
                  "--metadata-url", self.metadata_url,
                  "--object-store-url", self.object_store_url]
        b.zone = self.zones[(node_id - 1) % len(self.zones)] if self.zones else ""
        if b.zone:
            b.args += ["--zone", b.zone]
        self.brokers.append(b)
        b.start()
        return b

    def start(self, i):
        self.brokers[i].start()

    def stop(self, i, timeout=60):
        """SIGTERM to broker i; it must exit within `timeout`. Its exit status."""
        return self.brokers[i].stop(timeout)

    def kill(self, i):
        self.brokers[i].kill()

    def cleanup(self):
        """Stops every broker (clean stop first), then s3s-fs and PostgreSQL."""
        for b in self.brokers:
            try:
                b.cleanup()
            except Exception as e:  # noqa: BLE001
                print(f"cleanup of {b} failed: {e}")
        self.s3.kill()
        self.pg.stop()
        _LIVE_CLUSTERS.discard(self)

    def destroy(self):
        """Last resort (interpreter exit, SIGTERM): SIGKILL everything."""
        for b in self.brokers:
            try:
                b.kill()
            except Exception:  # noqa: BLE001
                pass
        self.s3.kill()
        self.pg.kill()
        _LIVE_CLUSTERS.discard(self)

    # ------------------------------------------------------------ addresses
    @property
    def host(self):
        return "127.0.0.1"

    @property
    def port(self):
        return self.brokers[0].port

    @property
    def bootstrap(self):
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def registry_url(self):
        """The schema registry of the first broker (every broker serves the same registry)."""
        return self.brokers[0].registry_url

    @property
    def addresses(self):
        return {(b.host, b.port) for b in self.brokers}

    def alive(self):
        """Every broker runs."""
        return bool(self.brokers) and all(b.alive() for b in self.brokers)

    def log_tail(self, n=60):
        return "\n".join(f"---- broker {b.node_id} ({b.log_path}) ----\n{b.log_tail(n)}"
                         for b in self.brokers)

    @property
    def log_path(self):
        return os.path.join(self.root, "node-*", "broker.log")

    def __repr__(self):
        return f"Cluster({self.name}, {self.bootstrap})"


@atexit.register
def _stop_leftovers():
    for b in list(_LIVE):
        try:
            b.kill()
        except Exception:  # noqa: BLE001
            pass
    for c in list(_LIVE_CLUSTERS):
        c.destroy()
