"""``CREATE STREAM`` declarations: an input topic, its Avro schema and its roles.

    CREATE STREAM readings (sensor_id BIGINT NOT NULL, ts BIGINT NOT NULL, site STRING)
      WITH (topic = 'readings', key = 'sensor_id', timestamp = 'ts', partitions = 4);
    CREATE STREAM readings WITH (schema = 'reading', topic = 'readings', timestamp = 'ts');

A column list becomes an Avro record named after the stream (or ``record = 'ns.Name'``), one
field per column: nullable (a union with null, default null) unless NOT NULL, as in SQL and
ksqlDB; the producers' writer schema must be the same. ``schema = 'name'`` takes
``schemas/name.avsc`` (or a path) instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from processors.cql.errors import CqlError, at_node
from topics.avro import SchemaError, load_schema

#: SQL column types and the Avro type each becomes
AVRO_TYPES = {
    "BIGINT": "long", "INT": "int", "SMALLINT": "int", "TINYINT": "int", "DOUBLE": "double",
    "FLOAT": "float", "BOOLEAN": "boolean", "TEXT": "string", "VARCHAR": "string",
    "CHAR": "string", "NVARCHAR": "string", "NCHAR": "string", "BINARY": "bytes",
    "VARBINARY": "bytes",
}  # fmt: skip
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
OPTIONS = ("topic", "key", "timestamp", "partitions", "schema", "record")


@dataclass(frozen=True)
class StreamDecl:
    """A declared stream: what ``Query.stream`` takes."""

    name: str
    topic: str
    schema: dict[str, Any]
    key: str | None = None
    timestamp: str | None = None
    partitions: int | None = None


def _options(create: exp.Create) -> dict[str, tuple[Any, exp.Expr]]:
    props = create.args.get("properties")
    found: dict[str, tuple[Any, exp.Expr]] = {}
    for prop in props.expressions if props is not None else []:
        if not isinstance(prop, exp.Property):
            raise at_node(prop, f"expected option = value, one of {', '.join(OPTIONS)}")
        name = prop.name.lower()
        value = prop.args.get("value")
        if name not in OPTIONS:
            raise at_node(prop, f"unknown option {name!r}; expected {', '.join(OPTIONS)}")
        if not isinstance(value, exp.Literal):
            raise at_node(prop, f"option {name}: expected a quoted name or a number")
        if name == "partitions":
            if value.is_string or not value.this.isdigit() or int(value.this) <= 0:
                raise at_node(prop, "option partitions: expected a positive whole number")
            found[name] = (int(value.this), prop)
        else:
            if not value.is_string:
                raise at_node(prop, f"option {name}: expected a quoted name, e.g. {name} = 'x'")
            found[name] = (value.this, prop)
    return found


def _column(col: exp.ColumnDef, stream: str) -> dict[str, Any]:
    kind = col.args.get("kind")
    if kind is None:
        raise at_node(col, f"column {col.name!r} needs a type ({', '.join(AVRO_TYPES)})")
    sql_type = kind.this.name if hasattr(kind.this, "name") else str(kind.this)
    avro = AVRO_TYPES.get(sql_type.upper())
    if avro is None:
        raise at_node(col, f"column {col.name!r}: type {kind.sql()} is not supported; "
                      f"expected one of {', '.join(AVRO_TYPES)}")  # fmt: skip
    not_null = any(
        isinstance(c.args.get("kind"), exp.NotNullColumnConstraint)
        for c in col.args.get("constraints") or []
    )
    if not_null:
        return {"name": col.name, "type": avro}
    return {"name": col.name, "type": ["null", avro], "default": None}


def _record_name(option: tuple[Any, exp.Expr] | None, stream: str) -> dict[str, str]:
    """The Avro record's name (and namespace): the stream's, or ``record = 'ns.Name'``, which
    the producers' schema must have (the single-object fingerprint covers the full name)."""
    if option is None:
        return {"name": stream}
    full, node = option
    namespace, _, name = str(full).rpartition(".")
    parts = [*namespace.split("."), name] if namespace else [name]
    if not all(_AVRO_NAME.fullmatch(p) for p in parts):
        raise at_node(node, f"record {full!r} is not an Avro name (letters, digits, _ and dots)")
    return {"name": name, "namespace": namespace} if namespace else {"name": name}


def stream_decl(create: exp.Create) -> StreamDecl:
    """The declaration of one parsed ``CREATE STREAM``."""
    target = create.this
    table = target.this if isinstance(target, exp.Schema) else target
    name = table.name
    options = _options(create)
    if "topic" not in options:
        raise at_node(table, f"stream {name}: WITH (topic = '...') is required")
    columns = target.expressions if isinstance(target, exp.Schema) else []
    if columns and "schema" in options:
        raise at_node(options["schema"][1], "give columns or schema = '...', not both")
    if "record" in options and "schema" in options:
        raise at_node(options["record"][1], "record names a column list's schema, not a file's")
    if "schema" in options:
        try:
            schema = load_schema(options["schema"][0])
        except SchemaError as exc:
            raise at_node(options["schema"][1], str(exc)) from None
    elif columns:
        fields = [_column(c, name) for c in columns if isinstance(c, exp.ColumnDef)]
        schema = {"type": "record", **_record_name(options.get("record"), name), "fields": fields}
    else:
        raise at_node(table, f"stream {name}: give its columns (name TYPE, ...) or schema = '...'")
    ts = options.get("timestamp")
    if ts is not None and columns:
        field = next((f for f in schema["fields"] if f["name"] == ts[0]), None)
        if field is not None and isinstance(field["type"], list):
            raise at_node(ts[1], f"timestamp column {ts[0]!r} must be declared NOT NULL: event "
                          "time must be set on every record")  # fmt: skip
    return StreamDecl(
        name,
        options["topic"][0],
        schema,
        options.get("key", (None,))[0],
        None if ts is None else ts[0],
        options.get("partitions", (None,))[0],
    )


def check_unique(decls: list[StreamDecl], where: list[exp.Create]) -> dict[str, StreamDecl]:
    out: dict[str, StreamDecl] = {}
    for decl, node in zip(decls, where, strict=True):
        if decl.name in out:
            raise at_node(node.this, f"stream {decl.name} is declared twice")
        out[decl.name] = decl
    return out


__all__ = ["CqlError", "StreamDecl", "check_unique", "stream_decl"]
