"""Choosing a plan: feasibility, least utilization, and drop boxes when nothing is feasible.

Sect. 4 (eqs. 14-15): among the plans whose C(p) fits the capacity, the one of least C(p);
M(p) breaks ties. When none fits, Sect. 5: each plan gets its best drop boxes on the inputs
(:mod:`processors.core.cost.shedding`: the knapsack of Sect. 5.2 over ROWS windows, one share
for all inputs when a RANGE window shrinks with its rate), and the chosen plan is the one whose
approximation gives the most output, which need not be the cheapest plan (Fig. 7).
"""

from __future__ import annotations

from dataclasses import dataclass

from processors.core.cost.inputs import CostInputs
from processors.core.cost.model import PlanCost, evaluate
from processors.core.cost.shapes import shapes
from processors.core.cost.shedding import Approximation, approximate


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
