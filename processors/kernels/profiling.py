"""Drop profiling of sampled rows (Section 4.1 of Babu et al.): which filter drops a sample first
(its drop position), what the later filters do with it, and the batch's profile tuples going
into the profile window and view (:mod:`processors.kernels.profile_view`) in one call.

Each batch's profiling runs right after a main pass that has swept megabytes through the
caches, when every separate numpy call pays for cold code and data. These kernels do each step
in one call.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.drift import costs_moved, resort_due
from processors.kernels.intrinsics import cycles
from processors.kernels.profile_view import (
    PATTERN_MAX_N,
    find_violation,
    greedy_correct,
    hist_rebuild,
    view_from_hist,
    view_from_patterns,
    window_absorb,
    window_insert_codes,
)
from processors.kernels.splitmix import GAMMA, mix64


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


@njit(cache=True, inline="always")
def _splitmix(state):  # type: ignore[no-untyped-def]
    """Next uniform double in (0, 1) from a SplitMix64 counter kept in ``state[0]``."""
    state[0] += GAMMA
    z = mix64(state[0])
    return (np.float64(z >> np.uint64(11)) + 0.5) / 9007199254740992.0


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


@njit(cache=True)
def start_profiles(size, p, run, state, samples, dropped_at, bits, codes):  # type: ignore[no-untyped-def]
    """Sample rows (:func:`sample_rows`), mark them undropped (``dropped_at`` = n) and clear
    their bits and bit patterns (``codes``). Returns how many rows were sampled."""
    if p <= 0.0:
        return 0
    n_samples = sample_rows(size, p, run, state, samples)
    n = bits.shape[1]
    for s in range(n_samples):
        dropped_at[s] = n
        codes[s] = 0
        if n > PATTERN_MAX_N:  # else the patterns alone are kept (see _profile_position)
            for f in range(n):
                bits[s, f] = 0
    return n_samples


@njit(cache=True)
def absorb_samples(dropped_at, n_samples, bits, codes, order, mode, j, window):  # type: ignore[no-untyped-def]
    """The rest of a batch's profiling and re-optimization in one call: keep the dropped
    samples' bit rows (:func:`finish_profiles`), put them in the window with the view
    (:func:`window_absorb`; with pattern counts and the samples' ``codes`` (an empty array:
    none), :func:`window_insert_codes`) and, once it holds ``min_check`` profile tuples
    (-1: never), look for a violation (:func:`find_violation`);
    with ``correct`` (A-Greedy), correct it at once (:func:`greedy_correct`, then the view for
    the new order), keeping the old order in ``before``. Returns (profile tuples, position of
    the violation or -1, filters the correction moved, window size, :func:`cycles` spent on
    the window and view, cycles spent on violations).

    ``window`` (built by the re-optimizer) is (ring, ring_ts, state, now_ms as a one-element
    array, window_ms, hist, view, patterns, ring_codes, min_check, costs, alpha, parent,
    correct, before, z, checkpoint, checked: the a_i of the last check, which it updates);
    ``z`` > 0 makes detection ask for significance and
    ``checkpoint`` (int64, ``checkpoint[0]`` -1: never) makes Fig. 5 also run from the first
    position when the window has doubled (A-Greedy+, see :func:`find_violation` and
    :func:`processors.kernels.drift.resort_due`)."""
    (ring, ring_ts, state, now, window_ms, hist, view, patterns, ring_codes, min_check,
     costs, alpha, parent, correct, before, z, checkpoint, checked) = window  # fmt: skip
    now_ms = now[0]
    t0 = cycles()
    held = (state[0], state[1])
    if patterns.shape[0] > 0 and codes.shape[0] > 0:  # the samples' patterns are ready
        m = window_insert_codes(
            ring_ts, state, codes, dropped_at, n_samples, order.shape[0], now_ms, window_ms,
            patterns, ring_codes,
        )  # fmt: skip
        # A-Greedy+ (z > 0) skips a window that did not change: its view stands, and so do
        # its checks unless an a_i moved since the last one
        if z <= 0.0 or m > 0 or held[0] != state[0] or held[1] != state[1]:
            view_from_patterns(patterns, order, view, mode, j)
        elif not costs_moved(costs, checked):
            min_check = -1
    else:
        m = finish_profiles(dropped_at, n_samples, order, bits)
        window_absorb(
            ring, ring_ts, state, bits, m, now_ms, window_ms, hist, view, order, mode, j,
            patterns, ring_codes,
        )  # fmt: skip
    t2 = cycles()
    found = -1
    moved = 0
    if 0 <= min_check <= state[1]:
        checked[:] = costs
        found = find_violation(view, order, costs, alpha, mode, j, parent, z)
        if correct and resort_due(checkpoint, state[1], ring_ts.shape[0]) and found < 0:
            found = 0  # A-Greedy+: the window doubled, Fig. 5 from the first position
    if found >= 0 and correct:
        for k in range(order.shape[0]):
            before[k] = order[k]
        cap = ring_ts.shape[0]
        size = state[1] if patterns.shape[0] == 0 else 0
        rows = np.empty(size, dtype=np.int64)
        for k in range(size):
            rows[k] = (state[0] + k) % cap
        moved = greedy_correct(view, order, ring, rows, costs, found, parent, patterns)
        if patterns.shape[0] > 0:
            view_from_patterns(patterns, order, view, mode, j)
        else:
            hist_rebuild(hist, order, ring, rows)
            view_from_hist(hist, view, mode, j)
    t3 = cycles()
    return m, found, moved, state[1], t2 - t0, t3 - t2
