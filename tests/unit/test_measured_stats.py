"""Statistics measured by workers (processors/core/cost/measured.py, stages/join_selectivity.py),
in process.

- An MJoin's window selectivity equals a brute-force count over its windows' live tuples.
- From stats records as workers write them (two workers, two partitions each): rates add up
  over workers, f is the summed matches over the product of the summed windows, filter pass
  rates are weighted by tuples, the join's per-tuple cost is its busy time over the tuples the
  model says it handled, and the capacity is one processor per worker.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from processors.core.cost.inputs import bind
from processors.core.cost.live import live_explain
from processors.core.cost.measured import measured_stats
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import Shape
from processors.core.cost.stats_file import StatsError
from processors.cql import parse_cql
from processors.physical.runner import QueryRunner
from processors.stages.join_selectivity import window_matches
from processors.stages.join_store import ALIVE
from processors.workloads.examples import reading_columns

CATALOG = """
CREATE STREAM r WITH (schema = 'reading', topic = 'r', key = 'sensor_id', timestamp = 'ts');
CREATE STREAM s WITH (schema = 'reading', topic = 's', key = 'sensor_id', timestamp = 'ts');
"""
QUERY = """CREATE QUERY q AS SELECT r.sensor_id, s.ts FROM r [ROWS 300], s [RANGE 3 SECONDS]
           WHERE r.sensor_id = s.sensor_id AND r.temperature > 20.0 INTO 'out';"""


def plan():
    return parse_cql(QUERY, CATALOG).query().build()


def test_window_selectivity_is_the_brute_force_count() -> None:
    runner = QueryRunner(plan())
    for i in range(5):
        for name, seed in (("r", i), ("s", 50 + i)):
            batch = reading_columns(500, seed=seed, start_ms=1_700_000_000_000 + 5_000 * i)
            batch.columns["sensor_id"] = batch.columns["sensor_id"] % 30
            runner.push(name, batch)
    stage = runner.stage("mjoin")
    got = window_matches(stage)["r.sensor_id = s.sensor_id"]
    keys = []
    for store in stage.stores:
        slots = store.live_slots()
        keys.append(Counter(store.keys("sensor_id", slots[store.died[slots] == ALIVE]).tolist()))
    matches = sum(n * keys[1][k] for k, n in keys[0].items())
    assert got == {"matches": matches, "left": sum(keys[0].values()),
                   "right": sum(keys[1].values())}  # fmt: skip
    assert matches > 0 and 0 < got["left"] < 300  # ROWS 300 with the filter above it (eq. 2)


def record(worker: str, agent: str, tuples: int, busy_ns: int, plan: dict, end: int) -> dict:
    return {"worker_id": worker, "query": "q", "agent": agent, "stage": agent, "scope": "AGENT",
            "window_start_ms": end - 1_000, "window_end_ms": end, "tuples_in": tuples,
            "busy_ns": busy_ns, "plan": json.dumps(plan)}  # fmt: skip


def unit(matches: float, left: float, right: float, passed: float, tuples: int) -> dict:
    return {
        "filter.r[0]": {"kind": "filter", "tuples_in": tuples, "selectivity":
                        {"temperature > 20.0": passed}, "cost_ns": {"temperature > 20.0": 50.0}},
        "mjoin[0]": {"kind": "mjoin", "window_matches": {"r.sensor_id = s.sensor_id":
                     {"matches": matches, "left": left, "right": right}},
                     "window_tuples": {"r": left, "s": right}},
    }  # fmt: skip


def test_figures_from_two_workers_records() -> None:
    records = []
    for w, share in (("w1", 0.25), ("w2", 0.75)):
        plan_ = {"0": unit(30, 100, 200, 0.5, 100), "1": unit(10, 50, 100, 0.25, 300)}
        for t in (1, 2, 3):  # three 1-second windows each; the units' figures in the last
            end = 1_000_000 + 1_000 * t
            records.append(record(w, "ingest.r", int(400 * share), 10, {}, end))
            records.append(record(w, "ingest.s", int(800 * share), 10, {}, end))
            records.append(record(w, "mjoin", 10, 30_000_000, plan_ if t == 3 else {}, end))
    got = measured_stats(plan(), records, "test")
    assert got.capacity == 2.0
    assert got.streams["r"].rate == pytest.approx(400) and got.streams["s"].rate == pytest.approx(
        800
    )
    # two workers x two partitions: (30 + 10) x 2 matches over (150 x 2) x (300 x 2) pairs
    assert got.selectivity["r.sensor_id = s.sensor_id"] == pytest.approx(80 / (300 * 600))
    assert got.selectivity["r.temperature > 20.0"] == pytest.approx((0.5 * 100 + 0.25 * 300) / 400)
    assert got.filter_cost_s == pytest.approx(50e-9)
    assert (got.streams["r"].window, got.streams["s"].window) == (300, 600)  # all partitions
    handled = evaluate(Shape(("r", "s")), bind(plan(), got)).tuples_per_s
    assert got.join_cost_s == pytest.approx(0.03 * 3 * 2 / (handled * 3))


def test_a_query_no_worker_ran_is_named() -> None:
    with pytest.raises(StatsError, match="no statistics of query 'q'"):
        measured_stats(plan(), [], "the stats topic")


def test_the_status_pages_live_plan_from_a_workers_records() -> None:
    records = [
        record("w1", "ingest.r", 100, 10, {}, 2_000),
        record("w1", "ingest.s", 200, 10, {}, 2_000),
        record("w1", "mjoin", 10, 5_000_000, {"0": unit(30, 100, 200, 0.5, 100)}, 2_000),
    ]
    body = live_explain(plan(), records)
    assert [p["chosen"] for p in body["plans"]].count(True) == 1 and body["capacity"] == 1.0
    assert "no statistics" in live_explain(plan(), [])["error"]


def test_the_live_plan_names_the_plan_the_worker_runs() -> None:
    """The running plan is marked, whether the join runs as an MJoin or a tree given with
    ``join_tree`` (mirrored here), whose stage reports as ``join_tree`` and is measured all the
    same. (Three-way shapes: test_cost_model.)"""
    tree_query = QUERY.replace("CREATE QUERY q AS", "CREATE QUERY q WITH (join_tree = 's, r') AS")
    tree_plan = parse_cql(tree_query, CATALOG).query().build()
    for p, kind in ((plan(), "mjoin"), (tree_plan, "join_tree")):
        join = unit(30, 100, 200, 0.5, 100)
        join[f"{kind}[0]"] = {**join.pop("mjoin[0]"), "kind": kind}
        records = [
            record("w1", "ingest.r", 100, 10, {}, 2_000),
            record("w1", "ingest.s", 200, 10, {}, 2_000),
            record("w1", "mjoin", 10, 5_000_000, {"0": join}, 2_000),
        ]
        body = live_explain(p, records)
        assert "error" not in body, body
        running = body["running"]
        assert running["executable"]
        # of two streams, the MJoin is the binary join (the optimizer lists it once)
        assert running["shape"] == "left-deep" and running["join_tree"] in ("r, s", "s, r")
