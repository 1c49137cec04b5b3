"""The eager MJoin's window condition for a pipeline's combinations, in one pass
(:mod:`processors.stages.eager_mjoin`, docs/windows-and-joins.md "Eager joins").

A combination of tuples joins when each of them is still in its RANGE window at the time of
the newest one: its age (newest time less its own) is under its input's range, or equal to it
and its input comes after the newest tuple's (the ``(ts, input)`` order of the ordered join).
A combination not yet complete is dropped once any age is over its range (a tuple still to
bind can only be newer, making the ages larger).
"""

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def newest_in_window(
    ts: np.ndarray, inputs: np.ndarray, ranges: np.ndarray, complete: bool
) -> tuple[np.ndarray, np.ndarray]:
    """``ts[r, j]``: the event time of member r (of input ``inputs[r]``, whose RANGE is
    ``ranges[r]``) of combination j. Per combination: the newest time by ``(ts, input)`` and
    whether it is (``complete``) or may still become a result."""
    k, m = ts.shape
    newest = np.empty(m, np.int64)
    keep = np.ones(m, np.bool_)
    for j in range(m):
        best = ts[0, j]
        which = inputs[0]
        for r in range(1, k):
            t = ts[r, j]
            if t > best or (t == best and inputs[r] > which):
                best = t
                which = inputs[r]
        newest[j] = best
        for r in range(k):
            age = best - ts[r, j]
            if complete:
                ok = age < ranges[r] or (age == ranges[r] and inputs[r] > which)
            else:
                ok = age <= ranges[r]
            if not ok:
                keep[j] = False
                break
    return newest, keep
