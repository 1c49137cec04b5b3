"""Numba kernels of a subresult cache: a direct-mapped hash table from cache keys to sets of
combinations of window slots (A-Caching, Babu et al., Sections 3.2-3.3).

Layout. ``B`` buckets (a power of two), one entry at most per bucket: the key (``tkeys[b]``,
``kw`` int64 join-key values), the epoch the entry was created in (``tepoch[b]``, ``EMPTY``
for a free bucket), the head of its chain of combinations (``thead[b]``) and their number
(``tcount[b]``). A new key that hashes to an occupied bucket replaces the entry there (the
paper's direct-mapped replacement, Section 3.3). Combinations live in a pool of rows shared by
all entries: ``cslot[c]`` holds one window slot per relation of the cached segment and
``cborn[c]`` the ``born`` sequence number of the tuple each slot held when the combination was
cached, ``cnext[c]`` links the chain (free rows form a chain too). Only references are stored,
never tuples (Section 3.3).

A reference is *valid* while its slot's current ``born`` equals the cached one: a slot freed by
its window (``born`` set to ``ALIVE`` then) or reused by a later tuple (another ``born``) makes
every combination holding it invalid. Probes skip and unlink invalid combinations (the
executor's maintenance removes them before that can happen; :func:`cache_invalid_refs` lets
tests check it) and see a valid combination at sequence number ``g`` only if every tuple of it
is alive at ``g`` (``born < g < died``), as the window probes of
:mod:`processors.kernels.multimap` do.

``meta`` (int64[META]) holds the free chain's head, the free rows, the entries, the cached
combinations and the invalid combinations unlinked so far.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.splitmix import GAMMA, mix64

NONE = -1
ALIVE = np.iinfo(np.int64).max  # ``died`` of a tuple still in its window
EMPTY = -1  # tepoch of a free bucket
FREE, NFREE, ENTRIES, COMBOS, UNLINKED = range(5)
META = 5


@njit(cache=True, inline="always")
def bucket_of(keys: np.ndarray, r: int, mask: int) -> int:
    """The bucket of key row ``r`` (every column mixed in)."""
    x = GAMMA
    for c in range(keys.shape[1]):
        x = mix64(x ^ np.uint64(keys[r, c]))
    return np.int64(x & np.uint64(mask))


@njit(cache=True, inline="always")
def _same_key(tkeys: np.ndarray, b: int, keys: np.ndarray, r: int) -> bool:
    for c in range(keys.shape[1]):  # noqa: SIM110 (numba: no generator in all())
        if tkeys[b, c] != keys[r, c]:
            return False
    return True


@njit(cache=True, inline="always")
def _release_chain(cnext: np.ndarray, meta: np.ndarray, head: int) -> None:
    """Put a whole chain of combination rows back on the free chain."""
    s = head
    while s != NONE:
        following = cnext[s]
        cnext[s] = meta[FREE]
        meta[FREE] = s
        meta[NFREE] += 1
        meta[COMBOS] -= 1
        s = following


@njit(cache=True, inline="always")
def _push(
    thead,
    tcount,
    cnext,
    cslot,
    cborn,
    meta,
    b,
    slots,
    borns,
    c,  # type: ignore[no-untyped-def]
) -> None:
    """Prepend combination ``c`` of ``slots``/``borns`` to bucket b's chain (a free row must
    exist: the caller reserved it)."""
    s = meta[FREE]
    meta[FREE] = cnext[s]
    meta[NFREE] -= 1
    meta[COMBOS] += 1
    for r in range(slots.shape[1]):
        cslot[s, r] = slots[c, r]
        cborn[s, r] = borns[c, r]
    cnext[s] = thead[b]
    thead[b] = s
    tcount[b] += 1


@njit(cache=True)
def cache_lookup(tkeys, tepoch, mask, keys, gen, epoch, fresh_below, out):  # type: ignore[no-untyped-def]
    """``out[r]``: the bucket of key row r's entry if it may answer a probe at ``gen[r]``
    (created in ``epoch``, or earlier and ``gen[r] < fresh_below``), else NONE.
    Returns (hits, entries present but outdated)."""
    hits = 0
    outdated = 0
    for r in range(keys.shape[0]):
        b = bucket_of(keys, r, mask)
        out[r] = NONE
        if tepoch[b] != EMPTY and _same_key(tkeys, b, keys, r):
            if tepoch[b] == epoch or gen[r] < fresh_below:
                out[r] = b
                hits += 1
            else:
                outdated += 1
    return hits, outdated


@njit(cache=True)
def cache_expand(thead, tcount, cnext, cslot, cborn, meta, buckets, gen, borns, dieds):  # type: ignore[no-untyped-def]
    """Every (row, combination) with row's bucket >= 0 and the combination valid and alive at
    ``gen[row]``, rows in order: the rows, and the combinations' slots as one row per relation
    (``[width, n]``). ``borns``/``dieds``: per relation of the segment, its window's
    ``born``/``died`` arrays. Invalid combinations met are unlinked."""
    total = 0
    for r in range(buckets.shape[0]):
        if buckets[r] >= 0:
            total += tcount[buckets[r]]
    w = cslot.shape[1]
    left = np.empty(total, np.int64)
    out = np.empty((w, total), np.int64)
    m = 0
    for r in range(buckets.shape[0]):
        b = buckets[r]
        if b < 0:
            continue
        g = gen[r]
        prev = NONE
        s = thead[b]
        while s != NONE:
            following = cnext[s]
            valid = True
            alive = True
            for k in range(w):
                slot = cslot[s, k]
                born = borns[k][slot]
                if born != cborn[s, k]:
                    valid = False
                    break
                if not (born < g and g < dieds[k][slot]):
                    alive = False
            if not valid:
                if prev == NONE:
                    thead[b] = following
                else:
                    cnext[prev] = following
                tcount[b] -= 1
                cnext[s] = meta[FREE]
                meta[FREE] = s
                meta[NFREE] += 1
                meta[COMBOS] -= 1
                meta[UNLINKED] += 1
            else:
                if alive:
                    left[m] = r
                    for k in range(w):
                        out[k, m] = cslot[s, k]
                    m += 1
                prev = s
            s = following
    return left[:m], out[:, :m]


@njit(cache=True)
def cache_create(  # type: ignore[no-untyped-def]
    tkeys,
    tepoch,
    thead,
    tcount,
    cnext,
    cslot,
    cborn,
    meta,
    mask,
    keys,
    starts,
    slots,
    borns,
    epoch,
):
    """create(u, v) for every key row r: v is combinations ``starts[r]:starts[r + 1]``; an
    entry already in u's bucket (another key, or an outdated u) is replaced. The pool must have
    ``len(slots)`` free rows."""
    for r in range(keys.shape[0]):
        b = bucket_of(keys, r, mask)
        if tepoch[b] != EMPTY:
            _release_chain(cnext, meta, thead[b])
            meta[ENTRIES] -= 1
        for c in range(keys.shape[1]):
            tkeys[b, c] = keys[r, c]
        tepoch[b] = epoch
        thead[b] = NONE
        tcount[b] = 0
        meta[ENTRIES] += 1
        for c in range(starts[r + 1] - 1, starts[r] - 1, -1):  # prepended: keep their order
            _push(thead, tcount, cnext, cslot, cborn, meta, b, slots, borns, c)


@njit(cache=True, inline="always")
def _holds(thead, cnext, cslot, cborn, b, slots, borns, c):  # type: ignore[no-untyped-def]
    """Whether bucket b's chain holds combination c of ``slots``/``borns``."""
    s = thead[b]
    while s != NONE:
        same = True
        for k in range(slots.shape[1]):
            if cslot[s, k] != slots[c, k] or cborn[s, k] != borns[c, k]:
                same = False
                break
        if same:
            return True
        s = cnext[s]
    return False


@njit(cache=True)
def cache_insert(  # type: ignore[no-untyped-def]
    tkeys,
    tepoch,
    thead,
    tcount,
    cnext,
    cslot,
    cborn,
    meta,
    mask,
    keys,
    slots,
    borns,
    epoch,
    unique,
):
    """insert(u, r) for every combination: added where u's entry is present and was created
    before ``epoch`` (an entry of this epoch holds it already), ignored otherwise; with
    ``unique`` also ignored when the entry holds it. The pool must have ``len(slots)`` free
    rows. Returns how many were added."""
    added = 0
    for c in range(keys.shape[0]):
        b = bucket_of(keys, c, mask)
        if tepoch[b] != EMPTY and tepoch[b] < epoch and _same_key(tkeys, b, keys, c):
            if unique and _holds(thead, cnext, cslot, cborn, b, slots, borns, c):
                continue
            _push(thead, tcount, cnext, cslot, cborn, meta, b, slots, borns, c)
            added += 1
    return added


@njit(cache=True)
def cache_sweep(tepoch, thead, tcount, cnext, cslot, meta, dieds):  # type: ignore[no-untyped-def]
    """Unlink every combination holding a tuple whose ``died`` is set (it leaves its window
    at this epoch's end). Returns how many."""
    removed = 0
    for b in range(tepoch.shape[0]):
        if tepoch[b] == EMPTY:
            continue
        prev = NONE
        s = thead[b]
        while s != NONE:
            following = cnext[s]
            dying = False
            for k in range(cslot.shape[1]):
                if dieds[k][cslot[s, k]] != ALIVE:
                    dying = True
                    break
            if dying:
                if prev == NONE:
                    thead[b] = following
                else:
                    cnext[prev] = following
                tcount[b] -= 1
                cnext[s] = meta[FREE]
                meta[FREE] = s
                meta[NFREE] += 1
                meta[COMBOS] -= 1
                removed += 1
            else:
                prev = s
            s = following
    return removed


@njit(cache=True)
def cache_delete(tkeys, tepoch, thead, tcount, cnext, cslot, cborn, meta, mask, keys, slots, borns):  # type: ignore[no-untyped-def]
    """delete(u, r) for every combination: removed from u's entry if present there, ignored
    otherwise. Returns how many were removed."""
    removed = 0
    w = slots.shape[1]
    for c in range(keys.shape[0]):
        b = bucket_of(keys, c, mask)
        if tepoch[b] == EMPTY or not _same_key(tkeys, b, keys, c):
            continue
        prev = NONE
        s = thead[b]
        while s != NONE:
            same = True
            for k in range(w):
                if cslot[s, k] != slots[c, k] or cborn[s, k] != borns[c, k]:
                    same = False
                    break
            if same:
                if prev == NONE:
                    thead[b] = cnext[s]
                else:
                    cnext[prev] = cnext[s]
                tcount[b] -= 1
                cnext[s] = meta[FREE]
                meta[FREE] = s
                meta[NFREE] += 1
                meta[COMBOS] -= 1
                removed += 1
                break
            prev = s
            s = cnext[s]
    return removed


@njit(cache=True)
def cache_invalid_refs(tepoch, thead, cnext, cslot, cborn, borns):  # type: ignore[no-untyped-def]
    """How many cached combinations hold a reference that is no longer valid (a slot freed or
    reused since): zero whenever maintenance is exact."""
    bad = 0
    for b in range(tepoch.shape[0]):
        if tepoch[b] == EMPTY:
            continue
        s = thead[b]
        while s != NONE:
            for k in range(cslot.shape[1]):
                if borns[k][cslot[s, k]] != cborn[s, k]:
                    bad += 1
                    break
            s = cnext[s]
    return bad


@njit(cache=True)
def cache_distribute(owner, starts, lo, hi, gen):  # type: ignore[no-untyped-def]
    """Rows that share a freshly computed value: every (row, combination) with combination in
    ``starts[owner[row]]:starts[owner[row] + 1]`` and ``lo < gen[row] < hi`` (the newest
    ``born`` and the first ``died`` of its tuples), rows in order."""
    total = 0
    for r in range(owner.shape[0]):
        total += starts[owner[r] + 1] - starts[owner[r]]
    left = np.empty(total, np.int64)
    rows = np.empty(total, np.int64)
    m = 0
    for r in range(owner.shape[0]):
        g = gen[r]
        for c in range(starts[owner[r]], starts[owner[r] + 1]):
            if lo[c] < g and g < hi[c]:
                left[m] = r
                rows[m] = c
                m += 1
    return left[:m], rows[:m]


@njit(cache=True)
def merge_rows(left_a, cols_a, left_b, cols_b):  # type: ignore[no-untyped-def]
    """Two (rows, slots ``[width, n]``) results with rows in order, merged in row order."""
    na, nb = left_a.shape[0], left_b.shape[0]
    w = cols_a.shape[0]
    left = np.empty(na + nb, np.int64)
    cols = np.empty((w, na + nb), np.int64)
    i = j = 0
    for m in range(na + nb):
        if j == nb or (i < na and left_a[i] <= left_b[j]):
            left[m] = left_a[i]
            for k in range(w):
                cols[k, m] = cols_a[k, i]
            i += 1
        else:
            left[m] = left_b[j]
            for k in range(w):
                cols[k, m] = cols_b[k, j]
            j += 1
    return left, cols
