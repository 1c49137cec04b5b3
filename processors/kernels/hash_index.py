"""An open-addressing hash index on int64 keys with multiplicities.

The synthetic filters of the adaptive-ordering experiments (Babu et al., Section 9) probe a hash
index over a sliding window of another stream. A window inserts and deletes forever and may hold
the same key several times, so the index keeps a count per distinct key and deletes by backward
shift: no tombstones accumulate, and probe sequences stay as short as the load factor allows.

Layout: two parallel arrays ``keys`` and ``counts`` of a power-of-two size; ``counts[i] == 0``
marks an empty slot, so every int64 value is a valid key (no sentinel key). Linear probing from
a multiplicative (Fibonacci) hash; the table doubles when more than half of it is occupied.

Membership probes read ``keys`` only: an empty slot's key is 0, so a slot holding a nonzero
probe key is occupied, and a slot with key 0 is empty unless it is the one slot that holds the
key 0, which the index tracks (``zero[0]``, -1 when 0 is absent). A probe then touches one
cache line of one array (half the bytes of key-and-count slots, so that more indexes stay in
cache; this is what the filter stage's profiling probes of rarely used indexes hit).

Numba kernels elsewhere probe the index through :func:`index_contains` on ``HashIndex.keys``,
``HashIndex.mask`` and ``HashIndex.zero_slot``. The arrays are replaced when the table grows
and the zero slot moves, so read them again after every insert or delete.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.splitmix import mix64

# 2^64 / golden ratio, odd: consecutive keys land far apart (Knuth's multiplicative hashing).
_FIB = np.uint64(0x9E3779B97F4A7C15)
_S32 = np.uint64(32)
_U1 = np.uint64(1)

MAX_LOAD = 0.5
MIN_SIZE = 8
MAX_SIZE = 1 << 32  # home slots come from 32 bits of the hash


@njit(cache=True, inline="always")
def home_slot(key: int, mask: int) -> int:
    """The slot where probing for ``key`` starts.

    The high half of the key is folded into the low half first, so that the bits taken from the
    product (32 upwards) depend on every key bit, not only on the low ones.
    """
    x = np.uint64(key)
    x ^= x >> _S32
    return np.int64(((x * _FIB) >> _S32) & np.uint64(mask))


@njit(cache=True, inline="always")
def index_find(keys: np.ndarray, counts: np.ndarray, mask: int, key: int) -> int:
    """Slot holding ``key``, or -1. Terminates because the table is never more than half full."""
    i = home_slot(key, mask)
    while counts[i] != 0:
        if keys[i] == key:
            return i
        i = (i + 1) & mask
    return -1


@njit(cache=True, inline="always")
def index_contains(keys: np.ndarray, mask: int, zero_slot: int, key: int) -> bool:
    """Whether ``key`` is in the index (for use inside other numba kernels).

    ``zero_slot`` is the slot of the key 0 (-1: absent); every other slot with key 0 is empty.
    Whether a probe hits is as random as the data, so a probe loop that exits on the first
    match or empty slot mispredicts a branch about every other key. Instead the home slot and
    its successor are checked without branches; the loop runs only when both are occupied by
    other keys (a predictable, uncommon case at load <= 0.5). Slots are unsigned so that numba
    emits no negative-index wraparound code.
    """
    if key == 0:
        return zero_slot >= 0
    um = np.uint64(mask)
    x = np.uint64(key)
    x ^= x >> _S32
    i = ((x * _FIB) >> _S32) & um
    j = (i + _U1) & um
    ki = keys[i]
    kj = keys[j]
    hit = (ki == key) | (kj == key)  # key != 0: a slot holding it is occupied
    c0 = (ki != 0) | (np.int64(i) == zero_slot)
    c1 = (kj != 0) | (np.int64(j) == zero_slot)
    # == 2 iff both slots are occupied and neither holds the key (sums, not `and`, keep LLVM
    # from turning the test back into a chain of unpredictable branches)
    if np.int64(c0) + np.int64(c1) + 2 * np.int64(hit) == 2:
        i = (j + _U1) & um
        while True:
            k = keys[i]
            if k == key:
                return True
            if k == 0 and np.int64(i) != zero_slot:
                return False
            i = (i + _U1) & um
    return hit


@njit(cache=True, inline="always")
def probe_key(key: int, probe: int) -> int:
    """The key looked up by extra probe number ``probe`` (1..c-1) of a filter with cost c.

    A splitmix64 step of the tuple's key and the probe number: deterministic, so results are
    reproducible, and spread over the whole key space, so each probe lands on a random slot.
    """
    return np.int64(mix64(np.uint64(key) + np.uint64(probe) * _FIB))


@njit(cache=True)
def select_in_index(
    col: np.ndarray,
    keys: np.ndarray,
    mask: int,
    zero_slot: int,
    probes: int,
    sel: np.ndarray,
    n: int,
    out: np.ndarray,
    hits: np.ndarray,
) -> int:
    """Rows ``sel[:n]`` whose ``col`` value is in the index, written in order to ``out``.

    Follows the selection-kernel shape of :mod:`processors.kernels.select` (``out`` may alias
    ``sel``) with one trailing argument: ``probes`` is the filter's cost c (Section 9.3: c
    random probes of the index per tuple). The first probe decides; probes 2..c look up
    :func:`probe_key` keys and only cost time. Their number of hits is written to ``hits[0]``
    (a 1-element int64 array) so that the compiler cannot drop them as dead code.
    ``keys``, ``mask`` and ``zero_slot`` are the index's (see :func:`index_contains`). Rows are
    stored unconditionally (only the count advances), so ``out`` needs room for ``n`` rows.
    """
    m = 0
    extra = 0
    for i in range(n):
        row = sel[i]
        key = col[row]
        ok = index_contains(keys, mask, zero_slot, key)
        for p in range(1, probes):
            extra += index_contains(keys, mask, zero_slot, probe_key(key, p))
        # unconditional store, conditional advance: no branch on the (random) outcome
        out[m] = row
        m += ok
    hits[0] = extra
    return m


@njit(cache=True)
def _insert_kernel(
    keys: np.ndarray,
    counts: np.ndarray,
    mask: int,
    items: np.ndarray,
    start: int,
    distinct: int,
    limit: int,
    zero: np.ndarray,
) -> tuple[int, int]:
    """Insert ``items[start:]``; stop before a new key would push ``distinct`` past ``limit``.

    Returns (index of the first item not inserted, distinct keys now present).
    """
    n = items.shape[0]
    for j in range(start, n):
        key = items[j]
        i = home_slot(key, mask)
        while True:
            c = counts[i]
            if c == 0:
                if distinct >= limit:
                    return j, distinct
                keys[i] = key
                counts[i] = 1
                distinct += 1
                if key == 0:
                    zero[0] = i
                break
            if keys[i] == key:
                counts[i] = c + 1
                break
            i = (i + 1) & mask
    return n, distinct


@njit(cache=True, inline="always")
def _backward_shift(
    keys: np.ndarray, counts: np.ndarray, mask: int, hole: int, zero: np.ndarray
) -> None:
    """Empty slot ``hole``, pulling back later entries of its run that may legally move there.

    An entry at slot j with home h may move to the hole iff the hole lies on its probe path
    [h, j), i.e. its distance from home is at least the distance from the hole to j.
    ``zero[0]`` follows the key 0 when it moves (and is cleared when it is the one emptied).
    """
    if keys[hole] == 0:
        zero[0] = -1
    j = hole
    while True:
        j = (j + 1) & mask
        c = counts[j]
        if c == 0:
            break
        h = home_slot(keys[j], mask)
        if ((j - h) & mask) >= ((j - hole) & mask):
            if keys[j] == 0:
                zero[0] = hole
            keys[hole] = keys[j]
            counts[hole] = c
            hole = j
    counts[hole] = 0
    keys[hole] = 0


@njit(cache=True)
def _delete_kernel(
    keys: np.ndarray, counts: np.ndarray, mask: int, items: np.ndarray, zero: np.ndarray
) -> tuple[int, int]:
    """Remove one occurrence of each item, in order.

    Returns (number of items deleted, distinct keys that disappeared); the first count is short
    of ``len(items)`` when ``items[count]`` is absent, which stops the kernel there.
    """
    n = items.shape[0]
    gone = 0
    for j in range(n):
        i = index_find(keys, counts, mask, items[j])
        if i < 0:
            return j, gone
        c = counts[i] - 1
        if c > 0:
            counts[i] = c
        else:
            _backward_shift(keys, counts, mask, i, zero)
            gone += 1
    return n, gone


@njit(cache=True)
def _contains_kernel(
    keys: np.ndarray, mask: int, zero_slot: int, items: np.ndarray, out: np.ndarray
) -> None:
    for j in range(items.shape[0]):
        out[j] = index_contains(keys, mask, zero_slot, items[j])


@njit(cache=True)
def _count_kernel(keys: np.ndarray, counts: np.ndarray, mask: int, key: int) -> int:
    i = index_find(keys, counts, mask, key)
    return 0 if i < 0 else counts[i]


@njit(cache=True)
def _rehash_kernel(
    old_keys: np.ndarray,
    old_counts: np.ndarray,
    keys: np.ndarray,
    counts: np.ndarray,
    mask: int,
    zero: np.ndarray,
) -> None:
    """Move every entry of the old table into the (empty, larger) new one."""
    for s in range(old_keys.shape[0]):
        c = old_counts[s]
        if c != 0:
            key = old_keys[s]
            i = home_slot(key, mask)
            while counts[i] != 0:
                i = (i + 1) & mask
            keys[i] = key
            counts[i] = c
            if key == 0:
                zero[0] = i


def _table_size(distinct: int) -> int:
    """Smallest power of two that holds ``distinct`` keys at load factor at most MAX_LOAD."""
    size = MIN_SIZE
    while size * MAX_LOAD < distinct:
        size *= 2
    if size > MAX_SIZE:
        raise MemoryError(f"a hash index of {distinct} keys exceeds {MAX_SIZE} slots")
    return size


def _as_keys(keys: np.ndarray) -> np.ndarray:
    arr = np.asarray(keys)
    if arr.dtype.kind not in "iu" and arr.size:
        raise TypeError(f"hash index keys must be integers, not {arr.dtype}")
    return np.ascontiguousarray(arr.reshape(-1), dtype=np.int64)


class HashIndex:
    """Multiset of int64 keys for fast membership probes (see the module docstring)."""

    __slots__ = ("keys", "counts", "mask", "zero", "_distinct", "_total")

    def __init__(self, capacity_hint: int = 1024) -> None:
        if capacity_hint < 0:
            raise ValueError(f"capacity_hint must be >= 0, got {capacity_hint}")
        size = _table_size(capacity_hint)
        self.keys = np.zeros(size, np.int64)
        self.counts = np.zeros(size, np.int64)
        self.mask = size - 1
        self.zero = np.full(1, -1, np.int64)  # slot of the key 0, or -1
        self._distinct = 0
        self._total = 0

    def __len__(self) -> int:
        """Number of distinct keys."""
        return self._distinct

    @property
    def total(self) -> int:
        """Sum of the multiplicities (keys inserted and not yet deleted)."""
        return self._total

    @property
    def zero_slot(self) -> int:
        """The slot holding the key 0, or -1 (see :func:`index_contains`)."""
        return int(self.zero[0])

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.counts.nbytes

    def _grow(self) -> None:
        size = 2 * (self.mask + 1)
        if size > MAX_SIZE:
            raise MemoryError(f"a hash index cannot grow past {MAX_SIZE} slots")
        keys = np.zeros(size, np.int64)
        counts = np.zeros(size, np.int64)
        _rehash_kernel(self.keys, self.counts, keys, counts, size - 1, self.zero)
        self.keys, self.counts, self.mask = keys, counts, size - 1

    def insert_many(self, keys: np.ndarray) -> None:
        """Add one occurrence of each key (growing the table as needed)."""
        items = _as_keys(keys)
        pos = 0
        while pos < len(items):
            limit = int((self.mask + 1) * MAX_LOAD)
            pos, self._distinct = _insert_kernel(
                self.keys, self.counts, self.mask, items, pos, self._distinct, limit, self.zero
            )
            if pos < len(items):
                self._grow()
        self._total += len(items)

    def delete_many(self, keys: np.ndarray) -> None:
        """Remove one occurrence of each key, in order.

        Raises KeyError naming the first key that is absent at its turn; the keys before it
        stay deleted.
        """
        items = _as_keys(keys)
        done, gone = _delete_kernel(self.keys, self.counts, self.mask, items, self.zero)
        self._distinct -= gone
        self._total -= done
        if done < len(items):
            raise KeyError(int(items[done]))

    def contains_many(self, keys: np.ndarray) -> np.ndarray:
        """Membership of each key, as a bool array."""
        items = _as_keys(keys)
        out = np.empty(len(items), np.bool_)
        _contains_kernel(self.keys, self.mask, self.zero_slot, items, out)
        return out

    def count(self, key: int) -> int:
        """Multiplicity of ``key`` (0 if absent)."""
        return int(_count_kernel(self.keys, self.counts, self.mask, np.int64(key)))

    def __repr__(self) -> str:
        return f"HashIndex(distinct={self._distinct}, total={self._total}, slots={self.mask + 1})"
