"""Content-defined chunking of snapshot bytes (a gear rolling hash), so that incremental
snapshots write only the chunks whose content changed.

A fixed-size cut would shift every chunk after the first inserted or removed byte (a window
that expires its oldest rows shifts everything behind them). A cut where a rolling hash of the
last bytes has ``bits`` top bits zero depends only on nearby content: after a change, the cuts
fall where they fell before within a chunk or two, and the chunks after that are the same bytes
again. The hash is the gear hash of FastCDC (Xia et al., USENIX ATC 2016): ``h = (h << 1) +
GEAR[byte]``, so a byte stops counting 64 bytes later.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from processors.kernels.splitmix import GAMMA, mix64

#: most bits a cut mask may have: chunks of 8 KiB on average at the default 13
MAX_BITS = 20
#: no chunk is longer (a chunk is one Kafka message: librdkafka's default limit is 1,000,000)
MAX_CHUNK_BYTES = 512 * 1024


def _gear_table() -> np.ndarray:
    """256 well-spread 64-bit words, the same in every process (SplitMix64 from a fixed seed)."""
    table = np.empty(256, dtype=np.uint64)
    state = np.uint64(0x5EED)
    with np.errstate(over="ignore"):
        for i in range(256):
            state = np.uint64(state + GAMMA)
            table[i] = mix64(state)
    return table


GEAR = _gear_table()


@njit(cache=True)
def _cut_points(
    data: np.ndarray, gear: np.ndarray, shift: np.uint64, low: int, high: int, forced: np.ndarray
) -> np.ndarray:
    """End offsets of the chunks of ``data``: at each of ``forced`` (ascending), where the
    hash's top bits (above ``shift``) are zero once a chunk has ``low`` bytes, at ``high``
    bytes at the latest, and at the end. The top bits depend on the last 64 bytes; the low ones
    only on the last few, which in a column of small or sorted integers take too few values to
    ever be zero."""
    n = data.shape[0]
    cuts = np.empty(n // max(low, 1) + forced.shape[0] + 2, dtype=np.int64)
    count = 0
    start = 0
    h = np.uint64(0)
    one = np.uint64(1)
    k = 0
    i = 0
    while i < n:
        while k < forced.shape[0] and forced[k] <= i:
            if forced[k] == i and i > start:
                cuts[count] = i
                count += 1
                start = i
                h = np.uint64(0)
            k += 1
        h = (h << one) + gear[data[i]]
        i += 1
        size = i - start
        if (size >= low and (h >> shift) == 0) or size >= high:
            cuts[count] = i
            count += 1
            start = i
            h = np.uint64(0)
    if start < n or n == 0:
        cuts[count] = n
        count += 1
    return cuts[:count]


def chunk_bounds(
    data: bytes | memoryview, bits: int = 13, forced: list[int] | None = None
) -> list[tuple[int, int]]:
    """``(start, stop)`` of each chunk of ``data``: about ``2**bits`` bytes on average, at least
    a quarter of that (except the last and those before a forced cut), at most eight times
    that and MAX_CHUNK_BYTES, and a cut at each offset of ``forced`` (where the data's own
    structure says a new part begins: an array that grows then changes its own chunks only).
    Empty data is one empty chunk."""
    if not 4 <= bits <= MAX_BITS:
        raise ValueError(f"chunk mask bits {bits} outside 4..{MAX_BITS}")
    view = np.frombuffer(data, dtype=np.uint8)
    average = 1 << bits
    cuts_at = np.asarray(sorted(forced or ()), dtype=np.int64)
    high = min(average * 8, MAX_CHUNK_BYTES)
    cuts = _cut_points(view, GEAR, np.uint64(64 - bits), min(average // 4, high), high, cuts_at)
    starts = [0, *cuts[:-1].tolist()]
    return list(zip(starts, cuts.tolist(), strict=True))
