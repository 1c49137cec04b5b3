"""A-Greedy+'s adaptive profiling rate: drift in the main pass's pass counters, and p.

The main pass already counts, per position k, the tuples that reach it and the tuples that
pass it (``counts[k]`` and ``counts[k + 1]``): their ratio is the conditional selectivity the
matrix view's diagonal estimates from profile tuples (Section 4.2 of Babu et al.), measured on
every tuple rather than a 1% sample. While those ratios hold still, the order's cost and its
diagonal do too, so drop profiling can back off (the paper's Section 10 asks for such a rate);
when a ratio moves, the window's profile tuples describe the old statistics: it is emptied and
p goes back to its maximum at once (see docs/adaptive-filters.md).

A window just emptied fills while A-Greedy+ corrects only significant violations, so the
positions a first correction ordered on its first few profile tuples would keep that order
however much the window later learns; so Fig. 5 also runs from position 0 whenever the
window has doubled since the emptying, up to its capacity (``checkpoint``: int64 [next
size, fired, first size]; see :func:`resort_due`).

``ref`` is float64 (2, n): per position, tuples in and out summed since the last reset (the
reference rates). ``params`` is float64: [z, min_effect, min_tuples, ref_cap]. ``rate`` is
float64: [p now, p floor, p max, (unused), window size from which p is at the floor, K,
batches at the floor, p of the next batch]: at the floor, only every K-th batch is
profiled, at K times the floor (as many samples, and the per-batch costs of absorbing them,
the view's rebuild above all, once in K batches).
"""

from __future__ import annotations

import numpy as np
from numba import njit

Z, EFFECT, MIN_TUPLES, REF_CAP = range(4)
P_NOW, P_MIN, P_MAX, _UNUSED, ENOUGH, EVERY, AT_FLOOR, P_NEXT = range(8)


@njit(cache=True)
def drift_check(counts, n, ref, params):  # type: ignore[no-untyped-def]
    """The first position whose pass rate in this batch differs from its reference rate
    (two-proportion z-test: more than ``z`` standard deviations and by more than
    ``min_effect`` in absolute terms), or -1. Without drift the batch joins the reference
    (halved once it holds ``ref_cap`` tuples, so it follows slow change); with drift the
    reference is reset."""
    z, effect, min_tuples, cap = params[Z], params[EFFECT], params[MIN_TUPLES], params[REF_CAP]
    found = -1
    for k in range(n):
        seen = counts[k]
        if seen < min_tuples:
            break  # later positions see fewer tuples still
        base = ref[0, k]
        if base < min_tuples:
            continue
        p0 = ref[1, k] / base
        d = counts[k + 1] / seen - p0
        if d < 0.0:
            d = -d
        var = p0 * (1.0 - p0) * (1.0 / seen + 1.0 / base)
        if d > effect and d * d > z * z * var:
            found = k
            break
    if found >= 0:
        ref[:, :] = 0.0
        return found
    for k in range(n):
        ref[0, k] += counts[k]
        ref[1, k] += counts[k + 1]
        if ref[0, k] > cap:
            ref[0, k] *= 0.5
            ref[1, k] *= 0.5
    return -1


@njit(cache=True)
def clear_window(state, patterns, hist, view):  # type: ignore[no-untyped-def]
    """Empty the profile window and its view (its tuples describe statistics that no longer
    hold)."""
    state[0] = 0
    state[1] = 0
    patterns[:] = 0
    hist[:, :] = 0
    view[:, :] = 0


@njit(cache=True)
def next_rate(rate, reset, size):  # type: ignore[no-untyped-def]
    """The profiling probability for the next batch: the maximum after drift or an order
    change (``reset``) and while the window holds fewer than ``rate[ENOUGH]`` profile tuples,
    else the floor. Returns it.

    After a reset the window is refilled at once: the first corrections need its first few
    hundred profile tuples. Beyond them it keeps growing at the floor, slowly, and the
    re-sorts as it doubles (:func:`resort_due`) order the deep positions on what it gains.
    (A rate falling as 1 / size from there was tried; see docs/adaptive-filters.md.)"""
    if reset or size < rate[ENOUGH]:
        rate[P_NOW] = rate[P_MAX]
    else:
        rate[P_NOW] = rate[P_MIN]
    if rate[P_NOW] > rate[P_MIN]:
        rate[AT_FLOOR] = 0.0
        rate[P_NEXT] = rate[P_NOW]
    else:
        rate[AT_FLOOR] += 1.0
        due = rate[AT_FLOOR] % rate[EVERY] == 0.0
        rate[P_NEXT] = rate[P_MIN] * rate[EVERY] if due else 0.0
    return rate[P_NEXT]


@njit(cache=True)
def resort_due(checkpoint, size, capacity):  # type: ignore[no-untyped-def]
    """Whether the window (``size`` profile tuples) reached the next re-sort point; if so,
    the point moves on (twice the size, the capacity last, then never) and ``fired`` is
    set."""
    due = 0 <= checkpoint[0] <= size
    checkpoint[1] = 1 if due else 0
    if due:
        if size >= capacity:
            checkpoint[0] = -1
        else:
            checkpoint[0] = 2 * size if 2 * size < capacity else capacity
    return due


@njit(cache=True)
def resort_restart(checkpoint):  # type: ignore[no-untyped-def]
    """After the window was emptied: re-sort again as it refills."""
    checkpoint[0] = 2 * checkpoint[2]


def new_checkpoint(min_profile_tuples: int) -> np.ndarray:
    """Re-sort points for a window checked from ``min_profile_tuples`` on."""
    return np.array([2 * min_profile_tuples, 0, min_profile_tuples], dtype=np.int64)


def new_reference(n: int) -> np.ndarray:
    """An empty reference for ``n`` positions."""
    return np.zeros((2, max(n, 1)), dtype=np.float64)
