"""Choosing a plan: feasibility, least utilization, and drop boxes when nothing is feasible.

Sect. 4 (eqs. 14-15): among the plans whose C(p) fits the capacity, the one of least C(p);
M(p) breaks ties. When none fits, Sect. 5.2: drop boxes go on the inputs only (Observation 3)
and keep ``x_i`` of stream i, where both the output rate (eq. 27) and C(p) (eq. 28) are linear
in the x's, so the best x's solve a continuous knapsack: fill the budget with the inputs of
most output per unit of cost first. The chosen plan is then the one whose approximation gives
the most output, which need not be the cheapest plan (Fig. 7).

The linearity holds for ROWS windows only (Sect. 5.2 assumes them); with a RANGE window a drop
box also shrinks the window, so a plan over one is not approximated here (load shedding, issue
18, covers it).
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.core.cost.inputs import CostInputs
from processors.core.cost.model import PlanCost, evaluate
from processors.core.cost.shapes import Shape, shapes


@dataclass(frozen=True)
class Approximation:
    """Drop boxes on the inputs: the share of each stream kept, and the output rate left."""

    keep: dict[str, float]
    output_per_s: float


@dataclass
class Ranked:
    cost: PlanCost
    approximation: Approximation | None = None
    chosen: bool = False
    why_not_approximated: str = ""

    @property
    def throughput(self) -> float:
        """Output per second the plan delivers: all of it when feasible, else its best
        approximation's (0 when it cannot be approximated)."""
        if self.cost.feasible:
            return self.cost.output_per_s
        return 0.0 if self.approximation is None else self.approximation.output_per_s


@dataclass
class Choice:
    plans: list[Ranked]  # best first; exactly one is chosen

    @property
    def chosen(self) -> Ranked:
        return next(p for p in self.plans if p.chosen)

    @property
    def feasible(self) -> bool:
        return self.chosen.cost.feasible


def approximate(shape: Shape, inputs: CostInputs) -> Approximation:
    """The best drop boxes for ``shape`` (Sect. 5.2; ROWS windows only, see the module)."""
    names = shape.streams
    if any(not inputs.streams[s].tuple_window for s in names):
        raise ValueError("drop boxes are modelled for ROWS windows only (Sect. 5.2)")
    cost: dict[str, float] = {}
    value: dict[str, float] = {}
    for s in names:  # the linear coefficients of eqs. 27 and 28, one input at a time
        alone = evaluate(shape, inputs, {o: float(o == s) for o in names})
        cost[s], value[s] = alone.cost_per_s, alone.output_per_s
    budget = inputs.capacity
    keep = dict.fromkeys(names, 0.0)
    ranked = sorted(
        names,
        key=lambda s: -(value[s] / cost[s]) if cost[s] > 0 else float("-inf"),
    )
    for s in ranked:
        if cost[s] <= 0:
            keep[s] = 1.0
            continue
        keep[s] = min(1.0, max(0.0, budget / cost[s]))
        budget -= keep[s] * cost[s]
    return Approximation(keep, sum(value[s] * keep[s] for s in names))


def optimize(inputs: CostInputs, streams: tuple[str, ...] | None = None) -> Choice:
    """Every shape costed and ranked; the chosen one marked (see the module docstring)."""
    names = streams or tuple(inputs.streams)
    with_filters = any(inputs.streams[s].filters for s in names)
    ranked = []
    for shape in shapes(names, with_filters):
        entry = Ranked(evaluate(shape, inputs))
        if not entry.cost.feasible:
            try:
                entry.approximation = approximate(shape, inputs)
            except ValueError as exc:
                entry.why_not_approximated = str(exc)
        ranked.append(entry)
    ranked.sort(
        key=lambda r: (
            not r.cost.feasible,
            -r.throughput if not r.cost.feasible else 0.0,
            r.cost.cost_per_s,
            r.cost.memory_tuples,
        )
    )
    ranked[0].chosen = True
    return Choice(ranked)
