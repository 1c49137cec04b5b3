"""Nested records in queries: fields of nested records are dotted columns (``loc.lat``), named
as the bulk codec names them, in filters, joins, GROUP BY, aggregates, select and PARTITION BY.

Input batches are what a worker gets: records encoded one by one, then decoded in bulk by
:class:`RecordCodec` of the stream's schema. Results go through the sink's encoder
(``RecordCodec(plan.output_schema).encode_many``) and fastavro reads them back as nested
records, compared with a plain-Python oracle over the input's nested dicts.
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from typing import Any

import fastavro
import numpy as np
import pytest

from processors.core.batch import Batch
from processors.core.plan import ColumnRef, QueryError
from processors.core.query import Query, col
from processors.core.schema_derivation import parse_fields
from processors.physical.runner import QueryRunner
from topics.avro import encode_single_object, single_object_header
from topics.avro_layout import flat_fields
from topics.columnar import RecordCodec

READING = {
    "type": "record", "name": "Reading", "namespace": "test.nested",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": "long"},
        {"name": "loc", "type": {"type": "record", "name": "Loc", "fields": [
            {"name": "lat", "type": "double"},
            {"name": "lon", "type": "double"},
            {"name": "tag", "type": ["null", "string"], "default": None},
        ]}},
        {"name": "meta", "type": {"type": "record", "name": "Meta", "fields": [
            {"name": "site", "type": "string"},
            {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [
                {"name": "level", "type": "int"},
                {"name": "code", "type": ["long", "null"]},
            ]}},
        ]}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    ],
}  # fmt: skip
SITE = {
    "type": "record", "name": "Site", "namespace": "test.nested",
    "fields": [
        {"name": "name", "type": "string"},
        {"name": "info", "type": {"type": "record", "name": "Info", "fields": [
            {"name": "region", "type": "string"},
            {"name": "zone", "type": {"type": "record", "name": "Zone", "fields": [
                {"name": "id", "type": "int"},
                {"name": "label", "type": ["null", "string"], "default": None},
            ]}},
        ]}},
    ],
}  # fmt: skip
REUSED = {
    "type": "record", "name": "Trip", "namespace": "test.trip",
    "fields": [
        {"name": "start", "type": {"type": "record", "name": "Point", "namespace": "geo",
                                   "fields": [
            {"name": "x", "type": "int"},
            {"name": "c", "type": {"type": "enum", "name": "Col", "symbols": ["R", "G"]}},
        ]}},
        {"name": "end", "type": "geo.Point"},
        {"name": "via", "type": ["null", "geo.Col"], "default": None},
        {"name": "a", "type": {"type": "record", "name": "A", "fields": [
            {"name": "b", "type": {"type": "record", "name": "B", "fields": [
                {"name": "c", "type": ["null", "bytes"]},
                {"name": "d", "type": {"type": "record", "name": "D", "fields": [
                    {"name": "e", "type": "float"}]}},
            ]}},
            {"name": "f", "type": "boolean"},
        ]}},
    ],
}  # fmt: skip
SITES = ("a", "b", "c", "d")


def reading(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "id": i,
        "ts": i * 10,
        "loc": {
            "lat": round(rng.uniform(-5, 5), 3),
            "lon": round(rng.uniform(-5, 5), 3),
            "tag": rng.choice([None, "x", "y"]),
        },
        "meta": {
            "site": rng.choice(SITES),
            "inner": {"level": rng.randrange(6), "code": rng.choice([None, *range(20)])},
        },
        "kind": rng.choice("ABC"),
    }


def site(rng: random.Random, i: int) -> dict[str, Any]:
    return {
        "name": f"s{i}",
        "info": {
            "region": rng.choice(("north", "south")),
            "zone": {"id": rng.randrange(6), "label": rng.choice([None, "z1", "z2"])},
        },
    }


def worker_batch(schema: dict, records: list[dict[str, Any]]) -> Batch:
    """The batch a worker decodes from these records: bulk decode of single-object messages."""
    messages = [encode_single_object(schema, r) for r in records]
    offsets = np.zeros(len(messages) + 1, np.int64)
    offsets[1:] = np.cumsum([len(m) for m in messages])
    result = RecordCodec(schema).decode_many(b"".join(messages), offsets)
    assert not result.errors and len(result) == len(records)
    ts = result.columns.get("ts")
    return Batch.inserts(result.columns, ts=None if ts is None else np.asarray(ts))


def sink_records(schema: dict, batches: list[Batch]) -> Counter:
    """Net result records (by sign), as the sink encodes them and fastavro reads them."""
    codec = RecordCodec(schema)
    parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
    skip = len(single_object_header(schema))
    net: Counter = Counter()
    for batch in batches:
        buf, offsets = codec.encode_many(batch.columns, len(batch))
        for i, sign in enumerate(batch.sign.tolist()):
            body = io.BytesIO(buf[offsets[i] + skip : offsets[i + 1]].tobytes())
            net[_key(fastavro.schemaless_reader(body, parsed))] += int(sign)
    return +net


def _key(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True)


def run(query: Query, inputs: dict[str, tuple[dict, list[dict[str, Any]]]]) -> tuple[Any, Counter]:
    plan = query.build()
    runner = QueryRunner(plan)
    out: list[Batch] = []
    for name, (schema, records) in inputs.items():
        for start in range(0, len(records), 37):
            out += runner.push(name, worker_batch(schema, records[start : start + 37]))
    out += runner.flush()
    return plan, sink_records(plan.output_schema, out)


@pytest.mark.parametrize("schema", [READING, SITE, REUSED], ids=lambda s: s["name"])
def test_fields_are_the_codec_columns(schema: dict) -> None:
    infos = parse_fields("x", schema)
    leaves = flat_fields(schema)
    assert [f.name for f in infos] == [f.name for f in leaves]
    assert [f.nullable for f in infos] == [f.nullable for f in leaves]
    assert [f.type for f in infos] == [f.type for f in leaves]


def test_references_split_at_the_first_dot() -> None:
    assert col("r.loc.lat").ref == ColumnRef("r", "loc.lat")
    assert col("r.a.b.c").ref == ColumnRef("r", "a.b.c")
    for bad in ("r.loc.", "r..lat", "loc"):
        with pytest.raises(QueryError, match="must look like 'stream.field'"):
            col(bad)


def test_a_nullable_record_is_refused_clearly() -> None:
    schema = {
        "type": "record", "name": "N",
        "fields": [{"name": "loc", "type": ["null", {"type": "record", "name": "L", "fields": [
            {"name": "lat", "type": "double"}]}]}],
    }  # fmt: skip
    with pytest.raises(QueryError, match="field 'loc': a nullable record is not supported"):
        Query("q").stream("r", topic="t", schema=schema)


def test_unknown_nested_field_is_named() -> None:
    q = Query("q").stream("r", topic="t", schema=READING).where(col("r.loc.alt") > 1).into("o")
    with pytest.raises(QueryError, match="stream 'r' has no field 'loc.alt'"):
        q.build()


@pytest.mark.parametrize("seed", range(3))
def test_filter_on_nested_fields_keeps_the_input_schema(seed: int) -> None:
    rng = random.Random(seed)
    records = [reading(rng, i) for i in range(200)]
    q = Query("nested-filter").stream("r", topic="readings", schema=READING, timestamp="ts")
    q.where(col("r.loc.lat") > 0.0, col("r.meta.inner.code") >= 5, col("r.loc.tag").is_null())
    plan, got = run(q.into("out"), {"r": (READING, records)})
    assert plan.output_schema == READING
    want = Counter(
        _key(r)
        for r in records
        if r["loc"]["lat"] > 0.0
        and r["meta"]["inner"]["code"] is not None
        and r["meta"]["inner"]["code"] >= 5
        and r["loc"]["tag"] is None
    )
    assert got == want and want


@pytest.mark.parametrize("seed", range(3))
def test_projection_of_nested_fields(seed: int) -> None:
    rng = random.Random(seed)
    records = [reading(rng, i) for i in range(150)]
    q = Query("nested-select").stream("r", topic="readings", schema=READING)
    q.where(col("r.meta.site").isin({"a", "b"}))
    q.select("r.id", "r.loc.lat", "r.meta.inner.code", "r.loc.tag", site="r.meta.site")
    plan, got = run(q.into("out"), {"r": (READING, records)})
    names = [f["name"] for f in plan.output_schema["fields"]]
    assert names == ["id", "loc_lat", "meta_inner_code", "loc_tag", "site"]
    want = Counter(
        _key({"id": r["id"], "loc_lat": r["loc"]["lat"], "meta_inner_code":
              r["meta"]["inner"]["code"], "loc_tag": r["loc"]["tag"], "site": r["meta"]["site"]})
        for r in records
        if r["meta"]["site"] in ("a", "b")
    )  # fmt: skip
    assert got == want and want


@pytest.mark.parametrize("seed", range(3))
def test_join_on_nested_fields(seed: int) -> None:
    rng = random.Random(seed)
    rs = [reading(rng, i) for i in range(120)]
    ss = [site(rng, i) for i in range(15)]
    q = Query("nested-join")
    q.stream("r", topic="readings", schema=READING).stream("s", topic="sites", schema=SITE)
    q.join("r.meta.inner.level", "s.info.zone.id")
    q.where(col("s.info.region") == "north")
    q.select("r.id", "r.loc.lon", "s.name", "s.info.zone.label", zone="s.info.zone.id")
    plan, got = run(q.into("out"), {"r": (READING, rs), "s": (SITE, ss)})
    assert [f["name"] for f in plan.output_schema["fields"]] == [
        "id", "loc_lon", "name", "info_zone_label", "zone",
    ]  # fmt: skip
    want = Counter(
        _key({"id": r["id"], "loc_lon": r["loc"]["lon"], "name": s["name"],
              "info_zone_label": s["info"]["zone"]["label"], "zone": s["info"]["zone"]["id"]})
        for r in rs
        for s in ss
        if r["meta"]["inner"]["level"] == s["info"]["zone"]["id"]
        and s["info"]["region"] == "north"
    )  # fmt: skip
    assert got == want and want


def test_join_without_select_names_nested_fields_with_underscores() -> None:
    q = Query("nested-join-all")
    q.stream("r", topic="readings", schema=READING).stream("s", topic="sites", schema=SITE)
    q.join("r.meta.site", "s.name")
    plan = q.into("out").build()
    names = [f["name"] for f in plan.output_schema["fields"]]
    assert names[:5] == ["id", "ts", "loc_lat", "loc_lon", "loc_tag"]
    assert "meta_inner_code" in names and "info_zone_label" in names
    assert all("." not in n for n in names)


@pytest.mark.parametrize("seed", range(3))
def test_group_by_a_nested_field(seed: int) -> None:
    rng = random.Random(seed)
    records = [reading(rng, i) for i in range(250)]
    q = Query("nested-group").stream("r", topic="readings", schema=READING)
    q.group_by("r.meta.site", "r.loc.tag")
    q.aggregate(n="count", top=("max", "r.loc.lat"), codes=("count", "r.meta.inner.code"))
    plan, got = run(q.into("out"), {"r": (READING, records)})
    (meta, loc, *_) = plan.output_schema["fields"]
    assert meta["name"] == "meta" and loc["name"] == "loc"
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["meta"]["site"], r["loc"]["tag"]), []).append(r)
    want = Counter(
        _key({"meta": {"site": s}, "loc": {"tag": tag}, "n": len(rows),
              "top": max(r["loc"]["lat"] for r in rows),
              "codes": sum(r["meta"]["inner"]["code"] is not None for r in rows)})
        for (s, tag), rows in groups.items()
    )  # fmt: skip
    assert got == want


def test_group_by_nested_field_clashing_with_an_aggregate_is_refused() -> None:
    q = Query("q").stream("r", topic="readings", schema=READING)
    q.group_by("r.loc.lat").aggregate(loc="count")
    with pytest.raises(QueryError, match="result field 'loc' is given twice"):
        q.into("o").build()


def test_rows_window_partitioned_by_a_nested_field() -> None:
    rng = random.Random(7)
    records = [reading(rng, i) for i in range(100)]
    q = Query("nested-window").stream("r", topic="readings", schema=READING, timestamp="ts")
    q.window("r", rows=3, partition_by="meta.site")
    plan = q.into("out").build()
    assert plan.windows["r"].partition_by == ("meta.site",)
    runner = QueryRunner(plan)
    out = runner.push("r", worker_batch(READING, records))
    got = sink_records(plan.output_schema, out)
    want: Counter = Counter()
    for s in SITES:
        want.update(_key(r) for r in [r for r in records if r["meta"]["site"] == s][-3:])
    assert got == want
