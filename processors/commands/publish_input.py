"""JSON Lines and CSV input of ``streamon publish``: chunks of lines -> typed columns.

A chunk is parsed, then converted one field at a time: Python only looks at the set of value
types a column holds, numpy builds the arrays, and only a column with a bad value is walked
value by value to name it. So a large file goes at hundreds of thousands of records/s, and every
problem still becomes a :class:`LineError` with the line number, the field and the reason. Bad
lines are left out of the chunk; the others go on.

JSON values follow Avro's JSON encoding with plain unions (see
:mod:`processors.commands.publish_values`): ``null`` for a null, nested records as nested objects
(or dotted keys, ``"loc.lat"``), bytes and fixed as strings of code points 0-255, enums as
symbol names. CSV headers name nested fields dotted (``loc.lat``); cells are converted by the
field's Avro type; an empty cell is null for a nullable field, and of another non-string field
takes the field's default. Fields the schema does not name are ignored.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from processors.commands.publish_values import (
    JSON_TYPES,
    MISSING,
    BadParent,
    field_column,
    from_text,
    kind_of,
)
from processors.core.batch import Column, VarColumn, null_column
from topics.avro import FlatField, SchemaError, flat_fields, schema_name

try:  # faster when present; never a requirement
    import orjson

    _loads: Callable[[bytes], Any] = orjson.loads
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads

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


class RecordParser:
    """Turns chunks of JSON lines (or CSV rows) into the columns of a flat Avro schema."""

    def __init__(self, schema: dict, key: str | None = None) -> None:
        self.schema = schema
        self.fields = flat_fields(schema)
        self.by_name = {f.name: f for f in self.fields}
        self.key = key
        for f in self.fields:
            if f.type not in JSON_TYPES:
                raise SchemaError(f"publish: field '{f.name}' of type {f.type} is not supported "
                                  f"(supported: {', '.join(JSON_TYPES)})")  # fmt: skip
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
        values = {f.name: _field_values(objs, f) for f in self.fields}
        return self._convert(values, numbers, errors, text=False)

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
            errors.append(LineError(line, None, f"expected a JSON object, got {kind_of(obj)}"))
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
            values[f.name] = [MISSING] * len(good) if j is None else [r[j] for r in good]
        numbers = np.asarray(lines, dtype=np.int64)[keep]
        return self._convert(values, numbers, errors, text=True)

    # --- conversion ------------------------------------------------------------------------

    def _convert(
        self, values: dict[str, list[Any]], numbers: np.ndarray, errors: list[LineError],
        text: bool,
    ) -> Chunk:  # fmt: skip
        n = len(numbers)
        bad = np.zeros(n, np.bool_)
        columns: dict[str, Column] = {}
        for f in self.fields:
            vals = values[f.name]
            problems: list[tuple[int, str]] = []
            if text:
                from_text(f, vals, problems)
            columns[f.name], nulls = field_column(f, vals, problems)
            if nulls is not None:
                columns[null_column(f.name)] = nulls
                if f.name == self.key:
                    problems += [(i, "is null, and it is the --key field")
                                 for i in np.flatnonzero(nulls).tolist()]  # fmt: skip
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


def _field_values(objs: list[dict], f: FlatField) -> list[Any]:
    if len(f.path) > 1:
        return [_nested_value(o, f) for o in objs]
    try:
        return list(map(itemgetter(f.name), objs))
    except KeyError:
        return [o.get(f.name, MISSING) for o in objs]


def _nested_value(obj: dict, f: FlatField) -> Any:
    """A nested field's value: ``{"loc": {"lat": 1}}`` or ``{"loc.lat": 1}``."""
    value: Any = obj
    for depth, level in enumerate(f.path):
        if type(value) is not dict:
            where = ".".join(n[0] for n in f.path[:depth])
            return BadParent(f"'{where}' must be an object (a record), got {kind_of(value)}")
        value = value.get(level[0], MISSING)
        if value is MISSING:
            return obj.get(f.name, MISSING)
    return value


def _take(col: Column, idx: np.ndarray) -> Column:
    return col.take(idx) if isinstance(col, VarColumn) else np.asarray(col)[idx]
