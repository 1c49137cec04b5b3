"""A query's plan bound to statistics: what the cost model reads (Ayad & Naughton, Sect. 3).

Each stream becomes its rate and its window in tuples: ``ROWS n`` holds n tuples (``PARTITION
BY k ROWS n``: n per key, times the distinct keys), ``RANGE T`` holds ``rate * T`` on average
(Sect. 3.1), a stream without a window is unbounded; a measured size, when the statistics have
one, replaces these (event time need not pass at the rate tuples arrive: a replay). Filters
keep their selectivities, in the order a uniform-cost chain runs best (ascending selectivity);
join predicates become edges of the join graph.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from processors.core.cost.stats_file import PlanStats, StatsError, predicate_key
from processors.core.plan import LogicalPlan, StreamSpec, Window


@dataclass(frozen=True)
class StreamInput:
    name: str
    rate: float  # tuples per second
    window: float  # tuples the window holds on average (inf: unbounded)
    window_text: str
    #: True for ROWS windows: their size does not depend on the rate (Sect. 5.2's setting)
    tuple_window: bool
    #: conjunctive filters: (text, selectivity), in the order they run
    filters: tuple[tuple[str, float], ...] = ()
    #: bytes a tuple takes in a window (an estimate: :func:`tuple_bytes`)
    width: float = 0.0

    @property
    def selectivity(self) -> float:
        return math.prod(s for _, s in self.filters)


@dataclass(frozen=True)
class JoinEdge:
    left: str
    right: str
    text: str
    selectivity: float
    #: the equality class of its columns: ``a.x = b.x`` and ``b.x = c.x`` imply ``a.x = c.x``
    cls: int = -1


@dataclass(frozen=True)
class CostInputs:
    """Everything one cost estimate reads; costs in seconds per tuple, capacity in processors."""

    streams: dict[str, StreamInput]
    joins: tuple[JoinEdge, ...]
    join_cost_s: float
    filter_cost_s: float
    capacity: float

    def class_selectivity(self, cls: int) -> float:
        """One equality of class ``cls``: the geometric mean of its predicates' selectivities
        per equality the class makes (members - 1), so that joining its members in any order
        multiplies up to the product of its predicates, as eq. 5 does (Observation 1)."""
        edges = [e for e in self.joins if e.cls == cls]
        members = {s for e in edges for s in (e.left, e.right)}
        product = math.prod(e.selectivity for e in edges)
        return product ** (1.0 / max(1, len(members) - 1))

    def selectivity_between(self, left: frozenset[str], right: frozenset[str]) -> float:
        """The selectivity of joining ``left`` to ``right`` (1: a Cartesian product): one
        equality per class with members on both sides, since the class's others are implied
        (``a.x = b.x`` and ``a.x = c.x`` make ``b ⋈ c`` a join on x, and ``(a ⋈ b) ⋈ c`` one
        more equality, not two)."""
        return math.prod(self.class_selectivity(e.cls) for e in self.edges_between(left, right))

    def edges_between(self, left: frozenset[str], right: frozenset[str]) -> list[JoinEdge]:
        """One predicate per equality class joining ``left`` to ``right``: a declared one
        across the cut if there is one, else one of the class's (the equality is implied)."""
        out = []
        for cls in sorted({e.cls for e in self.joins}):
            members = [e for e in self.joins if e.cls == cls]
            streams = {s for e in members for s in (e.left, e.right)}
            if not (streams & left and streams & right):
                continue
            crossing = [
                e for e in members
                if (e.left in left and e.right in right) or (e.left in right and e.right in left)
            ]  # fmt: skip
            out.append((crossing or members)[0])
        return out

    def with_join_cost(self, join_cost_s: float, filter_cost_s: float | None = None) -> CostInputs:
        return CostInputs(
            self.streams,
            self.joins,
            join_cost_s,
            join_cost_s if filter_cost_s is None else filter_cost_s,
            self.capacity,
        )


#: bytes per value of each Avro type in a columnar window; strings and bytes: an assumed average
TYPE_BYTES = {"long": 8, "double": 8, "int": 4, "float": 4, "boolean": 1, "enum": 4,
              "string": 24, "bytes": 24}  # fmt: skip
#: per tuple: its row id and event time
TUPLE_OVERHEAD = 16


def tuple_bytes(spec: StreamSpec) -> float:
    """An estimate of one tuple's bytes in a window (a nullable value adds its null flag)."""
    return TUPLE_OVERHEAD + sum(TYPE_BYTES.get(f.type, 8) + f.nullable for f in spec.fields)


def _window_text(window: Window | None) -> str:
    if window is None:
        return "UNBOUNDED"
    if window.kind == "range":
        return f"RANGE {window.size:,} ms"
    by = f"PARTITION BY {', '.join(window.partition_by)} " if window.partition_by else ""
    return f"{by}ROWS {window.size:,}"


def _window(window: Window | None, rate: float, keys: float | None, stream: str) -> float:
    if window is None:
        return math.inf
    if window.kind == "range":
        return rate * window.size / 1000.0
    if window.partition_by:
        if keys is None:
            raise StatsError(
                f"stream {stream!r} has {window}: its size is per key, so the statistics need "
                f"the number of keys ([streams.{stream}] keys = ...)"
            )
        return window.size * keys
    return float(window.size)


def _classes(plan: LogicalPlan) -> dict[str, int]:
    """``stream.column`` -> the number of its equality class (union of the join predicates)."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for j in plan.joins:
        parent[root(str(j.left))] = root(str(j.right))
    roots = sorted({root(x) for x in list(parent)})
    return {x: roots.index(root(x)) for x in list(parent)}


def bind(plan: LogicalPlan, stats: PlanStats) -> CostInputs:
    """The plan's streams, filters and joins with ``stats``; a missing figure is a
    :class:`StatsError` that lists every missing key, ready to paste into the file."""
    missing: list[str] = []
    streams: dict[str, StreamInput] = {}
    for spec in plan.streams:
        got = stats.streams.get(spec.name)
        if got is None:
            missing.append(f"[streams.{spec.name}] rate = ...")
            continue
        filters = []
        for f in plan.filters:
            if f.stream != spec.name:
                continue
            s = stats.selectivity.get(predicate_key(str(f)))
            if s is None and f.is_null_check and not f.values[0]:
                s = 1.0  # IS NOT NULL (SQL adds it to a nullable join column): no nulls assumed
            if s is None:
                missing.append(f'"{f}" = ...   # [selectivity]')
            else:
                filters.append((str(f), s))
        window = plan.windows.get(spec.name)
        size = (
            got.window if got.window is not None else _window(window, got.rate, got.keys, spec.name)
        )
        streams[spec.name] = StreamInput(
            spec.name,
            got.rate,
            size,
            _window_text(window),
            window is not None and window.kind == "rows",
            tuple(sorted(filters, key=lambda fs: fs[1])),
            tuple_bytes(spec),
        )
    edges = []
    classes = _classes(plan)
    for j in plan.joins:
        s = stats.selectivity.get(predicate_key(str(j)))
        if s is None:
            missing.append(f'"{j}" = ...   # [selectivity]')
        else:
            edges.append(JoinEdge(j.left.stream, j.right.stream, str(j), s, classes[str(j.left)]))
    extra = sorted(set(stats.streams) - {s.name for s in plan.streams})
    if extra:
        raise StatsError(
            f"{stats.source}: streams {', '.join(extra)} are not in query {plan.name!r}"
        )
    if missing:
        raise StatsError(f"{stats.source} lacks figures query {plan.name!r} needs:\n  " +
                         "\n  ".join(missing))  # fmt: skip
    return CostInputs(streams, tuple(edges), stats.join_cost_s, stats.filter_cost_s, stats.capacity)
