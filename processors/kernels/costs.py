"""Per-filter cost estimates a_i in one kernel call (Section 4.4): rings of the last timed calls."""

from __future__ import annotations

from numba import njit


@njit(cache=True)
def record_costs(  # type: ignore[no-untyped-def]
    ring_ns, ring_tuples, nxt, sums, filters, ns, tuples, k, overhead_ns, min_tuples, values
):
    """Put ``k`` timed calls (filter, ns, tuples evaluated) in the per-filter rings of the last
    samples (``sums`` = [ns; tuples] over each ring), then ``values[f]`` = a_f, the running
    average time per tuple (a filter never timed: the mean of the timed ones, or 1)."""
    width = ring_ns.shape[1]
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
    n = values.shape[0]
    total = 0.0
    timed = 0
    for f in range(n):
        if sums[1, f] > 0:
            values[f] = max(sums[0, f] / sums[1, f], 1e-3)
            total += values[f]
            timed += 1
    for f in range(n):
        if not sums[1, f] > 0:
            values[f] = total / timed if timed else 1.0
