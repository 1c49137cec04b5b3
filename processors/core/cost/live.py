"""The cost model on a worker's own recent statistics: the live plan of its status page, with
the plan the worker runs (``running``: its MJoin or join tree) beside the best ones."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from processors.core.cost.inputs import bind
from processors.core.cost.measured import measured_stats
from processors.core.cost.optimizer import optimize
from processors.core.cost.render import explain_json
from processors.core.join_tree import parse_join_tree, unordered
from processors.core.plan import LogicalPlan

#: plans shown on the status page (the chosen one first)
SHOWN = 5
#: seconds a computed view is served again (the status page is polled often)
REFRESH_S = 2.0


def live_explain(plan: LogicalPlan, records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """EXPLAIN's JSON (best plans only) from ``records``, or why there is none yet (a query
    that has not seen input has no rates, a join no windows to measure)."""
    try:
        figures = measured_stats(plan, list(records), "this worker's recent statistics")
        inputs = bind(plan, figures)
        choice = optimize(inputs, tuple(s.name for s in plan.streams))
    except ValueError as exc:  # StatsError: figures not measured yet
        return {"error": str(exc)}
    body = explain_json(plan.name, choice, inputs, figures.source)
    body["running"] = next((p for p in body["plans"] if _runs(plan, p)), None)
    body["plans"] = body["plans"][:SHOWN]
    return body


def _runs(plan: LogicalPlan, entry: Mapping[str, Any]) -> bool:
    """Whether the EXPLAIN ``entry`` is the plan the worker runs (its join tree or MJoin, the
    filters on the inputs)."""
    if not entry["executable"]:
        return False
    if len(plan.streams) <= 2:  # one stream, or two: an MJoin of two is the binary join
        return True
    if plan.join_tree is None:
        return bool(entry["shape"] == "mjoin")
    tree = entry.get("join_tree")
    return tree is not None and unordered(parse_join_tree(tree)) == unordered(plan.join_tree)


class LiveExplain:
    """:func:`live_explain` of one worker's plan, recomputed at most every REFRESH_S."""

    def __init__(self, plan: LogicalPlan) -> None:
        self.plan = plan
        self.at = float("-inf")
        self.last: dict[str, Any] = {}

    def of(self, records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
        now = time.monotonic()
        if now - self.at >= REFRESH_S:
            self.at, self.last = now, live_explain(self.plan, records)
        return self.last
