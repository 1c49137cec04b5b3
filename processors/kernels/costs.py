"""Per-filter cost estimates a_i in one kernel call (Section 4.4): rings of the last timed calls."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def record_costs(  # type: ignore[no-untyped-def]
    ring_ns, ring_tuples, nxt, sums, filters, ns, tuples, k, overhead_ns, min_tuples, values
):
    """Put ``k`` timed calls (filter, ns, tuples evaluated) in the per-filter rings of the last
    samples (``sums`` = [ns; tuples] over each ring), then ``values[f]`` = a_f, the median
    time per tuple over the ring's calls (a filter never timed: the mean of the timed ones,
    or 1).

    The median, not total time over total tuples: one call stalled by the scheduler or by a
    thread holding the GIL (milliseconds, against microseconds of work) would otherwise
    multiply a_f for the ring's whole life and put a selective filter behind unselective ones
    (seen on a loaded 2-core CI machine). Half the ring must change before a_f does."""
    width = ring_ns.shape[1]
    touched = np.zeros(values.shape[0], dtype=np.bool_)
    for i in range(k):
        m = tuples[i]
        if m < min_tuples:
            continue
        f = filters[i]
        slot = nxt[f] % width
        work = max(ns[i] - overhead_ns, 0.0)
        sums[0, f] += work - ring_ns[f, slot]
        sums[1, f] += m - ring_tuples[f, slot]
        ring_ns[f, slot] = work
        ring_tuples[f, slot] = m
        nxt[f] += 1
        touched[f] = True
    n = values.shape[0]
    for f in range(n):
        if touched[f]:
            filled = min(nxt[f], width)
            rates = ring_ns[f, :filled] / ring_tuples[f, :filled]
            values[f] = max(np.median(rates), 1e-3)
    total = 0.0
    timed = 0
    for f in range(n):
        if sums[1, f] > 0:
            total += values[f]
            timed += 1
    for f in range(n):
        if not sums[1, f] > 0:
            values[f] = total / timed if timed else 1.0
