"""Operator scheduling policies: Chain (Sect. 4.1), FIFO, Round-Robin and Greedy (Sect. 4.2),
Chain-Flush (Sect. 5.1-5.2) and Mixed(gamma) (Sect. 5.3) of Babcock et al. (VLDB J. 2004).

A policy is asked, once per scheduling decision, which of the ready operators runs next. All
per-plan work (progress charts, envelopes, priorities) happens in :meth:`Policy.update`, when
the plan or its statistics change; :meth:`Policy.choose` is one pass over the ready operators
with dictionary lookups (priorities are turned into integer ranks up front).

Shared operators (Sect. 4.3): an operator on several paths (a join and what follows it) lies on
one chain per path; its priority is the largest of those chains' slopes, since it runs whenever
any of them would schedule it (the tuple it then processes is its input's oldest, whichever
path that tuple came from).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Any, ClassVar

from processors.core.scheduling.plan import SchedulingPlan
from processors.core.scheduling.progress import (
    Segment,
    chains,
    clip_envelope,
    greedy_priorities,
)


@dataclass(frozen=True, slots=True)
class ReadyOperator:
    """An operator that can run now: its input is not empty (for a join: none of its inputs
    is empty). ``head_arrival`` is the timestamp of the tuple it would process next (a join:
    the oldest of its inputs' heads); ``queued`` is informational (units or bytes)."""

    op: str
    head_arrival: float
    queued: float = 0.0


def _unknown(op: object) -> ValueError:
    return ValueError(f"ready operator {op!r} is not in the scheduling plan")


class Policy:
    """Base class: one instance per scheduler; it may keep state between decisions."""

    name: ClassVar[str] = ""
    SETTINGS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, plan: SchedulingPlan, **settings: Any) -> None:
        self.check_settings(settings)
        self.settings = dict(settings)
        self.plan = plan
        self.update(plan)

    @classmethod
    def check_settings(cls, settings: dict[str, Any]) -> None:
        for key in settings:
            if key not in cls.SETTINGS:
                allowed = ", ".join(cls.SETTINGS) or "none"
                raise ValueError(
                    f"unknown setting {key!r} for policy {cls.name!r} (allowed: {allowed})"
                )

    def update(self, plan: SchedulingPlan) -> None:
        """Recompute everything derived from the plan (new statistics); decision state that
        still applies is kept."""
        plan.validate()
        self.plan = plan
        self._order = {op: i for i, op in enumerate(plan.operators())}
        n = len(self._order)
        # ties between heads that arrived together: the operator closest to its output first,
        # then plan order (one integer per operator)
        self._downstream_first = {
            op: len(plan.downstream(op)) * n + i for op, i in self._order.items()
        }
        self._prepare()

    def _prepare(self) -> None:
        pass

    def choose(self, now: float, ready: Sequence[ReadyOperator]) -> str | None:
        """The operator to run next, or None when nothing is ready."""
        raise NotImplementedError

    def next_decision(self) -> float | None:
        """A time at which to call :meth:`choose` again even if nothing else happens (a
        deadline coming due, a quantum ending); valid until the ready set changes. None: only
        on events (arrivals, an operator finishing its head tuple)."""
        return None

    def priorities(self) -> dict[str, float]:
        """Per operator, the static priority shown to users (none for FIFO/Round-Robin)."""
        return {}

    def describe(self) -> dict[str, Any]:
        """JSON-able: policy name, settings and priorities."""
        return {
            "policy": self.name,
            "settings": {k: _jsonable(v) for k, v in self.settings.items()},
            "priorities": self.priorities(),
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, bool | int | str) or value is None:
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


class _Ranked(Policy):
    """A static priority per operator (higher first); ties to the oldest head tuple (Sect. 4.1:
    the earliest arrival), then to the operator closest to its output (of two tuples that
    arrived together the one further along goes on, so that at most one is in the middle of
    a segment, Proposition 2), then to plan order."""

    def _priority_map(self) -> dict[str, Any]:
        raise NotImplementedError

    def _prepare(self) -> None:
        self._prio = self._priority_map()
        levels = sorted(set(self._prio.values()), reverse=True)
        level_rank = {v: i for i, v in enumerate(levels)}
        self._rank = {op: level_rank[p] for op, p in self._prio.items()}
        self._tiebreak = self._downstream_first

    def choose(self, now: float, ready: Sequence[ReadyOperator]) -> str | None:
        rank = self._rank
        best = None
        bk = 0
        bh = 0.0
        try:
            for r in ready:
                k = rank[r.op]
                if best is None or k < bk:
                    best, bk, bh = r.op, k, r.head_arrival
                elif k == bk:
                    h = r.head_arrival
                    if h < bh or (h == bh and self._tiebreak[r.op] < self._tiebreak[best]):
                        best, bh = r.op, h
        except KeyError as exc:
            raise _unknown(exc.args[0]) from None
        return best

    def priorities(self) -> dict[str, float]:
        return {op: float(p) for op, p in self._prio.items()}


class Chain(_Ranked):
    """Chain (Sect. 4.1): the ready operator on the steepest lower-envelope segment."""

    name = "chain"

    def _segments(self, path: str) -> list[Segment]:
        return chains(self.plan.chart(path))

    def _priority_map(self) -> dict[str, Any]:
        prio: dict[str, Any] = {}
        self._chains: dict[str, list[Segment]] = {}
        for path, ops in self.plan.paths.items():
            segs = self._segments(path)
            self._chains[path] = segs
            for seg in segs:
                for i in seg.ops:
                    op = ops[i]
                    prio[op] = seg.slope if op not in prio else max(prio[op], seg.slope)
        return prio

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["chains"] = {
            path: [
                {"ops": [self.plan.paths[path][i] for i in seg.ops], "slope": float(seg.slope)}
                for seg in segs
            ]
            for path, segs in self._chains.items()
        }
        return out


class Mixed(Chain):
    """Mixed(gamma) (Sect. 5.3): Chain on the envelope whose segments of slope below gamma
    are merged into one, inside which tuples go first-in first-out."""

    name = "mixed"
    SETTINGS = ("gamma",)

    def __init__(self, plan: SchedulingPlan, **settings: Any) -> None:
        self.check_settings(settings)
        if "gamma" not in settings:
            raise ValueError("policy 'mixed' needs gamma=<slope threshold>")
        g = settings["gamma"]
        if isinstance(g, bool) or not isinstance(g, Real) or not math.isfinite(g) or g < 0:
            raise ValueError(f"mixed: gamma must be a number >= 0, got {g!r}")
        self.gamma = g
        super().__init__(plan, **settings)

    def _segments(self, path: str) -> list[Segment]:
        return clip_envelope(chains(self.plan.chart(path)), self.gamma)


class Greedy(_Ranked):
    """Greedy (Sect. 4.2): static priority (1 - s') / t' per operator, the last operator of a
    path counting as s' = 0 (it ejects its output)."""

    name = "greedy"

    def _priority_map(self) -> dict[str, Any]:
        prio: dict[str, Any] = {}
        for path, ops in self.plan.paths.items():
            for op, p in zip(ops, greedy_priorities(self.plan.chart(path)), strict=True):
                # per tuple received the ratio is the same on every path through op
                prio[op] = p if op not in prio else max(prio[op], p)
        return prio


class Fifo(Policy):
    """FIFO (Sect. 4.2): the operator holding the oldest tuple, so that tuple is processed to
    completion before the next one starts; between tuples that arrived at the same time, the
    one closest to its output goes first, for the same reason."""

    name = "fifo"

    def choose(self, now: float, ready: Sequence[ReadyOperator]) -> str | None:
        order = self._downstream_first
        best = None
        bh = 0.0
        bo = 0
        try:
            for r in ready:
                h = r.head_arrival
                o = order[r.op]
                if best is None or h < bh or (h == bh and o < bo):
                    best, bh, bo = r.op, h, o
        except KeyError as exc:
            raise _unknown(exc.args[0]) from None
        return best


class RoundRobin(Policy):
    """Round-Robin (Sect. 4.2): cycle over the operators (plan order), the next ready one after
    the last chosen. ``quantum``: keep an operator for that long while it stays ready (default:
    move on at every decision, i.e. one batch or one finished tuple each)."""

    name = "round-robin"
    SETTINGS = ("quantum",)

    def __init__(self, plan: SchedulingPlan, **settings: Any) -> None:
        q = settings.get("quantum")
        if q is not None and (
            isinstance(q, bool) or not isinstance(q, Real) or not q > 0 or q == math.inf
        ):
            raise ValueError(f"round-robin: quantum must be a positive number, got {q!r}")
        self.quantum = q
        self._last = -1
        self._current: str | None = None
        self._since = 0.0
        super().__init__(plan, **settings)

    def _prepare(self) -> None:
        if self._current is not None and self._current not in self._order:
            self._current, self._last = None, -1

    def choose(self, now: float, ready: Sequence[ReadyOperator]) -> str | None:
        in_quantum = self.quantum is not None and now < self._since + self.quantum
        if in_quantum and self._current is not None:
            for r in ready:
                if r.op == self._current:
                    return r.op
        order = self._order
        n = len(order)
        last = self._last
        best = None
        bd = n
        try:
            for r in ready:
                d = (order[r.op] - last - 1) % n
                if d < bd:
                    best, bd = r.op, d
        except KeyError as exc:
            raise _unknown(exc.args[0]) from None
        if best is not None:
            self._last = order[best]
            self._current = best
            self._since = now
        return best

    def next_decision(self) -> float | None:
        if self.quantum is None or self._current is None:
            return None
        return self._since + self.quantum


class ChainFlush(Chain):
    """Chain-Flush as implemented in Sect. 5.2.

    Q holds, per input queue q, (q, t_h, r_q, p_q): the head tuple's timestamp, the query's
    latency threshold and the processing still ahead of it (:meth:`SchedulingPlan.remaining`),
    ordered by t_h + r_q - p_q. Here Q is the ready operators' heads, scanned per decision
    (the same O(ready) pass Chain makes). If its first entry has now + p_q >= t_h + r_q, flush
    mode: the virtual segment from q's reader to the output runs until every tuple in it no
    newer than that head (the head itself and the older tuples ahead of it in the segment's
    queues) has left, oldest first; newer tuples in the segment keep their own deadlines (the
    paper also flushes them). Otherwise Chain. Flush state lives in the policy, since the live
    runtime asks once per granted batch.

    ``latency_threshold`` (setting): one threshold for every query, overriding the plan's.
    Queries without a threshold never flush.
    """

    name = "chain-flush"
    SETTINGS = ("latency_threshold",)

    def __init__(self, plan: SchedulingPlan, **settings: Any) -> None:
        r = settings.get("latency_threshold")
        if r is not None and (
            isinstance(r, bool) or not isinstance(r, Real) or math.isnan(r) or r <= 0
        ):
            raise ValueError(f"chain-flush: latency_threshold must be > 0, got {r!r}")
        self._flush: dict[str, int] | None = None
        self._flush_until = 0.0
        self._next: float | None = None
        self.flushes = 0
        super().__init__(plan, **settings)

    def _prepare(self) -> None:
        super()._prepare()
        override = self.settings.get("latency_threshold")
        self._offset: dict[str, float] = {}
        self._segment: dict[str, dict[str, int]] = {}
        for op in self._order:
            q = self.plan.query_of_op(op)
            r = override if override is not None else self.plan.latency_threshold.get(q)
            r = math.inf if r is None else r
            self._offset[op] = r - self.plan.remaining(op)
            self._segment[op] = {o: i for i, o in enumerate(self.plan.downstream(op))}
        self._flush = None
        self._next = None

    def thresholds(self) -> dict[str, float]:
        """Per query, the latency threshold in force."""
        override = self.settings.get("latency_threshold")
        return {
            q: (override if override is not None else self.plan.latency_threshold.get(q, math.inf))
            for q in self.plan.queries()
        }

    def _flush_pick(self, ready: Sequence[ReadyOperator]) -> str | None:
        seg = self._flush
        until = self._flush_until
        best = None
        bh = 0.0
        bp = 0
        for r in ready:
            pos = seg.get(r.op)  # type: ignore[union-attr]
            if pos is None:
                continue
            h = r.head_arrival
            if h <= until and (best is None or h < bh or (h == bh and pos > bp)):
                best, bh, bp = r.op, h, pos
        return best

    def choose(self, now: float, ready: Sequence[ReadyOperator]) -> str | None:
        if self._flush is not None:
            pick = self._flush_pick(ready)
            if pick is not None:
                return pick
            self._flush = None
        offset = self._offset
        first = None
        due = math.inf
        try:
            for r in ready:
                d = r.head_arrival + offset[r.op]
                if d < due:
                    due, first = d, r
        except KeyError as exc:
            raise _unknown(exc.args[0]) from None
        if first is not None and due <= now:
            self._flush = self._segment[first.op]
            self._flush_until = first.head_arrival
            self._next = None
            self.flushes += 1
            return self._flush_pick(ready)
        self._next = due if due < math.inf else None
        return super().choose(now, ready)

    def next_decision(self) -> float | None:
        return None if self._flush is not None else self._next

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["latency_threshold"] = {q: float(r) for q, r in self.thresholds().items()}
        out["flushes"] = self.flushes
        return out


POLICIES: dict[str, type[Policy]] = {
    cls.name: cls for cls in (Chain, ChainFlush, Mixed, Fifo, RoundRobin, Greedy)
}


def make_policy(name: str, plan: SchedulingPlan, **settings: Any) -> Policy:
    """A policy by name: "chain", "chain-flush" (thresholds from the plan or
    latency_threshold=), "mixed" (gamma=), "fifo", "round-robin" (quantum=), "greedy"."""
    if not isinstance(name, str):
        raise ValueError(f"policy name must be a string, got {name!r}")
    key = name.strip().lower().replace("_", "-")
    if key not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose one of {sorted(POLICIES)}")
    return POLICIES[key](plan, **settings)
