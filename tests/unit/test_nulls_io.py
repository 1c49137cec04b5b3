"""``publish`` input and ``tail`` output with nullable fields, nested records, fixed and logical
types: JSON/CSV -> columns -> bulk encode -> bulk decode -> tail's JSON, exactly; fastavro (on
the schema without logical types) is the independent reader of what publish encodes."""

from __future__ import annotations

import io
import json

import fastavro
import numpy as np

from processors.commands.publish_cmd import _csv_chunks
from processors.commands.publish_input import RecordParser
from processors.commands.tail import _rows
from processors.core.batch import null_column
from topics.avro import single_object_header
from topics.columnar import RecordCodec
from topics.columnar_values import strip_logical

SCHEMA = {
    "type": "record", "name": "Nully", "namespace": "test.nulls",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "i", "type": ["int", "null"], "default": 7},
        {"name": "f", "type": ["null", "float"]},
        {"name": "d", "type": ["null", "double"]},
        {"name": "b", "type": ["null", "boolean"]},
        {"name": "y", "type": ["null", "bytes"]},
        {"name": "e", "type": ["null", {"type": "enum", "name": "E", "symbols": ["X", "Y"]}]},
        {"name": "h", "type": ["null", {"type": "fixed", "name": "Md4", "size": 4}]},
        {"name": "loc", "type": {"type": "record", "name": "Loc", "fields": [
            {"name": "lat", "type": ["null", "double"]},
            {"name": "tag", "type": "Md4"},
            {"name": "inner", "type": {"type": "record", "name": "In", "fields": [
                {"name": "z", "type": ["null", "long"]}]}},
        ]}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "u", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "amt", "type": ["null", {"type": "bytes", "logicalType": "decimal",
                                          "precision": 9, "scale": 2}]},
    ],
}  # fmt: skip
FULL = {
    "id": 1, "s": "é中", "i": -5, "f": 1.5, "d": -0.25, "b": True, "y": "\u00ff\u0000a",
    "e": "Y", "h": "ab\u00e9\u0001", "loc": {"lat": 1.25, "tag": "wxyz", "inner": {"z": 2**40}},
    "day": 19782, "ms": 1709251198123, "us": -1, "t": 3723004,
    "u": "12345678-1234-5678-1234-567812345678",
    "amt": "\u00ff\u00fe",
}  # fmt: skip
NULLS = {
    "id": 2, "s": None, "i": None, "f": None, "d": None, "b": None, "y": None, "e": None,
    "h": None, "loc": {"lat": None, "tag": "\u0000" * 4, "inner": {"z": None}}, "day": None,
    "ms": None, "us": 0, "t": 0, "u": None, "amt": None,
}  # fmt: skip


def _round_trip(chunk) -> list[dict]:  # type: ignore[no-untyped-def]
    """Publish's columns -> Avro messages -> tail's rows; also checks fastavro reads the same."""
    codec = RecordCodec(SCHEMA)
    buf, offsets = codec.encode_many(chunk.columns, len(chunk))
    result = codec.decode_many(buf, offsets)
    assert not result.errors
    rows = _rows(codec, result.columns, len(result))
    plain = fastavro.parse_schema(strip_logical(json.loads(json.dumps(SCHEMA))))
    skip = len(single_object_header(SCHEMA))
    for i, row in enumerate(rows):
        body = io.BytesIO(buf[offsets[i] + skip : offsets[i + 1]].tobytes())
        assert _latin1(fastavro.schemaless_reader(body, plain)) == row
    return rows


def _latin1(value: object) -> object:
    if isinstance(value, bytes):
        return value.decode("latin-1")
    if isinstance(value, dict):
        return {k: _latin1(v) for k, v in value.items()}
    return value


def test_json_with_nulls_nested_fixed_and_logical_types_round_trips_exactly() -> None:
    lines = [(json.dumps(r) + "\n").encode() for r in (FULL, NULLS)]
    chunk = RecordParser(SCHEMA).json_chunk(lines, 1)
    assert not chunk.errors
    assert chunk.columns[null_column("s")].tolist() == [False, True]
    assert chunk.columns[null_column("loc.inner.z")].tolist() == [False, True]
    rows = _round_trip(chunk)
    assert rows == [FULL, NULLS]
    # tail's output is publish's input: a second pass gives the same lines
    again = RecordParser(SCHEMA).json_chunk([(json.dumps(r) + "\n").encode() for r in rows], 1)
    assert _round_trip(again) == rows


def test_defaults_dotted_keys_and_iso_timestamps() -> None:
    sparse = {"id": 3, "f": None, "d": 1, "b": False, "y": "", "e": "X", "h": "abcd",
              "loc.lat": 0.5, "loc": {"tag": "abcd", "inner": {"z": -1}}, "day": "2024-02-29",
              "ms": "2024-02-29T23:59:58.123Z", "us": "1969-12-31T23:59:59.999999",
              "t": 1, "u": None, "amt": "\u0001"}  # fmt: skip
    chunk = RecordParser(SCHEMA).json_chunk([json.dumps(sparse).encode()], 1)
    assert not chunk.errors
    (row,) = _round_trip(chunk)
    assert row["s"] is None and row["i"] == 7  # defaults: null, and the [int, null] union's 7
    assert row["loc"] == {"lat": 0.5, "tag": "abcd", "inner": {"z": -1}}
    assert (row["day"], row["ms"], row["us"]) == (19782, 1709251198123, -1)


def test_bad_values_name_line_and_field() -> None:
    good = dict(FULL)
    bad = [
        dict(good, h="abc"),
        dict(good, loc=5),
        dict(good, id=None),
        dict(good, ms="yesterday"),
        dict(good, ms="2024-01-01T00:00:00.0005+00:00"),
        dict(good, h="ab\u0100d"),
    ]
    chunk = RecordParser(SCHEMA).json_chunk([json.dumps(r).encode() for r in [good, *bad]], 10)
    assert chunk.lines.tolist() == [10]
    errors = [str(e) for e in chunk.errors]
    assert errors[0] == "line 11: field 'h': expected 4 bytes (fixed Md4), got 3"
    assert errors[1] == "line 12: field 'loc.lat': 'loc' must be an object (a record), got integer"
    assert errors[4] == "line 13: field 'id': expected a long (integer), got null"
    assert errors[5].startswith("line 14: field 'ms': expected a timestamp-millis (integer since")
    assert "finer than milliseconds" in errors[6] and errors[6].startswith("line 15: field 'ms'")
    assert errors[7].startswith("line 16: field 'h': character U+0100 at 2 is not a byte")
    assert len(errors) == 8  # 'loc' names each of its three leaves
    key_parser = RecordParser(SCHEMA, key="s")
    chunk = key_parser.json_chunk([json.dumps(r).encode() for r in (FULL, NULLS)], 1)
    assert [str(e) for e in chunk.errors] == [
        "line 2: field 's': is null, and it is the --key field"
    ]


def test_csv_dotted_headers_and_empty_cells_are_nulls() -> None:
    header = "id,s,i,f,d,b,y,e,h,loc.lat,loc.tag,loc.inner.z,day,ms,us,t,u,amt\n"
    text = header + (
        '1,"é中",-5,1.5,-0.25,true,,Y,abcd,1.25,wxyz,3,2024-02-29,1709251198123,'
        "1970-01-01T00:00:01Z,5,12345678-1234-5678-1234-567812345678,a\n"
        "2,,,,,,,,,,abcd,,,,0,0,,\n"
    )  # fmt: skip
    (chunk,) = list(_csv_chunks(io.BytesIO(text.encode()), RecordParser(SCHEMA), 100))
    assert not chunk.errors
    rows = _round_trip(chunk)
    assert rows[0] == {
        "id": 1, "s": "é中", "i": -5, "f": 1.5, "d": -0.25, "b": True, "y": None, "e": "Y",
        "h": "abcd", "loc": {"lat": 1.25, "tag": "wxyz", "inner": {"z": 3}}, "day": 19782,
        "ms": 1709251198123, "us": 1_000_000, "t": 5,
        "u": "12345678-1234-5678-1234-567812345678", "amt": "a",
    }  # fmt: skip
    assert rows[1] == dict(NULLS, loc={"lat": None, "tag": "abcd", "inner": {"z": None}})
    assert np.asarray(chunk.columns[null_column("y")]).tolist() == [True, True]
