"""The cluster harness itself (runs with WEIR_COMPAT_TARGET=cluster only):
three Weir brokers on one private PostgreSQL and one s3s-fs, each answering
on its own Kafka and admin ports; a broker stopped (SIGTERM), killed and
started again keeps its address; a fourth joins with the next node id; the
records a broker uploads land in s3s-fs. The cluster tests build on it.
"""

import os
import urllib.request

import pytest

import kproto as kp
from compat_util import produce_and_consume_check

pytestmark = pytest.mark.skipif(
    os.environ.get("WEIR_COMPAT_TARGET", "").strip().lower() != "cluster",
    reason="the cluster harness runs with WEIR_COMPAT_TARGET=cluster")


def _serves(b):
    """Broker b answers ApiVersions on its Kafka port and /healthz on its admin port."""
    with kp.connect(b.host, b.port) as s:
        corr, err, apis = kp.api_versions(s, version=3, correlation_id=5)
        assert (corr, err) == (5, kp.ERR_NONE) and kp.API_PRODUCE in apis
    with urllib.request.urlopen(f"http://127.0.0.1:{b.aux_port}/healthz", timeout=5) as r:
        assert r.status == 200


def test_brokers_serve_stop_kill_start_and_join(cluster):
    assert [b.node_id for b in cluster.brokers] == [1, 2, 3]
    assert cluster.bootstrap == ",".join(f"127.0.0.1:{b.port}" for b in cluster.brokers)
    assert len(cluster.addresses) == 3
    for b in cluster.brokers:
        _serves(b)

    # Through one broker (the brokers do not share partitions before the cluster code).
    produce_and_consume_check(cluster.brokers[0].bootstrap, "cluster-harness")
    cluster.stop(0)
    bucket = os.path.join(cluster.s3.root, "weir-test", "weir")
    uploaded = [f for _, _, fs in os.walk(bucket) for f in fs]
    assert uploaded, "the stopped broker uploaded its records to s3s-fs"
    assert not os.path.exists(os.path.join(cluster.brokers[0].data_dir, "meta.sqlite")), \
        "the metadata is in PostgreSQL"
    cluster.start(0)
    _serves(cluster.brokers[0])

    port = cluster.brokers[1].port
    cluster.kill(1)
    assert not cluster.brokers[1].alive() and not cluster.alive()
    with pytest.raises(OSError):
        kp.connect("127.0.0.1", port, timeout=2).close()
    cluster.start(1)
    assert cluster.brokers[1].port == port
    _serves(cluster.brokers[1])

    b = cluster.add_broker()
    assert b.node_id == 4 and len(cluster.brokers) == 4
    _serves(b)
    assert cluster.alive()


def test_the_cluster_program_prints_its_endpoints_and_takes_commands():
    """`python3 tests/harness/weir_harness cluster`, the harness as a program for the other
    languages' suites and `make cluster`: its JSON names brokers that serve; a broker killed,
    started and added through its standard input; every process gone once stdin closes."""
    import json
    import subprocess
    import sys

    from conftest import REPO

    program = os.path.join(REPO, "tests", "harness", "weir_harness")
    # Its own directory: PostgreSQL runs as `postgres` under it, which pytest's tmp_path
    # (mode 700 parents) would not let in.
    p = subprocess.Popen([sys.executable, program, "cluster", "--brokers", "2"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(p.stdout.readline())

        def cmd(line):
            p.stdin.write(line + "\n")
            p.stdin.flush()
            return json.loads(p.stdout.readline())

        assert [b["node_id"] for b in first["brokers"]] == [1, 2]
        assert first["bootstrap"] == ",".join(f"127.0.0.1:{b['port']}" for b in first["brokers"])
        assert first["metadata_url"].startswith("postgres://")
        for b in first["brokers"]:
            with kp.connect(b["host"], b["port"]) as s:
                assert kp.api_versions(s, version=3, correlation_id=1)[1] == kp.ERR_NONE
        killed = cmd("kill 1")
        assert killed["brokers"][1]["pid"] is None
        started = cmd("start 1")
        assert started["brokers"][1]["pid"] not in (None, first["brokers"][1]["pid"])
        assert started["brokers"][1]["port"] == first["brokers"][1]["port"]
        added = cmd("add")
        assert [b["node_id"] for b in added["brokers"]] == [1, 2, 3]
        produce_and_consume_check(added["bootstrap"], "cluster-program")
        assert "error" in cmd("stop 7")
        pids = [b["pid"] for b in added["brokers"]]
    finally:
        p.stdin.close()
        assert p.wait(timeout=120) == 0
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not os.path.exists(first["dir"])
