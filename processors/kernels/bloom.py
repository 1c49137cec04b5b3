"""Distinct keys per window of probes, for A-Caching's miss probability (Babu et al., ICDE
2005, Appendix A): each key of a non-overlapping window of ``window`` probes sets one bit of a
filter (a Bloom filter with one hash function); the bits set when the window closes are the
window's distinct keys, less the collisions, and the misses a cache would have taken on it.
With a horizon of h windows a bit remembers the window that last set it, and a key misses
only if its bit was set in none of the last h windows either: the misses of a cache whose
entries outlive a window, as streamon's do (they are maintained, not expired).

Keys are int64 words (a multi-column key first folded by :func:`fold_keys`); the bit is
SplitMix64 of the key and a seed, modulo the filter's size. State carries over between calls,
so a stream can be fed in batches of any size.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.splitmix import GAMMA, mix64


@njit(cache=True)
def bloom_windows(keys, seed, last, window, horizon, state, misses, distinct):  # type: ignore[no-untyped-def]
    """Feed ``keys`` (uint64) to the filter ``last`` (one int64 per bit: the number, from 1,
    of the window that last set it; 0 never).

    A key misses when its bit was not set in its own window so far nor in the ``horizon``
    windows before it (a cache that keeps its entries that long: 0 is the paper's one-window
    filter). ``state``: keys of the open window so far, its misses, its bits set, the open
    window's number. Each window that closes writes its misses and the bits set over it and
    its horizon (the distinct keys such a cache holds) to ``misses`` and ``distinct``
    (``len(keys) // window + 1`` long is enough). Returns how many windows closed.
    """
    filled = state[0]
    missed = state[1]
    set_bits = state[2]
    now = state[3] + 1
    size = np.uint64(last.shape[0])
    done = 0
    for i in range(keys.shape[0]):
        h = mix64(keys[i] ^ seed) % size
        seen = last[h]
        if seen != now:
            set_bits += 1
            if seen == 0 or seen < now - horizon:
                missed += 1
            last[h] = now
        filled += 1
        if filled == window:
            misses[done] = missed
            if horizon == 0:
                distinct[done] = set_bits
            else:
                held = 0
                for b in range(last.shape[0]):
                    if last[b] != 0 and last[b] >= now - horizon:
                        held += 1
                distinct[done] = held
            done += 1
            now += 1
            filled = 0
            missed = 0
            set_bits = 0
    state[0] = filled
    state[1] = missed
    state[2] = set_bits
    state[3] = now - 1
    return done


@njit(cache=True)
def fold_keys(columns, out):  # type: ignore[no-untyped-def]
    """One word per row of ``columns`` (rows x key columns, uint64): SplitMix64 chained over
    the columns, so equal keys give equal words."""
    for i in range(columns.shape[0]):
        h = GAMMA
        for j in range(columns.shape[1]):
            h = mix64(h ^ columns[i, j]) + GAMMA
        out[i] = h
