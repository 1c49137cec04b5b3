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

from processors.kernels.splitmix import GAMMA, mix64

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


# -- fused per-batch steps ------------------------------------------------------------------
# Each batch's profiling runs right after a main pass that has swept megabytes through the
# caches, when every separate numpy call pays for cold code and data. These kernels do each
# step in one call.


@njit(cache=True, inline="always")
def _splitmix(state):  # type: ignore[no-untyped-def]
    """Next uniform double in (0, 1) from a SplitMix64 counter kept in ``state[0]``."""
    state[0] += GAMMA
    z = mix64(state[0])
    return (np.float64(z >> np.uint64(11)) + 0.5) / 9007199254740992.0


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


@njit(cache=True)
def window_absorb(  # type: ignore[no-untyped-def]
    ring, ring_ts, state, new_bits, m, now_ms, window_ms, hist, view, order, mode, j
):
    """Expire profile tuples (by time, then by capacity), insert ``new_bits[:m]``, and bring the
    view up to date. ``state`` = [start, size].

    The view is kept through ``hist``, a count of profile tuples by (drop position, position
    that drops them): Fig. 3 touches up to dc * (n - dc) view entries per tuple, the histogram
    n - dc, and the view is its running sums, rebuilt once per call.
    """
    cap = ring.shape[0]
    width = ring.shape[1]
    start, size = state[0], state[1]
    first = 0
    if m > cap:  # only the newest cap tuples can stay
        first = m - cap
    if window_ms > 0:
        while size > 0 and ring_ts[start] < now_ms - window_ms:
            _count_one(hist, order, ring, start, -1)
            start = (start + 1) % cap
            size -= 1
    while size + (m - first) > cap:
        _count_one(hist, order, ring, start, -1)
        start = (start + 1) % cap
        size -= 1
    for t in range(first, m):
        slot = (start + size) % cap
        for f in range(width):
            ring[slot, f] = new_bits[t, f]
        ring_ts[slot] = now_ms
        _count_one(hist, order, ring, slot, 1)
        size += 1
    state[0], state[1] = start, size
    view_from_hist(hist, view, mode, j)


@njit(cache=True, inline="always")
def _eligible(order, parent, pos, c, i):  # type: ignore[no-untyped-def]
    """Whether the filter at position ``c`` may run at position ``i``: its parent (a join path
    that must be probed first, Section 8.2) runs before ``i``. ``pos`` maps filter -> position."""
    p = parent[order[c]]
    return p < 0 or pos[p] < i


@njit(cache=True)
def find_violation(view, order, costs, alpha, mode, j, parent):  # type: ignore[no-untyped-def]
    """The first position whose invariant fails by more than ``alpha`` (eq. 4), or -1.

    FULL: the Greedy Invariant (Def. 4.1); FIRST_ROW: the Independent Invariant (Def. 6.1);
    DIAGONAL_AND_COLUMN: the Sweep Invariant for profiled position ``j`` (Def. 5.1);
    TWO_DIAGONALS: the LocalSwaps Invariant (Def. 7.1). ``parent[f]`` (-1: none) is a filter
    that must precede ``f``; a filter is compared only at positions it may take.
    """
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    for k in range(n):
        pos[order[k]] = k
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
            if mine < alpha * other / costs[order[c]] and _eligible(order, parent, pos, c, i):
                return i
    return -1


@njit(cache=True)
def greedy_correct(view, order, ring, rows, costs, position, parent):  # type: ignore[no-untyped-def]
    """Fig. 5: from ``position`` on, recompute each row and bring its best filter forward.

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


# -- profiling interleaved with the main pass ------------------------------------------------
# A profiled tuple's extra filters are cheapest right after the main pass has run the same
# filter: its index and the batch's column are then in cache. So the stage samples rows before
# the main pass and, after each position's selection, finds which samples it dropped and
# evaluates that position's filter on the samples dropped earlier.


@njit(cache=True)
def sample_rows(size, p, run, state, out):  # type: ignore[no-untyped-def]
    """Rows of 0..size-1, each chosen with probability ``p``, in runs of ``run`` neighbours.

    Runs start after geometric gaps with mean ``run / p - run`` rows, so a row's chance of
    being chosen is exactly ``p``. Neighbouring rows share cache lines, so profiling a run
    costs a fraction of profiling as many scattered rows; the price is less independence
    between samples from the same batch.
    """
    if p >= 1.0:
        for r in range(size):
            out[r] = r
        return size
    gap_success = 1.0 / (run / p - run + 1.0)
    log_q = np.log1p(-gap_success)
    taken = 0
    r = int(np.log(_splitmix(state)) / log_q)  # rows skipped before the first run
    while r < size and taken < out.shape[0]:
        stop = min(r + run, size)
        while r < stop and taken < out.shape[0]:
            out[taken] = r
            taken += 1
            r += 1
        r += int(np.log(_splitmix(state)) / log_q)
    return taken


@njit(cache=True)
def profile_step(k, level, m, samples, dropped_at, alive, n_alive, dead, dead_slot, n_dead):  # type: ignore[no-untyped-def]
    """After position ``k`` ran: find the alive samples it dropped (not in ``level[:m]``).

    ``alive[:n_alive]`` are indexes of samples no position has dropped yet, ascending by row;
    the dropped ones get ``dropped_at = k`` and are appended to the dead list (``dead`` rows,
    ``dead_slot`` sample indexes), which therefore holds the samples in the order they were
    dropped: the samples any later position must also evaluate are a slice of it.
    Returns (new n_alive, new n_dead).
    """
    pos = 0
    kept = 0
    for a in range(n_alive):
        s = alive[a]
        row = samples[s]
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
            alive[kept] = s
            kept += 1
        else:
            dropped_at[s] = k
            dead[n_dead] = row
            dead_slot[n_dead] = s
            n_dead += 1
    return kept, n_dead


@njit(cache=True)
def finish_profiles(dropped_at, n_samples, order, bits):  # type: ignore[no-untyped-def]
    """Keep the dropped samples' bit rows (first bit: the filter that dropped it); the rest of
    their bits were set by the extras. Compacts ``bits`` in place; returns how many."""
    n = order.shape[0]
    kept = 0
    for s in range(n_samples):
        d = dropped_at[s]
        if d < n:
            for f in range(n):
                bits[kept, f] = bits[s, f]
            bits[kept, order[d]] = 1
            kept += 1
    return kept
