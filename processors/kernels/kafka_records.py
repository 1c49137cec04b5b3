"""The records of an uncompressed Kafka record batch (message format v2) as columns.

A fetch response holds each partition's records as raw record batches. The Kafka client turns
every record into a Python object (offset, timestamp, key, value, headers) in its fetch thread,
which holds the interpreter lock for about a microsecond per record; streamon's bulk topics
only need the columns (:mod:`processors.runtime.fetch_runs`). This kernel reads them straight
from the batch's bytes, without the lock: offsets, timestamps, and each key's and value's
position and length in the buffer (-1: null).

Layout (Kafka protocol, "Record Batch"): a 61-byte big-endian header (base offset at 0,
attributes at 21, base timestamp at 27, max timestamp at 35, record count at 57), then each
record: its length, an attributes byte, the timestamp and offset deltas, the key, the value and
the headers, every length and delta a zigzag varint.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: bytes of a v2 record batch header before its records
HEADER_BYTES = 61
MAGIC_AT = 16
ATTRIBUTES_AT = 21
COUNT_AT = 57


@njit(cache=True, nogil=True)
def _varint(buf, pos, end):  # type: ignore[no-untyped-def]
    """The zigzag varint at ``pos`` and the position after it; (0, -1) when cut short."""
    shift = 0
    raw = 0
    while pos < end and shift < 64:
        byte = np.int64(buf[pos])
        pos += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    return 0, -1


@njit(cache=True, nogil=True)
def _int64_be(buf, pos):  # type: ignore[no-untyped-def]
    value = np.int64(0)
    for i in range(8):
        value = (value << 8) | np.int64(buf[pos + i])
    return value


@njit(cache=True, nogil=True)
def read_batch(buf, start, end, min_offset, offsets, timestamps, key_pos, key_len, value_pos,
               value_len):  # type: ignore[no-untyped-def]  # fmt: skip
    """Read the records of the v2 batch in ``buf[start:end]`` whose offset is at least
    ``min_offset`` into the output columns (each at least the batch's record count long).

    Returns how many were written, or -1 when the bytes are not a well-formed uncompressed
    batch (the caller then falls back to the client's own reader, which names the fault).
    Positions are absolute indexes into ``buf``.
    """
    if end - start < HEADER_BYTES or buf[start + MAGIC_AT] != 2:
        return -1
    attributes = (np.int64(buf[start + ATTRIBUTES_AT]) << 8) | np.int64(buf[start + 22])
    if attributes & 0x07:  # compressed
        return -1
    base_offset = _int64_be(buf, start)
    base_ts = _int64_be(buf, start + 27)
    log_append = (attributes & 0x08) != 0
    max_ts = _int64_be(buf, start + 35)
    count = np.int64(0)
    for i in range(4):
        count = (count << 8) | np.int64(buf[start + COUNT_AT + i])
    if count < 0 or count > len(offsets):
        return -1
    pos = start + HEADER_BYTES
    n = 0
    for _ in range(count):
        length, pos = _varint(buf, pos, end)
        if pos < 0 or length < 0 or pos + length > end:
            return -1
        stop = pos + length
        pos += 1  # the record's attributes byte
        ts_delta, pos = _varint(buf, pos, stop)
        if pos < 0:
            return -1
        offset_delta, pos = _varint(buf, pos, stop)
        if pos < 0:
            return -1
        klen, pos = _varint(buf, pos, stop)
        if pos < 0 or klen < -1 or pos + max(klen, 0) > stop:
            return -1
        kpos = pos
        pos += max(klen, 0)
        vlen, pos = _varint(buf, pos, stop)
        if pos < 0 or vlen < -1 or pos + max(vlen, 0) > stop:
            return -1
        offset = base_offset + offset_delta
        if offset >= min_offset:
            offsets[n] = offset
            timestamps[n] = max_ts if log_append else base_ts + ts_delta
            key_pos[n] = kpos
            key_len[n] = klen
            value_pos[n] = pos
            value_len[n] = vlen
            n += 1
        pos = stop  # the headers are not read: bulk topics carry none that streamon uses
    return n


@njit(cache=True, nogil=True)
def gather(bufs_data, starts, lengths, out, out_offsets):  # type: ignore[no-untyped-def]
    """Copy the byte ranges ``starts[i]:starts[i]+lengths[i]`` of ``bufs_data`` one after
    another into ``out`` (a null, length -1, copies nothing), with ``out_offsets[i]`` where
    each begins (``out_offsets`` is one longer)."""
    at = 0
    for i in range(len(starts)):
        out_offsets[i] = at
        n = lengths[i]
        if n > 0:
            s = starts[i]
            out[at : at + n] = bufs_data[s : s + n]
            at += n
    out_offsets[len(starts)] = at


@njit(cache=True, nogil=True)
def read_batches(buf, starts, ends, min_offset, offsets, timestamps, key_pos, key_len,
                 value_pos, value_len):  # type: ignore[no-untyped-def]  # fmt: skip
    """:func:`read_batch` for each span ``starts[i]:ends[i]`` in turn, the columns filled one
    after another; the records written, or -1 if any span is not a well-formed batch."""
    n = 0
    for i in range(len(starts)):
        got = read_batch(buf, starts[i], ends[i], min_offset, offsets[n:], timestamps[n:],
                         key_pos[n:], key_len[n:], value_pos[n:], value_len[n:])  # fmt: skip
        if got < 0:
            return -1
        n += got
    return n
