"""Avro schemas in and out of a query: input fields read from a schema, result schemas derived.

The query builder calls these while it validates; the plan stores only their results, so that
fastavro (which checks every schema here) is needed to build a plan, not to read one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import fastavro

from processors.core.plan import (
    PRIMITIVES,
    AggregateSpec,
    ColumnRef,
    FieldInfo,
    OutputColumn,
    QueryError,
    StreamSpec,
)


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
    schema = _result_record(name, fields)
    try:
        fastavro.parse_schema(copy.deepcopy(schema))
    except Exception as exc:  # fastavro raises several types for bad schemas
        raise QueryError(f"result schema of query {name!r} is invalid: {exc}") from exc
    return schema


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


def aggregate_schema(
    name: str,
    group_by: tuple[tuple[ColumnRef, FieldInfo], ...],
    aggregates: tuple[tuple[AggregateSpec, FieldInfo | None], ...],
) -> dict[str, Any]:
    """The result record of a GROUP BY: the grouping columns, then one field per aggregate.

    Each column comes with its field (None for count(*)), as the builder has already looked
    them up and checked them.
    """
    fields = [{"name": ref.field, "type": copy.deepcopy(info.avro)} for ref, info in group_by]
    fields += [{"name": a.name, "type": aggregate_avro(a.func, info)} for a, info in aggregates]
    return _result_record(name, fields)
