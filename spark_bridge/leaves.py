"""How each Avro leaf of a reader schema appears in Spark: Arrow type, logical conversion, nesting.

Shared by the driver (:mod:`spark_bridge.schema`, which needs pyspark) and the executors
(:mod:`spark_bridge.arrow_decode`, which does not). Mapping, decided once for both:

* nested records become Spark structs (``df.select("loc.lat")`` works without backticks);
* ``fixed`` is binary; an enum is its symbol (a string);
* ``date`` is a DateType, ``timestamp-millis``/``timestamp-micros`` a TimestampType (UTC);
* ``decimal`` (bytes or fixed) is a DecimalType(precision, scale) when precision <= 38, else binary;
* ``uuid`` stays a string, ``time-millis``/``time-micros`` stay int/bigint (Spark has no time type
  in every version we support).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from topics.avro import FlatField, SchemaError, flat_fields

MAX_DECIMAL_PRECISION = 38  # Spark's (and Arrow decimal128's) limit
_BASE = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
    "fixed": pa.binary(),
    "enum": pa.string(),
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Leaf:
    """One flat field and the Arrow type its Spark column has."""

    field: FlatField
    arrow: pa.DataType
    precision: int = 0  # decimal
    scale: int = 0

    @property
    def top(self) -> str:
        """The top-level column this leaf belongs to (itself, or the outer struct)."""
        return self.field.path[0][0] if self.field.path else self.field.name


def _decimals(schema: dict) -> dict[str, tuple[int, int]]:
    """(precision, scale) of every decimal leaf by dotted name (FlatField keeps only the name
    of the logical type)."""
    named: dict[str, Any] = {}
    out: dict[str, tuple[int, int]] = {}

    def lookup(t: Any) -> Any:
        if isinstance(t, str):
            return named.get(t, named.get(t.rsplit(".", 1)[-1], t))
        return t

    def walk(t: Any, name: str) -> None:
        t = lookup(t)
        if isinstance(t, list):
            rest = [b for b in t if b != "null"]
            if len(rest) == 1:
                walk(rest[0], name)
            return
        if not isinstance(t, dict):
            return
        if "name" in t:
            named[str(t["name"])] = named[str(t["name"]).rsplit(".", 1)[-1]] = t
        if t.get("type") == "record":
            for f in t.get("fields", ()):
                walk(f["type"], f"{name}.{f['name']}" if name else f["name"])
        elif t.get("logicalType") == "decimal" and isinstance(t.get("precision"), int):
            out[name] = (int(t["precision"]), int(t.get("scale", 0)))

    walk(schema, "")
    return out


def leaves(reader_schema: dict) -> list[Leaf]:
    """Every leaf of the schema, in order, with its Spark-side Arrow type."""
    decimals = _decimals(reader_schema)
    out = []
    for f in flat_fields(reader_schema):
        if f.type not in _BASE:  # arrays and maps: the bulk codec passes them through as bytes
            raise SchemaError(f"field '{f.name}' has unsupported type {f.type} (not read in Spark)")
        arrow, precision, scale = _BASE[f.type], 0, 0
        if f.logical == "date" and f.type == "int":
            arrow = pa.date32()
        elif f.logical in ("timestamp-millis", "timestamp-micros") and f.type == "long":
            arrow = _TIMESTAMP
        elif f.logical == "decimal" and f.name in decimals:
            precision, scale = decimals[f.name]
            if 0 < precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
                arrow = pa.decimal128(precision, scale)
        out.append(Leaf(f, arrow, precision, scale))
    return out


def tree(items: list[Leaf]) -> dict[str, Any]:
    """Leaves nested by their record path: name -> Leaf, or name -> {sub-name: ...}."""
    root: dict[str, Any] = {}
    for leaf in items:
        names = [level[0] for level in leaf.field.path] or [leaf.field.name]
        node = root
        for part in names[:-1]:
            node = node.setdefault(part, {})
        node[names[-1]] = leaf
    return root


def arrow_tree_type(node: dict[str, Any]) -> pa.DataType:
    """The Arrow struct type of a nested record node of :func:`tree`."""
    return pa.struct(
        [
            pa.field(k, v.arrow if isinstance(v, Leaf) else arrow_tree_type(v), True)
            for k, v in node.items()
        ]
    )
