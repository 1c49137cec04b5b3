"""Spark schemas of decoded topics: the record's flat Avro fields, then the Kafka metadata.

Avro boolean/int/long/float/double/string/bytes map to Spark's boolean/int/bigint/float/
double/string/binary; an enum becomes its symbol as a string. Logical types keep their base
type (a ``timestamp-millis`` field stays a bigint of milliseconds).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_bridge.options import META_COLUMNS, OptionError
from topics.avro import SchemaError, flat_fields, schema_name

_SPARK_TYPES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
    "enum": StringType(),
}
_META_TYPES: dict[str, DataType] = {
    "_topic": StringType(),
    "_partition": IntegerType(),
    "_offset": LongType(),
    "_timestamp": TimestampType(),
    "_sign": ByteType(),
    "_key": BinaryType(),
}


def spark_schema(reader_schema: dict) -> StructType:
    """The DataFrame schema of a topic read with ``reader_schema`` (a flat Avro record)."""
    try:
        fields = flat_fields(reader_schema)
    except SchemaError as exc:
        raise OptionError(f"cannot read records of {schema_name(reader_schema)}: {exc}") from exc
    clash = [f.name for f in fields if f.name in META_COLUMNS]
    if clash:
        raise OptionError(
            f"schema {schema_name(reader_schema)} has fields {clash} named like the metadata "
            f"columns {list(META_COLUMNS)}"
        )
    out = [StructField(f.name, _SPARK_TYPES[f.type], True) for f in fields]
    out += [StructField(name, _META_TYPES[name], True) for name in META_COLUMNS]
    return StructType(out)


def arrow_schema(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects batches of ``schema`` in (what its reader checks)."""
    return to_arrow_schema(schema, timezone="UTC")


def check_requested(requested: StructType, full: StructType) -> None:
    """A user-given schema must name columns of the topic's schema (any subset, any order)."""
    known = set(full.fieldNames())
    unknown = [name for name in requested.fieldNames() if name not in known]
    if unknown:
        raise OptionError(f"schema asks for columns {unknown} the topic does not have: {full}")
