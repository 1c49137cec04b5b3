"""spark_bridge without Spark or a broker: options, schemas, decoding to Arrow, the connector's
batch conversion, skip accounting, time bounds, plots. fastavro is the decoding oracle."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
from pathlib import Path

import fastavro
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from processors.commands.analyze import default_keys, spark_error_line
from processors.core.query import Query
from spark_bridge import plots
from spark_bridge.analytics import to_ms
from spark_bridge.arrow_decode import BadRecordError, ChunkDecoder
from spark_bridge.bad_records import _RangeLogParam, summarize
from spark_bridge.connector import connector_options, decode_kafka_batches, header_signs
from spark_bridge.kafka_range import parse_sign
from spark_bridge.options import META_COLUMNS, OptionError, parse_options, parse_schema_option
from spark_bridge.schema import arrow_schema, spark_schema
from spark_bridge.source import OffsetRange
from topics.avro import load_schema, single_object_header

SCHEMA = {
    "type": "record",
    "name": "Unit",
    "namespace": "streamon.test",
    "fields": [
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "s", "type": "string"},
        {"name": "y", "type": "bytes"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
    ],
}
RECORDS = [
    {"b": True, "i": -5, "l": 2**40, "f": 1.5, "d": -2.25, "s": "héllo", "y": b"\x00", "e": "C"},
    {"b": False, "i": 7, "l": -1, "f": 0.0, "d": 1e300, "s": "", "y": b"", "e": "A"},
    {"b": True, "i": 0, "l": 3, "f": -3.5, "d": 0.5, "s": "x" * 200, "y": b"abc", "e": "B"},
]  # fmt: skip


def _message(record: dict, schema: dict = SCHEMA) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(json.loads(json.dumps(schema))), record)
    return single_object_header(schema) + body.getvalue()


def _decoder(columns: list[str] | None = None) -> ChunkDecoder:
    target = arrow_schema(spark_schema(SCHEMA))
    if columns is not None:
        target = pa.schema([target.field(c) for c in columns])
    return ChunkDecoder(SCHEMA, None, target)


def _decode(values: list[bytes | None], decoder: ChunkDecoder | None = None, **kw):
    n = len(values)
    return (decoder or _decoder()).decode(
        kw.get("topic", "t"), kw.get("partition", 2), pa.array(values, pa.binary()),
        pa.array(kw.get("keys", [b"k"] * n), pa.binary()),
        np.arange(100, 100 + n, dtype=np.int64), np.arange(n, dtype=np.int64) * 1000 + 5,
        kw.get("signs", np.ones(n, np.int8)), kw.get("header_errors", ()),
    )  # fmt: skip


# --- options -------------------------------------------------------------------------------


def test_options_parse_and_name_what_is_wrong() -> None:
    opts = parse_options(
        {
            "topic": "t",
            "bootstrap": "h:1",
            "partitions": "2, 0",
            "startingOffsets": '{"t": {"0": 5}}',
            "endingOffsets": '{"0": 9, "2": 4}',
            "onBadRecord": "SKIP",
            "kafka.fetch.wait.max.ms": "10",
            "schema": "reading",
        }
    )
    assert opts.partitions == (0, 2) and opts.starting == {0: 5} and opts.ending == {0: 9, 2: 4}
    assert opts.on_bad_record == "skip" and opts.consumer == {"fetch.wait.max.ms": "10"}
    assert opts.schema == load_schema("reading")
    assert parse_options({"topic": "t", "kafka.bootstrap.servers": "h:2"}).bootstrap == "h:2"
    bad = [
        ({"bootstrap": "h"}, "option topic is required"),
        ({"topic": "t"}, "option bootstrap is required"),
        ({"topic": "t", "bootstrap": "h", "startingOffsets": "{x"}, "startingOffsets: not"),
        ({"topic": "t", "bootstrap": "h", "endingOffsets": '{"0": -1}'}, "is negative"),
        ({"topic": "t", "bootstrap": "h", "startingOffsets": '{"0": 9}',
          "endingOffsets": '{"0": 3}'}, "after endingOffsets"),
        ({"topic": "t", "bootstrap": "h", "onBadRecord": "drop"}, "not one of fail, skip"),
        ({"topic": "t", "bootstrap": "h", "partitions": "a"}, "not a list of ints"),
        ({"topic": "t", "bootstrap": "h", "maxBatchRows": "0"}, "below 1"),
        ({"topic": "t", "bootstrap": "h", "schema": "no_such_schema"}, "no schema"),
    ]  # fmt: skip
    for options, message in bad:
        with pytest.raises(OptionError, match=message):
            parse_options(options)


def test_schema_option_takes_json_a_name_or_a_path() -> None:
    assert parse_schema_option(json.dumps(SCHEMA)) == SCHEMA
    assert parse_schema_option("stats")["name"] == "Stats"
    with pytest.raises(OptionError, match="not valid JSON"):
        parse_schema_option("{nope")


def test_spark_schema_types_and_clashes() -> None:
    schema = spark_schema(SCHEMA)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields] == [
        ("b", "boolean"), ("i", "int"), ("l", "bigint"), ("f", "float"), ("d", "double"),
        ("s", "string"), ("y", "binary"), ("e", "string"), ("_topic", "string"),
        ("_partition", "int"), ("_offset", "bigint"), ("_timestamp", "timestamp"),
        ("_sign", "tinyint"), ("_key", "binary"),
    ]  # fmt: skip
    clash = dict(SCHEMA, fields=[*SCHEMA["fields"], {"name": "_offset", "type": "long"}])
    with pytest.raises(OptionError, match="named like the metadata columns"):
        spark_schema(clash)
    nested = dict(SCHEMA, fields=[{"name": "a", "type": {"type": "array", "items": "int"}}])
    with pytest.raises(OptionError, match="field 'a' has unsupported type"):
        spark_schema(nested)


# --- decoding ------------------------------------------------------------------------------


def test_decoded_batches_equal_fastavro_and_carry_the_metadata() -> None:
    batch, bad = _decode([_message(r) for r in RECORDS], signs=np.array([1, -1, 1], np.int8))
    assert not bad
    assert batch.schema == arrow_schema(spark_schema(SCHEMA))
    rows = batch.to_pylist()
    for row, want in zip(rows, RECORDS, strict=True):
        assert {k: row[k] for k in want} == {**want, "f": pytest.approx(want["f"])}
    assert [r["_offset"] for r in rows] == [100, 101, 102]
    assert [r["_sign"] for r in rows] == [1, -1, 1]
    assert {(r["_topic"], r["_partition"], r["_key"]) for r in rows} == {("t", 2, b"k")}
    assert rows[2]["_timestamp"] == dt.datetime(1970, 1, 1, 0, 0, 2, 5000, tzinfo=dt.UTC)


def test_bad_messages_come_back_with_offsets_and_reasons() -> None:
    good = [_message(r) for r in RECORDS]
    values = [good[0], b"junk", None, good[1][:-2], good[2], good[1]]
    batch, bad = _decode(values, header_errors=[(5, "header streamon.sign is b'?'")])
    assert [r["i"] for r in batch.to_pylist()] == [-5, 0]
    assert batch.column("_offset").to_pylist() == [100, 104]
    assert [(b.offset, b.topic, b.partition) for b in bad] == [
        (101, "t", 2), (102, "t", 2), (103, "t", 2), (105, "t", 2)
    ]  # fmt: skip
    reasons = [b.reason for b in bad]
    assert "not single-object encoded" in reasons[0]
    assert reasons[1].startswith("null value")
    assert "truncated" in reasons[2] or "past the end" in reasons[2]
    assert "streamon.sign" in reasons[3]
    with pytest.raises(BadRecordError, match=r"t\[2\] offset 101: not single-object .*3 more"):
        raise BadRecordError(bad)


def test_a_requested_subset_of_columns_in_any_order() -> None:
    decoder = _decoder(["_offset", "s", "e"])
    batch, _ = _decode([_message(r) for r in RECORDS], decoder)
    assert batch.to_pylist() == [
        {"_offset": 100 + i, "s": r["s"], "e": r["e"]} for i, r in enumerate(RECORDS)
    ]


def test_sign_headers() -> None:
    assert parse_sign([]) == 1
    assert parse_sign([("other", b"-1"), ("streamon.sign", b"-1")]) == -1
    assert parse_sign([("streamon.sign", b"+1")]) == 1
    assert "expected" in str(parse_sign([("streamon.sign", None)]))


# --- the official connector's batches ------------------------------------------------------


def _kafka_batch(values: list[bytes], partitions: list[int], headers: list) -> pa.RecordBatch:
    n = len(values)
    header_type = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * n),
            "partition": pa.array(partitions, pa.int32()),
            "offset": pa.array(list(range(10, 10 + n)), pa.int64()),
            "timestamp": pa.array([1_000_000 * i for i in range(n)], pa.timestamp("us", "UTC")),
            "timestampType": pa.array([0] * n, pa.int32()),
            "headers": pa.array(headers, header_type),
        }
    )


def test_connector_batches_decode_like_the_python_source() -> None:
    values = [_message(r) for r in RECORDS]
    headers = [None, [{"key": "streamon.sign", "value": b"-1"}], [{"key": "x", "value": b"1"}]]
    signs, errors = header_signs(_kafka_batch(values, [0, 0, 1], headers).column("headers"))
    assert signs.tolist() == [1, -1, 1] and errors == []
    run = decode_kafka_batches(SCHEMA, None, spark_schema(SCHEMA), "fail", None)
    out = list(run(iter([_kafka_batch(values, [0, 0, 1], headers)])))
    assert [b.num_rows for b in out] == [2, 1]  # one batch per partition run
    rows = [r for b in out for r in b.to_pylist()]
    assert [(r["_partition"], r["_offset"], r["_sign"], r["s"]) for r in rows] == [
        (0, 10, 1, RECORDS[0]["s"]), (0, 11, -1, RECORDS[1]["s"]), (1, 12, 1, RECORDS[2]["s"])
    ]  # fmt: skip
    assert rows[2]["_timestamp"] == dt.datetime(1970, 1, 1, 0, 0, 2, tzinfo=dt.UTC)
    with pytest.raises(BadRecordError, match=r"t\[0\] offset 11"):
        list(run(iter([_kafka_batch([values[0], b"bad"], [0, 0], [None, None])])))


def test_connector_options_pin_the_planned_offsets() -> None:
    opts = parse_options({"topic": "t", "bootstrap": "h:1", "kafka.client.id": "me"})
    options = connector_options(opts, (OffsetRange("t", 0, None, 7), OffsetRange("t", 2, 3, 9)))
    assert json.loads(options["startingOffsets"]) == {"t": {"0": -2, "2": 3}}
    assert json.loads(options["endingOffsets"]) == {"t": {"0": 7, "2": 9}}
    assert json.loads(options["assign"]) == {"t": [0, 2]}
    assert options["kafka.client.id"] == "me" and options["includeHeaders"] == "true"


# --- accounting, time bounds, plots, command glue -----------------------------------------


def test_skipped_ranges_replace_rather_than_add() -> None:
    param = _RangeLogParam()
    log = param.zero({})
    key = ("t", 0, -1, 10)
    for _ in range(3):  # the same range read by three actions
        log = param.addInPlace(log, {key: (2, ((3, "bad"), (7, "worse")))})
    log = param.addInPlace(log, {("t", 1, 4, 9): (1, ((5, "odd"),))})
    report = summarize(log)
    assert report.total == 3
    assert "t[0] log start..10: 2; first at offset 3: bad" in str(report)
    assert summarize(log, "other").total == 0 and str(summarize({})) == "no records skipped"


def test_time_bounds() -> None:
    assert to_ms(None) is None and to_ms(1234) == 1234 and to_ms("1234") == 1234
    assert to_ms("1970-01-01T00:00:01Z") == 1000
    assert to_ms(dt.datetime(1970, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == 0
    with pytest.raises(ValueError, match="not a time"):
        to_ms("yesterday")


def test_plots_write_pngs(tmp_path: Path) -> None:
    times = pd.to_datetime([1000, 2000, 3000], unit="ms", utc=True)
    series = pd.DataFrame(
        {"time": times, "worker_id": ["w"] * 3, "batches": [1, 2, 3],
         "latency_ms_avg": [1.0, 2, 3], "latency_ms_max": [2.0, 3, 4]}
    )  # fmt: skip
    changes = pd.DataFrame({"time": times, "agent": ["mjoin", "filter", "scheduler"],
                            "subject": ["r1", "filter", "scheduler"], "partition": [0, 1, None],
                            "kind": ["join_order", "filter_order", "priorities"]})  # fmt: skip
    table = pd.DataFrame({"site": ["a", "b"], "count": [3, 4]})
    paths = [
        plots.plot_latency(series, tmp_path / "l.png", "t"),
        plots.plot_plan_changes(changes, tmp_path / "c.png", "t"),
        plots.plot_key_aggregates(table, ["site"], "count", tmp_path / "k.png", "t"),
        plots.plot_key_aggregates(table[["count"]], [], "count", tmp_path / "k0.png", "t"),
    ]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)


def test_analyze_default_keys_follow_the_query() -> None:
    grouped = Query("g")
    grouped.stream("r", topic="in", schema=load_schema("reading"), key="sensor_id")
    grouped.group_by("r.site").aggregate(n="count")
    grouped.into("out")
    assert default_keys(grouped.build()) == ["site"]
    plain = Query("p")
    plain.stream("r", topic="in", schema=load_schema("reading"), key="sensor_id")
    plain.into("out")
    assert default_keys(plain.build()) == ["sensor_id"]


def test_spark_error_line_names_the_python_error() -> None:
    text = "Job aborted\nTraceback:\n  File x\nspark_bridge.arrow_decode.BadRecordError: t[0] bad\n"
    assert (
        spark_error_line(RuntimeError(text)) == "spark_bridge.arrow_decode.BadRecordError: t[0] bad"
    )
    assert META_COLUMNS[0] == "_topic"


def test_analyze_command_arguments() -> None:
    from processors.cli import _analyze, build_parser

    args = build_parser().parse_args(
        ["analyze", "q.py", "--key", "a", "--key", "b", "--since", "0", "--out", "d"]
    )
    assert (args.query, args.key, args.since, args.out, args.func) == (
        "q.py", ["a", "b"], "0", "d", _analyze
    )  # fmt: skip
    args = build_parser().parse_args(["analyze", "--topic", "t", "--on-bad-record", "skip"])
    assert (args.query, args.topic, args.on_bad_record, args.master) == (
        None, "t", "skip", "local[2]"
    )  # fmt: skip


def test_no_java_is_one_clear_line_and_the_demo_only_skips_its_spark_part(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from processors.commands.analyze import demo_analysis
    from spark_bridge import SparkUnavailable, spark_session

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java anywhere
    with pytest.raises(SparkUnavailable, match="no java is on PATH or JAVA_HOME"):
        spark_session()
    said: list[str] = []
    assert demo_analysis("127.0.0.1:1", tmp_path / "q.py", (0, 0), tmp_path, said.append) is None
    assert said[-1].startswith("Spark analysis skipped: Spark needs Java")


def test_confluent_wire_format_through_a_registry() -> None:
    from topics.avro import RegistryCodec, SchemaError

    registry = RegistryCodec("mock://spark-unit")  # the writer side registers
    values = [registry.encode(SCHEMA, r) for r in RECORDS]
    target = arrow_schema(spark_schema(SCHEMA))
    batch, bad = _decode(values, ChunkDecoder(SCHEMA, registry, target))
    assert not bad and batch.column("s").to_pylist() == [r["s"] for r in RECORDS]
    other = dict(SCHEMA, name="NotRegistered")
    with pytest.raises(SchemaError, match="NotRegistered is not registered"):
        ChunkDecoder(other, "mock://spark-unit-empty", arrow_schema(spark_schema(other)))


# --- nullable fields, nested records, fixed and logical types -----------------------------

_DEC = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
_MD5 = {"type": "fixed", "name": "Md5", "size": 4}
RICH = {
    "type": "record", "name": "Rich", "namespace": "streamon.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "s", "type": ["null", "string"], "default": None},
        {"name": "i", "type": ["int", "null"]},
        {"name": "f", "type": ["null", "float"]},
        {"name": "b", "type": ["null", "boolean"]},
        {"name": "y", "type": ["null", "bytes"]},
        {"name": "e", "type": ["null", {"type": "enum", "name": "E2", "symbols": ["X", "Y"]}]},
        {"name": "h", "type": ["null", _MD5]},
        {"name": "h2", "type": "Md5"},
        {"name": "loc", "type": {"type": "record", "name": "Loc", "fields": [
            {"name": "lat", "type": ["null", "double"]},
            {"name": "inner", "type": {"type": "record", "name": "In", "fields": [
                {"name": "z", "type": ["null", "int"]}]}},
        ]}},
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "ms", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "t", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "u", "type": ["null", {"type": "string", "logicalType": "uuid"}]},
        {"name": "amt", "type": ["null", _DEC]},
        {"name": "famt", "type": {"type": "fixed", "name": "F5", "size": 5,
                                  "logicalType": "decimal", "precision": 11, "scale": 3}},
    ],
}  # fmt: skip
_T0 = dt.datetime(2024, 2, 29, 23, 59, 58, 123000, tzinfo=dt.UTC)
RICH_RECORDS = [
    {"id": 1, "s": "a", "i": 5, "f": 1.5, "b": True, "y": b"\x00\xff", "e": "Y", "h": b"abcd",
     "h2": b"\x00\x01\x02\x03", "loc": {"lat": 1.25, "inner": {"z": -3}},
     "day": dt.date(2024, 2, 29), "ms": _T0, "us": _T0 + dt.timedelta(microseconds=456),
     "t": dt.time(1, 2, 3, 4000), "u": "12345678-1234-5678-1234-567812345678",
     "amt": decimal.Decimal("-12345678.90"), "famt": decimal.Decimal("-0.001")},
    {"id": 2, "s": None, "i": None, "f": None, "b": None, "y": None, "e": None, "h": None,
     "h2": b"\xff" * 4, "loc": {"lat": None, "inner": {"z": None}}, "day": None, "ms": None,
     "us": dt.datetime(1960, 1, 1, tzinfo=dt.UTC), "t": dt.time(0, 0), "u": None,
     "amt": None, "famt": decimal.Decimal("99999999.999")},
    {"id": 3, "s": "", "i": -(2**31), "f": -0.0, "b": False, "y": b"", "e": "X", "h": b"\xff" * 4,
     "h2": b"wxyz", "loc": {"lat": -0.5, "inner": {"z": 0}}, "day": dt.date(1969, 12, 31),
     "ms": dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC), "us": _T0,
     "t": dt.time(0, 0),
     "u": "00000000-0000-0000-0000-000000000000", "amt": decimal.Decimal("0.01"),
     "famt": decimal.Decimal("0.000")},
]  # fmt: skip


def _fastavro_read(value: bytes, schema: dict) -> dict:
    body = io.BytesIO(value[len(single_object_header(schema)) :])
    return fastavro.schemaless_reader(body, fastavro.parse_schema(json.loads(json.dumps(schema))))


def test_rich_spark_schema_has_structs_dates_timestamps_and_decimals() -> None:
    schema = spark_schema(RICH)
    assert [(f.name, f.dataType.simpleString()) for f in schema.fields][:17] == [
        ("id", "bigint"), ("s", "string"), ("i", "int"), ("f", "float"), ("b", "boolean"),
        ("y", "binary"), ("e", "string"), ("h", "binary"), ("h2", "binary"),
        ("loc", "struct<lat:double,inner:struct<z:int>>"), ("day", "date"), ("ms", "timestamp"),
        ("us", "timestamp"), ("t", "int"), ("u", "string"), ("amt", "decimal(10,2)"),
        ("famt", "decimal(11,3)"),
    ]  # fmt: skip
    assert all(f.nullable for f in schema.fields)
    wide = dict(RICH, fields=[{"name": "w", "type": dict(_DEC, precision=39)}])
    assert spark_schema(wide).fields[0].dataType.simpleString() == "binary"


def test_nulls_nested_fixed_and_logical_types_decode_like_fastavro() -> None:
    values = [_message(r, RICH) for r in RICH_RECORDS]
    target = arrow_schema(spark_schema(RICH))
    batch, bad = _decode(values, ChunkDecoder(RICH, None, target))
    assert not bad and batch.schema == target
    want = [_fastavro_read(v, RICH) for v in values]  # the oracle's reading of the same bytes
    for w in want:
        w["u"] = None if w["u"] is None else str(w["u"])
        w["t"] = (w["t"].hour * 3600 + w["t"].minute * 60 + w["t"].second) * 1000 + (
            w["t"].microsecond // 1000)  # fmt: skip
    rows = [{k: r[k] for k in want[0]} for r in batch.to_pylist()]
    assert rows == want
    assert rows[1]["s"] is None and rows[1]["loc"] == {"lat": None, "inner": {"z": None}}
    assert batch.column("amt").null_count == 1 and batch.column("id").null_count == 0
    # a subset, with one bad message in the middle: validity stays aligned with the rows
    sub = ChunkDecoder(RICH, None, pa.schema([target.field(c) for c in ("loc", "i", "_offset")]))
    batch, bad = _decode([values[0], b"junk", values[1], values[2]], sub)
    assert [b.offset for b in bad] == [101]
    assert batch.to_pylist() == [
        {"loc": w["loc"], "i": w["i"], "_offset": o}
        for w, o in zip(want, (100, 102, 103), strict=True)
    ]


def test_rich_connector_batches_keep_nulls() -> None:
    values = [_message(r, RICH) for r in RICH_RECORDS]
    run = decode_kafka_batches(RICH, None, spark_schema(RICH), "fail", None)
    out = list(run(iter([_kafka_batch(values, [0, 0, 0], [None] * 3)])))
    rows = [r for b in out for r in b.to_pylist()]
    assert [r["ms"] for r in rows] == [r["ms"] for r in RICH_RECORDS]
    assert [r["amt"] for r in rows] == [r["amt"] for r in RICH_RECORDS]
    assert [r["h"] for r in rows] == [r["h"] for r in RICH_RECORDS]
