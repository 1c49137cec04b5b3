"""A multi-map from int64 join keys to the slots of a window store, for MJoin probes.

An MJoin (Section 8 of Babu et al.; Section 3.1 of the A-Caching paper) probes each input's
window on a join attribute and needs *all* matching tuples, not only whether one exists. The
table maps each distinct key to the head of a doubly linked chain of store slots holding that
key (``nxt``/``prv`` arrays indexed by slot), with a count. Linking and unlinking a slot is
O(1), so a window can insert and delete forever; distinct keys leave the table by backward
shift, as in :mod:`processors.kernels.hash_index`, so no tombstones accumulate.

Probes honour *lifetimes*: a stage processes a whole epoch of deltas at once, so every slot has
the global sequence number at which it entered (``born``) and left (``died``) the window, and a
probe made on behalf of the delta with sequence number ``g`` sees a slot only if
``born < g < died``. That reproduces, in one vectorized pass, what processing the deltas one
by one would see.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.hash_index import MAX_LOAD, MIN_SIZE, home_slot

NONE = -1


@njit(cache=True, inline="always")
def _find(tkeys, tcount, mask, key):  # type: ignore[no-untyped-def]
    i = home_slot(key, mask)
    while tcount[i] != 0:
        if tkeys[i] == key:
            return i
        i = (i + 1) & mask
    return -1


@njit(cache=True)
def mm_insert(tkeys, tcount, thead, mask, nxt, prv, keys, slots, start, distinct, limit):  # type: ignore[no-untyped-def]
    """Link ``slots[j]`` under ``keys[j]`` for j from ``start``; stop before a new key would
    push ``distinct`` past ``limit``. Returns (first j not done, distinct keys)."""
    n = keys.shape[0]
    for j in range(start, n):
        key = keys[j]
        s = slots[j]
        i = home_slot(key, mask)
        while True:
            if tcount[i] == 0:
                if distinct >= limit:
                    return j, distinct
                tkeys[i] = key
                tcount[i] = 1
                thead[i] = s
                nxt[s] = NONE
                prv[s] = NONE
                distinct += 1
                break
            if tkeys[i] == key:
                head = thead[i]
                nxt[s] = head
                prv[s] = NONE
                prv[head] = s
                thead[i] = s
                tcount[i] += 1
                break
            i = (i + 1) & mask
    return n, distinct


@njit(cache=True, inline="always")
def _backward_shift(tkeys, tcount, thead, mask, hole):  # type: ignore[no-untyped-def]
    j = hole
    while True:
        j = (j + 1) & mask
        c = tcount[j]
        if c == 0:
            break
        h = home_slot(tkeys[j], mask)
        if ((j - h) & mask) >= ((j - hole) & mask):
            tkeys[hole] = tkeys[j]
            tcount[hole] = c
            thead[hole] = thead[j]
            hole = j
    tcount[hole] = 0
    tkeys[hole] = 0
    thead[hole] = NONE


@njit(cache=True)
def mm_remove(tkeys, tcount, thead, mask, nxt, prv, keys, slots):  # type: ignore[no-untyped-def]
    """Unlink each ``slots[j]`` from the chain of ``keys[j]``. Returns (number unlinked,
    distinct keys that disappeared); stops early at a key that is absent."""
    gone = 0
    for j in range(keys.shape[0]):
        i = _find(tkeys, tcount, mask, keys[j])
        if i < 0:
            return j, gone
        s = slots[j]
        p, q = prv[s], nxt[s]
        if p == NONE:
            thead[i] = q
        else:
            nxt[p] = q
        if q != NONE:
            prv[q] = p
        nxt[s] = NONE
        prv[s] = NONE
        tcount[i] -= 1
        if tcount[i] == 0:
            _backward_shift(tkeys, tcount, thead, mask, i)
            gone += 1
    return keys.shape[0], gone


@njit(cache=True)
def mm_heads(tkeys, tcount, thead, mask, keys, out):  # type: ignore[no-untyped-def]
    """The head slot of each key's chain (NONE when absent): for unique keys, the slot."""
    for j in range(keys.shape[0]):
        i = _find(tkeys, tcount, mask, keys[j])
        out[j] = NONE if i < 0 else thead[i]


@njit(cache=True)
def mm_rehash(old_keys, old_count, old_head, tkeys, tcount, thead, mask):  # type: ignore[no-untyped-def]
    for s in range(old_keys.shape[0]):
        c = old_count[s]
        if c != 0:
            key = old_keys[s]
            i = home_slot(key, mask)
            while tcount[i] != 0:
                i = (i + 1) & mask
            tkeys[i] = key
            tcount[i] = c
            thead[i] = old_head[s]


@njit(cache=True)
def mm_exists(tkeys, tcount, thead, mask, nxt, born, died, keys, gen, out):  # type: ignore[no-untyped-def]
    """``out[j]`` = whether some slot under ``keys[j]`` is alive at sequence ``gen[j]``.
    Returns the number of true entries. Chains are newest first, so a long-lived match is
    usually found within a step or two."""
    hits = 0
    for j in range(keys.shape[0]):
        found = False
        i = _find(tkeys, tcount, mask, keys[j])
        if i >= 0:
            g = gen[j]
            s = thead[i]
            while s != NONE:
                if born[s] < g and g < died[s]:
                    found = True
                    break
                s = nxt[s]
        out[j] = found
        hits += found
    return hits


@njit(cache=True)
def mm_expand(tkeys, tcount, thead, mask, nxt, born, died, keys, gen):  # type: ignore[no-untyped-def]
    """Every (j, slot) with slot under ``keys[j]`` alive at ``gen[j]``, in order of j: the
    input position and the matching slot, as two arrays."""
    n = keys.shape[0]
    heads = np.empty(n, dtype=np.int64)
    total = 0
    for j in range(n):
        i = _find(tkeys, tcount, mask, keys[j])
        heads[j] = NONE if i < 0 else thead[i]
        if i >= 0:
            total += tcount[i]
    left = np.empty(total, dtype=np.int64)
    right = np.empty(total, dtype=np.int64)
    m = 0
    for j in range(n):
        g = gen[j]
        s = heads[j]
        while s != NONE:
            if born[s] < g and g < died[s]:
                left[m] = j
                right[m] = s
                m += 1
            s = nxt[s]
    return left[:m], right[:m]


class MultiMap:
    """int64 key -> chain of slots of a store with ``capacity`` slots (grows with it)."""

    __slots__ = ("tkeys", "tcount", "thead", "mask", "nxt", "prv", "distinct")

    def __init__(self, capacity: int) -> None:
        size = MIN_SIZE
        while size * MAX_LOAD < max(capacity, 1):
            size *= 2
        self.tkeys = np.zeros(size, np.int64)
        self.tcount = np.zeros(size, np.int64)
        self.thead = np.full(size, NONE, np.int64)
        self.mask = size - 1
        self.nxt = np.full(capacity, NONE, np.int64)
        self.prv = np.full(capacity, NONE, np.int64)
        self.distinct = 0

    def grow_slots(self, capacity: int) -> None:
        """The store now has ``capacity`` slots."""
        old = len(self.nxt)
        if capacity > old:
            self.nxt = np.concatenate([self.nxt, np.full(capacity - old, NONE, np.int64)])
            self.prv = np.concatenate([self.prv, np.full(capacity - old, NONE, np.int64)])

    def _grow_table(self) -> None:
        size = 2 * (self.mask + 1)
        tkeys = np.zeros(size, np.int64)
        tcount = np.zeros(size, np.int64)
        thead = np.full(size, NONE, np.int64)
        mm_rehash(self.tkeys, self.tcount, self.thead, tkeys, tcount, thead, size - 1)
        self.tkeys, self.tcount, self.thead, self.mask = tkeys, tcount, thead, size - 1

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        pos = 0
        while pos < len(keys):
            limit = int((self.mask + 1) * MAX_LOAD)
            pos, self.distinct = mm_insert(
                self.tkeys, self.tcount, self.thead, self.mask, self.nxt, self.prv,
                keys, slots, pos, self.distinct, limit,
            )  # fmt: skip
            if pos < len(keys):
                self._grow_table()

    def remove(self, keys: np.ndarray, slots: np.ndarray) -> None:
        done, gone = mm_remove(
            self.tkeys, self.tcount, self.thead, self.mask, self.nxt, self.prv, keys, slots
        )
        self.distinct -= gone
        if done < len(keys):
            raise KeyError(int(keys[done]))

    def heads(self, keys: np.ndarray) -> np.ndarray:
        out = np.empty(len(keys), np.int64)
        mm_heads(self.tkeys, self.tcount, self.thead, self.mask, keys, out)
        return out

    def exists(
        self, born: np.ndarray, died: np.ndarray, keys: np.ndarray, gen: np.ndarray
    ) -> np.ndarray:
        out = np.empty(len(keys), np.bool_)
        mm_exists(
            self.tkeys, self.tcount, self.thead, self.mask, self.nxt, born, died, keys, gen, out
        )
        return out

    def expand(
        self, born: np.ndarray, died: np.ndarray, keys: np.ndarray, gen: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return mm_expand(  # type: ignore[no-any-return]
            self.tkeys, self.tcount, self.thead, self.mask, self.nxt, born, died, keys, gen
        )

    @property
    def nbytes(self) -> int:
        return self.tkeys.nbytes * 3 + self.nxt.nbytes * 2
