"""The multiset of live (gid, values) tuples of the aggregate kernels, and the row pass.

See :mod:`processors.kernels.aggregate` for the whole design: :class:`RowTable` is one
open-addressing table on (gid, values) with the tuples inline plus a list of slots per group;
:func:`row_pass` applies a batch's deltas to it in order; :func:`recompute_extremes` walks the
lists of groups whose min or max left.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.aggregate_groups import EMPTY, MAX_LOAD, GroupState, table_size
from processors.kernels.intrinsics import prefetch
from processors.kernels.splitmix import GAMMA, mix64

# why a delta was not applied (the stage turns it into a dead letter)
DEAD_NOT_HELD = 1  # retracts a tuple its group does not hold
DEAD_BAD_SIGN = 2  # sign is neither +1 nor -1

# columns of a row-table slot: the tuple's hash, its gid, its multiplicity (> 0 live, 0 empty,
# -1 tombstone), the next slot in its group's list; then its k values (ordered keys)
_H, _G, _M, _N, _V = 0, 1, 2, 3, 4
_TOMB = -1
_AHEAD = 16  # the row pass prefetches the slot of the tuple this many deltas ahead


class RowTable:
    """Multiset of (gid, value tuple) as one open-addressing table with the tuples inline.

    Each slot is a row of ``table`` (see the column constants), so a probe reads one or two
    adjacent cache lines: on a machine whose memory latency dominates, this layout (rather than
    slots pointing into a slab of entries) is what makes the kernel fast. Slots never move:
    deleting leaves a tombstone, which also stays in its group's list (a singly linked list of
    slots, ``head`` in :class:`GroupState`) until a walk of that list drops it. :meth:`reserve`
    rebuilds the table, lists included, when live slots and tombstones would pass MAX_LOAD;
    the new table starts at most a quarter full, so that the O(size) rebuild is paid for by the
    (at least size/4) inserts and deletes before the next one.
    """

    def __init__(self, k: int, capacity: int = 1024) -> None:
        self.k = k
        self.table = np.zeros((table_size(capacity), _V + k), np.int64)
        self.meta = np.zeros(2, np.int64)  # live slots, tombstones

    @property
    def live(self) -> int:
        """Distinct live (gid, values) tuples."""
        return int(self.meta[0])

    def reserve(self, extra: int, head: np.ndarray) -> None:
        """Room for ``extra`` more tuples without growing inside a kernel; a rebuild relinks
        the group lists in ``head``."""
        used = int(self.meta[0] + self.meta[1]) + extra
        if used <= len(self.table) * MAX_LOAD:
            return
        table = np.zeros((table_size(2 * (self.live + extra)), _V + self.k), np.int64)
        head[:] = EMPTY
        _rebuild_kernel(self.table, table, head)
        self.table = table
        self.meta[1] = 0

    def live_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(gids, values as rows of k ordered keys, multiplicities) of the live tuples."""
        live = self.table[self.table[:, _M] > 0]
        return live[:, _G].copy(), live[:, _V:].copy(), live[:, _M].copy()


@njit(cache=True)
def _rebuild_kernel(old: np.ndarray, table: np.ndarray, head: np.ndarray) -> None:
    """Copy the live slots of ``old`` into the empty ``table`` and link each into its group."""
    mask = np.uint64(table.shape[0] - 1)
    for s in range(old.shape[0]):
        if old[s, _M] > 0:
            i = np.uint64(old[s, _H]) & mask
            while table[i, _M] != 0:
                i = (i + np.uint64(1)) & mask
            table[i, :] = old[s, :]
            g = old[s, _G]
            table[i, _N] = head[g]
            head[g] = np.int64(i)


# ``vals`` in the kernels below is column-major like the batch arrays: value column c of tuple
# i is vals[c, i].


@njit(cache=True, inline="always")
def _row_hash(g: int, vals: np.ndarray, i: int) -> int:
    h = mix64(np.uint64(g) ^ GAMMA)
    for c in range(vals.shape[0]):
        h = mix64(h + np.uint64(vals[c, i]))
    return np.int64(h)


@njit(cache=True, inline="always")
def _row_find(table: np.ndarray, h: int, g: int, vals: np.ndarray, i: int) -> tuple[int, bool]:
    """(slot, True) of tuple i of group g, or (the first empty slot on its path, False)."""
    mask = np.uint64(table.shape[0] - 1)
    s = np.uint64(h) & mask
    while True:
        m = table[s, _M]
        if m == 0:
            return np.int64(s), False
        if m > 0 and table[s, _H] == h and table[s, _G] == g:
            same = True
            for c in range(vals.shape[0]):
                same &= table[s, _V + c] == vals[c, i]
            if same:
                return np.int64(s), True
        s = (s + np.uint64(1)) & mask


@njit(cache=True, inline="always")
def _row_add(
    table: np.ndarray, head: np.ndarray, s: int, h: int, g: int, vals: np.ndarray, i: int, m: int
) -> None:
    """Tuple i of group g with multiplicity m into the empty slot s, at the front of its list."""
    table[s, _H] = h
    table[s, _G] = g
    table[s, _M] = m
    table[s, _N] = head[g]
    for c in range(vals.shape[0]):
        table[s, _V + c] = vals[c, i]
    head[g] = s


@njit(cache=True)
def _load_rows_kernel(
    table: np.ndarray,
    meta: np.ndarray,
    head: np.ndarray,
    gids: np.ndarray,
    vals: np.ndarray,
    mult: np.ndarray,
) -> None:
    """Insert distinct (gid, values) tuples with their multiplicities (restoring a snapshot)."""
    for i in range(gids.shape[0]):
        g = gids[i]
        h = _row_hash(g, vals, i)
        s, found = _row_find(table, h, g, vals, i)
        if found:
            table[s, _M] += mult[i]
        else:
            _row_add(table, head, s, h, g, vals, i, mult[i])
            meta[0] += 1


def load_rows(
    rows: RowTable, groups: GroupState, gids: np.ndarray, vals: np.ndarray, mult: np.ndarray
) -> None:
    """Put live tuples (``vals``: one row of k ordered keys each) back into the row table; the
    groups' counts, sums and extremes are set apart."""
    rows.reserve(len(gids), groups.head)
    _load_rows_kernel(
        rows.table,
        rows.meta,
        groups.head,
        np.ascontiguousarray(gids, np.int64),
        np.ascontiguousarray(np.asarray(vals, np.int64).reshape(len(gids), rows.k).T),
        np.ascontiguousarray(mult, np.int64),
    )


@njit(cache=True)
def row_pass(
    gids: np.ndarray,
    sign: np.ndarray,
    ts: np.ndarray,
    vals: np.ndarray,
    batch_no: int,
    count: np.ndarray,
    head: np.ndarray,
    stamp: np.ndarray,
    pos: np.ndarray,
    table: np.ndarray,
    meta: np.ndarray,
) -> tuple:
    """Apply the deltas to the multisets and counts, in order.

    Returns (touched gids in order of first appearance, first row of each, ts of its last
    applied delta, its count before the batch, per delta: +1/-1 if applied as insert/delete
    and 0 if not, the group's count after it, whether a delete removed the tuple's last copy;
    then the rows not applied and why).
    """
    n = gids.shape[0]
    touched = np.empty(n, np.int64)
    first = np.empty(n, np.int64)
    last_ts = np.zeros(n, np.int64)
    old_count = np.empty(n, np.int64)
    applied = np.zeros(n, np.int8)
    after = np.empty(n, np.int64)
    last_copy = np.zeros(n, np.bool_)
    dead = np.empty(n, np.int64)
    dead_code = np.empty(n, np.int8)
    hashes = np.empty(n, np.int64)
    for i in range(n):
        hashes[i] = _row_hash(gids[i], vals, i)
    mask = table.shape[0] - 1
    nt = 0
    nd = 0
    for i in range(n):
        if i + _AHEAD < n:
            prefetch(table, hashes[i + _AHEAD] & mask)
        g = gids[i]
        if stamp[g] != batch_no:
            stamp[g] = batch_no
            pos[g] = nt
            touched[nt] = g
            first[nt] = i
            old_count[nt] = count[g]
            nt += 1
        s = sign[i]
        if s != 1 and s != -1:
            dead[nd] = i
            dead_code[nd] = DEAD_BAD_SIGN
            nd += 1
            continue
        h = hashes[i]
        slot, found = _row_find(table, h, g, vals, i)
        if s == 1:
            if found:
                table[slot, _M] += 1
            else:
                _row_add(table, head, slot, h, g, vals, i, 1)
                meta[0] += 1
            count[g] += 1
        elif not found:
            dead[nd] = i
            dead_code[nd] = DEAD_NOT_HELD
            nd += 1
            continue
        else:
            if table[slot, _M] > 1:
                table[slot, _M] -= 1
            else:
                table[slot, _M] = _TOMB  # stays in the group's list until a walk drops it
                meta[0] -= 1
                meta[1] += 1
                last_copy[i] = True
            count[g] -= 1
        applied[i] = s
        after[i] = count[g]
        last_ts[pos[g]] = ts[i]
    return (
        touched[:nt],
        first[:nt],
        last_ts[:nt],
        old_count[:nt],
        applied,
        after,
        last_copy,
        dead[:nd],
        dead_code[:nd],
    )


_LANES = 32  # group lists walked at once (see recompute_extremes)


@njit(cache=True)
def recompute_extremes(
    gids: np.ndarray,
    head: np.ndarray,
    table: np.ndarray,
    vmin: np.ndarray,
    vmax: np.ndarray,
    track: np.ndarray,
) -> None:
    """Min and max of the tracked columns of each (non-empty) group from its live tuples,
    dropping the tombstones from the group's list on the way.

    Following a list is a chain of dependent cache misses, so the lists of up to _LANES groups
    are followed together, one step each in turn: their misses overlap.
    """
    lane_g = np.full(_LANES, EMPTY, np.int64)
    lane_s = np.full(_LANES, EMPTY, np.int64)
    lane_prev = np.full(_LANES, EMPTY, np.int64)
    lane_seen = np.zeros(_LANES, np.bool_)
    nxt_group = 0
    busy = True
    while busy:
        busy = False
        for w in range(_LANES):
            s = lane_s[w]
            if s == EMPTY:  # this lane's list is done (or never started): take the next group
                if nxt_group == gids.shape[0]:
                    continue
                g = gids[nxt_group]
                nxt_group += 1
                lane_g[w] = g
                lane_s[w] = head[g]
                if head[g] != EMPTY:
                    prefetch(table, head[g])
                lane_prev[w] = EMPTY
                lane_seen[w] = False
                busy = True
                continue
            busy = True
            g = lane_g[w]
            nxt = table[s, _N]
            if nxt != EMPTY:
                prefetch(table, nxt)
            if table[s, _M] < 0:
                if lane_prev[w] == EMPTY:
                    head[g] = nxt
                else:
                    table[lane_prev[w], _N] = nxt
            else:
                seen = lane_seen[w]
                for c in range(vmin.shape[0]):
                    if track[c]:
                        v = table[s, _V + c]
                        vmin[c, g] = min(vmin[c, g], v) if seen else v
                        vmax[c, g] = max(vmax[c, g], v) if seen else v
                lane_seen[w] = True
                lane_prev[w] = s
            lane_s[w] = nxt
