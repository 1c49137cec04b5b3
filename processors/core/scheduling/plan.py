"""What the schedulers know about a query plan: operator paths, per-operator statistics, queries
and their latency thresholds (Babcock et al., Sect. 2-4.3 and 5.2).

A path runs from one input stream to the output of its query (leaf to root); paths of one query
share their common tail (Sect. 4.3.1). Every operator therefore has exactly one successor, and
an operator that several paths reach through different predecessors (a join) has one input queue
per predecessor, processes them in timestamp order and is blocked while any of them is empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Real

from processors.core.scheduling.progress import Point, chart_from_points, progress_chart, ratio


@dataclass
class SchedulingPlan:
    """Paths (leaf to output), statistics and queries.

    - ``stats[op] = (time per tuple it receives, selectivity)``; the last operator of a path
      ejects its output (its selectivity does not count toward memory).
    - ``query_of[path]``: the query a path belongs to (default: the path's own name).
    - ``latency_threshold[query]``: Chain-Flush's r_q (Sect. 5.2), in the plan's time unit.
    - ``points[path]`` (optional): the path's progress chart given directly as operator points
      (the paper's examples); used instead of the chart rebuilt from ``stats``, so that exact
      inputs stay exact.
    - ``remaining_time[op]`` (optional): Chain-Flush's p_q, the processing still ahead of the
      head tuple of the operator's input. Default: the sum of the per-tuple times from the
      operator to the output (Sect. 5.2). A simulator whose "tuple" is a unit of memory that
      shrinks sets the chart's remaining time instead.
    """

    paths: dict[str, list[str]]
    stats: dict[str, tuple[float, float]]
    query_of: dict[str, str] = field(default_factory=dict)
    latency_threshold: dict[str, float] = field(default_factory=dict)
    points: dict[str, list[Point]] = field(default_factory=dict)
    remaining_time: dict[str, float] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise ValueError naming the first problem: empty paths, operators without
        statistics, bad statistics, operators with two successors, unknown queries."""
        if not self.paths:
            raise ValueError("scheduling plan has no paths")
        succ: dict[str, str | None] = {}
        for path, ops in self.paths.items():
            if not ops:
                raise ValueError(f"path {path!r} has no operators")
            if len(set(ops)) != len(ops):
                raise ValueError(f"path {path!r} visits an operator twice: {ops}")
            for i, op in enumerate(ops):
                if op not in self.stats:
                    raise ValueError(f"operator {op!r} of path {path!r} has no statistics")
                nxt = ops[i + 1] if i + 1 < len(ops) else None
                if op in succ and succ[op] != nxt:
                    raise ValueError(
                        f"operator {op!r} is followed by {succ[op]!r} in one path and by "
                        f"{nxt!r} in path {path!r}: a query is a tree, every operator has one "
                        "successor"
                    )
                succ[op] = nxt
        for op, st in self.stats.items():
            if len(st) != 2:
                raise ValueError(f"operator {op!r}: stats must be (time, selectivity), got {st}")
            t, s = st
            if not isinstance(t, Real) or not math.isfinite(t) or t <= 0:
                raise ValueError(f"operator {op!r} has time {t!r}; times must be positive")
            if not isinstance(s, Real) or not math.isfinite(s) or s < 0:
                raise ValueError(f"operator {op!r} has selectivity {s!r}; it must be >= 0")
        for path in self.query_of:
            if path not in self.paths:
                raise ValueError(f"query_of names an unknown path {path!r}")
        queries = set(self.queries())
        for q, r in self.latency_threshold.items():
            if q not in queries:
                raise ValueError(f"latency threshold for unknown query {q!r}")
            if not isinstance(r, Real) or math.isnan(r) or r <= 0:
                raise ValueError(f"query {q!r} has latency threshold {r!r}; it must be > 0")
        for path, pts in self.points.items():
            if path not in self.paths:
                raise ValueError(f"points given for unknown path {path!r}")
            chart_from_points(pts)
            if len(pts) != len(self.paths[path]) + 1:
                raise ValueError(
                    f"path {path!r} has {len(self.paths[path])} operators but its chart "
                    f"{len(pts)} points"
                )
        for op, p in self.remaining_time.items():
            if not isinstance(p, Real) or not math.isfinite(p) or p < 0:
                raise ValueError(f"operator {op!r} has remaining time {p!r}")

    def operators(self) -> list[str]:
        """Every operator once, in order of first appearance along the paths."""
        seen: dict[str, None] = {}
        for ops in self.paths.values():
            for op in ops:
                seen.setdefault(op, None)
        return list(seen)

    def query(self, path: str) -> str:
        return self.query_of.get(path, path)

    def queries(self) -> list[str]:
        return list(dict.fromkeys(self.query(p) for p in self.paths))

    def chart(self, path: str) -> list[Point]:
        """The path's progress chart (Sect. 3): given points, or built from the statistics."""
        if path in self.points:
            return chart_from_points(self.points[path])
        return progress_chart([self.stats[op] for op in self.paths[path]])

    def downstream(self, op: str) -> list[str]:
        """The operators from ``op`` to its query's output, ``op`` first."""
        for ops in self.paths.values():
            if op in ops:
                return ops[ops.index(op) :]
        raise ValueError(f"unknown operator {op!r}")

    def predecessors(self, op: str) -> list[str | None]:
        """One entry per input queue of ``op``: the operator feeding it, or None for an input
        stream (an operator first on several paths has one stream input per path)."""
        out: list[str | None] = []
        seen: set[str] = set()
        for ops in self.paths.values():
            if op not in ops:
                continue
            i = ops.index(op)
            if i == 0:
                out.append(None)
            elif ops[i - 1] not in seen:
                seen.add(ops[i - 1])
                out.append(ops[i - 1])
        return out

    def query_of_op(self, op: str) -> str:
        for path, ops in self.paths.items():
            if op in ops:
                return self.query(path)
        raise ValueError(f"unknown operator {op!r}")

    def remaining(self, op: str) -> float:
        """Chain-Flush's p_q for the input queue(s) of ``op`` (Sect. 5.2)."""
        if op in self.remaining_time:
            return self.remaining_time[op]
        return sum(self.stats[o][0] for o in self.downstream(op))


def chart_remaining_times(plan: SchedulingPlan) -> dict[str, Real]:
    """Per operator, ``t_m - t_i`` of its path's progress chart: the processing a memory unit
    at its input still needs to leave the system (the largest over the paths through it).
    This is Chain-Flush's p_q for a simulator whose "tuple" is a unit of memory (Sect. 3);
    :func:`plan_from_charts` sets it, plans built from statistics can take it with
    ``plan.remaining_time = chart_remaining_times(plan)``."""
    out: dict[str, Real] = {}
    for path, ops in plan.paths.items():
        pts = plan.chart(path)
        end = pts[-1][0]
        for i, op in enumerate(ops):
            left = end - pts[i][0]
            out[op] = left if op not in out else max(out[op], left)
    return out


def plan_from_charts(
    charts: Mapping[str, Sequence[Point]],
    query_of: Mapping[str, str] | None = None,
    latency_threshold: Mapping[str, float] | None = None,
) -> SchedulingPlan:
    """A plan of independent paths given as progress charts (the paper's examples): operator
    ``i`` of path ``p`` is named ``"p.i"`` (0-based); its statistics are recovered from the
    chart (time per tuple received ``(t_{i+1} - t_i) / s_i``, selectivity ``s_{i+1} / s_i``),
    and Chain-Flush's remaining time is the chart's ``t_m - t_i`` (a memory unit's own)."""
    paths: dict[str, list[str]] = {}
    stats: dict[str, tuple[float, float]] = {}
    points: dict[str, list[Point]] = {}
    remaining: dict[str, float] = {}
    for path, raw in charts.items():
        pts = chart_from_points(raw)
        names = [f"{path}.{i}" for i in range(len(pts) - 1)]
        for i, name in enumerate(names):
            (t0, s0), (t1, s1) = pts[i], pts[i + 1]
            if s0 == 0:
                raise ValueError(
                    f"path {path!r}: operator {i} receives nothing (size 0 at point {i}); "
                    "drop the operators after a selectivity-0 one"
                )
            stats[name] = (ratio(t1 - t0, s0), ratio(s1, s0))
            remaining[name] = pts[-1][0] - t0
        paths[path] = names
        points[path] = pts
    plan = SchedulingPlan(
        paths=paths,
        stats=stats,
        query_of=dict(query_of or {}),
        latency_threshold=dict(latency_threshold or {}),
        points=points,
        remaining_time=remaining,
    )
    plan.validate()
    return plan


def merge_plans(plans: Sequence[SchedulingPlan]) -> SchedulingPlan:
    """One plan of several plans' queries (Sect. 6.1.4: several queries on one processor).
    Paths, operators and queries must not clash: every stream feeds one query (Sect. 2)."""
    out = SchedulingPlan(paths={}, stats={})
    for plan in plans:
        plan.validate()
        for path in plan.paths:
            if path in out.paths:
                raise ValueError(f"path {path!r} is in two of the plans being merged")
        for op in plan.stats:
            if op in out.stats:
                raise ValueError(f"operator {op!r} is in two of the plans being merged")
        for q in plan.queries():
            if q in out.queries():
                raise ValueError(f"query {q!r} is in two of the plans being merged")
        out.paths.update(plan.paths)
        out.stats.update(plan.stats)
        out.query_of.update({p: plan.query(p) for p in plan.paths})
        out.latency_threshold.update(plan.latency_threshold)
        out.points.update(plan.points)
        out.remaining_time.update(plan.remaining_time)
    out.validate()
    return out
