"""FilterStage: the output is exactly the tuples passing every filter, whatever the order."""

from __future__ import annotations

import logging
import operator

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.batch import Batch, VarColumn
from processors.core.ordering.config import OrderingConfig
from processors.core.predicates import (
    Between,
    Compare,
    IsIn,
    PredicateError,
    UserPredicate,
    plan_predicates,
)
from processors.core.query import Query, col
from processors.stages.filter_stage import FilterStage
from topics.avro import load_schema

PY_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
WORDS = ["", "a", "ab", "b", "ba", "zeta", "é", "éa"]


@numba.njit(cache=True)
def is_even(x):  # type: ignore[no-untyped-def]
    return x % 2 == 0


def make_filter(draw: st.DrawFn, i: int) -> tuple[object, object]:
    """A random predicate and its plain-Python oracle over a row dict."""
    kind = draw(st.sampled_from(["cmp_a", "cmp_b", "between", "isin", "cmp_s", "isin_s", "udf"]))
    name = f"f{i}"
    if kind == "cmp_a":
        op, v = draw(st.sampled_from(list(PY_OPS))), draw(st.integers(-5, 5))
        return Compare("a", op, v, name=name), lambda r: PY_OPS[op](r["a"], v)
    if kind == "cmp_b":
        op, v = draw(st.sampled_from(list(PY_OPS))), draw(st.floats(-2, 2))
        return Compare("b", op, v, name=name), lambda r: PY_OPS[op](r["b"], v)
    if kind == "between":
        lo, hi = sorted([draw(st.integers(-6, 6)), draw(st.integers(-6, 6))])
        return Between("a", lo, hi, name=name), lambda r: lo <= r["a"] <= hi
    if kind == "isin":
        vals = draw(st.lists(st.integers(-6, 6), max_size=5))
        return IsIn("a", vals, name=name), lambda r: r["a"] in vals
    if kind == "cmp_s":
        op, v = draw(st.sampled_from(list(PY_OPS))), draw(st.sampled_from(WORDS))
        return Compare("s", op, v, name=name), lambda r: PY_OPS[op](r["s"].encode(), v.encode())
    if kind == "isin_s":
        vals = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
        return IsIn("s", vals, name=name), lambda r: r["s"] in vals
    return UserPredicate("a", is_even, name=name), lambda r: r["a"] % 2 == 0


@st.composite
def scenarios(draw: st.DrawFn) -> tuple:
    n_filters = draw(st.integers(1, 6))
    filters = [make_filter(draw, i) for i in range(n_filters)]
    n_rows = draw(st.integers(0, 400))
    seed = draw(st.integers(0, 2**31))
    algorithm = draw(
        st.sampled_from(["agreedy", "agreedy_exact", "independent", "sweep", "localswaps", "fixed"])
    )
    order = draw(st.permutations(range(n_filters)))
    batch_size = draw(st.integers(1, 150))
    p = draw(st.sampled_from([0.0, 0.3, 1.0]))
    return filters, n_rows, seed, algorithm, list(order), batch_size, p


def data(n: int, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    words = [WORDS[i] for i in rng.integers(0, len(WORDS), n)]
    return Batch(
        columns={
            "a": rng.integers(-6, 7, n).astype(np.int64),
            "b": rng.normal(0, 1, n),
            "s": VarColumn.from_values(words),
            "id": np.arange(n, dtype=np.int64),
        },
        sign=np.where(rng.random(n) < 0.2, -1, 1).astype(np.int8),
        ts=np.arange(n, dtype=np.int64),
    )


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_output_is_the_same_whatever_the_order(scenario: tuple) -> None:
    filters, n_rows, seed, algorithm, order, batch_size, p = scenario
    batch = data(n_rows, seed)
    rows = batch.rows()
    expected = [r["id"] for r in rows if all(oracle(r) for _, oracle in filters)]

    config = OrderingConfig(
        algorithm, profile_probability=p, window_tuples=8, min_profile_tuples=1, seed=seed
    )
    stage = FilterStage([f for f, _ in filters], config, initial_order=order)
    out: list[Batch] = []
    for start in range(0, n_rows, batch_size):
        out += stage.process(batch.slice(start, min(n_rows, start + batch_size)))
    got = Batch.concat(out) if out else batch.slice(0, 0)
    assert got.columns["id"].tolist() == expected
    assert got.equals(batch.take(np.array(expected, dtype=np.int64)))  # signs, ts, all columns
    assert stage.tuples_out == len(expected) and stage.tuples_in == n_rows


def test_order_changes_are_reported_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    # "a > 0" drops half the tuples, "a > 4" drops nearly all: it belongs first
    stage = FilterStage(
        [Compare("a", ">", 0), Compare("a", ">", 4)],
        # fixed equal costs: the order follows from the selectivities alone, not from timings
        # that a busy machine can skew (this test once flipped in a full run)
        OrderingConfig(
            profile_probability=1.0, window_tuples=100, min_profile_tuples=50, costs=(1.0, 1.0)
        ),  # fmt: skip
    )
    batch = data(1000, 1)
    with caplog.at_level(logging.INFO, logger="processors.stages.filter_stage"):
        stage.process(batch)
    stats = stage.stats()
    assert stats["order"] == ["a > 4", "a > 0"]
    assert stats["changes_total"] == 1
    (change,) = stats["recent_changes"]
    assert change["from"] == ["a > 0", "a > 4"] and change["to"] == ["a > 4", "a > 0"]
    assert change["at_tuple"] == 1000
    assert "filter order changed" in caplog.text
    assert set(stats["breakdown_percent"]) == {
        "tuple_processing",
        "profile_tuple_creation",
        "profile_window",
        "view_update",
        "violations",
    }
    assert stats["evaluations"] == {"a > 0": 1000, "a > 4": int((batch.columns["a"] > 0).sum())}


def test_plan_filters_become_predicates() -> None:
    plan = (
        Query("q")
        .stream("r", topic="t", schema=load_schema("reading"))
        .where(
            col("r.temperature") > 20.0,
            col("r.site").isin(["s1", "s2"]),
            col("r.ok") == True,  # noqa: E712
        )
        .into("out")
        .build()
    )
    stage = FilterStage.from_plan(plan, "r")
    assert [p.name for p in stage.predicates] == [str(f) for f in plan.filters]
    assert len(plan_predicates(plan, "r")) == 3
    batch = Batch(
        columns={
            "temperature": np.array([25.0, 25.0, 10.0, 30.0]),
            "site": VarColumn.from_values(["s1", "s3", "s2", "s2"]),
            "ok": np.array([True, True, True, False]),
        },
        sign=np.ones(4, np.int8),
        ts=np.zeros(4, np.int64),
    )
    (out,) = stage.process(batch)
    assert out.columns["temperature"].tolist() == [25.0]


def test_missing_column_is_a_clear_error() -> None:
    stage = FilterStage([Compare("nope", ">", 1)])
    with pytest.raises(PredicateError, match="nope"):
        stage.process(data(10, 0))


def test_user_predicate_must_be_jitted() -> None:
    with pytest.raises(PredicateError, match="numba"):
        UserPredicate("a", lambda x: x > 0)


def test_costs_must_match_filters() -> None:
    with pytest.raises(ValueError, match="costs"):
        FilterStage([Compare("a", ">", 1)], OrderingConfig(costs=(1.0, 2.0)))


@pytest.mark.parametrize(
    "algorithm", ["agreedy", "agreedy_exact", "sweep", "independent", "localswaps"]
)
def test_index_probe_filters_on_the_section_9_workload(algorithm: str) -> None:
    """Index-probe filters (cost 1 and 3) over sliding windows: output = the generator's truth."""
    from processors.bench.filters import workload_predicates
    from processors.workloads.filters import FilterWorkload, FilterWorkloadRun

    run = FilterWorkloadRun(
        FilterWorkload(n=5, costs=(1, 3, 1, 3, 1), change_every=7_000, window=2_000, seed=3)
    )
    stage = FilterStage(
        workload_predicates(run),
        OrderingConfig(algorithm, profile_probability=0.2, window_tuples=300, seed=3),
    )
    for _ in range(12):
        batch, passes = run.next_batch(2_500)
        out = stage.process(batch)
        expected = np.flatnonzero(passes.all(axis=1))
        got = out[0].ts if out else np.zeros(0, np.int64)
        assert np.array_equal(got, batch.ts[expected])
    assert stage.tuples_in == 30_000


@pytest.mark.parametrize("window", [200, 40])  # 40: fewer than a batch's profile tuples
@pytest.mark.parametrize("algorithm", ["agreedy_exact", "sweep", "independent", "localswaps"])
def test_index_filters_profile_as_the_per_position_path_does(algorithm: str, window: int) -> None:
    """Index-probe filters profile inside the main pass's kernel calls: same samples, same
    profile tuples, same orders and evaluation counts as the per-position path of other
    filter kinds, which looks the drop positions up in the main pass's selections."""
    from processors.bench.filters import workload_predicates
    from processors.workloads.filters import FilterWorkload, FilterWorkloadRun

    def stage_on(run: FilterWorkloadRun, fused: bool) -> FilterStage:
        stage = FilterStage(
            workload_predicates(run),
            OrderingConfig(
                algorithm,
                profile_probability=0.05,
                window_tuples=window,
                min_profile_tuples=20,
                costs=(1.0,) * 5,
                seed=5,
            ),
        )
        assert stage._index_filters  # the workload's filters take the one-call path
        stage._index_filters = fused
        return stage

    workload = FilterWorkload(n=5, costs=(1, 2, 1, 1, 1), change_every=5_000, seed=9)
    runs = [FilterWorkloadRun(workload), FilterWorkloadRun(workload)]
    stages = [stage_on(runs[0], True), stage_on(runs[1], False)]
    for _ in range(10):
        outs = []
        for run, stage in zip(runs, stages, strict=True):
            batch, passes = run.next_batch(3_000)
            out = stage.process(batch)
            outs.append(out[0].ts.tolist() if out else [])
            assert outs[-1] == batch.ts[passes.all(axis=1)].tolist()
        assert outs[0] == outs[1]
        fused, plain = stages
        assert fused.order == plain.order
        assert fused.profile_tuples == plain.profile_tuples
        assert fused.profile_evaluations.tolist() == plain.profile_evaluations.tolist()
        assert fused.evaluations.tolist() == plain.evaluations.tolist()
        w1, w2 = fused.reoptimizer.window, plain.reoptimizer.window
        assert w1.bits[w1.live_rows()].tolist() == w2.bits[w2.live_rows()].tolist()
        assert fused.reoptimizer.view.tolist() == plain.reoptimizer.view.tolist()
    assert stages[0].changes_total == stages[1].changes_total > 0
    assert stages[0].profile_tuples > 0


@pytest.mark.parametrize("costs", [(1, 1, 1, 1), (1, 3, 1, 10)])
def test_profiling_rows_in_one_call_gives_the_per_filter_calls_bits(costs: tuple[int, ...]) -> None:
    """A drifting batch's second profiling (A-Greedy+) runs in one kernel call for index-probe
    filters: the same profile tuples as the per-filter calls of ``profile.profile_rows``."""
    from processors.bench.filters import workload_predicates
    from processors.core.ordering import profile
    from processors.workloads.filters import FilterWorkload, FilterWorkloadRun

    run = FilterWorkloadRun(FilterWorkload(n=4, costs=costs, seed=3))
    stage = FilterStage(workload_predicates(run), OrderingConfig("agreedy", costs=(1.0,) * 4))
    batch, passes = run.next_batch(5_000)
    stage.process(batch)  # sizes the buffers
    assert stage._index_pass is not None
    cols = stage._index_columns(batch)
    assert cols is not None
    rows = np.sort(np.random.default_rng(1).choice(5_000, 700, replace=False)).astype(np.int64)
    m = stage._index_pass.profile_rows(cols, rows)
    expected = np.zeros_like(stage._bits)
    k = profile.profile_rows(stage.predicates, batch, rows, expected)
    assert m == k == int((~passes[rows]).any(axis=1).sum()) > 0
    assert stage._bits[:m].tolist() == expected[:k].tolist()
