"""``streamon bench caching`` on a tiny configuration: every plan (MJoins, the 15 XJoins, every
cache subset of P and G) gives the A-Greedy MJoin's results, and the JSON has its keys."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from processors.bench.caching import run_caching_bench
from processors.bench.caching_data import (
    NAMES,
    PAIRS,
    TABLE2,
    key_sets,
    point_inputs,
    static_orders,
)
from processors.bench.caching_plans import (
    agreedy_plan,
    binary_trees,
    cache_candidates,
    cache_plans,
    cache_subsets,
    drive,
    fixed_plan,
    learned_orders,
    mirror_plans,
    time_chunks,
    tree_plans,
    with_join_cost,
)
from processors.stages.mjoin_stage import MJoinStage


def test_key_sets_realise_table2_within_a_few_percent() -> None:
    for point, (_, sel) in TABLE2.items():
        real = key_sets(sel).selectivity
        for want, got in zip(sel, real, strict=True):
            assert got == pytest.approx(want, rel=0.06, abs=1e-12), (point, want, got)
    assert len(PAIRS) == 6


def test_there_are_15_binary_trees_of_four_inputs() -> None:
    trees = binary_trees(list(NAMES))
    assert len(trees) == 15 and len({repr(t) for t in trees}) == 15


def _rows(stage: MJoinStage, chunks: list) -> Counter:
    """Result rows of ``stage`` over ``chunks`` as (sign, time, key) (the outputs hold no row
    ids; every input's ``a`` is the key)."""
    outs = []
    for part in chunks:
        for i, b in part:
            stage.push(i, b)
            outs += stage.release()
    outs += stage.flush()
    got: Counter = Counter()
    for out in outs:
        got.update(
            zip(out.sign.tolist(), out.ts.tolist(), out.columns["R.a"].tolist(), strict=True)
        )
    return got


@pytest.mark.parametrize(
    ("point", "join_cost"), [("d1", "hash"), ("d3", "hash"), ("d5", "hash"), ("d3", "scan")]
)
def test_every_plan_gives_the_mjoins_results(point: str, join_cost: str) -> None:
    inputs, sets, sizes = point_inputs(point, 3_000, 20, seed=3)
    chunks = time_chunks(inputs, 256)
    names = list(NAMES)
    agreedy = agreedy_plan(names, 3)
    stage = agreedy.make()
    ref = drive(stage, chunks)
    assert ref.results > 0 and ref.inserts < ref.results  # joins and deletes both happen
    expected = _rows(agreedy.make(), chunks)
    plans = [agreedy, *tree_plans(names), *mirror_plans(names)]
    for tag, orders in (("learned", learned_orders(stage)), ("static", static_orders(sets, sizes))):
        fixed = fixed_plan(names, orders, tag)
        _, quota_m = cache_candidates(fixed.make(), orders)
        plans += [fixed, *cache_plans(names, orders, cache_subsets(quota_m), tag)]
    assert any(p.kind == "P" for p in plans)
    plans = [with_join_cost(p, join_cost) for p in plans]
    for plan in plans:
        run = drive(plan.make(), chunks)
        assert (run.results, run.inserts) == (ref.results, ref.inserts), plan.label
        assert _rows(plan.make(), chunks) == expected, plan.label
        if plan.kind in "PGX":
            assert run.peak_bytes > 0, plan.label


def test_the_json_has_the_keys() -> None:
    res = run_caching_bench(
        list(TABLE2), tuples=2_000, window=10, per_chunk=256, finalists=1, rounds=1
    )
    for point in TABLE2:
        fig = res["points"][point]
        # the empty subset of caches is the MJoin: P and G are never slower than M
        assert res[f"cached_vs_mjoin_{point}"] >= 1.0
        assert res[f"prefix_vs_mjoin_{point}"] >= 1.0
        assert fig["G"]["tuples_per_s"] >= fig["P"]["tuples_per_s"]
        assert fig["G"]["holds_caches"] == (fig["G"]["plan"][0] in "PG")
        for kind in "MXPG":
            assert fig[kind]["tuples_per_s"] > 0 and fig[kind]["plan"]
        with_caches = res[f"with_caches_vs_mjoin_{point}"]  # None: no cache is a candidate
        assert (with_caches is None) == (fig["cached"] is None)
        assert with_caches is None or fig["cached"]["holds_caches"]
    assert 0 <= res["caches_pay"] <= len(TABLE2)
    assert "cached_vs_xjoin_min" in res and res["budget_bytes"] > 0
    json.dumps(res)
    assert res["cached_vs_mjoin_d1"] is not None and np.isfinite(res["cached_vs_mjoin_d1"])


def test_mirror_plans_cache_what_each_tree_stores() -> None:
    """One caching plan per binary tree; ((R, S), (T, U)) caches both pairs' joins, each in
    the two pipelines that probe it, as the XJoin probes its two intermediate relations."""
    plans = mirror_plans(list(NAMES))
    assert len(plans) == 15 and all(p.kind == "P" for p in plans)
    bushy = next(p for p in plans if "tree (R, S), (T, U)]" in p.label)
    assert bushy.detail == (
        "ΔR: [T ⋈ U] on c0, ΔS: [T ⋈ U] on c0, ΔT: [R ⋈ S] on c0, ΔU: [R ⋈ S] on c0"
    )
    stage = with_join_cost(bushy, "scan").make()
    assert len(stage.caches.placed) == 4
    assert all(type(ix).__name__ == "ScanIndex" for s in stage.stores for ix in s.indexes.values())
    with pytest.raises(ValueError, match="join cost"):
        with_join_cost(bushy, "sort")


def test_caching_plans_over_the_budget_are_not_chosen() -> None:
    """A budget of one byte: no plan holding a cache may be P's or G's best (G is the MJoin)."""
    res = run_caching_bench(
        ["d1"], tuples=2_000, budget_bytes=1, window=10, per_chunk=256, finalists=1, rounds=1
    )
    fig = res["points"]["d1"]
    assert fig["plans_over_budget"] and fig["cached"] is None
    assert not fig["G"]["holds_caches"] and not fig["P"]["holds_caches"]
    assert res["cached_vs_mjoin_d1"] == 1.0
