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


@njit(cache=True, inline="always")
def _count_one(hist, order, bits, t, delta):  # type: ignore[no-untyped-def]
    """Count profile tuple ``bits[t]`` into ``hist[dc, c]`` (dropped at position dc, and
    position c drops it too): additions without branches on the bits.

    This is Fig. 3 in another form: the figure adds 1 to V[r, c] for every r <= dc and every
    c >= dc whose filter dropped the tuple (its line 8 tests ``b == 0``, but the text says the
    filters that *dropped* it, as here); V is the running sum of ``hist`` over dc >= r.
    """
    n = order.shape[0]
    dc = 0
    while dc < n and bits[t, order[dc]] == 0:
        dc += 1
    if dc == n:
        return
    for c in range(dc, n):
        hist[dc, c] += delta * bits[t, order[c]]


@njit(cache=True)
def view_from_hist(hist, view, mode, j):  # type: ignore[no-untyped-def]
    """V[r, c] = tuples dropped at a position >= r that position c drops (Section 4.2.1),
    from the drop-position histogram; entries the variant does not keep are left at zero."""
    n = hist.shape[0]
    for c in range(n):
        running = 0
        for r in range(c, -1, -1):
            running += hist[r, c]
            view[r, c] = running if _kept(mode, r, c, j) else 0


@njit(cache=True)
def hist_rebuild(hist, order, bits, rows):  # type: ignore[no-untyped-def]
    """The histogram from the live profile tuples (after the order changed)."""
    hist[:, :] = 0
    for k in range(rows.shape[0]):
        _count_one(hist, order, bits, rows[k], 1)


# -- the window as counts of bit patterns ------------------------------------------------------
# For up to PATTERN_MAX_N filters the window is also kept as ``patterns[code]``: how many live
# profile tuples have the bits ``code`` (bit f set when filter f dropped the tuple). Inserting
# or expiring a tuple is then one increment, and the view for any order (the counts of
# Section 4.2.1, exactly) and Fig. 5's row recomputation scan the 2^n patterns with their
# multiplicities instead of the window's tuples one by one: the same counts, from a smaller
# table, and without the store-to-load chains of per-tuple view updates.
PATTERN_MAX_N = 10


@njit(cache=True, inline="always")
def _code(bits, t):  # type: ignore[no-untyped-def]
    """Bit pattern of profile tuple ``bits[t]`` (bit f: filter f dropped it)."""
    code = 0
    for f in range(bits.shape[1]):
        code |= np.int64(bits[t, f]) << f
    return code


@njit(cache=True)
def view_from_patterns(patterns, order, view, mode, j):  # type: ignore[no-untyped-def]
    """The view for ``order`` from the pattern counts (as :func:`view_from_hist` from the
    drop-position histogram, which is built here on the fly)."""
    n = order.shape[0]
    hist = np.zeros((n, n), dtype=np.int64)
    for code in range(patterns.shape[0]):
        count = patterns[code]
        if count == 0:
            continue
        dc = 0
        while dc < n and (code >> order[dc]) & 1 == 0:
            dc += 1
        for c in range(dc, n):
            hist[dc, c] += count * ((code >> order[c]) & 1)
    view_from_hist(hist, view, mode, j)


@njit(cache=True)
def view_row_patterns(view, r, order, patterns, mode, j):  # type: ignore[no-untyped-def]
    """:func:`view_row` (Fig. 5 lines 6-13) over the pattern counts."""
    n = order.shape[0]
    for c in range(r, n):
        view[r, c] = 0
    earlier = 0
    for q in range(r):
        earlier |= np.int64(1) << order[q]
    for code in range(patterns.shape[0]):
        count = patterns[code]
        if count == 0 or code & earlier != 0:
            continue
        for c in range(r, n):
            if (code >> order[c]) & 1 == 1 and _kept(mode, r, c, j):
                view[r, c] += count


@njit(cache=True)
def window_insert_codes(  # type: ignore[no-untyped-def]
    ring_ts, state, codes, dropped_at, n_samples, n, now_ms, window_ms, patterns, ring_codes
):
    """:func:`window_absorb` for a counted window, from the samples' bit patterns: the
    samples some filter dropped (``dropped_at`` < ``n``) enter as profile tuples, in order.
    Returns how many entered. The view is left to the caller."""
    cap = ring_ts.shape[0]
    m = 0
    for s in range(n_samples):
        m += dropped_at[s] < n
    start, size = state[0], state[1]
    if window_ms > 0:
        while size > 0 and ring_ts[start] < now_ms - window_ms:
            patterns[ring_codes[start]] -= 1
            start = start + 1 if start + 1 < cap else 0
            size -= 1
    skip = m - cap if m > cap else 0  # only the newest cap tuples can stay
    while size + (m - skip) > cap:
        patterns[ring_codes[start]] -= 1
        start = start + 1 if start + 1 < cap else 0
        size -= 1
    slot = start + size if start + size < cap else start + size - cap
    for s in range(n_samples):
        if dropped_at[s] >= n:
            continue
        if skip > 0:
            skip -= 1
            continue
        code = codes[s]
        ring_ts[slot] = now_ms
        ring_codes[slot] = code
        patterns[code] += 1
        size += 1
        slot = slot + 1 if slot + 1 < cap else 0
    state[0], state[1] = start, size
    return m


@njit(cache=True)
def window_absorb(  # type: ignore[no-untyped-def]
    ring,
    ring_ts,
    state,
    new_bits,
    m,
    now_ms,
    window_ms,
    hist,
    view,
    order,
    mode,
    j,
    patterns,
    ring_codes,
):
    """Expire profile tuples (by time, then by capacity), insert ``new_bits[:m]``, and bring the
    view up to date. ``state`` = [start, size].

    With ``patterns`` (its length 2^n, see PATTERN_MAX_N) the window is counted by bit pattern
    (``ring_codes`` keeps each slot's pattern, ``ring`` is not written) and the view rebuilt
    from those counts.
    Otherwise (``patterns`` empty) the view is kept through ``hist``, a count of profile
    tuples by (drop position, position that drops them): Fig. 3 touches up to dc * (n - dc)
    view entries per tuple, the histogram n - dc, and the view is its running sums, rebuilt
    once per call.
    """
    counted = patterns.shape[0] > 0
    cap = ring_ts.shape[0]
    width = ring.shape[1]
    start, size = state[0], state[1]
    first = 0
    if m > cap:  # only the newest cap tuples can stay
        first = m - cap
    if window_ms > 0:
        while size > 0 and ring_ts[start] < now_ms - window_ms:
            if counted:
                patterns[ring_codes[start]] -= 1
            else:
                _count_one(hist, order, ring, start, -1)
            start = start + 1 if start + 1 < cap else 0
            size -= 1
    while size + (m - first) > cap:
        if counted:
            patterns[ring_codes[start]] -= 1
        else:
            _count_one(hist, order, ring, start, -1)
        start = start + 1 if start + 1 < cap else 0
        size -= 1
    slot = start + size if start + size < cap else start + size - cap
    for t in range(first, m):
        ring_ts[slot] = now_ms
        if counted:  # the slot's pattern is all that is kept
            code = _code(new_bits, t)
            ring_codes[slot] = code
            patterns[code] += 1
        else:
            for f in range(width):
                ring[slot, f] = new_bits[t, f]
            _count_one(hist, order, ring, slot, 1)
        size += 1
        slot = slot + 1 if slot + 1 < cap else 0
    state[0], state[1] = start, size
    if counted:
        view_from_patterns(patterns, order, view, mode, j)
    else:
        view_from_hist(hist, view, mode, j)


@njit(cache=True, inline="always")
def _eligible(order, parent, pos, c, i):  # type: ignore[no-untyped-def]
    """Whether the filter at position ``c`` may run at position ``i``: its parent (a join path
    that must be probed first, Section 8.2) runs before ``i``. ``pos`` maps filter -> position."""
    p = parent[order[c]]
    return p < 0 or pos[p] < i


@njit(cache=True)
def find_violation(view, order, costs, alpha, mode, j, parent, z=0.0):  # type: ignore[no-untyped-def]
    """The first position whose invariant fails by more than ``alpha`` (eq. 4), or -1.

    ``z`` > 0 (A-Greedy+ only; 0 is eq. 4 exactly) also asks the failure to be significant:
    ``alpha * y / a_c - x / a_i`` (x = V[i, i], y = V[i, c], counts of the same profile tuples)
    must exceed ``z`` standard deviations of its sampling error. See :func:`_significant`.

    FULL: the Greedy Invariant (Def. 4.1); FIRST_ROW: the Independent Invariant (Def. 6.1);
    DIAGONAL_AND_COLUMN: the Sweep Invariant for profiled position ``j`` (Def. 5.1);
    TWO_DIAGONALS: the LocalSwaps Invariant (Def. 7.1). ``parent[f]`` (-1: none) is a filter
    that must precede ``f``; a filter is compared only at positions it may take.
    """
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    for k in range(n):
        pos[order[k]] = k
    # rows[i]: profile tuples that reach position i (their drop position is i or later; in the
    # full view V[d, d] counts those dropped exactly at d)
    rows = np.zeros(n + 1, dtype=np.float64)
    if z > 0.0:
        for d in range(n - 1, -1, -1):
            rows[d] = rows[d + 1] + view[d, d]
    for i in range(n - 1):
        mine = (view[0, i] if mode == FIRST_ROW else view[i, i]) / costs[order[i]]
        if mode == DIAGONAL_AND_COLUMN:
            if i >= j:
                return -1
            if _eligible(order, parent, pos, j, i) and mine < alpha * view[i, j] / costs[order[j]]:
                return i
            continue
        last = i + 2 if mode == TWO_DIAGONALS else n
        for c in range(i + 1, last):
            other = view[0, c] if mode == FIRST_ROW else view[i, c]
            if (
                mine < alpha * other / costs[order[c]]
                and _eligible(order, parent, pos, c, i)
                and (
                    z <= 0.0
                    or _significant(
                        view[i, i], costs[order[i]], other, costs[order[c]], alpha, z, rows[i]
                    )
                )
            ):
                return i
    return -1


@njit(cache=True, inline="always")
def _significant(x, a_x, y, a_y, alpha, z, rows):  # type: ignore[no-untyped-def]
    """Whether ``alpha * y / a_y`` exceeds ``x / a_x`` by more than ``z`` standard deviations
    of its sampling error: a one-sided z-test (see :func:`find_violation`).

    The difference is a sum over the ``rows`` profile tuples of row i of a per-tuple term
    (wy if only position c drops the tuple, -wx if only i does, wy - wx if both); its
    variance is ``rows`` times the term's. The view does not keep how many tuples both drop
    (o), and the variance falls as o grows, so the smallest o the counts allow,
    max(0, x + y - rows), is used: the test errs towards keeping the order.
    """
    wx = 1.0 / a_x
    wy = alpha / a_y
    diff = wy * y - wx * x
    if diff <= 0.0:
        return False
    both = x + y - rows
    if both < 0.0:
        both = 0.0
    var = wx * wx * x + wy * wy * y - 2.0 * wx * wy * both
    if rows > 0.0:
        var -= diff * diff / rows
    return diff * diff > z * z * var


@njit(cache=True)
def greedy_correct(view, order, ring, rows, costs, position, parent, patterns):  # type: ignore[no-untyped-def]
    """Fig. 5: from ``position`` on, recompute each row and bring its best filter forward.

    Rows are recomputed from the pattern counts when ``patterns`` is not empty, else from the
    window's tuples ``ring[rows]``.

    Fig. 5 swaps the best filter with the one in place; Fig. 6(c) shows it moved forward with
    the filters it passes keeping their relative order. Both restore the invariant and differ
    only on ties; moving reproduces the paper's worked example, so that is what is done.
    Only filters whose ``parent`` (-1: none) already runs earlier are candidates.
    Returns how many filters moved.
    """
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    moved = 0
    max_row = position
    r = position
    tmp = np.empty(n, dtype=np.int64)
    col = np.empty(n, dtype=np.int64)
    while r <= max_row:
        if patterns.shape[0] > 0:
            view_row_patterns(view, r, order, patterns, FULL, -1)
        else:
            view_row(view, r, order, ring, rows, FULL, -1)
        for k in range(n):
            pos[order[k]] = k
        best = r
        best_ratio = view[r, r] / costs[order[r]]
        for c in range(r + 1, n):
            ratio = view[r, c] / costs[order[c]]
            if ratio > best_ratio and _eligible(order, parent, pos, c, r):
                best, best_ratio = c, ratio
        if best > max_row:
            max_row = best
        if best != r:
            moved += 1
            f = order[best]
            for c in range(best, r, -1):
                order[c] = order[c - 1]
            order[r] = f
            for k in range(r + 1):
                for c in range(r, best + 1):
                    col[c] = view[k, c]
                tmp[r] = col[best]
                for c in range(r + 1, best + 1):
                    tmp[c] = col[c - 1]
                for c in range(r, best + 1):
                    view[k, c] = tmp[c]
        r += 1
    return moved
