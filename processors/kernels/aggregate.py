"""Group-update kernels of the GROUP BY aggregate stage (docs/windows-and-joins.md, "Aggregates").

A signed stream inserts and retracts tuples; after each batch the stage reports, per group whose
values changed, the old and the new count, sum, avg, min and max. Groups are dense int64 ids
(gids) handed out by a key map (:class:`IntKeyMap` for one numeric group column, a Python dict
in the stage otherwise) and reused once a group is empty again.

Per group (:class:`GroupState`) the kernels keep the count and, per *value column* (a column
that some sum, avg, min or max reads), an exact int64 sum (integer columns; it wraps modulo
2**64), a compensated float64 sum (float columns; Neumaier's variant of Kahan summation, so that
long runs of inserts and retractions do not drift), a min and a max. Values reach the kernels as
*ordered keys*: integers as int64, floats through :func:`ordered_keys`, an int64 whose order is
the float order (-0.0 < 0.0, NaN canonical and above +inf). One int64 comparison then serves every
column type and a min or max is a deterministic function of the group's multiset of values.

Min and max must come back after the current extreme is deleted, so each group keeps the multiset
of its live value tuples (:class:`RowTable`: one open-addressing table on (gid, values), the
tuples inline, plus a list of slots per group). The same table decides whether a delete retracts
a tuple the group holds; if not, the delta is a dead letter and is not applied.

A batch is applied in passes (:func:`apply_batch`): a *row pass* in delta order updates the
multisets and counts and notes, per delta, whether it applied and the group's count after it;
then one tight pass per value column updates sums and extremes from those notes (1-D arrays, no
per-tuple loop over columns). A delete that removes the last copy of a group's current min or max
marks the group dirty; after the column passes each dirty group's extremes are recomputed by
walking its list (only the state at batch boundaries is ever reported, so once per batch
suffices). Last, the touched groups' old and new rows are compared and the changed ones emitted.

Cost: O(1) expected per delta (a probe of the row table, one of the key map for numeric keys,
O(1) per value column; amortized over the table rebuilds), plus per batch O(length of g's list)
for every group g whose current min or max left during the batch: its live distinct tuples and
the tombstones since its last walk. Random values rarely pay that (the extreme is about one
delete in d); the bad case is a value that moves with time, such as min(ts) over a sliding
window, where every batch walks the group. Hot loops are memory-latency bound, hence the inline
table layout, the prefetches and the interleaved list walks below.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from processors.kernels.splitmix import GAMMA, mix64

EMPTY = -1
MAX_LOAD = 0.5  # hash tables double before they are more than half full
_FLIP = np.int64(0x7FFFFFFFFFFFFFFF)
_CANONICAL_NAN = np.float64(np.nan)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)

# why a delta was not applied (the stage turns it into a dead letter)
DEAD_NOT_HELD = 1  # retracts a tuple its group does not hold
DEAD_BAD_SIGN = 2  # sign is neither +1 nor -1


@intrinsic
def _prefetch(typingctx, table, row):
    """Ask the CPU to start loading row ``row`` of the 2-D array ``table`` (llvm.prefetch: no
    fault, no wait). The row pass is bound by memory latency, not bandwidth: fetching the slot
    of a tuple a few tuples ahead overlaps the misses that the probes would take one by one."""

    def codegen(context, builder, sig, args):  # type: ignore[no-untyped-def]
        aryty = sig.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer(
            context, builder, aryty, ary, [args[1], zero], wraparound=False
        )
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(table, row), codegen


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


def _table_size(entries: int) -> int:
    """Smallest power of two (>= 8) holding ``entries`` at load factor at most MAX_LOAD."""
    size = 8
    while size * MAX_LOAD < entries:
        size *= 2
    return size


def _grown(arr: np.ndarray, size: int, fill: int | float, axis: int = 0) -> np.ndarray:
    """``arr`` extended to ``size`` along ``axis``, the new part set to ``fill``."""
    shape = list(arr.shape)
    shape[axis] = size
    out = np.full(shape, fill, dtype=arr.dtype)
    out[(slice(None),) * axis + (slice(0, arr.shape[axis]),)] = arr
    return out


@njit(cache=True, inline="always")
def _pop_free(free: np.ndarray, meta: np.ndarray) -> int:
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
        self.count = _grown(self.count, size, 0)
        self.head = _grown(self.head, size, EMPTY)
        self.stamp = _grown(self.stamp, size, 0)
        self.pos = _grown(self.pos, size, 0)
        self.dirty = _grown(self.dirty, size, 0)
        self.free = _grown(self.free, size, 0)
        for name in ("sum_i", "sum_f", "comp", "vmin", "vmax"):
            setattr(self, name, _grown(getattr(self, name), size, 0, axis=1))

    def alloc(self) -> int:
        """One gid (Python-side allocation, for the dict key map; call :meth:`reserve` first)."""
        return int(_pop_free(self.free, self.meta))

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
                g = _pop_free(free, meta)
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
        size = _table_size(capacity)
        self.slot_keys = np.zeros(size, np.int64)
        self.slot_gids = np.full(size, EMPTY, np.int64)
        self.key_of_gid = np.zeros(capacity, np.int64)
        self.size = 0

    def reserve(self, extra: int, gid_capacity: int) -> None:
        """Room for ``extra`` more keys, and for gids below ``gid_capacity``."""
        if len(self.key_of_gid) < gid_capacity:
            self.key_of_gid = _grown(self.key_of_gid, gid_capacity, 0)
        size = _table_size(self.size + extra)
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


# ---------------------------------------------------------------------------------------------
# the multiset of live (gid, values) tuples

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
        self.table = np.zeros((_table_size(capacity), _V + k), np.int64)
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
        table = np.zeros((_table_size(2 * (self.live + extra)), _V + self.k), np.int64)
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


# ---------------------------------------------------------------------------------------------
# applying one batch


@njit(cache=True)
def _row_pass(
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
            _prefetch(table, hashes[i + _AHEAD] & mask)
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


@njit(cache=True)
def _int_column_pass(
    gids: np.ndarray,
    applied: np.ndarray,
    after: np.ndarray,
    last_copy: np.ndarray,
    v: np.ndarray,
    sum_i: np.ndarray,
    vmin: np.ndarray,
    vmax: np.ndarray,
    dirty: np.ndarray,
    track: bool,
) -> None:
    """Exact sums and extremes of one integer column. A group's first tuple sets them; the
    delete that empties it zeroes the sum."""
    for i in range(gids.shape[0]):
        a = applied[i]
        if a == 0:
            continue
        g = gids[i]
        x = v[i]
        if a == 1:
            if after[i] == 1:
                sum_i[g] = x
                vmin[g] = x
                vmax[g] = x
            else:
                sum_i[g] += x
                if track:
                    vmin[g] = min(vmin[g], x)
                    vmax[g] = max(vmax[g], x)
        else:
            sum_i[g] = sum_i[g] - x if after[i] > 0 else 0
            if track and last_copy[i] and (x == vmin[g] or x == vmax[g]):
                dirty[g] = 1


@njit(cache=True, inline="always")
def _neumaier_step(s: float, x: float) -> tuple[float, float]:
    """(s + x, the rounding error of that addition) (Neumaier 1974); the error is 0 once the
    sum is not finite. Scalars only: a helper taking arrays costs reference counting per call
    in the hot loop."""
    t = s + x
    s_larger = abs(s) >= abs(x)  # selects, not branches: the outcome is as random as the data
    big = s if s_larger else x
    small = x if s_larger else s
    err = (big - t) + small
    return t, err if t - t == 0.0 else 0.0


@njit(cache=True)
def _float_column_pass(
    gids: np.ndarray,
    applied: np.ndarray,
    after: np.ndarray,
    last_copy: np.ndarray,
    v: np.ndarray,
    f: np.ndarray,
    sum_f: np.ndarray,
    comp: np.ndarray,
    vmin: np.ndarray,
    vmax: np.ndarray,
    dirty: np.ndarray,
    track: bool,
) -> None:
    """Compensated sums and extremes (of the ordered keys ``v``) of one float column ``f``; a
    group's first tuple sets them, the delete that empties it resets the sum exactly to 0, so
    that rounding errors do not outlive the group."""
    for i in range(gids.shape[0]):
        a = applied[i]
        if a == 0:
            continue
        g = gids[i]
        x = v[i]
        if a == 1:
            if after[i] == 1:
                sum_f[g] = f[i]
                comp[g] = 0.0
                vmin[g] = x
                vmax[g] = x
            else:
                sum_f[g], err = _neumaier_step(sum_f[g], f[i])
                comp[g] += err
                if track:
                    vmin[g] = min(vmin[g], x)
                    vmax[g] = max(vmax[g], x)
        else:
            if after[i] > 0:
                sum_f[g], err = _neumaier_step(sum_f[g], -f[i])
                comp[g] += err
            else:
                sum_f[g] = 0.0
                comp[g] = 0.0
            if track and last_copy[i] and (x == vmin[g] or x == vmax[g]):
                dirty[g] = 1


_LANES = 32  # group lists walked at once (see _recompute_kernel)


@njit(cache=True)
def _recompute_kernel(
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
                    _prefetch(table, head[g])
                lane_prev[w] = EMPTY
                lane_seen[w] = False
                busy = True
                continue
            busy = True
            g = lane_g[w]
            nxt = table[s, _N]
            if nxt != EMPTY:
                _prefetch(table, nxt)
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


@njit(cache=True)
def _gather_old(touched: np.ndarray, sum_i, sum_f, comp, vmin, vmax) -> tuple:
    """The touched groups' sums (floats as reported) and extremes before the column passes."""
    k, nt = sum_i.shape[0], touched.shape[0]
    o_sum_i = np.empty((k, nt), np.int64)
    o_sum_f = np.empty((k, nt), np.float64)
    o_min = np.empty((k, nt), np.int64)
    o_max = np.empty((k, nt), np.int64)
    for c in range(k):
        for t in range(nt):
            g = touched[t]
            o_sum_i[c, t] = sum_i[c, g]
            o_sum_f[c, t] = sum_f[c, g] + comp[c, g]
            o_min[c, t] = vmin[c, g]
            o_max[c, t] = vmax[c, g]
    return o_sum_i, o_sum_f, o_min, o_max


@njit(cache=True, inline="always")
def _float_bits(x: float) -> int:
    return np.float64(x).view(np.int64)


@njit(cache=True)
def _emit_kernel(
    touched: np.ndarray,
    first: np.ndarray,
    last_ts: np.ndarray,
    o_count: np.ndarray,
    old: tuple,
    count: np.ndarray,
    sum_i: np.ndarray,
    sum_f: np.ndarray,
    comp: np.ndarray,
    vmin: np.ndarray,
    vmax: np.ndarray,
    flags: tuple,
) -> tuple:
    """Output rows: per touched group whose reported row changed, -old (unless it was empty)
    then +new (unless it is empty now), in the order of the groups' first appearance. Float
    sums compare by bits (-0.0 differs from 0.0, NaN equals NaN).

    Everything is unpacked here, outside the loop: helpers taking tuples or arrays inside it
    cost atomic reference counting per call, which made this loop ten times slower.
    """
    o_sum_i, o_sum_f, o_min, o_max = old
    is_float, track, cmp_sum = flags
    k, nt = sum_i.shape[0], touched.shape[0]
    keep = np.zeros(nt, np.bool_)
    for t in range(nt):
        g = touched[t]
        changed = o_count[t] != count[g]
        if not changed and count[g] > 0:
            for c in range(k):
                if cmp_sum[c]:
                    if is_float[c]:
                        new = _float_bits(sum_f[c, g] + comp[c, g])
                        changed |= _float_bits(o_sum_f[c, t]) != new
                    else:
                        changed |= o_sum_i[c, t] != sum_i[c, g]
                if track[c]:
                    changed |= o_min[c, t] != vmin[c, g] or o_max[c, t] != vmax[c, g]
        keep[t] = changed
    row = np.empty(2 * nt, np.int64)
    sign = np.empty(2 * nt, np.int8)
    ts = np.empty(2 * nt, np.int64)
    cnt = np.empty(2 * nt, np.int64)
    r_sum_i = np.empty((k, 2 * nt), np.int64)
    r_sum_f = np.empty((k, 2 * nt), np.float64)
    r_min = np.empty((k, 2 * nt), np.int64)
    r_max = np.empty((k, 2 * nt), np.int64)
    m = 0
    for t in range(nt):
        if not keep[t]:
            continue
        g = touched[t]
        if o_count[t] > 0:
            row[m], sign[m], ts[m], cnt[m] = first[t], -1, last_ts[t], o_count[t]
            for c in range(k):
                r_sum_i[c, m] = o_sum_i[c, t]
                r_sum_f[c, m] = o_sum_f[c, t]
                r_min[c, m] = o_min[c, t]
                r_max[c, m] = o_max[c, t]
            m += 1
        if count[g] > 0:
            row[m], sign[m], ts[m], cnt[m] = first[t], 1, last_ts[t], count[g]
            for c in range(k):
                r_sum_i[c, m] = sum_i[c, g]
                r_sum_f[c, m] = sum_f[c, g] + comp[c, g]
                r_min[c, m] = vmin[c, g]
                r_max[c, m] = vmax[c, g]
            m += 1
    return (
        row[:m],
        sign[:m],
        ts[:m],
        cnt[:m],
        r_sum_i[:, :m],
        r_sum_f[:, :m],
        r_min[:, :m],
        r_max[:, :m],
    )


class BatchResult:
    """What one batch produced: output rows and the deltas that were not applied.

    Output row j reports the group of input row ``row[j]``. ``sums[c]``, ``vmin[c]`` and
    ``vmax[c]`` are per value column c: the reported sum (int64 for integer columns, float64
    with the compensation included for float ones) and the extremes as ordered keys.
    """

    __slots__ = (
        "row",
        "sign",
        "ts",
        "count",
        "sums",
        "vmin",
        "vmax",
        "released",
        "dead",
        "dead_code",
    )

    def __init__(self, **parts: object) -> None:
        for name in self.__slots__:
            setattr(self, name, parts[name])


def reported_sums(groups: GroupState, is_float: np.ndarray, gids: np.ndarray) -> list[np.ndarray]:
    """Per value column, the sums of ``gids`` as reported (floats with the compensation)."""
    return [
        groups.sum_f[c, gids] + groups.comp[c, gids] if is_float[c] else groups.sum_i[c, gids]
        for c in range(groups.k)
    ]


def apply_batch(
    groups: GroupState,
    rows: RowTable,
    gids: np.ndarray,
    sign: np.ndarray,
    ts: np.ndarray,
    vals: np.ndarray,
    fvals: np.ndarray,
    flags: tuple[np.ndarray, np.ndarray, np.ndarray],
    batch_no: int,
) -> BatchResult:
    """Apply one batch of signed tuples and report the changed groups.

    ``gids`` are the tuples' groups (from a key map, so ``groups`` has room for them); ``vals``
    their value columns as ordered keys and ``fvals`` as float64 (read for float columns only),
    both k x n; ``flags`` = (is_float, track min/max, report sum) per value column;
    ``batch_no`` differs from every earlier batch's. Groups that end the batch empty are
    released (their gids freed, and listed in ``released`` for the key map).
    """
    g = groups
    rows.reserve(len(gids), g.head)
    (touched, first, last_ts, o_count, applied, after, last_copy, dead, dead_code) = _row_pass(
        gids,
        np.ascontiguousarray(sign, np.int8),
        np.ascontiguousarray(ts, np.int64),
        vals,
        batch_no,
        g.count,
        g.head,
        g.stamp,
        g.pos,
        rows.table,
        rows.meta,
    )
    old = _gather_old(touched, g.sum_i, g.sum_f, g.comp, g.vmin, g.vmax)
    _column_passes(g, gids, applied, after, last_copy, vals, fvals, flags)
    n_count = g.count[touched]
    _settle_extremes(g, rows, touched, n_count, flags[1])
    row, out_sign, out_ts, count, sum_i, sum_f, vmin, vmax = _emit_kernel(
        touched, first, last_ts, o_count, old, g.count, g.sum_i, g.sum_f, g.comp, g.vmin, g.vmax,
        flags,
    )  # fmt: skip
    released = touched[n_count == 0]
    g.release(released)
    return BatchResult(
        row=row,
        sign=out_sign,
        ts=out_ts,
        count=count,
        sums=[sum_f[c] if flags[0][c] else sum_i[c] for c in range(g.k)],
        vmin=list(vmin),
        vmax=list(vmax),
        released=released,
        dead=dead,
        dead_code=dead_code,
    )


def _settle_extremes(
    groups: GroupState, rows: RowTable, touched: np.ndarray, n_count: np.ndarray, track
) -> None:
    """Recompute the extremes of the touched groups marked dirty that are not empty."""
    dirty = touched[(groups.dirty[touched] != 0) & (n_count > 0)]
    if len(dirty):
        _recompute_kernel(dirty, groups.head, rows.table, groups.vmin, groups.vmax, track)
    groups.dirty[touched] = 0


def _column_passes(
    groups: GroupState,
    gids: np.ndarray,
    applied: np.ndarray,
    after: np.ndarray,
    last_copy: np.ndarray,
    vals: np.ndarray,
    fvals: np.ndarray,
    flags: tuple[np.ndarray, np.ndarray, np.ndarray],
) -> None:
    is_float, track, _ = flags
    g = groups
    for c in range(g.k):
        if is_float[c]:
            _float_column_pass(
                gids, applied, after, last_copy, vals[c], fvals[c], g.sum_f[c], g.comp[c],
                g.vmin[c], g.vmax[c], g.dirty, bool(track[c]),
            )  # fmt: skip
        else:
            _int_column_pass(
                gids, applied, after, last_copy, vals[c], g.sum_i[c], g.vmin[c], g.vmax[c],
                g.dirty, bool(track[c]),
            )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# variable-length group keys -> dense codes


@njit(cache=True)
def hash_var(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each value (FNV-1a over the bytes and the length, then mixed)."""
    n = offsets.shape[0] - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = _FNV_OFFSET
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * _FNV_PRIME
        out[i] = mix64(h ^ np.uint64(offsets[i + 1] - offsets[i]))
    return out


@njit(cache=True)
def same_as_representative(
    offsets: np.ndarray, data: np.ndarray, codes: np.ndarray, reps: np.ndarray
) -> bool:
    """Whether every value equals the value at ``reps[codes[i]]`` (no hash collision)."""
    for i in range(codes.shape[0]):
        r = reps[codes[i]]
        a, b = offsets[i], offsets[r]
        length = offsets[i + 1] - a
        if offsets[r + 1] - b != length:
            return False
        for j in range(length):
            if data[a + j] != data[b + j]:
                return False
    return True
