"""A-Caching's cost model (Sects. 4.1, 4.4, 5) against hand-computed numbers, and the online
estimators of Appendix A against exact recomputations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.caching.candidates import global_candidates, prefix_candidates
from processors.core.caching.estimators import (
    BloomMissEstimator,
    ObservedMissRate,
    OperatorProfile,
    WindowAverage,
    key_words,
)
from processors.core.caching.model import (
    CacheParams,
    CacheSizing,
    CostConstants,
    PipelineStats,
    benefit,
    cost,
    entry_tuples,
    estimate,
    expected_memory,
    operator_proc,
    priority,
    proc,
)
from processors.core.joins.graph import JoinGraph

# Fig. 3: R1 ⋈_A R2 ⋈_B R3 (inputs 0, 1, 2); ΔR1 probes R2 then R3 with an R2,R3 cache.
GRAPH = JoinGraph(3, [((0, "a"), (1, "a")), ((1, "b"), (2, "b"))])
ORDERS = [(1, 2), (2, 0), (1, 0)]
STATS = [
    PipelineStats(d=(10.0, 20.0, 5.0), c=(1.0, 2.0)),
    PipelineStats(d=(4.0, 8.0, 1.0), c=(1.0, 1.0)),
    PipelineStats(d=(6.0, 3.0, 2.0), c=(1.0, 1.0)),
]
PARAMS = CacheParams(probe_cost=0.5, update_cost=0.25, miss_prob=0.2)


def the_cache():
    (c,) = prefix_candidates(GRAPH, ORDERS).caches
    return c


def test_benefit_cost_proc_by_hand() -> None:
    c = the_cache()
    # work = 10*1 + 20*2 = 50; proc = 10*0.5 + 0.2*(50 + 5*0.25) = 15.25
    assert STATS[0].work(0, 1) == 50.0
    assert proc(c, STATS, PARAMS) == pytest.approx(15.25)
    assert benefit(c, STATS, PARAMS) == pytest.approx(34.75)
    # updates of R2 ⋈ R3: ΔR2's and ΔR3's tuples after their first operator: 8 + 3
    assert cost(c, STATS, PARAMS) == pytest.approx(0.25 * 11)
    assert operator_proc(STATS, 0, 1) == 40.0
    assert entry_tuples(c, STATS) == 0.5


def test_memory_and_priority_by_hand() -> None:
    c = the_cache()
    # 100 keys x (16 + 8 * 1 key column + 8 * 2 refs * 0.5 tuples) = 3200 bytes
    assert expected_memory(c, STATS, 100) == pytest.approx(3200.0)
    assert expected_memory(c, STATS, 100, CacheSizing(0, 0, 4)) == pytest.approx(400.0)
    assert priority(34.75 - 2.75, 3200.0) == pytest.approx(0.01)
    assert priority(1.0, 0.0) == float("inf")
    e = estimate(c, STATS, PARAMS, 100)
    assert (e.proc, e.benefit, e.cost, e.memory) == pytest.approx((15.25, 34.75, 2.75, 3200))
    assert e.net == pytest.approx(32.0)


def test_no_misses_and_all_misses() -> None:
    """miss_prob 0: only probes are paid; 1: the cache costs probes and inserts on top."""
    c = the_cache()
    p0 = CacheParams(0.5, 0.25, 0.0)
    assert benefit(c, STATS, p0) == pytest.approx(50 - 5)
    p1 = CacheParams(0.5, 0.25, 1.0)
    assert benefit(c, STATS, p1) == pytest.approx(-5 - 5 * 0.25)


def test_global_cache_cost_counts_x_union_y() -> None:
    """Fig. 12's (T ⋈ S) ⋈ R: maintained by all three pipelines from their outputs."""
    orders = [(1, 2), (0, 2), (1, 0)]
    (c,) = [c for c in global_candidates(GRAPH, orders) if c.pipeline == 0]
    assert c.update_position == 2
    assert cost(c, STATS, PARAMS) == pytest.approx(0.25 * (5 + 1 + 2))


def test_cost_constants() -> None:
    k = CostConstants(1.0, 0.5, 0.1, 2.0, 0.25)
    c = the_cache()
    assert k.probe_cost(2, 10) == pytest.approx(1 + 1 + 1)
    assert k.update_cost(2) == pytest.approx(2.5)
    p = k.params(c, STATS, 0.3)
    assert (p.probe_cost, p.update_cost, p.miss_prob) == pytest.approx((1.55, 2.25, 0.3))


def test_stats_shape_checked() -> None:
    with pytest.raises(ValueError):
        PipelineStats(d=(1.0, 2.0), c=(1.0, 2.0))


def test_window_average() -> None:
    w = WindowAverage(3)
    w.add(1.0)
    assert (w.mean, w.ready) == (1.0, False)
    w.add(np.array([2.0, 3.0, 4.0]))
    assert (w.total, w.mean, w.ready) == (9.0, 3.0, True)
    w.add(np.arange(10.0))
    assert w.total == 7 + 8 + 9
    w.add(100.0)
    assert w.total == 8 + 9 + 100


def test_operator_profile_by_hand() -> None:
    """Appendix A: d_ij = rate x sum(delta_j) / W, c_ij = sum(tau_j) / sum(delta_j)."""
    prof = OperatorProfile(2, w=2)
    prof.record(np.array([[1, 4, 2]]), np.array([[2.0, 8.0]]))
    assert prof.d(10.0) == pytest.approx([10, 40, 20])
    prof.record(np.array([[1, 2, 0], [1, 6, 3]]), np.array([[1.0, 2.0], [3.0, 3.0]]))
    assert prof.ready
    # the last two rows: delta sums (2, 8, 3), tau sums (4, 5)
    assert prof.d(10.0) == pytest.approx([10, 40, 15])
    assert prof.c() == pytest.approx([2.0, 5 / 8])
    st_ = prof.stats(10.0)
    assert st_.d == pytest.approx((10, 40, 15)) and st_.c == pytest.approx((2.0, 5 / 8))
    with pytest.raises(ValueError):
        prof.record(np.ones((1, 2)), np.ones((1, 2)))


MASK = 2**64 - 1


def mix64(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def bits_set(keys: list[int], n_bits: int, seed: int) -> int:
    return len({mix64((k & MASK) ^ seed) % n_bits for k in keys})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**63), 2**63 - 1) | st.integers(0, 20), max_size=300),
    st.integers(1, 40),
    st.sampled_from([1.0, 2.0, 4.5]),
    st.integers(1, 4),
    st.integers(0, 2**64 - 1),
)
def test_bloom_windows_match_exact_recount(
    keys: list[int], window: int, alpha: float, batches: int, seed: int
) -> None:
    """Each closed window's b equals the distinct hashed bits recounted in Python, however
    the stream is split into batches; the estimate averages the last W of b / window."""
    est = BloomMissEstimator(window, alpha, w=3, seed=seed)
    arr = np.array(keys, np.int64)
    for part in np.array_split(arr, batches):
        est.observe(part)
    full = len(keys) // window
    want = [bits_set(keys[k * window : (k + 1) * window], est.n_bits, seed) for k in range(full)]
    assert est.windows.count == full
    if full:
        last = want[-3:]
        assert est.distinct == pytest.approx(sum(last) / len(last))
        assert est.miss_prob == pytest.approx(sum(last) / len(last) / window)


def horizon_recount(keys: list[int], window: int, n_bits: int, seed: int, horizon: int):
    """Per closed window: keys whose bit was set in neither this window so far nor the
    ``horizon`` windows before it; and the bits set over the window and its horizon."""
    last: dict[int, int] = {}
    misses, held = [], []
    for k in range(len(keys) // window):
        missed = 0
        for key in keys[k * window : (k + 1) * window]:
            bit = mix64((key & MASK) ^ seed) % n_bits
            if last.get(bit, -(10**9)) < k - horizon:
                missed += 1
            last[bit] = k
        misses.append(missed)
        held.append(sum(1 for w in last.values() if w >= k - horizon))
    return misses, held


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 60), max_size=400),
    st.integers(1, 30),
    st.integers(0, 4),
    st.integers(1, 4),
    st.integers(0, 2**64 - 1),
)
def test_bloom_horizon_matches_exact_recount(
    keys: list[int], window: int, horizon: int, batches: int, seed: int
) -> None:
    """With a horizon a key misses only if unseen (by its bit) over its window so far and
    the ``horizon`` windows before; windows without a full horizon before them are left out;
    horizon 0 is the paper's estimate (bits set per window)."""
    est = BloomMissEstimator(window, 2.0, w=3, seed=seed, horizon=horizon)
    for part in np.array_split(np.array(keys, np.int64), batches):
        est.observe(part)
    misses, held = horizon_recount(keys, window, est.n_bits, seed, horizon)
    counted = misses[horizon:][-3:], held[horizon:][-3:]
    assert est.windows.count == max(0, len(misses) - horizon)
    if counted[0]:
        assert est.miss_prob == pytest.approx(sum(counted[0]) / len(counted[0]) / window)
        assert est.distinct == pytest.approx(sum(counted[1]) / len(counted[1]))
    if horizon == 0:
        assert misses == held


def test_bloom_horizon_sees_recurring_keys_as_hits() -> None:
    """Keys cycling over 100 values: one-window filters of 50 probes call every probe a
    miss, a 3-window horizon (150 probes) calls none."""
    stream = np.tile(np.arange(100, dtype=np.int64), 20)
    paper = BloomMissEstimator(50, 8.0, w=4)
    paper.observe(stream)
    longer = BloomMissEstimator(50, 8.0, w=4, horizon=3)
    longer.observe(stream)
    assert paper.miss_prob > 0.9
    assert longer.ready and longer.miss_prob < 0.05


def test_observed_miss_rate_skips_the_warm_up() -> None:
    m = ObservedMissRate(4, w=2, skip=1)
    m.observe(np.array([1, 1, 1, 1, 0, 1, 0, 0], bool))
    assert m.windows.count == 1 and m.miss_prob == 0.25


def test_bloom_extremes() -> None:
    """One repeated key misses once per window; distinct keys in a large filter nearly always."""
    same = BloomMissEstimator(50, 2.0, w=4)
    same.observe(np.full(200, 7, np.int64))
    assert same.ready and same.miss_prob == pytest.approx(1 / 50)
    fresh = BloomMissEstimator(100, 64.0, w=2)
    fresh.observe(np.arange(200, dtype=np.int64))
    assert 0.97 <= fresh.miss_prob <= 1.0


def test_observed_miss_rate() -> None:
    m = ObservedMissRate(4, w=2)
    m.observe(np.array([1, 0, 0, 0, 1, 1], bool))
    assert m.windows.count == 1 and m.miss_prob == 0.25
    m.observe(np.array([0, 1, 1, 1], bool))
    assert m.ready and m.miss_prob == pytest.approx((0.25 + 0.75) / 2)


def test_key_words() -> None:
    a = np.array([1, 2, 1, 2], np.int64)
    b = np.array([5, 5, 5, 6], np.int64)
    assert (key_words([a]) == a).all()
    w = key_words([a, b])
    assert w[0] == w[2] and len(set(w.tolist())) == 3
    assert key_words([b, a])[0] != w[0]  # column order matters
