"""JSON Lines and CSV input of ``streamon publish``: chunks of lines -> typed columns.

A chunk is parsed, then converted one field at a time: Python only looks at the set of value
types a column holds, numpy builds the arrays, and only a column with a bad value is walked
value by value to name it. So a large file goes at hundreds of thousands of records/s, and every
problem still becomes a :class:`LineError` with the line number, the field and the reason. Bad
lines are left out of the chunk; the others go on.

JSON values follow Avro's JSON encoding: ``bytes`` are strings of code points 0-255, enums are
symbol names. CSV cells are converted by the field's Avro type; an empty cell of a non-string
field takes the field's default. Fields the schema does not name are ignored.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from processors.core.batch import Column, VarColumn
from topics.avro import FlatField, SchemaError, flat_fields, schema_name

try:  # faster when present; never a requirement
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

_MISSING = object()
_INT_RANGE = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_JSON_TYPES: dict[str, frozenset[type]] = {
    "boolean": frozenset({bool}),
    "int": frozenset({int}),
    "long": frozenset({int}),
    "float": frozenset({int, float}),
    "double": frozenset({int, float}),
    "string": frozenset({str}),
    "bytes": frozenset({str}),
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
    "enum": "an enum symbol (string)",
}
_PLACEHOLDER = {"boolean": False, "int": 0, "long": 0, "float": 0.0, "double": 0.0,
                "string": "", "bytes": ""}  # fmt: skip
_CSV_BOOLEANS = {"true": True, "false": False, "1": True, "0": False}
KEY_TYPES = ("int", "long", "string", "bytes", "enum", "boolean")


@dataclass(frozen=True, order=True)
class LineError:
    """Why one line was left out: its 1-based number, the field (None: the whole line), why."""

    line: int
    field: str | None
    reason: str

    def __str__(self) -> str:
        where = f"line {self.line}"
        return f"{where}: field '{self.field}': {self.reason}" if self.field else (
            f"{where}: {self.reason}")  # fmt: skip


@dataclass
class Chunk:
    """The good records of a chunk of lines, as columns, and an error per problem found."""

    columns: dict[str, Column]
    lines: np.ndarray  # int64 line number of each good record
    errors: list[LineError]  # sorted by line; a line may have several
    key: VarColumn | None = None

    def __len__(self) -> int:
        return len(self.lines)

    @property
    def skipped(self) -> int:
        """Lines left out (each bad line once)."""
        return len({e.line for e in self.errors})


def _kind(value: Any) -> str:
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
    return "null" if value is None else f"{_kind(value)} {_show(value)}"


class RecordParser:
    """Turns chunks of JSON lines (or CSV rows) into the columns of a flat Avro schema."""

    def __init__(self, schema: dict, key: str | None = None) -> None:
        self.schema = schema
        self.fields = flat_fields(schema)
        self.by_name = {f.name: f for f in self.fields}
        self.key = key
        for f in self.fields:
            if f.type not in _JSON_TYPES:
                raise SchemaError(f"publish: field '{f.name}' of type {f.type} is not supported "
                                  f"(supported: {', '.join(_JSON_TYPES)})")  # fmt: skip
        if key is not None:
            f = self.by_name.get(key)
            if f is None:
                names = ", ".join(self.by_name)
                raise SchemaError(f"--key {key!r}: schema {schema_name(schema)} has no such "
                                  f"field ({names})")  # fmt: skip
            if f.type not in KEY_TYPES:
                raise SchemaError(f"--key {key!r}: a {f.type} field cannot be a Kafka key "
                                  f"(use one of type {', '.join(KEY_TYPES)})")  # fmt: skip

    # --- JSON Lines ------------------------------------------------------------------------

    def json_chunk(self, lines: Sequence[bytes], first_line: int) -> Chunk:
        """Lines ``first_line``, ``first_line + 1``, ... (blank ones are skipped silently)."""
        numbers = np.arange(first_line, first_line + len(lines), dtype=np.int64)
        errors: list[LineError] = []
        objs = _parse_joined(lines)
        if objs is None:  # some line is not one JSON object: find which, and why
            objs, keep = [], []
            for i, raw in enumerate(lines):
                obj = self._parse_line(raw, int(numbers[i]), errors)
                if obj is not None:
                    objs.append(obj)
                    keep.append(i)
            numbers = numbers[keep]
        values = {f.name: _field_values(objs, f.name) for f in self.fields}
        return self._convert(values, numbers, errors, from_text=False)

    @staticmethod
    def _parse_line(raw: bytes, line: int, errors: list[LineError]) -> dict | None:
        if not raw.strip():
            return None
        try:
            obj = _loads(raw)
        except UnicodeDecodeError as exc:
            errors.append(LineError(line, None, f"not valid UTF-8 at byte {exc.start}"))
            return None
        except ValueError as exc:
            msg = getattr(exc, "msg", str(exc))
            col = getattr(exc, "colno", None)
            at = f" (column {col})" if col is not None else ""
            errors.append(LineError(line, None, f"not valid JSON: {msg}{at}"))
            return None
        if type(obj) is not dict:
            errors.append(LineError(line, None, f"expected a JSON object, got {_kind(obj)}"))
            return None
        return obj

    # --- CSV -------------------------------------------------------------------------------

    def csv_header(self, header: Sequence[str]) -> dict[str, int]:
        """Column index per schema field; SchemaError for a field that is neither there nor
        defaulted, or a header cell naming no field."""
        index = {name.strip(): i for i, name in enumerate(header)}
        if len(index) != len(header):
            raise SchemaError(f"CSV header names a column twice: {list(header)}")
        unknown = [name for name in index if name not in self.by_name]
        if unknown:
            raise SchemaError(f"CSV header names {unknown} that schema {schema_name(self.schema)}"
                              f" does not have ({', '.join(self.by_name)})")  # fmt: skip
        for f in self.fields:
            if f.name not in index and not f.has_default:
                raise SchemaError(f"CSV header has no column for field '{f.name}' "
                                  "(it has no default)")  # fmt: skip
        return index

    def csv_chunk(
        self, rows: Sequence[Sequence[str]], lines: Sequence[int], index: dict[str, int]
    ) -> Chunk:
        """CSV rows (header excluded) that start on the given line numbers."""
        width = len(index)
        errors: list[LineError] = []
        keep = []
        for i, row in enumerate(rows):
            if len(row) == width:
                keep.append(i)
            elif row:  # an empty row is a blank line
                errors.append(LineError(lines[i], None, f"has {len(row)} cells, the header "
                                                        f"has {width}"))  # fmt: skip
        good = [rows[i] for i in keep]
        values = {}
        for f in self.fields:
            j = index.get(f.name)
            values[f.name] = [_MISSING] * len(good) if j is None else [r[j] for r in good]
        numbers = np.asarray(lines, dtype=np.int64)[keep]
        return self._convert(values, numbers, errors, from_text=True)

    # --- conversion ------------------------------------------------------------------------

    def _convert(
        self, values: dict[str, list[Any]], numbers: np.ndarray, errors: list[LineError],
        from_text: bool,
    ) -> Chunk:  # fmt: skip
        n = len(numbers)
        bad = np.zeros(n, np.bool_)
        columns: dict[str, Column] = {}
        for f in self.fields:
            vals = values[f.name]
            problems: list[tuple[int, str]] = []
            if from_text:
                _from_text(f, vals, problems)
            columns[f.name] = _column(f, vals, problems)
            for i, reason in problems:
                bad[i] = True
                errors.append(LineError(int(numbers[i]), f.name, reason))
        order = {f.name: k for k, f in enumerate(self.fields)}
        errors.sort(key=lambda e: (e.line, -1 if e.field is None else order[e.field]))
        if bad.any():
            good = np.flatnonzero(~bad)
            columns = {name: _take(col, good) for name, col in columns.items()}
            numbers = numbers[good]
        key = self._key(columns[self.key]) if self.key is not None else None
        return Chunk(columns, numbers, errors, key)

    def _key(self, col: Column) -> VarColumn:
        """Kafka key bytes of a field: integers as 8-byte big-endian two's complement (as
        streamon's own producers key sensor ids), strings UTF-8, bytes as they are, enums
        their symbol, booleans one byte 0/1."""
        f = self.by_name[self.key or ""]
        n = len(col)
        if isinstance(col, VarColumn):
            return VarColumn(col.offsets, col.data, utf8=False)
        if f.type == "enum":
            return VarColumn.from_values([f.symbols[i] for i in col.tolist()], utf8=False)
        width = 1 if f.type == "boolean" else 8
        raw = np.asarray(col).astype(np.uint8 if width == 1 else ">i8").view(np.uint8)
        return VarColumn(np.arange(0, width * n + 1, width, dtype=np.int64), raw.copy(), False)


def _parse_joined(lines: Sequence[bytes]) -> list[Any] | None:
    """Every line parsed as one JSON object by ONE parser call, or None (then parse line by line).

    One call is about twice as fast as one per line (the parser shares the key strings). The
    lines are joined by a separator holding a random token: only if the result alternates
    object, token, object, ... did each line hold exactly one complete object, because a line
    that is not a complete value would pull a separator into a nested array (or fail), and no
    line can hold the token itself.
    """
    n = len(lines)
    try:  # one decode for the chunk; UTF-8 never has a 0x0A byte inside a character
        text = b"".join(lines).decode("utf-8").split("\n")[:n]
        token = "z" + secrets.token_hex(8)
        res = _loads("[" + f',"{token}",'.join(text) + "]")
    except ValueError:  # includes UnicodeDecodeError
        return None
    if type(res) is not list or len(res) != 2 * n - 1 or res[1::2].count(token) != n - 1:
        return None
    objs = res[0::2]
    return objs if set(map(type, objs)) <= {dict} else None


def _field_values(objs: list[dict], name: str) -> list[Any]:
    try:
        return list(map(itemgetter(name), objs))
    except KeyError:
        return [o.get(name, _MISSING) for o in objs]


def _take(col: Column, idx: np.ndarray) -> Column:
    return col.take(idx) if isinstance(col, VarColumn) else np.asarray(col)[idx]


def _from_text(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> None:
    """CSV cells (strings) -> the JSON values :func:`_column` takes, in place."""
    if f.type in ("string", "bytes", "enum"):
        return
    convert: Callable[[str], Any] = {"int": int, "long": int, "float": float,
                                     "double": float}.get(f.type, _csv_bool)  # fmt: skip
    try:
        vals[:] = [_MISSING if v is _MISSING or not v.strip() else convert(v) for v in vals]
        return
    except ValueError:
        pass
    for i, v in enumerate(vals):
        if v is _MISSING or isinstance(v, bool | int | float):
            continue
        if not v.strip():
            vals[i] = _MISSING
            continue
        try:
            vals[i] = convert(v)
        except ValueError:
            problems.append((i, f"expected {_EXPECTED[f.type].split(' (')[0]}, got {v!r}"))
            vals[i] = _PLACEHOLDER[f.type]


def _csv_bool(text: str) -> bool:
    value = _CSV_BOOLEANS.get(text.strip().lower())
    if value is None:
        raise ValueError(text)
    return value


def _column(f: FlatField, vals: list[Any], problems: list[tuple[int, str]]) -> Column:
    """One field's values (JSON types, _MISSING for absent) as a column; problems named.

    Bad values are replaced by a placeholder so that the column keeps its length; the caller
    drops their rows.
    """
    allowed = _JSON_TYPES[f.type]
    placeholder = f.symbols[0] if f.type == "enum" else _PLACEHOLDER[f.type]
    failed = {i for i, _ in problems}
    if not set(map(type, vals)) <= allowed:
        for i, v in enumerate(vals):
            if type(v) in allowed:
                continue
            if v is _MISSING and f.has_default:
                vals[i] = f.default
                continue
            if i not in failed:
                reason = "missing (it has no default)" if v is _MISSING else (
                    f"expected {_EXPECTED[f.type]}, got {_got(v)}")  # fmt: skip
                problems.append((i, reason))
            vals[i] = placeholder
    if f.type in ("string", "bytes"):
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
