"""Stage state that survives a restart or a partition moving: incremental snapshots on a
compacted topic.

A stateful agent (window, MJoin, aggregate) keeps one stage chain per partition. Before the
consumer commits offsets, every partition whose state changed is snapshotted and written to the
query's state topic together with the input positions it reflects (``topic -> next offset``);
the commit happens only after those writes are acknowledged. So the committed offsets never run
ahead of a snapshot. A worker that takes a partition over reads its latest snapshot, loads it
into a freshly built chain, and skips the input records the snapshot already covers.

**Incremental.** A snapshot's bytes are cut into content-defined chunks
(:mod:`processors.kernels.chunking`), each stored under a key made of its writer and the hash of
its content, ``<agent>/<partition>/c/<writer>.<hash>``. A save writes only the chunks the unit's
previous snapshot did not have, then the header ``<agent>/<partition>`` (positions, epoch, the
chunk names in order), then tombstones for the chunks no longer named. A window that grows or
expires at its ends changes a few chunks per array, so the topic receives about what changed,
not the whole state at every commit; compaction keeps one record per live chunk. A writer never
reuses another writer's chunks: after a restore, the first save writes the state once under its
own name and deletes the old owner's chunks, so that an old owner still writing (a "zombie" after
a session timeout) can only ever delete chunks of its own.

The bytes are the data-only format of :mod:`processors.core.state_codec`, never pickle: anyone
able to write the topic can change results, but not run code in a worker. A snapshot that does
not decode raises :class:`StateRestoreError` naming the record; the worker stops on it unless
told to start such partitions empty (``streamon worker --reset-state``). Headers of the previous
format (chunks ``<agent>/<partition>/<epoch>/<i>``) are still read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from processors.core.state_codec import part_starts
from processors.kernels.chunking import chunk_bounds
from processors.runtime.kafka_security import KafkaSecurity
from processors.runtime.producer import RecordProducer
from processors.runtime.state_scan import (
    MAX_CHUNKS,
    SENT,
    Found,
    StateRestoreError,
    chunk_key,
    header_key,
    parse_header,
    scan_latest,
)

log = logging.getLogger(__name__)

#: outboxes (exactly-once mode) are cut into records of this size, keyed by their epoch
OUTBOX_CHUNK_BYTES = 512 * 1024
#: the chunking mask's bits: chunks of about 10 KiB (more bits for a state of over 32 MiB, so that
#: a header names at most MAX_CHUNKS: a chunk has at least a quarter of ``2**bits`` bytes)
CHUNK_BITS = 13
#: a snapshot in pieces (a join's chains, :meth:`StateSnapshots.save`) has up to this many big
#: ones, so each piece gets this share of the header's chunks
PIECE_SHARE = 4

__all__ = ["StateRestoreError", "StateSnapshots", "StoredSnapshot", "SENT"]


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


@dataclass
class _Live:
    """What a unit's latest header names: its chunks' and its outbox's record keys."""

    chunks: set[str]
    outbox_keys: list[str]


class StateSnapshots:
    """Writes and reads stage snapshots on one state topic."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        producer: RecordProducer,
        security: KafkaSecurity | None = None,
    ) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.producer = producer
        self.security = security
        #: this process's name in chunk keys: chunks of other writers are never reused
        self.writer = secrets.token_hex(4)
        self.saved = 0
        #: bytes produced to the state topic (new chunks, headers, outboxes)
        self.saved_bytes = 0
        #: size of each unit's latest snapshot
        self.state_bytes: dict[str, int] = {}
        self.loaded = 0
        self._live: dict[str, _Live] = {}
        #: what a prefetch read, by unit (None: the unit has no snapshot)
        self._fetched: dict[str, Found | None] = {}
        #: the latest restore pass: units, found, records and bytes read, seconds, done
        self.restore: dict[str, Any] = {}

    def save(
        self,
        agent: str,
        partition: int,
        positions: dict[str, int],
        data: bytes | Iterable[bytes],
        outbox: bytes = b"",
        epoch: int | None = None,
    ) -> int:
        """Queue one snapshot (flush the producer to make it durable); returns the bytes it
        queued. ``data`` may come in pieces (a chain's ``snapshot_parts()``): each is chunked
        as it comes and dropped before the next is made, and a restore reads their
        concatenation. Its new chunks go first and the header after them: with one producer,
        a header in the log means its chunks are there too."""
        epoch = time.time_ns() if epoch is None else epoch
        base = header_key(agent, partition)
        before = self._live.get(base) or _Live(set(), [])
        names: list[str] = []
        written = size = 0
        queued: set[str] = set()
        whole = isinstance(data, bytes | bytearray)
        for piece in [data] if whole else data:
            budget = MAX_CHUNKS if whole else MAX_CHUNKS // PIECE_SHARE
            written += self._chunks(base, piece, before.chunks, names, queued, budget)
            size += len(piece)
        out_keys = self._outbox(base, epoch, outbox)
        header: dict = {"v": 2, "positions": positions, "epoch": epoch, "chunks": names}
        if out_keys:
            header["outbox"] = len(out_keys)
        raw = json.dumps(header, separators=(",", ":")).encode()
        self.producer.produce(self.topic, raw, key=base.encode())
        kept = {chunk_key(base, name) for name in names}
        for old in sorted(before.chunks - kept):
            self.producer.produce(self.topic, None, key=old.encode())  # type: ignore[arg-type]
        for old in before.outbox_keys:
            self.producer.produce(self.topic, None, key=old.encode())  # type: ignore[arg-type]
        self._live[base] = _Live(kept, out_keys)
        self.saved += 1
        queued = written + len(raw) + len(outbox)
        self.saved_bytes += queued
        self.state_bytes[base] = size
        return queued

    def _chunks(
        self,
        base: str,
        data: bytes,
        live: set[str],
        names: list[str],
        queued: set[str],
        budget: int,
    ) -> int:
        """Append the names of ``data``'s chunks (about ``budget // 4`` at most) to ``names``
        in order, queueing those whose keys neither ``live`` nor ``queued`` has; the bytes
        queued."""
        view = memoryview(data)
        bits = CHUNK_BITS
        while len(data) >> bits > budget // 4:
            bits += 1
        written = 0
        for start, stop in chunk_bounds(view, bits, part_starts(view)):
            if start == stop:  # no bytes (a stateless unit's record): no chunk to depend on
                continue
            piece = view[start:stop]
            name = f"{self.writer}.{hashlib.blake2b(piece, digest_size=12).hexdigest()}"
            names.append(name)
            key = chunk_key(base, name)
            if key not in live and key not in queued:
                self.producer.produce(self.topic, bytes(piece), key=key.encode())
                queued.add(key)
                written += stop - start
        return written

    def _outbox(self, base: str, epoch: int, outbox: bytes) -> list[str]:
        keys = []
        for i in range(-(-len(outbox) // OUTBOX_CHUNK_BYTES)):
            key = f"{base}/{epoch}/o{i}"
            piece = bytes(outbox[i * OUTBOX_CHUNK_BYTES : (i + 1) * OUTBOX_CHUNK_BYTES])
            self.producer.produce(self.topic, piece, key=key.encode())
            keys.append(key)
        return keys

    def scan(self, keys: Iterable[tuple[str, int]]) -> dict[str, Found | None]:
        """Read the latest records of several (agent, partition)s in one pass over the topic
        (a rebalance restores many at once), for :meth:`adopt`. Blocks: the restorer runs it
        in a thread (:mod:`processors.runtime.restore`); it touches nothing but ``restore``,
        the pass's progress, whose keys are all there from the start (the status page copies
        it from the event loop meanwhile)."""
        bases = {header_key(a, p) for a, p in keys}
        if not bases:
            return {}
        progress = dict.fromkeys(("units", "found", "records", "bytes"), 0)
        progress.update(units=len(bases), seconds=0.0, done=False)
        self.restore = progress
        found = scan_latest(self.bootstrap, self.topic, bases, self.security, progress)
        return {base: found.get(base) for base in bases}

    def adopt(self, found: dict[str, Found | None]) -> None:
        """Serve :meth:`load` from a :meth:`scan`'s records (each once); :meth:`discard` drops
        those no unit took."""
        self._fetched.update(found)

    def discard(self, bases: Iterable[str]) -> None:
        for base in bases:
            self._fetched.pop(base, None)

    def prefetch(self, keys: Iterable[tuple[str, int]]) -> None:
        """:meth:`scan` and :meth:`adopt` in one blocking call, marking the pass done."""
        self.adopt(self.scan(keys))
        self.restore["done"] = True

    def stats(self) -> dict[str, Any]:
        """For the status page: snapshots written and their bytes, the state's size, the
        latest restore pass."""
        return {
            "saved": self.saved,
            "saved_mb": round(self.saved_bytes / 2**20, 1),
            "state_mb": round(sum(self.state_bytes.values()) / 2**20, 1),
            "restored": self.loaded,
            "restore": dict(self.restore),
        }

    def note_sent(self, agent: str, partition: int, epoch: int) -> None:
        """Queue a note that ``epoch``'s outbox was sent whole and acknowledged."""
        key = f"{header_key(agent, partition)}/{SENT}"
        self.producer.produce(self.topic, str(epoch).encode(), key=key.encode())

    def load(self, agent: str, partition: int) -> StoredSnapshot | None:
        """The latest snapshot of ``agent``'s ``partition``, or None if it has none.
        :class:`StateRestoreError` if its header or chunks are not what this worker writes.

        A header whose chunks the read did not find is read again, once, before that is an
        error: a fetch that skipped a record that is there (seen with the development broker,
        DESIGN.md "Broker used here" quirk 4) must not stop a worker with its state intact."""
        base = header_key(agent, partition)
        found = self._fetched.pop(base) if base in self._fetched else self._read(base)
        try:
            return self._restored(base, found)
        except _Missing as first:
            log.warning("%s; reading the state topic again", first.error)
        try:
            stored = self._restored(base, self._read(base))
        except _Missing as again:
            raise again.error from None
        log.warning("%s: the second read found every record: the first read skipped some",
                    base)  # fmt: skip
        return stored

    def _read(self, base: str) -> Found | None:
        return scan_latest(self.bootstrap, self.topic, {base}, self.security).get(base)

    def _restored(self, base: str, found: Found | None) -> StoredSnapshot | None:
        """The snapshot ``found`` holds, checked; :class:`_Missing` if records it names were
        not found."""
        if found is None:
            self._live.pop(base, None)  # nothing stored: no chunk of ours can be relied on
            return None
        where = (self.topic, found.header.partition, found.header.offset, base)
        parsed = parse_header(found.header.value, base, StateRestoreError(*where, ""))
        keys = parsed.chunk_keys
        out_keys = [f"{base}/{parsed.epoch}/o{i}" for i in range(parsed.outbox)]
        parts = [found.pieces.get(k) for k in keys + out_keys]
        missing = [k for k, p in zip(keys + out_keys, parts, strict=True) if p is None]
        if missing:
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            shown = ", ".join(missing[:3]) + more
            deleted = sum(k in found.pieces for k in missing)
            reason = (
                f"chunks {shown} (epoch {parsed.epoch}) are missing ({deleted} deleted after "
                f"it, {len(missing) - deleted} not in the topic)"
            )
            raise _Missing(StateRestoreError(*where, reason))
        self.loaded += 1
        self._live[base] = _Live(set(keys), out_keys)
        data = b"".join(p or b"" for p in parts[: len(keys)])
        outbox = b"".join(p or b"" for p in parts[len(keys) :])
        sent = found.sent == str(parsed.epoch).encode()
        return StoredSnapshot(parsed.positions, data, where, parsed.epoch, outbox, sent)


class _Missing(Exception):
    """Records a header names were not found (read again before it is an error)."""

    def __init__(self, error: StateRestoreError) -> None:
        super().__init__(str(error))
        self.error = error
