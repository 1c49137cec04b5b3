"""The drop box's choice (Ayad & Naughton, Sect. 5: a random filter before the plan): keep a
record with probability ``keep``, decided by a hash of where it is stored, so that reading
it again (a restart, a replay) makes the same choice.

A record's word is SplitMix64 of the box's seed, the topic, the partition and the offset,
mixed in turn; the record is kept when the word is below ``keep * 2^64``. The words of the
offsets of one partition are independent and uniform, so the kept share converges to
``keep`` and each record's fate is independent of every other's (as a random filter's).
"""

from __future__ import annotations

import zlib

import numpy as np
from numba import njit

from processors.kernels.splitmix import GAMMA, mix64

_ALL = np.uint64(2**64 - 1)


def topic_word(topic: str) -> np.uint64:
    """A stable 64-bit word for a topic name (CRC-32 of its UTF-8, spread by SplitMix64)."""
    return np.uint64(zlib.crc32(topic.encode()) * 0x9E3779B1 + 1)


def threshold(keep: float) -> np.uint64:
    """The largest word kept at share ``keep`` (all of them at 1)."""
    if keep >= 1.0:
        return _ALL
    return np.uint64(int(max(keep, 0.0) * 2.0**64))


@njit(cache=True)
def keep_mask(seed, topic, partition, offsets, limit, out):  # type: ignore[no-untyped-def]
    """``out[i]`` = whether the record at ``offsets[i]`` of ``topic``/``partition`` is kept
    (its word below ``limit``, or any word when ``limit`` is all ones). Returns how many."""
    base = mix64(mix64(seed ^ topic) ^ (np.uint64(partition) * GAMMA))
    kept = 0
    for i in range(offsets.shape[0]):
        word = mix64(base ^ np.uint64(offsets[i]))
        keep = word < limit or limit == np.uint64(0xFFFFFFFFFFFFFFFF)
        out[i] = keep
        kept += keep
    return kept
