"""Schema store, single-object framing, registry framing and schema resolution (topics.avro)."""

import json

import fastavro
import pytest
from fastavro.schema import fingerprint as fa_fingerprint
from fastavro.schema import to_parsing_canonical_form
from helpers import avro_body

from topics.avro import (
    RegistryCodec,
    SchemaError,
    SchemaStore,
    decode_single_object,
    encode_single_object,
    fingerprint,
    flat_fields,
    load_schema,
    resolve_flat,
    schemas_dir,
    single_object_header,
)

NAMES = ["reading", "reading_v2", "packet", "stats", "control", "dead_letter"]
READING = {
    "sensor_id": 42,
    "ts": 1_700_000_000_123,
    "temperature": 21.5,
    "humidity": 40.25,
    "site": "Zürich-Nord",
    "ok": True,
    "battery": 87.5,
}


def _spec_crc64_avro(data: bytes) -> int:
    """CRC-64-AVRO written from the Avro specification, independent of fastavro."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for b in data:
        fp = (fp >> 8) ^ table[(fp ^ b) & 0xFF]
    return fp


@pytest.mark.parametrize("name", NAMES)
def test_shipped_schemas_load_and_validate(name):
    schema = load_schema(name)
    assert schema["type"] == "record"
    fastavro.parse_schema(schema)
    assert load_schema(str(schemas_dir() / f"{name}.avsc")) == schema


def test_schema_names_and_namespaces():
    assert load_schema("stats")["namespace"] == "streamon"
    assert load_schema("reading")["namespace"] == "streamon.examples"
    assert load_schema("packet")["name"] == "Packet"


def test_load_schema_errors(tmp_path, monkeypatch):
    with pytest.raises(SchemaError, match="no schema 'nope'"):
        load_schema("nope")
    bad = tmp_path / "bad.avsc"
    bad.write_text(
        json.dumps({"type": "record", "name": "B", "fields": [{"name": "x", "type": "zz"}]})
    )
    with pytest.raises(SchemaError, match="invalid Avro schema B"):
        load_schema(str(bad))
    monkeypatch.setenv("STREAMON_SCHEMAS", str(tmp_path))
    assert schemas_dir() == tmp_path
    (tmp_path / "p.avsc").write_text(json.dumps({"type": "record", "name": "P", "fields": []}))
    assert load_schema("p")["name"] == "P"


@pytest.mark.parametrize("name", NAMES)
def test_fingerprint_and_header_match_spec_and_fastavro(name):
    schema = load_schema(name)
    canonical = to_parsing_canonical_form(fastavro.parse_schema(schema))
    fa_hex = fa_fingerprint(canonical, "CRC-64-AVRO")  # the 8 header bytes, little-endian
    fp = fingerprint(schema)
    assert fp == _spec_crc64_avro(canonical.encode())
    assert single_object_header(schema) == b"\xc3\x01" + bytes.fromhex(fa_hex)
    assert single_object_header(schema) == b"\xc3\x01" + fp.to_bytes(8, "little")


def test_schema_store():
    store = SchemaStore()
    assert len(store) >= len(NAMES)
    for name in NAMES:
        schema = load_schema(name)
        fp = fingerprint(schema)
        assert fp in store
        assert store.by_fingerprint(fp) == schema
        signed = fp - (1 << 64) if fp >= 1 << 63 else fp
        assert store.by_fingerprint(signed) == schema
    empty = SchemaStore(load=False)
    wire = single_object_header(load_schema("reading"))[2:].hex()  # as on the wire
    with pytest.raises(SchemaError, match=f"unknown writer schema fingerprint {wire} "):
        empty.by_fingerprint(fingerprint(load_schema("reading")))
    extra = {
        "type": "record",
        "name": "X",
        "namespace": "t",
        "fields": [{"name": "a", "type": "int"}],
    }
    assert empty.add(extra) == fingerprint(extra)
    assert empty.by_fingerprint(fingerprint(extra)) == extra


def test_single_object_round_trip_against_fastavro():
    schema = load_schema("reading")
    msg = encode_single_object(schema, READING)
    assert msg[:10] == single_object_header(schema)
    assert msg[10:] == avro_body(schema, READING)
    store = SchemaStore()
    out = decode_single_object(msg, schema, store)
    assert out == {**READING, "humidity": pytest.approx(40.25)}


def test_single_object_v1_read_as_v2_fills_defaults():
    v1, v2 = load_schema("reading"), load_schema("reading_v2")
    out = decode_single_object(encode_single_object(v1, READING), v2, SchemaStore())
    assert out["pressure"] == 1013.25 and out["firmware"] == ""
    assert out["humidity"] == 40.25 and out["site"] == READING["site"]


def test_single_object_errors():
    schema = load_schema("reading")
    store = SchemaStore()
    with pytest.raises(ValueError, match="not single-object encoded"):
        decode_single_object(b"\x00\x01" + bytes(20), schema, store)
    with pytest.raises(SchemaError, match="unknown writer schema fingerprint"):
        decode_single_object(b"\xc3\x01" + bytes(8) + b"\x00", schema, store)
    msg = encode_single_object(schema, READING)
    with pytest.raises(ValueError):
        decode_single_object(msg[:-3], schema, store)
    with pytest.raises(ValueError, match="trailing bytes"):
        decode_single_object(msg + b"\x00", schema, store)


def test_side_topic_records_round_trip():
    store = SchemaStore()
    stats = {
        "worker_id": "w1", "query": "q", "stage": "filter", "agent": "a", "scope": "STAGE",
        "partition": 3, "partitions": "[3]", "window_start_ms": 1, "window_end_ms": 2,
        "tuples_in": 10, "tuples_out": 4, "batches": 1, "busy_ns": 999, "backlog_tuples": 0,
        "backlog_bytes": 0, "bytes_in": 640, "bytes_out": 256, "topic": "t.in",
        "out_topic": "t.out", "latency_ms_avg": 1.5, "latency_ms_max": 3.0,
        "plan": json.dumps({"order": ["f2", "f1"]}), "events": "[]",
    }  # fmt: skip
    control = {"kind": "PRIORITIES", "query": "q", "stage": "", "payload": "{}",
               "issued_at_ms": 5, "issuer": "sched", "seq": 7}  # fmt: skip
    dead = {"source_topic": "in", "partition": 0, "offset": 17, "key": None, "value": b"\x00",
            "reason": "bad", "stage": "ingest", "worker": "w1", "failed_at_ms": 9}  # fmt: skip
    for name, rec in [("stats", stats), ("control", control), ("dead_letter", dead)]:
        schema = load_schema(name)
        assert decode_single_object(encode_single_object(schema, rec), schema, store) == rec
    dead_keyed = {**dead, "key": b"k"}
    schema = load_schema("dead_letter")
    assert (
        decode_single_object(encode_single_object(schema, dead_keyed), schema, store) == dead_keyed
    )


def test_flat_fields_types_and_rejections():
    fields = flat_fields(load_schema("stats"))
    scope = next(f for f in fields if f.name == "scope")
    assert scope.type == "enum" and scope.symbols[0] == "STAGE" and scope.enum_default == "UNKNOWN"
    assert [f.type for f in flat_fields(load_schema("reading"))] == [
        "long", "long", "double", "float", "string", "boolean", "float"]  # fmt: skip
    three = load_schema("dead_letter")  # ["null", "bytes"] is supported since issue 14
    three["fields"][3] = {"name": "key", "type": ["null", "bytes", "string"]}
    with pytest.raises(
        SchemaError, match=r"field 'key' has unsupported type \[\"null\", \"bytes\", \"string\"\]"
    ):
        flat_fields(three)
    nested = {
        "type": "record",
        "name": "N",
        "fields": [{"name": "xs", "type": ["int", "string"]}],  # arrays pass since issue 14
    }
    with pytest.raises(SchemaError, match="schema N: field 'xs'"):
        flat_fields(nested)
    ref = {"type": "record", "name": "R", "namespace": "t", "fields": [
        {"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["X", "Y"]}},
        {"name": "b", "type": "E"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}  # fmt: skip
    assert [(f.type, f.symbols) for f in flat_fields(ref)] == [
        ("enum", ("X", "Y")), ("enum", ("X", "Y")), ("long", ())]  # fmt: skip


def test_resolve_flat_rules():
    v1, v2 = load_schema("reading"), load_schema("reading_v2")
    res = resolve_flat(v1, v2, flat_fields(v2))
    assert res.error is None and res.sources == [0, 1, 2, 3, 4, 5, 6, -1, -1]
    back = resolve_flat(v2, v1, flat_fields(v1))
    assert back.error == "field 'humidity': writer type double cannot be read as float"
    v3 = {**v2, "fields": [*v2["fields"], {"name": "region", "type": "string"}]}
    assert "reader field 'region' has no default" in resolve_flat(v1, v3, flat_fields(v3)).error
    other = {**load_schema("packet")}
    assert "does not match reader schema" in resolve_flat(other, v1, flat_fields(v1)).error


def test_resolve_enum_symbol_maps():
    def rec(symbols, default=None):
        enum = {"type": "enum", "name": "Kind", "symbols": symbols}
        if default:
            enum["default"] = default
        return {"type": "record", "name": "R", "fields": [{"name": "k", "type": enum}]}

    reader = rec(["B", "A", "OTHER"], default="OTHER")
    res = resolve_flat(rec(["A", "B", "C"]), reader, flat_fields(reader))
    assert res.enum_maps == [[1, 0, 2]]
    strict = rec(["B", "A"])
    assert resolve_flat(rec(["A", "B", "C"]), strict, flat_fields(strict)).enum_maps == [[1, 0, -1]]


# --- Confluent wire format ------------------------------------------------------------------


@pytest.fixture()
def registry():
    sr = pytest.importorskip("confluent_kafka.schema_registry", reason="needs the registry extra")
    return sr.SchemaRegistryClient.new_client({"url": "mock://streamon-test"})


def test_registry_codec_matches_confluent_serializers(registry):
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    schema = load_schema("reading")
    ctx = SerializationContext("readings", MessageField.VALUE)
    codec = RegistryCodec(registry, subject="readings-value")
    ours = codec.encode(schema, READING)
    sid = codec.schema_id(schema)
    assert ours[:5] == b"\x00" + sid.to_bytes(4, "big")
    theirs = AvroSerializer(registry, json.dumps(schema))(READING, ctx)
    assert theirs == ours
    assert AvroDeserializer(registry)(ours, ctx) == codec.decode(theirs, schema)
    assert codec.decode(theirs, load_schema("reading_v2"))["pressure"] == 1013.25


def test_registry_codec_errors(registry):
    codec = RegistryCodec(registry)
    schema = load_schema("reading")
    with pytest.raises(ValueError, match="not Confluent wire format"):
        codec.decode(b"\x01\x00\x00\x00\x01\x00", schema)
    with pytest.raises(SchemaError, match="unknown schema id 999"):
        codec.decode(b"\x00\x00\x00\x03\xe7\x00", schema)
    assert codec.schema_id(schema) == codec.schema_id(schema)  # registered once, cached
    assert RegistryCodec("mock://other").schema_id(schema) >= 1


def test_registry_outage_propagates_instead_of_condemning_records():
    class Down:
        def get_schema(self, schema_id):
            raise ConnectionError("registry unreachable")

    with pytest.raises(ConnectionError):
        RegistryCodec(Down()).writer_schema(1)
