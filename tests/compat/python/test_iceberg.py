"""Topics as Iceberg tables, read with pyiceberg's SqlCatalog on the broker's own metadata store
(the JDBC catalog's tables in its SQLite file or PostgreSQL database) and its warehouse (files in
the object store):

- a topic with weir.iceberg.mode=key_value gets a table (its name with dots as underscores), and
  every acknowledged record is in it once, with its key, value, headers, partition, offset and
  timestamp;
- a transactional producer's aborted records are not in the table, its committed ones are;
- the snapshot summary carries the offsets the table has (weir.commit);
- after a broker is killed while translating and started again, still every record once.

Apache Kafka has no tables: with WEIR_TEST_BROKER=kafka the module is skipped.
"""

import json
import os
import time

import pytest
from confluent_kafka import Producer

from compat_util import create_topic, unique
from weir_harness import KIND, S3_ACCESS_KEY, S3_SECRET_KEY

pytestmark = pytest.mark.skipif(KIND != "weir", reason="Apache Kafka has no Iceberg tables")

ICEBERG = {"weir.iceberg.mode": "key_value", "weir.iceberg.target.lag.ms": "1000"}


def _catalog(target):
    """pyiceberg's SqlCatalog on the target's metadata store and warehouse."""
    from pyiceberg.catalog.sql import SqlCatalog
    if hasattr(target, "pg"):  # a cluster: PostgreSQL and s3s-fs
        uri = target.metadata_url.replace("postgres://", "postgresql+psycopg2://")
        props = {"warehouse": f"{target.object_store_url}/iceberg",
                 "s3.endpoint": f"http://127.0.0.1:{target.s3.port}",
                 "s3.access-key-id": S3_ACCESS_KEY, "s3.secret-access-key": S3_SECRET_KEY,
                 "s3.region": "us-east-1"}
    else:  # one broker: its SQLite file and file:// objects
        uri = f"sqlite:///{os.path.join(target.data_dir, 'meta.sqlite')}"
        props = {"warehouse": f"file://{os.path.join(target.data_dir, 'objects', 'iceberg')}"}
    return SqlCatalog("weir", uri=uri, **props)


def _rows(target, table, want, timeout=90):
    """The table's rows once it has `want` of them (or what it has at the timeout)."""
    catalog = _catalog(target)
    deadline = time.monotonic() + timeout
    rows = []
    while time.monotonic() < deadline:
        try:
            t = catalog.load_table(f"kafka.{table}")
            rows = t.scan().to_arrow().to_pylist()
            if len(rows) >= want:
                return t, rows
        except Exception as e:  # noqa: BLE001 - not created yet
            if "NoSuchTable" not in type(e).__name__ and "does not exist" not in str(e):
                raise
        time.sleep(0.5)
    return None, rows


def _produce(bootstrap, topic, n, partitions):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked = {}

    def done(err, m):
        if err is None:
            # (Delivery reports carry no headers: the ones sent, from the key.)
            i = m.key().decode()[1:]
            acked[(m.partition(), m.offset())] = (m.key(), m.value(),
                                                  [("i", i.encode()), ("none", None)])

    for i in range(n):
        p.produce(topic, key=f"k{i}".encode(), value=f"value-{i}".encode(),
                  partition=i % partitions, headers=[("i", str(i).encode()), ("none", None)],
                  on_delivery=done)
        p.poll(0)
    assert p.flush(60) == 0
    return acked


def _check_once(rows, acked):
    seen = [(r["partition"], r["offset"]) for r in rows]
    assert len(seen) == len(set(seen)), "a record in the table twice"
    assert set(seen) == set(acked), (len(seen), len(acked))
    for r in rows:
        key, value, headers = acked[(r["partition"], r["offset"])]
        assert (r["key"], r["value"]) == (key, value)
        assert [(h["key"], h["value"]) for h in r["headers"]] == [(k, v) for k, v in headers]


def test_every_acknowledged_record_is_in_the_table_once(broker):
    topic = unique("orders.v")
    create_topic(broker.bootstrap, topic, 3, config=ICEBERG)
    acked = _produce(broker.bootstrap, topic, 300, 3)
    table, rows = _rows(broker, topic.replace(".", "_"), len(acked))
    assert table is not None, f"no table with {len(acked)} rows: {len(rows)}"
    _check_once(rows, acked)
    ts = rows[0]["timestamp"]
    assert abs(ts.timestamp() - time.time()) < 600, ts
    progress = json.loads(table.current_snapshot().summary.additional_properties["weir.commit"])
    committed = {int(p): o for p, o in progress["offsets"].items()}
    last = {}
    for p, o in acked:
        last[p] = max(last.get(p, -1), o)
    # The newest snapshot need not have every partition's end (another commit may follow), but
    # never more than was written.
    assert all(committed.get(p, 0) <= last[p] + 1 for p in last), (committed, last)
    spec = table.spec()
    assert [f.name for f in spec.fields] == ["timestamp_hour"]
    # The brokers' view (each of the partitions it leads): what they wrote, no lag left.
    brokers = getattr(broker, "brokers", [broker])

    def views():
        return [b.admin("GET", "/v1/iceberg")[1] for b in brokers]

    _wait("no lag", lambda: all(v["topics"].get(topic, {}).get("lag_records", 0) == 0
                                for v in views()), 30)
    seen = views()
    assert sum(v["records"] for v in seen) >= len(acked), seen
    assert sum(v["commits"] for v in seen) >= 1, seen


def test_aborted_records_are_not_in_the_table(broker):
    from confluent_kafka import Producer as P
    topic = unique("txn")
    create_topic(broker.bootstrap, topic, 1, config=ICEBERG)
    p = P({"bootstrap.servers": broker.bootstrap, "transactional.id": unique("tx")})
    p.init_transactions(30)
    for outcome, n in [("commit", 10), ("abort", 5), ("commit", 7)]:
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, key=outcome.encode(), value=f"{outcome}-{i}".encode())
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    _, rows = _rows(broker, topic, 17)
    # A little longer: nothing more may come.
    time.sleep(3)
    _, rows = _rows(broker, topic, 17)
    assert len(rows) == 17, len(rows)
    assert all(r["key"] == b"commit" for r in rows)


def test_a_broker_killed_while_translating_leaves_every_record_once(broker_factory):
    b = broker_factory.new("ice-kill")
    try:
        topic = unique("kill")
        create_topic(b.bootstrap, topic, 2, config=ICEBERG)
        acked = {}
        for _ in range(3):
            acked.update(_produce(b.bootstrap, topic, 200, 2))
            # Killed about when a translation runs (every half second at a 1 s target lag).
            time.sleep(0.7)
            b.kill()
            b.start()
        table, rows = _rows(b, topic, len(acked))
        assert table is not None, f"{len(rows)} rows of {len(acked)}"
        time.sleep(2)
        _, rows = _rows(b, topic, len(acked))
        _check_once(rows, acked)
    finally:
        broker_factory.close(b)


def _leaders(bootstrap, topic):
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic=topic, timeout=10)
    return {p: m.leader for p, m in md.topics[topic].partitions.items()}


def _wait(what, cond, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.3)
    raise AssertionError(f"not {what} in {timeout} s")


def test_moves_and_a_failover_keep_every_record_once(broker_factory):
    """Partitions change hands twice while producing (a move to one broker, then that broker
    killed): each new leader starts from the table's own offsets."""
    c = broker_factory.cluster("ice-moves", size=3)
    try:
        topic = unique("moves")
        create_topic(c.bootstrap, topic, 4, config=ICEBERG)
        acked = _produce(c.bootstrap, topic, 200, 4)
        status, body = c.brokers[0].admin(
            "POST", "/v1/reassignments",
            {"partitions": [{"topic": topic, "partition": i, "broker": 2} for i in range(4)]})
        assert status == 200, body
        _wait("every partition on broker 2",
              lambda: set(_leaders(c.bootstrap, topic).values()) == {2})
        acked.update(_produce(c.bootstrap, topic, 200, 4))
        time.sleep(1.5)  # a translation or two on broker 2
        c.kill(1)  # broker 2: its partitions fail over to the others
        live = ",".join(b.bootstrap for i, b in enumerate(c.brokers) if i != 1)
        _wait("the partitions led elsewhere",
              lambda: 2 not in set(_leaders(live, topic).values()), 90)
        acked.update(_produce(live, topic, 200, 4))
        table, rows = _rows(c, topic, len(acked), timeout=120)
        assert table is not None, f"{len(rows)} rows of {len(acked)}"
        time.sleep(2)
        _, rows = _rows(c, topic, len(acked))
        _check_once(rows, acked)
    finally:
        broker_factory.close(c)


def test_retention_waits_for_the_table(broker_factory):
    """Records two hours old on a topic with an hour's retention: while the table does not
    have them (a target lag of a day: translated once, at creation), retention keeps them; once
    the table has them, retention deletes them."""
    from confluent_kafka import Consumer, TopicPartition
    b = broker_factory.new("ice-retention", env={
        "WEIR_STORAGE_UPLOAD_INTERVAL_MS": "200", "WEIR_STORAGE_MAINTENANCE_INTERVAL_MS": "300"})
    try:
        topic = unique("held")
        create_topic(b.bootstrap, topic, 1, config={
            **ICEBERG, "weir.iceberg.target.lag.ms": "86400000", "retention.ms": "3600000"})
        time.sleep(1.5)  # the first translation: the table made, empty
        p = Producer({"bootstrap.servers": b.bootstrap})
        old = int(time.time() * 1000) - 7_200_000
        for i in range(100):
            p.produce(topic, value=f"v{i}".encode(), timestamp=old)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique("g")})

        def low():
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[0]

        time.sleep(4)  # uploads, and a dozen rounds of retention
        assert low() == 0, "retention deleted records the table did not have"
        from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        resource = ConfigResource(ResourceType.TOPIC, topic, set_config={
            **ICEBERG, "retention.ms": "3600000"})
        admin.alter_configs([resource])[resource].result(timeout=30)
        table, rows = _rows(b, topic, 100)
        assert table is not None and len(rows) == 100, len(rows)
        _wait("retention done once the table has the records", lambda: low() == 100, 30)
        c.close()
    finally:
        broker_factory.close(b)


def test_a_rest_catalog_gets_the_tables_exactly_once(broker_factory):
    """iceberg.catalog = "rest": Apache Iceberg's REST catalog server (started by the harness
    from Maven Central jars) names the tables, with OAuth2 client credentials; pyiceberg's
    RestCatalog reads them. A kill while translating still leaves every record once."""
    from pyiceberg.catalog.rest import RestCatalog
    from weir_harness import IcebergRest
    b = broker_factory.new("ice-rest", start=False)
    warehouse = f"file://{os.path.join(b.root, 'warehouse')}"
    rest = IcebergRest(os.path.join(b.root, "rest"), warehouse)
    rest.start()
    try:
        b.env.update({"WEIR_ICEBERG_CATALOG": "rest", "WEIR_ICEBERG_REST_URI": rest.url,
                      "WEIR_ICEBERG_REST_CREDENTIAL": "weir:secret",
                      "WEIR_ICEBERG_WAREHOUSE": warehouse})
        b.start()
        topic = unique("rest.orders")
        create_topic(b.bootstrap, topic, 2, config=ICEBERG)
        acked = _produce(b.bootstrap, topic, 200, 2)
        time.sleep(0.7)
        b.kill()
        b.start()
        acked.update(_produce(b.bootstrap, topic, 100, 2))
        catalog = RestCatalog("weir", uri=rest.url, credential="reader:secret")
        name = f"kafka.{topic.replace('.', '_')}"
        deadline = time.monotonic() + 90
        rows = []
        while time.monotonic() < deadline and len(rows) < len(acked):
            try:
                rows = catalog.load_table(name).scan().to_arrow().to_pylist()
            except Exception as e:  # noqa: BLE001 - not created yet
                if "NoSuchTable" not in type(e).__name__:
                    raise
            time.sleep(0.5)
        time.sleep(2)
        rows = catalog.load_table(name).scan().to_arrow().to_pylist()
        _check_once(rows, acked)
        assert b.admin("GET", "/v1/iceberg")[1]["commits"] >= 1
    finally:
        broker_factory.close(b)
        rest.kill()
