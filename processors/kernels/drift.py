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

``ref`` is float64 (5, n): per position, tuples in and out summed since the last reset (the
reference rates, rows 0-1), tuples in and out not yet tested (pending, rows 2-3: small
batches add up until a test has ``min_tuples``), and the filter order the rows were counted
under (row 4): after an order change every position restarts. ``params`` is float64: [z,
min_effect, min_tuples, ref_cap, min_ref]. ``rate`` is float64: [p now, p floor, p max,
tuples since the last drift, window size from which p is at the floor, K, batches at the
floor, p of the next batch, spacing]: at the floor, only every K-th batch is profiled, at K
times the floor (as many samples, and the per-batch costs of absorbing them, the view's
rebuild above all, once in K batches). A drift found less than ``spacing`` tuples after the
previous one is not heeded (:func:`heeded_drift`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

Z, EFFECT, MIN_TUPLES, REF_CAP, MIN_REF = range(5)
P_NOW, P_MIN, P_MAX, SINCE, ENOUGH, EVERY, AT_FLOOR, P_NEXT, SPACING = range(9)
NEVER_DRIFTED = 1e18  # SINCE before the first drift: that one is always heeded
REF_IN, REF_OUT, PEND_IN, PEND_OUT, REF_ORDER = range(5)


@njit(cache=True)
def align_reference(order, ref):  # type: ignore[no-untyped-def]
    """When ``order`` is not the order the reference was counted under (``ref[REF_ORDER]``),
    restart every position (its conditional pass rate may be of another prefix) and record
    ``order``. (Keeping the rows of positions whose filter and earlier filters stayed was
    tried: more drifts at deep positions, each emptying the window, cost Fig. 19's workload
    1.1% more probes at a 20,000-tuple period; docs/adaptive-filters.md.)"""
    n = order.shape[0]
    for k in range(n):
        if ref[REF_ORDER, k] != order[k]:
            for r in range(REF_ORDER):
                for j in range(n):
                    ref[r, j] = 0.0
            for j in range(n):
                ref[REF_ORDER, j] = order[j]
            return


@njit(cache=True)
def drift_check(counts, order, ref, params):  # type: ignore[no-untyped-def]
    """The first position whose pass rate differs from its reference rate (two-proportion
    z-test with the pooled rate: more than ``z`` standard deviations and by more than
    ``min_effect`` in absolute terms), or -1. The batch's counts (``counts[k]`` tuples
    reached position k under ``order``) join a position's pending counts, tested once they
    hold ``min_tuples`` against a reference of at least ``min_ref`` (a younger reference
    takes them in untested); tested counts without drift join the reference (halved once it
    holds ``ref_cap`` tuples, so it follows slow change). With drift every position restarts.
    """
    z, effect, min_tuples = params[Z], params[EFFECT], params[MIN_TUPLES]
    cap, min_ref = params[REF_CAP], params[MIN_REF]
    align_reference(order, ref)
    found = -1
    for k in range(order.shape[0]):
        ref[PEND_IN, k] += counts[k]
        ref[PEND_OUT, k] += counts[k + 1]
        seen, base = ref[PEND_IN, k], ref[REF_IN, k]
        if base >= min_ref:
            if seen < min_tuples:
                continue
            p0 = ref[REF_OUT, k] / base
            d = ref[PEND_OUT, k] / seen - p0
            pooled = (ref[REF_OUT, k] + ref[PEND_OUT, k]) / (base + seen)
            var = pooled * (1.0 - pooled) * (1.0 / seen + 1.0 / base)
            if abs(d) > effect and d * d > z * z * var:
                found = k
                break
        ref[REF_IN, k] += seen
        ref[REF_OUT, k] += ref[PEND_OUT, k]
        ref[PEND_IN, k] = 0.0
        ref[PEND_OUT, k] = 0.0
        if ref[REF_IN, k] > cap:
            ref[REF_IN, k] *= 0.5
            ref[REF_OUT, k] *= 0.5
    if found >= 0:
        for r in range(REF_ORDER):
            ref[r, :] = 0.0
    return found


COST_MOVE = 0.05  # an a_i that moved by more than this share calls for a check (costs_moved)


@njit(cache=True)
def costs_moved(costs, checked):  # type: ignore[no-untyped-def]
    """Whether some a_i (``costs``) moved by more than ``COST_MOVE`` of its value at the last
    check (``checked``): eq. 4 weighs the view by the a_i, so A-Greedy+ then checks again even
    though no profile tuple came (at p's floor, most batches)."""
    for f in range(costs.shape[0]):  # noqa: SIM110 (a loop numba compiles)
        if abs(costs[f] - checked[f]) > COST_MOVE * checked[f]:
            return True
    return False


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
def heeded_drift(rate, found, tuples, out):  # type: ignore[no-untyped-def]
    """The drift test's ``found`` (a position, or -1) on a batch of ``tuples`` if it is to be
    answered (the window emptied, p back at its maximum), else -1, with ``out[1]`` set to 1
    for a drift found but not heeded: a drift is heeded only when the previous one was at
    least ``rate[SPACING]`` tuples before it. When the statistics change faster than that,
    each answer's refill at the maximum p takes much of the time to the next change and its
    orders rest on a few hundred profile tuples; the stage then adapts as the paper's
    A-Greedy does, on the window's significant violations (Fig. 19's short periods;
    docs/adaptive-filters.md). Called on every batch: it counts the tuples."""
    rate[SINCE] += tuples
    out[1] = 0
    if found < 0:
        return -1
    heeded = rate[SINCE] >= rate[SPACING]
    rate[SINCE] = 0.0
    if heeded:
        return found
    out[1] = 1
    return -1


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
    """An empty reference for ``n`` positions (counted under no order yet)."""
    ref = np.zeros((REF_ORDER + 1, max(n, 1)), dtype=np.float64)
    ref[REF_ORDER] = -1.0
    return ref


CHANGE_LEVEL = 1.63  # the Kolmogorov distribution's 1% point (a Brownian bridge's maximum)


@njit(cache=True)
def change_row(sels, counts, k, size):  # type: ignore[no-untyped-def]
    """The first row after the pass rate at position ``k`` changed within a batch (``sels[k]``:
    the rows that reached k, ascending, ``sels[k + 1]`` those that passed; ``counts``, how
    many): after the largest excursion of the centred running sum of its pass indicators, if
    that is significant at the 1% level (CUSUM, a Brownian bridge's maximum), else 0 (the
    batch is taken to be new as a whole, the change to have come before it). One pass over
    the rows (``size`` is the batch's, unused here; numpy's version took ~160 µs a drift at
    10,000 rows, a tenth of A-Greedy+'s overhead at Fig. 19's shortest period)."""
    reached, passed = counts[k], counts[k + 1]
    if reached < 2 or passed == 0 or passed == reached:
        return 0
    mean = passed / reached
    j = 0
    walk = 0.0
    best = -1.0
    at = 0
    for i in range(reached):
        x = 0.0
        if j < passed and sels[k + 1, j] == sels[k, i]:
            x = 1.0
            j += 1
        walk += x - mean
        if abs(walk) > best:
            best = abs(walk)
            at = i
    noise = np.sqrt(reached * mean * (1.0 - mean))
    return sels[k, at] + 1 if best > CHANGE_LEVEL * noise else 0
