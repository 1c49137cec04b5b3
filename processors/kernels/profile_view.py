"""Kernels over the profile window and its matrix view (A-Greedy, Section 4.2 of Babu et al.).

Profile tuples are rows of a ``uint8`` matrix, one column per filter *id*: ``bits[t, f] == 1``
when filter ``f`` dropped profiled tuple ``t``. The matrix view ``V`` is indexed by *position*
in the current order ``order`` (``order[c]`` is the filter at position ``c``): ``V[r, c]`` counts
profile tuples not dropped by positions ``0..r-1`` that position ``c`` drops.

Variants keep only some entries of ``V`` (Fig. 7 of the paper); ``mode`` says which:
full upper triangle (A-Greedy), the first row (Independent), the diagonal plus column ``j``
(Sweep profiling position ``j``), or the two main diagonals (LocalSwaps).
"""

from __future__ import annotations

import time

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from processors.kernels.hash_index import home_slot, index_contains, probe_key, select_in_index
from processors.kernels.splitmix import GAMMA, mix64

FULL, FIRST_ROW, DIAGONAL_AND_COLUMN, TWO_DIAGONALS = range(4)


# -- timing inside kernels ---------------------------------------------------------------------
# A kernel that does main-pass work and profiling in one call (to save a call) must say how
# long each part took, so that the run-time breakdown (Table 2) stays a measurement.


@intrinsic
def _readcyclecounter(typingctx):  # type: ignore[no-untyped-def]
    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.uint64(), codegen


@njit(cache=True)
def cycles():  # type: ignore[no-untyped-def]
    """The CPU's cycle counter (x86: the constant-rate TSC), as int64; 0 where there is none."""
    return np.int64(_readcyclecounter())


@intrinsic
def _prefetch(typingctx, arr, idx):  # type: ignore[no-untyped-def]
    """Ask the CPU to bring ``arr[idx]`` into cache (no effect on results)."""

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # read, high locality, data cache
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, idx), codegen


_NS_PER_CYCLE: list[float] = []


def ns_per_cycle() -> float:
    """Nanoseconds per :func:`cycles` tick, measured once per process over ~2 ms (0.0 when
    the counter does not run: callers then fall back to splitting by evaluations)."""
    if not _NS_PER_CYCLE:
        c0, t0 = cycles(), time.perf_counter_ns()
        while time.perf_counter_ns() - t0 < 2_000_000:
            pass
        c1, t1 = cycles(), time.perf_counter_ns()
        _NS_PER_CYCLE.append((t1 - t0) / (c1 - c0) if c1 > c0 else 0.0)
    return _NS_PER_CYCLE[0]


@njit(cache=True, inline="always")
def _kept(mode: int, r: int, c: int, j: int) -> bool:
    if mode == FULL:
        return True
    if mode == FIRST_ROW:
        return r == 0
    if mode == DIAGONAL_AND_COLUMN:
        return c == r or c == j  # noqa: SIM109 (plain compares compile simplest in numba)
    return c == r or c == r + 1


@njit(cache=True)
def view_row(view, r, order, bits, rows, mode, j):  # type: ignore[no-untyped-def]
    """Recompute row ``r`` of the view from the live profile tuples ``rows``: Fig. 5 lines 6-13."""
    n = order.shape[0]
    for c in range(r, n):
        view[r, c] = 0
    for k in range(rows.shape[0]):
        t = rows[k]
        alive = True
        for p in range(r):
            if bits[t, order[p]] == 1:
                alive = False
                break
        if not alive:
            continue
        for c in range(r, n):
            if bits[t, order[c]] == 1 and _kept(mode, r, c, j):
                view[r, c] += 1


@njit(cache=True)
def mark_dropped(candidates, passed, m, targets, bits, f):  # type: ignore[no-untyped-def]
    """Set ``bits[targets[i], f] = 1`` for each candidate row not among ``passed[:m]``.

    Both row lists ascend and ``passed`` is a subsequence of ``candidates`` (what a selection
    kernel returns), so one merge walk finds the dropped ones.
    """
    j = 0
    for i in range(candidates.shape[0]):
        if j < m and passed[j] == candidates[i]:
            j += 1
        else:
            bits[targets[i], f] = 1


# -- fused per-batch steps ------------------------------------------------------------------
# Each batch's profiling runs right after a main pass that has swept megabytes through the
# caches, when every separate numpy call pays for cold code and data. These kernels do each
# step in one call.


@njit(cache=True, inline="always")
def _splitmix(state):  # type: ignore[no-untyped-def]
    """Next uniform double in (0, 1) from a SplitMix64 counter kept in ``state[0]``."""
    state[0] += GAMMA
    z = mix64(state[0])
    return (np.float64(z >> np.uint64(11)) + 0.5) / 9007199254740992.0


@njit(cache=True, inline="always")
def _count_one(hist, order, bits, t, delta):  # type: ignore[no-untyped-def]
    """Count profile tuple ``bits[t]`` into ``hist[dc, c]`` (dropped at position dc, and
    position c drops it too): additions without branches on the bits.

    This is Fig. 3 in another form: the figure adds 1 to V[r, c] for every r <= dc and every
    c >= dc whose filter dropped the tuple (its line 8 tests ``b == 0``, but the text says the
    filters that *dropped* it, as here); V is the running sum of ``hist`` over dc >= r.
    """
    n = order.shape[0]
    dc = 0
    while dc < n and bits[t, order[dc]] == 0:
        dc += 1
    if dc == n:
        return
    for c in range(dc, n):
        hist[dc, c] += delta * bits[t, order[c]]


@njit(cache=True)
def view_from_hist(hist, view, mode, j):  # type: ignore[no-untyped-def]
    """V[r, c] = tuples dropped at a position >= r that position c drops (Section 4.2.1),
    from the drop-position histogram; entries the variant does not keep are left at zero."""
    n = hist.shape[0]
    for c in range(n):
        running = 0
        for r in range(c, -1, -1):
            running += hist[r, c]
            view[r, c] = running if _kept(mode, r, c, j) else 0


@njit(cache=True)
def hist_rebuild(hist, order, bits, rows):  # type: ignore[no-untyped-def]
    """The histogram from the live profile tuples (after the order changed)."""
    hist[:, :] = 0
    for k in range(rows.shape[0]):
        _count_one(hist, order, bits, rows[k], 1)


# -- the window as counts of bit patterns ------------------------------------------------------
# For up to PATTERN_MAX_N filters the window is also kept as ``patterns[code]``: how many live
# profile tuples have the bits ``code`` (bit f set when filter f dropped the tuple). Inserting
# or expiring a tuple is then one increment, and the view for any order (the counts of
# Section 4.2.1, exactly) and Fig. 5's row recomputation scan the 2^n patterns with their
# multiplicities instead of the window's tuples one by one: the same counts, from a smaller
# table, and without the store-to-load chains of per-tuple view updates.
PATTERN_MAX_N = 10


@njit(cache=True, inline="always")
def _code(bits, t):  # type: ignore[no-untyped-def]
    """Bit pattern of profile tuple ``bits[t]`` (bit f: filter f dropped it)."""
    code = 0
    for f in range(bits.shape[1]):
        code |= np.int64(bits[t, f]) << f
    return code


@njit(cache=True)
def view_from_patterns(patterns, order, view, mode, j):  # type: ignore[no-untyped-def]
    """The view for ``order`` from the pattern counts (as :func:`view_from_hist` from the
    drop-position histogram, which is built here on the fly)."""
    n = order.shape[0]
    hist = np.zeros((n, n), dtype=np.int64)
    for code in range(patterns.shape[0]):
        count = patterns[code]
        if count == 0:
            continue
        dc = 0
        while dc < n and (code >> order[dc]) & 1 == 0:
            dc += 1
        for c in range(dc, n):
            hist[dc, c] += count * ((code >> order[c]) & 1)
    view_from_hist(hist, view, mode, j)


@njit(cache=True)
def view_row_patterns(view, r, order, patterns, mode, j):  # type: ignore[no-untyped-def]
    """:func:`view_row` (Fig. 5 lines 6-13) over the pattern counts."""
    n = order.shape[0]
    for c in range(r, n):
        view[r, c] = 0
    earlier = 0
    for q in range(r):
        earlier |= np.int64(1) << order[q]
    for code in range(patterns.shape[0]):
        count = patterns[code]
        if count == 0 or code & earlier != 0:
            continue
        for c in range(r, n):
            if (code >> order[c]) & 1 == 1 and _kept(mode, r, c, j):
                view[r, c] += count


@njit(cache=True)
def window_insert_codes(  # type: ignore[no-untyped-def]
    ring_ts, state, codes, dropped_at, n_samples, n, now_ms, window_ms, patterns, ring_codes
):
    """:func:`window_absorb` for a counted window, from the samples' bit patterns: the
    samples some filter dropped (``dropped_at`` < ``n``) enter as profile tuples, in order.
    Returns how many entered. The view is left to the caller."""
    cap = ring_ts.shape[0]
    m = 0
    for s in range(n_samples):
        m += dropped_at[s] < n
    start, size = state[0], state[1]
    if window_ms > 0:
        while size > 0 and ring_ts[start] < now_ms - window_ms:
            patterns[ring_codes[start]] -= 1
            start = start + 1 if start + 1 < cap else 0
            size -= 1
    skip = m - cap if m > cap else 0  # only the newest cap tuples can stay
    while size + (m - skip) > cap:
        patterns[ring_codes[start]] -= 1
        start = start + 1 if start + 1 < cap else 0
        size -= 1
    slot = start + size if start + size < cap else start + size - cap
    for s in range(n_samples):
        if dropped_at[s] >= n:
            continue
        if skip > 0:
            skip -= 1
            continue
        code = codes[s]
        ring_ts[slot] = now_ms
        ring_codes[slot] = code
        patterns[code] += 1
        size += 1
        slot = slot + 1 if slot + 1 < cap else 0
    state[0], state[1] = start, size
    return m


@njit(cache=True)
def window_absorb(  # type: ignore[no-untyped-def]
    ring,
    ring_ts,
    state,
    new_bits,
    m,
    now_ms,
    window_ms,
    hist,
    view,
    order,
    mode,
    j,
    patterns,
    ring_codes,
):
    """Expire profile tuples (by time, then by capacity), insert ``new_bits[:m]``, and bring the
    view up to date. ``state`` = [start, size].

    With ``patterns`` (its length 2^n, see PATTERN_MAX_N) the window is counted by bit pattern
    (``ring_codes`` keeps each slot's pattern, ``ring`` is not written) and the view rebuilt
    from those counts.
    Otherwise (``patterns`` empty) the view is kept through ``hist``, a count of profile
    tuples by (drop position, position that drops them): Fig. 3 touches up to dc * (n - dc)
    view entries per tuple, the histogram n - dc, and the view is its running sums, rebuilt
    once per call.
    """
    counted = patterns.shape[0] > 0
    cap = ring_ts.shape[0]
    width = ring.shape[1]
    start, size = state[0], state[1]
    first = 0
    if m > cap:  # only the newest cap tuples can stay
        first = m - cap
    if window_ms > 0:
        while size > 0 and ring_ts[start] < now_ms - window_ms:
            if counted:
                patterns[ring_codes[start]] -= 1
            else:
                _count_one(hist, order, ring, start, -1)
            start = start + 1 if start + 1 < cap else 0
            size -= 1
    while size + (m - first) > cap:
        if counted:
            patterns[ring_codes[start]] -= 1
        else:
            _count_one(hist, order, ring, start, -1)
        start = start + 1 if start + 1 < cap else 0
        size -= 1
    slot = start + size if start + size < cap else start + size - cap
    for t in range(first, m):
        ring_ts[slot] = now_ms
        if counted:  # the slot's pattern is all that is kept
            code = _code(new_bits, t)
            ring_codes[slot] = code
            patterns[code] += 1
        else:
            for f in range(width):
                ring[slot, f] = new_bits[t, f]
            _count_one(hist, order, ring, slot, 1)
        size += 1
        slot = slot + 1 if slot + 1 < cap else 0
    state[0], state[1] = start, size
    if counted:
        view_from_patterns(patterns, order, view, mode, j)
    else:
        view_from_hist(hist, view, mode, j)


@njit(cache=True, inline="always")
def _eligible(order, parent, pos, c, i):  # type: ignore[no-untyped-def]
    """Whether the filter at position ``c`` may run at position ``i``: its parent (a join path
    that must be probed first, Section 8.2) runs before ``i``. ``pos`` maps filter -> position."""
    p = parent[order[c]]
    return p < 0 or pos[p] < i


@njit(cache=True)
def find_violation(view, order, costs, alpha, mode, j, parent):  # type: ignore[no-untyped-def]
    """The first position whose invariant fails by more than ``alpha`` (eq. 4), or -1.

    FULL: the Greedy Invariant (Def. 4.1); FIRST_ROW: the Independent Invariant (Def. 6.1);
    DIAGONAL_AND_COLUMN: the Sweep Invariant for profiled position ``j`` (Def. 5.1);
    TWO_DIAGONALS: the LocalSwaps Invariant (Def. 7.1). ``parent[f]`` (-1: none) is a filter
    that must precede ``f``; a filter is compared only at positions it may take.
    """
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    for k in range(n):
        pos[order[k]] = k
    for i in range(n - 1):
        mine = (view[0, i] if mode == FIRST_ROW else view[i, i]) / costs[order[i]]
        if mode == DIAGONAL_AND_COLUMN:
            if i >= j:
                return -1
            if _eligible(order, parent, pos, j, i) and mine < alpha * view[i, j] / costs[order[j]]:
                return i
            continue
        last = i + 2 if mode == TWO_DIAGONALS else n
        for c in range(i + 1, last):
            other = view[0, c] if mode == FIRST_ROW else view[i, c]
            if mine < alpha * other / costs[order[c]] and _eligible(order, parent, pos, c, i):
                return i
    return -1


@njit(cache=True)
def greedy_correct(view, order, ring, rows, costs, position, parent, patterns):  # type: ignore[no-untyped-def]
    """Fig. 5: from ``position`` on, recompute each row and bring its best filter forward.

    Rows are recomputed from the pattern counts when ``patterns`` is not empty, else from the
    window's tuples ``ring[rows]``.

    Fig. 5 swaps the best filter with the one in place; Fig. 6(c) shows it moved forward with
    the filters it passes keeping their relative order. Both restore the invariant and differ
    only on ties; moving reproduces the paper's worked example, so that is what is done.
    Only filters whose ``parent`` (-1: none) already runs earlier are candidates.
    Returns how many filters moved.
    """
    n = order.shape[0]
    pos = np.empty(n, dtype=np.int64)
    moved = 0
    max_row = position
    r = position
    tmp = np.empty(n, dtype=np.int64)
    col = np.empty(n, dtype=np.int64)
    while r <= max_row:
        if patterns.shape[0] > 0:
            view_row_patterns(view, r, order, patterns, FULL, -1)
        else:
            view_row(view, r, order, ring, rows, FULL, -1)
        for k in range(n):
            pos[order[k]] = k
        best = r
        best_ratio = view[r, r] / costs[order[r]]
        for c in range(r + 1, n):
            ratio = view[r, c] / costs[order[c]]
            if ratio > best_ratio and _eligible(order, parent, pos, c, r):
                best, best_ratio = c, ratio
        if best > max_row:
            max_row = best
        if best != r:
            moved += 1
            f = order[best]
            for c in range(best, r, -1):
                order[c] = order[c - 1]
            order[r] = f
            for k in range(r + 1):
                for c in range(r, best + 1):
                    col[c] = view[k, c]
                tmp[r] = col[best]
                for c in range(r + 1, best + 1):
                    tmp[c] = col[c - 1]
                for c in range(r, best + 1):
                    view[k, c] = tmp[c]
        r += 1
    return moved


# -- profiling interleaved with the main pass ------------------------------------------------
# A profiled tuple's extra filters are cheapest right after the main pass has run the same
# filter: its index and the batch's column are then in cache. So the stage samples rows before
# the main pass and, after each position's selection, finds which samples it dropped and
# evaluates that position's filter on the samples dropped earlier.


@njit(cache=True)
def sample_rows(size, p, run, state, out):  # type: ignore[no-untyped-def]
    """Rows of 0..size-1, each chosen with probability ``p``, in runs of ``run`` neighbours.

    Runs start after geometric gaps with mean ``run / p - run`` rows, so a row's chance of
    being chosen is exactly ``p``. Neighbouring rows share cache lines, so profiling a run
    costs a fraction of profiling as many scattered rows; the price is less independence
    between samples from the same batch.
    """
    if p >= 1.0:
        for r in range(size):
            out[r] = r
        return size
    gap_success = 1.0 / (run / p - run + 1.0)
    log_q = np.log1p(-gap_success)
    taken = 0
    r = int(np.log(_splitmix(state)) / log_q)  # rows skipped before the first run
    while r < size and taken < out.shape[0]:
        stop = min(r + run, size)
        while r < stop and taken < out.shape[0]:
            out[taken] = r
            taken += 1
            r += 1
        r += int(np.log(_splitmix(state)) / log_q)
    return taken


@njit(cache=True)
def profile_step(k, level, m, samples, dropped_at, alive, n_alive, dead, dead_slot, n_dead):  # type: ignore[no-untyped-def]
    """After position ``k`` ran: find the alive samples it dropped (not in ``level[:m]``).

    ``alive[:n_alive]`` are indexes of samples no position has dropped yet, ascending by row;
    the dropped ones get ``dropped_at = k`` and are appended to the dead list (``dead`` rows,
    ``dead_slot`` sample indexes), which therefore holds the samples in the order they were
    dropped: the samples any later position must also evaluate are a slice of it.
    Returns (new n_alive, new n_dead).
    """
    pos = 0
    kept = 0
    for a in range(n_alive):
        s = alive[a]
        row = samples[s]
        lo = pos
        step = 1
        hi = lo
        while hi < m and level[hi] < row:
            lo = hi + 1
            hi = lo + step
            step *= 2
        if hi > m:
            hi = m
        while lo < hi:
            mid = (lo + hi) >> 1
            if level[mid] < row:
                lo = mid + 1
            else:
                hi = mid
        pos = lo
        if lo < m and level[lo] == row:
            alive[kept] = s
            kept += 1
        else:
            dropped_at[s] = k
            dead[n_dead] = row
            dead_slot[n_dead] = s
            n_dead += 1
    return kept, n_dead


@njit(cache=True)
def finish_profiles(dropped_at, n_samples, order, bits):  # type: ignore[no-untyped-def]
    """Keep the dropped samples' bit rows (first bit: the filter that dropped it); the rest of
    their bits were set by the extras. Compacts ``bits`` in place; returns how many."""
    n = order.shape[0]
    kept = 0
    for s in range(n_samples):
        d = dropped_at[s]
        if d < n:
            for f in range(n):
                bits[kept, f] = bits[s, f]
            bits[kept, order[d]] = 1
            kept += 1
    return kept


# -- main pass and profiling of index-probe filters in one call --------------------------------
PREFETCH_AHEAD = 32  # measured: 16-32 cut the profiling probes' time by 10-25% at n = 8

# When every filter probes a hash index (the filters of Section 9), the whole main pass runs in
# one kernel call (a Python-level call per position costs several microseconds after the pass
# has swept the caches: at ~6 ns per probe that is the price of a thousand tuples), and each
# position profiles the samples right after its selection, while the index is warm, without
# lookups of the samples' drop positions in the main pass's selections.
# Instead every sample still undropped is evaluated at each position again (it repeats what
# the main pass did, on the index it just warmed); the first filter that fails is its drop
# position. Samples dropped earlier are evaluated on the positions their variant profiles
# (all later ones for A-Greedy and Independent, Section 4.1.1; the profiled position for
# Sweep, Section 5; the next one for LocalSwaps, Section 7). Filters are deterministic, so the
# bits are those the per-position path of other filter kinds records.


@njit(cache=True)
def start_profiles(size, p, run, state, samples, dropped_at, bits, codes):  # type: ignore[no-untyped-def]
    """Sample rows (:func:`sample_rows`), mark them undropped (``dropped_at`` = n) and clear
    their bits and bit patterns (``codes``). Returns how many rows were sampled."""
    if p <= 0.0:
        return 0
    n_samples = sample_rows(size, p, run, state, samples)
    n = bits.shape[1]
    for s in range(n_samples):
        dropped_at[s] = n
        codes[s] = 0
        if n > PATTERN_MAX_N:  # else the patterns alone are kept (see _profile_position)
            for f in range(n):
                bits[s, f] = 0
    return n_samples


@njit(cache=True, inline="always")
def _profile_position(  # type: ignore[no-untyped-def]
    col,
    keys,
    mask,
    zero_slot,
    probes,
    k,
    f,
    samples,
    n_samples,
    dropped_at,
    bits,
    codes,
    mode,
    j,
    extras,
    repeats,
):
    """Position ``k`` (filter ``f``) of the profiling of samples ``samples[:n_samples]`` (rows):
    those not yet dropped find out whether ``f`` drops them (``dropped_at[s] = k``), and those
    dropped earlier are evaluated on ``f`` if the variant ``mode`` profiles position ``k`` for
    them (``j``: Sweep's profiled position). When ``f`` drops sample ``s``, bit f of
    ``codes[s]`` is set for up to PATTERN_MAX_N filters (whose window counts patterns), else
    ``bits[s, f] = 1``.
    ``extras[f]`` counts the evaluations after a sample's drop position (Section 4.4's n - i),
    ``repeats[f]`` the others. Returns the extra probes' hits (see ``select_in_index``)."""
    width = bits.shape[1]
    counted = width <= PATTERN_MAX_N  # the window counts patterns: codes, not bit rows
    extra = 0
    dead = 0
    if mode == FULL or mode == FIRST_ROW:  # noqa: SIM109 (as in _kept)
        # every sample is evaluated: no branch on its state, so the probes overlap; the index
        # slot of the sample PREFETCH_AHEAD places on is requested early (the late filters'
        # indexes are mostly out of cache: the main pass probed them for few tuples)
        for s in range(n_samples):
            if s + PREFETCH_AHEAD < n_samples:
                _prefetch(keys, home_slot(col[samples[s + PREFETCH_AHEAD]], mask))
            key = col[samples[s]]
            ok = index_contains(keys, mask, zero_slot, key)
            for q in range(1, probes):
                extra += index_contains(keys, mask, zero_slot, probe_key(key, q))
            d = dropped_at[s]
            gone = d < width
            dead += gone
            if counted:  # loop-invariant: the compiler splits the loop in two
                codes[s] |= np.int64(1 - ok) << f
            else:
                bits[s, f] = np.uint8(1 - ok)
            dropped_at[s] = d if gone or ok else k
        extras[f] += dead
        repeats[f] += n_samples - dead
        return extra
    for s in range(n_samples):
        d = dropped_at[s]
        if d < width:
            if mode == TWO_DIAGONALS and k != d + 1:
                continue
            if mode == DIAGONAL_AND_COLUMN and k != j:
                continue
            extras[f] += 1
        else:
            repeats[f] += 1
        key = col[samples[s]]
        ok = index_contains(keys, mask, zero_slot, key)
        for q in range(1, probes):
            extra += index_contains(keys, mask, zero_slot, probe_key(key, q))
        if not ok:
            if counted:
                codes[s] |= np.int64(1) << f
            else:
                bits[s, f] = 1
            if d == width:
                dropped_at[s] = k
    return extra


@njit(cache=True, inline="always")
def _index_pass(  # type: ignore[no-untyped-def]
    cols,
    keys,
    masks,
    zeros,
    probes,
    order,
    sels,
    size,
    counts,
    evaluations,
    main_cycles,
    p,
    run,
    state,
    samples,
    dropped_at,
    bits,
    codes,
    mode,
    j,
    extras,
    repeats,
    hits,
    ticks,
):
    """The body of :func:`run_index_filters` (without the window part)."""
    n = order.shape[0]
    n_samples = 0
    profiled = 0
    if p > 0.0:
        t0 = cycles()
        n_samples = start_profiles(size, p, run, state, samples, dropped_at, bits, codes)
        profiled = cycles() - t0
    counts[0] = size
    m = size
    extra = 0
    for k in range(n):
        f = order[k]
        if m == 0 and n_samples == 0:
            counts[k + 1] = 0
            continue
        t0 = cycles()
        m_next = select_in_index(
            cols[f], keys[f], masks[f], zeros[f], probes[f], sels[k], m, sels[k + 1], hits
        )
        t1 = cycles()
        extra += hits[0]
        main_cycles[f] += t1 - t0
        evaluations[f] += m
        counts[k + 1] = m_next
        m = m_next
        if n_samples:
            extra += _profile_position(
                cols[f], keys[f], masks[f], zeros[f], probes[f], k, f, samples, n_samples,
                dropped_at, bits, codes, mode, j, extras, repeats,
            )  # fmt: skip
            profiled += cycles() - t1
    hits[0] = extra
    ticks[0] = profiled
    ticks[1] = n_samples
    return m


@njit(cache=True)
def run_index_filters(  # type: ignore[no-untyped-def]
    cols,
    keys,
    masks,
    zeros,
    probes,
    order,
    sels,
    size,
    counts,
    evaluations,
    main_cycles,
    p,
    run,
    state,
    samples,
    dropped_at,
    bits,
    codes,
    mode,
    j,
    extras,
    repeats,
    hits,
    ticks,
):
    """The main pass of a conjunction of index-probe filters in one call, with its drop
    profiling. Position k runs ``select_in_index`` for filter ``order[k]`` over ``sels[k]``
    (``counts[k]`` rows) into ``sels[k + 1]``; ``evaluations[f]`` and ``main_cycles[f]`` (its
    :func:`cycles`, for the cost estimates a_i) grow by what it did. ``cols``, ``keys``,
    ``masks``, ``zeros`` and ``probes`` are per filter id (tuples of the probed columns and of
    the indexes' arrays, see ``hash_index.index_contains``).

    With ``p`` > 0, rows are sampled first (:func:`start_profiles`, ``run``, ``state``) and
    each position profiles them right after its selection, while its index is warm
    (:func:`_profile_position`); ``ticks[0]`` gets the profiling's cycles and ``ticks[1]``
    the number of samples (their bits and drop positions are ``bits`` and ``dropped_at``).
    Without samples the pass stops at the first empty selection.
    """
    return _index_pass(
        cols, keys, masks, zeros, probes, order, sels, size, counts, evaluations, main_cycles,
        p, run, state, samples, dropped_at, bits, codes, mode, j, extras, repeats, hits, ticks,
    )  # fmt: skip


@njit(cache=True)
def run_index_filters_absorbing(  # type: ignore[no-untyped-def]
    cols,
    keys,
    masks,
    zeros,
    probes,
    order,
    sels,
    size,
    counts,
    evaluations,
    main_cycles,
    p,
    run,
    state,
    samples,
    dropped_at,
    bits,
    codes,
    mode,
    j,
    extras,
    repeats,
    hits,
    ticks,
    window,
):
    """:func:`run_index_filters`, then the re-optimizer's part in the same call: ``window``
    holds the arguments of :func:`absorb_samples` after ``order``, ``mode`` and ``j`` (the
    profile window, its view, detection and, for A-Greedy, correction), the time ``now_ms``
    as a one-element array. One more call and its
    Python cost as much as that work after a cheap main pass. ``ticks[2:8]`` get what
    :func:`absorb_samples` returns."""
    m = _index_pass(
        cols, keys, masks, zeros, probes, order, sels, size, counts, evaluations, main_cycles,
        p, run, state, samples, dropped_at, bits, codes, mode, j, extras, repeats, hits, ticks,
    )  # fmt: skip
    (ring, ring_ts, wstate, now, window_ms, hist, view, patterns, ring_codes, min_check,
     costs, alpha, parent, correct, before) = window  # fmt: skip
    r = absorb_samples(
        dropped_at, ticks[1], bits, ring, ring_ts, wstate, now[0], window_ms, hist, view,
        order, mode, j, patterns, ring_codes, min_check, costs, alpha, parent, correct, before,
        codes,
    )  # fmt: skip
    ticks[2], ticks[3], ticks[4], ticks[5], ticks[6], ticks[7] = r
    return m


@njit(cache=True)
def absorb_samples(  # type: ignore[no-untyped-def]
    dropped_at,
    n_samples,
    bits,
    ring,
    ring_ts,
    state,
    now_ms,
    window_ms,
    hist,
    view,
    order,
    mode,
    j,
    patterns,
    ring_codes,
    min_check,
    costs,
    alpha,
    parent,
    correct,
    before,
    codes,
):
    """The rest of a batch's profiling and re-optimization in one call: keep the dropped
    samples' bit rows (:func:`finish_profiles`), put them in the window with the view
    (:func:`window_absorb`; with pattern counts and the samples' ``codes`` (an empty array:
    none), :func:`window_insert_codes`) and, once it holds ``min_check`` profile tuples
    (-1: never), look for a violation (:func:`find_violation`);
    with ``correct`` (A-Greedy), correct it at once (:func:`greedy_correct`, then the view for
    the new order), keeping the old order in ``before``. Returns (profile tuples, position of
    the violation or -1, filters the correction moved, window size, :func:`cycles` spent on
    the window and view, cycles spent on violations)."""
    t0 = cycles()
    if patterns.shape[0] > 0 and codes.shape[0] > 0:  # the samples' patterns are ready
        m = window_insert_codes(
            ring_ts, state, codes, dropped_at, n_samples, order.shape[0], now_ms, window_ms,
            patterns, ring_codes,
        )  # fmt: skip
        view_from_patterns(patterns, order, view, mode, j)
    else:
        m = finish_profiles(dropped_at, n_samples, order, bits)
        window_absorb(
            ring, ring_ts, state, bits, m, now_ms, window_ms, hist, view, order, mode, j,
            patterns, ring_codes,
        )  # fmt: skip
    t2 = cycles()
    found = -1
    moved = 0
    if 0 <= min_check <= state[1]:
        found = find_violation(view, order, costs, alpha, mode, j, parent)
    if found >= 0 and correct:
        for k in range(order.shape[0]):
            before[k] = order[k]
        cap = ring_ts.shape[0]
        size = state[1] if patterns.shape[0] == 0 else 0
        rows = np.empty(size, dtype=np.int64)
        for k in range(size):
            rows[k] = (state[0] + k) % cap
        moved = greedy_correct(view, order, ring, rows, costs, found, parent, patterns)
        if patterns.shape[0] > 0:
            view_from_patterns(patterns, order, view, mode, j)
        else:
            hist_rebuild(hist, order, ring, rows)
            view_from_hist(hist, view, mode, j)
    t3 = cycles()
    return m, found, moved, state[1], t2 - t0, t3 - t2


@njit(cache=True)
def record_costs(  # type: ignore[no-untyped-def]
    ring_ns, ring_tuples, nxt, sums, filters, ns, tuples, k, overhead_ns, min_tuples, values
):
    """Put ``k`` timed calls (filter, ns, tuples evaluated) in the per-filter rings of the last
    samples (``sums`` = [ns; tuples] over each ring), then ``values[f]`` = a_f, the running
    average time per tuple (a filter never timed: the mean of the timed ones, or 1)."""
    width = ring_ns.shape[1]
    for i in range(k):
        m = tuples[i]
        if m < min_tuples:
            continue
        f = filters[i]
        slot = nxt[f] % width
        work = max(ns[i] - overhead_ns, 0.0)
        sums[0, f] += work - ring_ns[f, slot]
        sums[1, f] += m - ring_tuples[f, slot]
        ring_ns[f, slot] = work
        ring_tuples[f, slot] = m
        nxt[f] += 1
    n = values.shape[0]
    total = 0.0
    timed = 0
    for f in range(n):
        if sums[1, f] > 0:
            values[f] = max(sums[0, f] / sums[1, f], 1e-3)
            total += values[f]
            timed += 1
    for f in range(n):
        if not sums[1, f] > 0:
            values[f] = total / timed if timed else 1.0
