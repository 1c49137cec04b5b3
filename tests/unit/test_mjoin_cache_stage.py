"""MJoin caches at the stage: forcing and refusing them, hits on repeated keys, statistics,
order changes mid-stream (Section 4.5, step 5), adaptive orders, other join stages."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, result_counter
from test_mjoin_cache_differential import FIXED, candidates, feed, non_overlapping
from test_mjoin_differential import _diff, oracle_deltas, predicates, random_window, raw_stream

from processors.core.batch import Batch, VarColumn
from processors.core.caching.candidates import (
    orders_of,
    prefix_candidates,
    tree_caches,
    tree_orders,
)
from processors.core.join_tree import JoinTree
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.reoptimizers import make_reoptimizer
from processors.core.plan import Window
from processors.stages.eager_mjoin import EagerMJoinStage
from processors.stages.join_tree_stage import JoinTreeStage
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.window_stage import WindowStage

NAMES = ["s0", "s1", "s2"]
NATURAL = predicates("natural", 3)  # s0.a = s1.a = s2.a
CHAIN = predicates("chain", 3)  # s0.b = s1.a, s1.b = s2.a


def stage(preds: list = NATURAL, n: int = 3, config: OrderingConfig = FIXED) -> MJoinStage:
    return MJoinStage([f"s{i}" for i in range(n)], preds, config)


def counted(batches: list[Batch], n: int = 3) -> Counter:
    return result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])


def test_caches_are_checked_against_the_prefix_invariant() -> None:
    join = stage(CHAIN)  # s1 probes s0 first: s0's cache on (s1, s2) has no update point
    with pytest.raises(ValueError, match="prefix invariant.*pipeline 1 probes"):
        join.use_caches([(0, 0, 1)])
    with pytest.raises(ValueError, match="outside"):
        join.use_caches([(0, 1, 2)])
    with pytest.raises(ValueError, match="no join input"):
        join.use_caches([("nope", 0, 0)])
    natural = stage()
    with pytest.raises(ValueError, match="overlap"):
        natural.use_caches([(2, 0, 1), (2, 1, 1)])
    with pytest.raises(ValueError, match="power of two"):
        natural.use_caches([(2, 0, 1, 100)])
    natural.use_caches([("s2", 0, 1), ("s0", 0, 0)])  # by input name
    assert sorted(natural.stats()["caches"]) == ["s0:0-0[s1]", "s2:0-1[s0,s1]"]
    assert natural.stats()["cache_changes_total"] == 2  # placements are reported
    natural.use_caches([])
    assert natural.stats()["caches"] == {} and natural.stats()["cache_changes_total"] == 4


def test_eager_and_tree_joins_refuse_caches() -> None:
    eager = EagerMJoinStage(NAMES, NATURAL, [10, 10, 10])
    with pytest.raises(ValueError, match="does not run caches"):
        eager.use_caches([(2, 0, 1)])
    tree: JoinTree = (("s0", "s1"), "s2")
    with pytest.raises(ValueError, match="does not run caches"):
        JoinTreeStage(NAMES, NATURAL, tree).use_caches([(2, 0, 1)])


def repeated_keys(rng: np.random.Generator, size: int, domain: int) -> list[dict[str, np.ndarray]]:
    return [
        {
            **{c: rng.integers(0, domain, size).astype(np.int64) for c in "abc"},
            "ts": np.sort(rng.integers(0, 10 * size, size)).astype(np.int64),
        }
        for _ in range(3)
    ]


@pytest.mark.parametrize("preds,spec", [(NATURAL, (2, 0, 1)), (NATURAL, (0, 0, 0)),
                                        (CHAIN, (2, 0, 1))])  # fmt: skip
def test_repeated_keys_hit_the_cache(preds: list, spec: tuple[int, int, int]) -> None:
    """A workload with few distinct keys: most lookups hit, results as without the cache."""
    rng = np.random.default_rng(1)
    streams = repeated_keys(rng, 300, 6)
    windows: list[Window | None] = [Window("x", "range", 200), Window("x", "rows", 30),
                                    Window("x", "range", 100)]  # fmt: skip
    join = stage(preds)
    join.use_caches([spec])
    got, join = feed(streams, windows, join, np.random.default_rng(2), 0.5)
    plain, _ = feed(streams, windows, stage(preds), np.random.default_rng(2), 0.5)
    assert counted(got) == counted(plain)
    expected = naive_join([oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)],
                          preds)  # fmt: skip
    assert counted(got) == expected
    (stats,) = join.stats()["caches"].values()
    assert stats["hits"] > stats["misses"] > 0
    assert stats["inserted"] > 0 and stats["deleted"] > 0 and stats["unlinked"] == 0
    assert stats["entries"] > 0 and stats["bytes"] > 0
    assert join.held_bytes() >= stats["bytes"]


def order_of(join: MJoinStage, i: int, inputs: list[int]) -> None:
    """Set pipeline i's order (by input index), as a re-optimizer would."""
    pipe = join.pipelines[i]
    order = [pipe.inputs.index(x) for x in inputs]
    join.reopts[i] = make_reoptimizer(pipe.size, join.config, order, list(pipe.parent))


@pytest.mark.parametrize("changed,inputs,reason", [
    (2, [1, 0], "join order of s2 changed"),  # the cache's own pipeline
    (0, [2, 1], "pipeline 0 probes \\[2\\] first"),  # a feeder: the invariant breaks
])  # fmt: skip
def test_an_order_change_mid_stream_drops_the_cache(
    changed: int, inputs: list[int], reason: str
) -> None:
    rng = np.random.default_rng(5)
    streams = [raw_stream(rng, 40, 3) for _ in range(3)]
    windows: list[Window | None] = [Window("x", "rows", 5), Window("x", "range", 20),
                                    Window("x", "rows", 4)]  # fmt: skip
    join = stage()
    join.use_caches([(2, 0, 1), (1, 1, 1)])

    def reorder(j: MJoinStage) -> MJoinStage:
        order_of(j, changed, inputs)
        return j

    got, join = feed(streams, windows, join, rng, 0.5, 12, reorder)
    expected = naive_join([oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)],
                          NATURAL)  # fmt: skip
    assert counted(got) == expected, _diff(counted(got), expected)
    assert list(join.stats()["caches"]) == ["s1:1-1[s2]"]
    drop = join.stats()["recent_cache_changes"][-1]
    assert drop["action"] == "drop" and drop["cache"] == "s2:0-1[s0,s1]" and drop["to"] == []
    assert re.search(reason, drop["reason"])


def test_a_feeder_order_change_that_keeps_the_invariant_keeps_the_cache() -> None:
    join = stage(predicates("natural", 4), 4)
    join.use_caches([(3, 0, 1)])  # s3 caches s0 x s1: s0 and s1 probe each other first
    order_of(join, 0, [1, 3, 2])
    zero = np.zeros(1, np.int64)
    join.push(0, Batch.inserts({"__rid": zero, "a": zero, "b": zero, "c": zero}))
    join.flush()
    assert list(join.stats()["caches"]) == ["s3:0-1[s0,s1]"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(3, 4),
    graph=st.sampled_from(["natural", "chain", "star"]),
    algorithm=st.sampled_from(["agreedy", "sweep", "independent", "localswaps"]),
)
def test_caches_under_adaptive_orders_equal_the_naive_join(
    seed: int, n: int, graph: str, algorithm: str
) -> None:
    """The re-optimizers reorder pipelines while caches run: the ones whose order changed are
    dropped on the way, the results stay exact."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(10, 30 if n <= 3 else 18))
    streams = [raw_stream(rng, size, int(rng.integers(2, 5))) for _ in range(n)]
    windows = [random_window(rng, unbounded=False) for _ in range(n)]
    preds = predicates(graph, n)
    config = OrderingConfig(algorithm, profile_probability=1.0, seed=seed, min_profile_tuples=1,
                            window_tuples=4)  # fmt: skip
    join = stage(preds, n, config)
    non_overlapping(join, candidates(join), rng)
    placed, changes = len(join.caches.placed), join.stats()["cache_changes_total"]
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    got, join = feed(streams, windows, join, rng, 0.7)
    assert counted(got, n) == expected, _diff(counted(got, n), expected)
    drops = join.stats()["cache_changes_total"] - changes  # only drops happen meanwhile
    assert len(join.caches.placed) + drops == placed
    assert join.caches.invalid_refs(join) == 0


def test_an_adaptive_join_drops_caches_on_its_way() -> None:
    """The property above is not vacuous: orders do change under caches."""
    drops = 0
    for seed in range(6):
        rng = np.random.default_rng(seed)
        streams = [raw_stream(rng, 30, d) for d in (2, 3, 6)]  # s2 drops the most
        windows: list[Window | None] = [Window("x", "rows", 6)] * 3
        config = OrderingConfig("agreedy", profile_probability=1.0, seed=seed,
                                min_profile_tuples=1, window_tuples=4)  # fmt: skip
        join = stage(NATURAL, 3, config)
        join.use_caches([(0, 0, 0), (1, 0, 0)])  # s0 probes s1 first, s1 probes s0 first
        _, join = feed(streams, windows, join, rng, 0.7)
        drops += join.stats()["cache_changes_total"] - 1
    assert drops > 0


def test_string_keys_and_a_two_class_key() -> None:
    """A cycle s0.b = s1.a, s1.b = s2.a, s2.b = s0.c on strings: s0's cache on (s1, s2) is
    keyed by two classes (s1.a and s2.b), each value hashed."""
    preds = predicates("cycle", 3)
    rng = np.random.default_rng(3)
    words = np.array(["x", "yy", "zzz"], dtype=object)
    raw = [
        {c: words[rng.integers(0, 3, 60)] for c in "abc"} | {"ts": np.arange(60, dtype=np.int64)}
        for _ in range(3)
    ]
    windows = [Window("x", "rows", 8), Window("x", "range", 15), Window("x", "rows", 6)]

    def run(cached: bool) -> tuple[Counter, MJoinStage]:
        join = stage(preds)
        order_of(join, 1, [2, 0])  # s1 probes s2 first, s2 probes s1 first
        order_of(join, 2, [1, 0])
        if cached:
            join.use_caches([(0, 0, 1)])
        fronts = [WindowStage(w) for w in windows]
        out: list[Batch] = []
        for lo in range(0, 60, 7):
            for i, s in enumerate(raw):
                cols = {c: VarColumn.from_values(list(s[c][lo : lo + 7])) for c in "abc"}
                for deltas in fronts[i].process(Batch.inserts(cols, s["ts"][lo : lo + 7])):
                    join.push(i, deltas)
            out += join.release()
        for i, front in enumerate(fronts):
            for deltas in front.flush():
                join.push(i, deltas)
        return counted(out + join.flush()), join

    plain, _ = run(False)
    got, join = run(True)
    assert got == plain and sum(plain.values()) > 0
    (name,) = join.stats()["caches"]
    assert join.caches.placed[0].cache.key_width == 2
    assert join.stats()["caches"][name]["hits"] > 0


def test_candidates_of_the_model_can_be_forced() -> None:
    join = stage(predicates("natural", 4), 4)
    orders = orders_of(join.pipelines, [r.order.tolist() for r in join.reopts])
    found = prefix_candidates(join.graph, orders).caches
    join.use_caches([c for c in found if c.pipeline == 3][:1])
    assert list(join.stats()["caches"]) == ["s3:0-1[s0,s1]"]


@pytest.mark.parametrize("graph,n", [("natural", 3), ("chain", 3), ("natural", 4)])
def test_longer_streams_reuse_slots_under_caches(graph: str, n: int) -> None:
    """Hundreds of tuples through small windows: slots are freed and reused many times while
    caches hold references; results equal the uncached join's (itself checked against the
    oracle), and no reference outlives its tuple."""
    rng = np.random.default_rng(11)
    streams = [raw_stream(rng, 400, 5) for _ in range(n)]
    for s in streams:
        s["ts"] = np.sort(rng.integers(0, 2000, 400)).astype(np.int64)
    kinds: list[Window | None] = [
        Window("x", "rows", 12),
        Window("x", "range", 60),
        Window("x", "rows", 3, ("a",)),
        Window("x", "range", 40),
    ]
    windows = kinds[:n]
    preds = predicates(graph, n)
    for pick in range(3):
        join = stage(preds, n)
        non_overlapping(join, candidates(join, True), np.random.default_rng(pick))
        join.caches.feeders_first = pick != 1
        got, join = feed(streams, windows, join, np.random.default_rng(pick), 0.3)
        plain, _ = feed(streams, windows, stage(preds, n), np.random.default_rng(pick), 0.3)
        assert counted(got, n) == counted(plain, n)
        assert join.caches.invalid_refs(join) == 0
        assert all(c.cache.unlinked == 0 for c in join.caches.placed)
        assert sum(c.cache.hits for c in join.caches.placed) > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_caches_with_the_same_entries_share_one_table(seed: int) -> None:
    """((s0, s1), (s2, s3)) as caches: s0's and s1's pipelines both cache s2 ⋈ s3, s2's and
    s3's s0 ⋈ s1 (Def. 4.1's sharing): two tables, updated once, an entry made by one
    pipeline's miss hit by the other's; exact against the oracle over windows with deletes,
    and no reference outlives its tuple."""
    n, names4 = 4, [f"s{i}" for i in range(4)]
    preds = predicates("natural", n)
    rng = np.random.default_rng(seed)
    streams = [raw_stream(rng, 300, 4) for _ in range(n)]
    for s in streams:
        s["ts"] = np.sort(rng.integers(0, 1500, 300)).astype(np.int64)
    windows: list[Window | None] = [Window("x", "rows", 10), Window("x", "range", 50),
                                    Window("x", "rows", 6), Window("x", "range", 30)]  # fmt: skip
    tree = (("s0", "s1"), ("s2", "s3"))
    join = stage(preds, n)
    orders = tree_orders(tree, names4)
    for i in range(n):
        order_of(join, i, list(orders[i]))
    join.use_caches(list(tree_caches(prefix_candidates(join.graph, orders).caches, tree, names4)))
    placed = join.caches.placed
    assert len(placed) == 4 and len({id(c.cache) for c in placed}) == 2
    assert join.caches.nbytes == sum({id(c.cache): c.cache.nbytes for c in placed}.values())
    got, join = feed(streams, windows, join, rng, 0.3)
    expected = naive_join([oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)],
                          preds)  # fmt: skip
    assert counted(got, n) == expected, _diff(counted(got, n), expected)
    assert join.caches.invalid_refs(join) == 0
    stats = join.stats()["caches"]
    assert stats["s0:1-2[s2,s3]"] == stats["s1:1-2[s2,s3]"] and stats["s0:1-2[s2,s3]"]["hits"] > 0
