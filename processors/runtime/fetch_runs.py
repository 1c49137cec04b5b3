"""Fetched records of bulk topics as column runs, not one client object per record.

aiokafka's fetcher turns every fetched record into a ``ConsumerRecord`` in the consumer's
thread, holding the interpreter lock for about a microsecond each; :mod:`faust_bulk` then
copies those objects' fields into lists and ingest joins the values again. At 100,000 records
a second that is a sixth of the worker's interpreter time, taken from the event loop in slices
that delay every agent (docs/benchmarks.md, "bench latency"). For the topics registered here,
the fetcher instead yields one :class:`RecordRun` per stretch of record batches: the columns
read straight from the fetch response by a numba kernel that releases the lock
(:mod:`processors.kernels.kafka_records`), and a view of the response's bytes.

**aiokafka internals this relies on** (all here; ``tests/unit/test_fetch_runs.py`` checks
each, so an upgrade that breaks them fails loudly):

- the module globals ``MemoryRecords`` and ``PartitionRecords`` of ``aiokafka.consumer.fetcher``
  (replaced: the fetcher makes ``MemoryRecords(raw)`` and ``PartitionRecords(...)`` by name);
- ``PartitionRecords``' members ``_tp``, ``_records``, ``_check_crcs``, ``_isolation_level``,
  ``_aborted_producers``, ``_consume_aborted_up_to``, ``_contains_abort_marker``,
  ``next_fetch_offset`` and the generator ``_unpack_records`` (overridden, with the same
  transaction and control-batch rules; batches the kernel cannot read, compressed or of an
  older format, are read by the client's own record objects);
- record batch objects' ``validate_crc``, ``producer_id``, ``is_control_batch``,
  ``is_transactional``, ``base_offset``, ``next_offset``, ``magic``, ``compression_type``,
  ``last_offset_delta``, ``timestamp_type``; the module global ``FetchResult`` (replaced:
  ``getall`` counts a run's records against ``max_records``, with ``FetchResult``'s members
  ``_topic_partition``, ``_partition_records``, ``check_assignment``, ``has_more`` and
  ``_update_position``).

The registry is process-wide (a worker process runs one Faust app); a topic not registered
is fetched exactly as aiokafka fetches it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from typing import Any

import aiokafka.errors as kafka_errors
import numpy as np
from aiokafka.consumer import fetcher as aiokafka_fetcher

from processors.kernels.kafka_records import read_batches
from processors.runtime.record_block import Packed, RecordBlock

_BULK_TOPICS: set[str] = set()
_ORIGINAL_RECORDS = aiokafka_fetcher.MemoryRecords
_ORIGINAL_PARTITION_RECORDS = aiokafka_fetcher.PartitionRecords
_ORIGINAL_FETCH_RESULT = aiokafka_fetcher.FetchResult
#: records in one run at most: a poll's budget (``max_records``) is counted in records, and a
#: run may pass it by this much
RUN_RECORDS = 4_096
_READ_COMMITTED = aiokafka_fetcher.READ_COMMITTED
_BATCH_OVERHEAD = 12  # base offset and length, before the length counts
_LENGTH = struct.Struct(">i")


class RecordRun:
    """Consecutive records of one partition from one fetch response, as columns."""

    __slots__ = ("offsets", "timestamps", "packed", "timestamp_type")

    def __init__(
        self, offsets: np.ndarray, timestamps: np.ndarray, packed: Packed, timestamp_type: int
    ) -> None:
        self.offsets = offsets
        self.timestamps = timestamps
        self.packed = packed
        self.timestamp_type = timestamp_type

    @property
    def offset(self) -> int:
        """The last record's offset (what the consumer's bookkeeping reads of a message)."""
        return int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.offsets)


class KeptRecords:
    """aiokafka's ``MemoryRecords`` that keeps the response's bytes for the kernel."""

    __slots__ = ("inner", "raw")

    def __init__(self, data: Any) -> None:
        self.inner = _ORIGINAL_RECORDS(data)
        self.raw = data

    def has_next(self) -> bool:
        return self.inner.has_next()

    def next_batch(self) -> Any:
        return self.inner.next_batch()

    def size_in_bytes(self) -> int:
        return self.inner.size_in_bytes()


class RunPartitionRecords(_ORIGINAL_PARTITION_RECORDS):  # type: ignore[misc, valid-type]
    """aiokafka's per-partition record iterator, yielding runs for registered topics."""

    _run_from = 0  # the position when the run being collected began

    def _unpack_records(self) -> Iterator[Any]:
        records = self._records
        if not isinstance(records, KeptRecords) or self._tp.topic not in _BULK_TOPICS:
            yield from super()._unpack_records()
            return
        data = np.frombuffer(records.raw, dtype=np.uint8)
        spans: list[tuple[int, int, int]] = []  # (start, end, most records) of readable batches
        timestamp_type = 0
        pos = 0
        while records.has_next():
            batch = records.next_batch()
            start = pos
            pos += _BATCH_OVERHEAD + _LENGTH.unpack_from(records.raw, start + 8)[0]
            if self._check_crcs and not batch.validate_crc():
                raise kafka_errors.CorruptRecordException(f"Invalid CRC - {self._tp}")
            if self._isolation_level == _READ_COMMITTED and batch.producer_id is not None:
                self._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and self._contains_abort_marker(batch):
                    self._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in self._aborted_producers:
                    yield from self._flush(data, spans, timestamp_type)
                    self.next_fetch_offset = batch.next_offset
                    continue
            if batch.is_control_batch:
                yield from self._flush(data, spans, timestamp_type)
                self.next_fetch_offset = batch.next_offset
                continue
            if batch.magic >= 2 and batch.compression_type == 0:
                if not spans:  # records before the position are skipped, as upstream
                    self._run_from = self.next_fetch_offset
                spans.append((start, pos, batch.last_offset_delta + 1))
                timestamp_type = batch.timestamp_type
            else:  # compressed or an older format: the client's own reader
                yield from self._flush(data, spans, timestamp_type)
                yield from self._objects(batch)
            self.next_fetch_offset = batch.next_offset
        yield from self._flush(data, spans, timestamp_type)

    def _flush(
        self, data: np.ndarray, spans: list[tuple[int, int, int]], timestamp_type: int
    ) -> Iterator[RecordRun]:
        """The kernel's run of the readable batches collected so far."""
        if not spans:
            return
        size = sum(most for _, _, most in spans)
        columns = [np.empty(size, np.int64) for _ in range(6)]
        offsets, timestamps, key_pos, key_len, value_pos, value_len = columns
        starts = np.array([s for s, _, _ in spans], np.int64)
        ends = np.array([e for _, e, _ in spans], np.int64)
        spans.clear()
        n = read_batches(data, starts, ends, self._run_from, *columns)
        if n < 0:
            raise kafka_errors.CorruptRecordException(f"Malformed record batch - {self._tp}")
        end = self.next_fetch_offset  # past the spans' last batch
        for a in range(0, n, RUN_RECORDS):
            z = min(a + RUN_RECORDS, n)
            packed = Packed(data, key_pos[a:z], key_len[a:z], value_pos[a:z], value_len[a:z])
            # the position after what is handed out (a poll may stop after any run)
            self.next_fetch_offset = end if z == n else int(offsets[z - 1]) + 1
            yield RecordRun(offsets[a:z], timestamps[a:z], packed, timestamp_type)
        self.next_fetch_offset = end

    def _objects(self, batch: Any) -> Iterator[RecordRun]:
        """A batch the kernel does not read, through the client's record objects."""
        kept = [r for r in batch if r.offset >= self.next_fetch_offset]
        if kept:
            yield run_of(kept, batch.timestamp_type)


class RunFetchResult(_ORIGINAL_FETCH_RESULT):  # type: ignore[misc, valid-type]
    """aiokafka's buffered fetch of one partition, whose ``getall`` counts the records of runs
    against ``max_records`` (a poll's budget), not the runs: the worker's in-flight input stays
    bounded as it was with one object per record (the memory limit's pauses rely on it)."""

    def getall(self, max_records: int | None = None) -> list[Any]:
        if max_records is None:
            return super().getall(max_records)
        tp = self._topic_partition
        if not self.check_assignment(tp) or not self.has_more():
            return []
        out: list[Any] = []
        records = 0
        for item in self._partition_records:
            out.append(item)
            records += len(item) if isinstance(item, RecordRun) else 1
            if records >= max_records:
                self._update_position()
                break
        else:
            self._update_position()
            self._partition_records = None
        return out


def run_of(records: Iterable[Any], timestamp_type: int = 0) -> RecordRun:
    """A run made from record objects (aiokafka's, with offset, timestamp, key and value)."""
    items = list(records)
    parts: list[bytes] = []
    key_pos, key_len, value_pos, value_len = ([0] * len(items) for _ in range(4))
    at = 0
    for i, r in enumerate(items):
        for field, pos, length in ((r.key, key_pos, key_len), (r.value, value_pos, value_len)):
            pos[i] = at
            length[i] = -1 if field is None else len(field)
            if field is not None:
                parts.append(field)
                at += len(field)
    data = np.frombuffer(b"".join(parts), dtype=np.uint8)
    packed = Packed(data, *(np.asarray(c, np.int64) for c in (key_pos, key_len, value_pos,
                                                                 value_len)))  # fmt: skip
    offsets = np.array([r.offset for r in items], np.int64)
    timestamps = np.array([r.timestamp if r.timestamp is not None else -1 for r in items], np.int64)
    return RecordRun(offsets, timestamps, packed, timestamp_type)


def block_of(topic: str, partition: int, runs: list[Any]) -> RecordBlock:
    """One block of a partition's runs (record objects, if any, are made into a run)."""
    if any(not isinstance(r, RecordRun) for r in runs):
        runs = _runs_only(runs)
    if len(runs) == 1:
        run = runs[0]
        return RecordBlock.packed(topic, partition, run.offsets, run.timestamps, run.packed)
    datas = {id(r.packed.data): r.packed.data for r in runs}
    if len(datas) == 1:  # one fetch response: positions stay valid
        data = runs[0].packed.data
        shifts = [0] * len(runs)
    else:
        base: dict[int, int] = {}
        at = 0
        for key, part in datas.items():
            base[key] = at
            at += len(part)
        data = np.concatenate(list(datas.values()))
        shifts = [base[id(r.packed.data)] for r in runs]

    def joined(name: str, shifted: bool) -> np.ndarray:
        pairs = zip(runs, shifts, strict=True)
        return np.concatenate([getattr(r.packed, name) + (s if shifted else 0) for r, s in pairs])

    packed = Packed(data, joined("key_pos", True), joined("key_len", False),
                    joined("value_pos", True), joined("value_len", False))  # fmt: skip
    offsets = np.concatenate([r.offsets for r in runs])
    timestamps = np.concatenate([r.timestamps for r in runs])
    return RecordBlock.packed(topic, partition, offsets, timestamps, packed)


def _runs_only(items: list[Any]) -> list[RecordRun]:
    out: list[RecordRun] = []
    pending: list[Any] = []
    for item in items:
        if isinstance(item, RecordRun):
            if pending:
                out.append(run_of(pending))
                pending = []
            out.append(item)
        else:
            pending.append(item)
    if pending:
        out.append(run_of(pending))
    return out


def install(topics: Iterable[str]) -> None:
    """Fetch ``topics`` as runs from now on, in every aiokafka consumer of this process."""
    _BULK_TOPICS.update(topics)
    aiokafka_fetcher.MemoryRecords = KeptRecords
    aiokafka_fetcher.PartitionRecords = RunPartitionRecords
    aiokafka_fetcher.FetchResult = RunFetchResult
