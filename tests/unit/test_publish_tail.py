"""``streamon publish`` input (lines -> columns, errors named exactly) and ``tail`` output."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from processors.cli import build_parser
from processors.commands.publish_cmd import _csv_chunks, _cut_at_first_error, _json_chunks
from processors.commands.publish_input import LineError, RecordParser
from processors.commands.tail import TailOptions, _Decoder
from processors.core.batch import VarColumn
from processors.runtime.producer import SIGN_HEADER
from topics.avro import SchemaError, SchemaStore, decode_single_object, load_schema
from topics.columnar import RecordCodec

SCHEMA = {
    "type": "record",
    "name": "Everything",
    "namespace": "test.publish",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "x", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "name", "type": "string"},
        {"name": "raw", "type": "bytes"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "note", "type": "string", "default": "none"},
    ],
}
GOOD = {"id": 1, "n": 2, "x": 0.5, "f": 1.5, "ok": True, "name": "héllo", "raw": "\u00ff\u0001",
        "kind": "B", "note": "n"}  # fmt: skip


def line(**changes: object) -> bytes:
    record = {**GOOD, **changes}
    return (json.dumps({k: v for k, v in record.items() if v is not ...}) + "\n").encode()


def rows(chunk) -> list[dict]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(len(chunk)):
        row = {}
        for name, col in chunk.columns.items():
            row[name] = col.value(i) if isinstance(col, VarColumn) else col[i].item()
        out.append(row)
    return out


def test_good_lines_become_typed_columns() -> None:
    chunk = RecordParser(SCHEMA).json_chunk([line(), line(id=-(2**63), note=...)], 1)
    assert chunk.errors == [] and chunk.lines.tolist() == [1, 2]
    assert chunk.columns["id"].dtype == np.int64 and chunk.columns["n"].dtype == np.int32
    assert chunk.columns["f"].dtype == np.float32 and chunk.columns["kind"].dtype == np.int32
    assert rows(chunk) == [
        {**GOOD, "raw": b"\xff\x01", "kind": 1},
        {**GOOD, "id": -(2**63), "raw": b"\xff\x01", "kind": 1, "note": "none"},  # default
    ]


def test_columns_encode_to_what_fastavro_reads() -> None:
    chunk = RecordParser(SCHEMA).json_chunk([line(), line(x=3, name="", raw="")], 1)
    codec = RecordCodec(SCHEMA)
    buf, offsets = codec.encode_many(chunk.columns, len(chunk))
    store = SchemaStore(load=False)
    store.add(SCHEMA)
    got = [decode_single_object(buf[offsets[i] : offsets[i + 1]].tobytes(), SCHEMA, store)
           for i in range(len(chunk))]  # fmt: skip
    assert got == [
        {**GOOD, "raw": b"\xff\x01"},
        {**GOOD, "x": 3.0, "name": "", "raw": b""},
    ]


def test_each_bad_line_is_named_with_field_and_reason_and_the_rest_goes_on() -> None:
    lines = [
        line(),  # 10
        b"{not json\n",  # 11
        line(id="7"),  # 12
        b"[1, 2]\n",  # 13
        line(n=2**31),  # 14
        line(kind="C", ok=1),  # 15: two problems, in field order
        line(name=...),  # 16
        b"\n",  # 17: blank, skipped silently
        line(raw="\u0100"),  # 18
        line(x=None),  # 19
        line(f=1e39),  # 20
        line(id=True),  # 21
        line(id=2**64),  # 22
        line(id=5),  # 23
    ]
    chunk = RecordParser(SCHEMA).json_chunk(lines, 10)
    assert chunk.lines.tolist() == [10, 23]
    assert chunk.columns["id"].tolist() == [1, 5]
    assert [str(e) for e in chunk.errors] == [
        "line 11: not valid JSON: Expecting property name enclosed in double quotes (column 2)",
        "line 12: field 'id': expected a long (integer), got string \"7\"",
        "line 13: expected a JSON object, got array",
        "line 14: field 'n': 2147483648 is outside the int range [-2147483648, 2147483647]",
        "line 15: field 'ok': expected a boolean (true/false), got integer 1",
        "line 15: field 'kind': \"C\" is not a symbol of enum Kind (A, B)",
        "line 16: field 'name': missing (it has no default)",
        "line 18: field 'raw': character U+0100 at 0 is not a byte (Avro JSON bytes are code "
        "points 0-255)",
        "line 19: field 'x': expected a double (number), got null",
        "line 20: field 'f': 1e+39 is outside the float range (±3.40282e+38)",
        "line 21: field 'id': expected a long (integer), got boolean true",
        "line 22: field 'id': 18446744073709551616 is outside the long range "
        "[-9223372036854775808, 9223372036854775807]",
    ]
    assert chunk.skipped == 11
    assert chunk.errors[1] == LineError(12, "id", 'expected a long (integer), got string "7"')


def test_lines_are_numbered_across_chunks() -> None:
    data = b"".join([line(), line(), line(id="x"), line(), line(n="y")])
    chunks = list(_json_chunks(io.BytesIO(data), RecordParser(SCHEMA), 2))
    assert [c.lines.tolist() for c in chunks] == [[1, 2], [4], []]
    assert [(e.line, e.field) for c in chunks for e in c.errors] == [(3, "id"), (5, "n")]


def test_a_line_that_is_not_one_object_is_never_merged_with_its_neighbour() -> None:
    # valid when joined with commas inside an array, invalid line by line
    lines = [b'{"id": [{"a": 1}\n', b'{"b": 2}]}\n', line()]
    chunk = RecordParser(SCHEMA).json_chunk(lines, 1)
    assert chunk.lines.tolist() == [3]
    assert [e.line for e in chunk.errors] == [1, 2]


def test_invalid_utf8_is_named() -> None:
    chunk = RecordParser(SCHEMA).json_chunk([line(), b'{"name": "\xff"}\n'], 1)
    assert [str(e) for e in chunk.errors] == ["line 2: not valid UTF-8 at byte 10"]


def test_csv_cells_are_converted_by_field_type() -> None:
    parser = RecordParser(SCHEMA, key="id")
    index = parser.csv_header(["id", "n", "x", "f", "ok", "name", "raw", "kind"])
    chunk = parser.csv_chunk(
        [
            ["3", "4", "1e3", "0.25", "TRUE", "a,b", "zz", "A"],
            ["x", "4", "1", "1", "maybe", "", "", "A"],
            ["1", "2"],
            ["9", "", "1", "1", "0", "", "", "B"],
        ],
        [2, 3, 4, 6],
        index,
    )
    assert rows(chunk) == [
        {"id": 3, "n": 4, "x": 1000.0, "f": 0.25, "ok": True, "name": "a,b", "raw": b"zz",
         "kind": 0, "note": "none"},
    ]  # fmt: skip
    assert [str(e) for e in chunk.errors] == [
        "line 3: field 'id': expected a long, got 'x'",
        "line 3: field 'ok': expected a boolean, got 'maybe'",
        "line 4: has 2 cells, the header has 8",
        "line 6: field 'n': missing (it has no default)",
    ]
    assert chunk.key is not None and chunk.key.value(0) == (3).to_bytes(8, "big")


def test_csv_rows_are_numbered_by_the_line_they_start_on() -> None:
    text = 'id,n,x,f,ok,name,raw,kind\n1,1,1,1,true,"two\nlines",,A\n\nq,1,1,1,true,,,A\n'
    chunks = list(_csv_chunks(io.BytesIO(text.encode()), RecordParser(SCHEMA), 10))
    assert [c.lines.tolist() for c in chunks] == [[2]]
    assert rows(chunks[0])[0]["name"] == "two\nlines"
    assert [str(e) for e in chunks[0].errors] == ["line 5: field 'id': expected a long, got 'q'"]


def test_csv_header_must_cover_the_schema() -> None:
    parser = RecordParser(SCHEMA)
    with pytest.raises(SchemaError, match="no column for field 'kind' \\(it has no default\\)"):
        parser.csv_header(["id", "n", "x", "f", "ok", "name", "raw"])
    with pytest.raises(SchemaError, match="CSV header names \\['extra'\\]"):
        parser.csv_header(["id", "n", "x", "f", "ok", "name", "raw", "kind", "extra"])


def test_keys_are_the_bytes_streamons_producers_use() -> None:
    reading = load_schema("reading")
    text = [line(), line()]
    by_int = RecordParser(SCHEMA, key="id").json_chunk([line(id=-2), line(id=258)], 1).key
    assert by_int is not None and by_int.to_list() == [
        (-2).to_bytes(8, "big", signed=True), (258).to_bytes(8, "big")]  # fmt: skip
    by_str = RecordParser(SCHEMA, key="name").json_chunk(text, 1).key
    assert by_str is not None and by_str.to_list() == ["héllo".encode()] * 2
    by_enum = RecordParser(SCHEMA, key="kind").json_chunk(text, 1).key
    assert by_enum is not None and by_enum.to_list() == [b"B", b"B"]
    with pytest.raises(SchemaError, match="--key 'x': a double field cannot be a Kafka key"):
        RecordParser(SCHEMA, key="x")
    with pytest.raises(SchemaError, match="--key 'nope': schema streamon.examples.Reading"):
        RecordParser(reading, key="nope")


def test_stop_on_error_keeps_only_the_lines_before_the_first_bad_one() -> None:
    chunk = RecordParser(SCHEMA).json_chunk([line(id=1), line(id=2), line(n="x"), line(id=4),
                                             line(x="y")], 1)  # fmt: skip
    cut = _cut_at_first_error(chunk)
    assert cut.lines.tolist() == [1, 2] and cut.columns["id"].tolist() == [1, 2]
    assert [e.line for e in cut.errors] == [3]


def test_cli_takes_the_file_after_the_options() -> None:
    args = build_parser().parse_args(
        ["publish", "readings", "--schema", "reading", "--key", "sensor_id", "data.jsonl"]
    )
    assert (args.topic, args.file, args.schema, args.key) == ("readings", "data.jsonl",
                                                               "reading", "sensor_id")  # fmt: skip
    args = build_parser().parse_args(["publish", "readings", "--schema", "reading"])
    assert args.file == "-" and args.format == "json" and not args.stop_on_error
    args = build_parser().parse_args(["tail", "out", "--from-beginning", "-n", "5"])
    assert (args.topic, args.from_beginning, args.follow, args.limit) == ("out", True, False, 5)


class FakeMessage:
    """What tail reads of a confluent_kafka Message."""

    def __init__(self, value: bytes | None, partition: int, offset: int, sign: bytes | None):
        self._value, self._partition, self._offset = value, partition, offset
        self._headers = [(SIGN_HEADER, sign)] if sign is not None else None

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list | None:
        return self._headers

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def topic(self) -> str:
        return "out"

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


def test_tail_prints_fields_then_sign_partition_offset() -> None:
    codec = RecordCodec(SCHEMA)
    rec = {**GOOD, "raw": b"\xff\x01"}
    msgs = [
        FakeMessage(codec.encode_one(rec), 0, 7, None),
        FakeMessage(codec.encode_one({**rec, "f": 0.1}), 1, 3, b"-1"),
        FakeMessage(b"\xc3\x01short", 1, 4, None),
        FakeMessage(None, 1, 5, None),
        FakeMessage(codec.encode_one(rec), 1, 6, b"1"),
    ]
    err = io.StringIO()
    decoder = _Decoder(TailOptions("out", schema=SCHEMA), err)
    lines = [json.dumps(r) for r in decoder.decode(msgs)]
    expected = ('{"id": 1, "n": 2, "x": 0.5, "f": 1.5, "ok": true, "name": "h\\u00e9llo", '
                '"raw": "\\u00ff\\u0001", "kind": "B", "note": "n", ')  # fmt: skip
    assert lines == [
        expected + '"_sign": 1, "_partition": 0, "_offset": 7}',
        expected.replace('"f": 1.5', f'"f": {float(np.float32(0.1))!r}')
        + '"_sign": -1, "_partition": 1, "_offset": 3}',
        expected + '"_sign": 1, "_partition": 1, "_offset": 6}',
    ]
    assert err.getvalue().splitlines() == [
        "out[1]@5: no value (tombstone), skipped",
        "out[1]@4: message of 7 bytes is too short for a single-object header",
    ]
    # the printed float reads back to the same float32
    assert np.float32(json.loads(lines[1])["f"]) == np.float32(0.1)


def test_tail_finds_the_schema_by_the_first_records_fingerprint() -> None:
    reading = load_schema("reading")
    value = RecordCodec(reading).encode_one(
        {"sensor_id": 5, "ts": 9, "temperature": 1.0, "humidity": 2.0, "site": "x", "ok": False}
    )
    rows = _Decoder(TailOptions("out"), io.StringIO()).decode([FakeMessage(value, 0, 0, None)])
    assert rows == [{"sensor_id": 5, "ts": 9, "temperature": 1.0, "humidity": 2.0, "site": "x",
                     "ok": False, "battery": None, "_sign": 1, "_partition": 0,
                     "_offset": 0}]  # fmt: skip
    unknown = b"\xc3\x01" + bytes(8) + b"\x00"
    with pytest.raises(SchemaError, match="pass --schema NAME\\|FILE"):
        _Decoder(TailOptions("out"), io.StringIO()).decode([FakeMessage(unknown, 0, 0, None)])


def test_tail_reads_the_registry_wire_format_with_the_writer_schema_by_id() -> None:
    from topics.avro import RegistryCodec

    url = "mock://publish-tail-unit"
    writer = RecordCodec(SCHEMA, registry=RegistryCodec(url, subject="out-value"))
    rec = {**GOOD, "raw": b"\xff\x01"}
    value = writer.encode_many(RecordParser(SCHEMA).json_chunk([line()], 1).columns, 1)[0]
    assert value[0] == 0  # Confluent magic byte, then the schema id
    decoder = _Decoder(TailOptions("out", registry_url=url), io.StringIO())
    decoder.registry = writer.registry  # mock registries are per client: share the writer's
    got = decoder.decode([FakeMessage(value.tobytes(), 2, 9, None)])
    assert got == [{**rec, "kind": "B", "raw": "\u00ff\u0001", "_sign": 1, "_partition": 2,
                    "_offset": 9}]  # fmt: skip
