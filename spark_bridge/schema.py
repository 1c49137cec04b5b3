"""Spark schemas of decoded topics: the record's Avro fields, then the Kafka metadata.

Avro boolean/int/long/float/double/string/bytes map to Spark's boolean/int/bigint/float/
double/string/binary; an enum becomes its symbol as a string, ``fixed`` binary, a nested record
a struct; logical types as :mod:`spark_bridge.leaves` says (date, timestamp, decimal). Every
column is nullable, as Spark's sources' columns usually are; only nullable Avro fields (``["null",
T]``) and a message's missing timestamp ever give nulls.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_type, to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_bridge.leaves import Leaf, leaves, tree
from spark_bridge.options import META_COLUMNS, OptionError
from topics.avro import SchemaError, schema_name

_META_TYPES: dict[str, DataType] = {
    "_topic": StringType(),
    "_partition": IntegerType(),
    "_offset": LongType(),
    "_timestamp": TimestampType(),
    "_sign": ByteType(),
    "_key": BinaryType(),
}


def spark_schema(reader_schema: dict) -> StructType:
    """The DataFrame schema of a topic read with ``reader_schema`` (an Avro record)."""
    try:
        nodes = tree(leaves(reader_schema))
    except SchemaError as exc:
        raise OptionError(f"cannot read records of {schema_name(reader_schema)}: {exc}") from exc
    clash = [name for name in nodes if name in META_COLUMNS]
    if clash:
        raise OptionError(
            f"schema {schema_name(reader_schema)} has fields {clash} named like the metadata "
            f"columns {list(META_COLUMNS)}"
        )
    out = [StructField(name, _spark_type(node), True) for name, node in nodes.items()]
    out += [StructField(name, _META_TYPES[name], True) for name in META_COLUMNS]
    return StructType(out)


def _spark_type(node: Leaf | dict) -> DataType:
    if isinstance(node, dict):
        return StructType([StructField(k, _spark_type(v), True) for k, v in node.items()])
    return from_arrow_type(node.arrow)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects batches of ``schema`` in (what its reader checks)."""
    return to_arrow_schema(schema, timezone="UTC")


def check_requested(requested: StructType, full: StructType) -> None:
    """A user-given schema must name columns of the topic's schema (any subset, any order)."""
    known = set(full.fieldNames())
    unknown = [name for name in requested.fieldNames() if name not in known]
    if unknown:
        raise OptionError(f"schema asks for columns {unknown} the topic does not have: {full}")
