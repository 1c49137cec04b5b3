"""Scheduling plans from measured statistics (Babcock et al., Sect. 3: "selectivities and
processing times could be learned during query execution by gathering statistics over a
period of time").

Each agent of a running query reports, per reporting interval, the tuples it read and wrote,
the time it was busy and how many batches it processed. Over a recent window these become the
(time per tuple, selectivity) of each operator of the plan's paths. Two choices are specific
to a batch-at-a-time engine:

- memory is counted in tuples (selectivity = tuples out / tuples in), since every internal
  topic carries the same columnar layout;
- Chain-Flush's p_q (Sect. 5.2) is the time to finish the *batch* at the head of a queue, not
  one tuple: the arbiter grants whole batches, so the deadline check must leave room for one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from processors.core.scheduling.config import SchedulingConfig
from processors.core.scheduling.plan import SchedulingPlan

#: what an operator that has not reported yet is assumed to cost: cheap and not selective, so
#: that it neither hides the operators behind it nor looks like a bargain
UNKNOWN_TIME_S = 1e-6
UNKNOWN_SELECTIVITY = 1.0


@dataclass
class Totals:
    """Sums over a window of one agent's reports (all workers of the query)."""

    tuples_in: int = 0
    tuples_out: int = 0
    busy_ns: int = 0
    batches: int = 0

    def add(self, other: Totals) -> None:
        self.tuples_in += other.tuples_in
        self.tuples_out += other.tuples_out
        self.busy_ns += other.busy_ns
        self.batches += other.batches


class StatsWindow:
    """The reports of the last ``window_ms`` milliseconds, summed per agent."""

    def __init__(self, window_ms: float) -> None:
        self.window_ms = window_ms
        self._reports: deque[tuple[int, str, Totals]] = deque()

    def add(self, end_ms: int, agent: str, totals: Totals) -> None:
        self._reports.append((end_ms, agent, totals))

    def totals(self, now_ms: int) -> dict[str, Totals]:
        while self._reports and self._reports[0][0] < now_ms - self.window_ms:
            self._reports.popleft()
        out: dict[str, Totals] = {}
        for _, agent, totals in self._reports:
            out.setdefault(agent, Totals()).add(totals)
        return out


def measured_plan(
    query: str,
    paths: Mapping[str, list[str]],
    totals: Mapping[str, Totals],
    config: SchedulingConfig,
    previous: SchedulingPlan | None = None,
) -> SchedulingPlan:
    """The plan of ``paths`` with each operator's (seconds per tuple, selectivity) from
    ``totals``; an operator without input in the window keeps its previous figures."""
    stats: dict[str, tuple[float, float]] = {}
    per_batch: dict[str, float] = {}
    for ops in paths.values():
        for op in ops:
            t = totals.get(op)
            if t is not None and t.tuples_in > 0 and t.busy_ns > 0:
                stats[op] = (t.busy_ns / 1e9 / t.tuples_in, t.tuples_out / t.tuples_in)
                per_batch[op] = t.tuples_in / max(t.batches, 1)
            elif previous is not None and op in previous.stats:
                stats[op] = previous.stats[op]
            else:
                stats[op] = (UNKNOWN_TIME_S, UNKNOWN_SELECTIVITY)
    plan = SchedulingPlan(
        paths={p: list(ops) for p, ops in paths.items()},
        stats=stats,
        query_of=dict.fromkeys(paths, query),
        latency_threshold={} if config.latency_ms is None else {query: config.latency_ms / 1e3},
    )
    plan.remaining_time = {
        op: _batch_flush_time(plan, op, per_batch.get(op, 1.0)) for op in plan.operators()
    }
    plan.validate()
    return plan


def _batch_flush_time(plan: SchedulingPlan, op: str, batch_tuples: float) -> float:
    """Time to push a head batch of ``batch_tuples`` from ``op`` through to the output."""
    total = 0.0
    reaching = batch_tuples
    for o in plan.downstream(op):
        t, s = plan.stats[o]
        total += t * reaching
        reaching *= s
    return total
