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
table layout, the prefetches and the interleaved list walks (:mod:`.aggregate_rows`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.aggregate_groups import (
    EMPTY,
    GroupState,
    IntKeyMap,
    floats_from_keys,
    ordered_keys,
)
from processors.kernels.aggregate_rows import (
    DEAD_BAD_SIGN,
    DEAD_NOT_HELD,
    RowTable,
    load_rows,
    recompute_extremes,
    row_pass,
)

__all__ = [
    "DEAD_BAD_SIGN",
    "DEAD_NOT_HELD",
    "EMPTY",
    "BatchResult",
    "GroupState",
    "IntKeyMap",
    "RowTable",
    "apply_batch",
    "floats_from_keys",
    "load_rows",
    "ordered_keys",
    "reported_sums",
]


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
    (touched, first, last_ts, o_count, applied, after, last_copy, dead, dead_code) = row_pass(
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
        recompute_extremes(dirty, groups.head, rows.table, groups.vmin, groups.vmax, track)
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
