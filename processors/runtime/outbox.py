"""A unit's outputs of one exactly-once epoch, kept until the epoch is committed.

In exactly-once mode (:mod:`processors.runtime.exactly_once`) nothing an agent writes for a unit
(envelopes, result records, dead letters) is sent while the unit works: it goes into the unit's
:class:`Outbox`. At the commit the outbox is stored with the unit's positions and state, then
sent; after a crash it is read back and sent again, minus what already arrived. So every message
must know its partition before it is sent: keyed records get the partition Kafka's default
partitioner would give them (:func:`processors.kernels.routing.kafka_partitions`).

The stored form is the data-only state format (:mod:`processors.core.state_codec`): anyone able
to write the state topic can change what is sent, never run code. Decoding checks every bound.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from processors.core.batch import VarColumn
from processors.core.state_codec import SnapshotError, decode_state, encode_state, expect
from processors.kernels.routing import kafka_partitions

VERSION = 1

#: (topic, partition, key, value, timestamp ms or None, is a delete)
Message = tuple[str, int, bytes | None, bytes, int | None, bool]


@dataclass
class _Part:
    """Messages queued by one call: values ``data[bounds[i]:bounds[i+1]]`` to ``partitions[i]``."""

    topic: str
    timestamp_ms: int | None
    data: np.ndarray  # uint8
    bounds: np.ndarray  # int64, n + 1
    partitions: np.ndarray  # int32, n
    key_data: np.ndarray | None = None  # uint8
    key_bounds: np.ndarray | None = None  # int64, n + 1
    deletes: np.ndarray | None = None  # bool, n

    def __len__(self) -> int:
        return len(self.partitions)


def _u8(data: bytes) -> np.ndarray:
    return np.frombuffer(data, np.uint8).copy()


class Outbox:
    """The messages of one unit's epoch, in the order they are to be sent."""

    def __init__(self) -> None:
        self.parts: list[_Part] = []
        self.messages = 0

    def __len__(self) -> int:
        return self.messages

    def _add(self, part: _Part) -> None:
        self.parts.append(part)
        self.messages += len(part)

    def add(
        self,
        topic: str,
        value: bytes,
        key: bytes | None,
        partition: int,
        timestamp_ms: int | None,
    ) -> None:
        """One message to ``partition`` (already resolved)."""
        self._add(
            _Part(
                topic,
                timestamp_ms,
                _u8(value),
                np.array([0, len(value)], np.int64),
                np.array([partition], np.int32),
                None if key is None else _u8(key),
                None if key is None else np.array([0, len(key)], np.int64),
            )
        )

    def add_many(
        self,
        topic: str,
        buf: np.ndarray,
        offsets: np.ndarray,
        partitions: np.ndarray,
        keys: VarColumn | None,
        deletes: np.ndarray | None,
    ) -> None:
        """Messages ``buf[offsets[i]:offsets[i+1]]`` to ``partitions[i]`` (arrays are copied)."""
        if len(offsets) < 2:
            return
        self._add(
            _Part(
                topic,
                None,
                np.asarray(buf, np.uint8).copy(),
                np.asarray(offsets, np.int64).copy(),
                np.asarray(partitions, np.int32).copy(),
                None if keys is None else np.asarray(keys.data, np.uint8).copy(),
                None if keys is None else np.asarray(keys.offsets, np.int64).copy(),
                None if deletes is None else np.asarray(deletes, np.bool_).copy(),
            )
        )

    def __iter__(self) -> Iterator[Message]:
        for part in self.parts:
            data = part.data.tobytes()
            bounds = part.bounds.tolist()
            topic, ts = part.topic, part.timestamp_ms
            if part.key_data is not None and part.key_bounds is not None:
                kdata, kb = part.key_data.tobytes(), part.key_bounds.tolist()
                keys = [kdata[kb[i] : kb[i + 1]] for i in range(len(kb) - 1)]
            else:
                keys = [None] * len(part)
            deletes = part.deletes.tolist() if part.deletes is not None else [False] * len(part)
            for i, (q, key, delete) in enumerate(
                zip(part.partitions.tolist(), keys, deletes, strict=True)
            ):
                yield topic, q, key, data[bounds[i] : bounds[i + 1]], ts, delete

    def targets(self) -> set[tuple[str, int]]:
        """Every (topic, partition) a message of this outbox goes to."""
        return {(p.topic, q) for p in self.parts for q in np.unique(p.partitions).tolist()}

    def encode(self) -> bytes:
        parts = []
        for p in self.parts:
            node = {
                "topic": p.topic,
                "timestamp_ms": p.timestamp_ms,
                "data": p.data,
                "bounds": p.bounds,
                "partitions": p.partitions,
            }
            if p.key_data is not None:
                node["key_data"], node["key_bounds"] = p.key_data, p.key_bounds
            if p.deletes is not None:
                node["deletes"] = p.deletes
            parts.append(node)
        return encode_state({"kind": "outbox", "version": VERSION, "parts": parts})

    @classmethod
    def decode(cls, data: bytes) -> Outbox:
        """An outbox read back from the state topic; :class:`SnapshotError` naming what is wrong."""
        box = cls()
        if not data:
            return box
        tree = decode_state(data)
        expect(tree, "outbox", VERSION, "outbox")
        parts = tree.get("parts")
        if not isinstance(parts, list):
            raise SnapshotError("outbox: parts is not a list")
        for i, node in enumerate(parts):
            box._add(_checked_part(node, f"outbox part {i}"))
        return box


def _array(node: dict, name: str, kind: str, where: str) -> np.ndarray:
    value = node.get(name)
    if not isinstance(value, np.ndarray) or value.ndim != 1 or value.dtype.kind != kind[0]:
        raise SnapshotError(f"{where}: {name} is not a 1-d array of {kind}")
    return value


def _check_bounds(bounds: np.ndarray, n: int, size: int, what: str, where: str) -> None:
    if len(bounds) != n + 1 or bounds[0] != 0 or bounds[-1] != size or (np.diff(bounds) < 0).any():
        raise SnapshotError(f"{where}: {what} bounds do not cut {size} bytes into {n} values")


def _checked_part(node: object, where: str) -> _Part:
    if not isinstance(node, dict):
        raise SnapshotError(f"{where}: not a mapping")
    topic, ts = node.get("topic"), node.get("timestamp_ms")
    if not isinstance(topic, str) or not topic:
        raise SnapshotError(f"{where}: topic {topic!r} is not a topic name")
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
        raise SnapshotError(f"{where}: timestamp_ms {ts!r} is not a time")
    data = _array(node, "data", "unsigned", where)
    bounds = _array(node, "bounds", "int", where).astype(np.int64)
    partitions = _array(node, "partitions", "int", where).astype(np.int32)
    n = len(partitions)
    _check_bounds(bounds, n, len(data), "value", where)
    if n and int(partitions.min()) < 0:
        raise SnapshotError(f"{where}: a partition is negative")
    part = _Part(topic, ts, data.astype(np.uint8), bounds, partitions)
    if "key_data" in node:
        part.key_data = _array(node, "key_data", "unsigned", where).astype(np.uint8)
        part.key_bounds = _array(node, "key_bounds", "int", where).astype(np.int64)
        _check_bounds(part.key_bounds, n, len(part.key_data), "key", where)
    if "deletes" in node:
        part.deletes = _array(node, "deletes", "bool", where)
        if len(part.deletes) != n:
            raise SnapshotError(f"{where}: {len(part.deletes)} delete flags for {n} messages")
    return part


def resolve_partitions(
    n: int,
    keys: VarColumn | None,
    partition: int | None,
    count: Callable[[], int],
) -> np.ndarray:
    """Where each of ``n`` messages goes: by key as Kafka would place it (``count()``: the
    topic's partitions), else ``partition`` (0 when none is given)."""
    if keys is not None:
        return kafka_partitions(keys, count())
    return np.full(n, 0 if partition is None or partition < 0 else partition, np.int32)
