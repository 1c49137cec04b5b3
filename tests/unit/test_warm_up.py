"""The worker's kernel warm-up (processors/runtime/warm_up.py): synthetic records that are
valid Avro of the stream's schema, a run of the query that reaches its kernels, and a warm-up
that never stops a worker from starting."""

from __future__ import annotations

import io
import json
import logging

import avro.io
import avro.schema
import numpy as np
import pytest

from processors.core.batch import null_column
from processors.core.query import Query, col
from processors.kernels import multimap
from processors.runtime import warm_up
from processors.runtime.warm_up import synthetic_batch, warm_kernels
from topics.avro import load_schema, single_object_header
from topics.columnar import RecordCodec

SCHEMA = {
    "type": "record", "name": "Everything", "namespace": "t",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "n", "type": "int"},
        {"name": "x", "type": "double"},
        {"name": "f", "type": "float"},
        {"name": "s", "type": "string"},
        {"name": "b", "type": "bytes"},
        {"name": "ok", "type": "boolean"},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["P", "Q", "R"]}},
        {"name": "maybe", "type": ["null", "long"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}  # fmt: skip


def test_synthetic_records_are_valid_avro_that_count_up() -> None:
    codec = RecordCodec(SCHEMA)
    batch = synthetic_batch(codec.fields, start=10, n=5, rng=np.random.default_rng(1))
    buf, offsets = codec.encode_many(batch.columns, 5)
    reader = avro.io.DatumReader(avro.schema.parse(json.dumps(SCHEMA)))  # the reference
    header = len(single_object_header(SCHEMA))
    rows = []
    for i in range(5):
        body = buf[offsets[i] + header : offsets[i + 1]].tobytes()
        rows.append(reader.read(avro.io.BinaryDecoder(io.BytesIO(body))))
    assert [r["id"] for r in rows] == [10, 11, 12, 13, 14]
    assert [r["n"] for r in rows] == [10, 11, 12, 13, 14]
    assert [r["s"] for r in rows] == ["10", "11", "12", "13", "14"]
    assert [r["e"] for r in rows] == ["Q", "R", "P", "Q", "R"]
    assert all(0 <= r["x"] <= 100 and r["maybe"] == r["id"] and r["tags"] == [] for r in rows)
    assert batch.ts.tolist() == [10, 11, 12, 13, 14]
    assert not batch.columns[null_column("maybe")].any()


def join_plan():
    q = Query("warm")
    for s in "abc":
        q.stream(s, topic=f"warm.{s}", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=2)  # fmt: skip
        q.window(s, range_ms=60_000)
    q.join("a.sensor_id", "b.sensor_id").join("b.sensor_id", "c.sensor_id")
    return q.select(a_ts="a.ts", c_ts="c.ts").into("warm.out", partitions=2).build()


def filter_plan():
    q = Query("warmf").stream("r", topic="warm.r", schema=load_schema("reading"), partitions=3)
    return q.where(col("r.temperature") < 25).into("warm.rout").build()


@pytest.mark.parametrize("make", [join_plan, filter_plan], ids=["join", "fused filter"])
def test_the_query_runs_in_process_and_its_kernels_are_compiled(make, caplog) -> None:
    caplog.set_level(logging.INFO)
    warm_kernels(make(), rows=3_000)
    if make is join_plan:
        assert multimap.mm_insert.signatures and multimap.mm_expand.signatures
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("kernels warmed in") for m in messages), messages
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], messages
    # the throwaway stages' own logs (join orders, profiles) are not the worker's
    assert not [r for r in caplog.records if r.name.startswith("processors.stages")]


def test_a_failing_warm_up_is_logged_and_the_worker_goes_on(
    caplog, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fails(self, stream, partition, batch):  # noqa: ANN001, ANN202
        raise ValueError(f"no {stream}")

    monkeypatch.setattr(warm_up.FleetRunner, "push", fails)
    caplog.set_level(logging.INFO)
    assert warm_kernels(join_plan(), rows=500) >= 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "kernel warm-up skipped (ValueError: no a); kernels compile on first use" in warnings
    assert logging.getLogger("processors").isEnabledFor(logging.INFO)  # logging given back


def test_the_warm_up_stops_at_its_budget(caplog, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warm_up, "WARM_BUDGET_S", -1.0)
    caplog.set_level(logging.INFO)
    warm_kernels(join_plan(), rows=10_000)
    assert any("stopped at 0 records a stream" in r.getMessage()
               for r in caplog.records)  # fmt: skip
