"""How much the drop boxes keep next, from what the workers measured (docs/shedding.md).

Every few seconds the shedding controller reads the query's recent Stats records and decides:

1. **The load.** ``busy``: the busiest worker's processor share over the window; ``read``:
   records its ingest agents read per second, all workers; ``growth``: how fast their backlog
   grows. The offered load is ``read + growth``, and at the current shares the workers would
   need ``need = busy * offered / read`` of their processors to keep up.
2. **The budget.** The cost must shrink (or may grow) by ``scale = target / need``, where
   ``target`` is the query's target utilization, lowered while the output latency is over the
   bound (so that the backlog drains) and while a backlog is left.
3. **The shares.** The cost model (Ayad & Naughton, Sect. 3) at the offered rates, with the
   statistics measured on the stats topic (un-shed: rates and RANGE windows divided by the
   shares they were measured at), gives the cost at the current shares; the drop boxes for
   ``scale`` times that cost are Sect. 5's (:func:`processors.core.cost.shedding.approximate`:
   the knapsack over ROWS windows, the search over RANGE ones), at least ``min_keep`` each.
   Without the figures the model needs yet (a query's first seconds), every share is scaled
   alike by ``scale``.

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
from processors.core.cost.shapes import Join, Leaf, Shape
from processors.core.cost.shedding import approximate
from processors.core.join_tree import JoinTree
from processors.core.plan import LogicalPlan, ShedConfig

Record = Mapping[str, Any]
#: while the latency is over the bound, the target is lowered by this factor (so the backlog
#: of the overload drains, at what the workers keep in reserve)
DRAIN = 0.7
#: shares closer than this to the current ones are not worth a new SHED record
MATERIAL = 0.02
#: the search's effort at run time (cost model evaluations; docs/shedding.md)
RUN_TIME_EFFORT = 400


@dataclass(frozen=True)
class Signals:
    busy: float  # the busiest worker's busy share of the window, 0..1
    read_per_s: float  # records read by the ingest agents, all workers
    growth_per_s: float  # backlog growth (records per second; negative: draining)
    backlog: int  # records waiting in the input topics now
    latency_ms: float  # the largest output latency in the window
    workers: int

    @property
    def need(self) -> float:
        """The processor share the current shares would need to keep up with the input."""
        if self.read_per_s <= 0:
            return self.busy
        return self.busy * max(self.read_per_s + self.growth_per_s, 0.0) / self.read_per_s


def signals(records: Sequence[Record], window_ms: int) -> Signals | None:
    """The load over the newest ``window_ms`` of ``records`` (None: nothing measured yet)."""
    agent = [r for r in records if r.get("scope", "AGENT") == "AGENT"]
    if not agent:
        return None
    end = max(r["window_end_ms"] for r in agent)
    recent = [r for r in agent if r["window_end_ms"] > end - window_ms]
    span_s = max(1e-3, (end - min(r["window_start_ms"] for r in recent)) / 1000)
    busy_ns: dict[str, int] = {}
    for r in recent:
        busy_ns[r["worker_id"]] = busy_ns.get(r["worker_id"], 0) + int(r["busy_ns"])
    ingest = [r for r in recent if str(r["agent"]).startswith("ingest.")]
    read = sum(int(r["tuples_in"]) for r in ingest) / span_s
    first, last = _backlog_at(ingest, min), _backlog_at(ingest, max)
    growth = (last[1] - first[1]) / max(1e-3, (last[0] - first[0]) / 1000) if ingest else 0.0
    latency = max((float(r["latency_ms_max"]) for r in recent), default=0.0)
    busy = max(busy_ns.values()) / (span_s * 1e9)
    return Signals(min(busy, 1.0), read, growth, int(last[1]), latency, len(busy_ns))


def _backlog_at(ingest: Sequence[Record], pick: Any) -> tuple[int, float]:
    """(time, total backlog) at the oldest (pick=min) or newest (max) window end: each
    (worker, agent)'s record at or before it."""
    if not ingest:
        return 0, 0.0
    at = pick(r["window_end_ms"] for r in ingest)
    latest: dict[tuple[str, str], Record] = {}
    for r in ingest:
        key = (r["worker_id"], r["agent"])
        if r["window_end_ms"] <= at and (
            key not in latest or r["window_end_ms"] > latest[key]["window_end_ms"]
        ):
            latest[key] = r  # fmt: skip
    return at, float(sum(int(r["backlog_tuples"]) for r in latest.values()))


def target(config: ShedConfig, s: Signals) -> float:
    """The processor share to aim at: the configured one, less while over the bound."""
    aim = config.target_utilization
    if s.latency_ms > config.max_latency_ms:
        aim *= DRAIN
    return aim


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
    why = (f"workers need {need:.2f} of their processors for the input, aim {aim:.2f}; "
           f"latency {s.latency_ms:.0f} ms (bound {config.max_latency_ms} ms), backlog "
           f"{s.backlog}")  # fmt: skip
    try:
        keep = _modelled(plan, records, s, current, config, scale)
        return keep, why
    except ValueError as exc:  # the model lacks figures yet: every share alike
        keep = {n: min(1.0, max(config.min_keep, current.get(n, 1.0) * scale)) for n in names}
        return keep, f"{why} (shares scaled alike: {exc})"


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
    offered = (s.read_per_s + max(s.growth_per_s, 0.0)) / s.read_per_s if s.read_per_s else 1.0
    inputs = _unshed(inputs, current, offered)
    names = tuple(x.name for x in plan.streams)
    shape = Shape(names, Leaf(names[0])) if len(names) == 1 else _running_shape(plan, names)
    now = evaluate(shape, inputs, {n: current.get(n, 1.0) for n in names}).cost_per_s
    if now <= 0 or math.isinf(now):
        raise ValueError("the model gives no cost for the current shares")
    got = approximate(shape, inputs, config.min_keep, capacity=scale * now,
                      effort=RUN_TIME_EFFORT)  # fmt: skip
    return got.keep


def _unshed(inputs: CostInputs, current: Mapping[str, float], offered: float) -> CostInputs:
    """The inputs without the drop boxes' effect: read rates (all records read, kept or not)
    times the offered share, RANGE windows as if every record were kept."""
    streams = {}
    for name, st in inputs.streams.items():
        x = max(current.get(name, 1.0), 1e-6)
        window = st.window if st.tuple_window or math.isinf(st.window) else st.window / x
        streams[name] = replace(st, rate=st.rate * offered, window=window)
    return CostInputs(streams, inputs.joins, inputs.join_cost_s, inputs.filter_cost_s,
                      inputs.capacity)  # fmt: skip


def _running_shape(plan: LogicalPlan, names: tuple[str, ...]) -> Shape:
    """The shape the workers run: the MJoin, or the plan's join tree."""
    if plan.join_tree is None:
        return Shape(names)

    def tree(t: JoinTree) -> Any:
        return Leaf(t) if isinstance(t, str) else Join(tree(t[0]), tree(t[1]))

    return Shape(names, tree(plan.join_tree))


def material(new: Mapping[str, float], old: Mapping[str, float]) -> bool:
    """Whether ``new`` shares differ enough from ``old`` to publish (lifting always is)."""
    lifting = all(v >= 1.0 for v in new.values()) and any(v < 1.0 for v in old.values())
    return lifting or any(abs(new[n] - old.get(n, 1.0)) > MATERIAL for n in new)
