"""Arithmetic in the select list (processors/core/expressions.py) against a row-by-row Python
oracle, through the whole projection and the result encoding, read back by the apache ``avro``
package (the reference implementation).

Random expressions over the reading schema's numeric fields (long, double, float, a nullable
float) and constants: each result row must be the oracle's value (None where an operand is null
or a divisor is zero), with the type the oracle's promotion rules give.
"""

from __future__ import annotations

import io
import json
import math

import avro.io
import avro.schema
import numpy as np
import pytest
from helpers import reading_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processors.core.columns import col
from processors.core.expressions import Arith, ColExpr, Lit, Neg, Ref
from processors.core.plan import ColumnRef, QueryError
from processors.core.query import Query
from processors.cql import CqlError
from processors.physical.runner import QueryRunner
from topics.avro import load_schema
from topics.columnar import RecordCodec

NUMERIC = ("sensor_id", "temperature", "humidity", "battery")  # long, double, float, float|null
INTEGER = {"sensor_id"}


@st.composite
def expressions(draw: st.DrawFn, depth: int = 3):  # type: ignore[no-untyped-def]
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        if draw(st.booleans()):
            return Ref(ColumnRef("r", draw(st.sampled_from(NUMERIC))))
        if draw(st.booleans()):
            return Lit(draw(st.integers(-5, 5)))
        return Lit(draw(st.sampled_from([0.5, -1.25, 2.0, 0.0])))
    if draw(st.integers(0, 5)) == 0:
        return Neg(draw(expressions(depth - 1)))
    op = draw(st.sampled_from(["+", "-", "*", "/", "%"]))
    return Arith(op, draw(expressions(depth - 1)), draw(expressions(depth - 1)))


def oracle(e, row: dict):  # type: ignore[no-untyped-def]
    """(value or None, is it an integer) of ``e`` on one row, in plain Python."""
    if isinstance(e, Lit):
        return e.value, isinstance(e.value, int)
    if isinstance(e, Ref):
        return row[e.ref.field], e.ref.field in INTEGER
    if isinstance(e, Neg):
        v, integer = oracle(e.arg, row)
        return (None if v is None else -v), integer
    (a, ai), (b, bi) = oracle(e.left, row), oracle(e.right, row)
    integer = ai and bi and e.op != "/"
    if a is None or b is None or (e.op in "/%" and b == 0):
        return None, integer
    if e.op == "/":
        return float(a) / float(b), False
    if e.op == "%":
        return (int(math.fmod(a, b)) if integer else math.fmod(float(a), float(b))), integer
    value = {"+": a + b, "-": a - b, "*": a * b}[e.op]
    return (value if integer else float(value)), integer


def _apache_rows(schema: dict, data: np.ndarray, offsets: np.ndarray) -> list[dict]:
    parsed = avro.schema.parse(json.dumps(schema))
    reader = avro.io.DatumReader(parsed, parsed)
    rows = []
    for i in range(len(offsets) - 1):
        body = bytes(data[offsets[i] + 10 : offsets[i + 1]])  # past the single-object header
        rows.append(reader.read(avro.io.BinaryDecoder(io.BytesIO(body))))
    return rows


def _query(**select: object) -> Query:
    q = Query("arith")
    q.stream("r", topic="readings", schema=load_schema("reading"), timestamp="ts")
    return q.select("r.sensor_id", **select).into("out")  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(e=expressions(), seed=st.integers(0, 1000))
def test_random_arithmetic_equals_the_python_oracle_through_avro(e, seed: int) -> None:  # type: ignore[no-untyped-def]
    if not any(isinstance(x, Ref) for x in _walk(e)):
        e = Arith("+", e, Ref(ColumnRef("r", "sensor_id")))
    plan = _query(x=ColExpr(e)).build()
    batch = reading_batch(40, seed, 1_000)
    batch.columns["temperature"][::7] = 0.0  # zero divisors
    out = QueryRunner(plan).push("r", batch)
    assert len(out) == 1 and len(out[0]) == 40
    data, offsets = RecordCodec(plan.output_schema).encode_many(out[0].columns, 40)
    rows = _apache_rows(plan.output_schema, data, offsets)
    for i, got in enumerate(rows):
        source = {
            "sensor_id": int(batch.columns["sensor_id"][i]),
            "temperature": float(batch.columns["temperature"][i]),
            "humidity": float(batch.columns["humidity"][i]),
            "battery": None if batch.columns["battery?"][i] else float(batch.columns["battery"][i]),
        }
        want, integer = oracle(e, source)
        field = next(f for f in plan.output_schema["fields"] if f["name"] == "x")
        assert ("long" if integer else "double") in json.dumps(field["type"])
        if want is None or got["x"] is None:
            assert got["x"] is want, (str(e), source)
        elif integer:
            assert got["x"] == want, (str(e), source)
        else:
            assert got["x"] == pytest.approx(want, rel=1e-12, abs=1e-12), (str(e), source)


def _walk(e):  # type: ignore[no-untyped-def]
    yield e
    if isinstance(e, Arith):
        yield from _walk(e.left)
        yield from _walk(e.right)
    elif isinstance(e, Neg):
        yield from _walk(e.arg)


def test_python_and_cql_build_the_same_plan() -> None:
    catalog = (
        "CREATE STREAM readings WITH (schema = 'reading', topic = 'readings', timestamp = 'ts');"
    )
    text = """SELECT r.sensor_id, r.temperature * 1.8 + 32 AS fahrenheit,
                     -(r.sensor_id % 4) AS bucket, r.battery / r.humidity AS ratio
              FROM readings AS r INTO 'out';"""
    from_cql = Query.from_cql(text, catalog)
    from_cql.name = "arith"
    python = _query(
        fahrenheit=col("r.temperature") * 1.8 + 32,
        bucket=-(col("r.sensor_id") % 4),
        ratio=col("r.battery") / col("r.humidity"),
    )
    assert from_cql.build() == python.build()
    types = {f["name"]: f["type"] for f in python.build().output_schema["fields"]}
    assert types == {"sensor_id": "long", "fahrenheit": "double", "bucket": ["null", "long"],
                     "ratio": ["null", "double"]}  # fmt: skip
    assert 2 * col("r.ts") - 1 is not None and (10 / col("r.ts")).expr == Arith(
        "/", Lit(10), Ref(ColumnRef("r", "ts"))
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("SELECT r.sensor_id, r.site * 2 AS x FROM readings AS r", "r.site is string"),
        ("SELECT r.sensor_id, r.ok + 1 AS x FROM readings AS r", "r.ok is boolean"),
        ("SELECT r.sensor_id, r.temperature * 2 FROM readings AS r", "name a computed column"),
        ("SELECT r.sensor_id, abs(r.temperature) AS x FROM readings AS r", "select list takes"),
        ("SELECT r.sensor_id, r.temperature * 'a' AS x FROM readings AS r", "arithmetic takes"),
        ("SELECT r.sensor_id, count(*) AS n, r.sensor_id + 1 AS x FROM readings AS r "
         "GROUP BY r.sensor_id", "arithmetic with GROUP BY"),
    ],
)  # fmt: skip
def test_arithmetic_that_makes_no_sense_is_a_positioned_error(text: str, message: str) -> None:
    catalog = (
        "CREATE STREAM readings WITH (schema = 'reading', topic = 'readings', timestamp = 'ts');"
    )
    with pytest.raises(CqlError, match=message) as info:
        Query.from_cql(text + ";", catalog).build()
    assert info.value.line == 1 and info.value.col > 1


def test_constants_only_and_non_numbers_are_refused_in_python() -> None:
    with pytest.raises(QueryError, match="constants only"):
        _query(x=ColExpr(Arith("+", Lit(1), Lit(2)))).build()
    with pytest.raises(QueryError, match="not a number"):
        _ = col("r.temperature") * "2"
    with pytest.raises(QueryError, match="not a number"):
        _ = col("r.temperature") + True
