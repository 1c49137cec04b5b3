"""Drop-box settings (processors/core/cost/shedding.py) against the paper's closed forms and
brute force.

- Sect. 5.1: a filter chain keeps x = capacity / C(p) at its source (eqs. 23-24), and no other
  box placement of the same budget outputs more (a grid over the n + 1 boxes of Fig. 5).
- Sect. 5.2 with floors: every input keeps at least the floor, the rest as the knapsack says.
- RANGE windows (beyond the paper): the greedy ascent fits the capacity, and a grid over
  per-input shares finds nothing feasible that beats it by more than 2%.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from processors.core.cost.inputs import CostInputs, JoinEdge, StreamInput
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import Leaf, Shape, shapes
from processors.core.cost.shedding import approximate, filter_keep, knapsack


def filters_only(rate: float, sels: list[float], cost_s: float, capacity: float) -> CostInputs:
    filters = tuple((f"A.f{i} > 0", s) for i, s in enumerate(sels))
    stream = StreamInput("A", rate, 100.0, "ROWS 100", True, filters)
    return CostInputs({"A": stream}, (), cost_s, cost_s, capacity)


@pytest.mark.parametrize("sels", [[0.5], [0.3, 0.9], [0.9, 0.5, 0.1]])
def test_a_filter_chain_drops_at_its_source_as_eq_23_says(sels: list[float]) -> None:
    rate, cost_s, capacity = 1_000.0, 0.002, 1.0
    inputs = filters_only(rate, sels, cost_s, capacity)
    # eq. 21: c(i) = rate * c_i * product of the selectivities before filter i
    c = [rate * cost_s * math.prod(sels[:i]) for i in range(len(sels))]
    x1 = capacity / sum(c)  # eq. 23
    assert x1 < 1
    got = approximate(Shape(("A",), Leaf("A")), inputs)
    assert got.keep == {"A": pytest.approx(x1)} and filter_keep(c, capacity) == pytest.approx(x1)
    lambda_o = rate * math.prod(sels)  # eq. 20
    assert got.output_per_s == pytest.approx(x1 * lambda_o)  # eq. 24
    # brute force over the n + 1 boxes of Fig. 5 (eqs. 18-19): nothing feasible outputs more
    grid = np.linspace(0, 1, 21)
    best = 0.0
    for xs in itertools.product(grid, repeat=len(sels) + 1):
        cost = sum(c[i] * math.prod(xs[: i + 1]) for i in range(len(sels)))
        if cost <= capacity + 1e-12:
            best = max(best, lambda_o * math.prod(xs))
    assert got.output_per_s >= best - 1e-9


def test_floors_keep_every_input_and_share_the_rest() -> None:
    keep = knapsack({"a": 10.0, "b": 1.0, "c": 5.0}, {"a": 1.0, "b": 1.0, "c": 1.0}, 1.5, 0.2)
    assert keep == {"a": pytest.approx(1.0), "b": pytest.approx(0.2), "c": pytest.approx(0.3)}
    assert knapsack({"a": 1.0}, {"a": 2.0}, 0.1, 0.2) == {"a": 0.2}  # floors over the budget


def range_join(n: int, cost_s: float, seed: int) -> CostInputs:
    rng = np.random.default_rng(seed)
    names = [f"S{i}" for i in range(n)]
    streams = {}
    for s in names:
        rate = float(rng.uniform(5, 50))
        span = float(rng.uniform(1, 5))
        streams[s] = StreamInput(s, rate, rate * span, f"RANGE {span:.1f} s", False)
    edges = tuple(
        JoinEdge(a, b, f"{a}.k = {b}.k", float(rng.uniform(0.05, 0.5)), i)
        for i, (a, b) in enumerate(zip(names, names[1:], strict=False))
    )
    return CostInputs(streams, edges, cost_s, cost_s, 1.0)


@pytest.mark.parametrize("n, seed", [(2, 1), (2, 2), (3, 3), (3, 4)])
def test_range_windows_get_shares_as_good_as_a_grid_search(n: int, seed: int) -> None:
    inputs = range_join(n, 0.01, seed)
    for shape in shapes(list(inputs.streams), with_filters=False):
        full = evaluate(shape, inputs)
        if full.cost_per_s <= 1.0:
            continue
        got = approximate(shape, inputs)
        assert got.method == "ascent" and got.cost_per_s <= 1.0 * (1 + 1e-9)
        # per-input shares on a grid: the best feasible one, for the record of the gap
        best = 0.0
        for xs in itertools.product(np.linspace(0.05, 1, 20), repeat=n):
            keep = dict(zip(shape.streams, xs, strict=True))
            c = evaluate(shape, inputs, keep)
            if c.cost_per_s <= 1.0:
                best = max(best, c.output_per_s)
        assert got.output_per_s >= 0.98 * best, (shape.text(), got, best)


def test_a_plan_that_fits_keeps_everything_and_an_unbounded_join_is_not_shed() -> None:
    """An unbounded window's join output has no steady state to maximize."""
    inputs = range_join(2, 0.0001, 5)
    shape = shapes(list(inputs.streams), with_filters=False)[0]
    got = approximate(shape, inputs)
    assert got.method == "none" and set(got.keep.values()) == {1.0}
    unbounded = {k: StreamInput(k, v.rate, math.inf, "UNBOUNDED", False)
                 for k, v in inputs.streams.items()}  # fmt: skip
    with pytest.raises(ValueError, match="unbounded"):
        approximate(shape, CostInputs(unbounded, inputs.joins, 1.0, 1.0, 1.0))


class _Consumer:
    """What offered_records asks of a worker's consumer: its assignment and fetch high
    watermarks (None: not fetched yet)."""

    def __init__(self, highs: dict[tuple[str, int], int | None]) -> None:
        from faust.types import TP

        self.highs = {TP(t, p): h for (t, p), h in highs.items()}

    def assignment(self) -> set:  # type: ignore[type-arg]
        return set(self.highs)

    def highwater(self, tp):  # type: ignore[no-untyped-def]
        return self.highs[tp]


def test_what_is_offered_is_the_input_partitions_high_watermarks_added_up() -> None:
    from processors.runtime.shedding import offered_records

    consumer = _Consumer({("a", 0): 100, ("a", 1): 50, ("b", 0): 7, ("other", 0): 1_000})
    key, count = offered_records(consumer, {"a", "b"})  # type: ignore[misc]
    assert count == 157
    moved = _Consumer({("a", 0): 100, ("b", 0): 7})
    assert offered_records(moved, {"a", "b"})[0] != key  # type: ignore[index]
    assert offered_records(_Consumer({("a", 0): None}), {"a"}) is None  # not fetched yet
    assert offered_records(_Consumer({("other", 0): 5}), {"a"}) is None  # none held
    assert offered_records(object(), {"a"}) is None  # a consumer not started


def test_the_controller_rates_what_is_offered_and_starts_afresh_when_partitions_move() -> None:
    from processors.core.query import Query
    from processors.runtime.shed_controller import ShedController
    from topics.avro import load_schema

    q = Query("q").stream("r", topic="t", schema=load_schema("reading"), timestamp="ts")
    clock, offered = [0.0], [(1, 0)]
    plan = q.into("out").shed(500).build()
    ctl = ShedController(plan, lambda v, k: None, "w", clock=lambda: clock[0],
                         reads=lambda: 10**9, offered=lambda: offered[0])  # fmt: skip
    for k in range(1, 8):  # 1,000 offered a second; the reads say nothing here
        clock[0] += 0.2
        offered[0] = (1, 200 * k)
        rate = ctl.offered_rate()
    assert rate == pytest.approx(1_000.0)
    clock[0] += 0.2
    offered[0] = (2, 50_000)  # another partition set: its sum is no rate
    assert ctl.offered_rate() == 0.0
    clock[0] += 0.6
    offered[0] = (2, 51_800)
    assert ctl.offered_rate() == pytest.approx(3_000.0)


def test_the_controller_measures_a_rise_from_what_is_offered() -> None:
    """The rate over the last second against the second before, a share of it a second."""
    from processors.core.query import Query
    from processors.runtime.shed_controller import ShedController
    from topics.avro import load_schema

    q = Query("q").stream("r", topic="t", schema=load_schema("reading"), timestamp="ts")
    clock, offered = [0.0], [(1, 0)]
    plan = q.into("out").shed(500).build()
    ctl = ShedController(plan, lambda v, k: None, "w", clock=lambda: clock[0],
                         offered=lambda: offered[0])  # fmt: skip
    count = 0.0
    for _ in range(16):  # the rate grows from 1,000/s by 100/s a second (10%/s at first)
        clock[0] += 0.2
        count += 0.2 * (1_000.0 + 100.0 * clock[0])
        offered[0] = (1, int(count))
        ctl.offered_rate()
    # at t = 3.2 s: 1,270/s over the last second, 1,170/s the second before
    assert ctl._offered_rising() == pytest.approx(100 / 1_170, rel=0.02)
    steady = ShedController(plan, lambda v, k: None, "w", clock=lambda: clock[0],
                            offered=lambda: offered[0])  # fmt: skip
    for _ in range(16):
        clock[0] += 0.2
        count += 200
        offered[0] = (1, int(count))
        steady.offered_rate()
    assert steady._offered_rising() == pytest.approx(0.0, abs=1e-6)
