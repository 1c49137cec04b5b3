"""Distinct keys per window of probes, for A-Caching's miss probability (Babu et al., ICDE
2005, Appendix A): each key of a non-overlapping window of ``window`` probes sets one bit of a
filter (a Bloom filter with one hash function); the bits set when the window closes are the
window's distinct keys, less the collisions, and the misses a cache would have taken on it.

Keys are int64 words (a multi-column key first folded by :func:`fold_keys`); the bit is
SplitMix64 of the key and a seed, modulo the filter's size. State carries over between calls,
so a stream can be fed in batches of any size.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.splitmix import GAMMA, mix64

_ONE = np.uint64(1)
_SIX = np.uint64(6)
_LOW6 = np.uint64(63)


@njit(cache=True)
def bloom_windows(keys, seed, bits, n_bits, window, state, out):  # type: ignore[no-untyped-def]
    """Feed ``keys`` (uint64) to the filter ``bits`` (uint64 words, ``n_bits`` bits).

    ``state[0]``: keys of the open window so far, ``state[1]``: bits set in it. Each window
    that closes writes its bit count to ``out`` (``len(keys) // window + 1`` long is enough)
    and clears the filter. Returns how many windows closed.
    """
    filled = state[0]
    set_bits = state[1]
    size = np.uint64(n_bits)
    done = 0
    for i in range(keys.shape[0]):
        h = mix64(keys[i] ^ seed) % size
        word = h >> _SIX
        mask = _ONE << (h & _LOW6)
        if bits[word] & mask == 0:
            bits[word] |= mask
            set_bits += 1
        filled += 1
        if filled == window:
            out[done] = set_bits
            done += 1
            bits[:] = 0
            filled = 0
            set_bits = 0
    state[0] = filled
    state[1] = set_bits
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
