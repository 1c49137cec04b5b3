"""Typed column values for the bulk codec: zeros, defaults, columns checked before encoding,
and the columns of records that took the per-record path."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import numpy as np

from processors.core.batch import Column, VarColumn, null_column
from topics.avro import SchemaError
from topics.avro_layout import NESTED_SEP, FlatField

DTYPES = {
    "boolean": np.dtype(np.bool_),
    "int": np.dtype(np.int32),
    "long": np.dtype(np.int64),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
    "enum": np.dtype(np.int32),
}
VAR_TYPES = ("string", "bytes", "fixed", "array", "map")  # types held in a VarColumn
COLLECTIONS = ("array", "map")  # held as their Avro encoding


def encode_collection(f: FlatField, values: list[Any]) -> list[bytes]:
    """Python lists (array) or dicts (map) as their Avro encodings; None as empty bytes."""
    schema = fastavro.parse_schema(strip_logical(f.collection_schema), named_schemas={})
    out = []
    for v in values:
        if v is None:
            out.append(b"")
            continue
        sink = io.BytesIO()
        fastavro.schemaless_writer(sink, schema, v)
        out.append(sink.getvalue())
    return out


def zeros(f: FlatField, n: int) -> Column:
    """n values of ``f``'s type that are zero: 0, empty, ``size`` zero bytes, the first symbol."""
    if f.type in COLLECTIONS:  # an empty array or map: a zero count
        return VarColumn(np.arange(n + 1, dtype=np.int64), np.zeros(n, np.uint8), False)
    if f.type in VAR_TYPES:
        size = f.size if f.type == "fixed" else 0
        offsets = np.arange(n + 1, dtype=np.int64) * size
        return VarColumn(offsets, np.zeros(n * size, np.uint8), f.type == "string")
    return np.zeros(n, DTYPES[f.type])


def default_column(f: FlatField, n: int) -> Column:
    if f.nullable and f.default is None:
        return zeros(f, n)
    if f.type in COLLECTIONS:
        return VarColumn.from_values(encode_collection(f, [f.default]) * n, utf8=False)
    if f.type in VAR_TYPES:
        raw = f.default.encode("utf-8" if f.type == "string" else "latin-1")
        data = np.frombuffer(raw * n, np.uint8).copy()
        return VarColumn(np.arange(n + 1, dtype=np.int64) * len(raw), data, f.type == "string")
    value = f.symbols.index(f.default) if f.type == "enum" else f.default
    return np.full(n, value, DTYPES[f.type])


def strip_logical(t: object) -> object:
    """A schema without logicalType annotations: fastavro then reads base values."""
    if isinstance(t, list):
        return [strip_logical(x) for x in t]
    if not isinstance(t, dict):
        return t
    return {k: strip_logical(v) for k, v in t.items() if k != "logicalType"}


def columns_from_rows(fields: list[FlatField], rows: list[dict]) -> dict[str, Column]:
    """Columns of decoded records (dicts; nested records as dicts, nulls as None)."""
    cols: dict[str, Column] = {}
    for f in fields:
        values = []
        for r in rows:
            for part in f.name.split(NESTED_SEP):
                r = r[part] if r is not None else None
            values.append(r)
        nul = np.array([v is None for v in values], np.bool_)
        if f.type == "enum":
            values = [0 if v is None else f.symbols.index(v) for v in values]
        if f.type in COLLECTIONS:
            values = encode_collection(f, values)
        if f.type in VAR_TYPES:
            pad = b"\0" * f.size
            values = [pad if v is None else v for v in values]
            cols[f.name] = VarColumn.from_values(values, utf8=f.type == "string")
        else:
            cols[f.name] = np.array([0 if v is None else v for v in values], DTYPES[f.type])
        if f.nullable:
            cols[null_column(f.name)] = nul
    return cols


def check_sizes(f: FlatField, col: VarColumn, nul: np.ndarray | None) -> None:
    wrong = np.diff(col.offsets) != f.size
    if nul is not None:
        wrong &= ~nul
    if wrong.any():
        j = int(np.flatnonzero(wrong)[0])
        raise ValueError(
            f"column '{f.name}' value {j} has {len(col.value(j))} bytes; fixed {f.fixed_name} "
            f"takes {f.size}"
        )


_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}


def fixed_bits(f: FlatField, col: np.ndarray, n: int) -> np.ndarray:
    """A fixed-size column as the int64 row the encode kernel reads; checks dtype and range."""
    if col.shape != (n,):
        raise ValueError(f"column '{f.name}' has shape {col.shape}, expected ({n},)")
    if f.type == "float":
        return col.astype(np.float32, copy=False).view(np.uint32)
    if f.type == "double":
        return col.astype(np.float64, copy=False).view(np.int64)
    if f.type == "boolean":
        return col.astype(np.bool_, copy=False)
    if col.dtype.kind not in "iub":
        raise SchemaError(f"column '{f.name}' has dtype {col.dtype}, expected {f.type} integers")
    lo, hi = (0, len(f.symbols) - 1) if f.type == "enum" else _INT_RANGE[f.type]
    needs_check = f.type == "enum" or not np.can_cast(col.dtype, DTYPES[f.type])
    if n and needs_check and (int(col.min()) < lo or int(col.max()) > hi):
        raise ValueError(f"column '{f.name}' has values outside {f.type} range [{lo}, {hi}]")
    return col
