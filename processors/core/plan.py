"""The logical plan of a continuous query: what the stages must compute, already validated.

:class:`processors.core.query.Query` builds it; the optimizer and runtime read it. Everything is
a frozen dataclass so that a plan can be shared between stages and compared across re-plans, and
``LogicalPlan.to_json`` gives the view shown on status endpoints.
"""

from __future__ import annotations

import copy
import numbers
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import fastavro

from processors.core.ordering.config import OrderingConfig
from processors.core.scheduling.config import SchedulingConfig

if TYPE_CHECKING:
    from processors.core.query import Predicate

PRIMITIVES = frozenset({"boolean", "int", "long", "float", "double", "string", "bytes"})
INTEGER = frozenset({"int", "long"})
# Types that compare with each other: a filter constant or join partner must be of the family.
FAMILIES = {"boolean": "boolean", "bytes": "bytes", "int": "integer", "long": "integer"}
FAMILIES |= {"float": "floating", "double": "floating", "string": "text", "enum": "text"}

FilterOp = Literal["<", "<=", ">", ">=", "==", "!=", "in", "between"]
Placement = Literal["below_window", "above_window"]
_EQUALITY_ONLY = frozenset({"==", "!=", "in"})


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
    """One flat field of an input record; ``type`` is the Avro primitive (or ``enum``)."""

    name: str
    type: str
    avro: Any  # the field's type exactly as the schema wrote it, for the output schema
    symbols: tuple[str, ...] = ()  # enum symbols

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

    def __str__(self) -> str:
        ref = f"{self.stream}.{self.column}"
        if self.op == "between":
            return f"{ref} BETWEEN {self.values[0]!r} AND {self.values[1]!r}"
        if self.op == "in":
            return f"{ref} IN ({', '.join(map(repr, self.values))})"
        return f"{ref} {self.op} {self.values[0]!r}"


@dataclass(frozen=True)
class JoinPredicate:
    """An equi-join ``left = right`` between columns of two different streams."""

    left: ColumnRef
    right: ColumnRef

    def __str__(self) -> str:
        return f"{self.left} = {self.right}"


@dataclass(frozen=True)
class OutputColumn:
    """A result field: its name in the result record and the input column it comes from."""

    name: str
    source: ColumnRef
    type: str


AggregateFunc = Literal["count", "sum", "avg", "min", "max"]
AGGREGATE_FUNCS: tuple[str, ...] = ("count", "sum", "avg", "min", "max")


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

    def __str__(self) -> str:
        return (
            f"{self.name}(cost {self.cost_us:g} us, selectivity {self.selectivity:g}, "
            f"by {self.key})"
        )


def aggregate_avro(func: str, info: FieldInfo | None) -> Any:
    """The Avro type of an aggregate's result."""
    if func == "count":
        return "long"
    if func == "avg":
        return "double"
    assert info is not None
    if func == "sum":
        return "long" if info.family == "integer" else "double"
    return copy.deepcopy(info.avro)  # min, max: the column's own type


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
    operators: tuple[SyntheticOperator, ...] = ()  # synthetic stages after the filters
    # how the worker's arbiter shares the processor among the agents (Query.schedule)
    scheduling: SchedulingConfig | None = None

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

    @property
    def scheduling_config(self) -> SchedulingConfig:
        """The scheduling settings in effect: ``scheduling`` or the defaults (Chain)."""
        return self.scheduling if self.scheduling is not None else SchedulingConfig()

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
            "group_by": [str(c) for c in self.group_by],
            "aggregates": [str(a) for a in self.aggregates],
            "lateness_ms": self.lateness_ms,
            "operators": [str(o) for o in self.operators],
            "scheduling": self.scheduling_config.to_json(),
            "join_key": None if self.join_key is None else [str(c) for c in self.join_key],
            "output": {
                "topic": self.result_topic,
                "partitions": self.result_partitions,
                "columns": {c.name: str(c.source) for c in self.output},
                "schema": self.output_schema,
            },
        }


def _jsonable(value: Any) -> Any:
    return "0x" + value.hex() if isinstance(value, bytes) else value


def parse_fields(stream: str, schema: object) -> tuple[FieldInfo, ...]:
    """The flat fields of an Avro record schema; anything streamon cannot hold in a column fails."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise QueryError(f"stream {stream!r}: schema must be an Avro record schema (type 'record')")
    try:
        fastavro.parse_schema(copy.deepcopy(dict(schema)))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise QueryError(
            f"stream {stream!r}: invalid Avro schema ({type(exc).__name__}: {exc})"
        ) from exc
    fields: list[FieldInfo] = []
    enums: dict[str, Any] = {}  # enums defined by earlier fields, which later ones may name
    for f in schema["fields"]:
        name, avro = f["name"], f["type"]
        avro = copy.deepcopy(enums.get(avro, avro) if isinstance(avro, str) else avro)
        base = avro.get("type") if isinstance(avro, Mapping) else avro
        if isinstance(base, str) and base in PRIMITIVES:
            fields.append(FieldInfo(name, base, avro))
        elif base == "enum":
            ns = avro.get("namespace", schema.get("namespace"))
            enums[avro["name"]] = enums[f"{ns}.{avro['name']}" if ns else avro["name"]] = avro
            fields.append(FieldInfo(name, "enum", avro, tuple(avro["symbols"])))
        else:
            kind = "a union (nullable field)" if isinstance(avro, list) else repr(base)
            raise QueryError(
                f"stream {stream!r} field {name!r}: type {kind} is not supported; fields must be "
                "boolean, int, long, float, double, string, bytes or enum (no null, union, "
                "array, map, record or fixed)"
            )
    return tuple(fields)


def _fits(value: Any, family: str) -> bool:
    if family in ("integer", "floating"):
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, {"text": str, "bytes": bytes, "boolean": bool}[family])


def _plain(value: Any) -> Any:
    """Python scalars (numpy ones are not JSON-able)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


def check_constants(pred: Predicate, info: FieldInfo) -> tuple[Any, ...]:
    """The predicate's constants, normalized, if they fit the field's type; else QueryError."""
    if (info.family == "boolean" or info.type == "enum") and pred.op not in _EQUALITY_ONLY:
        raise QueryError(f"filter {pred}: {pred.op} is not defined on {info.type} field {pred.ref}")
    for v in pred.values:
        if not _fits(v, info.family):
            raise QueryError(
                f"filter {pred}: field {pred.ref} is {info.type} but {v!r} is {type(v).__name__}"
            )
        if info.symbols and v not in info.symbols:
            raise QueryError(f"filter {pred}: {v!r} is not a symbol of enum field {pred.ref}")
    out = tuple(_plain(v) for v in pred.values)
    if pred.op == "between" and out[0] > out[1]:
        raise QueryError(f"filter {pred}: low bound {out[0]!r} is above high bound {out[1]!r}")
    return tuple(sorted(set(out))) if pred.op == "in" else out


class Components:
    """Union-find, for connected streams and for join-key equivalence classes."""

    def __init__(self) -> None:
        self.parent: dict[Any, Any] = {}

    def find(self, x: Any) -> Any:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: Any, b: Any) -> None:
        self.parent[self.find(a)] = self.find(b)

    def groups(self, items: Iterable[Any]) -> list[list[Any]]:
        out: dict[Any, list[Any]] = {}
        for item in items:
            out.setdefault(self.find(item), []).append(item)
        return list(out.values())


def join_key(
    streams: Iterable[StreamSpec], joins: Iterable[JoinPredicate]
) -> tuple[ColumnRef, ...] | None:
    """One column per stream, all equal through the joins (first such class), or None."""
    names = [s.name for s in streams]
    classes = Components()
    cols: list[ColumnRef] = []
    for j in joins:
        classes.union(j.left, j.right)
        cols += [j.left, j.right]
    for group in classes.groups(cols):
        first: dict[str, ColumnRef] = {}
        for c in group:
            first.setdefault(c.stream, c)
        if set(first) == set(names):
            return tuple(first[n] for n in names)
    return None


def output_schema(
    name: str, streams: tuple[StreamSpec, ...], output: tuple[OutputColumn, ...], projected: bool
) -> dict[str, Any]:
    """The result record schema: the input schema itself for one stream without projection."""
    if len(streams) == 1 and not projected:
        return copy.deepcopy(streams[0].schema)
    by_name = {s.name: s for s in streams}
    enums: dict[str, tuple[Any, ColumnRef]] = {}  # an Avro named type is defined once
    fields = []
    for c in output:
        info = by_name[c.source.stream].field(c.source.field)
        assert info is not None
        avro = copy.deepcopy(info.avro)
        if info.type == "enum":
            ns = avro.get("namespace")
            full = f"{ns}.{avro['name']}" if ns else avro["name"]
            if full not in enums:
                enums[full] = (avro, c.source)
            elif enums[full][0] == avro:
                avro = full
            else:
                raise QueryError(
                    f"output field {c.name!r}: enum type {full!r} of {c.source} differs from "
                    f"the one of {enums[full][1]}; the result record can hold only one"
                )
        fields.append({"name": c.name, "type": avro})
    record = re.sub(r"\W", "_", name)
    schema = {
        "type": "record",
        "name": record if not record[0].isdigit() else f"_{record}",
        "namespace": "streamon.results",
        "fields": fields,
    }
    try:
        fastavro.parse_schema(copy.deepcopy(schema))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise QueryError(f"result schema of query {name!r} is invalid: {exc}") from exc
    return schema
