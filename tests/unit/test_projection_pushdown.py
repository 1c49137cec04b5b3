"""Projection pushdown: ingest decodes only the fields a query reads (processors.core.plan_columns,
RecordCodec.projected), checked against the apache ``avro`` package's reading of the same records
and against the stages' own needs (the layout probe and the in-process warm-up run the worker's
path with the projected columns)."""

from __future__ import annotations

import io
import json
import logging

import avro.io
import avro.schema
import numpy as np
import pytest

from processors.core.batch import null_column
from processors.core.plan_columns import read_fields
from processors.core.query import Query, col
from processors.runtime.ingest import input_codec
from processors.runtime.layouts import expected_layouts
from processors.runtime.warm_up import synthetic_batch, warm_kernels
from topics.avro import SchemaError, load_schema, single_object_header
from topics.columnar import RecordCodec

READING = load_schema("reading")


def join_plan(select: dict[str, str] | None = None):
    q = Query("pp")
    for s in "abc":
        q.stream(s, topic=f"pp.{s}", schema=READING, key="sensor_id", timestamp="ts",
                 partitions=2)  # fmt: skip
        q.window(s, range_ms=60_000)
    q.join("a.sensor_id", "b.sensor_id").join("b.sensor_id", "c.sensor_id")
    q.where(col("b.temperature") < 30.0)
    return q.select(**(select or {"a_ts": "a.ts", "c_site": "c.site"})).into("pp.out").build()


def test_a_join_reads_its_keys_filters_projection_and_event_time() -> None:
    plan = join_plan()
    assert read_fields(plan, "a") == {"sensor_id", "ts"}
    assert read_fields(plan, "b") == {"sensor_id", "ts", "temperature"}
    assert read_fields(plan, "c") == {"sensor_id", "ts", "site"}


def test_a_group_by_reads_its_groups_and_aggregates_a_nullable_filter_its_field() -> None:
    q = Query("g").stream("r", topic="g.r", schema=READING, timestamp="ts")
    q.where(col("r.battery").is_null())
    q.group_by("r.site").aggregate(n="count", hot=("max", "r.temperature"))
    plan = q.into("g.out").build()
    assert read_fields(plan, "r") == {"site", "temperature", "ts", "battery"}


def test_a_plan_with_operators_keeps_every_field() -> None:
    q = Query("o").stream("r", topic="o.r", schema=READING)
    q.operator("busy", cost_us=1.0, selectivity=0.5, key="r.sensor_id")
    plan = q.into("o.out").build()
    assert read_fields(plan, "r") is None


def test_a_projected_codec_reads_what_apache_avro_reads_of_the_kept_fields() -> None:
    full = RecordCodec(READING)
    part = full.projected({"sensor_id", "battery", "site"})
    assert [f.name for f in part.fields] == ["sensor_id", "site", "battery"]
    batch = synthetic_batch(full.fields, start=7, n=6, rng=np.random.default_rng(3))
    batch.columns[null_column("battery")][::2] = True
    buf, offsets = part.encode_many(batch.columns, 6)  # whole records, as the full codec
    got = part.decode_many(buf, offsets)
    assert not got.errors and set(got.columns) == {"sensor_id", "site", "battery", "battery?"}
    reader = avro.io.DatumReader(avro.schema.parse(json.dumps(READING)))  # the reference
    skip = len(single_object_header(READING))
    rows = [
        reader.read(avro.io.BinaryDecoder(io.BytesIO(buf[offsets[i] + skip : offsets[i + 1]]
                                                      .tobytes())))
        for i in range(6)
    ]  # fmt: skip
    assert got.columns["sensor_id"].tolist() == [r["sensor_id"] for r in rows]
    assert got.columns["site"].to_list() == [r["site"] for r in rows]
    assert got.columns["battery?"].tolist() == [r["battery"] is None for r in rows]
    kept = ~got.columns["battery?"]
    want = [r["battery"] for r in rows if r["battery"] is not None]
    assert got.columns["battery"][kept].tolist() == pytest.approx(want)


def test_a_projection_of_every_field_is_the_codec_itself() -> None:
    full = RecordCodec(READING)
    assert full.projected({f["name"] for f in READING["fields"]}) is full


def test_a_projection_that_drops_a_named_types_definition_falls_back_to_every_field() -> None:
    schema = {
        "type": "record", "name": "Twice", "namespace": "pp.test",
        "fields": [
            {"name": "first", "type": {"type": "enum", "name": "Mood", "symbols": ["A", "B"]}},
            {"name": "second", "type": "pp.test.Mood"},
            {"name": "ts", "type": "long"},
        ],
    }  # fmt: skip
    with pytest.raises(SchemaError):
        RecordCodec(schema).projected({"second", "ts"})
    q = Query("t").stream("r", topic="t.r", schema=schema, timestamp="ts")
    plan = q.select(s="r.second").into("t.out").build()
    assert [f.name for f in input_codec(plan, plan.streams[0]).fields] == ["first", "second", "ts"]


def test_the_layout_probe_and_the_warm_up_use_the_projected_columns(caplog) -> None:
    plan = join_plan()
    layouts = expected_layouts(plan)
    assert dict(layouts["streamon.pp.ingest.b"]).keys() == {"sensor_id", "ts", "temperature"}
    assert dict(layouts["streamon.pp.ingest.c"]).keys() == {"sensor_id", "ts", "site"}
    caplog.set_level(logging.INFO)
    warm_kernels(plan, rows=500)  # the worker's path in process, on the projected columns
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("kernels warmed in") for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], messages
