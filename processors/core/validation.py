"""The query builder's checks of names, constants, settings and the join graph.

Each failure is a :class:`~processors.core.plan.QueryError` naming the stream, field, topic or
setting at fault, because the user reads it, not a developer.
"""

from __future__ import annotations

import numbers
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from processors.core.columns import Predicate
from processors.core.equivalence import Components
from processors.core.expressions import Expr, refs, result_type
from processors.core.plan import (
    AggregateSpec,
    ColumnRef,
    FieldInfo,
    Filter,
    JoinPredicate,
    OutputColumn,
    QueryError,
    null_check,
)

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_EQUALITY_ONLY = frozenset({"==", "!=", "in"})
NULL_OPS = frozenset({"is_null", "is_not_null"})
# adapt() settings checked for type here, so that a wrong one is named (OrderingConfig checks
# ranges): setting -> (int or real, whether None is allowed)
_ORDERING_TYPES = {
    "profile_probability": ("real", True),
    "window_tuples": ("int", True),
    "window_ms": ("int", True),
    "alpha": ("real", False),
    "min_profile_tuples": ("int", False),
    "cost_samples": ("int", False),
    "seed": ("int", False),
    "cache_memory_mb": ("real", True),
    "cache_interval": ("int", False),
    "cache_window": ("int", False),
    "cache_profile_probability": ("real", True),
}


def check_topic(topic: object, what: str) -> str:
    """``topic`` if Kafka accepts it as a topic name, else a QueryError naming ``what``."""
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise QueryError(
            f"{what}: invalid Kafka topic name {topic!r} "
            "(1 to 249 characters of a-z A-Z 0-9 . _ -, and not '.' or '..')"
        )
    return topic


def check_partitions(partitions: object, what: str) -> int | None:
    """``partitions`` if it is None (whatever the topic has) or an int >= 1."""
    if partitions is None:
        return None
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise QueryError(f"{what}: partitions must be an int >= 1, got {partitions!r}")
    return partitions


def collides(a: str, b: str) -> bool:
    """Kafka refuses topics that differ only in '.' versus '_' (their metric names clash)."""
    return a.replace(".", "_") == b.replace(".", "_")


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


def checked_filter(pred: Predicate, info: FieldInfo, placement: str) -> Filter | None:
    """The plan filter of ``pred`` on field ``info``; None for an IS NOT NULL that is always
    true (the field is never null)."""
    if pred.op in NULL_OPS:
        if info.nullable:
            return null_check(pred.ref.stream, pred.ref.field, pred.op == "is_null", placement)  # type: ignore[arg-type]
        if pred.op == "is_null":
            raise QueryError(
                f"filter {pred}: field {pred.ref} is not nullable, so nothing would pass"
            )
        return None
    values = check_constants(pred, info)
    return Filter(pred.ref.stream, pred.ref.field, pred.op, values, placement)  # type: ignore[arg-type]


def with_null_checks(
    filters: list[Filter],
    joins: tuple[JoinPredicate, ...],
    field: Callable[[ColumnRef, str], FieldInfo],
    placement: Callable[[str], str],
) -> tuple[Filter, ...]:
    """The filters plus an implicit ``IS NOT NULL`` for every nullable column a comparison or
    a join reads (SQL: a comparison with null is unknown, and null equals nothing), with the
    ``placement`` of that stream's filters; each check once, after the user's filters."""
    refs = [ColumnRef(f.stream, f.column) for f in filters if not f.is_null_check]
    refs += [ref for j in joins for ref in (j.left, j.right)]
    out = list(filters)
    for ref in dict.fromkeys(refs):
        if field(ref, "filter").nullable:
            check = null_check(ref.stream, ref.field, False, placement(ref.stream))  # type: ignore[arg-type]
            if check not in out:
                out.append(check)
    return tuple(out)


def check_costs(costs: tuple[float, ...], filters: tuple[Filter, ...]) -> None:
    """``adapt(costs=...)`` gives one cost per filter of each stream that has filters."""
    for stream in dict.fromkeys(f.stream for f in filters):
        n = sum(f.stream == stream for f in filters)
        if len(costs) == n:
            continue
        implicit = sum(f.stream == stream and f.is_null_check for f in filters)
        extra = (
            f", then its {implicit} IS NULL checks, implicit ones included: nullable columns "
            "in comparisons and joins"
            if implicit
            else ""
        )
        raise QueryError(
            f"adapt(): costs gives {len(costs)} costs but stream {stream!r} has {n} filters "
            f"(one cost per filter, in where() order{extra})"
        )


def check_ordering_type(name: str, value: Any) -> None:
    """A QueryError naming the adapt() setting if ``value`` has the wrong type."""
    if name == "costs":
        if value is None:
            return
        if (
            isinstance(value, str | bytes | Mapping)
            or not isinstance(value, Iterable)
            or not all(isinstance(c, numbers.Real) and not isinstance(c, bool) for c in value)
        ):
            raise QueryError(f"adapt(): costs must be a sequence of numbers, got {value!r}")
        return
    if name == "caching" and not (value is None or isinstance(value, bool)):
        raise QueryError(f"adapt(): caching must be True or False, got {value!r}")
    if name == "cache_metric" and not isinstance(value, str):
        raise QueryError(f"adapt(): cache_metric must be 'time' or 'tuples', got {value!r}")
    if name not in _ORDERING_TYPES:
        return  # unknown settings: OrderingConfig.from_mapping names them
    kind, nullable = _ORDERING_TYPES[name]
    if value is None and nullable:
        return
    ok = isinstance(value, numbers.Integral if kind == "int" else numbers.Real)
    if not ok or isinstance(value, bool):
        what = "an int" if kind == "int" else "a number"
        none = " or None" if nullable else ""
        raise QueryError(
            f"adapt(): {name} must be {what}{none}, got {value!r} ({type(value).__name__})"
        )


def check_joins(
    query: str,
    streams: list[str],
    pairs: Iterable[tuple[ColumnRef, ColumnRef]],
    field: Callable[[ColumnRef, str], FieldInfo],
) -> tuple[JoinPredicate, ...]:
    """The join predicates of ``pairs`` if they connect all ``streams`` by equalities of
    comparable, non-floating columns; ``field`` looks a column up (and names a missing one)."""
    joins: list[JoinPredicate] = []
    for left, right in pairs:
        what = f"join {left} = {right}"
        li, ri = field(left, what), field(right, what)
        if left.stream == right.stream:
            how = "on the same field" if left.field == right.field else "on two of its fields"
            raise QueryError(
                f"{what}: joins stream {left.stream!r} with itself {how}; a join needs two "
                "streams (for a self-join, declare the stream twice under two names)"
            )
        if li.family != ri.family:
            raise QueryError(f"{what}: incompatible types {li.type} and {ri.type}")
        if li.family == "floating":
            raise QueryError(
                f"{what}: joins on floating-point fields are not supported (equality of "
                "floats is rarely meant); join on integer, string, bytes or enum fields"
            )
        if any({j.left, j.right} == {left, right} for j in joins):
            raise QueryError(f"{what}: declared twice")
        joins.append(JoinPredicate(left, right))
    if len(streams) > 1 and not joins:
        raise QueryError(
            f"query {query!r} reads streams {', '.join(streams)} but declares no join "
            "predicate (cross products are not supported): add join('a.x', 'b.y')"
        )
    parts = Components()
    for j in joins:
        parts.union(j.left.stream, j.right.stream)
    groups = parts.groups(streams)
    if len(groups) > 1:
        listed = " | ".join("{" + ", ".join(g) + "}" for g in groups)
        raise QueryError(f"streams not connected by joins: {listed}")
    return tuple(joins)


def _expression_column(
    name: str, expr: Expr, field: Callable[[ColumnRef, str], FieldInfo], taken: dict[str, object]
) -> OutputColumn:
    what = f"select() {name}={expr}"
    used = refs(expr)
    if not used:
        raise QueryError(f"{what}: an expression of constants only is not a result field")
    if name in taken:
        raise QueryError(f"output field {name!r} would come from both {taken[name]} and {expr}")
    taken[name] = expr
    kind, _ = result_type(expr, lambda r: field(r, what), what)
    return OutputColumn(name, used[0], kind, expr)


def output_columns(
    chosen: Iterable[tuple[ColumnRef | Expr, str | None]],
    field: Callable[[ColumnRef, str], FieldInfo],
    derived: bool,
) -> tuple[OutputColumn, ...]:
    """The result fields of ``chosen`` columns (with their select() names, if any).

    Where the result schema is derived (select(), or several streams) a nested field's default
    name has underscores for dots, ``loc_lat`` (an Avro name has no dots); a name taken by
    several streams becomes ``stream_field``. Otherwise the result is the input record, whose
    columns keep their dotted names for the sink's encoder.
    """
    chosen = list(chosen)

    def base(ref: ColumnRef) -> str:
        return ref.field.replace(".", "_") if derived else ref.field

    clashes = Counter(base(ref) for ref, alias in chosen if alias is None)  # type: ignore[arg-type]
    taken: dict[str, object] = {}
    out: list[OutputColumn] = []
    for ref, alias in chosen:
        if not isinstance(ref, ColumnRef):  # arithmetic, always named
            assert alias is not None
            out.append(_expression_column(alias, ref, field, taken))
            continue
        info = field(ref, "select()")
        name = alias or base(ref)
        if alias is None and clashes[name] > 1:
            name = f"{ref.stream}_{name}"
        if name in taken:
            raise QueryError(
                f"output field {name!r} would come from both {taken[name]} and {ref}: "
                f"name one with select(..., other_name='{ref}')"
            )
        taken[name] = ref
        out.append(OutputColumn(name, ref, info.type))
    return tuple(out)


def check_aggregates(
    group_by: tuple[ColumnRef, ...],
    aggregates: Iterable[tuple[str, str, ColumnRef | None]],
    selected: bool,
    field: Callable[[ColumnRef, str], FieldInfo],
) -> tuple[tuple[ColumnRef, ...], tuple[AggregateSpec, ...]]:
    """The GROUP BY columns and the aggregates (name, function, column) of a query, checked:
    functions that need numbers get numbers, names do not clash, select() is not mixed in."""
    aggregates = list(aggregates)
    if group_by and not aggregates:
        raise QueryError("group_by() needs at least one aggregate(): e.g. n='count'")
    if aggregates and selected:
        raise QueryError("select() and aggregate() do not mix: the result is the groups")
    for ref in group_by:
        field(ref, "group_by()")
    names = [str(r.field) for r in group_by]
    specs = []
    for name, func, ref in aggregates:
        if ref is not None:
            info = field(ref, f"aggregate {name}")
            if func in ("sum", "avg") and info.family not in ("integer", "floating"):
                raise QueryError(f"aggregate {name}: {func} needs a number, {ref} is {info.type}")
            if func in ("min", "max") and info.family not in ("integer", "floating"):
                raise QueryError(
                    f"aggregate {name}: {func} of {info.type} column {ref} is not supported "
                    "(numbers only)"
                )
        if name in names:
            raise QueryError(f"aggregate {name}: the result already has a field {name!r}")
        names.append(name)
        specs.append(AggregateSpec(func, ref, name))  # type: ignore[arg-type]
    return group_by, tuple(specs)
