"""Gather kernels for variable-length columns (offsets + flat bytes)."""

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def gather_var(offsets: np.ndarray, data: np.ndarray, indices: np.ndarray):
    """Values at ``indices`` of an offsets/data column, as a new offsets/data pair; negative
    indices count from the end, as in numpy, and one out of range raises IndexError (checked
    here, in the pass that sizes the output, rather than by reductions before the call)."""
    n = len(indices)
    values = len(offsets) - 1
    out_offsets = np.empty(n + 1, np.int64)
    out_offsets[0] = 0
    for j in range(n):
        i = indices[j]
        if i < 0:
            i += values
        if i < 0 or i >= values:
            raise IndexError("index out of range for a variable-length column")
        out_offsets[j + 1] = out_offsets[j] + (offsets[i + 1] - offsets[i])
    out = np.empty(out_offsets[n], np.uint8)
    for j in range(n):
        i = indices[j]
        if i < 0:
            i += values
        start = offsets[i]
        length = offsets[i + 1] - start
        dst = out_offsets[j]
        for k in range(length):
            out[dst + k] = data[start + k]
    return out_offsets, out


@nb.njit(cache=True, nogil=True)
def gather_spans(start: np.ndarray, length: np.ndarray, data: np.ndarray, slots: np.ndarray):
    """Values of ``slots`` held as (start, length) spans of ``data``: offsets/data pair."""
    n = len(slots)
    out_offsets = np.empty(n + 1, np.int64)
    out_offsets[0] = 0
    for j in range(n):
        out_offsets[j + 1] = out_offsets[j] + length[slots[j]]
    out = np.empty(out_offsets[n], np.uint8)
    for j in range(n):
        s = slots[j]
        src = start[s]
        dst = out_offsets[j]
        for k in range(length[s]):
            out[dst + k] = data[src + k]
    return out_offsets, out


@nb.njit(cache=True, nogil=True)
def hash_var(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each variable-length value (FNV-1a over the bytes and the length, then
    a SplitMix64 finalizer): the int64 join key of a string or bytes value."""
    n = len(offsets) - 1
    out = np.empty(n, np.int64)
    for i in range(n):
        h = np.uint64(0xCBF29CE484222325)
        for k in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[k])) * np.uint64(0x100000001B3)
        h ^= np.uint64(offsets[i + 1] - offsets[i])
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = np.int64(h ^ (h >> np.uint64(31)))
    return out
