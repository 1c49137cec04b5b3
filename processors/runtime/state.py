"""Stage state that survives a restart or a partition moving: snapshots on a compacted topic.

A stateful agent (window, MJoin, aggregate) keeps one stage chain per partition. Before the
consumer commits offsets, every partition whose state changed is snapshotted and written to the
query's state topic together with the input positions it reflects (``topic -> next offset``);
the commit happens only after those writes are acknowledged. So the committed offsets never run
ahead of a snapshot. A worker that takes a partition over reads its latest snapshot, loads it
into a freshly built chain, and skips the input records the snapshot already covers: after a
graceful stop the results continue exactly; after a crash, records after the last snapshot are
processed again and their results repeat (at-least-once), none are lost.

Records: ``<agent>/<partition>`` holds a small JSON header (positions, number of chunks, an
epoch); ``<agent>/<partition>/<epoch>/<i>`` the chunks of the snapshot bytes, so that a large
window fits the broker's message size. The topic is compacted: only the latest header and chunks
of each key stay. The bytes are the data-only format of :mod:`processors.core.state_codec`,
never pickle: anyone able to write the topic can change results, but not run code in a worker.
A snapshot that does not decode raises :class:`StateRestoreError` naming the record; the worker
stops on it unless told to start such partitions empty (``streamon worker --reset-state``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from processors.runtime.producer import RecordProducer
from topics.admin import tail_windows

log = logging.getLogger(__name__)

CHUNK_BYTES = 512 * 1024
#: the key suffix of a unit's "outbox sent" note (exactly-once mode)
SENT = "sent"
#: most chunks a header may announce (a 512 MiB snapshot): more is not a header of ours
MAX_CHUNKS = 1024


class StateRestoreError(RuntimeError):
    """A stored snapshot that cannot be restored; names the record and the reason."""

    def __init__(self, topic: str, partition: int, offset: int, key: str, reason: str) -> None:
        super().__init__(
            f"state snapshot {key!r} at {topic}[{partition}]@{offset} cannot be restored: {reason}"
        )
        self.topic, self.partition, self.offset, self.key = topic, partition, offset, key
        self.reason = reason


@dataclass(frozen=True)
class StoredSnapshot:
    """A snapshot read back: the input positions it reflects and the stage chain's bytes;
    ``where`` names its header record for error messages. In exactly-once mode it is a unit's
    commit record: ``outbox`` holds the epoch's outputs (:mod:`processors.runtime.outbox`)."""

    positions: dict[str, int]
    data: bytes
    where: tuple[str, int, int, str]  # topic, partition, offset, key
    epoch: int = 0
    outbox: bytes = b""
    #: the outbox is known to have been sent whole (no need to look at the partitions' tails)
    sent: bool = False

    def error(self, reason: str) -> StateRestoreError:
        return StateRestoreError(*self.where, reason)


def _header_key(agent: str, partition: int) -> str:
    return f"{agent}/{partition}"


class StateSnapshots:
    """Writes and reads stage snapshots on one state topic."""

    def __init__(self, bootstrap: str, topic: str, producer: RecordProducer) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.producer = producer
        self.saved = 0
        self.saved_bytes = 0
        self.loaded = 0
        #: chunk keys of the latest record of each header key this process wrote or read: once
        #: a newer header is written they are deleted (tombstones, for a compacted topic)
        self._live: dict[str, list[str]] = {}
        self._fetched: dict[str, tuple[Any, dict[str, bytes]]] = {}

    def save(
        self,
        agent: str,
        partition: int,
        positions: dict[str, int],
        data: bytes,
        outbox: bytes = b"",
        epoch: int | None = None,
    ) -> int:
        """Queue one snapshot (flush the producer to make it durable); returns its size.

        The header goes after its chunks: with one producer, a header in the log means its
        chunks are there too. ``outbox`` (exactly-once mode) is stored the same way."""
        epoch = time.time_ns() if epoch is None else epoch
        base = _header_key(agent, partition)
        keys = self._chunks(base, f"{base}/{epoch}/", data) + self._chunks(
            base, f"{base}/{epoch}/o", outbox
        )
        n_data = max(-(-len(data) // CHUNK_BYTES), 1)
        header = {"positions": positions, "chunks": n_data, "epoch": epoch}
        if outbox:
            header["outbox"] = len(keys) - n_data
        self.producer.produce(self.topic, json.dumps(header).encode(), key=base.encode())
        for old in self._live.get(base, []):
            self.producer.produce(self.topic, None, key=old.encode())  # type: ignore[arg-type]
        self._live[base] = keys
        self.saved += 1
        self.saved_bytes += len(data) + len(outbox)
        return len(data)

    def _chunks(self, base: str, prefix: str, data: bytes) -> list[str]:
        """Queue ``data`` in chunks keyed ``prefix<i>`` (one empty chunk if none); their keys."""
        if not data and prefix.endswith("/o"):
            return []
        keys = []
        for i in range(max(-(-len(data) // CHUNK_BYTES), 1)):
            key = f"{prefix}{i}"
            self.producer.produce(
                self.topic, data[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES], key=key.encode()
            )
            keys.append(key)
        return keys

    def prefetch(self, keys: Iterable[tuple[str, int]]) -> None:
        """Read the latest records of several (agent, partition)s in one pass over the topic
        (a rebalance restores many at once); :meth:`load` then serves them from memory."""
        self._fetched = self._scan({_header_key(a, p) for a, p in keys})

    def note_sent(self, agent: str, partition: int, epoch: int) -> None:
        """Queue a note that ``epoch``'s outbox was sent whole and acknowledged."""
        key = f"{_header_key(agent, partition)}/{SENT}"
        self.producer.produce(self.topic, str(epoch).encode(), key=key.encode())

    def _scan(self, bases: set[str]) -> dict[str, tuple[Any, dict[str, bytes]]]:
        """(latest header record, the chunks it names and the latest "sent" note) of each of
        ``bases`` found. The topic is read backwards from its end and the reading stops once
        every base has its header and chunks: units that commit often are found in the last
        few seconds of the topic, however long it has grown."""
        found: dict[str, tuple[Any, dict[str, bytes]]] = {}
        missing: dict[str, set[str]] = {}
        sent: dict[str, bytes] = {}
        for window in tail_windows(self.bootstrap, self.topic, 0):
            for record in reversed(window):
                try:
                    key = (record.key or b"").decode()
                except UnicodeDecodeError:
                    continue  # not a key of ours: it names no agent
                if key in bases:
                    if key not in found:
                        found[key] = (record, {})
                        missing[key] = _chunk_keys(key, record.value)
                    continue
                if key.endswith("/" + SENT):
                    base = key[: -len(SENT) - 1]
                    if base in bases and base not in sent and record.value is not None:
                        sent[base] = record.value
                    continue
                base = key.rsplit("/", 2)[0]
                if base in found and key in missing[base] and record.value is not None:
                    found[base][1][key] = record.value
                    missing[base].discard(key)
            if len(found) == len(bases) and not any(missing.values()):
                break
        for base, value in sent.items():
            if base in found:
                found[base][1][f"{base}/{SENT}"] = value
        return found

    def load(self, agent: str, partition: int) -> StoredSnapshot | None:
        """The latest snapshot of ``agent``'s ``partition``, or None if it has none.
        :class:`StateRestoreError` if its header or chunks are not what this worker writes."""
        base = _header_key(agent, partition)
        entry = self._fetched.pop(base, None) or self._scan({base}).get(base)
        if entry is None:
            return None
        header, chunks = entry
        where = (self.topic, header.partition, header.offset, base)
        positions, n, epoch, n_out = _parse_header(header.value, StoredSnapshot({}, b"", where))
        keys = [f"{base}/{epoch}/{i}" for i in range(n)]
        out_keys = [f"{base}/{epoch}/o{i}" for i in range(n_out)]
        sent = chunks.get(f"{base}/{SENT}") == str(epoch).encode()
        parts = [chunks.get(k) for k in keys + out_keys]
        missing = [k for k, p in zip(keys + out_keys, parts, strict=True) if p is None]
        if missing:
            raise StateRestoreError(*where, f"chunks {missing} (epoch {epoch}) are missing")
        self.loaded += 1
        self._live[base] = keys + out_keys
        data = b"".join(p or b"" for p in parts[:n])
        outbox = b"".join(p or b"" for p in parts[n:])
        return StoredSnapshot(positions, data, where, epoch, outbox, sent)


def _parse_header(value: bytes | None, at: StoredSnapshot) -> tuple[dict[str, int], int, int, int]:
    """(positions, chunks, epoch, outbox chunks) of a header record, checked field by field."""
    try:
        header: Any = json.loads(value or b"")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise at.error(f"header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise at.error("header is not a JSON object")
    positions, n, epoch = header.get("positions"), header.get("chunks"), header.get("epoch")
    if not isinstance(positions, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in positions.items()
    ):
        raise at.error(f"header positions {positions!r} are not topic -> offset")
    if not isinstance(n, int) or not 1 <= n <= MAX_CHUNKS:
        raise at.error(f"header announces {n!r} chunks (1..{MAX_CHUNKS})")
    if not isinstance(epoch, int):
        raise at.error(f"header epoch {epoch!r} is not an integer")
    n_out = header.get("outbox", 0)
    if not isinstance(n_out, int) or not 0 <= n_out <= MAX_CHUNKS:
        raise at.error(f"header announces {n_out!r} outbox chunks (0..{MAX_CHUNKS})")
    return positions, n, epoch, n_out


def _chunk_keys(base: str, value: bytes | None) -> set[str]:
    """The chunk keys a header names, read loosely (the full check comes when it is loaded;
    a header that does not read names none)."""
    try:
        header = json.loads(value or b"")
        epoch, n, n_out = header["epoch"], int(header["chunks"]), int(header.get("outbox", 0))
    except (ValueError, TypeError, KeyError, AttributeError):
        return set()
    if not 0 <= n <= MAX_CHUNKS or not 0 <= n_out <= MAX_CHUNKS:
        return set()
    return {f"{base}/{epoch}/{i}" for i in range(n)} | {
        f"{base}/{epoch}/o{i}" for i in range(n_out)
    }
