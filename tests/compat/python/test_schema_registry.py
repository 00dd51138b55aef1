"""Weir's schema registry through confluent-kafka's SchemaRegistryClient and its serdes:

- Avro records serialized by AvroSerializer (registering the schema), produced to a topic,
  consumed and deserialized by AvroDeserializer (fetching the writer's schema by id), and read
  with fastavro too from the bytes after the wire format's prefix;
- compatible evolution accepted and incompatible changes refused with the reason, under each
  compatibility level;
- soft and hard deletes, and Confluent's error codes for each refusal;
- references: a schema naming a type of another subject, serialized with the latest version;
- IMPORT mode: schemas registered with the ids and versions of another registry, later ids above;
- the registry of a cluster: what one broker registers, the others serve at once.

Apache Kafka has no registry: with WEIR_TEST_BROKER=kafka the module is skipped.
"""

import io
import os
import json
import struct
import urllib.error
import urllib.request

import fastavro
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import (Schema, SchemaReference, SchemaRegistryClient,
                                             SchemaRegistryError)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from compat_util import create_topic, unique
from weir_harness import KIND

pytestmark = pytest.mark.skipif(KIND != "weir", reason="Apache Kafka has no schema registry")

USER_V1 = {
    "type": "record", "name": "User", "namespace": "dev.weir.test",
    "fields": [{"name": "name", "type": "string"}, {"name": "favorite", "type": "int"}],
}


def _user(*extra):
    return json.dumps({**USER_V1, "fields": USER_V1["fields"] + list(extra)})


def _client(url):
    return SchemaRegistryClient({"url": url})


def _http(method, url, body=None):
    """A raw request (what the Python client does not send: an import's ids); (status, json)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _refused(call, status, code):
    with pytest.raises(SchemaRegistryError) as e:
        call()
    assert (e.value.http_status_code, e.value.error_code) == (status, code), e.value
    return e.value


def test_avro_records_round_trip_through_a_topic(broker):
    topic = unique("sr-avro")
    create_topic(broker.bootstrap, topic, 1)
    client = _client(broker.registry_url)
    ser = AvroSerializer(client, _user())
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    users = [{"name": f"user-{i}", "favorite": i} for i in range(20)]
    for u in users:
        producer.produce(topic, value=ser(u, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(30) == 0

    registered = client.get_latest_version(f"{topic}-value")
    assert registered.version == 1
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    # A deserializer of its own client: it fetches the writer's schema by id.
    de = AvroDeserializer(_client(broker.registry_url))
    got = []
    try:
        while len(got) < len(users):
            m = consumer.poll(10)
            assert m is not None, f"only {len(got)} records read"
            assert m.error() is None, m.error()
            raw = m.value()
            magic, schema_id = struct.unpack(">bI", raw[:5])
            assert (magic, schema_id) == (0, registered.schema_id)
            value = de(raw, SerializationContext(topic, MessageField.VALUE))
            # fastavro reads the payload with the schema the registry serves for the id.
            served = json.loads(client.get_schema(schema_id).schema_str)
            assert fastavro.schemaless_reader(io.BytesIO(raw[5:]), served) == value
            got.append(value)
    finally:
        consumer.close()
    assert got == users


def test_compatible_changes_pass_and_incompatible_ones_are_refused_under_each_level(broker):
    client = _client(broker.registry_url)
    with_default = {"name": "email", "type": "string", "default": ""}
    without_default = {"name": "email", "type": "string"}
    # (level, new schema from v1, accepted?): adding a field needs a default to read old data
    # (BACKWARD); dropping one needs a default for old readers (FORWARD); FULL needs both.
    dropped = json.dumps({**USER_V1, "fields": USER_V1["fields"][:1]})
    cases = [
        ("BACKWARD", _user(with_default), True),
        ("BACKWARD", _user(without_default), False),
        ("BACKWARD", dropped, True),
        ("FORWARD", _user(without_default), True),
        ("FORWARD", dropped, False),
        ("FULL", _user(with_default), True),
        ("FULL", _user(without_default), False),
        ("FULL", dropped, False),
        ("NONE", json.dumps({"type": "string"}), True),
    ]
    for level, new, accepted in cases:
        subject = unique(f"evolve-{level.lower()}")
        client.set_compatibility(subject, level)
        assert client.get_compatibility(subject) == level
        client.register_schema(subject, Schema(_user(), "AVRO"))
        compatible = client.test_compatibility(subject, Schema(new, "AVRO"))
        assert compatible == accepted, (level, new)
        if accepted:
            assert client.register_schema(subject, Schema(new, "AVRO")) > 0
            assert client.get_latest_version(subject).version == 2
        else:
            e = _refused(lambda: client.register_schema(subject, Schema(new, "AVRO")), 409, 409)
            assert "errorType:" in e.error_message and f"compatibility: '{level}'" in e.error_message
            assert client.get_latest_version(subject).version == 1


def test_transitive_levels_check_every_version(broker):
    client = _client(broker.registry_url)
    subject = unique("transitive")
    client.register_schema(subject, Schema(_user(), "AVRO"))
    client.register_schema(subject, Schema(_user({"name": "email", "type": "string", "default": ""}),
                                           "AVRO"))
    # v3 drops email's default: readable from v2's data, not from v1's (which has no email).
    v3 = Schema(_user({"name": "email", "type": "string"}), "AVRO")
    assert client.test_compatibility(subject, v3)
    client.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    assert not client.test_compatibility_all_versions(subject, v3)
    e = _refused(lambda: client.register_schema(subject, v3), 409, 409)
    assert "oldSchemaVersion: 1" in e.error_message
    # With v1 soft-deleted, only v2 is checked.
    client.delete_version(subject, 1)
    assert client.register_schema(subject, v3) > 0


def test_soft_and_hard_deletes(broker):
    client = _client(broker.registry_url)
    subject = unique("deletes")
    # A schema of this test only: an id goes with its last version, not before.
    own = {"name": subject.replace("-", "_"), "type": "int", "default": 0}
    first = client.register_schema(subject, Schema(_user(own), "AVRO"))
    client.register_schema(subject, Schema(_user(own, {"name": "x", "type": "int", "default": 0}),
                                           "AVRO"))
    _refused(lambda: client.delete_version(subject, 2, permanent=True), 404, 40407)
    assert client.delete_version(subject, 2) == 2
    _refused(lambda: client.delete_version(subject, 2), 404, 40406)
    assert client.get_versions(subject) == [1]
    assert client.get_versions(subject, deleted=True) == [1, 2]
    assert client.delete_subject(subject) == [1]
    _refused(lambda: client.delete_subject(subject), 404, 40404)
    assert subject not in client.get_subjects()
    assert subject in client.get_subjects(deleted=True)
    # Soft-deleted: the id still resolves (consumers of old records need it).
    assert json.loads(client.get_schema(first).schema_str)["name"] == "User"
    assert client.delete_subject(subject, permanent=True) == [1, 2]
    assert subject not in client.get_subjects(deleted=True)
    _, body = _http("GET", f"{broker.registry_url}/schemas/ids/{first}")
    assert body["error_code"] == 40403
    _refused(lambda: client.get_latest_version(subject), 404, 40401)


def test_references_to_another_subject(broker):
    client = _client(broker.registry_url)
    topic = unique("sr-refs")
    create_topic(broker.bootstrap, topic, 1)
    address = {"type": "record", "name": "Address", "namespace": "dev.weir.test",
               "fields": [{"name": "city", "type": "string"}]}
    address_subject = unique("address")
    client.register_schema(address_subject, Schema(json.dumps(address), "AVRO"))
    person = {"type": "record", "name": "Person", "namespace": "dev.weir.test",
              "fields": [{"name": "name", "type": "string"},
                         {"name": "home", "type": "dev.weir.test.Address"}]}
    refs = [SchemaReference("dev.weir.test.Address", address_subject, 1)]
    subject = f"{topic}-value"
    schema_id = client.register_schema(subject, Schema(json.dumps(person), "AVRO", refs))
    latest = client.get_latest_version(subject)
    assert latest.schema_id == schema_id
    assert [(r.name, r.subject, r.version) for r in latest.schema.references] == [
        ("dev.weir.test.Address", address_subject, 1)]
    # A version another schema references is not deleted.
    _refused(lambda: client.delete_version(address_subject, 1), 422, 42206)
    # A dangling reference is not registered.
    bad = [SchemaReference("dev.weir.test.Address", address_subject, 9)]
    _refused(lambda: client.register_schema(unique("dangling"), Schema(json.dumps(person), "AVRO",
                                                                          bad)), 422, 42201)
    # Serialized with the latest version (references resolved by the client), read back.
    ser = AvroSerializer(client, None, conf={"auto.register.schemas": False,
                                             "use.latest.version": True})
    ctx = SerializationContext(topic, MessageField.VALUE)
    person_value = {"name": "ada", "home": {"city": "London"}}
    raw = ser(person_value, ctx)
    assert struct.unpack(">bI", raw[:5]) == (0, schema_id)
    assert AvroDeserializer(_client(broker.registry_url))(raw, ctx) == person_value


def test_import_mode_keeps_the_ids_and_versions_of_another_registry(broker):
    url = broker.registry_url
    client = _client(url)
    subject = unique("imported")
    # Ordinary registrations are refused in IMPORT mode; an id is refused outside it.
    client.update_mode(subject, "IMPORT")
    assert client.get_mode(subject) == "IMPORT"
    _refused(lambda: client.register_schema(subject, Schema(_user(), "AVRO")), 422, 42205)
    status, body = _http("POST", f"{url}/subjects/{subject}/versions",
                         {"schema": _user(), "id": 90001, "version": 4})
    assert (status, body["id"], body["version"]) == (200, 90001, 4), body
    # The same id with another schema would change what the id means: refused.
    status, body = _http("POST", f"{url}/subjects/{unique('other')}/versions",
                         {"schema": json.dumps({"type": "string"}), "id": 90001})
    assert (status, body["error_code"]) in ((422, 42205),), body
    client.delete_mode(subject)
    status, body = _http("POST", f"{url}/subjects/{unique('x')}/versions",
                         {"schema": _user(), "id": 90002})
    assert (status, body["error_code"]) == (422, 42205), body
    assert client.get_version(subject, 4).schema_id == 90001
    later = client.register_schema(unique("after-import"), Schema(json.dumps(
        {"type": "record", "name": "Later", "fields": []}), "AVRO"))
    assert later > 90001


def test_config_and_mode_answers(broker):
    client = _client(broker.registry_url)
    subject = unique("config")
    _refused(lambda: client.get_compatibility(subject), 404, 40408)
    client.set_compatibility(subject, "FORWARD_TRANSITIVE")
    assert client.get_compatibility(subject) == "FORWARD_TRANSITIVE"
    _refused(lambda: client.set_compatibility(subject, "SIDEWAYS"), 422, 42203)
    client.delete_config(subject)
    _refused(lambda: client.get_compatibility(subject), 404, 40408)
    client.update_mode(subject, "READONLY")
    _refused(lambda: client.register_schema(subject, Schema(_user(), "AVRO")), 422, 42205)
    client.delete_mode(subject)
    assert client.register_schema(subject, Schema(_user(), "AVRO")) > 0
    assert sorted(client.get_schema_types()) == ["AVRO", "JSON", "PROTOBUF"]


def test_every_broker_of_a_cluster_serves_the_same_registry(cluster):
    one, two = (_client(b.registry_url) for b in cluster.brokers[:2])
    subject = unique("shared")
    first = one.register_schema(subject, Schema(_user(), "AVRO"))
    # Read through another broker right after: no cache there may miss it.
    assert two.get_latest_version(subject).schema_id == first
    assert json.loads(two.get_schema(first).schema_str)["name"] == "User"
    second = two.register_schema(subject, Schema(_user({"name": "e", "type": "int", "default": 1}),
                                                 "AVRO"))
    assert second != first
    assert one.get_latest_version(subject).version == 2
    # The same schema under another subject, through the other broker: the same id.
    assert one.register_schema(unique("shared-too"), Schema(_user(), "AVRO")) == first
    # Registrations racing through two brokers get distinct ids and consecutive versions.
    import concurrent.futures
    racing = unique("race")
    schemas = [_user({"name": f"f{i}", "type": "int", "default": i}) for i in range(6)]
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        ids = list(pool.map(lambda i: (one if i % 2 else two).register_schema(
            racing, Schema(schemas[i], "AVRO")), range(6)))
    assert len(set(ids)) == 6
    assert one.get_versions(racing) == [1, 2, 3, 4, 5, 6]


def _produce_each(bootstrap, topic, values):
    """Produces each value in a batch of its own; the delivery error of each (None: written)."""
    from confluent_kafka import KafkaError  # noqa: F401 - codes compared by the caller
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0,
                         "enable.idempotence": False})
    errors = []
    for v in values:
        out = []
        producer.produce(topic, value=v, on_delivery=lambda err, _m: out.append(err))
        assert producer.flush(30) == 0
        errors.append(out[0])
    return errors


def test_schema_validation_refuses_records_without_a_registered_id(broker):
    from confluent_kafka import KafkaError
    topic = unique("validated")
    create_topic(broker.bootstrap, topic, 1, config={"confluent.value.schema.validation": "true"})
    client = _client(broker.registry_url)
    ser = AvroSerializer(client, _user())
    ctx = SerializationContext(topic, MessageField.VALUE)
    good = ser({"name": "ada", "favorite": 7}, ctx)
    good_id = struct.unpack(">bI", good[:5])[1]
    elsewhere = client.register_schema(unique("elsewhere"), Schema(json.dumps(
        {"type": "record", "name": "Elsewhere", "fields": []}), "AVRO"))
    unknown = max(good_id, elsewhere) + 1000
    values = [
        good,                                                  # compliant
        b"plain text, no schema id",                           # no prefix
        b"\x00" + struct.pack(">I", unknown) + good[5:],       # an id nobody registered
        b"\x00" + struct.pack(">I", elsewhere) + good[5:],     # another subject's id
        None,                                                  # a tombstone
    ]
    errors = _produce_each(broker.bootstrap, topic, values)
    assert errors[0] is None and errors[4] is None, errors
    for err in errors[1:4]:
        assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    # Only what passed is in the topic.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < 2:
            m = consumer.poll(10)
            assert m is not None, got
            if m.error() is None:
                got.append(m.value())
        assert consumer.poll(2) is None
    finally:
        consumer.close()
    assert got == [good, None]


def test_full_validation_decodes_the_payload(broker):
    from confluent_kafka import KafkaError
    topic = unique("validated-full")
    create_topic(broker.bootstrap, topic, 1, config={"confluent.value.schema.validation": "true",
                                                     "weir.schema.validation": "full"})
    ser = AvroSerializer(_client(broker.registry_url), _user())
    good = ser({"name": "ada", "favorite": 7}, SerializationContext(topic, MessageField.VALUE))
    truncated = good[:-1]  # the int cut off
    errors = _produce_each(broker.bootstrap, topic, [good, truncated])
    assert errors[0] is None, errors
    assert errors[1] is not None and errors[1].code() == KafkaError.INVALID_RECORD, errors


def test_weir_schemas_import_copies_a_registry_with_its_ids(broker_factory):
    import os
    import subprocess
    source = broker_factory.new("sr-source")
    target = broker_factory.new("sr-target")
    try:
        src = _client(source.registry_url)
        # Ids in the source that the target would not give: a gap, and a reference.
        for i in range(3):
            src.register_schema(unique("filler"), Schema(json.dumps(
                {"type": "record", "name": f"Filler{i}", "fields": []}), "AVRO"))
        address = {"type": "record", "name": "Address", "namespace": "dev.weir.test",
                   "fields": [{"name": "city", "type": "string"}]}
        a_id = src.register_schema("address", Schema(json.dumps(address), "AVRO"))
        person = {"type": "record", "name": "Person", "namespace": "dev.weir.test",
                  "fields": [{"name": "home", "type": "dev.weir.test.Address"}]}
        p_id = src.register_schema("person", Schema(json.dumps(person), "AVRO", [
            SchemaReference("dev.weir.test.Address", "address", 1)]))
        src.set_compatibility("person", "FULL")
        src.register_schema("person", Schema(json.dumps(
            {**person, "fields": person["fields"] + [
                {"name": "n", "type": "int", "default": 0}]}), "AVRO", [
            SchemaReference("dev.weir.test.Address", "address", 1)]))
        # Something live in the target: the import is refused without --force.
        dst = _client(target.registry_url)
        dst.register_schema("already-here", Schema(json.dumps({"type": "string"}), "AVRO"))
        cmd = [os.environ["WEIR_BIN"], "schemas", "--registry", target.registry_url, "import",
               source.registry_url]
        refused = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0 and "existing subjects" in refused.stderr, refused
        # Gone for good, nothing in the way: the import keeps every id (id 1 included, which
        # the target had given to what was there).
        dst.delete_subject("already-here")
        dst.delete_subject("already-here", permanent=True)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "imported" in done.stdout, done.stdout
        for subject in src.get_subjects():
            for v in src.get_versions(subject):
                a, b = src.get_version(subject, v), dst.get_version(subject, v)
                assert (b.schema_id, b.version) == (a.schema_id, a.version), subject
                assert b.schema.schema_str == a.schema.schema_str
        assert dst.get_version("address", 1).schema_id == a_id
        assert dst.get_version("person", 1).schema_id == p_id
        assert dst.get_compatibility("person") == "FULL"
        assert dst.get_global_mode() == "READWRITE"
        # Ordinary registrations go on above every imported id.
        highest = max(dst.get_version(s, v).schema_id
                      for s in src.get_subjects() for v in src.get_versions(s))
        later = dst.register_schema(unique("later"), Schema(json.dumps(
            {"type": "record", "name": "Later", "fields": []}), "AVRO"))
        assert later > highest
        listing = subprocess.run([os.environ["WEIR_BIN"], "schemas", "--registry",
                                  target.registry_url, "list"],
                                 capture_output=True, text=True, timeout=60)
        assert listing.returncode == 0 and "person" in listing.stdout, listing
        status, body = target.admin("GET", "/v1/schemas")
        assert status == 200, body
        shown = {s["subject"]: s for s in body["subjects"]}
        assert shown["person"]["versions"] == [1, 2], shown["person"]
        assert shown["address"]["latest"]["id"] == a_id
    finally:
        broker_factory.close(source)
        broker_factory.close(target)


PERSON_JSON = {
    "$schema": "http://json-schema.org/draft-07/schema#", "title": "Person", "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
    "required": ["name"], "additionalProperties": False,
}


def test_json_schema_records_round_trip_and_evolve(broker):
    topic = unique("sr-json")
    create_topic(broker.bootstrap, topic, 1, config={"confluent.value.schema.validation": "true",
                                                     "weir.schema.validation": "full"})
    client = _client(broker.registry_url)
    ser = JSONSerializer(json.dumps(PERSON_JSON), client)
    ctx = SerializationContext(topic, MessageField.VALUE)
    people = [{"name": f"p{i}", "age": i} for i in range(10)]
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in people:
        producer.produce(topic, value=ser(p, ctx))
    assert producer.flush(30) == 0
    # The serializer checks documents itself; one it would refuse, sent raw with a valid id,
    # is refused by the topic's full validation.
    schema_id = client.get_latest_version(f"{topic}-value").schema_id
    bad = b"\x00" + struct.pack(">I", schema_id) + json.dumps({"age": -1}).encode()
    from confluent_kafka import KafkaError
    errors = _produce_each(broker.bootstrap, topic, [bad])
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    de = JSONDeserializer(None, schema_registry_client=_client(broker.registry_url))
    got = []
    try:
        while len(got) < len(people):
            m = consumer.poll(10)
            assert m is not None, got
            assert m.error() is None, m.error()
            got.append(de(m.value(), ctx))
    finally:
        consumer.close()
    assert got == people
    # Evolution of a closed model: a new optional property reads old documents (BACKWARD),
    # a new required one does not, and neither does a narrower type.
    subject = f"{topic}-value"
    wider = {**PERSON_JSON, "properties": {**PERSON_JSON["properties"],
                                           "email": {"type": "string"}}}
    assert client.test_compatibility(subject, Schema(json.dumps(wider), "JSON"))
    required = {**wider, "required": ["name", "email"]}
    assert not client.test_compatibility(subject, Schema(json.dumps(required), "JSON"))
    narrower = {**PERSON_JSON, "properties": {**PERSON_JSON["properties"],
                                              "age": {"type": "integer", "minimum": 18}}}
    e = _refused(lambda: client.register_schema(subject, Schema(json.dumps(narrower), "JSON")),
                 409, 409)
    assert "MINIMUM_ADDED_OR_INCREASED" in e.error_message, e.error_message
    assert client.register_schema(subject, Schema(json.dumps(wider), "JSON")) != schema_id


def test_json_schema_references(broker):
    client = _client(broker.registry_url)
    address_subject = unique("address-json")
    address = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    client.register_schema(address_subject, Schema(json.dumps(address), "JSON"))
    person = {"type": "object", "title": "Resident",
              "properties": {"home": {"$ref": "address.json"}}, "required": ["home"]}
    refs = [SchemaReference("address.json", address_subject, 1)]
    subject = unique("resident")
    schema_id = client.register_schema(subject, Schema(json.dumps(person), "JSON", refs))
    got = client.get_schema(schema_id)
    assert [(r.name, r.subject, r.version) for r in got.references] == [
        ("address.json", address_subject, 1)]
    _refused(lambda: client.register_schema(unique("bad"), Schema(
        json.dumps({"type": "object", "properties": {"a": {"type": "wrong"}}}), "JSON")), 422, 42201)


def _order_classes():
    """Order (with a Money of another file, and a Timestamp) built at run time, as protoc would
    generate them: the serializer registers each imported file under its path."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    F = descriptor_pb2.FieldDescriptorProto
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    money = descriptor_pb2.FileDescriptorProto(name="weirtest/money.proto", package="weirtest",
                                               syntax="proto3")
    m = money.message_type.add(name="Money")
    m.field.add(name="cents", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    pool.Add(money)
    order = descriptor_pb2.FileDescriptorProto(
        name="weirtest/order.proto", package="weirtest", syntax="proto3",
        dependency=["weirtest/money.proto", "google/protobuf/timestamp.proto"])
    o = order.message_type.add(name="Order")
    o.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    o.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    o.field.add(name="total", number=3, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                type_name=".weirtest.Money")
    o.field.add(name="at", number=4, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                type_name=".google.protobuf.Timestamp")
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("weirtest.Order"))


def test_protobuf_records_round_trip_with_references(broker):
    from confluent_kafka.schema_registry.protobuf import (ProtobufDeserializer,
                                                          ProtobufSerializer)
    Order = _order_classes()
    topic = unique("sr-proto")
    create_topic(broker.bootstrap, topic, 1, config={"confluent.value.schema.validation": "true",
                                                     "weir.schema.validation": "full"})
    client = _client(broker.registry_url)
    ser = ProtobufSerializer(Order, client, {"use.deprecated.format": False})
    ctx = SerializationContext(topic, MessageField.VALUE)
    orders = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        o = Order(id=f"o{i}", qty=i)
        o.total.cents = 100 * i
        o.at.seconds = 1_700_000_000 + i
        orders.append(o)
        producer.produce(topic, value=ser(o, ctx))
    assert producer.flush(30) == 0
    # The import was registered under its path, and the order references it.
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    assert [(r.name, r.subject) for r in latest.schema.references] == [
        ("weirtest/money.proto", "weirtest/money.proto")]
    # The canonical text is .proto text, whatever the client sent.
    assert "message Order {" in latest.schema.schema_str, latest.schema.schema_str
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique("g"),
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    de = ProtobufDeserializer(Order, {"use.deprecated.format": False},
                              schema_registry_client=_client(broker.registry_url))
    got = []
    try:
        while len(got) < len(orders):
            m = consumer.poll(10)
            assert m is not None, got
            assert m.error() is None, m.error()
            got.append(de(m.value(), ctx))
    finally:
        consumer.close()
    assert got == orders
    # What full validation refuses: bytes that are not an Order.
    from confluent_kafka import KafkaError
    bad = b"\x00" + struct.pack(">I", latest.schema_id) + b"\x00" + b"\x0a\x05\x01"
    errors = _produce_each(broker.bootstrap, topic, [bad])
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD, errors
    # An incompatible change (qty from int32 to double) is refused with the reason.
    changed = latest.schema.schema_str.replace("int32 qty = 2", "double qty = 2")
    assert changed != latest.schema.schema_str
    e = _refused(lambda: client.register_schema(f"{topic}-value", Schema(
        changed, "PROTOBUF", latest.schema.references)), 409, 409)
    assert "FIELD_SCALAR_KIND_CHANGED" in e.error_message, e.error_message


def test_http_basic_over_tls_with_the_brokers_users(broker_factory, tmp_path):
    import os
    import subprocess
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    certs = str(tmp_path)
    subprocess.run(["bash", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                         "tls", "make-certs.sh"), certs],
                   check=True, timeout=120, capture_output=True)
    b = broker_factory.new("sr-secure", env={
        "WEIR_SCHEMA_REGISTRY_AUTHENTICATION": "basic",
        "WEIR_SCHEMA_REGISTRY_TLS": "true",
        "WEIR_SECURITY_SSL_KEYSTORE_LOCATION": os.path.join(certs, "server.pem")})
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        upsert = UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-secret")
        for f in admin.alter_user_scram_credentials([upsert]).values():
            f.result(timeout=20)
        url = f"https://127.0.0.1:{b.registry_port}"
        ca = os.path.join(certs, "ca.pem")

        def client(user_info=None):
            conf = {"url": url, "ssl.ca.location": ca}
            if user_info:
                conf["basic.auth.user.info"] = user_info
            return SchemaRegistryClient(conf)

        alice = client("alice:alice-secret")
        schema_id = alice.register_schema("secure-value", Schema(_user(), "AVRO"))
        assert alice.get_schema(schema_id).schema_type == "AVRO"
        for who in (None, "alice:wrong", "mallory:alice-secret"):
            _refused(lambda: client(who).get_subjects(), 401, 401)
        # Plain HTTP on the TLS listener gets nowhere.
        with pytest.raises(Exception):
            SchemaRegistryClient({"url": url.replace("https", "http"),
                                  "basic.auth.user.info": "alice:alice-secret"}).get_subjects()
    finally:
        broker_factory.close(b)


def test_acls_on_subjects_and_on_the_global_config(broker_factory):
    """Redpanda's model: SUBJECT and REGISTRY bindings, managed with `weir acls` (Kafka's tools
    cannot name them) and kept out of Kafka's DescribeAcls; a user without the ACL is refused
    with 40301, a listing shows only what the user may see."""
    import subprocess
    from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType,
                                       AdminClient, ResourcePatternType, ResourceType,
                                       ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)
    b = broker_factory.new("sr-acl", env={
        "WEIR_SCHEMA_REGISTRY_AUTHENTICATION": "basic",
        "WEIR_SECURITY_AUTHORIZER": "acl",
        # The PLAINTEXT listener's ANONYMOUS is the tests' admin.
        "WEIR_SECURITY_SUPER_USERS": "User:ANONYMOUS"})
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for user in ("alice", "bob"):
            upsert = UserScramCredentialUpsertion(
                user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw-" + user.encode())
            for f in admin.alter_user_scram_credentials([upsert]).values():
                f.result(timeout=20)

        def weir_acls(*args, check=True):
            r = subprocess.run([os.environ["WEIR_BIN"], "acls", "--admin",
                                f"127.0.0.1:{b.admin_port}", *args],
                               capture_output=True, text=True, timeout=60)
            if check:
                assert r.returncode == 0, r.stderr
            return r

        weir_acls("add", "--principal", "User:alice", "--operation", "write",
                  "--subject", "orders-", "--prefixed")
        weir_acls("add", "--principal", "User:bob", "--operation", "read",
                  "--subject", "orders-value")
        url = b.registry_url
        alice = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:pw-alice"})
        bob = SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:pw-bob"})

        schema_id = alice.register_schema("orders-value", Schema(_user(), "AVRO"))
        e = _refused(lambda: alice.register_schema("payments-value", Schema(_user(), "AVRO")),
                     403, 40301)
        assert "payments-value" in e.error_message and "alice" in e.error_message, e.error_message
        # bob reads what he may read, and nothing else.
        assert bob.get_schema(schema_id).schema_str
        assert bob.get_latest_version("orders-value").schema_id == schema_id
        _refused(lambda: bob.register_schema("orders-value", Schema(_user(
            {"name": "email", "type": ["null", "string"], "default": None}), "AVRO")), 403, 40301)
        assert alice.get_subjects() == ["orders-value"]
        assert bob.get_subjects() == ["orders-value"]
        # The global level wants ALTER_CONFIGS on the REGISTRY.
        from confluent_kafka.schema_registry import ConfigCompatibilityLevel, ServerConfig
        full = ServerConfig(compatibility=ConfigCompatibilityLevel.FULL)
        _refused(lambda: alice.set_config(config=full), 403, 40301)
        _refused(lambda: alice.get_config(), 403, 40301)
        weir_acls("add", "--principal", "User:alice", "--operation", "alter_configs", "--registry")
        alice.set_config(config=full)
        assert alice.get_config().compatibility_level == ConfigCompatibilityLevel.FULL, \
             "ALTER_CONFIGS implies DESCRIBE_CONFIGS"

        # Kafka's DescribeAcls shows Kafka's bindings only; `weir acls list` shows all.
        weir_acls("add", "--principal", "User:bob", "--operation", "read", "--topic", "orders")
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                      AclOperation.ANY, AclPermissionType.ANY)
        kafka_view = admin.describe_acls(everything).result(timeout=20)
        assert [(a.restype, a.name) for a in kafka_view] == [(ResourceType.TOPIC, "orders")], \
            kafka_view
        listing = weir_acls("list").stdout
        for line in ("ALLOW SUBJECT:orders- (PREFIXED) User:alice WRITE",
                     "ALLOW REGISTRY:schema-registry (LITERAL) User:alice ALTER_CONFIGS",
                     "ALLOW TOPIC:orders (LITERAL) User:bob READ"):
            assert line in listing, listing

        # A removed binding stops allowing at once; a binding Weir cannot store is refused.
        weir_acls("remove", "--principal", "User:bob", "--operation", "read",
                  "--subject", "orders-value")
        # (a new client: the first one remembers schemas by id)
        bob = SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:pw-bob"})
        _refused(lambda: bob.get_schema(schema_id), 403, 40301)
        assert bob.get_subjects() == []
        bad = weir_acls("add", "--principal", "bob", "--operation", "read", "--subject", "s",
                        check=False)
        assert bad.returncode != 0 and "principal" in bad.stderr, bad.stderr
        gone = weir_acls("remove", "--principal", "User:bob", "--operation", "read",
                         "--subject", "orders-value", check=False)
        assert gone.returncode != 0 and "404" in gone.stderr, gone.stderr
    finally:
        broker_factory.close(b)
