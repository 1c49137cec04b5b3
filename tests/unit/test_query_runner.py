"""The in-process runner, built from the same compiled steps as the worker, against the naive
oracles: filters, RANGE windows, a two-way join and a GROUP BY, end to end."""

from __future__ import annotations

from collections import Counter

import pytest
from helpers import reading_batch
from oracle.naive import batches_to_rows, naive_join, naive_window_deltas

from processors.core.batch import Batch, VarColumn
from processors.core.query import Query, col
from processors.physical.compiler import compile_plan
from processors.physical.runner import QueryRunner
from topics.avro import load_schema

SITES = ("a", "b", "c")


def join_query() -> Query:
    q = Query("runner")
    for s in ("r", "s"):
        q.stream(s, topic=f"{s}-in", schema=load_schema("reading"), key="sensor_id",
                 timestamp="ts", partitions=1)  # fmt: skip
        q.window(s, range_ms=300)
    q.join("r.sensor_id", "s.sensor_id")
    q.where(col("r.ok") == True, col("s.temperature") > 18.0)  # noqa: E712
    q.group_by("r.site").aggregate(n="count", hot=("max", "s.temperature"))
    return q.into("runner-out")


def oracle(inputs: dict[str, list[Batch]]) -> Counter:
    """Filter, window, join and aggregate in plain Python: the current row of each group."""
    keep = {"r": lambda row: row["ok"], "s": lambda row: row["temperature"] > 18.0}
    deltas = []
    for s in ("r", "s"):
        rows = [d["row"] for d in batches_to_rows(inputs[s]) if keep[s](d["row"])]
        deltas.append(naive_window_deltas(rows, "range", 300)[0])
    joined = naive_join(deltas, [((0, "sensor_id"), (1, "sensor_id"))])
    live: Counter = Counter()
    for (sign, _, (r_row, s_row)), count in joined.items():
        live[(dict(r_row)["site"], dict(s_row)["temperature"])] += sign * count
    groups: dict[str, list[float]] = {}
    for (site, temp), count in live.items():
        assert count >= 0
        groups.setdefault(site, []).extend([temp] * count)
    return Counter({(site, len(t), max(t)): 1 for site, t in groups.items() if t})


@pytest.mark.parametrize("seed", range(4))
def test_the_runner_equals_the_oracle_end_to_end(seed: int) -> None:
    plan = join_query().build()
    runner = QueryRunner(plan)
    inputs: dict[str, list[Batch]] = {"r": [], "s": []}
    out: list[Batch] = []
    for i in range(12):
        for j, s in enumerate(("r", "s")):
            batch = reading_batch(40, seed * 100 + 2 * i + j, start=i * 400)
            inputs[s].append(batch)
            out += runner.push(s, batch)
    out += runner.flush()
    net: Counter = Counter()
    for batch in out:
        cols = {k: (v.to_list() if isinstance(v, VarColumn) else v.tolist())
                for k, v in batch.columns.items()}  # fmt: skip
        for r, sign in enumerate(batch.sign.tolist()):
            net[(cols["site"][r], cols["n"][r], cols["hot"][r])] += sign
    assert Counter({k: v for k, v in net.items() if v}) == oracle(inputs)
    assert runner.take_dead_letters() == []


def test_the_runner_runs_the_compiled_steps_in_order() -> None:
    plan = join_query().build()
    runner = QueryRunner(plan)
    assert list(runner.chains) == [s.name for s in compile_plan(plan).steps]
    # the streams' stages run in front of the MJoin, in its step (processors.physical.joined)
    assert list(runner.chains) == ["mjoin", "aggregate"]
    assert [s for s, _ in compile_plan(plan).step("mjoin").inputs] == ["r", "s"]
    kinds = [getattr(s, "kind", None) for s in runner.all_stages()]
    assert kinds == [
        "merge",
        "filter",
        "window",
        "merge",
        "filter",
        "window",
        "mjoin",
        "aggregate",
        "project",
    ]
    assert set(runner.stats()) == {s.name for s in runner.all_stages()}


def test_a_restored_chain_continues_like_the_original() -> None:
    """What a worker does at a restart: a fresh chain of the step loads the snapshot."""
    plan = join_query().build()
    first, whole = QueryRunner(plan), QueryRunner(plan)
    batches = [(s, reading_batch(50, 7 + i, start=i * 300)) for i in range(10) for s in ("r", "s")]
    for s, batch in batches[:9]:
        first.push(s, batch.slice(0, len(batch)))
        whole.push(s, batch)
    second = QueryRunner(plan)
    for name, chain in first.chains.items():
        second.chains[name].load_snapshot(chain.snapshot())
    rest_a = [b for s, batch in batches[9:] for b in second.push(s, batch.slice(0, len(batch)))]
    rest_b = [b for s, batch in batches[9:] for b in whole.push(s, batch)]
    assert len(rest_a) == len(rest_b)
    for a, b in zip(rest_a, rest_b, strict=True):
        assert a.equals(b)
