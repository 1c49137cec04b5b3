"""Avro schemas in and out of a query: input fields read from a schema, result schemas derived.

The query builder calls these while it validates; the plan stores only their results, so that
fastavro (which checks every schema here) is needed to build a plan, not to read one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import fastavro

from processors.core.expressions import result_type
from processors.core.plan import (
    PRIMITIVES,
    AggregateSpec,
    ColumnRef,
    FieldInfo,
    OutputColumn,
    QueryError,
    StreamSpec,
)

NESTED_SEP = "."  # as topics.avro_layout.NESTED_SEP: field ``lat`` of record ``loc`` is ``loc.lat``


def parse_fields(stream: str, schema: object) -> tuple[FieldInfo, ...]:
    """The flat fields of an Avro record schema; anything streamon cannot hold in a column fails.

    A nested (non-nullable) record becomes its leaves, named and ordered as the bulk codec's
    columns (:func:`topics.avro_layout.flat_fields`): depth first, ``loc.lat`` for field ``lat``
    of record field ``loc``.
    """
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        raise QueryError(f"stream {stream!r}: schema must be an Avro record schema (type 'record')")
    try:
        fastavro.parse_schema(copy.deepcopy(dict(schema)))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise QueryError(
            f"stream {stream!r}: invalid Avro schema ({type(exc).__name__}: {exc})"
        ) from exc
    named: dict[str, Any] = {}  # named types defined by earlier fields, which later ones may name
    _remember(named, schema, None)
    return tuple(_record_fields(stream, schema, "", named, schema.get("namespace"), ()))


def _remember(named: dict[str, Any], avro: Mapping[str, Any], namespace: str | None) -> None:
    """Record (enum, record) ``avro`` under its short and full names."""
    ns = avro.get("namespace", namespace)
    name = str(avro["name"])
    named[name] = named[f"{ns}.{name}" if ns and "." not in name else name] = avro
    named.setdefault(name.rsplit(".", 1)[-1], avro)


def _record_fields(
    stream: str,
    record: Mapping[str, Any],
    prefix: str,
    named: dict[str, Any],
    namespace: str | None,
    open_records: tuple[str, ...],
) -> list[FieldInfo]:
    """The leaves of ``record``, names prefixed by ``prefix`` (``loc.`` inside field ``loc``)."""
    fields: list[FieldInfo] = []
    for f in record["fields"]:
        name, avro = prefix + f["name"], f["type"]
        branch = _non_null_branch(avro)
        resolved = named.get(branch, branch) if isinstance(branch, str) else branch
        if _type_name(resolved) == "record":
            if branch is not avro:
                raise QueryError(
                    f"stream {stream!r} field {name!r}: a nullable record is not supported; "
                    "make the record non-nullable, or its fields nullable one by one"
                )
            full = str(resolved["name"])
            if full in open_records:
                raise QueryError(
                    f"stream {stream!r} field {name!r}: record {full!r} contains itself"
                )
            ns = resolved.get("namespace", namespace)
            _remember(named, resolved, namespace)
            fields += _record_fields(
                stream, resolved, name + NESTED_SEP, named, ns, (*open_records, full)
            )
            continue
        info = _flat_field(name, branch, named, namespace)
        if info is None:
            kind = "a union" if isinstance(avro, list) else repr(_type_name(avro))
            if isinstance(avro, list) and branch is not None:
                kind = f"a nullable {_type_name(branch)}"
            raise QueryError(
                f"stream {stream!r} field {name!r}: type {kind} is not supported; fields must be "
                "boolean, int, long, float, double, string, bytes or enum, a union of null "
                "and one of those, a (non-nullable) record of such fields, or an array, map or "
                "fixed (passed through only); no other union"
            )
        fields.append(info if branch is avro else replace(info, nullable=True))
    return fields


def _type_name(avro: Any) -> Any:
    return avro.get("type") if isinstance(avro, Mapping) else avro


def _non_null_branch(avro: Any) -> Any:
    """The other branch of a ``["null", T]`` or ``[T, "null"]`` union; ``avro`` itself if it
    is no union; None for any other union."""
    if not isinstance(avro, list):
        return avro
    if len(avro) == 2 and avro.count("null") == 1:
        return avro[1] if avro[0] == "null" else avro[0]
    return None


def _flat_field(
    name: str, avro: Any, named: dict[str, Any], namespace: str | None
) -> FieldInfo | None:
    """The field of one (non-union, non-record) Avro type streamon holds in a column, or None;
    an enum defined here is remembered in ``named`` for later fields that name it."""
    if avro is None:
        return None
    avro = copy.deepcopy(named.get(avro, avro) if isinstance(avro, str) else avro)
    base = avro.get("type") if isinstance(avro, Mapping) else avro
    if isinstance(base, str) and base in PRIMITIVES:
        return FieldInfo(name, base, avro)
    if base == "enum":
        _remember(named, avro, namespace)
        return FieldInfo(name, "enum", avro, tuple(avro["symbols"]))
    if base in ("array", "map"):  # passed through as its Avro encoding, never looked into
        return FieldInfo(name, base, avro)
    if base == "fixed":  # its bytes, passed through (a named type later fields may name)
        _remember(named, avro, namespace)
        return FieldInfo(name, "fixed", avro)
    return None


def nullable_avro(avro: Any) -> list[Any]:
    """The result type of a field that may be null: null first, so that null is its default."""
    return ["null", avro]


def _result_record(query: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    """The result record named after the query (an Avro name: no dots, no leading digit)."""
    record = re.sub(r"\W", "_", query)
    return {
        "type": "record",
        "name": record if not record[0].isdigit() else f"_{record}",
        "namespace": "streamon.results",
        "fields": fields,
    }


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
        if c.expr is not None:
            fields.append(_expression_field(c, by_name))
            continue
        info = by_name[c.source.stream].field(c.source.field)
        assert info is not None
        avro = copy.deepcopy(info.avro)
        if info.type in ("enum", "fixed"):  # named types: defined once in the result
            ns = avro.get("namespace")
            full = f"{ns}.{avro['name']}" if ns else avro["name"]
            if full not in enums:
                enums[full] = (avro, c.source)
            elif enums[full][0] == avro:
                avro = full
            else:
                raise QueryError(
                    f"output field {c.name!r}: {info.type} type {full!r} of {c.source} differs "
                    f"from the one of {enums[full][1]}; the result record can hold only one"
                )
        if info.nullable:
            fields.append({"name": c.name, "type": nullable_avro(avro), "default": None})
        else:
            fields.append({"name": c.name, "type": avro})
    schema = _result_record(name, fields)
    try:
        fastavro.parse_schema(copy.deepcopy(schema))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise QueryError(f"result schema of query {name!r} is invalid: {exc}") from exc
    return schema


def _expression_field(c: OutputColumn, by_name: Mapping[str, StreamSpec]) -> dict[str, Any]:
    """An arithmetic field: long or double, nullable where a null or a zero divisor can make it
    null (processors.core.expressions)."""
    assert c.expr is not None

    def field(ref: ColumnRef) -> FieldInfo:
        info = by_name[ref.stream].field(ref.field)
        assert info is not None
        return info

    kind, nullable = result_type(c.expr, field, f"output field {c.name!r}")
    if nullable:
        return {"name": c.name, "type": nullable_avro(kind), "default": None}
    return {"name": c.name, "type": kind}


def aggregate_avro(func: str, info: FieldInfo | None) -> Any:
    """The Avro type of an aggregate's result: null where a nullable column has no value in
    the group (sum, avg, min and max ignore nulls, as in SQL; count never is null)."""
    if func == "count":
        return "long"
    assert info is not None
    if func == "avg":
        avro: Any = "double"
    elif func == "sum":
        avro = "long" if info.family == "integer" else "double"
    else:
        avro = copy.deepcopy(info.avro)  # min, max: the column's own type
    return nullable_avro(avro) if info.nullable else avro


def _field(name: str, avro: Any) -> dict[str, Any]:
    """A result field; one that may be null defaults to null."""
    if isinstance(avro, list):
        return {"name": name, "type": avro, "default": None}
    return {"name": name, "type": avro}


def aggregate_schema(
    name: str,
    group_by: tuple[tuple[ColumnRef, FieldInfo], ...],
    aggregates: tuple[tuple[AggregateSpec, FieldInfo | None], ...],
) -> dict[str, Any]:
    """The result record of a GROUP BY: the grouping columns, then one field per aggregate.

    Each column comes with its field (None for count(*)), as the builder has already looked
    them up and checked them.
    """
    fields = [
        _field(ref.field, nullable_avro(info.avro) if info.nullable else copy.deepcopy(info.avro))
        for ref, info in group_by
    ]
    fields += [_field(a.name, aggregate_avro(a.func, info)) for a, info in aggregates]
    if not any(NESTED_SEP in f["name"] for f in fields):
        return _result_record(name, fields)
    schema = _result_record(name, [])
    schema["fields"] = _nested(fields, schema["name"])
    try:
        fastavro.parse_schema(copy.deepcopy(schema))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise QueryError(f"result schema of query {name!r} is invalid: {exc}") from exc
    return schema


def _nested(fields: list[dict[str, Any]], record: str) -> list[dict[str, Any]]:
    """Fields with dotted names (a GROUP BY on a nested field) as nested records again, so
    that the sink's encoder reads the grouping column ``loc.lat`` as field ``lat`` of ``loc``.
    """
    out: list[dict[str, Any]] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for f in fields:
        head, dot, rest = f["name"].partition(NESTED_SEP)
        if not dot:
            if f["name"] in groups or any(g["name"] == f["name"] for g in out):
                raise QueryError(f"result field {f['name']!r} is given twice")
            out.append(f)
            continue
        if head not in groups:
            if any(g["name"] == head for g in out):
                raise QueryError(f"result field {head!r} is given twice")
            groups[head] = []
            out.append({"name": head, "type": {"type": "record", "name": f"{record}_{head}"}})
        groups[head].append({**f, "name": rest})
    for f in out:
        if isinstance(f["type"], dict) and f["name"] in groups and "fields" not in f["type"]:
            f["type"]["fields"] = _nested(groups[f["name"]], f["type"]["name"])
    return out


#: the result field of a query that sheds load: the share of the exact result the record was
#: produced under (the product of its inputs' drop-box shares; 1.0 when nothing is dropped)
KEPT_FIELD = "_kept"
#: aggregates that get a scaled estimate beside the sampled value (Horvitz-Thompson)
ESTIMATED = ("count", "sum")


def estimate_field(aggregate: str) -> str:
    """The result field of an aggregate's scaled estimate: ``n`` -> ``n_est``."""
    return f"{aggregate}_est"


def with_shedding_fields(schema: dict[str, Any], aggregates: tuple[AggregateSpec, ...]) -> dict:
    """``schema`` with the fields a query that sheds load adds (docs/shedding.md): ``_kept``,
    and a double ``<name>_est`` after each count and sum (nullable where the sum is)."""
    out = copy.deepcopy(schema)
    types = {f["name"]: f["type"] for f in out["fields"]}
    added = [{"name": KEPT_FIELD, "type": "double", "default": 1.0}]
    for a in aggregates:
        if a.func in ESTIMATED:
            nullable = isinstance(types.get(a.name), list)
            kind: Any = nullable_avro("double") if nullable else "double"
            added.append({"name": estimate_field(a.name), "type": kind,
                          **({"default": None} if nullable else {})})  # fmt: skip
    taken = sorted(set(types) & {f["name"] for f in added})
    if taken:
        raise QueryError(f"shed(): the result already has fields {taken}, which a query that "
                         "sheds load adds (the kept share and the scaled estimates)")  # fmt: skip
    out["fields"] = [*out["fields"], *added]
    return out
