"""Topic admin helpers: idempotent creation, true end offsets, group offsets and lag, exact reads.

End offsets come from the high watermark that brokers report with FETCH responses, never from
ListOffsets alone: tansu 0.6.0 answers ListOffsets "latest" with the start of the last record
batch + 1, which undercounts whenever a batch holds several records. Fetch-based watermarks are
exact on Apache Kafka too, so nothing here depends on which broker is on the other end.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from processors.runtime.kafka_security import KafkaSecurity, client_config
from topics.specs import TopicSpec

__all__ = [
    "TopicError",
    "TopicRecord",
    "committed_offsets",
    "consumer_lag",
    "ensure_topics",
    "high_watermarks",
    "read_topic",
]

_KAFKA_LOG = logging.getLogger("streamon.kafka")


class TopicError(RuntimeError):
    """A topic is missing, unfit for its spec, or could not be read or created."""


@dataclass(frozen=True)
class TopicRecord:
    """One record as stored in Kafka."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _remaining(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.0)


def _admin(bootstrap: str, security: KafkaSecurity | None = None) -> AdminClient:
    """``security``: TLS/SASL settings (default: the process's, see kafka_security)."""
    return AdminClient(
        client_config({"bootstrap.servers": bootstrap, "logger": _KAFKA_LOG}, security)
    )


@contextlib.contextmanager
def _consumer(
    bootstrap: str,
    security: KafkaSecurity | None = None,
    extra: Mapping[str, str] | None = None,
) -> Iterator[Consumer]:
    """An assign-only consumer: a throwaway group id (the client needs one), never commits.
    ``extra``: librdkafka settings on top (a Spark read's ``kafka.*`` options)."""
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": f"streamon-admin-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        # An empty partition answers only when the broker's long poll expires: keep it short.
        "fetch.wait.max.ms": 50,
        "logger": _KAFKA_LOG,
    }
    consumer = Consumer({**client_config(base, security), **(extra or {})})
    try:
        yield consumer
    finally:
        consumer.close()


#: an assign-only consumer that never commits, for tools that read positions themselves
assign_consumer = _consumer


def _metadata(admin: AdminClient, deadline: float, bootstrap: str) -> ClusterMetadata:
    try:
        return admin.list_topics(timeout=max(_remaining(deadline), 0.1))
    except KafkaException as exc:
        raise TopicError(
            f"broker at {bootstrap} did not answer a metadata request "
            f"(is STREAMON_BOOTSTRAP right?): {exc}"
        ) from exc


def _partitions(client: AdminClient | Consumer, topic: str, timeout: float) -> list[int]:
    try:
        meta = client.list_topics(topic, timeout=timeout).topics.get(topic)
    except KafkaException as exc:
        raise TopicError(f"broker did not answer metadata for topic {topic}: {exc}") from exc
    if meta is None or meta.error is not None or not meta.partitions:
        raise TopicError(f"topic {topic} does not exist")
    return sorted(meta.partitions)


def _ready_counts(meta: ClusterMetadata, names: Iterable[str]) -> dict[str, int]:
    """Partition counts of the named topics that exist; -1 while some partition has no leader."""
    counts = {}
    for name in names:
        topic = meta.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            continue
        leaderless = any(p.leader < 0 for p in topic.partitions.values())
        counts[name] = -1 if leaderless else len(topic.partitions)
    return counts


def _check_partitions(wanted: dict[str, TopicSpec], counts: dict[str, int]) -> None:
    for name, count in counts.items():
        if 0 <= count < wanted[name].partitions:
            raise TopicError(
                f"topic {name} exists with {count} partitions but its spec needs "
                f"{wanted[name].partitions}; add partitions or use a new topic"
            )


def ensure_topics(
    bootstrap: str,
    specs: Iterable[TopicSpec],
    timeout: float = 30.0,
    *,
    security: KafkaSecurity | None = None,
) -> list[str]:
    """Create the missing topics and wait until all are usable; returns the names created here.

    Idempotent. An existing topic with more partitions than its spec is accepted; one with fewer
    raises TopicError, because running with fewer would silently change how work spreads.
    """
    wanted: dict[str, TopicSpec] = {}
    for spec in specs:
        if wanted.setdefault(spec.name, spec) != spec:
            raise ValueError(f"two different specs for topic {spec.name}")
    if not wanted:
        return []
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap, security)
    existing = _ready_counts(_metadata(admin, deadline, bootstrap), wanted)
    _check_partitions(wanted, existing)
    missing = [spec for name, spec in wanted.items() if name not in existing]
    created: list[str] = []
    if missing:
        new = [NewTopic(s.name, s.partitions, config=s.kafka_config()) for s in missing]
        wait = max(_remaining(deadline), 1.0)
        futures = admin.create_topics(new, operation_timeout=wait, request_timeout=wait)
        for name, future in futures.items():
            try:
                future.result()
                created.append(name)
            except KafkaException as exc:
                err = exc.args[0]
                if err.code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a concurrent creator won
                    raise TopicError(f"cannot create topic {name}: {err.str()}") from exc
    while True:
        counts = _ready_counts(_metadata(admin, deadline, bootstrap), wanted)
        _check_partitions(wanted, counts)
        waiting = sorted(n for n in wanted if counts.get(n, -1) < wanted[n].partitions)
        if not waiting:
            return [name for name in wanted if name in created]
        if time.monotonic() >= deadline:
            raise TopicError(f"topics not ready in metadata after {timeout}s: {waiting}")
        time.sleep(0.05)


def partition_counts(
    bootstrap: str,
    topics: Iterable[str],
    timeout: float = 30.0,
    *,
    security: KafkaSecurity | None = None,
) -> dict[str, int]:
    """How many partitions each existing topic of ``topics`` has (missing ones left out)."""
    deadline = time.monotonic() + timeout
    admin = _admin(bootstrap, security)
    return {n: c for n, c in _ready_counts(_metadata(admin, deadline, bootstrap), topics).items()
            if c > 0}  # fmt: skip


def _watermarks(
    bootstrap: str, topic: str, timeout: float, extra: Mapping[str, str] | None = None
) -> dict[int, tuple[int, int]]:
    """(log start, true end offset) per partition, the end taken from a FETCH response."""
    deadline = time.monotonic() + timeout
    with _consumer(bootstrap, extra=extra) as consumer:
        listed: dict[int, tuple[int, int]] = {}
        for part in _partitions(consumer, topic, timeout):
            tp = TopicPartition(topic, part)
            try:
                listed[part] = consumer.get_watermark_offsets(tp, timeout=_remaining(deadline))
            except KafkaException as exc:
                raise TopicError(f"ListOffsets failed for {topic}[{part}]: {exc}") from exc
        # Start at/just below the ListOffsets end: at most the last batch is fetched, and every
        # fetch response carries the partition's real high watermark.
        consumer.assign(
            [TopicPartition(topic, p, max(low, high - 1)) for p, (low, high) in listed.items()]
        )
        pending = set(listed)
        while pending:
            for msg in consumer.consume(num_messages=10_000, timeout=0.1):
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    raise TopicError(f"fetch failed for {topic}[{msg.partition()}]: {err.str()}")
                pending.discard(msg.partition())
            if pending and time.monotonic() >= deadline:
                raise TopicError(f"no fetch answer for {topic} partitions {sorted(pending)}")
        marks = {}
        for part, (low, _listed_high) in listed.items():
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, part), cached=True)
            if high < 0:
                raise TopicError(f"no high watermark cached for {topic}[{part}]")
            marks[part] = (low, high)
        return marks


def high_watermarks(
    bootstrap: str, topic: str, timeout: float = 10.0, extra: Mapping[str, str] | None = None
) -> dict[int, int]:
    """True end offset (offset of the next record) per partition; ``extra``: librdkafka
    settings on top of the process's security settings (a Spark read's ``kafka.*`` options)."""
    marks = _watermarks(bootstrap, topic, timeout, extra)
    return {part: high for part, (_low, high) in marks.items()}


def committed_offsets(
    bootstrap: str, group: str, topic: str, timeout: float = 10.0
) -> dict[int, int]:
    """Offsets ``group`` committed on ``topic``, by partition.

    Partitions without a committed offset (the broker's -1) are absent rather than 0, so callers
    can tell "never committed" from "committed offset 0".
    """
    admin = _admin(bootstrap)
    parts = _partitions(admin, topic, timeout)
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in parts])
    try:
        answer = admin.list_consumer_group_offsets([request], request_timeout=timeout)[group]
        result = answer.result()
    except KafkaException as exc:
        raise TopicError(f"cannot fetch offsets of group {group} on {topic}: {exc}") from exc
    offsets = {}
    for tp in result.topic_partitions:
        if tp.error is not None:
            raise TopicError(f"group {group} offset of {topic}[{tp.partition}]: {tp.error}")
        if tp.offset >= 0:
            offsets[tp.partition] = tp.offset
    return offsets


def consumer_lag(bootstrap: str, group: str, topic: str, timeout: float = 10.0) -> dict[int, int]:
    """Records ``group`` has yet to consume, by partition: true end offset - committed offset.

    A partition the group never committed counts from the log start (what a group with
    auto.offset.reset=earliest would read). Not clamped at 0: a negative lag shows a broker bug.
    """
    # Committed offsets first, so that the end offsets read afterwards are never older.
    committed = committed_offsets(bootstrap, group, topic, timeout)
    marks = _watermarks(bootstrap, topic, timeout)
    return {part: high - committed.get(part, low) for part, (low, high) in marks.items()}


def _record(msg: Message) -> TopicRecord:
    headers = tuple((str(k), v) for k, v in (msg.headers() or ()))
    return TopicRecord(
        partition=msg.partition(),
        offset=msg.offset(),
        key=msg.key(),
        value=msg.value(),
        timestamp_ms=msg.timestamp()[1],
        headers=headers,
    )


def read_topic(bootstrap: str, topic: str, timeout: float = 30.0) -> list[TopicRecord]:
    """Every record from the log start to the end offsets captured at call time, by partition.

    Exact (no group, no commits), for tests and tools; records produced after the call are left out.
    """
    records: dict[int, list[TopicRecord]] = {}
    for record in iter_topic(bootstrap, topic, timeout):
        records.setdefault(record.partition, []).append(record)
    return [record for part in sorted(records) for record in records[part]]


def iter_topic(
    bootstrap: str, topic: str, timeout: float = 30.0, partitions: Collection[int] | None = None
) -> Iterator[TopicRecord]:
    """What :func:`read_topic` returns, one record at a time (partitions interleaved, each in
    order): a large topic is never held in memory whole. ``partitions``: only those."""
    deadline = time.monotonic() + timeout
    marks = _watermarks(bootstrap, topic, timeout)
    todo = {
        part: mark for part, mark in marks.items()
        if mark[1] > mark[0] and (partitions is None or part in partitions)
    }  # fmt: skip
    got = dict.fromkeys(todo, 0)
    with _consumer(bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, p, low) for p, (low, _high) in todo.items()])
        pending = set(todo)
        while pending:
            for msg in consumer.consume(num_messages=10_000, timeout=0.1):
                part, offset, err = msg.partition(), msg.offset(), msg.error()
                if part not in pending:
                    continue
                high = todo[part][1]
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise TopicError(f"fetch failed for {topic}[{part}]: {err.str()}")
                    if offset >= high:  # control records or compaction gaps end the partition
                        pending.discard(part)
                    continue
                if offset < high:
                    got[part] += 1
                    yield _record(msg)
                if offset >= high - 1:
                    pending.discard(part)
            if pending and time.monotonic() >= deadline:
                read = {p: got[p] for p in sorted(pending)}
                ends = {p: todo[p] for p in sorted(pending)}
                raise TopicError(
                    f"read_topic({topic}) timed out after {timeout}s: read {read} records of "
                    f"partitions still pending, (start, end) offsets {ends}"
                )


def sample_partition(
    bootstrap: str, topic: str, partition: int, chunk: int, stride: int, timeout: float = 300.0
) -> Iterator[TopicRecord]:
    """Every ``stride``-th run of ``chunk`` records of a partition (offsets ``[k * stride, k *
    stride + chunk)``), in offset order: a sample spread over a partition too large to read."""
    if not 0 < chunk <= stride:
        raise ValueError(f"sample_partition: need 0 < chunk <= stride, got {chunk}, {stride}")
    deadline = time.monotonic() + timeout
    high = high_watermarks(bootstrap, topic, timeout).get(partition, 0)
    with _consumer(bootstrap) as reader:
        for start in range(0, high, stride):
            stop = min(start + chunk, high)
            yield from _read_range(reader, topic, partition, start, stop, deadline)[0]


def tail_windows(
    bootstrap: str,
    topic: str,
    partition: int,
    security: KafkaSecurity | None = None,
    first: int = 2_048,
    timeout: float = 60.0,
) -> Iterator[list[TopicRecord]]:
    """A partition read backwards: windows of records (each in offset order), the newest first,
    each window ``8x`` the size of the one before, down to the log start. For readers that want
    the latest records of something and stop as soon as they have them."""
    deadline = time.monotonic() + timeout
    with _consumer(bootstrap, security) as reader:
        tp = TopicPartition(topic, partition)
        try:
            low, high = reader.get_watermark_offsets(tp, timeout=timeout)
        except KafkaException as exc:
            raise TopicError(f"no offsets for {topic}[{partition}]: {exc}") from exc
        # ListOffsets may answer short of the end (tansu): the fetch's end-of-partition is true
        end = _read_range(reader, topic, partition, max(low, high - 1), None, deadline)[1]
        stop, size = end, first
        while stop > low:
            start = max(low, stop - size)
            yield _read_range(reader, topic, partition, start, stop, deadline)[0]
            stop, size = start, size * 8


def _read_range(
    reader: Consumer, topic: str, partition: int, start: int, stop: int | None, deadline: float
) -> tuple[list[TopicRecord], int]:
    """Records of ``[start, stop)`` (``stop`` None: to the end) and the offset reading ended at."""
    reader.assign([TopicPartition(topic, partition, start)])
    records: list[TopicRecord] = []
    position = start
    while stop is None or position < stop:
        if time.monotonic() > deadline:
            raise TopicError(f"reading {topic}[{partition}] timed out at offset {position}")
        for msg in reader.consume(num_messages=10_000, timeout=0.2):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    raise TopicError(f"fetch failed for {topic}[{partition}]: {err.str()}")
                return records, msg.offset()
            position = msg.offset() + 1
            if stop is not None and msg.offset() >= stop:
                return records, position
            records.append(_record(msg))
    return records, position
