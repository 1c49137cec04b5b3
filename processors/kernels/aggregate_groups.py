"""Group state and numeric group keys of the aggregate kernels (:mod:`.aggregate` says why).

:class:`GroupState` holds the per-gid count, sums and extremes and hands out the gids (a free
stack over a bump counter); :class:`IntKeyMap` maps one numeric group column's int64 keys to
gids in numba. Values reach the kernels as ordered keys (:func:`ordered_keys`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.splitmix import mix64

EMPTY = -1
MAX_LOAD = 0.5  # hash tables double before they are more than half full
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)
_CANONICAL_NAN = np.float64(np.nan)


def ordered_keys(values: np.ndarray) -> np.ndarray:
    """int64 keys ordered like the float values (NaN made canonical first, so it sorts last).

    Non-negative floats keep their bit pattern; negative ones have their magnitude bits flipped,
    so that a larger magnitude gives a smaller key. The map is its own inverse.
    """
    f = np.asarray(values, dtype=np.float64)
    nan = np.isnan(f)
    if nan.any():
        f = np.where(nan, _CANONICAL_NAN, f)
    return _flip_negative(f.view(np.int64))


def floats_from_keys(keys: np.ndarray) -> np.ndarray:
    """Inverse of :func:`ordered_keys`."""
    return _flip_negative(np.asarray(keys, dtype=np.int64)).view(np.float64)


def _flip_negative(bits: np.ndarray) -> np.ndarray:
    return np.where(bits < 0, bits ^ _FLIP, bits)


def table_size(entries: int) -> int:
    """Smallest power of two (>= 8) holding ``entries`` at load factor at most MAX_LOAD."""
    size = 8
    while size * MAX_LOAD < entries:
        size *= 2
    return size


def grown(arr: np.ndarray, size: int, fill: int | float, axis: int = 0) -> np.ndarray:
    """``arr`` extended to ``size`` along ``axis``, the new part set to ``fill``."""
    shape = list(arr.shape)
    shape[axis] = size
    out = np.full(shape, fill, dtype=arr.dtype)
    out[(slice(None),) * axis + (slice(0, arr.shape[axis]),)] = arr
    return out


@njit(cache=True, inline="always")
def pop_free(free: np.ndarray, meta: np.ndarray) -> int:
    """A slab index: the most recently freed one, else the next never used (meta: n_free, bump)."""
    if meta[0] > 0:
        meta[0] -= 1
        return free[meta[0]]
    idx = meta[1]
    meta[1] += 1
    return idx


# ---------------------------------------------------------------------------------------------
# group state


class GroupState:
    """Per-gid aggregate state, plus the allocator of gids (a free stack over a bump counter).

    Per-column state is column-major, ``(k, capacity)`` for k value columns, so that each column
    pass works on 1-D arrays. A gid that is free has count 0, an empty row list and zero sums,
    so allocating it needs no reset.
    """

    def __init__(self, k: int, capacity: int = 64) -> None:
        self.k = k
        self.count = np.zeros(capacity, np.int64)
        self.head = np.full(capacity, EMPTY, np.int64)  # first row-table entry of the group
        self.stamp = np.zeros(capacity, np.int64)  # number of the batch that last touched it
        self.pos = np.zeros(capacity, np.int64)  # its place among that batch's touched groups
        self.dirty = np.zeros(capacity, np.int8)  # min/max stale: an extreme was deleted
        self.sum_i = np.zeros((k, capacity), np.int64)
        self.sum_f = np.zeros((k, capacity), np.float64)
        self.comp = np.zeros((k, capacity), np.float64)  # Neumaier compensation of sum_f
        self.vmin = np.zeros((k, capacity), np.int64)  # ordered keys
        self.vmax = np.zeros((k, capacity), np.int64)
        self.free = np.zeros(capacity, np.int64)
        self.meta = np.zeros(2, np.int64)  # n_free, bump

    @property
    def capacity(self) -> int:
        return len(self.count)

    @property
    def bump(self) -> int:
        return int(self.meta[1])

    @property
    def live(self) -> int:
        """Gids in use (between batches: the groups that are not empty)."""
        return int(self.meta[1] - self.meta[0])

    def reserve(self, extra: int) -> None:
        """Room for ``extra`` more gids without growing inside a kernel."""
        need = self.bump + extra
        if need <= self.capacity:
            return
        size = max(need, 2 * self.capacity)
        self.count = grown(self.count, size, 0)
        self.head = grown(self.head, size, EMPTY)
        self.stamp = grown(self.stamp, size, 0)
        self.pos = grown(self.pos, size, 0)
        self.dirty = grown(self.dirty, size, 0)
        self.free = grown(self.free, size, 0)
        for name in ("sum_i", "sum_f", "comp", "vmin", "vmax"):
            setattr(self, name, grown(getattr(self, name), size, 0, axis=1))

    def alloc(self) -> int:
        """One gid (Python-side allocation, for the dict key map; call :meth:`reserve` first)."""
        return int(pop_free(self.free, self.meta))

    def release(self, gids: np.ndarray) -> None:
        """Free the gids of groups that became empty (sums are already reset; their lists hold
        only tombstones, which stay in the row table until its next rebuild)."""
        n_free = int(self.meta[0])
        self.free[n_free : n_free + len(gids)] = gids
        self.meta[0] = n_free + len(gids)
        self.dirty[gids] = 0
        self.head[gids] = EMPTY


# ---------------------------------------------------------------------------------------------
# numeric group keys -> gids


@njit(cache=True, inline="always")
def _key_home(key: int, mask: int) -> int:
    return np.int64(mix64(np.uint64(key)) & np.uint64(mask))


@njit(cache=True)
def _map_keys_kernel(
    keys: np.ndarray,
    slot_keys: np.ndarray,
    slot_gids: np.ndarray,
    key_of_gid: np.ndarray,
    free: np.ndarray,
    meta: np.ndarray,
    out: np.ndarray,
) -> int:
    """The gid of each key, allocating gids for new keys; returns how many keys were new."""
    mask = slot_keys.shape[0] - 1
    new = 0
    for j in range(keys.shape[0]):
        key = keys[j]
        i = _key_home(key, mask)
        while True:
            g = slot_gids[i]
            if g == EMPTY:
                g = pop_free(free, meta)
                slot_keys[i] = key
                slot_gids[i] = g
                key_of_gid[g] = key
                new += 1
                break
            if slot_keys[i] == key:
                break
            i = (i + 1) & mask
        out[j] = g
    return new


@njit(cache=True)
def _unmap_keys_kernel(
    slot_keys: np.ndarray, slot_gids: np.ndarray, key_of_gid: np.ndarray, gids: np.ndarray
) -> None:
    """Remove the keys of ``gids`` from the table by backward shift (no tombstones)."""
    mask = slot_keys.shape[0] - 1
    for j in range(gids.shape[0]):
        key = key_of_gid[gids[j]]
        hole = _key_home(key, mask)
        while slot_keys[hole] != key or slot_gids[hole] == EMPTY:
            hole = (hole + 1) & mask
        i = hole
        while True:
            i = (i + 1) & mask
            if slot_gids[i] == EMPTY:
                break
            home = _key_home(slot_keys[i], mask)
            if ((i - home) & mask) >= ((i - hole) & mask):
                slot_keys[hole] = slot_keys[i]
                slot_gids[hole] = slot_gids[i]
                hole = i
        slot_gids[hole] = EMPTY
        slot_keys[hole] = 0


@njit(cache=True)
def _rehash_keys_kernel(
    old_keys: np.ndarray, old_gids: np.ndarray, slot_keys: np.ndarray, slot_gids: np.ndarray
) -> None:
    mask = slot_keys.shape[0] - 1
    for s in range(old_keys.shape[0]):
        g = old_gids[s]
        if g != EMPTY:
            i = _key_home(old_keys[s], mask)
            while slot_gids[i] != EMPTY:
                i = (i + 1) & mask
            slot_keys[i] = old_keys[s]
            slot_gids[i] = g


class IntKeyMap:
    """int64 group key -> gid, an open-addressing table with linear probing and backward-shift
    deletion; ``key_of_gid`` maps back. Float keys come in as their bit patterns."""

    def __init__(self, capacity: int = 64) -> None:
        size = table_size(capacity)
        self.slot_keys = np.zeros(size, np.int64)
        self.slot_gids = np.full(size, EMPTY, np.int64)
        self.key_of_gid = np.zeros(capacity, np.int64)
        self.size = 0

    def reserve(self, extra: int, gid_capacity: int) -> None:
        """Room for ``extra`` more keys, and for gids below ``gid_capacity``."""
        if len(self.key_of_gid) < gid_capacity:
            self.key_of_gid = grown(self.key_of_gid, gid_capacity, 0)
        size = table_size(self.size + extra)
        if size > len(self.slot_keys):
            keys = np.zeros(size, np.int64)
            gids = np.full(size, EMPTY, np.int64)
            _rehash_keys_kernel(self.slot_keys, self.slot_gids, keys, gids)
            self.slot_keys, self.slot_gids = keys, gids

    def map(self, keys: np.ndarray, groups: GroupState) -> np.ndarray:
        """The gid of each key (new keys get new gids)."""
        keys = np.ascontiguousarray(keys, dtype=np.int64)
        groups.reserve(len(keys))
        self.reserve(len(keys), groups.capacity)
        out = np.empty(len(keys), np.int64)
        self.size += _map_keys_kernel(
            keys,
            self.slot_keys,
            self.slot_gids,
            self.key_of_gid,
            groups.free,
            groups.meta,
            out,
        )
        return out

    def unmap(self, gids: np.ndarray) -> None:
        """Forget the keys of ``gids`` (groups that became empty)."""
        if len(gids):
            _unmap_keys_kernel(self.slot_keys, self.slot_gids, self.key_of_gid, gids)
            self.size -= len(gids)
