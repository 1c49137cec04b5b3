"""The main pass of a conjunction of index-probe filters, and its drop profiling, in one call.

When every filter probes a hash index (the filters of Section 9), the whole main pass runs in
one kernel call (a Python-level call per position costs several microseconds after the pass
has swept the caches: at ~6 ns per probe that is the price of a thousand tuples), and each
position profiles the samples right after its selection, while the index is warm, without
lookups of the samples' drop positions in the main pass's selections.
Instead every sample still undropped is evaluated at each position again (it repeats what
the main pass did, on the index it just warmed); the first filter that fails is its drop
position. Samples dropped earlier are evaluated on the positions their variant profiles
(all later ones for A-Greedy and Independent, Section 4.1.1; the profiled position for
Sweep, Section 5; the next one for LocalSwaps, Section 7). Filters are deterministic, so the
bits are those the per-position path of other filter kinds records.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from processors.kernels.drift import (
    change_row,
    clear_window,
    costs_moved,
    drift_check,
    heeded_drift,
    next_rate,
    resort_restart,
)
from processors.kernels.hash_index import home_slot, index_contains, probe_key, select_in_index
from processors.kernels.intrinsics import cycles, prefetch
from processors.kernels.profile_view import (
    DIAGONAL_AND_COLUMN,
    FIRST_ROW,
    FULL,
    PATTERN_MAX_N,
    TWO_DIAGONALS,
)
from processors.kernels.profiling import absorb_samples, start_profiles

PREFETCH_AHEAD = 32  # measured: 16-32 cut the profiling probes' time by 10-25% at n = 8


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
                prefetch(keys, home_slot(col[samples[s + PREFETCH_AHEAD]], mask))
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
    profile_cycles,
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
            spent = cycles() - t1
            profile_cycles[f] += spent
            profiled += spent
    hits[0] = extra
    ticks[0] = profiled
    ticks[1] = n_samples
    return m


class IndexFilters(NamedTuple):
    """Per filter id: the probed int64 column and its index's arrays (tuples of them, see
    ``hash_index.index_contains``)."""

    cols: tuple
    keys: tuple
    masks: tuple
    zeros: tuple
    probes: tuple


class MainPass(NamedTuple):
    """One batch's main pass: position k runs filter ``order[k]`` over ``sels[k]`` (``counts[k]``
    rows, ``counts[0] = size``) into ``sels[k + 1]``; per filter id, ``evaluations`` and
    ``main_cycles`` grow by what it did. ``hits`` and ``ticks`` are outputs (see
    :func:`run_index_filters`)."""

    order: np.ndarray
    sels: np.ndarray
    size: int
    counts: np.ndarray
    evaluations: np.ndarray
    main_cycles: np.ndarray
    hits: np.ndarray
    ticks: np.ndarray


class Sampling(NamedTuple):
    """Drop profiling of one batch: probability ``p`` in runs of ``run`` rows drawn from the
    SplitMix64 counter ``state`` into ``samples``; their drop positions and bits (or bit
    patterns ``codes``); the variant ``mode`` (``j``: Sweep's profiled position); per filter id,
    ``extras`` and ``repeats`` count the profiling evaluations (see :func:`_profile_position`)
    and ``cycles`` the :func:`cycles` spent profiling at each filter (A-Greedy+'s a_i)."""

    p: float
    run: int
    state: np.ndarray
    samples: np.ndarray
    dropped_at: np.ndarray
    bits: np.ndarray
    codes: np.ndarray
    mode: int
    j: int
    extras: np.ndarray
    repeats: np.ndarray
    cycles: np.ndarray


@njit(cache=True, inline="always")
def _run(filters, main, prof):  # type: ignore[no-untyped-def]
    """:func:`_index_pass` on the bundles, unpacked by position here (once per call, so that
    the loops see plain arrays as before): a plain tuple in the order of the NamedTuple's
    fields works as well as the NamedTuple, and numba types a plain tuple several times faster
    at each call, which matters for small batches."""
    cols, keys, masks, zeros, probes = filters
    order, sels, size, counts, evaluations, main_cycles, hits, ticks = main
    p, run, state, samples, dropped_at, bits, codes, mode, j, extras, repeats, prof_cycles = prof
    return _index_pass(
        cols, keys, masks, zeros, probes, order, sels, size, counts, evaluations, main_cycles,
        p, run, state, samples, dropped_at, bits, codes, mode, j, extras, repeats, hits, ticks,
        prof_cycles,
    )  # fmt: skip


@njit(cache=True)
def run_index_filters(filters, main, prof):  # type: ignore[no-untyped-def]
    """The main pass of a conjunction of index-probe filters in one call, with its drop
    profiling (:class:`IndexFilters`, :class:`MainPass`, :class:`Sampling`, or plain tuples
    of their fields in order: the hot path passes those). Position k runs
    ``select_in_index`` for filter ``order[k]``; ``main_cycles`` counts its :func:`cycles`,
    for the cost estimates a_i.

    With ``prof.p`` > 0, rows are sampled first (:func:`start_profiles`) and each position
    profiles them right after its selection, while its index is warm
    (:func:`_profile_position`); ``main.ticks[0]`` gets the profiling's cycles and
    ``main.ticks[1]`` the number of samples (their bits and drop positions are ``prof.bits``
    and ``prof.dropped_at``). Without samples the pass stops at the first empty selection.
    Returns the rows that passed every filter.
    """
    return _run(filters, main, prof)


@njit(cache=True)
def run_index_filters_absorbing(filters, main, prof, window):  # type: ignore[no-untyped-def]
    """:func:`run_index_filters`, then the re-optimizer's part in the same call: ``window``
    holds the profile window, its view, detection and, for A-Greedy, correction (see
    :func:`absorb_samples`), the time ``now_ms`` as a one-element array. One more call and its
    Python cost as much as that work after a cheap main pass. ``main.ticks[2:8]`` get what
    :func:`absorb_samples` returns."""
    m = _run(filters, main, prof)
    order, ticks = main[0], main[7]
    dropped_at, bits, codes, mode, j = prof[4], prof[5], prof[6], prof[7], prof[8]
    r = absorb_samples(dropped_at, ticks[1], bits, codes, order, mode, j, window)
    ticks[2], ticks[3], ticks[4], ticks[5], ticks[6], ticks[7] = r
    return m


@njit(cache=True)
def run_index_filters_adaptive(filters, main, prof, window, adapt):  # type: ignore[no-untyped-def]
    """:func:`run_index_filters_absorbing` for A-Greedy+ (see :mod:`processors.kernels.drift`):
    after the main pass, its pass counters are tested for drift (which empties the profile
    window and keeps this batch's samples from the change row on, :func:`change_row`: they
    are the window's first profile tuples of the new statistics), and the next batch's
    profiling probability is chosen. ``adapt`` is (reference, drift parameters, rate, out)
    with ``out[0]`` set to the drifting position (-1: none); ``rate[P_NEXT]`` is the next
    batch's probability."""
    m = _run(filters, main, prof)
    order, sels, size, counts, ticks = main[0], main[1], main[2], main[3], main[7]
    ref, params, rate, out = adapt
    drifted = heeded_drift(rate, drift_check(counts, order, ref, params), counts[0], out)
    out[0] = drifted
    samples, dropped_at, bits, codes, mode, j = prof[3], prof[4], prof[5], prof[6], prof[7], prof[8]
    n_samples = ticks[1]
    first = 0
    if drifted >= 0:
        clear_window(window[2], window[7], window[5], window[6])
        resort_restart(window[16])
        # the batch that drifted may hold tuples from before the change: only its samples
        # from the change row on are kept
        first = np.searchsorted(samples[:n_samples], change_row(sels, counts, drifted, size))
    r = absorb_samples(
        dropped_at[first:], n_samples - first, bits[first:], codes[first:], order, mode, j,
        window,
    )  # fmt: skip
    ticks[2], ticks[3], ticks[4], ticks[5], ticks[6], ticks[7] = r
    next_rate(rate, drifted >= 0 or r[2] > 0, r[3])
    return m


WATCH_COSTS_MOVED = -2  # watch_drift: no drift, but an a_i moved since the last check


@njit(cache=True)
def watch_drift(counts, order, ticks, adapt, window_parts, costs, checked):  # type: ignore[no-untyped-def]
    """A-Greedy+ after :func:`run_index_filters` on a batch it did not profile (``prof.p`` 0,
    most batches at p's floor): the drift test of :func:`run_index_filters_adaptive`, without
    the window's arguments (numba unboxes each argument at every call). With no samples the
    window and view do not change, so there is nothing to check unless an a_i (``costs``)
    moved since the last check (``checked``; :func:`costs_moved`). On drift the window is
    emptied here (the stage may then profile the batch from its change row on:
    :func:`profile_index_rows`). ``window_parts`` is (state, patterns, hist, view,
    checkpoint). Returns the drifting position, else WATCH_COSTS_MOVED when the caller should
    check again, else -1. (After :func:`run_index_filters`, Optimal's
    kernel, rather than in one kernel with it: the same machine code for the main pass as the
    stage it is measured against.)"""
    ref, params, rate, out = adapt
    state, patterns, hist, view, checkpoint = window_parts
    drifted = heeded_drift(rate, drift_check(counts, order, ref, params), counts[0], out)
    out[0] = drifted
    if drifted >= 0:
        clear_window(state, patterns, hist, view)
        resort_restart(checkpoint)
    ticks[2], ticks[3], ticks[4], ticks[5], ticks[6], ticks[7] = 0, -1, 0, state[1], 0, 0
    next_rate(rate, drifted >= 0, state[1])
    if drifted < 0 and costs_moved(costs, checked):
        return WATCH_COSTS_MOVED
    return drifted


@njit(cache=True)
def profile_index_rows(filters, rows, k, bits):  # type: ignore[no-untyped-def]
    """Profile tuples of ``rows[:k]`` (ascending), each evaluated on every filter, in one call
    (what ``core.ordering.profile.profile_rows`` does with a call per filter and per mark):
    the rows some filter drops are written to ``bits`` (1: filter f drops it), first to last;
    returns how many. A filter of cost c makes its c - 1 extra probes too, as everywhere.
    Filter by filter, prefetching as the profiling in the main pass does (row by row without
    prefetching, it took ~140 µs for 100 rows of Fig. 19's eight filters)."""
    cols, keys, masks, zeros, probes = filters
    n = bits.shape[1]
    extra = 0
    for f in range(n):
        col, ix_keys, mask, zero = cols[f], keys[f], masks[f], zeros[f]
        for s in range(k):
            if s + PREFETCH_AHEAD < k:  # as in the profiling in the main pass
                prefetch(ix_keys, home_slot(col[rows[s + PREFETCH_AHEAD]], mask))
            key = col[rows[s]]
            ok = index_contains(ix_keys, mask, zero, key)
            for q in range(1, probes[f]):
                extra += index_contains(ix_keys, mask, zero, probe_key(key, q))
            bits[s, f] = np.uint8(0 if ok else 1)
    m = 0
    for s in range(k):
        dropped = False
        for f in range(n):
            dropped = dropped or bits[s, f] == 1
        if dropped:
            for f in range(n):
                bits[m, f] = bits[s, f]
            m += 1
    return m if extra >= 0 else -1  # (extra keeps the extra probes from being optimised away)
