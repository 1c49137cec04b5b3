"""The oracle and the arithmetic of ``streamon experiment shedding`` (issue 18), in process:
the exact join's count and the check of each result against brute force, the ramp's overload
span and feasible kept fraction in closed form, the capacity fitted from a staircase."""

from __future__ import annotations

import numpy as np
import pytest

from processors.experiments.shedding_live_run import (
    capacity_of,
    gather_changes,
    judge_latency,
    kept_up,
)
from processors.experiments.shedding_live_setup import (
    Ramp,
    Sent,
    ShedSetup,
    check_results,
    exact_pairs,
)


def brute_pairs(a: Sent, b: Sent, window_ms: int) -> set[tuple[int, int]]:
    return {
        (int(a.dst[i]), int(b.dst[j]))
        for i in range(len(a.dst))
        for j in range(len(b.dst))
        if a.pid[i] == b.pid[j] and -window_ms < int(a.ts[i]) - int(b.ts[j]) <= window_ms
    }


def sent(rng: np.random.Generator, n: int, pids: int, span_ms: int) -> Sent:
    return Sent(
        np.arange(n, dtype=np.int64),
        rng.integers(0, pids, n).astype(np.int64),
        np.sort(rng.integers(0, span_ms, n)).astype(np.int64),
    )


@pytest.mark.parametrize("seed", range(5))
def test_the_exact_join_is_counted_as_brute_force_finds_it(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = sent(rng, 300, 7, 10_000), sent(rng, 250, 7, 10_000)
    pairs = brute_pairs(a, b, 2_000)
    assert exact_pairs(a, b, 2_000) == len(pairs)
    since = 4_000
    late = {(i, j) for i, j in pairs if a.ts[i] >= since and b.ts[j] >= since}
    assert exact_pairs(a, b, 2_000, since) == len(late)


def test_each_result_is_checked_against_the_records_written() -> None:
    rng = np.random.default_rng(9)
    a, b = sent(rng, 200, 5, 8_000), sent(rng, 200, 5, 8_000)
    pairs = sorted(brute_pairs(a, b, 2_000))
    good = pairs[:50]
    wrong = [(0, j) for j in range(200) if (0, j) not in set(pairs)][:5]
    unknown = [(999, 0)]
    results = good + [good[0]] + wrong + unknown  # one repeated
    a_dst = np.array([p[0] for p in results], np.int64)
    b_dst = np.array([p[1] for p in results], np.int64)
    valid, duplicates = check_results(a, b, a_dst, b_dst, 2_000)
    assert valid.tolist() == [True] * 51 + [False] * (len(wrong) + 1)
    assert duplicates == 1


def test_the_ramp_overload_span_and_feasible_fraction() -> None:
    setup = ShedSetup(low=0.5, high=3.0, steady_s=10, ramp_s=10, top_s=10, tail_s=10)
    ramp = Ramp(1_000.0, setup)
    up, down = ramp.overload()
    assert up == pytest.approx(12.0)  # 0.5 -> 3 in 10 s: 1x after 2 s
    assert down == pytest.approx(38.0)
    assert float(ramp.rate(up)) == pytest.approx(1_000.0)
    assert ramp.ramp_end_s == 40.0
    # over the span: ramps average 2x (8 s each way), the top 3x for 10 s; kept at most 1x
    offered = 2 * 8 * 2.0 + 10 * 3.0
    assert ramp.feasible_kept_fraction((up, down)) == pytest.approx(26 / offered, rel=1e-3)


def test_capacity_is_between_the_last_rate_kept_up_with_and_the_first_not() -> None:
    steps = [{"rate": r, "kept_up": r < 3_000} for r in (1_000, 2_000, 3_000, 4_000)]
    assert capacity_of(steps) == pytest.approx(np.sqrt(2_000 * 3_000))
    assert capacity_of(steps[:2]) == 2_000
    assert capacity_of(steps[:3]) == pytest.approx(np.sqrt(2_000 * 3_000))  # the last step
    # a step that fails alone was a stall: the staircase goes on past it
    stall = [{"rate": r, "kept_up": r != 2_000 and r < 5_000}
             for r in (1_000, 2_000, 3_000, 4_000, 5_000, 6_000)]  # fmt: skip
    assert capacity_of(stall) == pytest.approx(np.sqrt(4_000 * 5_000))
    with pytest.raises(RuntimeError, match="no rate"):
        capacity_of([{"rate": 500, "kept_up": False}])
    assert ShedSetup(calibration_steps=3).calibration_rates() == [1_000, 1_150, 1_322]


def test_the_feasible_fraction_with_the_kept_rate_measured_at_the_top() -> None:
    """Measured at the top (3x offered, 0.8x kept up with: reading the rest costs), the most
    kept at a rate between 1x and 3x is interpolated linearly, never above the capacity."""
    setup = ShedSetup(low=0.5, high=3.0, steady_s=10, ramp_s=10, top_s=10, tail_s=10)
    ramp = Ramp(1_000.0, setup)
    span = ramp.overload()
    offered = 2 * 8 * 2.0 + 10 * 3.0
    # on the ramps (8 s each, rate u x C, u uniform in [1, 3]) at most 1 - 0.1 (u - 1): 0.9 on
    # average; at the top 0.8 for 10 s
    kept = 2 * 8 * 0.9 + 10 * 0.8
    assert ramp.feasible_kept_fraction(span, 800.0) == pytest.approx(kept / offered, rel=1e-3)
    plain = ramp.feasible_kept_fraction(span)
    assert ramp.feasible_kept_fraction(span, 1_200.0) == pytest.approx(plain)  # capped at C


def test_a_step_kept_up_with_beyond_the_latency_bound_does_not_count_within_it() -> None:
    """Each step's p99 over its second half, from the results written then: 5 s steps at
    1,000 / 2,000 / 3,000 / 4,000 records/s, every one kept up with, latency 100 ms at the
    first two, 700 ms from the third: the capacity within a 500 ms bound is that of the
    first two, the throughput's is above them all."""
    start, step_s = 1_000.0, 5.0
    written, latency = [], []
    for k, lat in enumerate((100, 100, 700, 700)):
        at = start + k * step_s + np.linspace(0.1, step_s - 0.1, 200)  # both halves
        written.append(at * 1000)
        latency.append(np.full(200, lat))
    w = np.concatenate(written).astype(np.int64)
    newer = w - np.concatenate(latency).astype(np.int64)
    results = {"written_ms": w, "a_ts": newer - 50, "b_ts": newer}  # the newer input counts
    steps = [{"rate": r, "kept_up": True} for r in (1_000, 2_000, 3_000, 4_000)]
    steps.append({"rate": 5_000, "kept_up": True})  # no result read back: its backlog judges
    judge_latency(steps, results, start, step_s, 500)
    assert [s["p99_latency_ms"] for s in steps[:4]] == pytest.approx([100, 100, 700, 700])
    assert all(s["latency_n"] == 100 for s in steps[:4])  # the second half only
    assert [s["within_bound"] for s in steps] == [True, True, False, False, True]
    assert capacity_of(steps, ok="within_bound") == pytest.approx(np.sqrt(2_000 * 3_000))
    assert capacity_of(steps) == 5_000


def test_the_feasible_fraction_of_the_capacity_within_the_latency_bound() -> None:
    """The ramp built on C = 1,000; the capacity within the bound 800: at most 800 kept
    anywhere in the overload (span as before), the top kept rate interpolated from 800."""
    setup = ShedSetup(low=0.5, high=3.0, steady_s=10, ramp_s=10, top_s=10, tail_s=10)
    ramp = Ramp(1_000.0, setup)
    span = ramp.overload()
    offered = 2 * 8 * 2.0 + 10 * 3.0
    assert ramp.feasible_kept_fraction(span, capacity=800.0) == pytest.approx(
        26 * 0.8 / offered, rel=1e-3
    )
    assert ramp.feasible_kept_fraction(span, 800.0, capacity=800.0) == pytest.approx(
        26 * 0.8 / offered, rel=1e-3
    )  # the top kept rate equal to it: flat


def test_the_share_staircase_and_the_judgement_of_a_step() -> None:
    shares = ShedSetup(high=3.0, kept_start=0.75, kept_factor=1.06).kept_shares(1_000.0)
    assert shares[0] == 0.25 and shares[-1] == 1.0 and shares[-2] < 1.0
    assert all(
        b / a == pytest.approx(1.06, abs=1e-3)
        for a, b in zip(shares[:-2], shares[1:-1], strict=True)
    )
    steady = [(t / 5, 100.0) for t in range(12)]
    assert kept_up(steady, 1_000.0)[0]
    growing = [(t / 5, 100.0 + 150.0 * t / 5) for t in range(12)]  # 150/s: over a tenth
    assert not kept_up(growing, 1_000.0)[0]
    assert not kept_up([(0.0, 1_200.0), (1.0, 1_100.0)], 1_000.0)[0]  # a second's waiting


def test_a_run_keeps_every_change_though_the_status_page_shows_the_last_20() -> None:
    page = [{"time_ms": t, "to": {"a": t / 100}, "reason": "r"} for t in range(25)]
    changes: list[dict] = []
    gather_changes(changes, page[:20])
    gather_changes(changes, page[5:25])  # the page has moved on: the first five are gone
    gather_changes(changes, page[5:25])  # read again: nothing new
    assert [c["time_ms"] for c in changes] == list(range(25))
