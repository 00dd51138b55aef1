"""Topics as Iceberg tables with typed columns: the value decoded with its schema from the
broker's schema registry, read back with pyiceberg's SqlCatalog.

- weir.iceberg.mode=value_schema_id_prefix with Confluent's Avro serializer: typed values
  (long, string, decimal, timestamp, array, enum), a compatible new version adds a column
  (older rows null in it), and records that do not decode go to <table>_dlq with the reason;
- a schema that changes a column's type pauses the topic's translation, with the reason in the
  admin API and a meter, and nothing is written past it;
- Protobuf (a message with an imported one and a Timestamp) and JSON Schema serdes;
- value_schema_latest: bare JSON values with the subject's latest schema; with
  weir.iceberg.invalid.record.action=drop a bad record is counted and left out.

Apache Kafka has no tables: with WEIR_TEST_BROKER=kafka the module is skipped.
"""

import datetime
import decimal
import json
import struct
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compat_util import create_topic, unique
from test_iceberg import _catalog, _rows, _wait
from weir_harness import KIND

pytestmark = pytest.mark.skipif(KIND != "weir", reason="Apache Kafka has no Iceberg tables")

LAG = {"weir.iceberg.target.lag.ms": "1000"}

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal",
                                   "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID"]}},
    ]}
ORDER_V2 = dict(ORDER_V1, fields=ORDER_V1["fields"] + [
    {"name": "note", "type": ["null", "string"], "default": None}])


def _produce(bootstrap, topic, values):
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    acked = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda e, m: acked.append(m) if e is None else None)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == len(values)
    return acked


def _avro(client, topic, schema):
    return AvroSerializer(client, json.dumps(schema), conf={"auto.register.schemas": True})


def _views(broker):
    return [b.admin("GET", "/v1/iceberg")[1] for b in getattr(broker, "brokers", [broker])]


def test_avro_values_are_typed_columns_that_evolve_with_bad_records_in_the_dlq(broker):
    topic = unique("shop.orders")
    table = topic.replace(".", "_")
    create_topic(broker.bootstrap, topic, 2,
                 config=dict(LAG, **{"weir.iceberg.mode": "value_schema_id_prefix"}))
    client = SchemaRegistryClient({"url": broker.registry_url})
    ctx = SerializationContext(topic, MessageField.VALUE)
    at = datetime.datetime(2026, 12, 1, 12, 30, tzinfo=datetime.timezone.utc)
    v1 = _avro(client, topic, ORDER_V1)
    first = [{"id": i, "customer": f"c{i}", "price": decimal.Decimal(f"{i}.25"),
              "at": at, "tags": ["a"] * (i % 3), "status": "PAID" if i % 2 else "NEW"}
             for i in range(40)]
    _produce(broker.bootstrap, topic, [v1(o, ctx) for o in first])
    t, rows = _rows(broker, table, 40)
    assert t is not None, f"no table with 40 rows: {len(rows)}"
    by_id = {r["value"]["id"]: r for r in rows}
    assert sorted(by_id) == list(range(40))
    r = by_id[7]["value"]
    assert (r["customer"], r["price"], r["tags"], r["status"]) == (
        "c7", decimal.Decimal("7.25"), ["a"], "PAID")
    assert r["at"] == at, r["at"]
    # A compatible new version (an optional field) adds a column; older rows are null in it.
    v2 = _avro(client, topic, ORDER_V2)
    second = [dict(o, id=100 + i, note=f"n{i}") for i, o in enumerate(first[:20])]
    _produce(broker.bootstrap, topic, [v2(o, ctx) for o in second])
    t, rows = _rows(broker, table, 60)
    assert len(rows) == 60, len(rows)
    notes = {r["value"]["id"]: r["value"]["note"] for r in rows}
    assert notes[3] is None and notes[103] == "n3", notes
    assert "note" in [f.name for f in t.schema().find_field("value").field_type.fields]
    # Records that do not decode: no prefix, an unknown id, a datum cut short.
    schema_id = client.get_latest_version(f"{topic}-value").schema_id
    cut = v2(second[0], ctx)[:-3]
    bad = [b"plain text", b"\x00" + struct.pack(">I", 987654) + b"\x02", cut]
    acked = _produce(broker.bootstrap, topic, bad)
    _, dlq = _rows(broker, f"{table}_dlq", 3)
    assert len(dlq) == 3, dlq
    reasons = {(d["partition"], d["offset"]): d["reason"] for d in dlq}
    values = {(d["partition"], d["offset"]): d["value"] for d in dlq}
    where = {m.value(): (m.partition(), m.offset()) for m in acked}
    for value, why in zip(bad, ["magic byte", "Schema 987654 not found",
                                f"does not decode with schema {schema_id}"]):
        key = where[value]
        assert why in reasons[key], reasons
        assert values[key] == value
    # Good records after them still arrive, and none of the bad ones is in the table.
    _produce(broker.bootstrap, topic, [v2(dict(second[0], id=999), ctx)])
    _, rows = _rows(broker, table, 61)
    assert len(rows) == 61 and 999 in {r["value"]["id"] for r in rows}
    _wait("dead letters counted",
          lambda: sum(v["dead_letter_records"] for v in _views(broker)) >= 3, 30)
    assert sum(v["schema_evolutions"] for v in _views(broker)) >= 1


def test_a_changed_column_type_pauses_translation_with_the_reason(broker):
    topic = unique("paused")
    create_topic(broker.bootstrap, topic, 1,
                 config=dict(LAG, **{"weir.iceberg.mode": "value_schema_id_prefix"}))
    client = SchemaRegistryClient({"url": broker.registry_url})
    from confluent_kafka.schema_registry.common.schema_registry_client import (
        ConfigCompatibilityLevel, ServerConfig)
    client.set_config(f"{topic}-value",
                      ServerConfig(compatibility=ConfigCompatibilityLevel.NONE))
    ctx = SerializationContext(topic, MessageField.VALUE)
    v1 = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "int"}]}
    v2 = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "string"}]}
    _produce(broker.bootstrap, topic, [_avro(client, topic, v1)({"n": i}, ctx) for i in range(5)])
    _, rows = _rows(broker, topic, 5)
    assert len(rows) == 5
    _produce(broker.bootstrap, topic, [_avro(client, topic, v2)({"n": "x"}, ctx)] +
             [_avro(client, topic, v1)({"n": 9}, ctx)])

    def paused():
        return [v["topics"].get(topic, {}).get("paused") for v in _views(broker)]

    _wait("paused", lambda: any(paused()), 60)
    reason = next(p for p in paused() if p)
    assert "value.n is int in the table and string in the schema" in reason, reason
    metrics = ""
    for b in getattr(broker, "brokers", [broker]):
        with urllib.request.urlopen(f"http://127.0.0.1:{b.admin_port}/metrics") as r:
            metrics += r.read().decode()
    assert f'weir_iceberg_paused{{topic="{topic}"}} 1' in metrics
    # Nothing past the change was written (the v1 record after it waits too).
    _, rows = _rows(broker, topic, 6, timeout=5)
    assert len(rows) == 5, rows


def test_protobuf_and_json_schema_values(broker):
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from test_schema_registry import _order_classes
    Order = _order_classes()
    client = SchemaRegistryClient({"url": broker.registry_url})
    proto = unique("proto")
    create_topic(broker.bootstrap, proto, 1,
                 config=dict(LAG, **{"weir.iceberg.mode": "value_schema_id_prefix"}))
    ser = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    ctx = SerializationContext(proto, MessageField.VALUE)
    orders = []
    for i in range(10):
        o = Order(id=f"o{i}", qty=i)
        o.total.cents = 100 * i
        o.at.seconds = 1_700_000_000 + i
        orders.append(ser(o, ctx))
    _produce(broker.bootstrap, proto, orders)
    _, rows = _rows(broker, proto, 10)
    assert len(rows) == 10
    got = sorted((r["value"]["id"], r["value"]["qty"], r["value"]["total"]["cents"],
                  r["value"]["at"].timestamp()) for r in rows)
    assert got[3] == ("o3", 3, 300, 1_700_000_003.0), got

    js = unique("json")
    create_topic(broker.bootstrap, js, 1,
                 config=dict(LAG, **{"weir.iceberg.mode": "value_schema_id_prefix"}))
    schema = {"type": "object", "title": "Reading", "properties": {
        "sensor": {"type": "string"}, "celsius": {"type": "number"},
        "labels": {"type": "array", "items": {"type": "string"}},
        "extra": {}}}
    ser = JSONSerializer(json.dumps(schema), client)
    ctx = SerializationContext(js, MessageField.VALUE)
    docs = [{"sensor": f"s{i}", "celsius": 20.5 + i, "labels": ["x"], "extra": {"k": i}}
            for i in range(5)]
    _produce(broker.bootstrap, js, [ser(d, ctx) for d in docs])
    _, rows = _rows(broker, js, 5)
    got = sorted((r["value"]["sensor"], r["value"]["celsius"], r["value"]["labels"],
                  json.loads(r["value"]["extra"])) for r in rows)
    assert got[2] == ("s2", 22.5, ["x"], {"k": 2}), got


def test_latest_schema_for_bare_values_and_dropped_bad_records(broker):
    topic = unique("bare")
    client = SchemaRegistryClient({"url": broker.registry_url})
    schema = {"type": "object", "properties": {"n": {"type": "integer"},
                                               "s": {"type": "string"}}}
    client.register_schema(f"{topic}-value", Schema(json.dumps(schema), "JSON"))
    create_topic(broker.bootstrap, topic, 1, config=dict(LAG, **{
        "weir.iceberg.mode": "value_schema_latest",
        "weir.iceberg.invalid.record.action": "drop"}))
    before = sum(v["dropped_records"] for v in _views(broker))
    values = [json.dumps({"n": i, "s": f"v{i}"}).encode() for i in range(8)]
    values.insert(4, b"{not json")
    values.insert(6, json.dumps({"n": "a string"}).encode())
    _produce(broker.bootstrap, topic, values)
    _, rows = _rows(broker, topic, 8)
    assert sorted((r["value"]["n"], r["value"]["s"]) for r in rows) == [
        (i, f"v{i}") for i in range(8)]
    _wait("two dropped", lambda: sum(v["dropped_records"] for v in _views(broker)) >= before + 2)
    # No dead-letter table was made.
    assert f"{topic}_dlq" not in [t[1] for t in _catalog(broker).list_tables("kafka")]
