"""Window kernels: admission of (possibly out-of-order) tuples and the delta events of windows.

The window stage (``processors.stages.window_stage``) keeps its window contents in slots of a
store, in row-id order. Per batch it classifies the arrivals (in order, out of order within
the lateness bound, or possibly late), runs the exact admission kernel (a heap replaying the
arrivals: which tuples enter, in which order, which are late) only when a tuple may be late,
and then one event kernel (which slots each admitted tuple deletes), so that Python runs once
per batch and the per-tuple work is here. Semantics:
``docs/windows-and-joins.md``, sections "Delta streams" and "Late and out-of-order data".

An event kernel writes the delta stream as three parallel arrays: the store slot of the tuple
(its values and row id live there), the sign (+1 insert, -1 delete) and the delta's timestamp.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# -- admission ----------------------------------------------------------------------------------
IN_ORDER, BOUNDED, LATE_POSSIBLE = 0, 1, 2


@njit(cache=True)
def classify_arrivals(ts: np.ndarray, n_buf: int, lateness: int, state: np.ndarray) -> int:
    """How the arrivals ``ts[n_buf:]`` (after the buffered ``ts[:n_buf]``) may be admitted.

    IN_ORDER: all of ``ts`` is non-decreasing and nothing is late. BOUNDED: no arrival lies
    below the watermark before it (``max_ts - lateness``) nor below the last admitted ts, so
    nothing is late and the admission order is a stable sort by ts. LATE_POSSIBLE: only
    :func:`admit` knows. ``state`` is ``[max_ts, last admitted ts]``; it is not changed.
    """
    max_ts = state[0]
    last = state[1]
    ordered = True
    for i in range(n_buf, ts.shape[0]):
        t = ts[i]
        if t < last or (max_ts > t and max_ts - t > lateness):
            return LATE_POSSIBLE
        if i > 0 and ts[i - 1] > t:
            ordered = False
        if t > max_ts:
            max_ts = t
    return IN_ORDER if ordered else BOUNDED


@njit(cache=True, inline="always")
def _before(ta: int, a: int, tb: int, b: int) -> bool:
    """Admission order of candidates a and b: timestamp, then arrival (candidate index)."""
    return ta < tb or (ta == tb and a < b)


@njit(cache=True, inline="always")
def _heap_push(hts: np.ndarray, hix: np.ndarray, n: int, t: int, item: int) -> None:
    """Add ``item`` (ts ``t``) to the min-heap ``hts/hix[:n]``. Each entry keeps its ts next to
    its index: comparing through ``ts[heap[i]]`` instead runs several times slower."""
    i = n
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(t, item, hts[parent], hix[parent]):
            break
        hts[i] = hts[parent]
        hix[i] = hix[parent]
        i = parent
    hts[i] = t
    hix[i] = item


@njit(cache=True, inline="always")
def _heap_pop(hts: np.ndarray, hix: np.ndarray, n: int) -> int:
    """Remove and return the first item of the min-heap ``hts/hix[:n]`` (n > 0)."""
    top = hix[0]
    n -= 1
    t = hts[n]
    item = hix[n]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _before(hts[child + 1], hix[child + 1], hts[child], hix[child]):
            child += 1
        if not _before(hts[child], hix[child], t, item):
            break
        hts[i] = hts[child]
        hix[i] = hix[child]
        i = child
    hts[i] = t
    hix[i] = item
    return top


@njit(cache=True)
def admit(
    ts: np.ndarray,
    n_buf: int,
    lateness: int,
    state: np.ndarray,
    admitted: np.ndarray,
    late: np.ndarray,
    late_last: np.ndarray,
    late_max: np.ndarray,
    heap: np.ndarray,
    heap_ts: np.ndarray,
) -> tuple[int, int, int]:
    """Replay the arrivals ``ts[n_buf:]`` through the lateness buffer, tuple by tuple.

    Candidates ``0..n_buf-1`` are the tuples buffered before, sorted in admission order (a sorted
    array is a valid heap, so the buffer needs no rebuilding); the rest arrive in index order.
    ``state`` is ``[max_ts, last admitted ts]`` and is updated. A tuple below the last admitted
    ts is late (written to ``late`` with the state it met, for its dead-letter reason); the
    others are buffered and admitted in (ts, arrival) order once ``ts <= max_ts - lateness``.
    Returns (admitted count, late count, tuples left in ``heap``).
    """
    max_ts = state[0]
    last = state[1]
    n_heap = n_buf
    for i in range(n_buf):
        heap[i] = i
        heap_ts[i] = ts[i]
    n_adm = 0
    n_late = 0
    for i in range(n_buf, ts.shape[0]):
        t = ts[i]
        if t < last:
            late[n_late] = i
            late_last[n_late] = last
            late_max[n_late] = max_ts
            n_late += 1
            continue
        if t > max_ts:
            max_ts = t
        if n_heap == 0 and max_ts - t >= lateness:
            admitted[n_adm] = i  # fast path: nothing buffered, nothing to reorder
            n_adm += 1
            last = t
            continue
        _heap_push(heap_ts, heap, n_heap, t, i)
        n_heap += 1
        while n_heap > 0 and max_ts - heap_ts[0] >= lateness:
            last = heap_ts[0]
            admitted[n_adm] = _heap_pop(heap_ts, heap, n_heap)
            n_heap -= 1
            n_adm += 1
    state[0] = max_ts
    state[1] = last
    return n_adm, n_late, n_heap


# -- delta events -------------------------------------------------------------------------------
@njit(cache=True, inline="always")
def _emit(
    m: int,
    slot: int,
    sign: int,
    t: int,
    out_slot: np.ndarray,
    out_sign: np.ndarray,
    out_ts: np.ndarray,
) -> int:
    out_slot[m] = slot
    out_sign[m] = sign
    out_ts[m] = t
    return m + 1


@njit(cache=True)
def rows_events(
    start: int,
    end: int,
    n_new: int,
    size: int,
    ts: np.ndarray,
    out_slot: np.ndarray,
    out_sign: np.ndarray,
    out_ts: np.ndarray,
) -> tuple[int, int]:
    """ROWS ``size``: the window is the slots ``start..end-1`` (a FIFO); the admitted tuples
    are in slots ``end..end+n_new-1``. Each one that finds the window full deletes the oldest
    tuple just before its own insert, both at its timestamp.

    Returns (events written, new first slot of the window).
    """
    m = 0
    for j in range(n_new):
        p = end + j
        t = ts[p]
        if p - start >= size:
            m = _emit(m, start, -1, t, out_slot, out_sign, out_ts)
            start += 1
        m = _emit(m, p, 1, t, out_slot, out_sign, out_ts)
    return m, start


@njit(cache=True)
def range_events(
    start: int,
    end: int,
    n_new: int,
    size: int,
    ts: np.ndarray,
    out_slot: np.ndarray,
    out_sign: np.ndarray,
    out_ts: np.ndarray,
) -> tuple[int, int]:
    """RANGE ``size``: slots as in :func:`rows_events`. Before each admitted tuple of time t,
    every tuple with ``ts + size <= t`` leaves, oldest first, at time ``ts + size`` (admission
    is in timestamp order, so the FIFO order is the expiry order, ties by row id).

    ``out_*`` need room for ``(end - start) + 2 * n_new`` events. Returns as rows_events.
    """
    m = 0
    for j in range(n_new):
        p = end + j
        t = ts[p]
        while start < p and t - ts[start] >= size:
            m = _emit(m, start, -1, ts[start] + size, out_slot, out_sign, out_ts)
            start += 1
        m = _emit(m, p, 1, t, out_slot, out_sign, out_ts)
    return m, start


@njit(cache=True)
def partition_events(
    end: int,
    groups: np.ndarray,
    size: int,
    ts: np.ndarray,
    alive: np.ndarray,
    nxt: np.ndarray,
    head: np.ndarray,
    tail: np.ndarray,
    count: np.ndarray,
    out_slot: np.ndarray,
    out_sign: np.ndarray,
    out_ts: np.ndarray,
) -> int:
    """PARTITION BY k ROWS ``size``: the admitted tuples are in slots ``end..`` with partition
    group ids ``groups``. Each group's window is a FIFO linked through ``nxt`` (slot of the next
    tuple of the same group, -1 at the tail) from ``head[g]`` to ``tail[g]`` with ``count[g]``
    tuples, so that finding the tuple to delete costs O(1) whatever the number of groups.

    Deleted slots get ``alive = False``. Returns the number of events written.
    """
    m = 0
    for j in range(groups.shape[0]):
        p = end + j
        g = groups[j]
        t = ts[p]
        if count[g] >= size:
            h = head[g]
            m = _emit(m, h, -1, t, out_slot, out_sign, out_ts)
            alive[h] = False
            head[g] = nxt[h]
            count[g] -= 1
        if count[g] == 0:
            head[g] = p
        else:
            nxt[tail[g]] = p
        tail[g] = p
        nxt[p] = -1
        count[g] += 1
        m = _emit(m, p, 1, t, out_slot, out_sign, out_ts)
    return m
