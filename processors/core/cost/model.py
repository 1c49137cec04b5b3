"""The cost of one plan shape in steady state (Ayad & Naughton, Sect. 3).

Rates and windows (Sect. 3.2): a filter of selectivity s passes ``s * rate`` tuples (eq. 1) and
leaves ``s * W`` of its input's window (eq. 2); a binary join of f outputs
``f * (W_R * rate_L + W_L * rate_R)`` (eq. 3) and its result's window is ``f * W_L * W_R``
(eq. 4). Costs (Sect. 3.3): a filter handles every input tuple (eq. 7), a symmetric join every
tuple from either side (eq. 9 with one uniform per-tuple cost, as in Example 1), and a join keeps
both input windows in memory (eq. 11). A plan's C(p) and M(p) are the sums (eqs. 12-13).

The MJoin is not in the paper (it cites it as an option to add, Sect. 2). Here: an arriving
tuple costs one handling (insert, expire and the first probe), and each partial result of its
pipeline one more, for the probe of the next window; each input probes the others in the order
that makes the fewest partial results (what A-Greedy converges to at run time). It keeps only
the input windows. Its output rate is eq. 5's, as every plan's is (Observation 1).

``scale`` multiplies input rates: the drop boxes of Sect. 5 (a RANGE window shrinks with its
rate; a ROWS window does not).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from processors.core.cost.inputs import CostInputs
from processors.core.cost.shapes import Join, Leaf, Shape, Tree

#: beyond this many other inputs an MJoin pipeline's order is chosen greedily, not exhaustively
EXHAUSTIVE_PROBE_ORDER = 6


@dataclass
class Operator:
    """One operator of a costed plan, with its children (the EXPLAIN tree)."""

    kind: str  # "stream", "filter", "join", "mjoin"
    label: str
    output_per_s: float
    window: float  # tuples in the window of its output
    tuples_per_s: float = 0.0  # handled per second (eq. 7, 9)
    memory_tuples: float = 0.0  # eq. 11
    cost_per_s: float = 0.0  # processor-seconds per second
    detail: str = ""
    children: list[Operator] = field(default_factory=list)
    width: float = 0.0  # bytes per output tuple
    memory_bytes: float = 0.0

    def walk(self) -> list[Operator]:
        return [self, *(op for child in self.children for op in child.walk())]


@dataclass
class PlanCost:
    shape: Shape
    root: Operator
    capacity: float

    @property
    def cost_per_s(self) -> float:
        """C(p), eq. 12: processor-seconds per second."""
        return sum(op.cost_per_s for op in self.root.walk())

    @property
    def memory_tuples(self) -> float:
        """M(p), eq. 13."""
        return sum(op.memory_tuples for op in self.root.walk())

    @property
    def memory_bytes(self) -> float:
        return sum(op.memory_bytes for op in self.root.walk())

    @property
    def tuples_per_s(self) -> float:
        return sum(op.tuples_per_s for op in self.root.walk())

    @property
    def utilization(self) -> float:
        return self.cost_per_s / self.capacity

    @property
    def output_per_s(self) -> float:
        return self.root.output_per_s

    @property
    def feasible(self) -> bool:
        """Eq. 15 with the bound reached counting as feasible: Example 1 calls plan (a), at
        exactly 250 tuples/s on a 250 tuples/s system, feasible (relative tolerance 1e-9)."""
        return self.cost_per_s <= self.capacity * (1 + 1e-9)


def _leaf(stream: str, inputs: CostInputs, scale: Mapping[str, float], filtered: bool) -> Operator:
    s = inputs.streams[stream]
    x = scale.get(stream, 1.0)
    window = s.window if s.tuple_window or math.isinf(s.window) else s.window * x
    op = Operator("stream", stream, s.rate * x, window, detail=f"window {s.window_text}",
                  width=s.width)  # fmt: skip
    if filtered:
        for text, sel in s.filters:
            op = _filter(op, text, sel, inputs)
    return op


def _filter(child: Operator, text: str, sel: float, inputs: CostInputs) -> Operator:
    handled = child.output_per_s
    return Operator(
        "filter",
        text,
        sel * child.output_per_s,  # eq. 1
        sel * child.window,  # eq. 2
        handled,
        0.0,
        handled * inputs.filter_cost_s,  # eq. 7
        f"selectivity {sel:g}",
        [child],
        child.width,
    )


def _tree(tree: Tree, inputs: CostInputs, scale: Mapping[str, float], filtered: bool) -> Operator:
    if isinstance(tree, Leaf):
        return _leaf(tree.stream, inputs, scale, filtered)
    assert isinstance(tree, Join)
    left = _tree(tree.left, inputs, scale, filtered)
    right = _tree(tree.right, inputs, scale, filtered)
    f = inputs.selectivity_between(tree.left.streams, tree.right.streams)
    edges = inputs.edges_between(tree.left.streams, tree.right.streams)
    handled = left.output_per_s + right.output_per_s
    return Operator(
        "join",
        tree.text(),
        f * (right.window * left.output_per_s + left.window * right.output_per_s),  # eq. 3
        f * left.window * right.window,  # eq. 4
        handled,
        left.window + right.window,  # eq. 11
        handled * inputs.join_cost_s,  # eq. 9
        ", ".join(f"{e.text} (f={inputs.class_selectivity(e.cls):g})" for e in edges)
        or "Cartesian product (f=1)",
        [left, right],
        left.width + right.width,
        left.window * left.width + right.window * right.width,
    )


def _partials(
    first: str, order: tuple[str, ...], windows: Mapping[str, float], inputs: CostInputs
) -> list[float]:
    """Partial results per arriving tuple of ``first`` after probing each of ``order``."""
    bound, size, out = frozenset({first}), 1.0, []
    for other in order:
        size *= windows[other] * inputs.selectivity_between(bound, frozenset({other}))
        bound |= {other}
        out.append(size)
    return out


def probe_order(
    first: str, others: list[str], windows: Mapping[str, float], inputs: CostInputs
) -> tuple[str, ...]:
    """The probe order of ``first``'s pipeline with the fewest partial results."""
    if len(others) <= EXHAUSTIVE_PROBE_ORDER:
        return min(
            itertools.permutations(others),
            key=lambda order: sum(_partials(first, order, windows, inputs)[:-1]),
        )
    order: list[str] = []
    left = list(others)
    while left:  # greedy: the next probe that leaves the fewest partial results
        nxt = min(left, key=lambda o: _partials(first, (*order, o), windows, inputs)[-1])
        order.append(nxt)
        left.remove(nxt)
    return tuple(order)


def _mjoin(
    shape: Shape, inputs: CostInputs, scale: Mapping[str, float], filtered: bool
) -> Operator:
    kids = [_leaf(s, inputs, scale, filtered) for s in shape.streams]
    windows = {s: k.window for s, k in zip(shape.streams, kids, strict=True)}
    handled = output = 0.0
    pipelines = []
    for s, kid in zip(shape.streams, kids, strict=True):
        order = probe_order(s, [o for o in shape.streams if o != s], windows, inputs)
        partial = _partials(s, order, windows, inputs)
        handled += kid.output_per_s * (1 + sum(partial[:-1]))
        output += kid.output_per_s * partial[-1]
        pipelines.append(f"{s}: {' → '.join(order)}")
    return Operator(
        "mjoin",
        shape.text() if shape.filters_at == "inputs" else f"MJoin({', '.join(shape.streams)})",
        output,
        math.prod(windows.values()) * math.prod(e.selectivity for e in inputs.joins),  # eq. 6
        handled,
        sum(windows.values()),
        handled * inputs.join_cost_s,
        "probe orders " + "; ".join(pipelines),
        kids,
        sum(k.width for k in kids),
        sum(k.window * k.width for k in kids),
    )


def evaluate(
    shape: Shape, inputs: CostInputs, scale: Mapping[str, float] | None = None
) -> PlanCost:
    """The costed operator tree of ``shape`` (drop boxes ``scale`` on the inputs, if any)."""
    scale = scale or {}
    on_inputs = shape.filters_at == "inputs"
    if shape.tree is None:
        root = _mjoin(shape, inputs, scale, on_inputs)
    else:
        root = _tree(shape.tree, inputs, scale, on_inputs)
    if not on_inputs:
        for name in shape.streams:
            for text, sel in inputs.streams[name].filters:
                root = _filter(root, text, sel, inputs)
    return PlanCost(shape, root, inputs.capacity)
