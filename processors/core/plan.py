"""The logical plan of a continuous query: what the stages must compute, already validated.

:class:`processors.core.query.Query` builds it; the optimizer and runtime read it. Everything is
a frozen dataclass so that a plan can be shared between stages and compared across re-plans, and
``LogicalPlan.to_json`` gives the view shown on status endpoints. This module is data only: the
checks live in :mod:`processors.core.validation`, the Avro schemas are derived in
:mod:`processors.core.schema_derivation` (the builder stores the result schema on the plan), so
that reading a plan needs neither fastavro nor the query builder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

from processors.core.batch import NULL_SUFFIX, null_column
from processors.core.join_tree import JoinTree, tree_text

if TYPE_CHECKING:  # expressions build on this module
    from processors.core.expressions import Expr
from processors.core.ordering.config import OrderingConfig
from processors.core.scheduling.config import SchedulingConfig

PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes"})
INTEGER = frozenset({"int", "long"})
# Types that compare with each other: a filter constant or join partner must be of the family.
FAMILIES = {"boolean": "boolean", "bytes": "bytes", "int": "integer", "long": "integer"}
FAMILIES |= {"float": "floating", "double": "floating", "string": "text", "enum": "text"}

FilterOp = Literal["<", "<=", ">", ">=", "==", "!=", "in", "between"]
Placement = Literal["below_window", "above_window"]


class QueryError(ValueError):
    """A query that cannot run; the message names the stream, field, topic or window at fault."""


@dataclass(frozen=True)
class ColumnRef:
    """``stream.field``: the way every predicate and projection names a column."""

    stream: str
    field: str

    def __str__(self) -> str:
        return f"{self.stream}.{self.field}"


@dataclass(frozen=True)
class FieldInfo:
    """One flat field of an input record; ``type`` is the Avro primitive (or ``enum``).

    A nullable field (a union of ``"null"`` and one other type) has ``nullable`` set; ``type``,
    ``avro`` and ``symbols`` then describe its non-null branch. Its batches carry the companion
    bool column ``null_column(name)`` (docs/windows-and-joins.md, "Nulls").
    """

    name: str
    type: str
    avro: Any  # the (non-null) type as the schema wrote it, for the output schema
    symbols: tuple[str, ...] = ()  # enum symbols
    nullable: bool = False

    @property
    def family(self) -> str:
        """Comparison family: integer, floating, text, bytes or boolean."""
        return FAMILIES[self.type]


@dataclass(frozen=True)
class StreamSpec:
    """An input stream: its topic and the Avro record schema of its messages."""

    name: str
    topic: str
    schema: dict[str, Any]
    fields: tuple[FieldInfo, ...]
    key: str | None = None  # field carried as the Kafka message key
    timestamp: str | None = None  # event-time field (ms); None: no event time, no RANGE window
    partitions: int | None = None  # None: whatever the topic has

    def field(self, name: str) -> FieldInfo | None:
        return next((f for f in self.fields if f.name == name), None)

    def filter_field(self, name: str) -> FieldInfo | None:
        """A field a filter may read: a schema field, or the companion bool column of a
        nullable one (the implicit not-null filters and ``is_null()`` read it)."""
        info = self.field(name)
        if info is None and name.endswith(NULL_SUFFIX):
            base = self.field(name[: -len(NULL_SUFFIX)])
            if base is not None and base.nullable:
                return FieldInfo(name, "boolean", "boolean")
        return info


@dataclass(frozen=True)
class Window:
    """A sliding window: the last ``size`` tuples (rows) or milliseconds of event time (range)."""

    stream: str
    kind: Literal["rows", "range"]
    size: int
    partition_by: tuple[str, ...] = ()  # ROWS only: the last ``size`` tuples per key

    @property
    def commutes_with_selection(self) -> bool:
        """Whether a filter may run before the window: true for RANGE, false for ROWS."""
        return self.kind == "range"

    def __str__(self) -> str:
        by = f"PARTITION BY {', '.join(self.partition_by)} " if self.partition_by else ""
        return f"{self.stream} [{by}{self.kind.upper()} {self.size}]"


@dataclass(frozen=True)
class Filter:
    """A selection on one stream's column against constants (``in``: a set, ``between``: lo, hi).

    ``placement`` says where the stage may run it: ``below_window`` (on the raw stream, before
    the window stage: no window, or a RANGE window, which commutes with selections) or
    ``above_window`` (on the window's delta stream: a ROWS window, which does not commute).
    """

    stream: str
    column: str
    op: FilterOp
    values: tuple[Any, ...]
    placement: Placement = "below_window"

    @property
    def is_null_check(self) -> bool:
        """Whether this filter reads a companion null column (IS NULL / IS NOT NULL)."""
        return self.column.endswith(NULL_SUFFIX) and self.op == "=="

    def __str__(self) -> str:
        ref = f"{self.stream}.{self.column}"
        if self.is_null_check:
            return f"{ref[: -len(NULL_SUFFIX)]} IS {'' if self.values[0] else 'NOT '}NULL"
        if self.op == "between":
            return f"{ref} BETWEEN {self.values[0]!r} AND {self.values[1]!r}"
        if self.op == "in":
            return f"{ref} IN ({', '.join(map(repr, self.values))})"
        return f"{ref} {self.op} {self.values[0]!r}"


def null_check(stream: str, column: str, is_null: bool, placement: Placement) -> Filter:
    """``stream.column IS [NOT] NULL``: a filter on the column's companion null column."""
    return Filter(stream, null_column(column), "==", (is_null,), placement)


@dataclass(frozen=True)
class JoinPredicate:
    """An equi-join ``left = right`` between columns of two different streams."""

    left: ColumnRef
    right: ColumnRef

    def __str__(self) -> str:
        return f"{self.left} = {self.right}"


@dataclass(frozen=True)
class OutputColumn:
    """A result field: its name in the result record and the input column it comes from, or
    the arithmetic it computes (``expr``; ``source`` is then its first column)."""

    name: str
    source: ColumnRef
    type: str
    expr: Expr | None = None


AggregateFunc = Literal["count", "sum", "avg", "min", "max"]
#: the aggregate functions a query may use and the aggregate stage computes (the one list)
AGGREGATE_FUNCS: tuple[str, ...] = get_args(AggregateFunc)
#: CQL's relation-to-stream operators a query may ask for (Query.emit); RSTREAM is not one
STREAM_OPS = ("istream", "dstream")
#: how a join writes its results (Query.join_output)
JOIN_OUTPUTS: tuple[str, ...] = ("eager", "ordered")
#: processing guarantees a query may ask for (Query.processing_guarantee)
GUARANTEES: tuple[str, ...] = ("at_least_once", "exactly_once")


@dataclass(frozen=True)
class ShedConfig:
    """Load shedding (Query.shed; docs/shedding.md): the output latency to keep, the least
    share of any input the drop boxes keep, and the busy share of a worker's processor the
    controller aims at."""

    max_latency_ms: int
    min_keep: float = 0.05
    target_utilization: float = 0.8

    def to_json(self) -> dict[str, Any]:
        return {"max_latency_ms": self.max_latency_ms, "min_keep": self.min_keep,
                "target_utilization": self.target_utilization}  # fmt: skip


@dataclass(frozen=True)
class AggregateSpec:
    """One aggregate of a GROUP BY: ``func`` over ``source`` (None: count(*)), named ``name``."""

    func: AggregateFunc
    source: ColumnRef | None
    name: str

    def __str__(self) -> str:
        return f"{self.func}({self.source or '*'}) AS {self.name}"


@dataclass(frozen=True)
class SyntheticOperator:
    """A stage with a set CPU cost per tuple and selectivity (``Query.operator``): a point of a
    progress chart (Babcock et al., Sect. 3) made real, for scheduling experiments and load
    tests. Which tuples it keeps depends only on the integer field ``key``."""

    name: str
    cost_us: float
    selectivity: float
    key: str
    kind: ClassVar[str] = "synthetic"

    def __str__(self) -> str:
        return (
            f"{self.name}(cost {self.cost_us:g} us, selectivity {self.selectivity:g}, "
            f"by {self.key})"
        )


@dataclass(frozen=True)
class OperatorNode:
    """A stage of a registered kind after a single stream's filters (``Query.apply``): ``kind``
    names an entry of :data:`processors.physical.kinds.STAGE_KINDS`, whose builder reads
    ``params`` (plain values). The plan node of any operator that needs no plan shape of its
    own (``docs/architecture.md``, "Adding an operator")."""

    kind: str
    name: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, key: str, default: Any = None) -> Any:
        return dict(self.params).get(key, default)

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params)
        return f"{self.name}: {self.kind}({args})"


@dataclass(frozen=True)
class LogicalPlan:
    """A validated continuous query."""

    name: str
    streams: tuple[StreamSpec, ...]
    windows: Mapping[str, Window]  # by stream name; a stream without one is unbounded
    filters: tuple[Filter, ...]
    joins: tuple[JoinPredicate, ...]
    output: tuple[OutputColumn, ...]
    output_schema: dict[str, Any]
    result_topic: str
    result_partitions: int | None = None
    projected: bool = False  # select() was given
    # one column per stream, all equal through the joins: the MJoin partitioning key, if any
    join_key: tuple[ColumnRef, ...] | None = None
    # how filter stages order their filters (Query.adapt); None: OrderingConfig() defaults
    ordering: OrderingConfig | None = None
    # GROUP BY over the (joined, windowed) relation: the result is one row per group
    group_by: tuple[ColumnRef, ...] = ()
    aggregates: tuple[AggregateSpec, ...] = ()
    lateness_ms: int = 0  # bounded lateness of the window stages (out-of-order event time)
    #: an input partition read to its end that got nothing for this long stops holding
    #: windows, joins and aggregates back (docs/windows-and-joins.md)
    idle_timeout_ms: int = 3_000
    #: what a worker's stateful steps of this query may hold (windows, join indexes, deltas
    #: waiting for another input) before it pauses the inputs that run ahead
    memory_limit_mb: int = 512
    #: "at_least_once" or "exactly_once" (docs/reliability.md)
    processing_guarantee: str = "at_least_once"
    # stages after the filters of a single stream (synthetic or of a registered kind)
    operators: tuple[SyntheticOperator | OperatorNode, ...] = ()
    # how the worker's arbiter shares the processor among the agents (Query.schedule)
    scheduling: SchedulingConfig | None = None
    #: CQL's relation-to-stream operator (Query.emit): "istream" writes only the result
    #: relation's inserts, "dstream" only its deletes (as plain records); None: every change
    stream_op: str | None = None
    #: run the join as this tree of two-way joins (Query.join_tree); None: one MJoin
    join_tree: JoinTree | None = None
    #: shed load to keep the output latency (Query.shed); None: never drop a record
    shedding: ShedConfig | None = None
    #: "eager": an ISTREAM join of RANGE windows writes each result as its last tuple arrives
    #: (processors.stages.eager_mjoin); "ordered": in event-time order (Query.join_output)
    join_output: str = "eager"

    def stream(self, name: str) -> StreamSpec:
        return next(s for s in self.streams if s.name == name)

    def filters_on(self, stream: str, placement: Placement | None = None) -> tuple[Filter, ...]:
        """The filters of ``stream``, optionally only those with ``placement``."""
        return tuple(
            f
            for f in self.filters
            if f.stream == stream and (placement is None or f.placement == placement)
        )

    @property
    def ordering_config(self) -> OrderingConfig:
        """The filter-ordering settings in effect: ``ordering`` or the defaults."""
        return self.ordering if self.ordering is not None else OrderingConfig()

    def _caching_json(self) -> dict[str, Any] | None:
        c = self.ordering_config
        if not self.joins or not c.caches_on:
            return None
        return {"cache_memory_mb": c.cache_memory_mb, "cache_interval": c.cache_interval,
                "cache_window": c.cache_window, "cache_metric": c.cache_metric,
                "cache_profile_probability": c.cache_profile_probability}  # fmt: skip

    @property
    def scheduling_config(self) -> SchedulingConfig:
        """The scheduling settings in effect: ``scheduling`` or the defaults (Chain)."""
        return self.scheduling if self.scheduling is not None else SchedulingConfig()

    @property
    def eager_join(self) -> bool:
        """Whether the join runs eager: asked for (the default), and a shape whose results do
        not depend on processing order, i.e. the inserts (ISTREAM) of a join of RANGE windows
        with no GROUP BY after it and no join tree."""
        return (
            self.join_output == "eager"
            and len(self.streams) > 1
            and self.stream_op == "istream"
            and not self.aggregates
            and self.join_tree is None
            and all(
                s.name in self.windows
                and self.windows[s.name].kind == "range"
                and not self.windows[s.name].partition_by
                for s in self.streams
            )
        )

    @property
    def is_passthrough(self) -> bool:
        """One stream copied as is: no window, filter, join or projection."""
        return (
            len(self.streams) == 1
            and not self.windows
            and not self.filters
            and not self.joins
            and not self.projected
            and not self.aggregates
            and not self.operators
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able description for status endpoints and logs."""
        return {
            "name": self.name,
            "passthrough": self.is_passthrough,
            "streams": [
                {
                    "name": s.name,
                    "topic": s.topic,
                    "key": s.key,
                    "timestamp": s.timestamp,
                    "partitions": s.partitions,
                    "fields": {f.name: f.type for f in s.fields},
                    "nullable": [f.name for f in s.fields if f.nullable],
                    "window": str(self.windows[s.name]) if s.name in self.windows else None,
                }
                for s in self.streams
            ],
            "filters": [
                {
                    "stream": f.stream,
                    "column": f.column,
                    "op": f.op,
                    "values": [_jsonable(v) for v in f.values],
                    "placement": f.placement,
                    "text": str(f),
                }
                for f in self.filters
            ],
            # the settings filter stages run with (defaults unless adapt() was given); none
            # without filters
            "ordering": self.ordering_config.to_json() if self.filters else None,
            "joins": [str(j) for j in self.joins],
            # A-Caching in the MJoin (docs/caching.md): null unless enabled and joined
            "caching": self._caching_json(),
            "group_by": [str(c) for c in self.group_by],
            "aggregates": [str(a) for a in self.aggregates],
            "lateness_ms": self.lateness_ms,
            "idle_timeout_ms": self.idle_timeout_ms,
            "memory_limit_mb": self.memory_limit_mb,
            "processing_guarantee": self.processing_guarantee,
            "operators": [str(o) for o in self.operators],
            "scheduling": self.scheduling_config.to_json(),
            "stream_op": self.stream_op,
            "join_tree": None if self.join_tree is None else tree_text(self.join_tree),
            "shedding": None if self.shedding is None else self.shedding.to_json(),
            "join_output": "eager" if self.eager_join else "ordered",
            "join_key": None if self.join_key is None else [str(c) for c in self.join_key],
            "output": {
                "topic": self.result_topic,
                "partitions": self.result_partitions,
                "columns": {c.name: str(c.expr or c.source) for c in self.output},
                "schema": self.output_schema,
            },
        }


def _jsonable(value: Any) -> Any:
    return "0x" + value.hex() if isinstance(value, bytes) else value
