"""Key coding: dense codes for the (multi-column) keys of a batch's rows.

The window stage (PARTITION BY) and the aggregate stage (GROUP BY) both need, per batch, a dense
code per row such that equal keys get equal codes, and one row of each code, so that Python
looks at each distinct key once. Numeric columns are coded by ``np.unique`` over a canonical
int64 (floats: 0.0 == -0.0 and one NaN, as GROUP BY compares values); string and bytes columns
are hashed here in numba, grouped by ``np.unique`` on the hashes and verified byte for byte
(a 64-bit collision falls back to exact Python coding). No caller depends on the hash values
themselves: they only group, and the verification makes the grouping exact.

Columns are duck-typed: a numpy array is numeric, anything else is a variable-length column
with ``offsets`` and ``data`` (``core.batch.VarColumn``), so that ``kernels`` imports nothing
from ``core``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from processors.kernels.splitmix import mix64

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit(cache=True)
def hash_var(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each variable-length value: FNV-1a over the bytes, then the length
    mixed in and a SplitMix64 finalizer, so that short keys spread over all 64 bits."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = _FNV_OFFSET
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * _FNV_PRIME
        out[i] = mix64(h ^ np.uint64(offsets[i + 1] - offsets[i]))
    return out


@njit(cache=True)
def same_as_representative(
    offsets: np.ndarray, data: np.ndarray, codes: np.ndarray, reps: np.ndarray
) -> bool:
    """Whether every value i equals the value at row ``reps[codes[i]]``: equal hashes were
    equal keys (a collision sends the caller to its exact, slower path)."""
    for i in range(codes.shape[0]):
        r = reps[codes[i]]
        a, b = offsets[i], offsets[r]
        length = offsets[i + 1] - a
        if offsets[r + 1] - b != length:
            return False
        for j in range(length):
            if data[a + j] != data[b + j]:
                return False
    return True


def canonical_int64(col: np.ndarray) -> np.ndarray:
    """Numeric keys as int64 that are equal iff the values are (floats: 0.0 == -0.0 and every
    NaN one key, as numpy's unique has it; uint64 wraps, which keeps it one-to-one)."""
    if col.dtype.kind == "f":
        v = col.astype(np.float64)
        v = np.where(v == 0.0, 0.0, v)
        v = np.where(np.isnan(v), np.nan, v)
        return v.view(np.int64)
    return col.astype(np.int64)


def _unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, first row of each code) of ``values`` (one sort)."""
    _, first, codes = np.unique(values, return_index=True, return_inverse=True)
    return codes.reshape(-1).astype(np.int64), first.astype(np.int64)


def var_codes(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes of string/bytes values and the first row of each code."""
    codes, first = _unique(hash_var(offsets, data))
    if same_as_representative(offsets, data, codes, first):
        return codes, first
    seen: dict[bytes, int] = {}  # a 64-bit hash collision: code the values exactly instead
    raw = [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]
    return _unique(np.array([seen.setdefault(v, len(seen)) for v in raw], np.int64))


def column_codes(col: Any) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes of one key column (numpy array or offsets/data column) and a row of each."""
    if isinstance(col, np.ndarray):
        return _unique(canonical_int64(col))
    return var_codes(col.offsets, col.data)


def key_codes(cols: Sequence[Any], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense codes of the rows' key tuples over ``cols`` (``n`` rows; no column: one key),
    and the first row of each code."""
    if not cols:
        return np.zeros(n, np.int64), np.zeros(1 if n else 0, np.int64)
    codes, first = column_codes(cols[0])
    for col in cols[1:]:
        more = column_codes(col)[0]
        # both codes are < n, so this stays below n**2: no overflow
        codes, first = _unique(codes * (int(more.max(initial=0)) + 1) + more)
    return codes, first
