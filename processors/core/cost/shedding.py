"""Drop boxes: how much of each input a plan keeps when it needs more than the capacity
(Ayad & Naughton, Sect. 5), for EXPLAIN's approximations and for the run-time shedder.

Where: on the inputs, before any operator (Observation 2 for filters, Observation 3 for joins).
How much, maximizing the output rate under C(p) <= capacity:

- a single stream with filters (Sect. 5.1): C(p) is linear in the one box's x, so x = capacity
  / C(p) (eq. 23, with the capacity as the budget of eq. 22);
- joins over ROWS windows (Sect. 5.2): the output rate (eq. 27) and C(p) (eq. 28) are linear in
  the x's, a continuous knapsack: keep the inputs of most output per unit of cost first. The
  paper's remedy for inputs the knapsack shuts off (its discussion, item 1) is a floor: every
  input keeps at least ``floor`` before the rest is shared out;
- joins with a RANGE window (not in the paper): a box before a RANGE window also shrinks the
  window, so output and cost are polynomials of the x's, no longer a knapsack. streamon climbs
  greedily: from the floors, it raises in small steps the share of the input that adds the
  most output per unit of cost (the knapsack's rule, applied to the marginal figures), fills
  what is left, then moves share between inputs while the output grows; the same local
  search also starts from one share for all, and from each input at its floor with one share
  for the others, and the best end wins (the problem is not convex: one start alone can stop
  short; :mod:`processors.core.cost.share_search`). ``tests/unit/test_shedding.py`` compares
  both with brute force.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from processors.core.cost.inputs import CostInputs
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import Shape
from processors.core.cost.share_search import ShareSearch

#: cost model evaluations a search over RANGE windows may make (0.2 s for three streams, 5 s
#: for an MJoin of five)
EFFORT = 2_000


@dataclass(frozen=True)
class Approximation:
    """Drop boxes on the inputs: the share of each stream kept, what the plan then outputs and
    costs, and how the shares were found (``knapsack``, ``ascent``, ``none`` when the plan fits,
    ``over`` when even the floors do not)."""

    keep: dict[str, float]
    output_per_s: float
    cost_per_s: float = 0.0
    method: str = "knapsack"

    @property
    def within_capacity(self) -> bool:
        return self.method != "over"


def filter_keep(filter_costs_per_s: Sequence[float], capacity: float) -> float:
    """Eq. 23: the share a single stream's box keeps when its filters cost ``c(i)`` per second
    each at full rate (eq. 21): all of the budget over the plan's whole cost, at most 1."""
    total = sum(filter_costs_per_s)
    return 1.0 if total <= capacity else capacity / total


def knapsack(
    value: Mapping[str, float], cost: Mapping[str, float], budget: float, floor: float = 0.0
) -> dict[str, float]:
    """The continuous knapsack of eq. 29: each input's share in [floor, 1] maximizing
    sum(value * x) under sum(cost * x) <= budget; inputs that cost nothing are kept whole.
    When the floors alone exceed the budget, the floors (the caller sees the cost)."""
    keep = {s: (1.0 if cost[s] <= 0 else floor) for s in value}
    left = budget - sum(cost[s] * keep[s] for s in value)
    ranked = sorted((s for s in value if cost[s] > 0), key=lambda s: -value[s] / cost[s])
    for s in ranked:
        if left <= 0:
            break
        more = min(1.0 - keep[s], left / cost[s])
        keep[s] += more
        left -= more * cost[s]
    return keep


def approximate(
    shape: Shape,
    inputs: CostInputs,
    floor: float = 0.0,
    capacity: float | None = None,
    effort: int = EFFORT,
) -> Approximation:
    """The best drop boxes for ``shape`` within ``capacity`` (default: the inputs'); keeps
    everything when the plan fits (see the module docstring for the methods). ``effort``
    bounds the cost model evaluations of a search over RANGE windows."""
    budget = inputs.capacity if capacity is None else capacity
    names = shape.streams
    full = evaluate(shape, inputs)
    if full.cost_per_s <= budget * (1 + 1e-9):
        return Approximation(dict.fromkeys(names, 1.0), full.output_per_s, full.cost_per_s, "none")
    if any(math.isinf(inputs.streams[s].window) for s in names) and len(names) > 1:
        raise ValueError(
            "a join over an unbounded window has no steady output rate to maximize: give its "
            "streams windows to shed load from it"
        )
    linear = len(names) == 1 or all(inputs.streams[s].tuple_window for s in names)
    if linear:
        value: dict[str, float] = {}
        cost: dict[str, float] = {}
        for s in names:  # the coefficients of eqs. 27 and 28, one input at a time
            alone = evaluate(shape, inputs, {o: float(o == s) for o in names})
            cost[s], value[s] = alone.cost_per_s, alone.output_per_s
        keep = knapsack(value, cost, budget, floor)
        method = "knapsack"
    else:
        search = ShareSearch(lambda x: _figures(shape, inputs, x), shape.streams, budget, floor)
        keep = search.run(effort)
        method = "ascent"
    got = evaluate(shape, inputs, keep)
    if got.cost_per_s > budget * (1 + 1e-6):
        method = "over"  # even the floors need more than the capacity
    return Approximation(keep, got.output_per_s, got.cost_per_s, method)


def _figures(shape: Shape, inputs: CostInputs, keep: Mapping[str, float]) -> tuple[float, float]:
    got = evaluate(shape, inputs, keep)
    return got.output_per_s, got.cost_per_s
