"""MJoin with subresult caches (A-Caching, Sections 3.2-3.3) against the naive oracle.

Caches are forced at candidate positions (every segment that satisfies the prefix invariant
under the pipelines' orders): each one alone, and random non-overlapping combinations, over
ROWS / PARTITION BY / RANGE windows (deletes and expiries), 3- and 4-way natural, chain, star,
cyclic and several-columns-per-class joins, random batch splits, interleavings and epoch sizes.
The results must equal the oracle's multiset exactly, and no cached reference may outlive its
tuple (maintenance, not the ``born`` check, keeps caches clean: ``unlinked`` stays 0).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle.naive import naive_join, result_counter
from test_mjoin_differential import (
    _diff,
    class_predicates,
    oracle_deltas,
    predicates,
    random_window,
    raw_stream,
)

from processors.core.batch import Batch
from processors.core.caching.candidates import global_candidates, orders_of, prefix_candidates
from processors.core.ordering.config import OrderingConfig
from processors.core.ordering.reoptimizers import make_reoptimizer
from processors.core.plan import Window
from processors.stages import mjoin_stage
from processors.stages.mjoin_cache_plan import CacheSpec
from processors.stages.mjoin_stage import MJoinStage
from processors.stages.shape_stages import RowIds
from processors.stages.window_stage import WindowStage

GRAPHS = ("natural", "chain", "star", "cycle", "leaf_two", "via_child", "span3")
FIXED = OrderingConfig("fixed", profile_probability=0.0)


def graph_predicates(graph: str, n: int, rng: np.random.Generator) -> list:
    if graph in ("natural", "chain", "star", "cycle"):
        return predicates(graph, n)
    return class_predicates(graph, n, rng)


def set_orders(stage: MJoinStage, rng: np.random.Generator, config: OrderingConfig) -> None:
    """Random orders (parents first); half the time each pipeline's default order, which
    lines up more segments with the prefix invariant."""
    for i, pipe in enumerate(stage.pipelines):
        if rng.random() < 0.5:
            order = pipe.default_order()
        else:
            order, left = [], list(range(pipe.size))
            while left:
                ready = [e for e in left if pipe.parent[e] < 0 or pipe.parent[e] in order]
                e = ready[int(rng.integers(0, len(ready)))]
                order.append(e)
                left.remove(e)
        stage.reopts[i] = make_reoptimizer(pipe.size, config, order, list(pipe.parent))


def candidates(stage: MJoinStage, consistent: bool = False) -> list[CacheSpec]:
    """Every segment of every pipeline that satisfies the prefix invariant, single operators
    included, and with ``consistent`` every globally-consistent one whose maintaining set
    leaves out the pipeline's own input (the enumeration of
    :mod:`processors.core.caching.candidates`)."""
    orders = orders_of(stage.pipelines, [r.order.tolist() for r in stage.reopts])
    found = list(prefix_candidates(stage.graph, orders, min_length=1).caches)
    if consistent:
        found += global_candidates(stage.graph, orders, root_in_y=False)
    return [CacheSpec(c.pipeline, c.start, c.end, consistency=c.kind) for c in found]


def non_overlapping(
    join: MJoinStage, specs: list[CacheSpec], rng: np.random.Generator, buckets: int = 4096,
    chosen: list[CacheSpec] | None = None,
) -> list[CacheSpec]:  # fmt: skip
    """Forces a random set of the candidates that the join accepts together (no two
    overlapping in a pipeline, no update point inside another cache), after ``chosen``;
    returns it."""
    chosen = list(chosen or [])
    for s in rng.permutation(len(specs)).tolist():
        c = specs[s]
        try:
            join.use_caches([*chosen, replace(c, buckets=buckets)])
            chosen.append(replace(c, buckets=buckets))
        except ValueError:
            continue
    join.use_caches(chosen)
    return chosen


def feed(
    streams: list[dict[str, np.ndarray]],
    windows: list[Window | None],
    join: MJoinStage,
    rng: np.random.Generator,
    release_p: float,
    at: int | None = None,
    then: Callable[[MJoinStage], MJoinStage] | None = None,
) -> tuple[list[Batch], MJoinStage]:
    """Window deltas into ``join`` in random batches and interleavings, released after a push
    with probability ``release_p`` (small: large epochs); after ``at`` pushes the join is
    replaced by ``then(join)``. All results, and the join at the end."""
    n = len(streams)
    fronts = [WindowStage(w) if w is not None else RowIds() for w in windows]
    pos = [0] * n
    out: list[Batch] = []
    pushes = 0
    while any(pos[i] < len(streams[i]["ts"]) for i in range(n)):
        i = int(rng.integers(0, n))
        lo, hi = pos[i], min(pos[i] + int(rng.integers(1, 6)), len(streams[i]["ts"]))
        if lo >= hi:
            continue
        s = streams[i]
        pos[i] = hi
        for deltas in fronts[i].process(Batch.inserts({c: s[c][lo:hi] for c in "abc"},
                                                      s["ts"][lo:hi])):  # fmt: skip
            join.push(i, deltas)
        if rng.random() < release_p:
            out += join.release()
        pushes += 1
        if pushes == at and then is not None:
            join = then(join)
    for i, front in enumerate(fronts):
        if isinstance(front, WindowStage):
            for deltas in front.flush():
                join.push(i, deltas)
    out += join.flush()
    assert not join.take_dead_letters()
    return out, join


def restored(join: MJoinStage) -> MJoinStage:
    """A fresh stage with the same caches forced, loaded from ``join``'s snapshot."""
    copy = MJoinStage(join.names, join.graph.predicates, join.config)
    copy.reopts = [make_reoptimizer(p.size, join.config, r.order.tolist(), list(p.parent))
                   for p, r in zip(copy.pipelines, join.reopts, strict=True)]  # fmt: skip
    copy.use_caches([c.spec for c in join.caches.placed])
    copy.load_snapshot(join.snapshot())
    copy.caches.feeders_first = join.caches.feeders_first
    assert all(c.cache.entries == 0 for c in copy.caches.placed)  # caches start empty
    return copy


def check(
    seed: int, n: int, graph: str, pick: int | None, release_p: float, buckets: int,
    slice_size: int, feeders_first: bool = True, snapshot: bool = False,
    consistent: bool = False, scan: bool = False,
) -> MJoinStage | None:  # fmt: skip
    """One random workload with caches forced (candidate ``pick``, or a random
    non-overlapping set when None), with ``scan`` about half the join columns probed by
    scanning their windows (no index); the join, or None when no candidate exists."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(5, 30 if n <= 3 else 18))
    domain = int(rng.integers(2, 5))
    streams = [raw_stream(rng, size, domain) for _ in range(n)]
    windows = [random_window(rng, unbounded=n <= 3) for _ in range(n)]
    preds = graph_predicates(graph, n, rng)
    join = MJoinStage([f"s{i}" for i in range(n)], preds, FIXED)
    if scan:
        for store in join.stores:
            for col in store.key_columns:
                if rng.random() < 0.5:
                    store.scan(col)
    set_orders(join, rng, FIXED)
    specs = candidates(join, consistent)
    if not specs:
        return None
    if consistent and pick is not None:  # one globally-consistent cache alone
        specs = [s for s in specs if s.consistency == "global"]
    if not specs:
        return None
    if pick is not None:
        chosen = [replace(specs[pick % len(specs)], buckets=buckets)]
        join.use_caches(chosen)
    else:
        chosen = non_overlapping(join, specs, rng, buckets)
    join.caches.feeders_first = feeders_first
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    at = int(rng.integers(1, 3 * n)) if snapshot else None
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mjoin_stage, "EPOCH_SLICE", slice_size)
        batches, join = feed(streams, windows, join, rng, release_p, at, restored)
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert got == expected, f"{chosen}: " + _diff(got, expected)
    assert join.caches.invalid_refs(join) == 0
    assert all(c.cache.unlinked == 0 for c in join.caches.placed)
    assert len(join.caches.placed) == len(chosen)  # fixed orders: nothing was dropped
    return join


RUNS = {
    "seed": st.integers(0, 2**32 - 1),
    "n": st.integers(3, 4),
    "graph": st.sampled_from(GRAPHS),
    "release_p": st.sampled_from([1.0, 0.5, 0.1, 0.0]),
    "buckets": st.sampled_from([1, 4, 4096]),
    "slice_size": st.sampled_from([3, 16_384]),
    "feeders_first": st.booleans(),
}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pick=st.integers(0, 1000), **RUNS)
def test_one_cache_at_any_candidate_position_equals_the_naive_join(
    seed: int, n: int, graph: str, pick: int, release_p: float, buckets: int, slice_size: int,
    feeders_first: bool,
) -> None:  # fmt: skip
    check(seed, n, graph, pick, release_p, buckets, slice_size, feeders_first)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RUNS)
def test_non_overlapping_caches_equal_the_naive_join(
    seed: int, n: int, graph: str, release_p: float, buckets: int, slice_size: int,
    feeders_first: bool,
) -> None:  # fmt: skip
    check(seed, n, graph, None, release_p, buckets, slice_size, feeders_first)


@pytest.mark.parametrize("graph,n", [("natural", 3), ("natural", 4), ("chain", 3),
                                     ("chain", 4), ("star", 4), ("cycle", 3)])  # fmt: skip
def test_every_candidate_position_of_a_join_one_by_one(graph: str, n: int) -> None:
    """Each candidate of the default orders on its own, small and large epochs."""
    join = MJoinStage([f"s{i}" for i in range(n)], predicates(graph, n), FIXED)
    specs = candidates(join)
    assert specs
    for pick, spec in enumerate(specs):
        for seed, release_p in ((pick, 1.0), (pick + 100, 0.2)):
            _check_default_orders(seed, n, graph, spec, release_p)


def _check_default_orders(seed: int, n: int, graph: str, spec: CacheSpec, release_p: float) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(10, 30 if n <= 3 else 18))
    streams = [raw_stream(rng, size, int(rng.integers(2, 4))) for _ in range(n)]
    windows = [random_window(rng, unbounded=False) for _ in range(n)]
    preds = predicates(graph, n)
    join = MJoinStage([f"s{i}" for i in range(n)], preds, FIXED)
    join.use_caches([CacheSpec(spec.pipeline, spec.start, spec.end, 4)])
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    batches, join = feed(streams, windows, join, rng, release_p)
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert got == expected, f"{spec}: " + _diff(got, expected)
    assert join.caches.invalid_refs(join) == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pick=st.integers(-1, 1000), **RUNS)
def test_join_columns_probed_by_scanning_equal_the_naive_join(
    seed: int, n: int, graph: str, pick: int, release_p: float, buckets: int, slice_size: int,
    feeders_first: bool,
) -> None:  # fmt: skip
    """Join columns without an index (a nested-loop join, as A-Caching's Fig. 10 forces:
    kernels.scan_index) under one cache or a random set of them."""
    check(seed, n, graph, None if pick < 0 else pick, release_p, buckets, slice_size,
          feeders_first, scan=True)  # fmt: skip


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RUNS)
def test_a_restored_join_with_caches_equals_the_naive_join(
    seed: int, n: int, graph: str, release_p: float, buckets: int, slice_size: int,
    feeders_first: bool,
) -> None:  # fmt: skip
    """Snapshot and restore mid-stream: the caches are not in the snapshot and start empty."""
    check(seed, n, graph, None, release_p, buckets, slice_size, feeders_first, snapshot=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pick=st.integers(0, 1000), **RUNS)
def test_globally_consistent_caches_equal_the_naive_join(
    seed: int, n: int, graph: str, pick: int, release_p: float, buckets: int, slice_size: int,
    feeders_first: bool,
) -> None:  # fmt: skip
    """Section 6's caches (X whose inputs break the prefix invariant, maintained by the
    smallest superset that keeps it) alone when ``pick`` is even, else among others."""
    check(seed, n, graph, None if pick % 2 else pick // 2, release_p, buckets, slice_size,
          feeders_first, consistent=True)  # fmt: skip


# orders (by input) under which a segment X of pipeline 0 or 3 breaks the prefix invariant and
# its smallest prefix-invariant superset M leaves out the pipeline's own input
GLOBAL_SETUPS = {
    # natural 4-way: X = {s1, s2} in s3's pipeline, M = {s0, s1, s2}
    "natural": ({0: [1, 2, 3], 1: [0, 2, 3], 2: [0, 1, 3]}, [(3, [0, 1, 2], 1, 2),
                                                           (3, [1, 2, 0], 0, 1)]),
    # chain s0-s1-s2-s3: X = {s2, s3} in s0's pipeline, M = {s1, s2, s3}
    "chain": ({1: [2, 3, 0], 2: [1, 3, 0], 3: [2, 1, 0]}, [(0, [1, 2, 3], 1, 2)]),
}  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    graph=st.sampled_from(sorted(GLOBAL_SETUPS)),
    which=st.integers(0, 1),
    with_prefix=st.booleans(),
    release_p=st.sampled_from([1.0, 0.3, 0.0]),
    buckets=st.sampled_from([1, 4, 4096]),
    feeders_first=st.booleans(),
)
def test_a_globally_consistent_cache_of_a_4_way_join_equals_the_naive_join(
    seed: int, graph: str, which: int, with_prefix: bool, release_p: float, buckets: int,
    feeders_first: bool,
) -> None:  # fmt: skip
    n = 4
    rng = np.random.default_rng(seed)
    streams = [raw_stream(rng, int(rng.integers(8, 20)), int(rng.integers(2, 4))) for _ in range(n)]
    windows = [random_window(rng, unbounded=False) for _ in range(n)]
    preds = predicates(graph, n)
    join = MJoinStage([f"s{i}" for i in range(n)], preds, FIXED)
    orders, caches = GLOBAL_SETUPS[graph]
    pipeline, order, start, end = caches[which % len(caches)]
    for i, inputs in [*orders.items(), (pipeline, order)]:
        pipe = join.pipelines[i]
        entities = [pipe.inputs.index(x) for x in inputs]
        join.reopts[i] = make_reoptimizer(pipe.size, FIXED, entities, list(pipe.parent))
    chosen = [CacheSpec(pipeline, start, end, buckets, "global")]
    if with_prefix:  # prefix-invariant ones beside it, where they fit
        chosen = non_overlapping(join, candidates(join), rng, buckets, chosen)
    join.use_caches(chosen)
    join.caches.feeders_first = feeders_first
    assert join.caches.placed[0].is_global
    expected = naive_join(
        [oracle_deltas(s, w) for s, w in zip(streams, windows, strict=True)], preds
    )
    batches, join = feed(streams, windows, join, rng, release_p)
    got = result_counter(batches, [["a", "b", "c"]] * n, [f"s{i}." for i in range(n)])
    assert got == expected, f"{chosen}: " + _diff(got, expected)
    assert join.caches.invalid_refs(join) == 0
    assert all(c.cache.unlinked == 0 for c in join.caches.placed)
