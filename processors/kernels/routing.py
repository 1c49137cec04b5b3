"""streamon's own partitioner: the internal partition of each row from its key columns.

The ingest agent routes every decoded record by the join (or grouping) key with this hash, so
that the records of one key meet on one internal partition whatever partitioner the producers
used (Java's murmur2, librdkafka's crc32, none at all) and however many partitions the input
topics have. Equal keys must route equally across streams and schema versions, so values are
hashed in a canonical form: every integer width as its int64 value, floats with 0.0 == -0.0
and one NaN, strings and bytes by their bytes (``keys.hash_var``).

Columns are duck-typed as in :mod:`processors.kernels.keys`: a numpy array is numeric, anything
else has ``offsets`` and ``data``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from processors.kernels.keys import canonical_int64, hash_var
from processors.kernels.splitmix import GAMMA, mix64


@njit(cache=True)
def _hash_ints(values: np.ndarray) -> np.ndarray:
    out = np.empty(values.shape[0], np.uint64)
    for i in range(values.shape[0]):
        out[i] = mix64(np.uint64(values[i]) + GAMMA)
    return out


@njit(cache=True)
def _combine(acc: np.ndarray, more: np.ndarray) -> None:
    for i in range(acc.shape[0]):
        acc[i] = mix64(acc[i] * GAMMA ^ more[i])


@njit(cache=True)
def _bucket(hashes: np.ndarray, partitions: int) -> np.ndarray:
    out = np.empty(hashes.shape[0], np.int32)
    p = np.uint64(partitions)
    for i in range(hashes.shape[0]):
        out[i] = np.int32(hashes[i] % p)
    return out


def column_hash(col: Any) -> np.ndarray:
    """A 64-bit hash per row of one key column, equal for equal values of any integer width."""
    if isinstance(col, np.ndarray):
        return _hash_ints(canonical_int64(col).view(np.int64))
    return hash_var(np.asarray(col.offsets, np.int64), np.asarray(col.data, np.uint8))


def route(cols: Sequence[Any], n: int, partitions: int) -> np.ndarray:
    """The partition (int32, in ``[0, partitions)``) of each of ``n`` rows keyed by ``cols``."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if partitions == 1 or not cols:
        return np.zeros(n, np.int32)
    acc = column_hash(cols[0]).copy()
    for col in cols[1:]:
        _combine(acc, column_hash(col))
    return _bucket(acc, partitions)


def split_by_partition(parts: np.ndarray, partitions: int) -> list[np.ndarray]:
    """Row indices of each partition, each in the rows' order (one stable sort)."""
    order = np.argsort(parts, kind="stable")
    bounds = np.searchsorted(parts[order], np.arange(partitions + 1))
    return [order[bounds[q] : bounds[q + 1]] for q in range(partitions)]


@njit(cache=True)
def _murmur2(offsets: np.ndarray, data: np.ndarray, partitions: int) -> np.ndarray:
    mask = np.uint64(0xFFFFFFFF)
    m = np.uint64(0x5BD1E995)
    out = np.empty(offsets.shape[0] - 1, np.int32)
    for row in range(offsets.shape[0] - 1):
        start = offsets[row]
        length = offsets[row + 1] - start
        h = (np.uint64(0x9747B28C) ^ np.uint64(length)) & mask
        whole = length // 4
        for i in range(whole):
            at = start + 4 * i
            k = (
                np.uint64(data[at])
                | (np.uint64(data[at + 1]) << np.uint64(8))
                | (np.uint64(data[at + 2]) << np.uint64(16))
                | (np.uint64(data[at + 3]) << np.uint64(24))
            )
            k = (k * m) & mask
            k ^= k >> np.uint64(24)
            k = (k * m) & mask
            h = (h * m) & mask
            h ^= k
        tail = start + 4 * whole
        rest = length % 4
        if rest == 3:
            h ^= np.uint64(data[tail + 2]) << np.uint64(16)
        if rest >= 2:
            h ^= np.uint64(data[tail + 1]) << np.uint64(8)
        if rest >= 1:
            h ^= np.uint64(data[tail])
            h = (h * m) & mask
        h ^= h >> np.uint64(13)
        h = (h * m) & mask
        h ^= h >> np.uint64(15)
        out[row] = np.int32((h & np.uint64(0x7FFFFFFF)) % np.uint64(partitions))
    return out


def kafka_partitions(keys: Any, partitions: int) -> np.ndarray:
    """The partition Kafka's default partitioner (Java's, and librdkafka's ``murmur2_random``)
    gives each key of a binary column: ``(murmur2(key) & 0x7fffffff) % partitions``.

    Exactly-once output must know where each keyed result goes before it is sent, to tell later
    which of them a partition already holds (:mod:`processors.runtime.outbox`)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return _murmur2(np.asarray(keys.offsets, np.int64), np.asarray(keys.data, np.uint8), partitions)
