"""Scheduling plans from measured statistics (Babcock et al., Sect. 3: statistics gathered over
a recent window) and the scheduling configuration the runtime reads."""

from __future__ import annotations

import pytest

from processors.core.scheduling import make_policy
from processors.core.scheduling.config import SchedulingConfig, SchedulingConfigError
from processors.core.scheduling.measured import (
    UNKNOWN_SELECTIVITY,
    UNKNOWN_TIME_S,
    StatsWindow,
    Totals,
    measured_plan,
)


def test_measured_plan_from_totals() -> None:
    totals = {
        "a": Totals(tuples_in=1000, tuples_out=500, busy_ns=2_000_000, batches=4),
        "b": Totals(tuples_in=500, tuples_out=50, busy_ns=1_500_000, batches=2),
    }
    config = SchedulingConfig(policy="chain-flush", latency_ms=200)
    plan = measured_plan("q", {"p": ["a", "b"]}, totals, config)
    assert plan.stats["a"] == pytest.approx((2e-6, 0.5), rel=1e-12)
    assert plan.stats["b"] == pytest.approx((3e-6, 0.1), rel=1e-12)
    assert plan.query_of == {"p": "q"} and plan.latency_threshold == {"q": 0.2}
    # p_q is the time to push the head *batch* (tuples_in / batches) to the output:
    # a: 250 tuples * 2 us, then 125 reach b at 3 us each; b: 250 tuples * 3 us
    assert plan.remaining_time["a"] == pytest.approx(250 * 2e-6 + 125 * 3e-6)
    assert plan.remaining_time["b"] == pytest.approx(250 * 3e-6)
    # the plan drives every policy
    for name, settings in (("chain", {}), ("chain-flush", {}), ("mixed", {"gamma": 1.0})):
        make_policy(name, plan, **settings).describe()
    # chart: (0,1), (2e-6, 0.5), (3.5e-6, 0): a alone is steeper than a+b? 0.5/2e-6 = 250000
    # against 1/3.5e-6 = 285714: one chain
    assert make_policy("chain", plan).priorities()["a"] == pytest.approx(1 / 3.5e-6)


def test_operators_without_input_keep_their_previous_figures_or_a_neutral_default() -> None:
    config = SchedulingConfig()
    first = measured_plan(
        "q", {"p": ["a", "b"]}, {"a": Totals(100, 10, 1000, 1), "b": Totals(10, 1, 50, 1)}, config
    )
    assert first.latency_threshold == {}
    # b reports nothing in the next window: it keeps its figures
    second = measured_plan("q", {"p": ["a", "b"]}, {"a": Totals(100, 20, 2000, 1)}, config, first)
    assert second.stats["b"] == first.stats["b"]
    assert second.stats["a"] == pytest.approx((2e-8, 0.2))
    # an operator never heard from: cheap and not selective
    third = measured_plan("q", {"p": ["a", "c"]}, {"a": Totals(0, 0, 0, 0)}, config)
    assert third.stats["c"] == (UNKNOWN_TIME_S, UNKNOWN_SELECTIVITY)
    assert third.stats["a"] == (UNKNOWN_TIME_S, UNKNOWN_SELECTIVITY)


def test_stats_window_sums_recent_reports_per_agent() -> None:
    w = StatsWindow(window_ms=5000)
    w.add(0, "a", Totals(10, 5, 100, 1))
    w.add(1000, "a", Totals(20, 10, 200, 2))
    w.add(6000, "a", Totals(30, 15, 300, 3))
    w.add(6000, "b", Totals(1, 1, 1, 1))
    t = w.totals(now_ms=5500)  # keeps end_ms >= 500
    assert t["a"] == Totals(50, 25, 500, 5) and t["b"] == Totals(1, 1, 1, 1)
    t = w.totals(now_ms=6500)  # keeps end_ms >= 1500
    assert t["a"] == Totals(30, 15, 300, 3)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"policy": "lifo"}, "unknown scheduling policy"),
        ({"policy": "chain-flush"}, "needs latency_ms"),
        ({"policy": "chain", "latency_ms": -1}, "latency_ms must be > 0"),
        ({"policy": "mixed"}, "needs gamma"),
        ({"policy": "mixed", "gamma": float("nan")}, "gamma must be >= 0"),
        ({"grant_tuples": 0}, "grant_tuples"),
        ({"stats_window_s": 0}, "stats_window_s"),
        ({"colour": "red"}, "unknown scheduling setting"),
    ],
)
def test_bad_configuration_is_named(settings, message) -> None:
    with pytest.raises(SchedulingConfigError, match=message):
        SchedulingConfig.from_mapping(settings)


def test_configuration_round_trips_through_json() -> None:
    config = SchedulingConfig(policy="mixed", gamma=0.5)
    assert SchedulingConfig.from_mapping(config.to_json()) == config
    assert config.with_(policy="fifo").policy == "fifo"
