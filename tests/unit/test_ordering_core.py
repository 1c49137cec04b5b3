"""Static orders, the profile window, the matrix view's kept entries, configuration errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processors.core.ordering.config import OrderingConfig, OrderingConfigError
from processors.core.ordering.profile import CostEstimates
from processors.core.ordering.reoptimizers import REOPTIMIZERS, make_reoptimizer
from processors.core.ordering.static import (
    brute_force_order,
    optimal_order,
    order_cost,
    pass_fractions,
    static_greedy,
)
from processors.kernels.profile_view import view_row


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(0, 10_000))
def test_optimal_equals_exhaustive_search(n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    drops = rng.random((60, n)) < rng.uniform(0.1, 0.9, n)
    costs = rng.uniform(0.5, 3.0, n)
    order, cost = optimal_order(drops, costs)
    _, brute = brute_force_order(drops, costs)
    assert cost == pytest.approx(brute)
    assert order_cost(order, drops, costs) == pytest.approx(brute)
    assert sorted(order) == list(range(n))
    # the greedy order is never better than optimal, and within the factor 4 of Theorem 4.1
    greedy = order_cost(static_greedy(drops, costs), drops, costs)
    assert brute - 1e-9 <= greedy <= 4 * brute + 1e-9


def test_pass_fractions_match_direct_counts() -> None:
    rng = np.random.default_rng(0)
    drops = rng.random((100, 4)) < 0.4
    fractions = pass_fractions(drops)
    for s in range(16):
        members = [f for f in range(4) if s >> f & 1]
        expected = (~drops[:, members]).all(axis=1).mean() if members else 1.0
        assert fractions[s] == pytest.approx(expected)


def test_order_cost_is_equation_1() -> None:
    drops = np.array([[1, 0], [0, 1], [0, 0], [1, 1]], dtype=bool)
    # F0 first: all 4 tuples meet it, 2 survive to F1 (cost 3 each): (4 * 1 + 2 * 3) / 4
    assert order_cost([0, 1], drops, [1.0, 3.0]) == pytest.approx(2.5)
    assert order_cost([1, 0], drops, [1.0, 3.0]) == pytest.approx(3.5)


@pytest.mark.parametrize("algorithm", ["agreedy", "independent", "sweep", "localswaps"])
def test_incremental_view_equals_recomputation_on_kept_entries(algorithm: str) -> None:
    rng = np.random.default_rng(4)
    n = 6
    order = list(rng.permutation(n))
    reopt = make_reoptimizer(n, OrderingConfig(algorithm, window_tuples=50), order)
    costs = np.ones(n)
    for _ in range(20):
        bits = (rng.random((rng.integers(1, 30), n)) < 0.4).astype(np.uint8)
        reopt.absorb(bits, 0, costs, reoptimize=False)
    incremental = reopt.view.copy()
    reopt.recompute_view()
    assert incremental.tolist() == reopt.view.tolist()
    # and the kept entries equal the full view's entries
    full = np.zeros((n, n), np.int64)
    rows = reopt.window.live_rows()
    for r in range(n):
        view_row(full, r, reopt.order, reopt.window.bits, rows, 0, -1)
    assert np.array_equal(incremental[incremental != 0], full[incremental != 0])


def test_cost_estimates_average_over_recent_calls() -> None:
    est = CostEstimates(2, samples=2, call_overhead_ns=100, min_tuples=10)
    est.record(0, 1100, 100)  # 10 ns per tuple after the call overhead
    est.record(0, 2100, 100)  # 20
    est.record(0, 3100, 100)  # 30: the oldest sample is forgotten
    est.record(1, 5000, 5)  # too few tuples to tell
    assert est.values().tolist() == [25.0, 25.0]  # filter 1 untimed: the mean of the timed
    assert CostEstimates(2, fixed=(1.0, 4.0)).values().tolist() == [1.0, 4.0]


def test_a_stalled_call_does_not_change_a_filters_cost() -> None:
    """A call descheduled for 5 ms (a GIL switch interval) among 2-microsecond calls: by total
    time over total tuples it made the filter look 40 times dearer, which put a filter dropping
    90% behind one dropping 2% on a loaded CI machine. The median ignores it, and still follows
    a real change once it holds for half the ring."""
    est = CostEstimates(1, samples=64, min_tuples=10)
    for _ in range(40):
        est.record(0, 2_000, 250)  # 8 ns per tuple
    est.record(0, 5_000_000, 250)
    assert est.values()[0] == 8.0
    for _ in range(33):
        est.record(0, 10_000, 250)  # the filter now costs 40 ns per tuple
    assert est.values()[0] == 40.0


def test_defaults_follow_table_1() -> None:
    assert OrderingConfig("agreedy_exact").p == 0.01
    assert OrderingConfig("agreedy_exact").window == 1000
    # the default, A-Greedy+: p is its maximum; its window is longer (docs/adaptive-filters.md)
    assert OrderingConfig().p == 0.01 and OrderingConfig().window == 8000
    assert OrderingConfig("independent").p == 0.005
    assert OrderingConfig("sweep").window == 500
    assert OrderingConfig().alpha == 0.9
    assert set(REOPTIMIZERS) == {
        "agreedy",
        "agreedy_exact",
        "independent",
        "sweep",
        "localswaps",
        "fixed",
    }


@pytest.mark.parametrize(
    ("settings_", "named"),
    [
        ({"algorithm": "magic"}, "magic"),
        ({"profile_probability": 1.5}, "profile_probability"),
        ({"window_tuples": 0}, "window_tuples"),
        ({"alpha": 0}, "alpha"),
        ({"costs": [1, -1]}, "costs"),
        ({"windw": 3}, "windw"),
    ],
)
def test_bad_settings_name_the_problem(settings_: dict, named: str) -> None:
    with pytest.raises(OrderingConfigError, match=named):
        OrderingConfig.from_mapping(settings_)


def test_order_must_be_a_permutation() -> None:
    with pytest.raises(ValueError, match="permutation"):
        make_reoptimizer(3, OrderingConfig(), [0, 0, 1])


def test_time_based_window_expires_in_the_reoptimizer() -> None:
    config = OrderingConfig(window_tuples=100, window_ms=100, min_profile_tuples=10**6)
    reopt = make_reoptimizer(3, config)
    costs = np.ones(3)
    old = np.array([[1, 0, 0], [1, 1, 0]], np.uint8)
    new = np.array([[0, 1, 1]], np.uint8)
    reopt.absorb(old, 0, costs)
    reopt.absorb(new, 50, costs)
    assert len(reopt.window) == 3
    reopt.absorb(np.zeros((0, 3), np.uint8), 120, costs)  # the tuples of time 0 are too old
    assert len(reopt.window) == 1
    assert reopt.window.bits[reopt.window.live_rows()].tolist() == [[0, 1, 1]]
    assert reopt.view.tolist() == [[0, 1, 1], [0, 1, 1], [0, 0, 0]]
