"""Arrays and maps passed through: their Avro encoding kept as bytes, skipped with bounds.

A query never looks inside an array or a map, so the bulk codec keeps each value as the exact
bytes the writer wrote (its block sequence, negative counts with byte sizes included) and writes
them back unchanged. To find where such a value ends, :func:`skip_value` walks its item types,
compiled by :class:`NodeTable` into flat arrays a numba kernel reads: counts can never exceed
the bytes left (unless items may take no bytes, as nulls: then it is within the items limit),
a record's items never exceed ``max_collection_items`` and nesting never
exceeds the stack it is given (``max_nesting``, :mod:`topics.avro_bounds`).
"""

from __future__ import annotations

import json
from typing import Any

import numba as nb
import numpy as np

# node kinds of an item type
(N_NULL, N_BOOLEAN, N_INT, N_LONG, N_FLOAT, N_DOUBLE, N_STRING, N_BYTES, N_ENUM, N_FIXED,
 N_RECORD, N_UNION, N_ARRAY, N_MAP) = range(14)  # fmt: skip
_PRIMS = {"null": N_NULL, "boolean": N_BOOLEAN, "int": N_INT, "long": N_LONG, "float": N_FLOAT,
          "double": N_DOUBLE, "string": N_STRING, "bytes": N_BYTES}  # fmt: skip
_LOW63 = 0x7FFFFFFFFFFFFFFF

# statuses (numbered after topics.avro_kernels' own)
OK, TRUNCATED, VARINT_OVERFLOW, NEGATIVE_LENGTH, LENGTH_PAST_END = 0, 1, 2, 3, 4
ENUM_OUT_OF_RANGE, BAD_BOOLEAN, BAD_UTF8, BAD_UNION = 6, 7, 8, 11
BLOCK_PAST_END, TOO_MANY_ITEMS, TOO_DEEP = 12, 13, 14
REASONS = {
    BLOCK_PAST_END: "collection block count exceeds the bytes left",
    TOO_MANY_ITEMS: "more collection items than max_collection_items",
    TOO_DEEP: "collections nested deeper than max_nesting",
}


class CollectionSchemaError(ValueError):
    """An array's items or a map's values of a type the codec cannot skip."""


class NodeTable:
    """Item types of every collection field of a layout, as arrays: per node its kind, ``a``
    (enum: symbol count, fixed: size, record/union: first child in ``kids``, array/map: item
    node) and ``b`` (record/union: child count; array: 1 if an item may take no bytes). Named
    types are compiled once, so recursive types are fine."""

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.a: list[int] = []
        self.b: list[int] = []
        self.kids: list[int] = []

    def _new(self, kind: int, a: int = 0, b: int = 0) -> int:
        self.kind.append(kind)
        self.a.append(a)
        self.b.append(b)
        return len(self.kind) - 1

    def add(self, t: Any, named: dict[str, Any], seen: dict[str, int] | None = None) -> int:
        """The node of type ``t`` (named types looked up in ``named``)."""
        seen = {} if seen is None else seen
        if isinstance(t, str):
            if t in _PRIMS:
                return self._new(_PRIMS[t])
            short = t.rsplit(".", 1)[-1]
            if short in seen:
                return seen[short]
            if short not in named:
                raise CollectionSchemaError(f"unknown type {t!r}")
            t = named[short]
        if isinstance(t, list):
            node = self._new(N_UNION, 0, len(t))
            kids = [self.add(x, named, seen) for x in t]
            self.a[node] = len(self.kids)
            self.kids += kids
            return node
        kind = t.get("type") if isinstance(t, dict) else None
        if kind in ("record", "error", "enum", "fixed"):
            short = str(t["name"]).rsplit(".", 1)[-1]
            named.setdefault(short, t)
        if kind in ("record", "error"):
            node = seen[short] = self._new(N_RECORD, 0, len(t["fields"]))
            kids = [self.add(f["type"], named, seen) for f in t["fields"]]
            self.a[node] = len(self.kids)
            self.kids += kids
            return node
        if kind == "enum":
            node = seen[short] = self._new(N_ENUM, len(t["symbols"]))
            return node
        if kind == "fixed":
            node = seen[short] = self._new(N_FIXED, int(t["size"]))
            return node
        if kind in ("array", "map"):
            node = self._new(N_ARRAY if kind == "array" else N_MAP)
            self.a[node] = self.add(t["items" if kind == "array" else "values"], named, seen)
            self.b[node] = int(kind == "array" and self.min_size(self.a[node]) == 0)
            return node
        if isinstance(kind, str) and kind in _PRIMS:  # a primitive with attributes
            return self._new(_PRIMS[kind])
        raise CollectionSchemaError(f"type {json.dumps(t)} cannot be an item of an array or map")

    def min_size(self, node: int, open_: frozenset = frozenset()) -> int:
        """The fewest bytes a value of ``node`` takes (0 for null, empty records, fixed[0])."""
        k = self.kind[node]
        if k in (N_NULL, N_FIXED):
            return self.a[node] if k == N_FIXED else 0
        if k != N_RECORD:
            return 1
        if node in open_:  # a record within itself is inside a union or collection: >= 1
            return 1
        kids = self.kids[self.a[node] : self.a[node] + self.b[node]]
        return sum(self.min_size(x, open_ | {node}) for x in kids)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        kind = np.array(self.kind or [0], np.int8)
        return kind, *(np.array(x or [0], np.int64) for x in (self.a, self.b, self.kids))


def expanded(t: Any, named: dict[str, Any], defined: set[str]) -> Any:
    """``t`` with every named type inlined at its first use (docs dropped): a standalone
    schema for the output, and the shape two schemas must share to pass values through."""
    if isinstance(t, str):
        short = t.rsplit(".", 1)[-1]
        if t in _PRIMS or short in defined or short not in named:
            return t
        t = named[short]
    if isinstance(t, list):
        return [expanded(x, named, defined) for x in t]
    if not isinstance(t, dict):
        return t
    kind = t.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        short = str(t["name"]).rsplit(".", 1)[-1]
        named.setdefault(short, t)
        defined.add(short)
    out = {k: v for k, v in t.items() if k not in ("doc", "fields", "items", "values")}
    if kind in ("record", "error"):
        out["fields"] = [
            {k: (expanded(v, named, defined) if k == "type" else v) for k, v in f.items()
             if k != "doc"} for f in t["fields"]]  # fmt: skip
    elif kind == "array":
        out["items"] = expanded(t["items"], named, defined)
    elif kind == "map":
        out["values"] = expanded(t["values"], named, defined)
    return out


@nb.njit(cache=True, nogil=True, inline="always")
def varint(buf, pos, end, last):
    """A zigzag varint of at most ``last + 1`` bytes; returns (value, new pos, status)."""
    last_max = 0x0F if last == 4 else 0x01
    acc = np.int64(0)
    k = 0
    while True:
        if pos >= end:
            return np.int64(-1), pos, TRUNCATED
        b = buf[pos]
        pos += 1
        if k == last and b > last_max:
            return np.int64(-1), pos, VARINT_OVERFLOW
        acc |= np.int64(b & 0x7F) << (7 * k)
        if b < 0x80:
            break
        k += 1
    return ((acc >> 1) & _LOW63) ^ -(acc & 1), pos, OK


@nb.njit(cache=True, nogil=True, inline="always")
def utf8_ok(buf, pos, end):
    """Strict UTF-8 (no overlongs, surrogates, or code points past U+10FFFF)."""
    p = pos
    while p < end:
        c = buf[p]
        if c < 0x80:
            p += 1
            continue
        if 0xC2 <= c <= 0xDF:
            need, lo, hi = 1, 0x80, 0xBF
        elif 0xE0 <= c <= 0xEF:
            need = 2
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
        elif 0xF0 <= c <= 0xF4:
            need = 3
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
        else:
            return False
        if end - p <= need:
            return False
        b = buf[p + 1]
        if b < lo or b > hi:
            return False
        for k in range(2, need + 1):
            b = buf[p + k]
            if b < 0x80 or b > 0xBF:
                return False
        p += need + 1
    return True


@nb.njit(cache=True, nogil=True)
def _string(buf, pos, end, utf8):
    n, pos, st = varint(buf, pos, end, 9)
    if st != OK:
        return pos, st
    if n < 0:
        return pos, NEGATIVE_LENGTH
    if n > end - pos:
        return pos, LENGTH_PAST_END
    if utf8 and not utf8_ok(buf, pos, pos + n):
        return pos, BAD_UTF8
    return pos + n, OK


@nb.njit(cache=True, nogil=True)
def skip_value(buf, pos, end, root, kind, na, nb_, kids, max_items, snode, sstate):
    """Skip one value of node ``root`` at ``buf[pos:end]``; returns (end pos, status, items).

    Iterative, with the stack ``snode``/``sstate`` (its length is the nesting limit).
    """
    sp = -1
    items = np.int64(0)
    x = root
    st = OK
    while True:
        if x >= 0:
            k = kind[x]
            while k == N_UNION:
                br, pos, st = varint(buf, pos, end, 9)
                if st != OK:
                    return pos, st, items
                if br < 0 or br >= nb_[x]:
                    return pos, BAD_UNION, items
                x = kids[na[x] + br]
                k = kind[x]
            if k == N_BOOLEAN:
                if pos >= end:
                    return pos, TRUNCATED, items
                if buf[pos] > 1:
                    return pos, BAD_BOOLEAN, items
                pos += 1
            elif k == N_INT or k == N_LONG or k == N_ENUM:  # noqa: SIM109 (numba)
                v, pos, st = varint(buf, pos, end, 9 if k == N_LONG else 4)
                if st != OK:
                    return pos, st, items
                if k == N_ENUM and (v < 0 or v >= na[x]):
                    return pos, ENUM_OUT_OF_RANGE, items
            elif k == N_FLOAT or k == N_DOUBLE or k == N_FIXED:  # noqa: SIM109 (numba)
                width = 4 if k == N_FLOAT else (8 if k == N_DOUBLE else na[x])
                if end - pos < width:
                    return pos, TRUNCATED, items
                pos += width
            elif k == N_STRING or k == N_BYTES:  # noqa: SIM109 (numba)
                pos, st = _string(buf, pos, end, k == N_STRING)
                if st != OK:
                    return pos, st, items
            elif k != N_NULL:  # record, array, map: a frame
                sp += 1
                if sp >= len(snode):
                    return pos, TOO_DEEP, items
                snode[sp] = x
                sstate[sp] = 0
            x = -1
        if sp < 0:
            return pos, OK, items
        node = snode[sp]
        k = kind[node]
        left = sstate[sp]
        if k == N_RECORD:
            if left >= nb_[node]:
                sp -= 1
                continue
            sstate[sp] = left + 1
            x = kids[na[node] + left]
            continue
        if left == 0:  # a new block
            cnt, pos, st = varint(buf, pos, end, 9)
            if st != OK:
                return pos, st, items
            if cnt == 0:
                sp -= 1
                continue
            if cnt < 0:  # a block with its size in bytes (Java writers)
                cnt = -cnt
                size, pos, st = varint(buf, pos, end, 9)
                if st != OK:
                    return pos, st, items
                if size < 0 or size > end - pos:
                    return pos, LENGTH_PAST_END, items
            # items that may take no bytes (nulls) may outnumber the bytes left, up to the limit
            if cnt < 0 or (cnt > end - pos and (nb_[node] == 0 or cnt > max_items - items)):
                return pos, BLOCK_PAST_END, items
            items += cnt
            if items > max_items:
                return pos, TOO_MANY_ITEMS, items
            left = cnt
        sstate[sp] = left - 1
        if k == N_MAP:
            pos, st = _string(buf, pos, end, True)
            if st != OK:
                return pos, st, items
        x = na[node]


@nb.njit(cache=True, nogil=True)
def check_slices(data, offsets, skip, root, kind, na, nb_, kids, max_items, snode, sstate):
    """Index of the first value ``data[offsets[j]:offsets[j+1]]`` (where ``skip[j]`` is False)
    that is not exactly one encoded value of ``root``, or -1."""
    for j in range(len(offsets) - 1):
        if skip[j]:
            continue
        end = offsets[j + 1]
        pos, st, _ = skip_value(data, offsets[j], end, root, kind, na, nb_, kids, max_items,
                                snode, sstate)  # fmt: skip
        if st != OK or pos != end:
            return j
    return -1
