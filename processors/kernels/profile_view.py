"""Kernels over the profile window and its matrix view (A-Greedy, Section 4.2 of Babu et al.).

Profile tuples are rows of a ``uint8`` matrix, one column per filter *id*: ``bits[t, f] == 1``
when filter ``f`` dropped profiled tuple ``t``. The matrix view ``V`` is indexed by *position*
in the current order ``order`` (``order[c]`` is the filter at position ``c``): ``V[r, c]`` counts
profile tuples not dropped by positions ``0..r-1`` that position ``c`` drops.

Variants keep only some entries of ``V`` (Fig. 7 of the paper); ``mode`` says which:
full upper triangle (A-Greedy), the first row (Independent), the diagonal plus column ``j``
(Sweep profiling position ``j``), or the two main diagonals (LocalSwaps).
"""

from __future__ import annotations

import numpy as np
from numba import njit

FULL, FIRST_ROW, DIAGONAL_AND_COLUMN, TWO_DIAGONALS = range(4)


@njit(cache=True, inline="always")
def _kept(mode: int, r: int, c: int, j: int) -> bool:
    if mode == FULL:
        return True
    if mode == FIRST_ROW:
        return r == 0
    if mode == DIAGONAL_AND_COLUMN:
        return c == r or c == j  # noqa: SIM109 (plain compares compile simplest in numba)
    return c == r or c == r + 1


@njit(cache=True)
def view_apply(view, order, bits, rows, delta, mode, j):  # type: ignore[no-untyped-def]
    """Add ``delta`` (+1 insert, -1 delete) for each profile tuple ``bits[rows[k]]``: Fig. 3.

    The figure's line 8 tests ``b == 0``; the text says the entries of the filters that
    *dropped* the tuple are incremented, which is what is done here (``b == 1``).
    """
    n = order.shape[0]
    for k in range(rows.shape[0]):
        t = rows[k]
        dc = 0
        while dc < n and bits[t, order[dc]] == 0:
            dc += 1
        if dc == n:  # a tuple no filter dropped counts nowhere
            continue
        for c in range(dc, n):
            if bits[t, order[c]] == 1:
                for r in range(dc + 1):
                    if _kept(mode, r, c, j):
                        view[r, c] += delta


@njit(cache=True)
def view_row(view, r, order, bits, rows, mode, j):  # type: ignore[no-untyped-def]
    """Recompute row ``r`` of the view from the live profile tuples ``rows``: Fig. 5 lines 6-13."""
    n = order.shape[0]
    for c in range(r, n):
        view[r, c] = 0
    for k in range(rows.shape[0]):
        t = rows[k]
        alive = True
        for p in range(r):
            if bits[t, order[p]] == 1:
                alive = False
                break
        if not alive:
            continue
        for c in range(r, n):
            if bits[t, order[c]] == 1 and _kept(mode, r, c, j):
                view[r, c] += 1


@njit(cache=True)
def drop_positions(sels, counts, sampled, out):  # type: ignore[no-untyped-def]
    """For each sampled row (ascending), the position that dropped it in the main pass (n if none).

    ``sels[k, :counts[k]]`` are the (ascending) rows that reached position ``k``. Level by level,
    the sampled rows still alive are looked up in the next level with a galloping search that
    resumes where the previous row was found, so the lookups walk each level once, in order,
    instead of binary-searching it from scratch (which missed the cache on every step).
    """
    n = sels.shape[0] - 1
    total = sampled.shape[0]
    alive = sampled.copy()
    slot = np.arange(total)
    for s in range(total):
        out[s] = n
    live = total
    for k in range(n):
        level = sels[k + 1]
        m = counts[k + 1]
        pos = 0
        kept = 0
        for a in range(live):
            row = alive[a]
            lo = pos
            step = 1
            hi = lo
            while hi < m and level[hi] < row:
                lo = hi + 1
                hi = lo + step
                step *= 2
            if hi > m:
                hi = m
            while lo < hi:
                mid = (lo + hi) >> 1
                if level[mid] < row:
                    lo = mid + 1
                else:
                    hi = mid
            pos = lo
            if lo < m and level[lo] == row:
                alive[kept] = row
                slot[kept] = slot[a]
                kept += 1
            else:
                out[slot[a]] = k
        live = kept
        if live == 0:
            break


@njit(cache=True)
def mark_dropped(candidates, passed, m, targets, bits, f):  # type: ignore[no-untyped-def]
    """Set ``bits[targets[i], f] = 1`` for each candidate row not among ``passed[:m]``.

    Both row lists ascend and ``passed`` is a subsequence of ``candidates`` (what a selection
    kernel returns), so one merge walk finds the dropped ones.
    """
    j = 0
    for i in range(candidates.shape[0]):
        if j < m and passed[j] == candidates[i]:
            j += 1
        else:
            bits[targets[i], f] = 1
