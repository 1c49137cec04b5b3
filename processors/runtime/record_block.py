"""A run of records fetched from one partition, handed to an agent as one event.

A block holds its keys and values either as lists of bytes (made from the client's record
objects, or by hand in tests) or *packed*: positions and lengths in the fetch response's own
buffer, as :mod:`processors.runtime.fetch_runs` reads them without a Python object per record.
Ingest decodes packed values straight from that buffer (:meth:`RecordBlock.packed_values`);
the lists are made only when something asks for them (an envelope topic's few large records,
a dead letter's value).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from processors.kernels.kafka_records import gather


class Packed:
    """Keys and values as (position, length) in ``data``; a length of -1 is a null."""

    __slots__ = ("data", "key_pos", "key_len", "value_pos", "value_len")

    def __init__(
        self,
        data: np.ndarray,
        key_pos: np.ndarray,
        key_len: np.ndarray,
        value_pos: np.ndarray,
        value_len: np.ndarray,
    ) -> None:
        self.data = data
        self.key_pos = key_pos
        self.key_len = key_len
        self.value_pos = value_pos
        self.value_len = value_len

    def take(self, index: slice | np.ndarray) -> Packed:
        return Packed(self.data, self.key_pos[index], self.key_len[index],
                      self.value_pos[index], self.value_len[index])  # fmt: skip

    def items(self, pos: np.ndarray, length: np.ndarray) -> list[bytes | None]:
        data = self.data
        return [None if n < 0 else bytes(data[p : p + n])
                for p, n in zip(pos.tolist(), length.tolist(), strict=True)]  # fmt: skip


class RecordBlock:
    """A run of records fetched from one partition (offsets ascending)."""

    __slots__ = ("topic", "partition", "offsets", "timestamps", "_keys", "_values", "_packed")

    def __init__(
        self,
        topic: str,
        partition: int,
        offsets: list[int],
        timestamps: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.offsets = offsets
        self.timestamps = timestamps
        self._keys: list[bytes | None] | None = keys
        self._values: list[bytes | None] | None = values
        self._packed: Packed | None = None

    @classmethod
    def packed(
        cls, topic: str, partition: int, offsets: np.ndarray, timestamps: np.ndarray, packed: Packed
    ) -> RecordBlock:
        """A block over a fetch buffer's columns (:mod:`processors.runtime.fetch_runs`)."""
        block = cls(topic, partition, offsets.tolist(), timestamps.tolist(), [], [])
        block._keys = block._values = None
        block._packed = packed
        return block

    @property
    def keys(self) -> list[bytes | None]:
        if self._keys is None:
            assert self._packed is not None
            self._keys = self._packed.items(self._packed.key_pos, self._packed.key_len)
        return self._keys

    @property
    def values(self) -> list[bytes | None]:
        if self._values is None:
            assert self._packed is not None
            self._values = self._packed.items(self._packed.value_pos, self._packed.value_len)
        return self._values

    def __len__(self) -> int:
        return len(self.offsets)

    def has_keys(self) -> bool:
        """Whether any record has a key (without making the keys' list of a packed block)."""
        if self._keys is None and self._packed is not None:
            return bool((self._packed.key_len >= 0).any())
        return any(k is not None for k in self.keys)

    def serialized_size(self) -> int:
        """Bytes of the values (Faust's message size)."""
        if self._values is None and self._packed is not None:
            return int(np.maximum(self._packed.value_len, 0).sum())
        return sum(len(v) for v in self.values if v is not None)

    def _slice(self, start: int, stop: int) -> RecordBlock:
        if self._packed is not None:
            block = RecordBlock.packed(
                self.topic, self.partition, np.asarray(self.offsets[start:stop], np.int64),
                np.asarray(self.timestamps[start:stop], np.int64),
                self._packed.take(slice(start, stop)),
            )  # fmt: skip
            return block
        return RecordBlock(self.topic, self.partition, self.offsets[start:stop],
                           self.timestamps[start:stop], self.keys[start:stop],
                           self.values[start:stop])  # fmt: skip

    def select(self, keep: np.ndarray) -> RecordBlock:
        """The records where the boolean mask ``keep`` is true."""
        index = np.flatnonzero(keep)
        offsets = np.asarray(self.offsets, np.int64)[index]
        timestamps = np.asarray(self.timestamps, np.int64)[index]
        if self._packed is not None:
            return RecordBlock.packed(self.topic, self.partition, offsets, timestamps,
                                      self._packed.take(index))  # fmt: skip
        picked = index.tolist()
        return RecordBlock(self.topic, self.partition, offsets.tolist(), timestamps.tolist(),
                           [self.keys[i] for i in picked],
                           [self.values[i] for i in picked])  # fmt: skip

    def from_offset(self, offset: int) -> RecordBlock:
        """The records at ``offset`` and after (the block itself if all are)."""
        if not self.offsets or self.offsets[0] >= offset:
            return self
        return self._slice(bisect.bisect_left(self.offsets, offset), len(self.offsets))

    def split(self, max_records: int) -> list[RecordBlock]:
        """Consecutive runs of at most ``max_records`` records (the block itself if it fits)."""
        n = len(self.offsets)
        if n <= max_records:
            return [self]
        return [self._slice(i, min(i + max_records, n)) for i in range(0, n, max_records)]

    def record(self, i: int) -> RecordBlock:
        """Record ``i`` as a block of its own."""
        return self._slice(i, i + 1)

    def arrival_ms(self, start: int = 0, stop: int | None = None) -> int | None:
        """The earliest Kafka timestamp of records ``start:stop`` (None if none is known)."""
        known = [t for t in self.timestamps[start:stop] if t is not None and t > 0]
        return min(known) if known else None

    def packed_values(self) -> tuple[np.ndarray, np.ndarray]:
        """All values concatenated (None as empty) and their int64 offsets, for bulk decoding."""
        if self._values is None and self._packed is not None:
            p = self._packed
            out = np.empty(int(np.maximum(p.value_len, 0).sum()), np.uint8)
            offsets = np.empty(len(p.value_len) + 1, np.int64)
            gather(p.data, p.value_pos, p.value_len, out, offsets)
            return out, offsets
        return pack(self.values)


def pack(values: Sequence[bytes | None]) -> tuple[np.ndarray, np.ndarray]:
    """``values`` concatenated (None as empty) and their int64 offsets."""
    items = [v or b"" for v in values]
    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return np.frombuffer(b"".join(items), dtype=np.uint8), offsets
