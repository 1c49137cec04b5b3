"""How much the drop boxes keep next, from what the workers measured (docs/shedding.md).

Every few seconds the shedding controller reads the Stats records measured under the shares in
force and decides:

1. **The load.** For each agent of each worker: its busy share of the window, the tuples it
   took in, and how fast what waits before it grows (a least-squares slope over the window).
   To keep up with its input it would need ``busy * (in + growth) / in`` of a processor; the
   largest such need is the bottleneck's, ``need``. (A drop box sits before decoding, so the
   ingest agents read on at speed under overload while the queue builds before the join.)
2. **The budget.** The cost must shrink (or may grow) by ``scale = aim / need``, where ``aim``
   is the query's target utilization, lowered while the output latency is over the bound and
   the backlog would not drain within it at the present pace.
3. **The shares.** The cost model (Ayad & Naughton, Sect. 3) with the statistics measured on
   the stats topic, un-shed (the ingest agents count every record read; RANGE windows are
   divided by the shares they were measured at), gives the cost at the current shares; the
   drop boxes for ``scale`` times that cost are Sect. 5's
   (:func:`processors.core.cost.shedding.approximate`: the knapsack over ROWS windows, the
   search over RANGE ones), at least ``min_keep`` each. Without the figures the model needs
   yet (a query's first seconds), every share is scaled alike by ``scale``.
4. **Damping.** A raise goes at most to ``1.5 * share + 0.1`` per decision (a load measured at
   small shares extrapolates badly: a RANGE join's cost grows faster than its shares), unless
   the load is clearly light (need under half the aim, a quarter second's reading at most
   waiting, latency within the bound): then the boxes are lifted at once.

The measured utilization calibrates the model (its absolute cost per tuple need not be right,
only its shape); the latency feedback corrects what both miss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from processors.core.cost.inputs import CostInputs, bind
from processors.core.cost.measured import measured_stats
from processors.core.cost.model import evaluate
from processors.core.cost.shapes import running_shape
from processors.core.cost.shedding import approximate
from processors.core.plan import LogicalPlan, ShedConfig

Record = Mapping[str, Any]
#: while the latency is over the bound, the target is lowered by this factor (so the backlog
#: of the overload drains, at what the workers keep in reserve)
DRAIN = 0.7
#: shares closer than this to the current ones are not worth a new SHED record
MATERIAL = 0.02
#: the search's effort at run time (cost model evaluations; docs/shedding.md)
RUN_TIME_EFFORT = 400
#: a raise is at most to current * RAISE_FACTOR + RAISE_STEP ...
RAISE_FACTOR, RAISE_STEP = 1.5, 0.1
#: ... unless the load is light: the bottleneck needs under LIGHT of the aim, at most
#: LIGHT_BACKLOG records (or LIGHT_BACKLOG_S seconds of reading) wait, and the latency is
#: within the bound (then a lift is at once)
LIGHT, LIGHT_BACKLOG, LIGHT_BACKLOG_S = 0.5, 100, 0.25


@dataclass(frozen=True)
class Signals:
    need: float  # the bottleneck agent's processor share to keep up at the current shares
    bottleneck: str  # which agent (worker/agent)
    read_per_s: float  # records read by the ingest agents, all workers
    growth_per_s: float  # growth of the records waiting before every agent (negative: draining)
    backlog: int  # records waiting before every agent now
    latency_ms: float  # the largest output latency in the window
    workers: int


def signals(
    records: Sequence[Record], window_ms: int, since_ms: int = 0, min_span_ms: int = 0
) -> Signals | None:
    """The load over the newest ``window_ms`` of ``records``, from what was measured after
    ``since_ms`` (under the shares in force) over at least ``min_span_ms`` (None: not yet).

    Each agent of each worker on its own: its busy share, the tuples it took in, and the
    growth of what waits before it (a least-squares slope: one backlog reading is noisy). Its
    need is ``busy * (in + growth) / in``: what it would take to keep up with its input; the
    largest need is the bottleneck's. (Agents' busy times overlap, a step's result writes
    inside its turn, so they are not added up.)"""
    recent = [
        r for r in records
        if r.get("scope", "AGENT") == "AGENT" and r["agent"] != "scheduler"
        and r["window_start_ms"] >= since_ms
    ]  # fmt: skip
    if not recent:
        return None
    end = max(r["window_end_ms"] for r in recent)
    recent = [r for r in recent if r["window_end_ms"] > end - window_ms]
    start = min(r["window_start_ms"] for r in recent)
    if end - start < max(min_span_ms, 1):
        return None
    span_s = (end - start) / 1000
    by_agent: dict[tuple[str, str], list[Record]] = {}
    for r in recent:
        by_agent.setdefault((r["worker_id"], str(r["agent"])), []).append(r)
    need, bottleneck, backlog, growth = 0.0, "", 0, 0.0
    for (worker, agent), mine in by_agent.items():
        mine.sort(key=lambda r: r["window_end_ms"])
        busy = sum(int(r["busy_ns"]) for r in mine) / (span_s * 1e9)
        taken = sum(int(r["tuples_in"]) for r in mine) / span_s
        slope = _slope([(r["window_end_ms"] / 1000, float(r["backlog_tuples"])) for r in mine])
        backlog += int(mine[-1]["backlog_tuples"])
        growth += slope
        mine_need = busy * (taken + slope) / taken if taken > 0 else busy + (slope > 0)
        if mine_need > need:
            need, bottleneck = mine_need, f"{worker}/{agent}"
    read = (
        sum(int(r["tuples_in"]) for r in recent if str(r["agent"]).startswith("ingest.")) / span_s
    )
    latency = max((float(r["latency_ms_max"]) for r in recent), default=0.0)
    workers = len({w for w, _ in by_agent})
    return Signals(max(need, 0.0), bottleneck, read, growth, backlog, latency, workers)


def _slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of (t, y) points (0 for fewer than two)."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    my = sum(y for _, y in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    return 0.0 if var <= 0 else sum((t - mt) * (y - my) for t, y in points) / var


def target(config: ShedConfig, s: Signals) -> float:
    """The processor share to aim at: the configured one, less while the latency is over the
    bound and the backlog would not drain within it at the present pace."""
    aim = config.target_utilization
    bound_s = config.max_latency_ms / 1000
    draining = s.backlog <= 0 or (s.growth_per_s < 0 and s.backlog / -s.growth_per_s <= bound_s)
    if s.latency_ms > config.max_latency_ms and not draining:
        aim *= DRAIN
    return aim


def _capped(
    keep: Mapping[str, float], current: Mapping[str, float], lift: bool
) -> dict[str, float]:
    """``keep`` with each raise limited to RAISE_FACTOR * current + RAISE_STEP (a load
    measured at small shares extrapolates badly to large ones: a RANGE join's cost is not
    linear in them); cuts are not limited, nor a lift when the load is clearly light."""
    if lift:
        return dict(keep)
    out = {}
    for n, k in keep.items():
        now = current.get(n, 1.0)
        out[n] = min(k, 1.0, now * RAISE_FACTOR + RAISE_STEP) if k > now else k
    return out


def next_keep(
    plan: LogicalPlan,
    records: Sequence[Record],
    s: Signals,
    current: Mapping[str, float],
    config: ShedConfig,
) -> tuple[dict[str, float], str]:
    """The shares the drop boxes should keep next, and why (see the module docstring)."""
    names = [x.name for x in plan.streams]
    need = s.need
    aim = target(config, s)
    if need <= 0:
        return dict(current), "no load measured"
    scale = aim / need
    if all(current.get(n, 1.0) >= 1.0 for n in names) and scale >= 1.0:
        return dict.fromkeys(names, 1.0), "keeping up"
    why = (f"{s.bottleneck} needs {need:.2f} of a processor for its input, aim {aim:.2f}; "
           f"latency {s.latency_ms:.0f} ms (bound {config.max_latency_ms} ms), backlog "
           f"{s.backlog}")  # fmt: skip
    light = need < LIGHT * aim
    light = light and s.backlog <= max(LIGHT_BACKLOG, LIGHT_BACKLOG_S * s.read_per_s)
    light = light and s.latency_ms < config.max_latency_ms
    try:
        keep = _modelled(plan, records, s, current, config, scale)
    except ValueError as exc:  # the model lacks figures yet: every share alike
        keep = {n: min(1.0, max(config.min_keep, current.get(n, 1.0) * scale)) for n in names}
        why = f"{why} (shares scaled alike: {exc})"
    return _capped(keep, current, light), why


def _modelled(
    plan: LogicalPlan,
    records: Sequence[Record],
    s: Signals,
    current: Mapping[str, float],
    config: ShedConfig,
    scale: float,
) -> dict[str, float]:
    figures = measured_stats(plan, list(records), "the stats topic")
    inputs = bind(plan, figures)
    inputs = _unshed(inputs, current)
    names = tuple(x.name for x in plan.streams)
    shape = running_shape(names, plan.join_tree)
    now = evaluate(shape, inputs, {n: current.get(n, 1.0) for n in names}).cost_per_s
    if now <= 0 or math.isinf(now):
        raise ValueError("the model gives no cost for the current shares")
    got = approximate(shape, inputs, config.min_keep, capacity=scale * now,
                      effort=RUN_TIME_EFFORT)  # fmt: skip
    return got.keep


def _unshed(inputs: CostInputs, current: Mapping[str, float]) -> CostInputs:
    """The inputs without the drop boxes' effect: the rates of all records read (kept or not),
    RANGE windows as if every record were kept."""
    streams = {}
    for name, st in inputs.streams.items():
        x = max(current.get(name, 1.0), 1e-6)
        window = st.window if st.tuple_window or math.isinf(st.window) else st.window / x
        streams[name] = replace(st, window=window)
    return CostInputs(streams, inputs.joins, inputs.join_cost_s, inputs.filter_cost_s,
                      inputs.capacity)  # fmt: skip


def material(new: Mapping[str, float], old: Mapping[str, float]) -> bool:
    """Whether ``new`` shares differ enough from ``old`` to publish (lifting always is)."""
    lifting = all(v >= 1.0 for v in new.values()) and any(v < 1.0 for v in old.values())
    return lifting or any(abs(new[n] - old.get(n, 1.0)) > MATERIAL for n in new)
