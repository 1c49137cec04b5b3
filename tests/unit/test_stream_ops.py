"""CQL's ISTREAM and DSTREAM (Query.emit), in process: a window join's result stream with
ISTREAM is exactly the inserts of its change stream, with DSTREAM exactly its deletes (as plain
records), and a single unwindowed stream still gets the projection step that applies them."""

from __future__ import annotations

from collections import Counter

import pytest

from processors.core.batch import Batch
from processors.core.plan import QueryError
from processors.core.query import Query
from processors.cql import parse_cql
from processors.physical.compiler import compile_plan, is_simple
from processors.physical.runner import QueryRunner
from processors.workloads.examples import reading_columns

CATALOG = """
CREATE STREAM r WITH (schema = 'reading', topic = 'r', key = 'sensor_id', timestamp = 'ts');
CREATE STREAM s WITH (schema = 'reading', topic = 's', key = 'sensor_id', timestamp = 'ts');
"""
JOIN = """SELECT {op} r.sensor_id, r.ts, s.ts AS s_ts FROM r [RANGE 2 SECONDS], s [ROWS 50]
          WHERE r.sensor_id = s.sensor_id INTO 'out';"""


def rows(batches: list[Batch]) -> Counter:
    out: Counter = Counter()
    for b in batches:
        cols = [b.columns[c].tolist() for c in ("sensor_id", "ts", "s_ts")]
        for sign, *values in zip(b.sign.tolist(), *cols, strict=True):
            out[(sign, *values)] += 1
    return out


def run(op: str) -> Counter:
    plan = parse_cql(JOIN.format(op=op), CATALOG).query().build()
    runner = QueryRunner(plan)
    out: list[Batch] = []
    for i in range(6):
        for name, seed in (("r", i), ("s", 100 + i)):
            batch = reading_columns(400, seed=seed, start_ms=1_700_000_000_000 + 4_000 * i)
            batch.columns["sensor_id"] = batch.columns["sensor_id"] % 40
            out += runner.push(name, batch)
    out += runner.flush()
    return rows(out)


def test_istream_and_dstream_split_the_change_stream() -> None:
    changes, inserts, deletes = run(""), run("ISTREAM"), run("DSTREAM")
    assert sum(v for k, v in changes.items() if k[0] < 0) > 100  # the windows expire results
    assert inserts == Counter({k: v for k, v in changes.items() if k[0] > 0})
    assert deletes == Counter({(1, *k[1:]): v for k, v in changes.items() if k[0] < 0})


def test_a_single_stream_with_a_stream_operator_is_projected() -> None:
    plan = parse_cql("SELECT ISTREAM * FROM r;", CATALOG).query().build()
    assert plan.stream_op == "istream" and not is_simple(plan)
    assert any(n.kind == "project" for step in compile_plan(plan).steps for n in step.nodes)


def test_emit_refuses_what_it_does_not_know() -> None:
    with pytest.raises(QueryError, match="rstream"):
        Query("q").emit("rstream")
    with pytest.raises(QueryError, match="given twice"):
        Query("q").emit("istream").emit("dstream")
