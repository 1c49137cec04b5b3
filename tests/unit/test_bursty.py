"""The bursty ON/OFF workload of Babcock et al., Sect. 6 (Poisson flow starts, Pareto flow
durations, k = 1, alpha = 2.3) and piecewise-constant rate schedules. Statistical checks use a
fixed seed and a tolerance of several standard errors of the estimator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from processors.workloads.bursty import (
    OnOffWorkload,
    rate_schedule_arrivals,
    steady_with_bursts,
)


def test_same_seed_same_arrivals_other_seed_other_arrivals() -> None:
    a = OnOffWorkload(seed=7).arrivals(2000)
    b = OnOffWorkload(seed=7).arrivals(2000)
    c = OnOffWorkload(seed=8).arrivals(2000)
    assert np.array_equal(a, b)
    assert not np.array_equal(a[: min(len(a), len(c))], c[: min(len(a), len(c))])
    # a longer run starts with the same flows (the draws are a prefix-stable sequence)
    s1, l1 = OnOffWorkload(seed=7).flows(2000)
    s2, l2 = OnOffWorkload(seed=7).flows(4000)
    assert np.array_equal(s1, s2[: len(s1)]) and np.array_equal(l1, l2[: len(l1)])


def test_flow_durations_are_pareto_with_the_papers_parameters() -> None:
    w = OnOffWorkload(seed=1)
    assert (w.alpha, w.k) == (2.3, 1.0)
    _, lengths = w.flows(40_000)
    n = len(lengths)
    assert lengths.min() >= w.k
    # maximum-likelihood tail index of a Pareto(k) sample: n / sum(ln(x / k)); s.e. alpha/sqrt(n)
    alpha_hat = n / np.log(lengths / w.k).sum()
    assert abs(alpha_hat - 2.3) < 5 * 2.3 / math.sqrt(n)
    # the survival function P(X > x) = (k / x)^alpha at a few points
    for x in (1.5, 2.0, 4.0):
        p = (w.k / x) ** w.alpha
        assert abs((lengths > x).mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    assert w.mean_duration == pytest.approx(2.3 / 1.3)


def test_flows_start_as_a_poisson_process() -> None:
    w = OnOffWorkload(mean_interarrival=2.0, seed=3)
    starts, _ = w.flows(50_000)
    n = len(starts)
    assert np.all(np.diff(starts) > 0) and starts[0] >= 0 and starts[-1] < 50_000
    gaps = np.diff(starts)
    # exponential gaps: mean 2, coefficient of variation 1
    assert abs(gaps.mean() - 2.0) < 5 * 2.0 / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1) < 0.05
    # counts per window of 20 are Poisson: variance / mean near 1
    counts = np.bincount((starts // 20).astype(int), minlength=2500)
    assert abs(counts.var() / counts.mean() - 1) < 0.15


def test_arrivals_follow_the_flows() -> None:
    w = OnOffWorkload(rate=4.0, seed=5)
    duration = 20_000
    times = w.arrivals(duration)
    assert np.all(np.diff(times) >= 0) and times[0] >= 0 and times[-1] < duration
    # long-run rate: rate * E[duration] / mean interarrival (s.d. of the total about 1.2%)
    expected = w.mean_rate * duration
    assert abs(len(times) - expected) < 0.06 * expected
    # each flow sends evenly spaced packets, one every 1 / rate, from a random phase on
    sparse = OnOffWorkload(mean_interarrival=1e5, rate=4.0, seed=2)
    starts, lengths = sparse.flows(1e6)
    t = sparse.arrivals(1e6)
    assert len(starts) >= 5 and np.all(np.diff(starts) > 100)  # flows far apart
    for s, d in zip(starts, lengths, strict=True):
        mine = t[(t >= s) & (t < s + 100)]
        assert s <= mine[0] < s + 0.25 and mine[-1] < s + d
        assert np.allclose(np.diff(mine), 0.25)
        assert len(mine) in (math.floor(d * 4), math.ceil(d * 4))
    assert sum(len(t[(t >= s) & (t < s + 100)]) for s in starts) == len(t)


def test_on_off_arrivals_are_burstier_than_poisson() -> None:
    """Counts per window: variance over mean is near 1 for Poisson arrivals at any window
    size; for the ON/OFF superposition it is larger and grows with the window (heavy-tailed
    flow durations: long-range dependence)."""
    times = OnOffWorkload(seed=9).arrivals(20_000)

    def dispersion(width: float) -> float:
        counts = np.bincount((times // width).astype(int))
        return float(counts.var() / counts.mean())

    assert dispersion(10) > 2 and dispersion(100) > dispersion(10) * 1.2
    assert dispersion(1000) > dispersion(100)


def test_bad_on_off_settings_are_named() -> None:
    with pytest.raises(ValueError, match="alpha"):
        OnOffWorkload(alpha=0)
    with pytest.raises(ValueError, match="rate"):
        OnOffWorkload(rate=float("inf"))
    with pytest.raises(ValueError, match="duration"):
        OnOffWorkload().arrivals(0)


def test_rate_schedule_evenly_spaced_is_exact() -> None:
    t = rate_schedule_arrivals([0, 10, 20, 25], [1, 0.5, 0])
    assert t.tolist() == [*range(10), 10, 12, 14, 16, 18]
    t = steady_with_bursts(30, 0.5, [(10, 5, 2)])
    assert t.tolist() == [
        0,
        2,
        4,
        6,
        8,
        10,
        10.5,
        11,
        11.5,
        12,
        12.5,
        13,
        13.5,
        14,
        14.5,
        15,
        17,
        19,
        21,
        23,
        25,
        27,
        29,
    ]


def test_rate_schedule_poisson_counts() -> None:
    t = rate_schedule_arrivals([0, 1000, 2000], [5, 1], poisson=True, seed=4)
    assert np.array_equal(t, rate_schedule_arrivals([0, 1000, 2000], [5, 1], poisson=True, seed=4))
    first = int((t < 1000).sum())
    assert abs(first - 5000) < 5 * math.sqrt(5000)
    assert abs(len(t) - first - 1000) < 5 * math.sqrt(1000)


def test_bad_rate_schedules_are_named() -> None:
    with pytest.raises(ValueError, match="one rate per interval"):
        rate_schedule_arrivals([0, 1], [1, 2])
    with pytest.raises(ValueError, match="increasing"):
        rate_schedule_arrivals([0, 0], [1])
    with pytest.raises(ValueError, match="rates must be"):
        rate_schedule_arrivals([0, 1], [-1])
    with pytest.raises(ValueError, match="overlaps"):
        steady_with_bursts(30, 1, [(10, 10, 2), (15, 2, 3)])
