"""Bulk Avro codec (topics.columnar) against fastavro as the independent oracle."""

import io
import json
import struct

import fastavro
import numpy as np
import pytest
from helpers import avro_body
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.core.batch import VarColumn
from topics.avro import (
    SchemaError,
    SchemaStore,
    fingerprint,
    load_schema,
    schemas_dir,
    single_object_header,
)
from topics.columnar import RecordCodec

ALL = {
    "type": "record",
    "name": "AllTypes",
    "namespace": "streamon.test",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"},
        {
            "name": "e",
            "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]},
        },
    ],
}
DTYPES = {
    "b": np.bool_,
    "i": np.int32,
    "l": np.int64,
    "f": np.float32,
    "d": np.float64,
    "e": np.int32,
}


def message(schema: dict, record: dict) -> bytes:
    return single_object_header(schema) + avro_body(schema, record)


def pack(msgs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(msgs) + 1, np.int64)
    np.cumsum([len(m) for m in msgs], out=offsets[1:])
    return np.frombuffer(b"".join(msgs), np.uint8), offsets


def rows(codec: RecordCodec, columns: dict) -> list[dict]:
    """Columns as fastavro-style dicts (enum indices become symbols, nulls None)."""
    py = {k: (c.to_list() if isinstance(c, VarColumn) else c.tolist()) for k, c in columns.items()}
    for name in [k for k in py if k.endswith("?")]:  # a nullable column's companion
        nulls = py.pop(name)
        py[name[:-1]] = [None if null else v for v, null in zip(py[name[:-1]], nulls, strict=True)]
    n = len(next(iter(py.values()))) if py else 0
    out = [{k: v[j] for k, v in py.items()} for j in range(n)]
    for f in codec.fields:
        if f.type == "enum":
            for r in out:
                r[f.name] = f.symbols[r[f.name]]
    return out


def fastavro_read(schema: dict, msg: bytes, reader: dict | None = None) -> dict:
    assert msg[:10] == single_object_header(schema)
    src = io.BytesIO(msg[10:])
    rec = fastavro.schemaless_reader(src, fastavro.parse_schema(schema),
                                     fastavro.parse_schema(reader) if reader else None)  # fmt: skip
    assert src.tell() == len(msg) - 10
    return rec


def slices(buf: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    return [buf[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]


def random_readings(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [
        {
            "sensor_id": int(rng.integers(-(2**62), 2**62)),
            "ts": 1_700_000_000_000 + i,
            "temperature": float(rng.normal(20, 5)),
            "humidity": float(np.float32(rng.random() * 100)),
            "site": ["", "a", "Zürich", "東京", "x" * 200][i % 5],
            "ok": bool(i % 3),
            "battery": None if i % 4 == 0 else float(np.float32(rng.random() * 100)),
        }
        for i in range(n)
    ]


# --- round trips ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["reading", "packet", "stats", "control"])
def test_decode_many_matches_fastavro(name):
    schema = load_schema(name)
    codec = RecordCodec(schema)
    rng = np.random.default_rng(1)
    recs = []
    for _ in range(300):
        rec = {}
        for f in codec.fields:
            if f.type in ("int", "long"):
                rec[f.name] = int(rng.integers(-(2**31), 2**31))
            elif f.type in ("float", "double"):
                rec[f.name] = float(np.float32(rng.normal()))
            elif f.type == "string":
                rec[f.name] = "é" * int(rng.integers(0, 5))
            elif f.type == "enum":
                rec[f.name] = f.symbols[int(rng.integers(len(f.symbols)))]
            else:
                rec[f.name] = bool(rng.integers(2))
        recs.append(rec)
    buf, offsets = pack([message(schema, r) for r in recs])
    res = codec.decode_many(buf, offsets)
    assert res.errors == [] and res.good.tolist() == list(range(300))
    assert rows(codec, res.columns) == recs
    out_buf, out_offsets = codec.encode_many(res.columns, len(recs))
    assert out_buf.tobytes() == buf.tobytes() and out_offsets.tolist() == offsets.tolist()


def test_column_dtypes_and_order():
    codec = RecordCodec(ALL, store=SchemaStore(load=False))
    rec = {
        "b": True,
        "i": -1,
        "l": 2**40,
        "f": 1.5,
        "d": -2.25,
        "s": "ß",
        "y": b"\x00\xff",
        "e": "BLUE",
    }
    res = codec.decode_many(*pack([message(ALL, rec)] * 3))
    assert list(res.columns) == [f["name"] for f in ALL["fields"]]
    for name, dtype in DTYPES.items():
        assert res.columns[name].dtype == dtype, name
    assert res.columns["s"].utf8 and not res.columns["y"].utf8
    assert res.columns["e"].tolist() == [2, 2, 2]


def test_encode_many_decodes_with_fastavro():
    schema = load_schema("reading")
    codec = RecordCodec(schema)
    recs = random_readings(500)
    cols = {
        "sensor_id": np.array([r["sensor_id"] for r in recs], np.int64),
        "ts": np.array([r["ts"] for r in recs], np.int64),
        "temperature": np.array([r["temperature"] for r in recs]),
        "humidity": np.array([r["humidity"] for r in recs], np.float32),
        "site": VarColumn.from_values([r["site"] for r in recs]),
        "ok": np.array([r["ok"] for r in recs]),
        "battery": np.array([r["battery"] or 0.0 for r in recs], np.float32),
        "battery?": np.array([r["battery"] is None for r in recs]),
    }
    buf, offsets = codec.encode_many(cols, len(recs))
    assert buf.dtype == np.uint8 and offsets.dtype == np.int64 and len(offsets) == 501
    assert [fastavro_read(schema, m) for m in slices(buf, offsets)] == recs
    assert codec.decode_one(slices(buf, offsets)[7]) == recs[7]
    assert codec.encode_one(recs[7]) == slices(buf, offsets)[7]


def test_encode_many_column_checks_and_defaults():
    v2 = load_schema("reading_v2")
    codec = RecordCodec(v2)
    cols = {"sensor_id": np.arange(3), "ts": np.arange(3), "temperature": np.zeros(3),
            "humidity": np.ones(3), "site": ["a", "b", "c"], "ok": np.ones(3, bool)}  # fmt: skip
    buf, offsets = codec.encode_many(cols, 3)  # pressure and firmware take their defaults
    got = [fastavro_read(v2, m) for m in slices(buf, offsets)]
    assert [g["pressure"] for g in got] == [1013.25] * 3 and got[2]["firmware"] == ""
    assert [g["site"] for g in got] == ["a", "b", "c"]
    with pytest.raises(SchemaError, match="no column for field 'ok'"):
        codec.encode_many({k: v for k, v in cols.items() if k != "ok"}, 3)
    with pytest.raises(SchemaError, match="dtype float64"):
        codec.encode_many({**cols, "ts": np.zeros(3)}, 3)
    packet = RecordCodec(load_schema("packet"))
    pcols = {k: np.zeros(2, np.int64) for k in ("router", "pid", "ts", "size", "src", "dst")}
    packet.encode_many(pcols, 2)  # int64 values that fit an int are fine
    with pytest.raises(ValueError, match="outside int range"):
        packet.encode_many({**pcols, "size": np.array([0, 2**31])}, 2)


def test_empty_input():
    codec = RecordCodec(load_schema("reading"))
    res = codec.decode_many(b"", np.zeros(1, np.int64))
    assert len(res) == 0 and res.errors == [] and len(res.columns["site"]) == 0
    buf, offsets = codec.encode_many(res.columns, 0)
    assert len(buf) == 0 and offsets.tolist() == [0]


# --- property tests -------------------------------------------------------------------------

INT_EDGES = sorted({s * (2**k) + d for k in range(0, 64, 7) for d in (-1, 0, 1) for s in (1, -1)})


def ints(lo: int, hi: int):
    return st.one_of(st.integers(lo, hi), st.sampled_from([v for v in INT_EDGES if lo <= v <= hi]),
                     st.sampled_from([lo, hi]))  # fmt: skip


RECORDS = st.fixed_dictionaries({
    "b": st.booleans(),
    "i": ints(-(2**31), 2**31 - 1),
    "l": ints(-(2**63), 2**63 - 1),
    "f": st.floats(width=32, allow_nan=False),
    "d": st.floats(allow_nan=False),
    "s": st.one_of(st.just(""), st.text(max_size=40)),
    "y": st.binary(max_size=40),
    "e": st.sampled_from(["RED", "GREEN", "BLUE"]),
})  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(RECORDS, max_size=30))
def test_property_round_trip_against_fastavro(recs):
    codec = RecordCodec(ALL, store=SchemaStore(load=False))
    msgs = [message(ALL, r) for r in recs]
    res = codec.decode_many(*pack(msgs))
    assert res.errors == []
    assert rows(codec, res.columns) == recs
    buf, offsets = codec.encode_many(res.columns, len(recs))
    assert slices(buf, offsets) == msgs  # Avro binary is canonical for these types
    assert [fastavro_read(ALL, m) for m in slices(buf, offsets)] == recs


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60))
def test_property_garbage_never_crashes_and_agrees_with_fastavro(tail):
    codec = RecordCodec(ALL, store=SchemaStore(load=False))
    good = message(
        ALL, {"b": True, "i": 1, "l": 2, "f": 0.5, "d": 1.0, "s": "x", "y": b"", "e": "RED"}
    )
    res = codec.decode_many(*pack([good, single_object_header(ALL) + tail, good]))
    assert res.good.tolist()[0] == 0 and res.good.tolist()[-1] == 2
    if 1 in res.good.tolist():  # whatever we accept, fastavro reads the same way
        ours, theirs = (
            rows(codec, res.columns)[1],
            fastavro_read(ALL, single_object_header(ALL) + tail),
        )
        assert repr(ours) == repr(theirs)  # repr: a NaN read from garbage equals itself
    else:
        assert res.errors[0][0] == 1 and res.errors[0][1]


# --- garbage --------------------------------------------------------------------------------


def test_every_garbage_case_is_reported_and_others_decode():
    schema = load_schema("reading")
    codec = RecordCodec(schema)
    recs = random_readings(3, seed=5)
    recs[0]["site"] = "abc"
    recs[0]["battery"] = None
    ok = message(schema, recs[0])
    head = single_object_header(schema)
    fields = avro_body(schema, recs[0])
    # layout of the body: sensor_id, ts varints, temperature 8 bytes, humidity 4, site, ok,
    # battery (a null: its branch byte only)
    site_at = len(fields) - 2 - 4  # "abc" (1 length byte + 3), then ok and battery
    cases = {
        f"truncated record at byte {len(ok) - 2} in field 'ok'": ok[:-2],
        f"truncated record at byte {len(ok) - 1} in field 'battery'": ok[:-1],
        "varint overflow at byte 10 in field 'sensor_id'": head + b"\xff" * 10 + b"\x01",
        "negative length at byte": head + fields[:site_at] + b"\x01abc\x01",
        "length past the end of the record": head + fields[:site_at] + b"\x10abc\x01",
        "trailing bytes: 2": ok + b"\x00\x00",
        "invalid boolean byte": ok[:-2] + b"\x02\x00",
        "invalid UTF-8 at byte": head + fields[:site_at] + b"\x06a\xffc\x01",
        "not single-object encoded (marker b'\\x00\\x01')": b"\x00\x01" + fields,
        "too short for a single-object header": b"\xc3\x01\x00",
        "message of 0 bytes": b"",
        "unknown writer schema fingerprint 1111111111111111 (": b"\xc3\x01" + b"\x11" * 8 + fields,
    }
    msgs, expect = [], []
    for reason, bad in cases.items():
        msgs += [ok, bad]
        expect.append(reason)
    msgs.append(message(schema, recs[1]))
    res = codec.decode_many(*pack(msgs))
    assert res.good.tolist() == list(range(0, len(msgs), 2))
    assert [i for i, _ in res.errors] == list(range(1, len(msgs), 2))
    for (_, got), want in zip(res.errors, expect, strict=True):
        assert want in got, (want, got)
    assert rows(codec, res.columns) == [recs[0]] * len(cases) + [recs[1]]


def test_truncation_names_the_field():
    schema = load_schema("reading")
    msg = message(schema, {**random_readings(1)[0], "site": "abcdef"})
    res = RecordCodec(schema).decode_many(*pack([msg[:-4]]))
    assert res.errors == [
        (0, f"length past the end of the record at byte {len(msg) - 9} in field 'site'")
    ]
    res = RecordCodec(schema).decode_many(*pack([msg[:12]]))
    assert "in field 'ts'" in res.errors[0][1] or "in field 'sensor_id'" in res.errors[0][1]


def test_enum_index_out_of_range_and_unknown_symbols():
    codec = RecordCodec(ALL, store=SchemaStore(load=False))
    rec = {"b": True, "i": 1, "l": 2, "f": 0.5, "d": 1.0, "s": "x", "y": b"", "e": "GREEN"}
    good = message(ALL, rec)
    bad = good[:-1] + b"\x06"  # enum index 3 of 3 symbols
    res = codec.decode_many(*pack([bad, good]))
    assert res.good.tolist() == [1] and "enum index out of range" in res.errors[0][1]
    wider = json.loads(json.dumps(ALL))
    wider["fields"][7]["type"]["symbols"].append("PURPLE")
    store = SchemaStore(load=False)
    store.add(wider)
    codec = RecordCodec(ALL, store=store)
    res = codec.decode_many(*pack([message(wider, {**rec, "e": "PURPLE"}), message(wider, rec)]))
    assert res.good.tolist() == [1] and res.errors == [
        (0, "enum symbol 'PURPLE' of field 'e' is unknown to the reader")]  # fmt: skip
    assert rows(codec, res.columns) == [rec]


# --- schema resolution ----------------------------------------------------------------------


def test_v1_records_read_with_v2_reader():
    v1, v2 = load_schema("reading"), load_schema("reading_v2")
    recs = random_readings(50)
    res = RecordCodec(v2).decode_many(*pack([message(v1, r) for r in recs]))
    assert res.errors == []
    assert res.columns["humidity"].dtype == np.float64
    assert res.columns["pressure"].tolist() == [1013.25] * 50
    assert res.columns["firmware"].to_list() == [""] * 50
    expected = [fastavro_read(v1, message(v1, r), reader=v2) for r in recs]
    assert rows(RecordCodec(v2), res.columns) == expected


def test_mixed_writers_keep_input_order():
    v1, v2 = load_schema("reading"), load_schema("reading_v2")
    recs = random_readings(40, seed=3)
    msgs, expected = [], []
    for j, r in enumerate(recs):
        if j % 3 == 0:
            r2 = {**r, "pressure": 990.0 + j, "firmware": f"fw{j}"}
            msgs.append(message(v2, r2))
            expected.append(r2)
        else:
            msgs.append(message(v1, r))
            expected.append(fastavro_read(v1, msgs[-1], reader=v2))
        if j == 20:
            msgs.append(b"junk")
    codec = RecordCodec(v2)
    res = codec.decode_many(*pack(msgs))
    assert res.good.tolist() == [j for j in range(len(msgs)) if j != 21]
    assert res.errors[0][0] == 21
    assert rows(codec, res.columns) == expected
    # the v1 reader cannot read v2 data (double humidity does not narrow to float)
    res = RecordCodec(v1).decode_many(*pack(msgs))
    v2_idx = [j + (j > 20) for j in range(0, 40, 3)]
    assert [i for i, _ in res.errors] == sorted([*v2_idx, 21])
    assert "writer type double cannot be read as float" in res.errors[0][1]


def test_missing_reader_field_without_default_is_an_error_per_record():
    v1 = load_schema("reading")
    v3 = json.loads(json.dumps(load_schema("reading_v2")))
    v3["fields"].append({"name": "region", "type": "string"})
    store = SchemaStore()
    store.add(v3)
    res = RecordCodec(v3, store=store).decode_many(
        *pack([message(v1, r) for r in random_readings(4)])
    )
    assert len(res) == 0 and len(res.errors) == 4
    assert all("reader field 'region' has no default" in why for _, why in res.errors)


def test_promotions_and_string_bytes():
    writer = {"type": "record", "name": "P", "fields": [
        {"name": "a", "type": "int"}, {"name": "b", "type": "long"}, {"name": "c", "type": "int"},
        {"name": "s", "type": "bytes"}, {"name": "t", "type": "string"}]}  # fmt: skip
    reader = {"type": "record", "name": "P", "fields": [
        {"name": "t", "type": "bytes"}, {"name": "a", "type": "long"},
        {"name": "b", "type": "double"}, {"name": "c", "type": "float"},
        {"name": "s", "type": "string"}]}  # fmt: skip
    store = SchemaStore(load=False)
    store.add(writer)
    codec = RecordCodec(reader, store=store)
    recs = [{"a": -5, "b": 2**40, "c": 7, "s": "ü".encode(), "t": "x"},
            {"a": 1, "b": 2, "c": 3, "s": b"\xff", "t": ""}]  # fmt: skip
    res = codec.decode_many(*pack([message(writer, r) for r in recs]))
    assert res.errors == [(1, "invalid UTF-8 at byte 13 in field 's'")]
    assert rows(codec, res.columns) == [{"t": b"x", "a": -5, "b": float(2**40), "c": 7.0, "s": "ü"}]
    assert [res.columns[k].dtype for k in "abc"] == [np.int64, np.float64, np.float32]


def test_unsupported_writer_falls_back_to_fastavro():
    v1 = load_schema("reading")
    writer = json.loads(json.dumps(v1))
    # an array the reader skips (a nullable field, unsupported before issue 14, is bulk now)
    writer["fields"].append({"name": "note", "type": {"type": "array", "items": "string"}})
    store = SchemaStore()
    store.add(writer)
    recs = random_readings(5)
    msgs = [message(writer, {**r, "note": [] if j % 2 else ["n"]}) for j, r in enumerate(recs)]
    res = RecordCodec(v1, store=store).decode_many(*pack([*msgs, msgs[0][:-3]]))
    assert res.good.tolist() == [0, 1, 2, 3, 4] and res.errors[0][0] == 5
    assert rows(RecordCodec(v1), res.columns) == recs


def test_unsupported_reader_schema_is_rejected():
    keys = ["bytes", "string"]  # nullable fields and arrays are supported since issue 14
    schema = {**load_schema("dead_letter"), "name": "Keys"}
    fields = schema["fields"]
    schema["fields"] = [{"name": "key", "type": keys} if f["name"] == "key" else f for f in fields]
    with pytest.raises(SchemaError, match="field 'key' has unsupported type"):
        RecordCodec(schema)


# --- Confluent wire format ------------------------------------------------------------------


def test_confluent_framing_round_trip():
    sr = pytest.importorskip(
        "confluent_kafka.schema_registry", reason="schema registry extra missing"
    )
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from topics.avro import RegistryCodec

    client = sr.SchemaRegistryClient.new_client({"url": "mock://columnar-test"})
    v1, v2 = load_schema("reading"), load_schema("reading_v2")
    ctx = SerializationContext("readings", MessageField.VALUE)
    recs = random_readings(20)
    theirs = [AvroSerializer(client, json.dumps(v1))(r, ctx) for r in recs]
    codec = RecordCodec(v2, registry=RegistryCodec(client, subject="readings-value"))
    res = codec.decode_many(*pack([*theirs, b"\x01\x00\x00\x00\x01", b"\x00\x00\x00\x00\x63\x00"]))
    assert res.good.tolist() == list(range(20))
    assert [r["pressure"] for r in rows(codec, res.columns)] == [1013.25] * 20
    assert "not Confluent wire format" in res.errors[0][1] and res.errors[0][0] == 20
    assert res.errors[1] == (21, res.errors[1][1]) and "unknown schema id 99" in res.errors[1][1]
    buf, offsets = codec.encode_many(res.columns, 20)
    sid = codec.registry.schema_id(v2)
    deser = AvroDeserializer(client)
    for m, r in zip(slices(buf, offsets), recs, strict=True):
        assert m[:5] == struct.pack(">bI", 0, sid)
        assert deser(m, ctx) == {**r, "pressure": 1013.25, "firmware": ""}
    assert codec.decode_one(theirs[0])["site"] == recs[0]["site"]


def test_fingerprint_is_unsigned():
    assert 0 <= fingerprint(load_schema("reading")) < 2**64


DATA_SCHEMAS = ["packet", "reading", "reading_v2"]  # the others are control records (fastavro)


def test_data_schemas_are_all_the_shipped_record_schemas() -> None:
    control = {"control", "dead_letter", "stats"}
    assert sorted(p.stem for p in schemas_dir().glob("*.avsc")) == sorted(DATA_SCHEMAS + [*control])


@pytest.mark.parametrize("schema", [ALL, *map(load_schema, DATA_SCHEMAS)], ids=lambda s: s["name"])
def test_warm_up_round_trips_one_zero_record(schema: dict) -> None:
    """A worker warms its codecs before consuming; that must work for every data schema we ship."""
    codec = RecordCodec(schema)
    columns = codec.warm_up()
    assert [c for c in columns if not c.endswith("?")] == [f["name"] for f in schema["fields"]]
    buf, offsets = codec.encode_many(columns, 1)
    record = codec.decode_one(bytes(buf[offsets[0] : offsets[1]]))
    for f in schema["fields"]:
        value = record[f["name"]]
        if isinstance(f["type"], dict) and f["type"].get("type") == "enum":
            assert value == f["type"]["symbols"][0]
        else:
            assert value in (0, "", b"", False), (f["name"], value)
