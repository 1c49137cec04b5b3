"""Declare a continuous query in Python and build its validated :class:`LogicalPlan`.

    q = Query("sensor-alerts")
    q.stream("r", topic="readings", schema=reading_schema, key="sensor_id", timestamp="ts")
    q.stream("s", topic="sites", schema=site_schema)
    q.window("r", rows=1000)
    q.where(col("r.temperature") > 30.0, col("r.site").isin({"a", "b"}))
    q.join("r.site", "s.name")
    q.into("alerts", partitions=4)
    q.adapt("agreedy", profile_probability=0.02)   # optional: how filters are ordered
    plan = q.build()

Checks that need only a call's own arguments fail at that call; checks that relate
declarations to each other (unknown streams and fields, types, the join graph) fail in
``build()``, so declarations may come in any order. Every failure is a :class:`QueryError`
naming the stream, field, topic or window at fault, because the user reads it, not a developer.

The column DSL (``col``) is :mod:`processors.core.columns`, the checks are
:mod:`processors.core.validation`, the Avro schemas :mod:`processors.core.schema_derivation`;
this module re-exports what users import from it (``Query``, ``col``, ``LogicalPlan``,
``QueryError``).
"""

from __future__ import annotations

import copy
import numbers
import re
from collections.abc import Iterable, Mapping
from typing import Any

from processors.core.columns import Col, Predicate, col, parse_ref
from processors.core.equivalence import join_key
from processors.core.expressions import ColExpr, Expr, result_type
from processors.core.join_tree import JoinTree, JoinTreeError, check_join_tree
from processors.core.ordering.config import OrderingConfig
from processors.core.plan import (
    AGGREGATE_FUNCS,
    INTEGER,
    STREAM_OPS,
    AggregateSpec,
    ColumnRef,
    FieldInfo,
    Filter,
    JoinPredicate,
    LogicalPlan,
    OperatorNode,
    OutputColumn,
    QueryError,
    ShedConfig,
    StreamSpec,
    SyntheticOperator,
    Window,
)
from processors.core.query_settings import QuerySettings
from processors.core.scheduling.config import SchedulingConfig
from processors.core.schema_derivation import (
    aggregate_schema,
    output_schema,
    parse_fields,
    with_shedding_fields,
)
from processors.core.validation import (
    check_aggregates,
    check_costs,
    check_joins,
    check_partitions,
    check_topic,
    checked_filter,
    collides,
    output_columns,
    with_null_checks,
)

__all__ = ["Col", "LogicalPlan", "Predicate", "Query", "QueryError", "col"]

KEY_TYPES = frozenset({"int", "long", "string", "bytes", "enum"})
_SUB_MS = ("-micros", "-nanos")  # logical types in finer units than streamon's ms event time
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Query(QuerySettings):
    """A continuous query under construction; every method returns the query for chaining."""

    def __init__(self, name: str) -> None:
        self.name = check_topic(name, "query name")  # it prefixes the query's internal topics
        self._streams: dict[str, StreamSpec] = {}
        self._windows: dict[str, Window] = {}
        self._predicates: list[Predicate] = []
        self._joins: list[tuple[ColumnRef, ColumnRef]] = []
        self._select: list[tuple[ColumnRef | Expr, str | None]] | None = None
        self._result: tuple[str, int | None] | None = None
        self._ordering: OrderingConfig | None = None
        self._group_by: tuple[ColumnRef, ...] | None = None
        self._aggregates: list[tuple[str, str, ColumnRef | None]] = []
        self._lateness_ms = 0
        self._idle_timeout_ms = 3_000
        self._memory_limit_mb = 512
        self._guarantee = "at_least_once"
        self._operators: list[SyntheticOperator | OperatorNode] = []
        self._scheduling: SchedulingConfig | None = None
        self._stream_op: str | None = None
        self._join_tree: JoinTree | None = None
        self._shedding: ShedConfig | None = None
        self._join_output = "eager"

    @classmethod
    def from_cql(cls, text: str, catalog: str | None = None, name: str = "query") -> Query:
        """The query of a CQL text (docs/cql.md); ``catalog``: CQL text of more CREATE STREAMs.
        Errors are :class:`processors.cql.CqlError` (a QueryError) with line and column."""
        from processors.cql import parse_cql  # the CQL front end builds on this module

        return parse_cql(text, catalog).query(name)

    def stream(
        self,
        name: str,
        *,
        topic: str,
        schema: Mapping[str, Any],
        key: str | None = None,
        timestamp: str | None = None,
        partitions: int | None = None,
    ) -> Query:
        """An input stream: Avro records on ``topic``; ``timestamp`` is its event-time field."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise QueryError(f"stream name {name!r} must be an identifier (letters, digits, _)")
        if name in self._streams:
            raise QueryError(f"stream {name!r} is declared twice")
        check_topic(topic, f"stream {name!r}")
        fields = parse_fields(name, schema)
        spec = StreamSpec(
            name,
            topic,
            copy.deepcopy(dict(schema)),
            fields,
            key,
            timestamp,
            check_partitions(partitions, f"stream {name!r}"),
        )
        for role, fname, allowed in (("key", key, KEY_TYPES), ("timestamp", timestamp, INTEGER)):
            if fname is None:
                continue
            info = spec.field(fname)
            if info is None:
                known = ", ".join(f.name for f in spec.fields)
                raise QueryError(f"stream {name!r}: {role} field {fname!r} not in schema ({known})")
            if info.type not in allowed:
                raise QueryError(
                    f"stream {name!r}: {role} field {fname!r} is {info.type}, "
                    f"it must be one of {', '.join(sorted(allowed))}"
                )
            logical = info.avro.get("logicalType", "") if isinstance(info.avro, Mapping) else ""
            if role == "timestamp" and logical.endswith(_SUB_MS):
                raise QueryError(f"stream {name!r}: timestamp field {fname!r} is {logical}, not ms")
            if role == "timestamp" and info.nullable:
                raise QueryError(
                    f"stream {name!r}: timestamp field {fname!r} is nullable; event time must "
                    "be set on every record"
                )
        self._streams[name] = spec
        return self

    def window(
        self,
        stream: str,
        *,
        rows: int | None = None,
        range_ms: int | None = None,
        partition_by: Iterable[str] | str = (),
    ) -> Query:
        """ROWS n (last n tuples, per key with ``partition_by``) or RANGE t (last t ms)."""
        what = f"window on stream {stream!r}"
        if rows is not None and range_ms is not None:
            raise QueryError(f"{what}: give rows= or range_ms=, not both")
        if rows is None and range_ms is None:
            raise QueryError(f"{what}: give rows= (ROWS n) or range_ms= (RANGE t)")
        kind, size = ("rows", rows) if rows is not None else ("range", range_ms)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise QueryError(f"{what}: {kind} size must be a positive int, got {size!r}")
        by = (partition_by,) if isinstance(partition_by, str) else tuple(partition_by)
        if by and kind == "range":
            raise QueryError(f"{what}: PARTITION BY needs a ROWS window")
        if stream in self._windows:
            raise QueryError(f"stream {stream!r} already has a window: {self._windows[stream]}")
        self._windows[stream] = Window(stream, kind, size, by)  # type: ignore[arg-type]
        return self

    def where(self, *predicates: Predicate) -> Query:
        """Conjunctive filters, each on one stream's column: ``col("r.x") > 1``,
        ``col("r.x").is_null()``; a comparison drops rows where its column is null (SQL)."""
        for p in predicates:
            if not isinstance(p, Predicate):
                raise QueryError(f"where() takes filters such as col('r.x') > 1, not {p!r}")
        self._predicates.extend(predicates)
        return self

    def join(self, left: str, right: str) -> Query:
        """An equi-join predicate ``left = right`` between two streams' columns."""
        self._joins.append((parse_ref(left, "join()"), parse_ref(right, "join()")))
        return self

    def select(self, *columns: str, **renamed: str | Col | ColExpr) -> Query:
        """The result's fields: ``select("r.x", "s.y", new_name="s.z")``, and arithmetic by
        name, ``fahrenheit=col("r.t") * 1.8 + 32`` (:mod:`processors.core.expressions`);
        default: all fields."""
        if self._select is not None:
            raise QueryError("select() is given twice")
        chosen: list[tuple[ColumnRef | Expr, str | None]] = [
            (parse_ref(c, "select()"), None) for c in columns
        ]
        for alias, ref in renamed.items():
            if not _NAME.fullmatch(alias):
                raise QueryError(f"select(): output name {alias!r} is not a valid Avro name")
            if isinstance(ref, ColExpr):
                chosen.append((ref.expr, alias))
            else:
                chosen.append(
                    (ref.ref if isinstance(ref, Col) else parse_ref(ref, "select()"), alias)
                )
        if not chosen:
            raise QueryError("select() needs at least one column")
        self._select = chosen
        return self

    def group_by(self, *columns: str) -> Query:
        """GROUP BY these columns; the result holds one row per group, updated as it changes."""
        if self._group_by is not None:
            raise QueryError("group_by() is given twice")
        self._group_by = tuple(parse_ref(c, "group_by()") for c in columns)
        return self

    def aggregate(self, **aggregates: tuple[str, str | None] | str) -> Query:
        """Aggregates by output name: ``total=("sum", "a.size")``, ``n="count"``.

        Functions: count (of rows without a column, of non-null values with one), sum, avg,
        min, max (nulls ignored, as in SQL). With group_by() they are per group, without it
        over the whole relation.
        """
        for name, spec in aggregates.items():
            func, ref = (spec, None) if isinstance(spec, str) else tuple(spec)
            what = f"aggregate {name}={spec!r}"
            if not _NAME.fullmatch(name):
                raise QueryError(f"{what}: {name!r} is not a valid Avro field name")
            if func not in AGGREGATE_FUNCS:
                known = ", ".join(AGGREGATE_FUNCS)
                raise QueryError(f"{what}: unknown function {func!r} ({known})")
            if ref is None and func != "count":
                raise QueryError(f"{what}: {func} needs a column")
            self._aggregates.append((name, func, None if ref is None else parse_ref(ref, what)))
        return self

    def into(self, topic: str, *, partitions: int | None = None) -> Query:
        """The result topic (one Avro record per message)."""
        if self._result is not None:
            raise QueryError(f"result topic is already {self._result[0]!r}")
        check_topic(topic, "result topic")
        self._result = (topic, check_partitions(partitions, f"result topic {topic!r}"))
        return self

    def emit(self, stream_op: str) -> Query:
        """CQL's relation-to-stream operator: ``"istream"`` writes only the inserts of the
        result relation (a window join's new results, a group's new row), ``"dstream"`` only
        its deletes, as plain records. By default every change is written, a delete with a
        sign header."""
        if stream_op not in STREAM_OPS:
            raise QueryError(f"emit(): {stream_op!r} is not one of {', '.join(STREAM_OPS)}")
        if self._stream_op is not None:
            raise QueryError(f"emit() is given twice ({self._stream_op!r} already)")
        self._stream_op = stream_op
        return self

    def operator(self, name: str, *, cost_us: float, selectivity: float, key: str) -> Query:
        """A synthetic operator stage after the filters: ``cost_us`` of CPU per tuple, and each
        tuple kept on average ``selectivity`` times (above 1, some tuples are repeated) by a hash
        of its integer field ``key`` ("stream.field"). Several operators run in the order given,
        each as its own agent; for scheduling experiments and load tests."""
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise QueryError(f"operator(): name {name!r} must be an identifier")
        if any(o.name == name for o in self._operators):
            raise QueryError(f"operator(): {name!r} is declared twice")
        for what, value in (("cost_us", cost_us), ("selectivity", selectivity)):
            if (
                not isinstance(value, numbers.Real)
                or isinstance(value, bool)
                or not (0 <= float(value) < float("inf"))
            ):
                raise QueryError(f"operator {name}: {what} must be a number >= 0, got {value!r}")
        ref = parse_ref(key, f"operator {name}: key")
        self._operators.append(
            SyntheticOperator(name, float(cost_us), float(selectivity), f"{ref.stream}.{ref.field}")
        )
        return self

    def apply(self, kind: str, name: str, **params: Any) -> Query:
        """A stage of a registered ``kind`` (``processors.physical.kinds.STAGE_KINDS``) after
        the filters of a single-stream query, as its own agent, with ``params`` (plain values)
        for its builder, which checks them when the plan is compiled."""
        if not isinstance(kind, str) or not _NAME.fullmatch(kind):
            raise QueryError(f"apply(): kind {kind!r} must be an identifier")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise QueryError(f"apply(): name {name!r} must be an identifier")
        if any(o.name == name for o in self._operators):
            raise QueryError(f"apply(): {name!r} is declared twice")
        for key, value in params.items():
            if value is not None and not isinstance(value, str | int | float | bool):
                raise QueryError(
                    f"apply() {name}: parameter {key}={value!r} must be a string, number, "
                    "boolean or None"
                )
        self._operators.append(OperatorNode(kind, name, tuple(sorted(params.items()))))
        return self

    def check_expression(self, expr: Expr) -> None:
        """QueryError unless every column of ``expr`` is a declared numeric field."""
        what = f"select() {expr}"
        result_type(expr, lambda ref: self._field(ref, what), what)

    def check_join_tree(self) -> None:
        """QueryError unless the join tree (if any) joins the declared streams, each once."""
        if self._join_tree is not None:
            try:
                check_join_tree(self._join_tree, list(self._streams))
            except JoinTreeError as exc:
                raise QueryError(str(exc)) from None

    def build(self) -> LogicalPlan:
        """The validated plan; the first problem found raises QueryError."""
        if not self._streams:
            raise QueryError(f"query {self.name!r} declares no stream")
        if self._result is None:
            raise QueryError(f"query {self.name!r} has no result topic: call into(topic)")
        topic, partitions = self._result
        for s in self._streams.values():
            if collides(topic, s.topic):
                raise QueryError(
                    f"result topic {topic!r} collides with input topic of stream "
                    f"{s.name!r} ({s.topic!r})"
                )
        windows = self._checked_windows()
        user = [f for f in (self._filter(p) for p in self._predicates) if f is not None]
        joins = self._checked_joins()
        filters = with_null_checks(user, joins, self._field, self._placement)
        streams = tuple(self._streams.values())
        group_by, aggregates = self._checked_aggregates()
        output = self._output()
        schema = output_schema(self.name, streams, output, self._select is not None)
        if aggregates:
            schema = aggregate_schema(
                self.name,
                tuple((ref, self._field(ref, "group_by()")) for ref in group_by),
                tuple(
                    (a, None if a.source is None else self._field(a.source, f"aggregate {a.name}"))
                    for a in aggregates
                ),
            )
        if self._shedding is not None:
            schema = with_shedding_fields(schema, aggregates)
        self._check_ordering(filters)
        operators = self._checked_operators(windows, joins, aggregates)
        self.check_join_tree()
        return LogicalPlan(
            name=self.name,
            streams=streams,
            windows=windows,
            filters=filters,
            joins=joins,
            output=output,
            output_schema=schema,
            result_topic=topic,
            result_partitions=partitions,
            projected=self._select is not None,
            join_key=join_key(streams, joins),
            ordering=self._ordering,
            group_by=group_by,
            aggregates=aggregates,
            lateness_ms=self._lateness_ms,
            idle_timeout_ms=self._idle_timeout_ms,
            memory_limit_mb=self._memory_limit_mb,
            processing_guarantee=self._guarantee,
            operators=operators,
            scheduling=self._scheduling,
            stream_op=self._stream_op,
            join_tree=self._join_tree,
            shedding=self._shedding,
            join_output=self._join_output,
        )

    def _checked_operators(
        self, windows: Mapping[str, Window], joins: Any, aggregates: Any
    ) -> tuple[SyntheticOperator | OperatorNode, ...]:
        """Operators run on a single stream between its filters and the sink."""
        if not self._operators:
            return ()
        if len(self._streams) > 1 or windows or joins or aggregates or self._select is not None:
            raise QueryError(
                "operator(): synthetic operators need a single-stream query without windows, "
                "joins, select() or aggregates"
                if any(isinstance(o, SyntheticOperator) for o in self._operators)
                else "apply(): operators need a single-stream query without windows, joins, "
                "select() or aggregates"
            )
        checked: list[SyntheticOperator | OperatorNode] = []
        for op in self._operators:
            if isinstance(op, OperatorNode):
                checked.append(op)
                continue
            ref = parse_ref(op.key, f"operator {op.name}: key")
            info = self._field(ref, f"operator {op.name}: key")
            if info.type not in INTEGER or info.nullable:
                raise QueryError(
                    f"operator {op.name}: key {op.key} must be an int or long field (not "
                    f"nullable), not {'nullable ' if info.nullable else ''}{info.type}"
                )
            checked.append(SyntheticOperator(op.name, op.cost_us, op.selectivity, ref.field))
        return tuple(checked)

    def _checked_aggregates(self) -> tuple[tuple[ColumnRef, ...], tuple[AggregateSpec, ...]]:
        return check_aggregates(
            self._group_by or (), self._aggregates, self._select is not None, self._field
        )

    def _field(self, ref: ColumnRef, what: str, passed_through: bool = False) -> FieldInfo:
        spec = self._streams.get(ref.stream)
        if spec is None:
            known = ", ".join(self._streams)
            raise QueryError(f"{what}: unknown stream {ref.stream!r} in {ref} (streams: {known})")
        info = spec.field(ref.field)
        if info is None:
            known = ", ".join(f.name for f in spec.fields)
            raise QueryError(f"{what}: stream {ref.stream!r} has no field {ref.field!r} ({known})")
        if info.type in ("array", "map", "fixed") and not passed_through:
            raise QueryError(
                f"{what}: field {ref} is a(n) {info.type}; arrays, maps and fixed can only be "
                "passed through (selected, or kept by a query without select())"
            )
        return info

    def _checked_windows(self) -> dict[str, Window]:
        for w in self._windows.values():
            spec = self._streams.get(w.stream)
            if spec is None:
                raise QueryError(f"window {w}: unknown stream {w.stream!r}")
            if w.kind == "range" and spec.timestamp is None:
                raise QueryError(
                    f"window {w}: a RANGE window needs event time, but stream {w.stream!r} "
                    "declares no timestamp field (stream(..., timestamp='field'))"
                )
            for f in w.partition_by:
                info = self._field(ColumnRef(w.stream, f), f"window {w}: PARTITION BY")
                if info.nullable:
                    raise QueryError(
                        f"window {w}: PARTITION BY a nullable field ({w.stream}.{f}) is not "
                        "yet supported"
                    )
        return dict(self._windows)

    def _placement(self, stream: str) -> str:
        """Where a stream's filters run: above a ROWS window (which does not commute with
        selections), else below the window."""
        window = self._windows.get(stream)
        return "above_window" if window and not window.commutes_with_selection else "below_window"

    def _filter(self, pred: Predicate) -> Filter | None:
        info = self._field(pred.ref, f"filter {pred}")
        return checked_filter(pred, info, self._placement(pred.ref.stream))

    def _check_ordering(self, filters: tuple[Filter, ...]) -> None:
        config = self._ordering
        if config is None:
            return
        if not filters and len(self._streams) < 2:
            raise QueryError(
                f"adapt(): query {self.name!r} has no filters or joins to order; add where(...) "
                "or drop adapt()"
            )
        if config.costs is not None:
            check_costs(config.costs, filters)

    def _checked_joins(self) -> tuple[JoinPredicate, ...]:
        return check_joins(self.name, list(self._streams), self._joins, self._field)

    def _output(self) -> tuple[OutputColumn, ...]:
        """Result fields; a field name taken by several streams becomes ``stream_field``."""
        chosen = self._select or [
            (ColumnRef(s.name, f.name), None) for s in self._streams.values() for f in s.fields
        ]
        derived = self._select is not None or len(self._streams) > 1
        return output_columns(
            chosen, lambda ref, what: self._field(ref, what, passed_through=True), derived
        )
