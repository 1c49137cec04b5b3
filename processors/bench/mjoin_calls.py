"""What one call of a small join costs: the eager 3-way RANGE join of ``bench latency``, in
process (:class:`processors.physical.runner.QueryRunner`), fed a few tuples per stream a call,
as a worker paced well below its capacity feeds it. Per-call costs, not per-tuple ones, decide
that worker's load (docs/benchmarks.md, "What a call costs").

``eager_call_us_5`` / ``_100``: microseconds per push of 5 / 100 tuples of one stream (through
the stream's merge and window, the join and the projection), each stream in turn, a 10 ms tick
per round, keys recurring about once per 1 s window.
"""

from __future__ import annotations

import time

import numpy as np

from processors.core.batch import Batch
from processors.core.plan import LogicalPlan
from processors.core.query import Query
from processors.physical.runner import QueryRunner
from processors.workloads.examples import reading_columns
from topics.avro import load_schema

STREAMS = "abc"
TICK_MS = 10
START_MS = 1_700_000_000_000


def eager_join_plan(output: str = "eager") -> LogicalPlan:
    """``bench latency``'s join: three streams on sensor_id, 1 s RANGE windows, ISTREAM;
    ``output`` "ordered" for the event-time-ordered join (the same results)."""
    q = Query("calls")
    for s in STREAMS:
        q.stream(s, topic=f"calls.{s}", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=1)  # fmt: skip
        q.window(s, range_ms=1_000)
    q.join("a.sensor_id", "b.sensor_id").join("b.sensor_id", "c.sensor_id")
    q.select(a_ts="a.ts", b_ts="b.ts", c_ts="c.ts").emit("istream").join_output(output)
    return q.into("out").build()


def ticks_of(per_call: int, ticks: int) -> dict[str, list[Batch]]:
    """Each stream's input, a batch of ``per_call`` tuples a tick."""
    out: dict[str, list[Batch]] = {}
    for k, s in enumerate(STREAMS):
        base = reading_columns(per_call * ticks, seed=k)
        keys = np.random.default_rng(k).integers(0, 100 * per_call, per_call * ticks)
        out[s] = []
        for t in range(ticks):
            part = base.slice(t * per_call, (t + 1) * per_call)
            ts = np.full(per_call, START_MS + t * TICK_MS, np.int64)
            columns = {
                **part.columns,
                "ts": ts,
                "sensor_id": keys[t * per_call : (t + 1) * per_call],
            }
            out[s].append(Batch.inserts(columns, ts=ts, key=part.key))
    return out


def call_us(per_call: int, ticks: int = 2_000, rounds: int = 3) -> float:
    """Microseconds per push (best of ``rounds``, after one warm-up run)."""
    plan = eager_join_plan()
    feed = ticks_of(per_call, ticks)
    best = float("inf")
    for r in range(rounds + 1):
        runner = QueryRunner(plan)
        start = time.perf_counter()
        for t in range(ticks):
            for s in STREAMS:
                runner.push(s, feed[s][t])
        spent = time.perf_counter() - start
        if r:  # the first run compiles and warms up
            best = min(best, spent)
    return best / (ticks * len(STREAMS)) * 1e6


def eager_call_costs() -> dict[str, float]:
    return {f"eager_call_us_{n}": call_us(n) for n in (5, 100)}
