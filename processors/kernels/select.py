"""Selection kernels: one filter over a selection vector of row numbers.

A conjunction of filters runs as a chain of these calls, each keeping only the rows of its input
selection that pass, in order. That is per-tuple short-circuiting (a tuple meets a filter only if
every earlier filter passed it) without per-tuple dispatch on the filter kind: the kind is chosen
once per call, and the loop inside is tight numba code.

Every kernel has the shape ``kernel(<column...>, <constants...>, sel, n, out) -> m``: it reads
rows ``sel[:n]`` and writes the ``m`` passing ones to ``out[:m]`` (``out`` may alias ``sel``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

LT, LE, GT, GE, EQ, NE = range(6)
OPS = {"<": LT, "<=": LE, ">": GT, ">=": GE, "==": EQ, "!=": NE}


@njit(cache=True, inline="always")
def _holds(cmp: int, op: int) -> bool:
    """Whether ``op`` holds given the three-way comparison ``cmp`` of value against constant."""
    if op == LT:
        return cmp < 0
    if op == LE:
        return cmp <= 0
    if op == GT:
        return cmp > 0
    if op == GE:
        return cmp >= 0
    if op == EQ:
        return cmp == 0
    return cmp != 0


@njit(cache=True)
def select_compare(col, op, value, sel, n, out):  # type: ignore[no-untyped-def]
    """Rows whose numeric ``col`` value satisfies ``col <op> value`` (NaN fails all but !=)."""
    m = 0
    for i in range(n):
        row = sel[i]
        v = col[row]
        if op == LT:
            ok = v < value
        elif op == LE:
            ok = v <= value
        elif op == GT:
            ok = v > value
        elif op == GE:
            ok = v >= value
        elif op == EQ:
            ok = v == value
        else:
            ok = v != value
        if ok:
            out[m] = row
            m += 1
    return m


@njit(cache=True)
def select_between(col, low, high, sel, n, out):  # type: ignore[no-untyped-def]
    """Rows with ``low <= col <= high`` (SQL BETWEEN, both ends included)."""
    m = 0
    for i in range(n):
        row = sel[i]
        v = col[row]
        if v >= low and v <= high:
            out[m] = row
            m += 1
    return m


@njit(cache=True)
def select_isin(col, sorted_values, sel, n, out):  # type: ignore[no-untyped-def]
    """Rows whose value is in ``sorted_values`` (binary search; the set is sorted once)."""
    m = 0
    k = sorted_values.shape[0]
    for i in range(n):
        row = sel[i]
        v = col[row]
        j = np.searchsorted(sorted_values, v)
        if j < k and sorted_values[j] == v:
            out[m] = row
            m += 1
    return m


@njit(cache=True, inline="always")
def _compare_bytes(data, start, stop, const) -> int:  # type: ignore[no-untyped-def]
    """Three-way lexicographic comparison of ``data[start:stop]`` with ``const`` (bytes order)."""
    la = stop - start
    lb = const.shape[0]
    k = la if la < lb else lb
    for j in range(k):
        a = data[start + j]
        b = const[j]
        if a != b:
            return -1 if a < b else 1
    if la == lb:
        return 0
    return -1 if la < lb else 1


@njit(cache=True)
def select_var_compare(offsets, data, op, const, sel, n, out):  # type: ignore[no-untyped-def]
    """Rows whose string/bytes value satisfies ``value <op> const`` in byte order (UTF-8 keeps
    code-point order, so this is also the order of the strings)."""
    m = 0
    for i in range(n):
        row = sel[i]
        if _holds(_compare_bytes(data, offsets[row], offsets[row + 1], const), op):
            out[m] = row
            m += 1
    return m


@njit(cache=True)
def select_var_between(offsets, data, low, high, sel, n, out):  # type: ignore[no-untyped-def]
    m = 0
    for i in range(n):
        row = sel[i]
        a, b = offsets[row], offsets[row + 1]
        if _compare_bytes(data, a, b, low) >= 0 and _compare_bytes(data, a, b, high) <= 0:
            out[m] = row
            m += 1
    return m


@njit(cache=True)
def select_var_isin(offsets, data, cand_offsets, cand_data, sel, n, out):  # type: ignore[no-untyped-def]
    """Rows whose string/bytes value equals one of the candidates (a short list, scanned)."""
    m = 0
    k = cand_offsets.shape[0] - 1
    for i in range(n):
        row = sel[i]
        a, b = offsets[row], offsets[row + 1]
        for c in range(k):
            if _compare_bytes(data, a, b, cand_data[cand_offsets[c] : cand_offsets[c + 1]]) == 0:
                out[m] = row
                m += 1
                break
    return m


@njit(cache=True)
def select_udf(predicate, col, sel, n, out):  # type: ignore[no-untyped-def]
    """Rows for which the user's numba-jitted ``predicate(value) -> bool`` holds."""
    m = 0
    for i in range(n):
        row = sel[i]
        if predicate(col[row]):
            out[m] = row
            m += 1
    return m
