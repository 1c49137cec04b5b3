"""One field's JSON (or CSV) values -> a typed column for ``streamon publish``, problems named.

Python only looks at the set of value types a column holds, numpy builds the arrays, and only a
column with a bad value is walked value by value to name it. Values follow Avro's JSON encoding
with plain (untagged) unions: ``null`` for a null, bytes and fixed as strings of code points
0-255, enums as symbols, logical types as their base values (a date is days, a timestamp is
milliseconds or microseconds since the epoch), where dates and timestamps may also be ISO-8601
strings (a timestamp without an offset is UTC).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import numpy as np

from processors.core.batch import Column, VarColumn
from topics.avro import FlatField

MISSING = object()  # a field the line does not have
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
JSON_TYPES: dict[str, frozenset[type]] = {
    "boolean": frozenset({bool}),
    "int": frozenset({int}),
    "long": frozenset({int}),
    "float": frozenset({int, float}),
    "double": frozenset({int, float}),
    "string": frozenset({str}),
    "bytes": frozenset({str}),
    "fixed": frozenset({str}),
    "enum": frozenset({str}),
}
_EXPECTED = {
    "boolean": "a boolean (true/false)",
    "int": "an int (integer)",
    "long": "a long (integer)",
    "float": "a float (number)",
    "double": "a double (number)",
    "string": "a string",
    "bytes": "bytes (a string of code points 0-255)",
    "fixed": "fixed bytes (a string of code points 0-255)",
    "enum": "an enum symbol (string)",
}
_PLACEHOLDER = {"boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0,
                "string": "", "bytes": "", "fixed": ""}  # fmt: skip
_CSV_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}
_TEXT_TYPES = ("string", "bytes", "fixed", "enum")
_ISO = {"date": 1, "timestamp-millis": 1000, "timestamp-micros": 1_000_000}  # units per second
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)  # fmt: skip


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _got(value: Any) -> str:
    return "null" if value is None else f"{kind_of(value)} {_show(value)}"


def from_text(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> None:
    """CSV cells (strings) -> the JSON values :func:`field_column` takes, in place.

    An empty cell of a nullable field is null; of another non-text field, missing (the default).
    """
    if f.nullable:
        text = f.type in _TEXT_TYPES
        vals[:] = [None if v is not MISSING and (v == "" if text else not v.strip()) else v
                   for v in vals]  # fmt: skip
    if f.type in _TEXT_TYPES:
        return
    convert: Callable[[str], Any] = {"int": int, "long": int, "float": float,
                                     "double": float}.get(f.type, _csv_bool)  # fmt: skip
    if f.logical in _ISO:
        convert = _int_or_text
    try:
        vals[:] = [v if v is MISSING or v is None else MISSING if not v.strip() else convert(v)
                   for v in vals]  # fmt: skip
        return
    except ValueError:
        pass
    for i, v in enumerate(vals):
        if v is MISSING or v is None or isinstance(v, bool | int | float):
            continue
        if not v.strip():
            vals[i] = MISSING
            continue
        try:
            vals[i] = convert(v)
        except ValueError:
            problems.append((i, f"expected {_EXPECTED[f.type].split(' (')[0]}, got {v!r}"))
            vals[i] = _PLACEHOLDER[f.type]


def _int_or_text(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text.strip()  # an ISO-8601 date or timestamp, converted by field_column


def _csv_bool(text: str) -> bool:
    value = _CSV_BOOLEANS.get(text.strip().lower())
    if value is None:
        raise ValueError(text)
    return value


def _column(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> Column:
    """One field's values (JSON types, MISSING for absent) as a column; problems named.

    Bad values are replaced by a placeholder so that the column keeps its length; the caller
    drops their rows.
    """
    allowed = JSON_TYPES[f.type]
    placeholder = placeholder_of(f)
    failed = {i for i, _ in problems}
    if not set(map(type, vals)) <= allowed:
        for i, v in enumerate(vals):
            if type(v) in allowed:
                continue
            if v is MISSING and f.has_default:
                vals[i] = f.default
                continue
            if i not in failed:
                reason = "missing (it has no default)" if v is MISSING else (
                    f"expected {_EXPECTED[f.type]}, got {_got(v)}")  # fmt: skip
                problems.append((i, reason))
            vals[i] = placeholder
    if f.type in ("string", "bytes", "fixed"):
        return _var_column(f, vals, problems)
    if f.type == "enum":
        pos = {s: k for k, s in enumerate(f.symbols)}
        idx = [pos.get(v, -1) for v in vals]
        if -1 in idx:
            shown = ", ".join(f.symbols)
            for i in (i for i, k in enumerate(idx) if k < 0):
                problems.append((i, f"{_show(vals[i])} is not a symbol of enum "
                                    f"{f.enum_name} ({shown})"))  # fmt: skip
                idx[i] = 0
        return np.array(idx, np.int32)
    if f.type == "boolean":
        return np.array(vals, np.bool_)
    if f.type in ("int", "long"):
        return _int_column(f, vals, problems)
    return _float_column(f, vals, problems)


def _int_column(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> np.ndarray:
    lo, hi = _INT_RANGE[f.type]
    try:
        col = np.array(vals, np.int64)
        out = (col < lo) | (col > hi) if f.type == "int" else None
        if out is None or not out.any():
            return col.astype(np.int32) if f.type == "int" else col
        outside = np.flatnonzero(out).tolist()
    except OverflowError:
        outside = [i for i, v in enumerate(vals) if not lo <= v <= hi]
    for i in outside:
        problems.append((i, f"{vals[i]} is outside the {f.type} range [{lo}, {hi}]"))
        vals[i] = 0
    return np.array(vals, np.int32 if f.type == "int" else np.int64)


def _float_column(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> np.ndarray:
    try:
        col = np.array(vals, np.float64)
    except OverflowError:  # an integer beyond any double
        for i, v in enumerate(vals):
            if isinstance(v, int) and abs(v) > 2**1023:
                problems.append((i, f"{_show(v)} is outside the {f.type} range"))
                vals[i] = 0.0
        col = np.array(vals, np.float64)
    if f.type == "double":
        return col
    finite = np.isfinite(col)
    over = finite & (np.abs(col) > _FLOAT32_MAX)
    for i in np.flatnonzero(over).tolist():
        problems.append((i, f"{vals[i]} is outside the float range (±{_FLOAT32_MAX:.6g})"))
        col[i] = 0.0
    return col.astype(np.float32)


def _var_column(f: FlatField, vals: list[str], problems: list[tuple[int, str]]) -> VarColumn:
    utf8 = f.type == "string"
    text = "".join(vals)
    try:
        data = text.encode("utf-8" if utf8 else "latin-1")
    except UnicodeEncodeError:
        data = None
    if data is not None and len(data) == len(text):  # one byte per character: lengths known
        lengths = np.fromiter(map(len, vals), np.int64, count=len(vals))
    else:
        encoded = []
        for i, v in enumerate(vals):
            try:
                encoded.append(v.encode("utf-8" if utf8 else "latin-1"))
            except UnicodeEncodeError as exc:
                ch = v[exc.start]
                reason = (f"character U+{ord(ch):04X} at {exc.start} is a lone surrogate, not "
                          "encodable in UTF-8") if utf8 else (
                          f"character U+{ord(ch):04X} at {exc.start} is not a byte (Avro JSON "
                          "bytes are code points 0-255)")  # fmt: skip
                problems.append((i, reason))
                encoded.append(b"")
        data = b"".join(encoded)
        lengths = np.fromiter(map(len, encoded), np.int64, count=len(encoded))
    offsets = np.zeros(len(vals) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return VarColumn(offsets, np.frombuffer(data, np.uint8), utf8)


class BadParent:
    """A nested field's value where an enclosing record's value is not a JSON object."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


def placeholder_of(f: FlatField) -> Any:
    """A valid JSON value of the field's type (bad and null rows hold it)."""
    if f.type == "enum":
        return f.symbols[0]
    return "\0" * f.size if f.type == "fixed" else _PLACEHOLDER[f.type]


def field_column(
    f: FlatField, vals: list[Any], problems: list[tuple[int, str]]
) -> tuple[Column, np.ndarray | None]:
    """One field's values (JSON types, MISSING for absent) as a column, and for a nullable
    field its null column (True = null). Bad values get a placeholder; the caller drops them."""
    types = set(map(type, vals))
    if BadParent in types:
        for i, v in enumerate(vals):
            if type(v) is BadParent:
                problems.append((i, v.reason))
                vals[i] = placeholder_of(f)
    if object in types and f.has_default:  # MISSING is a plain object()
        vals[:] = [f.default if v is MISSING else v for v in vals]
    nulls = None
    if f.nullable:
        nulls = np.fromiter((v is None for v in vals), np.bool_, count=len(vals))
        if nulls.any():
            fill = placeholder_of(f)
            vals[:] = [fill if v is None else v for v in vals]
    if f.logical in _ISO and str in types:
        _iso_values(f, vals, problems)
    col = _column(f, vals, problems)
    if f.type == "fixed":
        lengths = np.diff(col.offsets)  # type: ignore[union-attr]
        failed = {i for i, _ in problems}
        for i in np.flatnonzero(lengths != f.size).tolist():
            if i not in failed:
                problems.append((i, f"expected {f.size} bytes (fixed {f.fixed_name}), got "
                                    f"{int(lengths[i])}"))  # fmt: skip
    return col, nulls


def _iso_values(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> None:
    """ISO-8601 dates/timestamps -> days / ms / us since the epoch, in place."""
    per_s = _ISO[f.logical]
    for i, v in enumerate(vals):
        if type(v) is not str:
            continue
        try:
            if f.logical == "date":
                vals[i] = (dt.date.fromisoformat(v) - _EPOCH.date()).days
                continue
            t = dt.datetime.fromisoformat(v)
            t = t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
            delta = t - _EPOCH
            us = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
            if us % (1_000_000 // per_s):
                raise ValueError("finer than milliseconds")
            vals[i] = us // (1_000_000 // per_s)
        except ValueError as exc:
            what = "a date (days since 1970-01-01" if f.logical == "date" else (
                f"a {f.logical} (integer since the epoch")  # fmt: skip
            problems.append((i, f"expected {what} or an ISO-8601 string), got {v!r}: {exc}"))
            vals[i] = 0
