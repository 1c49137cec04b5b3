"""``streamon bench latency``'s queries: each builds, and its result carries the input times
the latency is measured from (the run itself is a benchmark, not a test)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from processors.bench.latency import (
    BURST_PER_MS,
    JOIN_WINDOW_MS,
    NEWEST,
    QUERIES,
    query_text,
    recurring_keys,
)
from processors.bench.latency_capacity import Pacer, sustained_capacity


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_each_latency_query_builds_and_shows_its_input_times(kind: str) -> None:
    scope: dict[str, Any] = {}
    exec(query_text(kind, f"lat-{kind}", "lat", "lat.out"), scope)  # noqa: S102 (our text)
    plan = scope["query"].build()
    fields = {f["name"]: f["type"] for f in plan.output_schema["fields"]}
    for name in NEWEST[kind]:
        assert name in fields, (kind, sorted(fields))


def test_the_capacity_burst_and_the_paced_records_meet_as_many_partners() -> None:
    """The burst's keys recur per window per stream as the paced records' do (about once), so
    the join's capacity is measured on the work whose latency it sets the rate for: an
    arrival meets about one tuple of each other stream in either phase."""
    streams = 3
    for rate in (BURST_PER_MS * 1000, 30_000, 123_654):
        per_window_per_stream = rate / streams * JOIN_WINDOW_MS / 1000
        assert recurring_keys(rate, streams) == pytest.approx(per_window_per_stream, abs=1)
    assert recurring_keys(1, streams) == 10  # a floor: a handful of keys, not one


class PacedWorker:
    """A worker that keeps up with rates up to ``capacity``: above it its output's lag grows
    through a step; ``stall`` steps (by index) fail whatever the rate."""

    def __init__(self, capacity: float, stall: tuple[int, ...] = ()) -> None:
        self.capacity, self.stall = capacity, stall
        self.rates: list[float] = []
        self.reads = self.drains = 0

    def set_rate(self, rate: float) -> None:
        if rate:
            self.rates.append(rate)

    def drain(self) -> None:
        self.drains += 1

    def lag(self) -> float:
        self.reads += 1
        behind = self.rates[-1] > self.capacity or len(self.rates) - 1 in self.stall
        middle = self.reads % 2 == 1
        return (400.0 if middle else 1_600.0) if behind else 120.0


@pytest.mark.parametrize("stall", [(), (1,)])
def test_the_sustained_capacity_lies_between_the_last_rate_kept_up_with_and_the_next(stall):
    """30k, 37.5k (or a stall there, then 37.5k again after a drain), 46.9k kept up with;
    58.6k failed twice, each time followed by a drain."""
    worker = PacedWorker(50_000.0, stall)
    capacity, steps = sustained_capacity(
        worker.set_rate, worker.lag, worker.drain, 200_000.0, step_s=0.01
    )
    rates = [s["rate"] for s in steps]
    assert rates == [30_000, 37_500, *([37_500] if stall else []), 46_875, 58_594, 58_594]
    assert [s["kept_up"] for s in steps].count(False) == worker.drains == 2 + len(stall)
    assert 46_875 <= capacity <= 58_594 and [round(r) for r in worker.rates] == rates


def test_a_worker_that_never_keeps_up_gets_a_capacity_below_the_first_step() -> None:
    worker = PacedWorker(1_000.0)
    capacity, steps = sustained_capacity(
        worker.set_rate, worker.lag, worker.drain, 200_000.0, step_s=0.01
    )
    assert len(steps) == 2 and capacity < steps[0]["rate"]


def test_the_pacer_publishes_nothing_at_rate_zero_and_stamps_records_with_the_time() -> None:
    calls: list[tuple[int, int]] = []
    with Pacer(lambda n, ms: calls.append((n, ms)), tick_s=0.001) as pacer:
        time.sleep(0.05)
        assert calls == []
        before = int(time.time() * 1000)
        pacer.rate = 100_000.0
        time.sleep(0.05)
    assert calls and all(n >= 1 for n, _ in calls)
    stamps = [ms for _, ms in calls]
    assert stamps == sorted(stamps) and stamps[0] >= before
