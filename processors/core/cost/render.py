"""EXPLAIN: the chosen plan as a tree with each operator's figures, then the alternatives.

The JSON form (``--json``) has one entry per plan in ``plans``, best first, with ``order``,
``shape``, ``buffer_tuples``, ``buffer_bytes``, ``tuples_per_s``, ``utilization``,
``output_per_s``, ``feasible``, ``chosen`` (and ``keep``/``approx_output_per_s`` when the plan is
infeasible and approximable, Sect. 5.2), ``executable`` and ``join_tree`` (the setting that runs
it), plus its ``operators``.
"""

from __future__ import annotations

import math
from typing import Any

from processors.core.cost.inputs import CostInputs
from processors.core.cost.model import Operator, PlanCost
from processors.core.cost.optimizer import Choice, Ranked
from processors.core.cost.shapes import Shape
from processors.core.join_tree import tree_text


def executable(shape: Shape) -> bool:
    """Whether the engine runs ``shape``: every join shape, with the filters on the inputs
    (the engine filters each stream before its window; filters on the result only cost more)."""
    return shape.filters_at == "inputs"


def how_to_run(shape: Shape) -> str:
    """The query setting that runs ``shape``."""
    tree = shape.join_tree()
    if tree is None:
        return "the default plan" if shape.tree is not None else "the default (an MJoin)"
    return f"join_tree = '{tree_text(tree)}' (Query.join_tree)"


def _n(x: float) -> str:
    if math.isinf(x):
        return "unbounded"
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.3g}"


def _bytes(x: float) -> str:
    if math.isinf(x):
        return "unbounded"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if x >= size:
            return f"{x / size:.1f} {unit}"
    return f"{x:.0f} B"


def verdict(r: Ranked) -> str:
    c = r.cost
    if c.feasible:
        return f"feasible (utilization {c.utilization:.3g})"
    over = f"infeasible: needs {c.utilization:.3g}x the capacity"
    if r.approximation is None:
        return f"{over}; {r.why_not_approximated or 'cannot be approximated'}"
    keep = ", ".join(f"{s} {100 * x:.0f}%" for s, x in r.approximation.keep.items())
    return f"{over}; drop boxes keep {keep} -> {_n(r.approximation.output_per_s)} results/s"


def _line(op: Operator, inputs: CostInputs) -> str:
    if op.kind == "stream":
        return (f"{op.label}  {_n(op.output_per_s)}/s, {op.detail} "
                f"({_n(op.window)} tuples)")  # fmt: skip
    util = op.cost_per_s / inputs.capacity
    mem = (
        f", memory {_n(op.memory_tuples)} tuples ({_bytes(op.memory_bytes)})"
        if op.memory_tuples
        else ""
    )
    ins = " + ".join(_n(c.output_per_s) for c in op.children)
    return (f"{op.label}  in {ins}/s, out {_n(op.output_per_s)}/s, handles "
            f"{_n(op.tuples_per_s)}/s{mem}, utilization {util:.3g}  [{op.detail}]")  # fmt: skip


def tree_lines(op: Operator, inputs: CostInputs, prefix: str = "", last: bool = True,
               top: bool = True) -> list[str]:  # fmt: skip
    head = "" if top else prefix + ("└─ " if last else "├─ ")
    lines = [head + _line(op, inputs)]
    child_prefix = "" if top else prefix + ("   " if last else "│  ")
    for i, child in enumerate(op.children):
        lines += tree_lines(child, inputs, child_prefix, i == len(op.children) - 1, False)
    return lines


def explain_text(name: str, choice: Choice, inputs: CostInputs, source: str) -> str:
    chosen = choice.chosen
    c = chosen.cost
    out = [
        f"EXPLAIN {name}: statistics from {source}; capacity {inputs.capacity:g} processor(s), "
        f"{inputs.join_cost_s * 1000:g} ms per tuple at a join, "
        f"{inputs.filter_cost_s * 1000:g} ms at a filter",
        "",
        f"chosen: {c.shape.text()} [{c.shape.form}] — {verdict(chosen)}",
        f"  C(p) {c.cost_per_s:.4g} processor-s/s, {_n(c.tuples_per_s)} tuples handled/s, "
        f"memory {_n(c.memory_tuples)} tuples ({_bytes(c.memory_bytes)}), "
        f"output {_n(c.output_per_s)} results/s",
    ]
    if executable(c.shape):
        out.append(f"  run it with {how_to_run(c.shape)}")
    else:
        runnable = next((r for r in choice.plans if executable(r.cost.shape)), None)
        if runnable is not None:
            out.append(f"  the engine filters each stream before the join: the best plan it "
                       f"runs is {runnable.cost.shape.text()} ({verdict(runnable)}), with "
                       f"{how_to_run(runnable.cost.shape)}")  # fmt: skip
    out += ["", *tree_lines(c.root, inputs), "", "plans considered, best first:"]
    header = f"  {'#':>3} {'plan':<36} {'shape':<9} {'buffer':>10} {'tuples/s':>10} "
    out.append(header + f"{'utilization':>11} {'output/s':>9}  verdict")
    for i, r in enumerate(choice.plans, 1):
        p = r.cost
        mark = "*" if r.chosen else " "
        out.append(f"  {i:>3}{mark}{p.shape.text():<36.36} {p.shape.form:<9} "
                   f"{_n(p.memory_tuples):>10} {_n(p.tuples_per_s):>10} {p.utilization:>11.3g} "
                   f"{_n(p.output_per_s):>9}  {verdict(r)}")  # fmt: skip
    return "\n".join(out)


def _operator_json(op: Operator) -> dict[str, Any]:
    return {
        "kind": op.kind,
        "label": op.label,
        "output_per_s": op.output_per_s,
        "window_tuples": None if math.isinf(op.window) else op.window,
        "tuples_per_s": op.tuples_per_s,
        "memory_tuples": op.memory_tuples,
        "memory_bytes": op.memory_bytes,
        "cost_per_s": op.cost_per_s,
        "detail": op.detail,
        "children": [_operator_json(c) for c in op.children],
    }


def plan_json(r: Ranked) -> dict[str, Any]:
    c: PlanCost = r.cost
    entry: dict[str, Any] = {
        "order": c.shape.order(),
        "shape": c.shape.form,
        "filters_at": c.shape.filters_at,
        "text": c.shape.text(),
        "buffer_tuples": None if math.isinf(c.memory_tuples) else c.memory_tuples,
        "buffer_bytes": None if math.isinf(c.memory_bytes) else c.memory_bytes,
        "tuples_per_s": c.tuples_per_s,
        "cost_per_s": c.cost_per_s,
        "utilization": c.utilization,
        "output_per_s": c.output_per_s,
        "feasible": c.feasible,
        "chosen": r.chosen,
        "executable": executable(c.shape),
        "join_tree": None if (t := c.shape.join_tree()) is None else tree_text(t),
        "verdict": verdict(r),
        "operators": _operator_json(c.root),
    }
    if r.approximation is not None:
        entry["keep"] = r.approximation.keep
        entry["approx_output_per_s"] = r.approximation.output_per_s
    return entry


def explain_json(name: str, choice: Choice, inputs: CostInputs, source: str) -> dict[str, Any]:
    return {
        "query": name,
        "statistics": source,
        "capacity": inputs.capacity,
        "join_cost_ms": inputs.join_cost_s * 1000,
        "filter_cost_ms": inputs.filter_cost_s * 1000,
        "feasible": choice.feasible,
        "plans": [plan_json(r) for r in choice.plans],
    }
