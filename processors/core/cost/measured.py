"""Statistics measured by running workers, from their records on the stats topic (issue 17).

What the cost model needs, from what the workers report every interval (``streamon.Stats``
records, their ``plan`` holding each unit's stage statistics):

- each stream's rate: its ingest agent's tuples over the time its records span, added up over
  the workers (each reports the partitions it holds);
- window sizes: the MJoin's windows, over every partition (event time may pass faster or slower
  than the tuples arrive, as in a replay, so ``rate * T`` need not hold);
- join selectivities: from the MJoin's windows (``window_matches``: matches of one side in the
  other, with both window sizes), the latest figures of every partition added up, f = matches
  over the product of the summed windows (a co-partitioned join matches within partitions);
- filter selectivities: each filter's pass rate in its stage's profile window, weighted by the
  tuples each partition saw;
- per-tuple costs: the join step's busy time over the tuples the model says it handled (the
  MJoin's, with the measured rates and selectivities), the filter step's busy time over the
  filter evaluations it made;
- capacity: one processor per worker that reported (a worker runs its agents on one thread).

The result is a :class:`PlanStats`, as a statistics file would give, so EXPLAIN is the same
either way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from processors.core.cost.inputs import bind
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import Shape
from processors.core.cost.stats_file import PlanStats, StatsError, StreamStats, predicate_key
from processors.core.plan import LogicalPlan

Record = Mapping[str, Any]


def _seconds(records: list[Record]) -> float:
    return sum(max(0, r["window_end_ms"] - r["window_start_ms"]) for r in records) / 1000.0


def _by_worker(records: Iterable[Record], agent: str) -> dict[str, list[Record]]:
    out: dict[str, list[Record]] = {}
    for r in records:
        if r["agent"] == agent and r.get("scope", "AGENT") == "AGENT":
            out.setdefault(r["worker_id"], []).append(r)
    return out


def _rate(records: list[Record], agent: str) -> float:
    """Tuples per second of ``agent`` over the windows it reported with input, all workers."""
    total = 0.0
    for mine in _by_worker(records, agent).values():
        active = [r for r in mine if r["tuples_in"] > 0]
        seconds = _seconds(active)
        total += sum(r["tuples_in"] for r in active) / seconds if seconds else 0.0
    return total


def _latest_units(records: list[Record], agent: str) -> list[dict[str, Any]]:
    """The stage statistics of each (worker, partition) unit of ``agent``: each worker's newest
    record with a plan holds every partition it runs (older records are not parsed)."""
    newest: dict[str, Record] = {}
    for r in records:
        if r["agent"] == agent and (r.get("plan") or "{}") != "{}":
            seen = newest.get(r["worker_id"])
            if seen is None or r["window_end_ms"] >= seen["window_end_ms"]:
                newest[r["worker_id"]] = r
    units: list[dict[str, Any]] = []
    for r in newest.values():
        try:
            plan = json.loads(r["plan"])
        except ValueError:
            continue
        if isinstance(plan, dict):
            units += [u for u in plan.values() if isinstance(u, dict)]
    return units


#: the stage kinds that join the streams: an MJoin or a tree of two-way joins
JOINS = ("mjoin", "join_tree")


def _stages(unit: dict[str, Any], *kinds: str) -> list[tuple[str, dict[str, Any]]]:
    """(stage name, statistics) of the stages of these kinds of one unit (a chain or one
    stage)."""
    if unit.get("kind") in kinds:
        return [(str(unit["kind"]), unit)]
    return [(n, s) for n, s in unit.items() if isinstance(s, dict) and s.get("kind") in kinds]


def window_sizes(units: list[dict[str, Any]]) -> dict[str, float]:
    """Stream -> tuples in its MJoin window, over every partition (the latest figures)."""
    sizes: dict[str, float] = {}
    for unit in units:
        for _, stage in _stages(unit, *JOINS):
            for name, n in (stage.get("window_tuples") or {}).items():
                sizes[name] = sizes.get(name, 0.0) + float(n)
    return sizes


def join_selectivities(units: list[dict[str, Any]]) -> dict[str, float]:
    """Predicate -> f from the MJoin units' ``window_matches`` (see the module docstring)."""
    sums: dict[str, list[float]] = {}
    for unit in units:
        for _, stage in _stages(unit, *JOINS):
            for text, m in (stage.get("window_matches") or {}).items():
                acc = sums.setdefault(predicate_key(text), [0.0, 0.0, 0.0])
                acc[0] += m["matches"]
                acc[1] += m["left"]
                acc[2] += m["right"]
    return {k: m / (left * right) for k, (m, left, right) in sums.items() if left and right}


def filter_figures(
    units: list[dict[str, Any]], stream: str, single: bool
) -> tuple[dict[str, float], list[float]]:
    """``stream.filter`` -> pass rate (weighted by each partition's tuples), and the filters'
    measured ns per tuple. Stage names carry the stream (``filter.r[0]``) unless the query has
    one stream."""
    weighted: dict[str, list[float]] = {}
    costs: list[float] = []
    for unit in units:
        for name, stage in _stages(unit, "filter"):
            if not single and not name.startswith(f"filter.{stream}"):
                continue
            weight = float(stage.get("tuples_in") or 0) or 1.0
            for filt, rate in (stage.get("selectivity") or {}).items():
                acc = weighted.setdefault(predicate_key(f"{stream}.{filt}"), [0.0, 0.0])
                acc[0] += weight * rate
                acc[1] += weight
            costs += [float(c) for c in (stage.get("cost_ns") or {}).values() if c > 0]
    return {k: s / w for k, (s, w) in weighted.items() if w}, costs


def measured_stats(plan: LogicalPlan, records: list[Record], source: str) -> PlanStats:
    """The statistics of ``plan`` from its workers' ``records`` (stats topic, decoded)."""
    mine = [r for r in records if r.get("query") == plan.name]
    if not mine:
        raise StatsError(f"{source}: no statistics of query {plan.name!r} (has a worker run it?)")
    workers = {r["worker_id"] for r in mine}
    join_agent = "mjoin" if len(plan.streams) > 1 else None
    join_units = _latest_units(mine, join_agent) if join_agent else []
    windows = window_sizes(join_units)
    streams = {
        s.name: StreamStats(_rate(mine, f"ingest.{s.name}"), window=windows.get(s.name))
        for s in plan.streams
    }
    selectivity = join_selectivities(join_units)
    filter_ns: list[float] = []
    for agent in sorted({r["agent"] for r in mine}):
        units = _latest_units(mine, agent)
        for s in plan.streams:
            rates, costs = filter_figures(units, s.name, len(plan.streams) == 1)
            selectivity.update(rates)
            filter_ns += costs
    filter_cost = sum(filter_ns) / len(filter_ns) / 1e9 if filter_ns else 0.001
    draft = PlanStats(float(len(workers)), 0.001, filter_cost, streams, selectivity, source)
    join_cost = 0.001
    if join_agent:
        busy = sum(r["busy_ns"] for r in mine if r["agent"] == join_agent) / 1e9
        seconds = max(_seconds(v) for v in _by_worker(mine, join_agent).values())
        shape = Shape(tuple(s.name for s in plan.streams))
        handled = evaluate(shape, bind(plan, draft)).tuples_per_s * seconds
        if handled > 0 and busy > 0 and math.isfinite(handled):
            join_cost = busy / handled
    if not filter_ns:
        filter_cost = join_cost
    return PlanStats(float(len(workers)), join_cost, filter_cost, streams, selectivity, source)
