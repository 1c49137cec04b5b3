"""SubresultCache: one A-Caching cache, a hash table from cache keys to sets of references to
window slots (Babu et al., Sections 3.2-3.3), vectorized over batches of keys.

Operations follow Section 3.2: :meth:`create` adds (u, v) (replacing what held u's bucket:
direct-mapped, Section 3.3), :meth:`lookup` + :meth:`expand` are probe(u), :meth:`insert` and
:meth:`delete` change v for keys present and ignore the others. Values are combinations of
slots, one per relation of the cached segment (relations in a fixed order chosen by the
owner), with the ``born`` number of each referenced tuple, so that a reference to a slot that
was freed or reused is recognised (see :mod:`processors.kernels.subresult_cache`).

Keys are ``kw`` int64 join-key values per row (one per equivalence class between the
segment and what precedes it). Epochs: an entry remembers the epoch it was created in; an
insert only reaches entries of earlier epochs and a probe only trusts an older entry below a
sequence number the caller gives (the executor, :mod:`processors.stages.mjoin_caches`,
explains why).
"""

from __future__ import annotations

import numpy as np

from processors.kernels.subresult_cache import (
    COMBOS,
    EMPTY,
    ENTRIES,
    FREE,
    META,
    NFREE,
    NONE,
    UNLINKED,
    cache_create,
    cache_delete,
    cache_expand,
    cache_insert,
    cache_invalid_refs,
    cache_lookup,
    cache_sweep,
)

Arrays = tuple[np.ndarray, ...]


class SubresultCache:
    """A direct-mapped cache of ``buckets`` entries (a power of two) with keys of ``key_width``
    columns and values of combinations of ``width`` slots."""

    def __init__(self, width: int, key_width: int, buckets: int = 4096) -> None:
        if width < 1 or key_width < 1:
            raise ValueError(f"a cache needs width and key width >= 1, got {width}, {key_width}")
        if buckets < 1 or buckets & (buckets - 1):
            raise ValueError(f"cache buckets must be a power of two, got {buckets}")
        self.width = width
        self.key_width = key_width
        self.buckets = buckets
        self.hits = 0
        self.misses = 0
        self.outdated = 0  # misses on an entry present but not yet up to date (executor)
        self.inserted = 0
        self.deleted = 0
        self.clear()

    def clear(self) -> None:
        """Drop every entry (the table keeps its size; the pool shrinks back)."""
        b = self.buckets
        self.tkeys = np.zeros((b, self.key_width), np.int64)
        self.tepoch = np.full(b, EMPTY, np.int64)
        self.thead = np.full(b, NONE, np.int64)
        self.tcount = np.zeros(b, np.int64)
        self.cnext = np.zeros(0, np.int64)
        self.cslot = np.zeros((0, self.width), np.int64)
        self.cborn = np.zeros((0, self.width), np.int64)
        self.meta = np.zeros(META, np.int64)
        self.meta[FREE] = NONE

    # -- the pool -----------------------------------------------------------------------------
    def _reserve(self, n: int) -> None:
        """At least ``n`` free combination rows (the pool doubles as needed)."""
        if self.meta[NFREE] >= n:
            return
        old = len(self.cnext)
        new = max(64, old)
        while new - old + self.meta[NFREE] < n:
            new *= 2
        chain = np.arange(old + 1, new + 1, dtype=np.int64)
        chain[-1] = self.meta[FREE]  # the new rows lead into the old free chain
        self.cnext = np.concatenate([self.cnext, chain])
        self.cslot = np.concatenate([self.cslot, np.zeros((new - old, self.width), np.int64)])
        self.cborn = np.concatenate([self.cborn, np.zeros((new - old, self.width), np.int64)])
        self.meta[FREE] = old
        self.meta[NFREE] += new - old

    def _table(self) -> Arrays:
        return (self.tkeys, self.tepoch, self.thead, self.tcount, self.cnext, self.cslot,
                self.cborn, self.meta, self.buckets - 1)  # fmt: skip

    # -- Section 3.2's operations -------------------------------------------------------------
    def lookup(self, keys: np.ndarray, gen: np.ndarray, epoch: int, fresh_below: int) -> np.ndarray:
        """probe(u) per key row: the entry's bucket, or -1 (a miss). An entry created before
        ``epoch`` only answers rows with ``gen < fresh_below``. Counts hits and misses."""
        out = np.empty(len(keys), np.int64)
        hits, outdated = cache_lookup(
            self.tkeys, self.tepoch, self.buckets - 1, keys, gen, epoch, fresh_below, out
        )
        self.hits += hits
        self.misses += len(keys) - hits
        self.outdated += outdated
        return out

    def expand(
        self, buckets: np.ndarray, gen: np.ndarray, borns: Arrays, dieds: Arrays
    ) -> tuple[np.ndarray, np.ndarray]:
        """The combinations of each looked-up row alive at its ``gen``: the rows (in order) and
        the combinations' slots, a row per relation (``[width, n]``). ``borns``/``dieds``: each
        relation's window arrays."""
        return cache_expand(  # type: ignore[no-any-return]
            self.thead, self.tcount, self.cnext, self.cslot, self.cborn, self.meta, buckets,
            gen, borns, dieds,
        )  # fmt: skip

    def create(
        self, keys: np.ndarray, starts: np.ndarray, slots: np.ndarray, borns: np.ndarray, epoch: int
    ) -> None:
        """create(u, v) for each key row r, v = combinations ``starts[r]:starts[r + 1]`` of
        ``slots``/``borns`` (rows of ``width``)."""
        if len(keys) == 0:
            return
        self._reserve(len(slots))
        cache_create(*self._table(), keys, starts, slots, borns, epoch)

    def insert(
        self, keys: np.ndarray, slots: np.ndarray, borns: np.ndarray, epoch: int,
        unique: bool = False,
    ) -> int:  # fmt: skip
        """insert(u, r) per combination (entries created before ``epoch`` only; with
        ``unique``, only combinations not in the entry yet)."""
        if len(keys) == 0:
            return 0
        self._reserve(len(slots))
        added = int(cache_insert(*self._table(), keys, slots, borns, epoch, unique))
        self.inserted += added
        return added

    def delete(self, keys: np.ndarray, slots: np.ndarray, borns: np.ndarray) -> int:
        """delete(u, r) per combination."""
        if len(keys) == 0:
            return 0
        removed = int(cache_delete(*self._table(), keys, slots, borns))
        self.deleted += removed
        return removed

    def sweep(self, dieds: Arrays) -> int:
        """Remove every combination with a tuple that left its window (``died`` set)."""
        removed = int(cache_sweep(self.tepoch, self.thead, self.tcount, self.cnext, self.cslot,
                                  self.meta, dieds))  # fmt: skip
        self.deleted += removed
        return removed

    # -- accounting ---------------------------------------------------------------------------
    def invalid_refs(self, borns: Arrays) -> int:
        """Cached combinations holding a freed or reused slot (0 when maintenance is exact)."""
        return int(cache_invalid_refs(self.tepoch, self.thead, self.cnext, self.cslot,
                                      self.cborn, borns))  # fmt: skip

    @property
    def entries(self) -> int:
        return int(self.meta[ENTRIES])

    @property
    def combinations(self) -> int:
        return int(self.meta[COMBOS])

    @property
    def unlinked(self) -> int:
        """Invalid combinations that probes met and unlinked (0 when maintenance is exact)."""
        return int(self.meta[UNLINKED])

    @property
    def nbytes(self) -> int:
        table = self.tkeys.nbytes + self.tepoch.nbytes + self.thead.nbytes + self.tcount.nbytes
        return table + self.cnext.nbytes + self.cslot.nbytes + self.cborn.nbytes

    def stats(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "outdated": self.outdated,
            "entries": self.entries,
            "combinations": self.combinations,
            "inserted": self.inserted,
            "deleted": self.deleted,
            "unlinked": self.unlinked,
            "bytes": self.nbytes,
        }
