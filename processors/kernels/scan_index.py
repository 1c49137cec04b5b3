"""A join column without an index: every probe scans the window (a nested-loop join).

The A-Caching paper's Fig. 10 (Babu et al., ICDE 2005, Sect. 7.2) drops the hash index on one
join attribute so that the join through it costs time in proportion to the window it scans,
and varies that window. :class:`ScanIndex` stands in for :class:`processors.kernels.multimap.
MultiMap` on such a column, with the same probe calls (``expand``, ``exists``) and the same
lifetime rule (a probe for the delta with sequence number ``g`` sees a slot only if
``born < g < died``); it keeps each slot's key and whether the slot holds a tuple (a slot
never used has ``born`` 0), and scans up to the highest slot used: a store hands out its
lowest free slots first, so that is about the largest the window has been, and a probe's cost
follows the window rather than the store's capacity.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def scan_exists(skeys, used, top, born, died, keys, gen, out):  # type: ignore[no-untyped-def]
    """``out[j]``: some used slot holds ``keys[j]`` alive at ``gen[j]``; returns how many
    do."""
    hits = 0
    for j in range(keys.shape[0]):
        k, g = keys[j], gen[j]
        found = False
        for s in range(top):
            if used[s] and skeys[s] == k and born[s] < g and g < died[s]:
                found = True
                break
        out[j] = found
        hits += found
    return hits


@njit(cache=True)
def scan_expand(skeys, used, top, born, died, keys, gen):  # type: ignore[no-untyped-def]
    """Every (j, slot) with ``keys[j]`` in a used slot alive at ``gen[j]``, in order of j and
    then of slot: the input position and the matching slot, as two arrays."""
    cap = max(16, keys.shape[0])
    left = np.empty(cap, dtype=np.int64)
    right = np.empty(cap, dtype=np.int64)
    m = 0
    for j in range(keys.shape[0]):
        k, g = keys[j], gen[j]
        for s in range(top):
            if used[s] and skeys[s] == k and born[s] < g and g < died[s]:
                if m == cap:
                    cap *= 2
                    left2 = np.empty(cap, dtype=np.int64)
                    right2 = np.empty(cap, dtype=np.int64)
                    left2[:m] = left[:m]
                    right2[:m] = right[:m]
                    left, right = left2, right2
                left[m] = j
                right[m] = s
                m += 1
    return left[:m], right[:m]


class ScanIndex:
    """A window store's join column probed by scanning every slot (see the module docstring)."""

    __slots__ = ("keys", "used", "top")

    def __init__(self, capacity: int) -> None:
        self.keys = np.zeros(capacity, np.int64)
        self.used = np.zeros(capacity, np.bool_)
        self.top = 0  # one past the highest slot ever used

    def grow_slots(self, capacity: int) -> None:
        """The store now has ``capacity`` slots."""
        extra = capacity - len(self.keys)
        if extra > 0:
            self.keys = np.concatenate([self.keys, np.zeros(extra, np.int64)])
            self.used = np.concatenate([self.used, np.zeros(extra, np.bool_)])

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        self.keys[slots] = keys
        self.used[slots] = True
        if len(slots):
            self.top = max(self.top, int(slots.max()) + 1)

    def remove(self, keys: np.ndarray, slots: np.ndarray) -> None:
        self.used[slots] = False

    def exists(
        self, born: np.ndarray, died: np.ndarray, keys: np.ndarray, gen: np.ndarray
    ) -> np.ndarray:
        out = np.empty(len(keys), np.bool_)
        scan_exists(self.keys, self.used, self.top, born, died, keys, gen, out)
        return out

    def expand(
        self, born: np.ndarray, died: np.ndarray, keys: np.ndarray, gen: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return scan_expand(self.keys, self.used, self.top, born, died, keys, gen)  # type: ignore[no-any-return]

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.used.nbytes
