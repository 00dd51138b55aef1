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
